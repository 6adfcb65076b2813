"""JEM on images: conv-energy SGLD sampling and one JEM training step, ebms vs TorchEBM, ebmkit and hand loops.

Workload (identical for every implementation, CPU, float32, the *same weights* copied into each
library's model; the peers run a plain-PyTorch copy of the network built in this file, so none of
them benefits from an ebms method):

(a) SGLD on a conv energy ``ConvEnergy(1, 28, channels=(16, 32, 64), groups=8)`` (SiLU, GroupNorm,
    residual), B = 64 and 128 chains, 20 steps of ``x' = clip(x - a grad E(x) + s xi, -1, 1)`` with
    a = 1, s = 0.01 (JEM's setting): ebms ``SGLD(1.0, 0.01, space=Box((1, 28, 28), -1, 1))``;
    TorchEBM ``LangevinDynamics(step_size=a, noise_scale=s / sqrt(2 a), clamp=(-1, 1))`` (its noise
    is ``noise_scale * sqrt(2 step_size) xi``); ebmkit ``LangevinDynamics(step_size=a, noise_scale=s,
    clamp=(-1, 1))``; a hand-written autograd loop. Chains start at the same uniform x0.
(b) One JEM training step, B = 64 labelled images: draw B chains from a replay buffer (capacity
    10 000, 5 % restarts), k = 20 SGLD steps on E(x) = -logsumexp f(x), write back, cross-entropy +
    E(x+) mean - E(x-) mean, backward, Adam step, on ``ConvClassifier(1, 28, 10, channels=(16, 32,
    64), groups=8)``: ebms ``JEMObjective`` on ``JEM``; ebmkit ``JEMLoss`` (its
    ``ContrastiveDivergence``, ``LangevinDynamics`` and ``ReplayBuffer``); TorchEBM has no JEM class,
    so the row composes its persistent ``ContrastiveDivergence`` machinery (start points from its
    buffer, its sampler, its buffer update) with cross-entropy, scoring data and negatives in one
    forward pass over ``2B`` rows (faster than calling its loss, which runs separate forwards);
    a hand-written loop does the same with plain autograd.

Before timing (a), every implementation runs a few steps from the same seed and the final chains are
compared with ebms's; the largest difference is printed. The peers draw the same N(0, I) stream
(ebmkit from the global RNG, seeded identically), so the chains agree to float32 round-off, except
that round-off differences can be amplified by the large gradient step and the clipping.
(b) is not compared element by element: the libraries' buffers differ by design (ebmkit draws slots
with replacement and restarts from its init; TorchEBM draws stratified slots, jitters 5 % of them and
writes back FIFO; ebms draws distinct slots and writes them back in place).

Differences that cannot be removed (also printed):
    * ebms evaluates energy+gradient k + 1 times per chain run (``init`` caches the start point),
      the peers k times; ebms checks every proposal for NaN/Inf (its contract);
    * ebmkit's ``JEMLoss`` runs the classifier on the data twice (its documented cost) and its
      metrics read five scalars from the tensors (host syncs).

Run: ``python benchmarks/jem.py [--quick] [--threads N] [--no-peers] [--batches 64 128]``.
"""

from __future__ import annotations

import argparse
import copy
import importlib.util
import math
from collections.abc import Callable
from typing import Any

import _common as C
import _speed_record as SR
import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ebms.models.jem import JEM
from ebms.nets import ConvEnergy
from ebms.nets.classifier import ConvClassifier
from ebms.objectives.buffer import ReplayBuffer
from ebms.objectives.jem import JEMObjective
from ebms.samplers import SGLD
from ebms.spaces import Box

CHANNELS, GROUPS, SIZE, K_CLASSES = (16, 32, 64), 8, 28, 10
ALPHA, SIGMA, STEPS = 1.0, 0.01, 20
SGLD_BATCHES = (64, 128)
JEM_BATCH, CAPACITY, REINIT, LR = 64, 10_000, 0.05, 1e-4
TARGET = 1.5  # required ebms speedup over the fastest peer (issue 13)
CHECK_STEPS = 3
PEERS = ("torchebm", "ebmkit")
PEER_MODULES = {"torchebm": "torchebm", "ebmkit": "ebm"}


def missing_peers() -> list[str]:
    out = []
    for name, module in PEER_MODULES.items():
        try:
            found = importlib.util.find_spec(module) is not None
        except (ImportError, ValueError):
            found = False
        if not found:
            out.append(name)
    return out


# --- the plain-PyTorch copy of the network the peers and hand loops run ------------------------
class _PlainBlock(nn.Module):
    def __init__(self, c_in: int, c_out: int, stride: int) -> None:
        super().__init__()
        self.norm1 = nn.GroupNorm(GROUPS, c_in)
        self.conv1 = nn.Conv2d(c_in, c_out, 3, stride=stride, padding=1)
        self.norm2 = nn.GroupNorm(GROUPS, c_out)
        self.conv2 = nn.Conv2d(c_out, c_out, 3, padding=1)
        self.skip = nn.Conv2d(c_in, c_out, 1, stride=stride) if (c_in != c_out or stride != 1) else None

    def forward(self, u: Tensor) -> Tensor:
        h = self.conv2(F.silu(self.norm2(self.conv1(F.silu(self.norm1(u))))))
        return (u if self.skip is None else self.skip(u)) + h


class PlainTrunk(nn.Module):
    """Stem conv, pre-activation residual stages, GroupNorm, SiLU, mean pool (ebms's key names)."""

    def __init__(self) -> None:
        super().__init__()
        self.stem = nn.Conv2d(1, CHANNELS[0], 3, padding=1)
        blocks, c_prev = [], CHANNELS[0]
        for k, c in enumerate(CHANNELS):
            blocks.append(_PlainBlock(c_prev, c, 1 if k == 0 else 2))
            c_prev = c
        self.stages = nn.Sequential(*blocks)
        self.norm = nn.GroupNorm(GROUPS, c_prev)

    def forward(self, x: Tensor) -> Tensor:
        return F.silu(self.norm(self.stages(self.stem(x)))).mean(dim=(2, 3))


class PlainEnergy(nn.Module):
    """``ConvEnergy``'s function in plain PyTorch: ``(B, 1, 28, 28) -> (B,)``."""

    def __init__(self, src: ConvEnergy) -> None:
        super().__init__()
        t = PlainTrunk()
        self.stem, self.stages, self.norm = t.stem, t.stages, t.norm
        self.head = nn.Linear(CHANNELS[-1], 1)
        self.load_state_dict(src.state_dict())

    def forward(self, x: Tensor) -> Tensor:
        h = F.silu(self.norm(self.stages(self.stem(x)))).mean(dim=(2, 3))
        return self.head(h).squeeze(-1)


class PlainClassifier(nn.Module):
    """``ConvClassifier``'s function in plain PyTorch: ``(B, 1, 28, 28) -> (B, K)`` logits."""

    def __init__(self, src: nn.Module) -> None:
        super().__init__()
        self.trunk = PlainTrunk()
        self.head = nn.Linear(CHANNELS[-1], K_CLASSES)
        self.load_state_dict(src.state_dict())

    def forward(self, x: Tensor) -> Tensor:
        return self.head(self.trunk(x))


def _uniform(shape: tuple[int, ...], g: torch.Generator | None = None) -> Tensor:
    return torch.rand(shape, generator=g) * 2 - 1


# --- (a) SGLD: each factory returns run(steps, seed) -> final chains ------------------------------
Run = Callable[[int, int], Tensor]


def sgld_ebms(net: ConvEnergy, x0: Tensor) -> Run:
    sampler = SGLD(ALPHA, SIGMA, space=Box((1, SIZE, SIZE), -1.0, 1.0))

    def run(steps: int, seed: int) -> Tensor:
        return sampler.sample(net, x0, steps, generator=torch.Generator().manual_seed(seed))

    return run


def sgld_hand(net: ConvEnergy, x0: Tensor) -> Run:
    plain = PlainEnergy(net)

    def run(steps: int, seed: int) -> Tensor:
        g = torch.Generator().manual_seed(seed)
        x = x0
        for _ in range(steps):
            x = x.detach().requires_grad_(True)
            (grad,) = torch.autograd.grad(plain(x).sum(), x)
            x = (x.detach() - ALPHA * grad + SIGMA * torch.randn(x.shape, generator=g)).clamp_(-1.0, 1.0)
        return x

    return run


def sgld_torchebm(net: ConvEnergy, x0: Tensor) -> Run:
    from torchebm.core import BaseModel
    from torchebm.samplers import LangevinDynamics

    class Model(BaseModel):
        def __init__(self) -> None:
            super().__init__()
            self.net = PlainEnergy(net)

        def forward(self, x: Tensor) -> Tensor:
            return self.net(x)

    sampler = LangevinDynamics(Model(), step_size=ALPHA, noise_scale=SIGMA / math.sqrt(2 * ALPHA), clamp=(-1.0, 1.0))

    def run(steps: int, seed: int) -> Tensor:
        return sampler.sample(x=x0, n_steps=steps, generator=torch.Generator().manual_seed(seed))

    return run


def sgld_ebmkit(net: ConvEnergy, x0: Tensor) -> Run:
    from ebm.samplers.langevin import LangevinDynamics

    model = PlainEnergy(net)
    sampler = LangevinDynamics(step_size=ALPHA, steps=STEPS, noise_scale=SIGMA, clamp=(-1.0, 1.0))

    def run(steps: int, seed: int) -> Tensor:
        torch.manual_seed(seed)  # ebmkit draws its noise from the global RNG
        return sampler.sample(model, x0, steps=steps)

    return run


# --- (b) one JEM training step: each factory returns step() ------------------------------------
def _adam(m: nn.Module) -> torch.optim.Optimizer:
    return torch.optim.Adam(m.parameters(), lr=LR)


def jem_ebms(clf: nn.Module, x: Tensor, y: Tensor) -> Callable[[], object]:
    model = JEM(copy.deepcopy(clf), K_CLASSES)
    box = Box((1, SIZE, SIZE), -1.0, 1.0)
    objective = JEMObjective(SGLD(ALPHA, SIGMA, space=box), ReplayBuffer(CAPACITY, box, reinit_prob=REINIT), k=STEPS)
    opt, g = _adam(model), torch.Generator().manual_seed(11)

    def step() -> object:
        opt.zero_grad(set_to_none=True)
        out = objective(model, (x, y), generator=g)
        out.loss.backward()
        opt.step()
        return out.metrics

    return step


def jem_hand(clf: nn.Module, x: Tensor, y: Tensor) -> Callable[[], object]:
    net = PlainClassifier(clf)
    buf = _uniform((CAPACITY, 1, SIZE, SIZE), torch.Generator().manual_seed(12))
    opt, g = _adam(net), torch.Generator().manual_seed(11)
    B = x.shape[0]

    def step() -> object:
        idx = torch.randperm(CAPACITY, generator=g)[:B]
        x0 = buf[idx]
        fresh = torch.rand(B, generator=g) < REINIT
        x0 = torch.where(fresh[:, None, None, None], _uniform(x0.shape, g), x0)
        xs = x0
        for _ in range(STEPS):
            xs = xs.detach().requires_grad_(True)
            e = -torch.logsumexp(net(xs), dim=-1)
            (grad,) = torch.autograd.grad(e.sum(), xs)
            xs = (xs.detach() - ALPHA * grad + SIGMA * torch.randn(xs.shape, generator=g)).clamp_(-1.0, 1.0)
        neg = xs.detach()
        buf[idx] = neg
        opt.zero_grad(set_to_none=True)
        logits = net(torch.cat([x, neg]))
        e = -torch.logsumexp(logits, dim=-1)
        loss = F.cross_entropy(logits[:B], y) + e[:B].mean() - e[B:].mean()
        loss.backward()
        opt.step()
        return float(loss.detach())

    return step


def jem_ebmkit(clf: nn.Module, x: Tensor, y: Tensor) -> Callable[[], object]:
    from ebm.buffer import ReplayBuffer as KitBuffer
    from ebm.jem import ClassifierEnergy, JEMLoss
    from ebm.losses.cd import ContrastiveDivergence as KitCD
    from ebm.samplers.langevin import LangevinDynamics

    energy = ClassifierEnergy(PlainClassifier(clf))
    sampler = LangevinDynamics(step_size=ALPHA, steps=STEPS, noise_scale=SIGMA, clamp=(-1.0, 1.0))
    buffer = KitBuffer(CAPACITY, (1, SIZE, SIZE), reinit_prob=REINIT, init_fn=_uniform)
    loss_fn = JEMLoss(KitCD(sampler, buffer=buffer))
    opt = _adam(energy)

    def step() -> object:
        opt.zero_grad(set_to_none=True)
        out = loss_fn(energy, x, y)
        out.loss.backward()
        opt.step()
        return out.metrics

    return step


def jem_torchebm(clf: nn.Module, x: Tensor, y: Tensor) -> Callable[[], object]:
    from torchebm.core import BaseModel
    from torchebm.losses import ContrastiveDivergence as EbmCD
    from torchebm.samplers import LangevinDynamics

    class Marginal(BaseModel):
        def __init__(self) -> None:
            super().__init__()
            self.net = PlainClassifier(clf)

        def forward(self, x: Tensor) -> Tensor:
            return -torch.logsumexp(self.net(x), dim=-1)

    model = Marginal()
    sampler = LangevinDynamics(model, step_size=ALPHA, noise_scale=SIGMA / math.sqrt(2 * ALPHA), clamp=(-1.0, 1.0))
    cd = EbmCD(model, sampler, k_steps=STEPS, persistent=True, buffer_size=CAPACITY, new_sample_ratio=REINIT,
               init_steps=0, energy_reg_weight=0.0)
    opt, g = _adam(model), torch.Generator().manual_seed(11)
    B = x.shape[0]

    def step() -> object:
        start = cd.get_start_points(x, generator=g)
        neg = sampler.sample(x=start, n_steps=STEPS, generator=g)
        cd.update_buffer(neg)
        opt.zero_grad(set_to_none=True)
        logits = model.net(torch.cat([x, neg.detach()]))
        e = -torch.logsumexp(logits, dim=-1)
        loss = F.cross_entropy(logits[:B], y) + e[:B].mean() - e[B:].mean()
        loss.backward()
        opt.step()
        return float(loss.detach())

    return step


# --- driver ------------------------------------------------------------------------------------
def _build(factories: dict[str, Callable[..., Any]], args: tuple[Any, ...], skipped: dict[str, str],
           tag: str) -> dict[str, Any]:
    out = {}
    for name, make in factories.items():
        if name in skipped:
            continue
        try:
            out[name] = make(*args)
        except ImportError as exc:  # installed but broken: one line, never a crash
            skipped[name] = f"cannot be imported ({exc})"
            C.note(f"[jem] skipping {name} in {tag}: {skipped[name]}")
    return out


def _summarise(times: dict[str, list[float]], cpu: dict[str, list[float]], work: float) -> dict[str, Any]:
    med = {n: C.median(t) for n, t in times.items()}
    cpu_med = {n: C.median(t) for n, t in cpu.items()}
    ours = med["ebms"]
    peers = {n: t for n, t in med.items() if not n.startswith("ebms")}
    libs = {n: t for n, t in peers.items() if n in PEERS}
    rows = {
        n: {"median_s": t, "all_s": times[n], "cpu_median_s": cpu_med[n], "per_s": work / t,
            "speedup_of_ebms": C.speedup(t, ours), "cpu_speedup_of_ebms": C.speedup(cpu_med[n], cpu_med["ebms"])}
        for n, t in med.items()
    }
    return {"rows": rows, **C.fastest_peers(peers, libs, ours)}


def bench_sgld(batch: int, args: argparse.Namespace, skipped: dict[str, str]) -> dict[str, Any]:
    torch.manual_seed(0)
    net = ConvEnergy(1, SIZE, channels=CHANNELS, groups=GROUPS)
    x0 = _uniform((batch, 1, SIZE, SIZE), torch.Generator().manual_seed(1))
    with torch.no_grad():
        same = float((PlainEnergy(net)(x0) - net(x0)).abs().max())
    assert same < 1e-4, f"the plain copy computes another function (max |dE| = {same})"
    factories: dict[str, Callable[..., Run]] = {
        "ebms": sgld_ebms, "torchebm": sgld_torchebm, "ebmkit": sgld_ebmkit, "hand-autograd": sgld_hand,
    }
    runs = _build(factories, (net, x0), skipped, f"sgld B={batch}")
    ref = runs["ebms"](CHECK_STEPS, 123)
    check = {n: float((r(CHECK_STEPS, 123) - ref).abs().max()) for n, r in runs.items()}
    timed = {n: (lambda r=r: r(STEPS, 7)) for n, r in runs.items()}
    repeats = args.repeats or (2 if args.quick else 7)
    times, cpu = C.time_alternating(timed, repeats=repeats, warmup=1)
    res = _summarise(times, cpu, STEPS)
    for n, row in res["rows"].items():
        row["max_abs_diff_vs_ebms_after_check"] = check[n]
        row["energy_grad_evals"] = STEPS + 1 if n.startswith("ebms") else STEPS
    return {"batch": batch, "repeats": repeats, **res}


def bench_jem(args: argparse.Namespace, skipped: dict[str, str]) -> dict[str, Any]:
    torch.manual_seed(0)
    clf = ConvClassifier(1, SIZE, K_CLASSES, channels=CHANNELS, groups=GROUPS)
    g = torch.Generator().manual_seed(2)
    x = _uniform((JEM_BATCH, 1, SIZE, SIZE), g)
    y = torch.randint(0, K_CLASSES, (JEM_BATCH,), generator=g)
    with torch.no_grad():
        same = float((PlainClassifier(clf)(x) - clf(x)).abs().max())
    assert same < 1e-4, f"the plain classifier copy computes another function (max |df| = {same})"
    factories = {"ebms": jem_ebms, "torchebm": jem_torchebm, "ebmkit": jem_ebmkit, "hand-autograd": jem_hand}
    steps = _build(factories, (clf, x, y), skipped, "jem step")
    repeats = args.repeats or (2 if args.quick else 7)
    times, cpu = C.time_alternating(steps, repeats=repeats, warmup=1)
    return {"batch": JEM_BATCH, "repeats": repeats, **_summarise(times, cpu, 1.0)}


def _flags(p: argparse.ArgumentParser) -> None:
    p.add_argument("--no-peers", action="store_true", help="time ebms against the hand-written loops only")
    p.add_argument("--batches", type=int, nargs="+", default=list(SGLD_BATCHES), help="SGLD chain counts")


def _r(v: float | None) -> float | None:
    return None if v is None else round(v, 3)


def main() -> None:
    args = C.parse_args(__doc__.splitlines()[0], _flags)
    rec = SR.start("jem_speed", args)
    info = C.machine_info(PEERS)
    skipped: dict[str, str] = {}
    missing = list(PEERS) if args.no_peers else missing_peers()
    for name in missing:
        skipped[name] = "--no-peers" if args.no_peers else "not installed (pip install -e .[bench])"
    if missing and not args.no_peers:
        C.note(f"[jem] {', '.join(missing)} not installed: timing ebms against the hand-written loops only; "
               "pip install -e .[bench] to compare with them")
    sgld = [bench_sgld(b, args, skipped) for b in args.batches]
    jem = bench_jem(args, skipped)

    print(f"(a) SGLD on ConvEnergy(1, 28, channels={CHANNELS}, groups={GROUPS}), {STEPS} steps, a={ALPHA}, "
          f"s={SIGMA}, clip [-1, 1], float32, {info['threads']} thread(s)")
    print("ebms speedup = their median wall time / ebms median wall time (> 1: ebms faster); "
          "cpu columns: the same from process CPU time (cross-check on a busy machine)")
    header = ["B", "impl", "median s", "steps/s", "ebms speedup", "evals", "check diff", "cpu s", "cpu speedup"]
    table = []
    for res in sgld:
        for n, r in res["rows"].items():
            table.append([res["batch"], n, r["median_s"], r["per_s"], r["speedup_of_ebms"], r["energy_grad_evals"],
                          f"{r['max_abs_diff_vs_ebms_after_check']:.1e}", r["cpu_median_s"], r["cpu_speedup_of_ebms"]])
    print(C.format_table(header, table))
    print(f"\n(b) one JEM training step (k={STEPS} SGLD from a replay buffer + CE + PCD + backward + Adam), "
          f"ConvClassifier(1, 28, {K_CLASSES}, channels={CHANNELS}), B={JEM_BATCH}")
    header = ["impl", "median s", "steps/s", "ebms speedup", "cpu s", "cpu speedup"]
    print(C.format_table(header, [[n, r["median_s"], r["per_s"], r["speedup_of_ebms"], r["cpu_median_s"],
                                   r["cpu_speedup_of_ebms"]] for n, r in jem["rows"].items()]))
    for label, res in [*((f"SGLD B={r['batch']}", r) for r in sgld), ("JEM step", jem)]:
        got = res["speedup_vs_fastest_peer"]
        verdict = "meets" if got is not None and got >= TARGET else "MISSES"
        print(f"{label}: ebms speedup vs fastest peer ({res['fastest_peer']}) "
              f"{'n/a' if got is None else f'{got:.3f}x'} [target >= {TARGET}x: {verdict}]")
    if skipped:
        print("skipped: " + "; ".join(f"{n} ({why})" for n, why in sorted(skipped.items())))
    print("Not removable: ebms evaluates energy+gradient k+1 times per chain run (cached start) vs k and checks "
          "every proposal for NaN/Inf; ebmkit's JEMLoss runs the classifier twice on the data and uses the "
          "global RNG.")

    record = {"bench": "jem", "quick": args.quick, "machine": info, "skipped": skipped,
              "workload": {"channels": list(CHANNELS), "groups": GROUPS, "steps": STEPS, "alpha": ALPHA,
                           "sigma": SIGMA, "sgld_batches": list(args.batches), "jem_batch": JEM_BATCH,
                           "capacity": CAPACITY, "reinit": REINIT, "lr": LR},
              "sgld": sgld, "jem_step": jem}
    path = C.save_results("jem", record, enabled=not args.no_save)
    SR.finish(rec, args, record, notes=(
        'Medians of the timed repeats (wall s), alternating in one process. speedup_of_ebms = their median / ebms median (> 1: ebms faster). Shared 2-core machine: the ratios are the robust figures.'))
    if path is not None:
        C.note(f"[jem] wrote {path}")
    summary: dict[str, Any] = {"bench": "jem", "quick": args.quick, "threads": info["threads"],
                               "ratio": "their_time / ebms_time", "target": TARGET}
    for res in sgld:
        b = res["batch"]
        summary[f"sgld_b{b}_ratio_vs_best_peer"] = _r(res["speedup_vs_fastest_peer"])
        summary[f"sgld_b{b}_best_peer"] = res["fastest_peer"]
        summary[f"sgld_b{b}_ratio_vs_best_library"] = _r(res["speedup_vs_fastest_peer_library"])
        summary[f"sgld_b{b}_ebms_steps_per_s"] = round(res["rows"]["ebms"]["per_s"], 2)
    summary["jem_step_ratio_vs_best_peer"] = _r(jem["speedup_vs_fastest_peer"])
    summary["jem_step_best_peer"] = jem["fastest_peer"]
    summary["jem_step_ratio_vs_best_library"] = _r(jem["speedup_vs_fastest_peer_library"])
    summary["jem_step_ebms_s"] = round(jem["rows"]["ebms"]["median_s"], 3)
    C.emit_final_line(summary)


if __name__ == "__main__":
    main()
