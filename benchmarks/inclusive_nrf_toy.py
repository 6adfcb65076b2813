"""Inclusive-NRF against PCD on 2-D toys with an exact density: test NLL at an equal budget, over paired seeds.

Workload (Song & Ou 2018, *Learning NRFs with inclusive auxiliary generators*, monograph Algorithms 7-8,
scaled to this machine):
    data        ``eight_gaussians`` (and ``--data`` others with a density), the toy set's default noise.
    model       the same MLP energy for both, ``model.hidden = [128, 128]``, SiLU.
    budget      the same ``train.steps``, ``train.batch_size = 256``, Adam ``lr = 2e-3`` with the cosine
                schedule, and ``objective.k = 20`` Langevin steps of ``sampler.step_size = 0.01`` (ULA:
                ``x - 0.005 grad E + 0.1 xi``) per training step: PCD's persistent chains (the ``demo``
                recipe: 10,000 chains, 5 % restarts) and inclusive-NRF's revision of fresh generator draws
                (the same step ``delta = 0.005`` on ``x`` and on the latent ``h``). Inclusive-NRF also trains
                its generator (an MLP ``latent_dim -> [128, 128] -> 2``, the same optimiser) and pays its
                forward and backward in each revision step; the wall times are recorded beside the figures.
    figure      the test NLL that ``ebms train`` / ``ebms eval`` report (the energy normalised on a 400 x 400
                grid, 20,000 test points), per seed, and the paired difference inclusive-NRF - PCD with its
                95 % Student-t interval (``ebms.metrics.compare_over_seeds``); the true density's NLL on the
                same points for scale. Also the generator's own NLL ``-log q(x)`` on 2,000 fresh points of the
                toy, ``q(x) = int N(h; 0, I) N(x; g(h), sigma^2 I) dh`` by quadrature on a 200 x 200 grid of
                ``h`` over [-6, 6]^2 (``latent_dim = 2``).
    seeds       ``--seeds`` (default 0 .. 4): ``run.seed`` (initialisation, data stream, draws).

``--pcd-from energy_matching_toy`` takes PCD's per-seed figures on ``eight_gaussians`` from that record instead of
training PCD again: the same command lines (checked), and the runs are deterministic (seeds 0 and 1 retrained here
gave the recorded NLLs to every printed digit).

Run: ``python benchmarks/inclusive_nrf_toy.py [--steps 2000] [--seeds 0 1 2 3 4] [--data eight_gaussians]
[--pcd-from RECORD] [--record NAME] [--quick]``. The runs go to ``benchmarks/results/inclusive_nrf_toy/``
(not committed).
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import math
import time
from pathlib import Path

import _common as C
import torch
from _record import ROOT, Recorder

from ebms.cli.main import main as ebms
from ebms.data.toy import get_toy
from ebms.metrics import compare_over_seeds
from ebms.objectives import LatentGaussianGenerator

OUT = ROOT / "benchmarks" / "results" / "inclusive_nrf_toy"
COMMON = ["data.n_test=20000", "model.hidden=[128, 128]", "model.activation=silu", "sampler.kind=ula",
          "sampler.step_size=0.01", "objective.k=20", "train.batch_size=256", "train.lr=2e-3",
          "train.lr_schedule=cosine", "eval.resolution=400", "eval.n_samples=500", "eval.sample_steps=200",
          "run.progress=false"]
#: the generator (the ``inclusive-nrf-toy`` recipe)
SETTINGS = {"latent_dim": 2, "generator_hidden": "[128, 128]", "generator_sigma": 0.3, "revision": "sgld"}
METHODS = {
    "pcd": ["objective.kind=pcd", "objective.buffer_size=10000", "objective.reinit_prob=0.05"],
    "inclusive_nrf": ["objective.kind=inclusive-nrf", *(f"objective.{k}={v}" for k, v in SETTINGS.items())],
}


def generator_nll(run_dir: Path, data: str, n: int = 2000, grid: int = 200) -> float:
    """``-mean log q(x)`` of the trained generator on ``n`` fresh toy points (quadrature over a 2-D latent grid)."""
    from safetensors.torch import load_file

    ckpt = sorted((run_dir / "checkpoints").glob("ckpt-*.safetensors"))[-1]
    state = {k.removeprefix("objective/q."): v for k, v in load_file(str(ckpt)).items() if k.startswith("objective/q.")}
    q = LatentGaussianGenerator.mlp(2, latent_dim=2, hidden=(128, 128), sigma=float(SETTINGS["generator_sigma"]))
    q.load_state_dict(state)
    x = get_toy(data).sample(n, generator=torch.Generator().manual_seed(12345)).double()
    side = torch.linspace(-6.0, 6.0, grid, dtype=torch.float64)
    h = torch.cartesian_prod(side, side)
    log_w = -0.5 * h.pow(2).sum(1) - math.log(2 * math.pi) + 2 * math.log(float(side[1] - side[0]))
    with torch.no_grad():
        mu = q.double().mean(h)
    s2 = q.sigma**2
    out = []
    for chunk in x.split(250):
        d2 = torch.cdist(chunk, mu).pow(2)
        out.append(torch.logsumexp(log_w - 0.5 * d2 / s2, dim=1) - math.log(2 * math.pi * s2))
    return float(-torch.cat(out).mean())


def true_nll(data: str, n: int = 2000) -> float:
    toy = get_toy(data)
    return float(-toy.log_prob(toy.sample(n, generator=torch.Generator().manual_seed(12345))).mean())


def run(method: str, seed: int, steps: int, data: str, out: Path) -> dict[str, float]:
    """Train one run through the command line; its ``eval.json`` NLLs and the wall time."""
    name = f"{data}-{method}-s{seed}"
    args = ["train", f"run.out_dir={out}", f"run.name={name}", f"run.seed={seed}", f"train.steps={steps}",
            f"data.name={data}", f"train.log_every={max(1, steps // 10)}", f"train.checkpoint_every={steps}",
            *COMMON, *METHODS[method], "--overwrite"]
    t0 = time.perf_counter()
    with contextlib.redirect_stdout(io.StringIO()):
        rc = ebms(args)
    if rc != 0:
        raise RuntimeError(f"ebms {' '.join(args)} exited {rc}")
    wall = round(time.perf_counter() - t0, 1)
    ev = json.loads((out / name / "eval.json").read_text())
    row = {"nll": float(ev["model_nll"]), "nll_stderr": float(ev["model_nll_stderr"]),
           "true_nll": float(ev["true_nll"]), "edge_mass": float(ev["edge_mass"]), "wall_s": wall}
    if method == "inclusive_nrf":
        row["generator_nll"] = round(generator_nll(out / name, data), 4)
    return row


def _pcd_from(name: str, steps: int, seeds: list[int]) -> dict[int, dict[str, float]]:
    """PCD's rows of an earlier record of the same runs (``energy_matching_toy``: same data, net, budget, eval)."""
    rec = json.loads((ROOT / "benchmarks" / "records" / f"{name}.json").read_text())
    theirs = {*rec["settings"]["common"], *rec["settings"]["methods"]["pcd"]}
    if rec["settings"]["steps"] != steps or theirs != {*COMMON, *METHODS["pcd"], "data.name=eight_gaussians"}:
        raise SystemExit(f"--pcd-from {name}: its PCD runs differ from these (steps or settings)")
    rows = dict(zip(rec["seeds"], rec["figures"]["per_seed"]["pcd"]))
    missing = [s for s in seeds if s not in rows]
    if missing:
        raise SystemExit(f"--pcd-from {name}: no PCD run for seeds {missing}")
    return rows


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--steps", type=int, default=2000)
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2, 3, 4])
    p.add_argument("--data", nargs="+", default=["eight_gaussians"])
    p.add_argument("--record", default=None)
    p.add_argument("--quick", action="store_true", help="20 steps, two seeds, no record")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--out", type=Path, default=OUT, help="where the runs go (not committed)")
    p.add_argument("--pcd-from", default=None, metavar="RECORD",
                   help="take PCD's per-seed figures from this record (energy_matching_toy: the same PCD runs, "
                        "same settings and steps) instead of training PCD again")
    args = p.parse_args(argv)
    if args.quick:
        args.steps, args.seeds, args.record = 20, args.seeds[:2], None
    torch.set_num_threads(args.threads)
    rec = Recorder(args.record, seeds=args.seeds, settings={
        "steps": args.steps, "data": args.data, "common": COMMON, "methods": METHODS,
        "pcd_from_record": args.pcd_from}) if args.record else None
    out = args.out / ("quick" if args.quick else f"steps{args.steps}")
    reused = _pcd_from(args.pcd_from, args.steps, args.seeds) if args.pcd_from else None
    figures: dict[str, dict] = {}
    for data in args.data:
        per: dict[str, list[dict[str, float]]] = {m: [] for m in METHODS}
        for seed in args.seeds:
            for m in METHODS:
                if m == "pcd" and reused is not None and data == "eight_gaussians":
                    per[m].append(reused[seed])
                    continue
                per[m].append(run(m, seed, args.steps, data, out))
                with (out / "progress.jsonl").open("a") as f:  # what finished, should the sweep be cut short
                    f.write(json.dumps({"data": data, "seed": seed, "method": m, **per[m][-1]}) + "\n")
                C.note(f"{data} seed {seed} {m}: NLL {per[m][-1]['nll']:.4f} ({per[m][-1]['wall_s']} s)")
        cmp = compare_over_seeds([r["nll"] for r in per["inclusive_nrf"]], [r["nll"] for r in per["pcd"]],
                                 seeds=args.seeds, name_a="inclusive-NRF", name_b="PCD",
                                 metric="test NLL (nats)", higher_is_better=False)
        rows = [[m, " / ".join(f"{r['nll']:.4f}" for r in per[m]), " / ".join(f"{r['wall_s']:.0f}" for r in per[m])]
                for m in METHODS]
        rows.append(["generator -log q(x)", " / ".join(f"{r['generator_nll']:.4f}" for r in per["inclusive_nrf"]),
                     ""])
        rows.append(["true density", " / ".join(f"{r['true_nll']:.4f}" for r in per["pcd"]), ""])
        print(f"== {data}")
        print(C.format_table(["method", "test NLL per seed (nats)", "wall s per seed"], rows))
        print(cmp.sentence())
        figures[data] = {"per_seed": per, "inclusive_nrf_minus_pcd": cmp.to_dict(),
                         "mean_nll": {m: sum(r["nll"] for r in per[m]) / len(per[m]) for m in METHODS},
                         "mean_generator_nll": sum(r["generator_nll"] for r in per["inclusive_nrf"]) / len(args.seeds),
                         "true_nll": per["pcd"][0]["true_nll"], "true_nll_generator_points": true_nll(data)}
    if rec is not None:
        rec.write(figures=figures,
                  notes="test NLL (grid-normalised, 20,000 test points) after the same steps, batch, network, "
                        "optimiser and Langevin steps per training step; difference = inclusive-NRF - PCD. "
                        "generator_nll: -log q(x) of inclusive-NRF's generator on 2,000 fresh toy points "
                        "(true_nll_generator_points: the true density's on the same points).")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
