"""Energy Matching against the PCD tutorial on MNIST at an equal budget: samples from noise and OOD AUROC, over seeds.

Workload (issue 28, item 1; Balcerak et al. 2025, *Energy Matching*, arXiv:2504.10612, scaled to this machine):
    data        MNIST in ``[-1, 1]`` with the recipes' data noise 0.005.
    arms        ``pcd``: the ``pcd-tutorial-mnist`` recipe (uniform restarts, 30 clamped SGLD steps per update,
                buffer 2,048, Adam 1e-4); ``energy_matching``: the ``energy-matching-mnist`` recipe (flow matching
                from N(0, I) for the first half of the steps, then plus contrastive divergence with 30-step chains,
                Adam 1e-3). The same energy for both: four conv stages ``[16, 32, 64, 64]``, no GroupNorm, SiLU.
    budget      the same ``train.steps`` (``--steps``), ``train.batch_size = 32`` and 30 Langevin steps per
                training step where chains run (PCD: every step; energy matching: its phase 2; its phase 1 runs no
                chains but differentiates the energy twice). The training times are recorded beside the figures.
    figures     as for the other image EBMs (``benchmarks/image_generation.py``): ``--n`` fresh samples from noise
                (``ebms sample``: PCD's chains of ``eval.sample_steps`` SGLD steps from uniform noise; energy
                matching's own path from N(0, I), :func:`ebms.cli.vision.transport_sample`) judged by the
                ``classifier-mnist`` network (seed 0): ``confident``, ``class_entropy``, ``score``, ``fd``; and the
                AUROC of ``-E`` against Fashion-MNIST, uniform noise, flips and quarter turns from each run's
                ``eval.json`` (``ebms train``'s evaluation, 95 % bootstrap intervals). Paired by seed: the
                difference energy matching - PCD of each figure with its 95 % Student-t interval
                (:func:`ebms.metrics.compare_over_seeds`).
    seeds       ``--seeds`` (default 0 1): ``run.seed`` (initialisation, data stream, draws).

Resumable: runs live under ``--out`` (default ``runs/energy-matching-mnist``), ``<arm>/seed<s>``; a run with its
``eval.json`` is kept, its samples are drawn once. ``--run-records NAME`` also commits each finished run's figures
as ``benchmarks/records/NAME-ARM-seedS.json`` (a full record of that run: command, commit, CPU, wall time) and takes a
run's figures from there when its folder is not on this machine, so that runs of hours finished on another machine
still count. ``--grid PATH`` writes a PNG of 50 samples of each arm (the first seed whose run is here).
Run: ``python benchmarks/energy_matching_mnist.py [--steps 300] [--seeds 0 1] [--n 200] [--record NAME]
[--grid docs/img/energy-matching-mnist.png] [--quick] [--arms pcd|energy_matching ...] [--run-records NAME]``. ``--quick``: 300 images, 4 steps, 3 Langevin steps per update, 40 samples (a
smoke test).
"""

from __future__ import annotations

import argparse
import fcntl
import json
import os
import statistics
import time
from pathlib import Path
from typing import Any

import _common as C
import image_generation as IG
import torch
from _record import RECORDS_DIR, ROOT, Recorder

from ebms.data import noise_images
from ebms.metrics import compare_over_seeds

ARMS: dict[str, str] = {"pcd": "pcd-tutorial-mnist", "energy_matching": "energy-matching-mnist"}
OOD = ("fashion-mnist", "noise", "flip", "rotate")
#: figure -> higher is better
COMPARED = {"confident": True, "fd": False, "auroc_fashion-mnist": True, "auroc_noise": True}


def overrides(arm: str, steps: int, quick: bool) -> list[str]:
    """The command-line overrides of one arm: the budget, and energy matching's phase switch at half the steps."""
    out = [f"train.steps={steps}", "vision.snapshot_every=0"]
    if arm == "energy_matching":
        out.append(f"objective.warmup_steps={steps // 2}")
    if quick:
        out += ["vision.limit=300", "eval.sample_steps=3", "eval.n_samples=16", 'vision.ood=["noise"]', "objective.k=3",
                "vision.ood_size=40", "data.n_test=200"]
    return out


def aurocs(run: Path) -> dict[str, dict[str, float]]:
    """``{set: {auroc, low, high}}`` of ``-E`` from the run's ``eval.json``."""
    ev = json.loads((run / "eval.json").read_text())
    return {r["set"]: {"auroc": r["auroc"], "low": r["auroc_low"], "high": r["auroc_high"]} for r in ev["ood"]}


def trace(run: Path) -> dict[str, Any]:
    """The training metrics the run's log records at each logged step (energy matching's ``ot`` falling in phase 1,
    the energies and their gap), keyed by step; ``diverged``: the guard's restores, if any."""
    out = {}
    for line in (run / "metrics.jsonl").read_text().splitlines():
        row = json.loads(line)
        if "metrics" in row:
            out[str(row["step"])] = {k: float(f"{v:.5g}") for k, v in row["metrics"].items()}
        elif row.get("event") == "diverged":  # the trainer's guard restored a checkpoint (and lowered the rate)
            out.setdefault("diverged", []).append(f"step {row['failed_step']}: {row['reason']}; lr -> {row['lr']:g}")
    return out


def flow_only(run: Path, n: int, seed: int = 0) -> torch.Tensor:
    """A diagnostic of an energy-matching run: ``n`` samples along its path from N(0, I) with the temperature held at
    zero throughout (the deterministic transport ``x <- x - dt * epsilon_max * grad E(x)`` alone, the samples'
    steps and horizon), to tell the flow's shapes from the Boltzmann regime's noise at the end of the path."""
    from ebms.cli.run import load_run

    cfg, model, data, _ = load_run(run)
    o, steps = cfg.objective, cfg.eval.sample_steps
    dt = o.k * cfg.sampler.step_size / steps
    x = torch.randn((n, *data.image_shape), generator=torch.Generator().manual_seed(seed))
    for _ in range(steps):
        xg = x.requires_grad_(True)
        (grad,) = torch.autograd.grad(model(xg).sum(), xg)
        x = (x - dt * o.epsilon_max * grad).detach()
    return x


def write_grid(path: Path, images: dict[str, torch.Tensor]) -> None:
    """A PNG of the first 50 samples of each arm, side by side."""
    from ebms.viz import image_grid, new_figure, save_figure

    fig = new_figure(figsize=(4.5 * len(images), 2.6))
    for ax, (name, x) in zip(fig.subplots(1, len(images)), images.items()):
        image_grid(x[:50].clamp(-1, 1) * 0.5 + 0.5, ax=ax, title=name, nrow=10)
    path.parent.mkdir(parents=True, exist_ok=True)
    save_figure(fig, path)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--steps", type=int, default=300, help="train.steps of both arms")
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1])
    p.add_argument("--n", type=int, default=200, help="samples per run, and test images of the reference")
    p.add_argument("--out", type=Path, default=None, help="runs folder (default runs/energy-matching-mnist)")
    p.add_argument("--record", default=None, help="write benchmarks/records/NAME.json")
    p.add_argument("--grid", type=Path, default=None, help="write a PNG of samples of each arm (first seed)")
    p.add_argument("--quick", action="store_true", help="300 images, 4 steps, 40 samples: a smoke test")
    p.add_argument("--arms", nargs="+", choices=list(ARMS), default=list(ARMS),
                   help="train only these arms (to run the arms in two processes; the record needs both)")
    p.add_argument("--run-records", default=None, metavar="NAME",
                   help="write each finished run's figures to benchmarks/records/NAME-ARM-seedS.json, and take a "
                        "run's figures from that record where its folder is not on this machine")
    args = p.parse_args(argv)
    if set(args.arms) != set(ARMS) and (args.record or args.grid):
        raise SystemExit(f"--arms: --record and --grid compare both arms; got only {args.arms} (run without --arms "
                         "once both have trained: finished runs are kept)")
    if args.run_records is not None and (not args.run_records or "/" in args.run_records):
        raise SystemExit(f"--run-records: expected a record name without '/'; got {args.run_records!r}")
    if len(set(args.seeds)) != len(args.seeds):
        raise SystemExit(f"--seeds: expected distinct seeds; got {args.seeds}")
    if args.steps < 2:
        raise SystemExit(f"--steps: expected at least 2 (energy matching spends half in each phase); got {args.steps}")
    if args.quick:
        args.steps, args.n = 4, 40
    out = args.out or ROOT / "runs" / ("energy-matching-mnist-quick" if args.quick else "energy-matching-mnist")
    settings = {"arms": {a: [r, overrides(a, args.steps, args.quick)] for a, r in ARMS.items()}, "steps": args.steps,
                "n": args.n, "quick": args.quick, "judge": "classifier-mnist, seed 0",
                "threads": int(os.environ.get("OMP_NUM_THREADS", "0") or 0)}
    rec = Recorder(args.record, seeds=args.seeds, settings=settings) if args.record else None
    plain = json.loads(json.dumps(settings))  # as a record holds them (tuples become lists), to compare with one
    t0 = time.perf_counter()
    small = ["vision.limit=300", "eval.sample_steps=3", "eval.n_samples=16", "vision.ood=[]", "data.n_test=200",
             "train.steps=4"] if args.quick else []
    out.mkdir(parents=True, exist_ok=True)
    with open(out / "judge.lock", "w") as lock:  # one process trains the shared judge; one per --arms waits for it
        fcntl.flock(lock, fcntl.LOCK_EX)
        judge = IG.Judge(IG.train(out / "judge", "classifier-mnist", small), args.n)
    floor = {"test": judge.judge(judge.train),
             "noise": judge.judge(noise_images(args.n, tuple(judge.test.shape[1:]), torch.Generator().manual_seed(0)))}
    per: dict[str, dict[int, dict[str, Any]]] = {a: {} for a in ARMS}
    grid: dict[str, torch.Tensor] = {}
    for seed in args.seeds:
        for arm in args.arms:
            recipe = ARMS[arm]
            part = f"{args.run_records}-{arm}-seed{seed}" if args.run_records else None
            kept = RECORDS_DIR / f"{part}.json" if part else None
            if kept is not None and kept.is_file() and not (out / arm / f"seed{seed}" / recipe / "eval.json").is_file():
                kept_record = json.loads(kept.read_text())
                same = ("arms", "steps", "n", "quick", "judge")
                if any(kept_record["settings"].get(k) != plain[k] for k in same):
                    raise SystemExit(f"{kept.name}: recorded with other settings than this command's "
                                     "(steps, n, overrides); pass another --run-records name")
                per[arm][seed] = kept_record["figures"]
                C.note(f"[energy_matching_mnist] {arm}, seed {seed}: its run is not here; figures from {kept.name}")
                continue
            C.note(f"[energy_matching_mnist] {arm}, seed {seed}")
            run_rec = Recorder(part, seeds=[seed], settings=settings | {"seed": seed}) if part else None
            t1 = time.perf_counter()
            run = IG.train(out / arm / f"seed{seed}", recipe, [*overrides(arm, args.steps, args.quick), f"run.seed={seed}"])
            x = IG.samples(run, args.n)
            grid.setdefault(arm, x)  # the first seed whose run is on this machine
            ood = aurocs(run)
            per[arm][seed] = {**judge.judge(x), **{f"auroc_{k}": v["auroc"] for k, v in ood.items()}, "ood": ood,
                              "run": str(run.relative_to(ROOT) if run.is_relative_to(ROOT) else run),
                              "seconds": time.perf_counter() - t1,
                              "train_seconds": C.logged_seconds(run / "metrics.jsonl"),
                              "landscape": IG.landscape(run, judge.test), "trace": trace(run)}
            if arm == "energy_matching":
                per[arm][seed]["flow_only"] = judge.judge(flow_only(run, args.n, seed))
            C.note(f"[energy_matching_mnist] {arm}, seed {seed}: confident {per[arm][seed]['confident']:.3f}, "
                   f"fd {per[arm][seed]['fd']:.4g}")
            if run_rec is not None and kept is not None and not kept.is_file():
                run_rec.write(per[arm][seed], notes=f"One run of the comparison ({arm}, seed {seed}), kept so that "
                              "the comparison survives the loss of its run folder; the figures as in the "
                              "comparison's record (its notes say what each means).")
    if set(args.arms) != set(ARMS):
        return 0
    figures = [k for k in (*IG.FIGURES, *(f"auroc_{o}" for o in OOD)) if all(k in per[a][s] for a in per for s in args.seeds)]
    rows = [["training images", "-", *(f"{floor['test'][k]:.4g}" if k in floor["test"] else "-" for k in figures)],
            ["uniform noise", "-", *(f"{floor['noise'][k]:.4g}" if k in floor["noise"] else "-" for k in figures)]]
    rows += [[a, str(s), *(f"{per[a][s][k]:.4g}" for k in figures)] for a in per for s in args.seeds]
    rows += [["energy_matching, temperature 0", str(s), *(f"{per['energy_matching'][s]['flow_only'][k]:.4g}"
                                                          if k in IG.FIGURES else "-" for k in figures)]
             for s in args.seeds]
    print(C.format_table(["samples", "seed", *figures], rows))
    comparisons: dict[str, Any] = {}
    if len(args.seeds) > 1:
        for key, higher in COMPARED.items():
            if key in figures:
                comparisons[key] = compare_over_seeds(
                    [per["energy_matching"][s][key] for s in args.seeds], [per["pcd"][s][key] for s in args.seeds],
                    seeds=args.seeds, name_a="energy matching", name_b="PCD", metric=key,
                    higher_is_better=higher).to_dict()
                print(comparisons[key]["sentence"])
    means = {a: {k: statistics.mean(per[a][s][k] for s in args.seeds) for k in figures} for a in per}
    if args.grid is not None and set(grid) != set(ARMS):
        C.note(f"--grid: no run of {sorted(set(ARMS) - set(grid))} is on this machine; no grid written")
    elif args.grid is not None:
        write_grid(args.grid, {"PCD tutorial" if a == "pcd" else "energy matching": x for a, x in grid.items()})
    if rec is not None:
        rec.write({"floor": floor, "per_run": {a: {f"seed{s}": v for s, v in per[a].items()} for a in per},
                   "run_records": {a: {f"seed{s}": f"{args.run_records}-{a}-seed{s}" for s in args.seeds} for a in per}
                   if args.run_records else None,
                   "means": means, "energy_matching_minus_pcd": comparisons},
                  notes="Samples from noise of each arm's run (PCD: SGLD chains from uniform noise; energy matching: "
                        "its own path from N(0, I)), judged by the classifier-mnist network (seed 0): confident = "
                        "share with top class probability >= 0.9; class_entropy = entropy of the mean posterior "
                        "(nats; log 10 = 2.303 covers all digits); score = exp E KL(p(y|x) || p(y)); fd = Fréchet "
                        "distance of the classifier's pooled features against the same number of test images; floor: "
                        "training images and uniform noise judged the same way. auroc_SET: AUROC of -E, test images "
                        "against SET, from ebms train's eval.json (ood: with its 95 % bootstrap interval). seconds: "
                        "this command's train + sample; train_seconds: the training time the run's log records, on a "
                        "shared 2-core machine. landscape: mean energy and input-gradient norm at 64 noise and 64 test "
                        "images. flow_only (energy matching): the same judge on samples of its path from N(0, I) with the temperature held at 0 (the transport alone). trace: the training metrics logged every 50 steps. energy_matching_minus_pcd: paired by seed, 95 % Student-t interval.")
    print(json.dumps({"bench": "energy_matching_mnist", "seconds": round(time.perf_counter() - t0, 1), "means": means}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
