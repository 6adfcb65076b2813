"""Energy Matching against PCD on a 2-D toy with an exact density: test NLL at an equal budget, over seeds.

Workload (Balcerak et al. 2025, *Energy Matching*, arXiv:2504.10612, scaled to this machine):
    data        ``eight_gaussians`` (the toy set's default noise), the density known in closed form.
    model       the same MLP energy for both, ``model.hidden = [128, 128]``, SiLU.
    budget      the same ``train.steps``, ``train.batch_size = 256``, Adam ``lr = 2e-3`` with the cosine
                schedule, and ``objective.k = 20`` Langevin steps of ``sampler.step_size = 0.01`` (ULA) per
                training step for both: PCD's persistent chains (the ``demo`` recipe) and Energy Matching's
                phase-2 chains (half from data, half from noise). Energy Matching spends the first half of the
                steps in phase 1 (flow matching alone, no chains) and adds the flow term's double backward;
                the wall times are recorded beside the figures.
    energy      matching: ``epsilon_max``, ``tau_star``, ``cd_weight`` as in ``SETTINGS`` (the
                ``energy-matching-toy`` recipe), exact mini-batch OT pairs with N(0, I) noise.
    figure      the test NLL that ``ebms train`` / ``ebms eval`` report (the energy normalised on a 400 x 400
                grid, 20,000 test points), per seed, and the paired difference energy matching - PCD with
                its 95 % Student-t interval (``ebms.metrics.compare_over_seeds``); the true density's NLL on
                the same points for scale.
    seeds       ``--seeds`` (default 0 .. 5): ``run.seed`` (initialisation, data stream, draws).

Run: ``python benchmarks/energy_matching_toy.py [--steps 2000] [--seeds 0 1 2 3 4 5] [--record NAME] [--quick]``.
The runs go to ``benchmarks/results/energy_matching_toy/`` (not committed).
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import time
from pathlib import Path

import _common as C
import torch
from _record import ROOT, Recorder

from ebms.cli.main import main as ebms
from ebms.metrics import compare_over_seeds

OUT = ROOT / "benchmarks" / "results" / "energy_matching_toy"
COMMON = ["data.name=eight_gaussians", "data.n_test=20000", "model.hidden=[128, 128]", "model.activation=silu",
          "sampler.kind=ula", "objective.k=20", "train.batch_size=256", "train.lr=2e-3",
          "train.lr_schedule=cosine", "eval.resolution=400", "eval.n_samples=500", "eval.sample_steps=200",
          "run.progress=false"]
SETTINGS = {"epsilon_max": 1.0, "tau_star": 0.9, "cd_weight": 10.0, "flow_weighting": "true"}
#: the phase-2 Langevin step dt: 20 steps of 0.1 span the paper's toy horizon (200 steps of 0.01) at PCD's cost
EM_DT = 0.1
METHODS = {
    "pcd": ["objective.kind=pcd", "objective.buffer_size=10000", "objective.reinit_prob=0.05", "sampler.step_size=0.01"],
    "energy_matching": ["objective.kind=energy-matching", *(f"objective.{k}={v}" for k, v in SETTINGS.items()),
                        f"sampler.step_size={EM_DT}"],
}


def run(method: str, seed: int, steps: int, out: Path) -> dict[str, float]:
    """Train one run through the command line; its ``eval.json`` NLLs and the wall time."""
    extra = [*METHODS[method], f"objective.warmup_steps={steps // 2}"] if method == "energy_matching" else METHODS[method]
    args = ["train", f"run.out_dir={out}", f"run.name={method}-s{seed}", f"run.seed={seed}", f"train.steps={steps}",
            f"train.log_every={max(1, steps // 10)}", f"train.checkpoint_every={steps}", *COMMON, *extra, "--overwrite"]
    t0 = time.perf_counter()
    with contextlib.redirect_stdout(io.StringIO()):
        rc = ebms(args)
    if rc != 0:
        raise RuntimeError(f"ebms {' '.join(args)} exited {rc}")
    ev = json.loads((out / f"{method}-s{seed}" / "eval.json").read_text())
    return {"nll": float(ev["model_nll"]), "nll_stderr": float(ev["model_nll_stderr"]),
            "true_nll": float(ev["true_nll"]), "edge_mass": float(ev["edge_mass"]),
            "wall_s": round(time.perf_counter() - t0, 1)}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--steps", type=int, default=2000)
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2, 3, 4, 5])
    p.add_argument("--record", default=None)
    p.add_argument("--quick", action="store_true", help="20 steps, two seeds, no record")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--out", type=Path, default=OUT, help="where the runs go (not committed)")
    args = p.parse_args(argv)
    if args.quick:
        args.steps, args.seeds, args.record = 20, args.seeds[:2], None
    torch.set_num_threads(args.threads)
    rec = Recorder(args.record, seeds=args.seeds, settings={
        "steps": args.steps, "common": COMMON, "methods": METHODS, "energy_matching_warmup_steps": args.steps // 2,
    }) if args.record else None
    out = args.out / ("quick" if args.quick else f"steps{args.steps}")
    per: dict[str, list[dict[str, float]]] = {m: [] for m in METHODS}
    for seed in args.seeds:
        for m in METHODS:
            per[m].append(run(m, seed, args.steps, out))
            C.note(f"seed {seed} {m}: NLL {per[m][-1]['nll']:.4f} ({per[m][-1]['wall_s']} s)")
    cmp = compare_over_seeds([r["nll"] for r in per["energy_matching"]], [r["nll"] for r in per["pcd"]],
                             seeds=args.seeds, name_a="energy matching", name_b="PCD",
                             metric="test NLL (nats)", higher_is_better=False)
    rows = [[m, " / ".join(f"{r['nll']:.4f}" for r in per[m]), " / ".join(f"{r['wall_s']:.0f}" for r in per[m])]
            for m in METHODS]
    rows.append(["true density", " / ".join(f"{r['true_nll']:.4f}" for r in per["pcd"]), ""])
    print(C.format_table(["method", "test NLL per seed (nats)", "wall s per seed"], rows))
    print(cmp.sentence())
    if rec is not None:
        rec.write(figures={"per_seed": per, "energy_matching_minus_pcd": cmp.to_dict(),
                           "mean_nll": {m: sum(r["nll"] for r in per[m]) / len(per[m]) for m in METHODS},
                           "true_nll": per["pcd"][0]["true_nll"]},
                  notes="test NLL of eight_gaussians (grid-normalised, 20,000 test points) after the same steps, "
                        "batch, network and Langevin steps per training step; difference = energy matching - PCD.")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
