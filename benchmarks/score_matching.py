"""Score-matching training speed: ebms vs TorchEBM, ebmkit and a hand-written autograd loop.

Workload (identical for every implementation):
    energy     MLP D -> 128 -> 128 -> 1, SiLU, the *same initial weights*
               copied into each library's own model class; D = 2 (toy data,
               B = 1024) and D = 784 (MNIST-sized, B = 256); float32, CPU;
    optimiser  Adam(lr = 1e-3), one per implementation, same start;
    data       a fixed pool of 4 batches (D = 2: a ring of 8 Gaussians;
               D = 784: uniform [0, 1] "images"), cycled in the same order;
    step       loss forward + ``backward()`` + ``optimizer.step()``;
    DSM        L = 1/B sum_b 1/2 ||grad E(x_b + s eps_b) - eps_b / s||^2, s = 0.1
               (ebms ``DenoisingScoreMatching(sigma=s, weighting=1)``; TorchEBM
               ``DenoisingScoreMatching(noise_scale=s)``; ebmkit
               ``DenoisingScoreMatching(sigma=s)``), one N(0, I) draw per step;
    SSM        L = 1/B sum_b [ -v_b' H_E(x_b) v_b + 1/2 (v_b' grad E(x_b))^2 ],
               one Gaussian projection v ~ N(0, I) per point (ebms
               ``SlicedScoreMatching(1, distribution='gaussian')``; TorchEBM
               ``SlicedScoreMatching(n_projections=1, projection_type='gaussian')``;
               ebmkit ``SlicedScoreMatching(1, vr=False)``), one draw per step.

Before timing, every implementation trains a few steps from the same weights
and seed (all noise streams coincide: the same number of N(0, I) values in the
same order) and the largest difference of its per-step loss from ebms's,
relative to the largest |loss|, is printed as ``check diff`` (round-off, ~1e-7).

Differences that cannot be removed:
    * ebms checks every batch for NaN/Inf (one reduction) and returns metrics
      (mean energy, mean score norm, ...) with one host sync per step; ebmkit
      calls ``loss.item()`` once per step; TorchEBM and the hand loop do neither;
    * ebms's DSM computes the loss with a per-row weight (here 1), TorchEBM
      runs its conditioning/regulariser bookkeeping on every call;
    * ebmkit draws its noise from the global RNG (no generator argument);
    * glibc's heap trimming makes some implementations page-fault more than
      others (``faults/step`` column); that depends on allocation order, not
      on the arithmetic.

Run: ``python benchmarks/score_matching.py [--quick] [--threads N]``.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import _common as C
import _speed_record as SR
import torch
from torch import Tensor, nn
from torch.utils._python_dispatch import TorchDispatchMode

try:
    import resource  # page-fault counts (POSIX only)
except ImportError:  # pragma: no cover
    resource = None  # type: ignore[assignment]
from ebms.nets import MLPEnergy
from ebms.objectives import DenoisingScoreMatching, SlicedScoreMatching

HIDDEN, SIGMA, LR, POOL = 128, 0.1, 1e-3, 4
BATCH = {2: 1024, 784: 256}
DIMS = (2, 784)
OBJECTIVES = ("dsm", "ssm")
STEPS = 20  # training steps per timed call
CHECK_STEPS = 3
WARMUP_STEPS = 3
PROBE, PROBE_N, PROBE_REPS = "matmul-probe", 1024, 4
PEERS = ("torchebm", "ebmkit")

Run = Callable[[int, int], tuple[Tensor, Tensor]]  # (steps, seed) -> (losses (steps,), flat params)




def _flat(params: Any) -> Tensor:
    """Parameters in ``Linear`` order (weight, bias per layer) as one vector."""
    return torch.cat([p.detach().reshape(-1) for p in params])


def _train(step: Callable[[Tensor], Tensor], opt: torch.optim.Optimizer, data: Tensor, steps: int) -> Tensor:
    """``steps`` training steps over the batch pool; ``step(x)`` returns the 0-d loss."""
    losses = []
    for i in range(steps):
        loss = step(data[i % data.shape[0]])
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        losses.append(loss.detach())
    return torch.stack(losses)


# --- implementations: each returns run(steps, seed) -> (losses, params) --------------
def make_ebms(obj: str, mlp: MLPEnergy, data: Tensor) -> Run:
    model = MLPEnergy(mlp.in_features, mlp.hidden, activation="silu")
    model.load_state_dict(mlp.state_dict())
    opt = torch.optim.Adam(model.parameters(), lr=LR)
    if obj == "dsm":  # weighting 1: the peers' unweighted loss (ebms's default is sigma^2 times it)
        objective: nn.Module = DenoisingScoreMatching(sigma=SIGMA, weighting=torch.ones_like)
    else:
        objective = SlicedScoreMatching(n_projections=1, distribution="gaussian")

    def run(steps: int, seed: int) -> tuple[Tensor, Tensor]:
        g = torch.Generator().manual_seed(seed)
        losses = _train(lambda x: objective(model, x, generator=g).loss, opt, data, steps)
        return losses, _flat(model.parameters())

    return run


def make_hand(obj: str, mlp: MLPEnergy, data: Tensor) -> Run:
    net = C.sequential_copy(mlp)
    opt = torch.optim.Adam(net.parameters(), lr=LR)

    def run(steps: int, seed: int) -> tuple[Tensor, Tensor]:
        g = torch.Generator().manual_seed(seed)

        def dsm(x: Tensor) -> Tensor:
            eps = torch.randn(x.shape, generator=g)
            xn = (x + SIGMA * eps).requires_grad_(True)
            (grad,) = torch.autograd.grad(net(xn).sum(), xn, create_graph=True)
            return 0.5 * (grad - eps / SIGMA).pow(2).sum(1).mean()

        def ssm(x: Tensor) -> Tensor:
            v = torch.randn(x.shape, generator=g)
            xg = x.detach().requires_grad_(True)
            (grad,) = torch.autograd.grad(net(xg).sum(), xg, create_graph=True)
            gv = (grad * v).sum(1)
            (hv,) = torch.autograd.grad(gv.sum(), xg, create_graph=True)
            return (0.5 * gv.pow(2) - (hv * v).sum(1)).mean()

        losses = _train(dsm if obj == "dsm" else ssm, opt, data, steps)
        return losses, _flat(net.parameters())

    return run


def make_torchebm(obj: str, mlp: MLPEnergy, data: Tensor) -> Run:
    from torchebm.core import BaseModel
    from torchebm.losses import DenoisingScoreMatching as TDSM
    from torchebm.losses import SlicedScoreMatching as TSSM

    class TorchEBMMLP(BaseModel):
        def __init__(self) -> None:
            super().__init__()
            self.net = C.sequential_copy(mlp)

        def forward(self, x: Tensor) -> Tensor:
            return self.net(x).squeeze(-1)

    model = TorchEBMMLP()
    opt = torch.optim.Adam(model.parameters(), lr=LR)
    if obj == "dsm":
        loss_fn: nn.Module = TDSM(model, noise_scale=SIGMA)
    else:
        loss_fn = TSSM(model, n_projections=1, projection_type="gaussian")

    def run(steps: int, seed: int) -> tuple[Tensor, Tensor]:
        g = torch.Generator().manual_seed(seed)
        losses = _train(lambda x: loss_fn(x, generator=g), opt, data, steps)
        return losses, _flat(model.net.parameters())

    return run


def make_ebmkit(obj: str, mlp: MLPEnergy, data: Tensor) -> Run:
    from ebm.losses.score_matching import DenoisingScoreMatching as KDSM
    from ebm.losses.score_matching import SlicedScoreMatching as KSSM
    from ebm.nets.mlp_conv import MLPEnergy as KitMLP

    model = KitMLP(mlp.in_features, hidden=mlp.hidden)
    model.net.load_state_dict(C.sequential_copy(mlp).state_dict())
    opt = torch.optim.Adam(model.parameters(), lr=LR)
    loss_fn: nn.Module = KDSM(sigma=SIGMA) if obj == "dsm" else KSSM(n_projections=1, vr=False)

    def run(steps: int, seed: int) -> tuple[Tensor, Tensor]:
        torch.manual_seed(seed)  # ebmkit draws from the global RNG
        losses = _train(lambda x: loss_fn(model, x).loss, opt, data, steps)
        return losses, _flat(model.parameters())

    return run


FACTORIES: dict[str, Callable[[str, MLPEnergy, Tensor], Run]] = {
    "ebms": make_ebms,
    "torchebm": make_torchebm,
    "ebmkit": make_ebmkit,
    "hand-autograd": make_hand,
}


def make_data(d: int) -> Tensor:
    """``(POOL, B, d)`` float32 training batches, the same for every implementation."""
    g = torch.Generator().manual_seed(2)
    b = BATCH[d]
    if d == 2:  # ring of 8 Gaussians, radius 2, sd 0.1
        k = torch.randint(8, (POOL, b), generator=g).float() * (2 * math.pi / 8)
        centres = 2.0 * torch.stack([k.cos(), k.sin()], -1)
        return centres + 0.1 * torch.randn(POOL, b, 2, generator=g)
    return torch.rand(POOL, b, d, generator=g)


class _MatmulFlops(TorchDispatchMode):
    """Counts ``2 m k n`` FLOPs for every matrix product dispatched inside it (autograd's too).

    (``torch.utils.flop_counter.FlopCounterMode`` also installs module hooks,
    which break ``torch.autograd.grad`` inside a module's backward.)
    """

    def __init__(self) -> None:
        super().__init__()
        self.flops = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # type: ignore[no-untyped-def]
        out = func(*args, **(kwargs or {}))
        name = func.overloadpacket.__name__
        if name in ("mm", "addmm", "bmm", "baddbmm"):
            a, b = (args[1], args[2]) if name.startswith(("add", "badd")) else (args[0], args[1])
            self.flops += 2 * a.numel() * b.shape[-1]
        elif name in ("mv", "addmv"):
            a = args[1] if name == "addmv" else args[0]
            self.flops += 2 * a.numel()
        elif name == "_linear_pointwise":  # oneDNN linear: x (rows, in) times w (out, in)^T
            x, w = args[0], args[1]
            self.flops += 2 * x.numel() * w.shape[0]
        return out


def matmul_flops_per_step(run: Run) -> int:
    """Matmul FLOPs of one training step, counted at the dispatcher (see :class:`_MatmulFlops`)."""
    with _MatmulFlops() as counter:
        run(1, 11)
    return counter.flops


def _counting_faults(run: Run, steps: int, out: list[int]) -> Callable[[], object]:
    """``run(steps, 7)``, appending the minor page faults it caused to ``out``.

    glibc returns freed blocks above its trim threshold to the kernel, so the
    next large temporary is faulted in again (zeroed pages); how often that
    happens depends on each implementation's allocation order.
    """

    if resource is None:
        return lambda: run(steps, 7)

    def timed() -> None:
        f0 = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
        run(steps, 7)
        out.append(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - f0)

    return timed


def bench_case(d: int, obj: str, args: Any) -> dict[str, Any]:
    torch.manual_seed(0)
    mlp = MLPEnergy(d, (HIDDEN, HIDDEN), activation="silu")
    data = make_data(d)
    runs: dict[str, Run] = {}
    skipped: dict[str, str] = {}
    for name, make in FACTORIES.items():
        try:
            runs[name] = make(obj, mlp, data)
        except ImportError as exc:
            skipped[name] = f"not installed ({exc.name})"
            C.note(f"[score_matching] skipping {name}: {skipped[name]}")

    # same weights, same noise: per-step losses and final weights must agree to round-off
    checked = {n: r(CHECK_STEPS, 123) for n, r in runs.items()}
    ref_loss, ref_par = checked["ebms"]
    scale = float(ref_loss.abs().max())  # SSM losses can pass through 0: relative to the largest |loss|
    loss_diff = {n: float((loss - ref_loss).abs().max()) / scale for n, (loss, _) in checked.items()}
    param_diff = {n: float((p - ref_par).abs().max()) for n, (_, p) in checked.items()}
    flops = {n: matmul_flops_per_step(r) for n, r in runs.items()}
    for r in runs.values():
        r(WARMUP_STEPS, 5)

    steps = STEPS
    repeats = args.repeats or (3 if args.quick else 9)
    faults: dict[str, list[int]] = {n: [] for n in runs}
    timed: dict[str, Callable[[], object]] = {n: _counting_faults(r, steps, faults[n]) for n, r in runs.items()}
    timed[PROBE] = C.matmul_probe(PROBE_N, PROBE_REPS)
    times, cpu_times = C.time_alternating(timed, repeats=repeats, warmup=0)
    gflops = 2.0 * PROBE_N**3 * PROBE_REPS / C.median(times.pop(PROBE)) / 1e9
    cpu_times.pop(PROBE)
    med = {n: C.median(t) for n, t in times.items()}
    cpu_med = {n: C.median(t) for n, t in cpu_times.items()}
    peers = {n: t for n, t in med.items() if n != "ebms"}
    libs = {n: t for n, t in peers.items() if n in PEERS}
    ours = med["ebms"]
    rows = {}
    for n, t in med.items():
        achieved = flops[n] * steps / t / 1e9
        rows[n] = {
            "median_s": t,
            "all_s": times[n],
            "cpu_median_s": cpu_med[n],
            "cpu_all_s": cpu_times[n],
            "cpu_speedup_of_ebms": C.speedup(cpu_med[n], cpu_med["ebms"]),
            "steps_per_s": steps / t,
            "speedup_of_ebms": C.speedup(t, ours),
            "matmul_flops_per_step": flops[n],
            "matmul_gflops": achieved,
            "fraction_of_machine": achieved / gflops,
            "minor_faults_per_step": C.median(faults[n]) / steps if faults[n] else None,
            "check_max_rel_loss_diff_vs_ebms": loss_diff[n],
            "check_max_abs_param_diff_vs_ebms": param_diff[n],
        }
    return {
        "dim": d,
        "objective": obj,
        "batch": BATCH[d],
        "steps_per_call": steps,
        "matmul_gflops": gflops,
        "rows": rows,
        "skipped": skipped,
        "repeats": repeats,
        **C.fastest_peers(peers, libs, ours),
    }


def _round(v: float | None) -> float | None:
    return None if v is None else round(v, 3)


def main() -> None:
    args = C.parse_args(__doc__.splitlines()[0])
    rec = SR.start("score_matching", args)
    info = C.machine_info(PEERS)
    results = [bench_case(d, obj, args) for d in DIMS for obj in OBJECTIVES]
    gflops = max(r["matmul_gflops"] for r in results)

    header = ["D", "loss", "impl", "median s", "steps/s", "ebms speedup", "GFLOP/s", "of machine",
              "check diff", "cpu s", "cpu speedup", "faults/step"]
    table = []
    for res in results:
        for n, r in res["rows"].items():
            table.append([
                res["dim"], res["objective"].upper(), n, r["median_s"], r["steps_per_s"], r["speedup_of_ebms"],
                r["matmul_gflops"], f"{100 * r['fraction_of_machine']:.0f}%",
                f"{r['check_max_rel_loss_diff_vs_ebms']:.1e}", r["cpu_median_s"], r["cpu_speedup_of_ebms"],
                None if r["minor_faults_per_step"] is None else round(r["minor_faults_per_step"]),
            ])
    print(f"Score-matching training steps (loss + backward + Adam), MLP D-128-128-1 SiLU, float32, "
          f"B={BATCH[2]} at D=2 / {BATCH[784]} at D=784, sigma={SIGMA}, 1 Gaussian projection, "
          f"{info['threads']} thread(s); matmul probe (float32 {PROBE_N}^3, timed between the rows) "
          + ", ".join(f"{r['objective']} D={r['dim']}: {r['matmul_gflops']:.1f}" for r in results) + " GFLOP/s")
    print("ebms speedup = their median wall time / ebms median wall time (> 1: ebms faster); "
          "cpu columns: the same from process CPU time (cross-check on a busy machine); "
          "check diff: max per-step loss difference from ebms over the check steps / max |loss|; "
          "faults/step: minor page faults per training step (median)")
    print(C.format_table(header, table))
    for res in results:
        print(f"{res['objective'].upper()} D={res['dim']}: ebms speedup vs fastest peer ({res['fastest_peer']}) "
              f"{res['speedup_vs_fastest_peer']:.3f}x; vs fastest library ({res['fastest_peer_library']}) "
              f"{res['speedup_vs_fastest_peer_library']:.3f}x")
    print("Not removable: ebms checks each batch for NaN/Inf and syncs once per step for its metrics "
          "(ebmkit: loss.item()); ebmkit uses the global RNG; page faults depend on allocation order.")

    record = {"bench": "score_matching", "quick": args.quick, "machine": info, "matmul_gflops": gflops,
              "workload": {"batch": {str(k): v for k, v in BATCH.items()}, "hidden": HIDDEN, "sigma": SIGMA,
                           "lr": LR, "optimizer": "Adam", "n_projections": 1, "projection": "gaussian",
                           "ssm_variant": "plain (not variance-reduced)", "dsm_weighting": "1 (unweighted)",
                           "steps_per_call": STEPS, "check_steps": CHECK_STEPS,
                           "dims": list(DIMS), "objectives": list(OBJECTIVES)},
              "results": results}
    path = C.save_results("score_matching", record, enabled=not args.no_save)
    SR.finish(rec, args, record, notes=(
        'Medians of the timed repeats (wall s per call of the training steps), alternating the implementations in one process. speedup_of_ebms = their median / ebms median (> 1: ebms faster). check_max_rel_loss_diff_vs_ebms: largest per-step loss difference over the check steps / max |loss|. Shared 2-core machine: absolute rates depend on the load; the ratios are the robust figures.'))
    if path is not None:
        C.note(f"[score_matching] wrote {path}")
    summary: dict[str, Any] = {"bench": "score_matching", "quick": args.quick, "threads": info["threads"],
                               "matmul_gflops": round(gflops, 2), "ratio": "their_time / ebms_time"}
    for res in results:
        key = f"{res['objective']}_d{res['dim']}"
        ours = res["rows"]["ebms"]
        summary[f"{key}_ratio_vs_best_peer"] = _round(res["speedup_vs_fastest_peer"])
        summary[f"{key}_best_peer"] = res["fastest_peer"]
        summary[f"{key}_ratio_vs_best_library"] = _round(res["speedup_vs_fastest_peer_library"])
        summary[f"{key}_ebms_steps_per_s"] = round(ours["steps_per_s"], 1)
        summary[f"{key}_ebms_fraction_of_machine"] = round(ours["fraction_of_machine"], 3)
    C.emit_final_line(summary)


if __name__ == "__main__":
    main()
