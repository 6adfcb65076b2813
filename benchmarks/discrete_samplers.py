"""Discrete samplers: RBM block-Gibbs sweeps/s and Ising Gibbs-with-Gradients steps/s, ebms vs ebmkit.

Workloads (identical for every implementation, float32, CPU):
    RBM     a Bernoulli RBM 784 x 500 (weights ``N(0, 0.05^2)``, zero biases), the same weights
            in ``ebms.models.rbm.BernoulliRBM`` and ``ebm.nets.RBM``; 100 chains from the same
            random binary start; 200 block-Gibbs sweeps ``h ~ p(h|v), v ~ p(v|h)``:
            ``ebms.samplers.block_gibbs.BlockGibbs()`` (one sweep per step; each step also
            evaluates the free energy of the new state, the sampler contract), the same with
            ``sweeps=10`` (energy every 10 sweeps), and ``ebm.samplers.GibbsSampler``.
    Ising   a 25 x 25 lattice with free boundaries (no wrap-around, as ebmkit's ``IsingEnergy``),
            coupling ``J = 0.3``, no field, ``beta = 1``: ebms
            ``IsingModel.lattice(25, 25, 0.3, boundary="free")`` on spins ``s`` and ebmkit
            ``IsingEnergy(0.3)`` on ``x = (s + 1) / 2``, both ``E = -J sum_<ij> s_i s_j``;
            100 chains; 500 steps of Gibbs-with-Gradients (ebms ``GibbsWithGradients()``, proposal
            temperature 2 = ebmkit's ``softmax(d / 2)``; the two proposals are the same), and 500
            checkerboard block-Gibbs sweeps of ebms ``BlockGibbs()`` (``energy.blocks()``): ebmkit has
            no lattice block Gibbs (its ``GibbsSampler`` needs a model ``gibbs_step``, which its
            ``IsingEnergy`` lacks), so that row is ebms alone.

Same target, checked: the Ising chains start from states equilibrated by 300 ebms block-Gibbs
sweeps; each GwG implementation then runs ``--check-steps`` steps (default 3000; ``--quick`` 1500)
and its mean energy over the 100 chains is compared with a further block-Gibbs run, in units of
the combined standard error (``|z| < 3`` expected when both target the same distribution). For the
RBM the final states of the timed runs are compared directly: ebms draws ``u < p`` from a
generator seeded 1 and ebmkit's ``torch.bernoulli`` on the global RNG seeded 1 consumes the same
uniforms the same way, so the chains coincide exactly (``state diff`` 0) whenever the products
round alike; the mean free energies are compared as for the Ising model otherwise.

Differences that cannot be removed: ebms GwG carries the current energy and gradient in its
state (one energy+gradient per step, analytic for the Ising model); ebmkit recomputes both at
the current point (two autograd evaluations per step). ebms draws Bernoulli variables as
``u < p`` from its ``torch.Generator``; ebmkit uses ``torch.bernoulli`` on the global RNG.

Run: ``python benchmarks/discrete_samplers.py [--quick] [--threads N]``.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import _common as C
import _speed_record as SR
import torch

D, H, B = 784, 500, 100
RBM_SWEEPS, ISING_STEPS, J, SIDE = 200, 500, 0.3, 25
TARGET = 1.5
PEERS = ("ebmkit",)


def _mean_se(e: torch.Tensor) -> tuple[float, float]:
    e = e.double()
    return float(e.mean()), float(e.std() / math.sqrt(e.numel()))


def _z(a: tuple[float, float], b: tuple[float, float]) -> float:
    return (a[0] - b[0]) / math.sqrt(a[1] ** 2 + b[1] ** 2)


def _time(impls: dict[str, Callable[[], torch.Tensor]], repeats: int) -> tuple[dict[str, float], dict[str, list[float]],
                                                                                dict[str, float]]:
    wall, cpu = C.time_alternating(impls, repeats=repeats, warmup=1)
    return {n: C.median(t) for n, t in wall.items()}, wall, {n: C.median(t) for n, t in cpu.items()}


def bench_rbm(repeats: int) -> dict[str, Any]:
    from ebms.models.rbm import BernoulliRBM
    from ebms.samplers.block_gibbs import BlockGibbs

    g = torch.Generator().manual_seed(0)
    model = BernoulliRBM(D, H)
    model.reset_parameters(g, std=0.05)
    x0 = (torch.rand(B, D, generator=g) < 0.5).float()
    finals: dict[str, torch.Tensor] = {}
    impls: dict[str, Callable[[], torch.Tensor]] = {}

    def ours(sampler: BlockGibbs, name: str) -> Callable[[], torch.Tensor]:
        def run() -> torch.Tensor:
            x = sampler.sample(model, x0, RBM_SWEEPS // sampler.sweeps, generator=torch.Generator().manual_seed(1))
            finals[name] = x
            return x

        return run

    impls["ebms BlockGibbs"] = ours(BlockGibbs(), "ebms BlockGibbs")
    impls["ebms BlockGibbs sweeps=10"] = ours(BlockGibbs(sweeps=10), "ebms BlockGibbs sweeps=10")
    skipped: dict[str, str] = {}
    try:
        from ebm.nets import RBM as KitRBM
        from ebm.samplers import GibbsSampler

        kit = KitRBM(D, H)
        with torch.no_grad():
            kit.W.copy_(model.weight.T)
            kit.b.copy_(model.visible_bias)
            kit.c.copy_(model.hidden_bias)
        sampler = GibbsSampler(RBM_SWEEPS)

        def theirs() -> torch.Tensor:
            torch.manual_seed(1)
            x = sampler.sample(kit, x0, steps=RBM_SWEEPS)
            finals["ebmkit GibbsSampler"] = x
            return x

        impls["ebmkit GibbsSampler"] = theirs
    except ImportError as exc:
        skipped["ebmkit GibbsSampler"] = f"not installed ({exc.name})"
    med, wall, cpu = _time(impls, repeats)
    with torch.no_grad():
        stats = {n: _mean_se(model(x)) for n, x in finals.items()}
    ref = stats["ebms BlockGibbs"]
    rows = {n: {"median_s": t, "all_s": wall[n], "cpu_median_s": cpu[n], "sweeps_per_s": RBM_SWEEPS / t,
                "mean_free_energy": stats[n][0], "free_energy_se": stats[n][1],
                "z_vs_ebms": _z(stats[n], ref) if n != "ebms BlockGibbs" else 0.0,
                "max_abs_state_diff_vs_ebms": float((finals[n] - finals["ebms BlockGibbs"]).abs().max())}
            for n, t in med.items()}
    if "ebmkit GibbsSampler" in med:
        kt = med["ebmkit GibbsSampler"]
        for n in rows:
            if n.startswith("ebms"):
                rows[n]["speedup_vs_ebmkit"] = C.speedup(kt, med[n])
                rows[n]["cpu_speedup_vs_ebmkit"] = C.speedup(cpu["ebmkit GibbsSampler"], cpu[n])
    return {"rows": rows, "skipped": skipped, "sweeps": RBM_SWEEPS, "repeats": repeats}


def bench_ising(repeats: int, check_steps: int) -> dict[str, Any]:
    from ebms.models.ising import IsingModel
    from ebms.samplers.block_gibbs import BlockGibbs
    from ebms.samplers.gwg import GibbsWithGradients

    model = IsingModel.lattice(SIDE, SIDE, coupling=J, boundary="free")
    g = torch.Generator().manual_seed(0)
    bg = BlockGibbs()
    s_eq = bg.sample(model, model.space.random(B, generator=g), 300, generator=g)  # equilibrated start
    gwg = GibbsWithGradients()
    impls: dict[str, Callable[[], torch.Tensor]] = {
        "ebms GwG": lambda: gwg.sample(model, s_eq, ISING_STEPS, generator=torch.Generator().manual_seed(1)),
        "ebms BlockGibbs (checkerboard)": lambda: bg.sample(model, s_eq, ISING_STEPS,
                                                           generator=torch.Generator().manual_seed(1)),
    }
    checks: dict[str, torch.Tensor] = {}
    skipped: dict[str, str] = {}
    kit_run: Callable[[int], torch.Tensor] | None = None
    try:
        from ebm.nets import IsingEnergy
        from ebm.samplers import GibbsWithGradients as KitGwG

        kit_energy, kit_sampler, x_eq = IsingEnergy(J), KitGwG(ISING_STEPS), (s_eq + 1) / 2

        def kit_run(steps: int) -> torch.Tensor:
            torch.manual_seed(1)
            return kit_sampler.sample(kit_energy, x_eq, steps=steps)

        impls["ebmkit GwG"] = lambda: kit_run(ISING_STEPS)
    except ImportError as exc:
        skipped["ebmkit GwG"] = f"not installed ({exc.name})"
    # same target: mean energy after check_steps from equilibrium, vs an independent block-Gibbs run
    checks["ebms GwG"] = gwg.sample(model, s_eq, check_steps, generator=torch.Generator().manual_seed(2))
    if kit_run is not None:
        checks["ebmkit GwG"] = 2 * kit_run(check_steps) - 1
    checks["ebms BlockGibbs (checkerboard)"] = bg.sample(model, s_eq, 100, generator=torch.Generator().manual_seed(3))
    with torch.no_grad():
        stats = {n: _mean_se(model(x)) for n, x in checks.items()}
        if kit_run is not None:  # ebmkit's own energy of its states agrees with ebms's (same model)
            energy_diff = float((kit_energy((checks["ebmkit GwG"] + 1) / 2) - model(checks["ebmkit GwG"])).abs().max())
        else:
            energy_diff = None
    ref = stats["ebms BlockGibbs (checkerboard)"]
    med, wall, cpu = _time(impls, repeats)
    rows = {}
    for n, t in med.items():
        rows[n] = {"median_s": t, "all_s": wall[n], "cpu_median_s": cpu[n], "steps_per_s": ISING_STEPS / t,
                   "check_mean_energy": stats[n][0], "check_energy_se": stats[n][1],
                   "z_vs_block_gibbs": _z(stats[n], ref) if n != "ebms BlockGibbs (checkerboard)" else 0.0}
    if "ebmkit GwG" in med:
        rows["ebms GwG"]["speedup_vs_ebmkit"] = C.speedup(med["ebmkit GwG"], med["ebms GwG"])
        rows["ebms GwG"]["cpu_speedup_vs_ebmkit"] = C.speedup(cpu["ebmkit GwG"], cpu["ebms GwG"])
    return {"rows": rows, "skipped": skipped, "steps": ISING_STEPS, "check_steps": check_steps,
            "max_energy_diff_ebmkit_vs_ebms": energy_diff, "repeats": repeats}


def main() -> None:
    def extra(p: Any) -> None:
        p.add_argument("--check-steps", type=int, default=None,
                       help="GwG steps from equilibrium for the same-target check (default 3000; --quick 1500)")

    args = C.parse_args(__doc__.splitlines()[0], extra)
    rec = SR.start("discrete_samplers", args)
    info = C.machine_info(PEERS)
    repeats = args.repeats or (2 if args.quick else 7)
    check_steps = args.check_steps or (1500 if args.quick else 3000)
    rbm = bench_rbm(repeats)
    ising = bench_ising(repeats, check_steps)

    print(f"Discrete samplers, float32, {B} chains, {info['threads']} thread(s), {repeats} repeats (median); "
          f"load avg at start {info['load_avg_1min_at_start']}")
    print("speedup = ebmkit median wall time / ebms median wall time (> 1: ebms faster)")
    header = ["workload", "impl", "median s", "per s", "speedup", "cpu speedup", "check mean E", "check z",
              "state diff"]
    table = []
    for n, r in rbm["rows"].items():
        table.append([f"RBM {D}x{H} block Gibbs", n, r["median_s"], f"{r['sweeps_per_s']:.1f} sweeps",
                      r.get("speedup_vs_ebmkit"), r.get("cpu_speedup_vs_ebmkit"), r["mean_free_energy"],
                      r["z_vs_ebms"], r["max_abs_state_diff_vs_ebms"]])
    for n, r in ising["rows"].items():
        unit = "sweeps" if "BlockGibbs" in n else "steps"
        table.append([f"Ising {SIDE}x{SIDE} free J={J}", n, r["median_s"], f"{r['steps_per_s']:.1f} {unit}",
                      r.get("speedup_vs_ebmkit"), r.get("cpu_speedup_vs_ebmkit"), r["check_mean_energy"],
                      r["z_vs_block_gibbs"], None])
    print(C.format_table(header, table))
    print(f"check: RBM, mean free energy of the final states, z against ebms BlockGibbs, and the largest "
          f"difference of the final states from ebms BlockGibbs's (0: the same chains); Ising, mean energy after "
          f"{check_steps} steps from equilibrium (100 block-Gibbs sweeps for the block-Gibbs row), z against "
          f"that block-Gibbs run; |z| < 3 expected for the same target. ebmkit's energy of the same Ising states "
          f"differs from ebms's by at most {ising['max_energy_diff_ebmkit_vs_ebms']}.")
    print("The Ising checkerboard block-Gibbs row has no ebmkit counterpart (no lattice block Gibbs there).")
    for part in (rbm, ising):
        for n, why in part["skipped"].items():
            print(f"skipped {n}: {why}")
    rbm_sp = rbm["rows"]["ebms BlockGibbs"].get("speedup_vs_ebmkit")
    gwg_sp = ising["rows"]["ebms GwG"].get("speedup_vs_ebmkit")
    for label, got in (("RBM block Gibbs (sweeps=1)", rbm_sp), ("Ising GwG", gwg_sp)):
        if got is not None:
            print(f"{label}: ebms speedup vs ebmkit {got:.2f}x [target >= {TARGET}x: "
                  f"{'meets' if got >= TARGET else 'MISSES'}]")

    record = {"bench": "discrete_samplers", "quick": args.quick, "machine": info, "rbm": rbm, "ising": ising,
              "workload": {"rbm": [D, H], "chains": B, "rbm_sweeps": RBM_SWEEPS, "ising_side": SIDE,
                           "ising_coupling": J, "ising_boundary": "free", "ising_steps": ISING_STEPS}}
    path = C.save_results("discrete_samplers", record, enabled=not args.no_save)
    SR.finish(rec, args, record, notes=(
        'Medians of the timed repeats (wall s), alternating in one process. speedup_vs_ebmkit = ebmkit median / ebms median (> 1: ebms faster). z columns: same-target checks (|z| < 3 expected). Shared 2-core machine: the ratios are the robust figures.'))
    if path is not None:
        C.note(f"[discrete_samplers] wrote {path}")

    def rnd(v: float | None) -> float | None:
        return None if v is None else round(v, 3)

    C.emit_final_line({
        "bench": "discrete_samplers", "quick": args.quick, "threads": info["threads"],
        "ratio": "their_time / ebms_time", "target": TARGET,
        "rbm_block_gibbs_speedup_vs_ebmkit": rnd(rbm_sp),
        "rbm_block_gibbs_sweeps10_speedup_vs_ebmkit": rnd(rbm["rows"]["ebms BlockGibbs sweeps=10"].get("speedup_vs_ebmkit")),
        "rbm_ebms_sweeps_per_s": round(rbm["rows"]["ebms BlockGibbs"]["sweeps_per_s"], 1),
        "ising_gwg_speedup_vs_ebmkit": rnd(gwg_sp),
        "ising_ebms_gwg_steps_per_s": round(ising["rows"]["ebms GwG"]["steps_per_s"], 1),
        "ising_ebms_block_gibbs_sweeps_per_s": round(ising["rows"]["ebms BlockGibbs (checkerboard)"]["steps_per_s"], 1),
        "max_abs_check_z": rnd(max(abs(r.get("z_vs_ebms", r.get("z_vs_block_gibbs", 0.0)))
                                   for r in [*rbm["rows"].values(), *ising["rows"].values()])),
    })


if __name__ == "__main__":
    main()
