"""Mixed precision and compilation: bfloat16 and ``torch.compile`` rows beside the peers on Langevin, score matching
and the JEM workloads, with the numerics of each variant against float32.

Workloads (the same as ``langevin.py``, ``score_matching.py`` and ``jem.py``, with fewer steps per timed call so
that an emulated bfloat16 row stays affordable; the ratios are what the page quotes):
    langevin   MLP D -> 128 -> 128 -> 1 (SiLU), B = 1024, ULA eps = 0.01, LANGEVIN_STEPS steps, D = 2 and 784;
    dsm        denoising score matching (sigma 0.1, unweighted), the same MLP, D = 784, B = 256, DSM_STEPS Adam steps;
    sgld       the conv energy of jem.py (channels 16/32/64), B = 64, SGLD_STEPS steps;
    jem-step   one JEM training step of jem.py (classifier + SGLD from a replay buffer, 20 SGLD steps).

Rows: the peers of each workload (TorchEBM, ebmkit, a hand-written autograd loop), ``ebms`` (float32, the library
as it ships), ``ebms+compile`` (``ebms.energy.compiled`` for samplers, ``nn.Module.compile`` for a training step, as
``Trainer(compile=True)`` does), ``ebms+bf16`` (``precision="bf16"``: the samplers' option, the Trainer's autocast)
and ``ebms+bf16+compile``. Score matching is differentiated twice, which ``torch.compile`` cannot do: no compile
row there (``Trainer(compile=True)`` refuses it).

Numerics (each variant against float32, on the workload's own start): energies as ``max |dE| / max |E|`` and input
gradients as ``||dg|| / ||g||``; for dsm the parameters' gradient of the first step, ``||dg|| / ||g||`` (the
loss itself is dominated by ``||eps / sigma||^2`` and does not show the difference).

The record keeps the CPU's instruction-set flags (``avx512_bf16``, ``amx_bf16``, ...): without bfloat16
instructions PyTorch emulates bfloat16 products and the bf16 rows are many times slower than float32.

Run: ``python benchmarks/precision.py [--quick] [--threads N]``. Peers come with the ``bench`` extra; a missing peer
is one line, not a crash.
"""

from __future__ import annotations

import contextlib
import copy
from collections.abc import Callable
from pathlib import Path
from typing import Any

import _common as C
import _speed_record as SR
import jem as J
import langevin as L
import score_matching as S
import torch
from torch import Tensor

from ebms.energy import compiled, mixed_precision
from ebms.models.jem import JEM
from ebms.nets import MLPEnergy
from ebms.objectives import DenoisingScoreMatching
from ebms.objectives.buffer import ReplayBuffer
from ebms.objectives.jem import JEMObjective
from ebms.samplers import SGLD, ULA
from ebms.spaces import Box

LANGEVIN_STEPS, DSM_STEPS, SGLD_STEPS = 50, 5, 20
FLAGS = ("avx2", "avx512f", "avx512_bf16", "amx_bf16", "amx_tile")
PEERS = ("torchebm", "ebmkit")


def cpu_flags() -> dict[str, bool]:
    """The bfloat16-relevant instruction-set flags of ``/proc/cpuinfo`` (all ``False`` where it is absent)."""
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return dict.fromkeys(FLAGS, False)
    flags = next((line.split(":", 1)[1].split() for line in text.splitlines() if line.startswith("flags")), [])
    return {f: f in flags for f in FLAGS}


def _rel(a: Tensor, b: Tensor) -> float:
    return float((a - b).abs().max() / b.abs().max().clamp_min(1e-30))


def _rel_norm(a: Tensor, b: Tensor) -> float:
    return float((a - b).norm() / b.norm().clamp_min(1e-30))


def _numerics(energy: Any, variants: dict[str, Any], x: Tensor) -> dict[str, dict[str, float]]:
    """Each variant's energies and input gradients at ``x`` against ``energy``'s (float32)."""
    from ebms.energy import energy_and_grad

    e0, g0 = energy_and_grad(energy, x)
    out = {}
    for name, v in variants.items():
        e, g = energy_and_grad(v, x)
        out[name] = {"energy_rel_max": _rel(e, e0), "grad_rel_norm": _rel_norm(g, g0)}
    return out


def _time(runs: dict[str, Callable[[], object]], repeats: int) -> dict[str, Any]:
    times, cpu = C.time_alternating(runs, repeats=repeats, warmup=1)
    med = {n: C.median(t) for n, t in times.items()}
    cpu_med = {n: C.median(t) for n, t in cpu.items()}
    peers = {n: t for n, t in med.items() if not n.startswith("ebms")}
    libs = {n: t for n, t in peers.items() if n in PEERS}
    best = min(peers, key=peers.__getitem__) if peers else None
    rows = {n: {"median_s": t, "cpu_median_s": cpu_med[n], "speedup_of_ebms": C.speedup(t, med["ebms"]),
                "speed_vs_ebms_fp32": C.speedup(med["ebms"], t), "cpu_speed_vs_ebms_fp32": C.speedup(cpu_med["ebms"], cpu_med[n]),
                "speedup_vs_fastest_peer": C.speedup(peers[best], t) if best else None} for n, t in med.items()}
    return {"rows": rows, "fastest_peer": best, **{k: v for k, v in C.fastest_peers(peers, libs, med["ebms"]).items()
                                                   if k != "fastest_peer"}}


def _peer_rows(factories: dict[str, Callable[..., Any]], args: tuple[Any, ...], missing: list[str]) -> dict[str, Any]:
    out = {}
    for name, make in factories.items():
        if name in missing:
            continue
        try:
            out[name] = make(*args)
        except ImportError as exc:
            C.note(f"[precision] skipping {name}: cannot be imported ({exc})")
    return out


def bench_langevin(d: int, repeats: int, missing: list[str]) -> dict[str, Any]:
    torch.manual_seed(0)
    mlp = MLPEnergy(d, (L.HIDDEN, L.HIDDEN), activation="silu")
    x0 = torch.randn(L.BATCH, d, generator=torch.Generator().manual_seed(1))
    variants = {"ebms+compile": compiled(mlp, dynamic=False), "ebms+bf16": mixed_precision(mlp),
                "ebms+bf16+compile": compiled(mixed_precision(mlp), dynamic=False)}
    sampler = ULA(step_size=L.EPS)

    def ours(energy: Any) -> Callable[[int, int], Tensor]:
        return lambda steps, seed: sampler.sample(energy, x0, steps, generator=torch.Generator().manual_seed(seed))

    runs: dict[str, Callable[[int, int], Tensor]] = {"ebms": ours(mlp), **{n: ours(v) for n, v in variants.items()}}
    runs.update(_peer_rows({"torchebm": L.make_torchebm, "ebmkit": L.make_ebmkit, "hand-autograd": L.make_hand},
                           (mlp, x0), missing))
    res = _time({n: (lambda r=r: r(LANGEVIN_STEPS, 7)) for n, r in runs.items()}, repeats)
    return {"workload": "langevin", "dim": d, **res, "numerics": _numerics(mlp, variants, x0)}


def _dsm_bf16(mlp: MLPEnergy, data: Tensor) -> Callable[[int, int], tuple[Tensor, Tensor]]:
    """score_matching.make_ebms("dsm") with the objective's forward under bfloat16 autocast (the Trainer's)."""
    model = copy.deepcopy(mlp)
    opt = torch.optim.Adam(model.parameters(), lr=S.LR)
    objective = DenoisingScoreMatching(sigma=S.SIGMA, weighting=torch.ones_like)

    def run(steps: int, seed: int) -> tuple[Tensor, Tensor]:
        g = torch.Generator().manual_seed(seed)

        def loss(x: Tensor) -> Tensor:
            with torch.autocast("cpu", dtype=torch.bfloat16):
                return objective(model, x, generator=g).loss

        return S._train(loss, opt, data, steps), S._flat(model.parameters())

    return run


def bench_dsm(repeats: int, missing: list[str]) -> dict[str, Any]:
    d = 784
    torch.manual_seed(0)
    mlp = MLPEnergy(d, (S.HIDDEN, S.HIDDEN), activation="silu")
    data = S.make_data(d)
    runs = {"ebms": S.make_ebms("dsm", mlp, data), "ebms+bf16": _dsm_bf16(mlp, data)}
    runs.update(_peer_rows({"torchebm": S.make_torchebm, "ebmkit": S.make_ebmkit, "hand-autograd": S.make_hand},
                           ("dsm", mlp, data), missing))
    grads = {}
    for name, ctx in (("ebms", contextlib.nullcontext), ("ebms+bf16", lambda: torch.autocast("cpu", torch.bfloat16))):
        model = copy.deepcopy(mlp)
        with ctx():
            loss = DenoisingScoreMatching(sigma=S.SIGMA, weighting=torch.ones_like)(
                model, data[0], generator=torch.Generator().manual_seed(123)).loss
        loss.backward()
        grads[name] = torch.cat([(torch.zeros_like(p) if p.grad is None else p.grad).reshape(-1)
                                 for p in model.parameters()])  # the head bias has no gradient under DSM
    res = _time({n: (lambda r=r: r(DSM_STEPS, 7)) for n, r in runs.items()}, repeats)
    return {"workload": "dsm", "dim": d, **res,
            "numerics": {"ebms+bf16": {"param_grad_rel_norm": _rel_norm(grads["ebms+bf16"], grads["ebms"])}},
            "compile": "not run: score matching differentiates the energy twice (torch.compile has no double backward)"}


def bench_sgld(repeats: int, missing: list[str]) -> dict[str, Any]:
    torch.manual_seed(0)
    net = J.ConvEnergy(1, J.SIZE, channels=J.CHANNELS, groups=J.GROUPS)
    x0 = J._uniform((64, 1, J.SIZE, J.SIZE), torch.Generator().manual_seed(1))
    sampler = SGLD(J.ALPHA, J.SIGMA, space=Box((1, J.SIZE, J.SIZE), -1.0, 1.0))
    variants = {"ebms+compile": compiled(net, dynamic=False), "ebms+bf16": mixed_precision(net),
                "ebms+bf16+compile": compiled(mixed_precision(net), dynamic=False)}

    def ours(energy: Any) -> Callable[[int, int], Tensor]:
        return lambda steps, seed: sampler.sample(energy, x0, steps, generator=torch.Generator().manual_seed(seed))

    runs: dict[str, Callable[[int, int], Tensor]] = {"ebms": ours(net), **{n: ours(v) for n, v in variants.items()}}
    runs.update(_peer_rows({"torchebm": J.sgld_torchebm, "ebmkit": J.sgld_ebmkit, "hand-autograd": J.sgld_hand},
                           (net, x0), missing))
    res = _time({n: (lambda r=r: r(SGLD_STEPS, 7)) for n, r in runs.items()}, repeats)
    return {"workload": "sgld", "batch": 64, **res, "numerics": _numerics(net, variants, x0)}


def _jem_ours(clf: torch.nn.Module, x: Tensor, y: Tensor, *, bf16: bool, compile: bool) -> Callable[[], object]:
    model = JEM(copy.deepcopy(clf), J.K_CLASSES)
    if compile:
        model.compile()
    box = Box((1, J.SIZE, J.SIZE), -1.0, 1.0)
    objective = JEMObjective(SGLD(J.ALPHA, J.SIGMA, space=box), ReplayBuffer(J.CAPACITY, box, reinit_prob=J.REINIT),
                             k=J.STEPS)
    opt, g = torch.optim.Adam(model.parameters(), lr=J.LR), torch.Generator().manual_seed(11)

    def step() -> object:
        opt.zero_grad(set_to_none=True)
        ctx = torch.autocast("cpu", dtype=torch.bfloat16) if bf16 else contextlib.nullcontext()
        with ctx:
            out = objective(model, (x, y), generator=g)
        out.loss.backward()
        opt.step()
        return out.metrics

    return step


def bench_jem_step(repeats: int, missing: list[str]) -> dict[str, Any]:
    torch.manual_seed(0)
    clf = J.ConvClassifier(1, J.SIZE, J.K_CLASSES, channels=J.CHANNELS, groups=J.GROUPS)
    g = torch.Generator().manual_seed(2)
    x = J._uniform((J.JEM_BATCH, 1, J.SIZE, J.SIZE), g)
    y = torch.randint(0, J.K_CLASSES, (J.JEM_BATCH,), generator=g)
    runs = {name: _jem_ours(clf, x, y, bf16=b, compile=c) for name, b, c in
            (("ebms", False, False), ("ebms+compile", False, True), ("ebms+bf16", True, False),
             ("ebms+bf16+compile", True, True))}
    runs.update(_peer_rows({"torchebm": J.jem_torchebm, "ebmkit": J.jem_ebmkit, "hand-autograd": J.jem_hand},
                           (clf, x, y), missing))
    return {"workload": "jem-step", "batch": J.JEM_BATCH, **_time(runs, repeats)}


def main() -> None:
    args = C.parse_args(__doc__.splitlines()[0])
    rec = SR.start("precision", args)
    info = C.machine_info(PEERS)
    flags = cpu_flags()
    missing = L.missing_peers()
    if missing:
        C.note(f"[precision] {', '.join(missing)} not installed: pip install -e .[bench] to compare with them")
    repeats = args.repeats or (2 if args.quick else 5)
    routes = L.matmul_routes(repeats)
    results = [bench_langevin(2, repeats, missing), bench_langevin(784, repeats, missing), bench_dsm(repeats, missing),
               bench_sgld(repeats, missing), bench_jem_step(repeats, missing)]
    print(f"bf16 and torch.compile, {info['threads']} thread(s); CPU flags: "
          + ", ".join(f"{k}={'yes' if v else 'no'}" for k, v in flags.items())
          + f"; torch cpu capability {torch.backends.cpu.get_cpu_capability()}")
    header = ["workload", "impl", "median s", "speedup vs ebms fp32", "vs fastest peer", "energy rel", "grad rel"]
    table = []
    for res in results:
        tag = res["workload"] + (f" D={res['dim']}" if "dim" in res else "")
        for n, r in res["rows"].items():
            num = res.get("numerics", {}).get(n, {})
            table.append([tag, n, r["median_s"], C.speedup(res["rows"]["ebms"]["median_s"], r["median_s"]),
                          r["speedup_vs_fastest_peer"] if r["speedup_vs_fastest_peer"] is not None else "n/a",
                          f"{num['energy_rel_max']:.1e}" if "energy_rel_max" in num else "",
                          f"{num['grad_rel_norm']:.1e}" if "grad_rel_norm" in num else
                          (f"params {num['param_grad_rel_norm']:.1e}" if "param_grad_rel_norm" in num else "")])
    print(C.format_table(header, table))
    print("matmul routes (float32 1024^3, GFLOP/s): " + ", ".join(f"{n} {v:.3g}" for n, v in routes.items()))
    record = {"bench": "precision", "quick": args.quick, "machine": info, "cpu_flags": flags,
              "cpu_capability": torch.backends.cpu.get_cpu_capability(), "matmul_routes_gflops": routes,
              "workload": {"langevin_steps": LANGEVIN_STEPS, "dsm_steps": DSM_STEPS, "sgld_steps": SGLD_STEPS,
                           "langevin_batch": L.BATCH, "dsm_batch": S.BATCH[784], "sgld_batch": 64,
                           "jem_batch": J.JEM_BATCH, "jem_sgld_steps": J.STEPS},
              "results": results}
    C.save_results("precision", record, enabled=not args.no_save)
    SR.finish(rec, args, record, notes=(
        "Medians of the timed repeats (wall s), all rows of a workload alternating in one process. speedup_of_ebms: "
        "their median / ebms float32 median; speedup_vs_fastest_peer: the fastest peer's median / this row's (> 1: "
        "this row faster). numerics: energies max|dE|/max|E| and gradients ||dg||/||g|| of each variant against "
        "float32 at the workload's start. ebms's samplers evaluate the start point once more than the peers "
        "(LANGEVIN_STEPS + 1 and SGLD_STEPS + 1 evaluations). cpu_flags: the instruction sets of /proc/cpuinfo; without avx512_bf16/amx "
        "the bfloat16 products are emulated. Shared 2-core machine: the ratios are the robust figures."))


if __name__ == "__main__":
    main()
