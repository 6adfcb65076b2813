"""Langevin sampling speed: ebms vs TorchEBM, ebmkit and a hand-written autograd loop.

Workload (identical for every implementation):
    energy  MLP D -> 128 -> 128 -> 1, SiLU, the *same weights* copied into
            each library's own model class, for D = 2 and D = 784;
    chains  B = 1024, float32, CPU, same x0;
    update  x' = x - (eps/2) grad E(x) + sqrt(eps) xi, eps = 0.01, 200 steps
            (ebms ULA(step_size=eps); TorchEBM LangevinDynamics(step_size=eps/2,
            noise_scale=1); ebmkit LangevinDynamics(step_size=eps/2); the
            hand loop writes it out), one N(0, I) draw per step.

Before timing, every implementation runs a few steps from the same seed and
the final states are compared with ebms's (same update, same noise stream);
the largest difference is printed, so the rows are known to do the same work.

Differences that cannot be removed (stated in the output too):
    * ebms evaluates energy+gradient 201 times (``init`` caches the start
      point, each step evaluates the new point), the peers 200 times;
    * ebms checks every proposal for NaN/Inf and keeps the old state for
      such chains (its contract); the peers do not check;
    * ebms computes the MLP input gradient analytically
      (``MLPEnergy.energy_and_grad``), the peers through autograd;
    * ebmkit draws noise from the global RNG (no generator argument).

Run: ``python benchmarks/langevin.py [--quick] [--threads N] [--compile]``.
The peers come with the ``bench`` extra (``pip install -e .[bench]``); without
them the benchmark says so in one line and times ebms against the hand loop.
"""

from __future__ import annotations

import argparse
import importlib.util
import math
from collections.abc import Callable
from typing import Any

import _common as C
import _speed_record as SR
import torch
from torch import nn

from ebms.nets import MLPEnergy
from ebms.samplers import ULA

BATCH, HIDDEN, STEPS, EPS = 1024, 128, 200, 0.01
DIMS = (2, 784)
TARGETS = {2: 1.25, 784: 1.0}  # required ebms speedup over the fastest peer (issue)
CHECK_STEPS = 5
WARMUP_STEPS = 20
PROBE, PROBE_N, PROBE_REPS = "matmul-probe", 1024, 4
PEERS = ("torchebm", "ebmkit")
PEER_MODULES = {"torchebm": "torchebm", "ebmkit": "ebm"}  # distribution -> import name


def missing_peers() -> list[str]:
    """Peers (``bench`` extra) that cannot be imported here."""
    out = []
    for name, module in PEER_MODULES.items():
        try:
            found = importlib.util.find_spec(module) is not None
        except (ImportError, ValueError):
            found = False
        if not found:
            out.append(name)
    return out




def _copy_into(net: nn.Sequential, mlp: MLPEnergy) -> None:
    ref = C.sequential_copy(mlp)
    net.load_state_dict(ref.state_dict())


# --- implementations: each returns run(steps, seed) -> final x -------------------------
def make_ebms(mlp: MLPEnergy, x0: torch.Tensor) -> Callable[[int, int], torch.Tensor]:
    sampler = ULA(step_size=EPS)

    def run(steps: int, seed: int) -> torch.Tensor:
        g = torch.Generator().manual_seed(seed)
        return sampler.sample(mlp, x0, steps, generator=g)

    return run


def make_hand(mlp: MLPEnergy, x0: torch.Tensor) -> Callable[[int, int], torch.Tensor]:
    net = C.sequential_copy(mlp)
    half, sd = EPS / 2, math.sqrt(EPS)

    def run(steps: int, seed: int) -> torch.Tensor:
        g = torch.Generator().manual_seed(seed)
        x = x0.detach()
        for _ in range(steps):
            x = x.detach().requires_grad_(True)
            e = net(x).squeeze(-1)
            (grad,) = torch.autograd.grad(e.sum(), x)
            x = x.detach() - half * grad + sd * torch.randn(x.shape, generator=g)
        return x.detach()

    return run


def make_torchebm(mlp: MLPEnergy, x0: torch.Tensor) -> Callable[[int, int], torch.Tensor]:
    from torchebm.core import BaseModel
    from torchebm.samplers import LangevinDynamics

    class TorchEBMMLP(BaseModel):
        def __init__(self) -> None:
            super().__init__()
            self.net = C.sequential_copy(mlp)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.net(x).squeeze(-1)

    model = TorchEBMMLP()
    sampler = LangevinDynamics(model, step_size=EPS / 2, noise_scale=1.0)

    def run(steps: int, seed: int) -> torch.Tensor:
        g = torch.Generator().manual_seed(seed)
        return sampler.sample(x=x0, n_steps=steps, generator=g)

    return run


def make_ebmkit(mlp: MLPEnergy, x0: torch.Tensor) -> Callable[[int, int], torch.Tensor]:
    from ebm.nets.mlp_conv import MLPEnergy as KitMLP
    from ebm.samplers.langevin import LangevinDynamics

    model = KitMLP(mlp.in_features, hidden=mlp.hidden)
    _copy_into(model.net, mlp)
    sampler = LangevinDynamics(step_size=EPS / 2, steps=STEPS, noise_scale=None)

    def run(steps: int, seed: int) -> torch.Tensor:
        torch.manual_seed(seed)  # ebmkit draws from the global RNG
        return sampler.sample(model, x0, steps=steps)

    return run


def make_ebms_compiled(mlp: MLPEnergy, x0: torch.Tensor) -> Callable[[int, int], torch.Tensor]:
    class Compiled:
        """Same MLP, ``energy_and_grad`` wrapped in ``torch.compile``."""

        energy_and_grad = staticmethod(torch.compile(mlp.energy_and_grad, dynamic=False))

        def __call__(self, x: torch.Tensor) -> torch.Tensor:
            return mlp(x)

    energy, sampler = Compiled(), ULA(step_size=EPS)

    def run(steps: int, seed: int) -> torch.Tensor:
        g = torch.Generator().manual_seed(seed)
        return sampler.sample(energy, x0, steps, generator=g)

    return run


def matmul_flops_per_eval(d: int) -> int:
    """Multiply-add FLOPs of one forward + input-gradient evaluation (matmuls only)."""
    fwd = 2 * BATCH * (d * HIDDEN + HIDDEN * HIDDEN + HIDDEN)
    bwd = 2 * BATCH * (HIDDEN * HIDDEN + HIDDEN * d)
    return fwd + bwd


def bench_dim(d: int, args: Any, missing: list[str]) -> dict[str, Any]:
    torch.manual_seed(0)
    mlp = MLPEnergy(d, (HIDDEN, HIDDEN), activation="silu")
    x0 = torch.randn(BATCH, d, generator=torch.Generator().manual_seed(1))
    factories: dict[str, Callable[..., Callable[[int, int], torch.Tensor]]] = {
        "ebms": make_ebms,
        "torchebm": make_torchebm,
        "ebmkit": make_ebmkit,
        "hand-autograd": make_hand,
    }
    if args.compile:
        factories["ebms+compile"] = make_ebms_compiled
    runs: dict[str, Callable[[int, int], torch.Tensor]] = {}
    skipped: dict[str, str] = {name: "not installed (pip install -e .[bench])" for name in missing}
    for name, make in factories.items():
        if name in skipped:
            continue
        try:
            runs[name] = make(mlp, x0)
        except ImportError as exc:  # installed but broken: still one line, never a crash
            skipped[name] = f"cannot be imported ({exc})"
            C.note(f"[langevin] skipping {name}: {skipped[name]}")

    ref = runs["ebms"](CHECK_STEPS, 123)
    check = {n: float((r(CHECK_STEPS, 123) - ref).abs().max()) for n, r in runs.items() if n != "ebms"}
    for r in runs.values():  # warm-up (the check above already ran each once)
        r(WARMUP_STEPS, 5)
    evals = {n: STEPS + 1 if n.startswith("ebms") else STEPS for n in runs}

    repeats = args.repeats or (3 if args.quick else 9)
    timed: dict[str, Callable[[], object]] = {n: _timed_run(r) for n, r in runs.items()}
    timed[PROBE] = C.matmul_probe(PROBE_N, PROBE_REPS)  # same load conditions as the rows
    times, cpu_times = C.time_alternating(timed, repeats=repeats, warmup=0)
    gflops = 2.0 * PROBE_N**3 * PROBE_REPS / C.median(times.pop(PROBE)) / 1e9
    cpu_times.pop(PROBE)
    med = {n: C.median(t) for n, t in times.items()}
    cpu_med = {n: C.median(t) for n, t in cpu_times.items()}
    peers = {n: t for n, t in med.items() if not n.startswith("ebms")}
    libs = {n: t for n, t in peers.items() if n in PEERS}
    ours = med["ebms"]
    flops = matmul_flops_per_eval(d)
    rows = {}
    for n, t in med.items():
        achieved = flops * evals[n] / t / 1e9
        rows[n] = {
            "median_s": t,
            "all_s": times[n],
            "cpu_median_s": cpu_med[n],
            "cpu_speedup_of_ebms": C.speedup(cpu_med[n], cpu_med["ebms"]) if n != "ebms" else 1.0,
            "steps_per_s": STEPS / t,
            "speedup_of_ebms": C.speedup(t, ours) if n != "ebms" else 1.0,
            "matmul_gflops": achieved,
            "fraction_of_machine": achieved / gflops,
            "energy_grad_evals": evals[n],
            "max_abs_diff_vs_ebms_after_check": check.get(n, 0.0),
        }
    return {
        "dim": d,
        "matmul_gflops": gflops,
        "rows": rows,
        "skipped": skipped,
        "repeats": repeats,
        **C.fastest_peers(peers, libs, ours),
        "matmul_flops_per_eval": flops,
    }


def matmul_routes(repeats: int) -> dict[str, float]:
    """GFLOP/s of each float32 product route PyTorch offers here (``mm``: the default BLAS, MKL on
    x86; ``onednn``: oneDNN's linear kernel, the route ``MLPEnergy`` takes for large products), on
    the probe's ``1024^3`` product, timed alternating; ``onednn_over_mm`` is their ratio."""
    a = torch.randn(PROBE_N, PROBE_N, generator=torch.Generator().manual_seed(2))
    b = torch.randn(PROBE_N, PROBE_N, generator=torch.Generator().manual_seed(3))
    routes = C._matmul_backends(a, b)
    wall, _ = C.time_alternating({n: (lambda fn=fn: [fn() for _ in range(PROBE_REPS)]) for n, fn in routes.items()},
                                 repeats=repeats, warmup=1)
    out = {n: 2.0 * PROBE_N**3 * PROBE_REPS / C.median(t) / 1e9 for n, t in wall.items()}
    if "onednn" in out:
        out["onednn_over_mm"] = out["onednn"] / out["mm"]
    return out


def _timed_run(run: Callable[[int, int], torch.Tensor]) -> Callable[[], object]:
    return lambda: run(STEPS, 7)


def _add_compile_flag(p: argparse.ArgumentParser) -> None:
    p.add_argument("--compile", action="store_true", help="add an ebms+torch.compile row")


def _round(v: float | None) -> float | None:
    return None if v is None else round(v, 3)


def main() -> None:
    args = C.parse_args(__doc__.splitlines()[0], _add_compile_flag)
    rec = SR.start("langevin", args)
    info = C.machine_info(PEERS)
    missing = missing_peers()
    if missing:
        C.note(f"[langevin] {', '.join(missing)} not installed: timing ebms against the hand-written loop only; "
              "pip install -e .[bench] to compare with them")
    results = [bench_dim(d, args, missing) for d in DIMS]
    gflops = max(r["matmul_gflops"] for r in results)
    routes = matmul_routes(args.repeats or (3 if args.quick else 9))

    header = ["D", "impl", "median s", "steps/s", "ebms speedup", "GFLOP/s", "of machine", "evals",
              "check diff", "cpu s", "cpu speedup"]
    table = []
    for res in results:
        for n, r in res["rows"].items():
            table.append([
                res["dim"], n, r["median_s"], r["steps_per_s"], r["speedup_of_ebms"],
                r["matmul_gflops"], f"{100 * r['fraction_of_machine']:.0f}%", r["energy_grad_evals"],
                f"{r['max_abs_diff_vs_ebms_after_check']:.1e}", r["cpu_median_s"], r["cpu_speedup_of_ebms"],
            ])
    print(f"Langevin, MLP D-128-128-1 SiLU, B={BATCH}, {STEPS} steps, float32, {info['threads']} thread(s); "
          f"matmul probe (float32 {PROBE_N}^3, timed between the rows) "
          + ", ".join(f"D={r['dim']}: {r['matmul_gflops']:.1f}" for r in results) + " GFLOP/s")
    print("ebms speedup = their median wall time / ebms median wall time (> 1: ebms faster); "
          "cpu columns: the same from process CPU time (cross-check on a busy machine)")
    print(C.format_table(header, table))
    for res in results:
        target = TARGETS[res["dim"]]
        got = res["speedup_vs_fastest_peer"]
        verdict = "meets" if got is not None and got >= target else "MISSES"
        lib = res["speedup_vs_fastest_peer_library"]
        vs_lib = (f"vs fastest library ({res['fastest_peer_library']}) {lib:.3f}x" if lib is not None
                  else "no peer library installed (pip install -e .[bench])")
        print(f"D={res['dim']}: ebms speedup vs fastest peer ({res['fastest_peer']}) "
              f"{'n/a' if got is None else f'{got:.3f}x'} [target >= {target}x: {verdict}]; {vs_lib}")
    print("matmul routes (float32 1024^3, GFLOP/s): " + ", ".join(f"{n} {v:.3g}" for n, v in routes.items()))
    print("Not removable: ebms does 201 energy+grad evaluations (cached start point) vs 200, "
          "and checks every proposal for NaN/Inf; ebmkit uses the global RNG.")

    record = {"bench": "langevin", "quick": args.quick, "machine": info, "matmul_gflops": gflops,
              "matmul_routes_gflops": routes,
              "workload": {"batch": BATCH, "hidden": HIDDEN, "steps": STEPS, "eps": EPS, "dims": list(DIMS)},
              "results": results}
    path = C.save_results("langevin", record, enabled=not args.no_save)
    SR.finish(rec, args, record, notes=(
        "Medians of the timed repeats (wall s), alternating the implementations in one process. speedup_of_ebms = their median / ebms median (> 1: ebms faster); cpu_speedup_of_ebms the same from process CPU time. matmul_gflops: the float32 1024^3 probe timed between the rows (the machine's throughput under the same load). Shared 2-core machine: absolute rates depend on the load; the ratios are the robust figures."))
    if path is not None:
        C.note(f"[langevin] wrote {path}")
    summary: dict[str, Any] = {"bench": "langevin", "quick": args.quick, "threads": info["threads"],
                               "matmul_gflops": round(gflops, 2), "ratio": "their_time / ebms_time"}
    for res in results:
        d = res["dim"]
        ours = res["rows"]["ebms"]
        summary[f"d{d}_ratio_vs_best_peer"] = _round(res["speedup_vs_fastest_peer"])
        summary[f"d{d}_best_peer"] = res["fastest_peer"]
        summary[f"d{d}_ratio_vs_best_library"] = _round(res["speedup_vs_fastest_peer_library"])
        summary[f"d{d}_target"] = TARGETS[d]
        summary[f"d{d}_ebms_steps_per_s"] = round(ours["steps_per_s"], 1)
        summary[f"d{d}_ebms_fraction_of_machine"] = round(ours["fraction_of_machine"], 3)
    C.emit_final_line(summary)


if __name__ == "__main__":
    main()
