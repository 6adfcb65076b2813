"""Electric against its own noise, and the uniform share of the noise, over seeds (issue 26, item 2).

Trains the packaged recipe ``electric-shakespeare`` (Tiny Shakespeare characters, 3,000 steps) once
per seed and per arm through the command line; an arm is one value of ``electric.uniform_mix``
(:class:`ebms.objectives.ElectricNCE`'s ``uniform_mix``: the share of a uniform law over the
characters mixed into the jointly trained two-tower noise). Every run's ``eval.json`` gives, on the
test lines, the one-pass pseudo-log-likelihood per character and how often the model prefers a line
over the same line with one character replaced uniformly at random (``prefers``), for Electric and
for its noise (``noise_prefers``).

Why the arm: NCE trains the energy only where the data and the noise put mass. A jointly trained
noise soon draws only plausible characters, so the energy's score of an implausible one is never
trained, and the corruption test asks exactly about such characters. With a uniform share the
implausible characters stay among the negatives; the NCE logit reads the mixed law, so the estimator
is still consistent.

Comparisons (``ebms.metrics.compare_over_seeds``, paired by seed, 95 % Student-t interval):
Electric minus its noise in each arm, and each arm minus the first (``--mix`` order) on Electric's
figures.

Resumable: a run with an ``eval.json`` is kept; one with checkpoints continues (``--resume``). The
runs live under ``--out`` (default ``runs/electric-noise``), ``mix<e>/seed<s>``.

Run: ``python benchmarks/electric_noise.py [--mix 0 0.1] [--seeds 0 1 2] [--steps N] [--record NAME]
[--quick]``. ``--quick``: 30 steps, 1 seed (a smoke test).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

import _common as C
from _record import Recorder

from ebms.cli.main import main as ebms_main
from ebms.metrics.seeds import compare_over_seeds

ROOT = Path(__file__).resolve().parents[1]
RECIPE = "electric-shakespeare"
FIGURES = ("pll", "noise_pll", "prefers", "noise_prefers")


def run_dir(out: Path, mix: float, seed: int) -> Path:
    return out / f"mix{mix:g}" / f"seed{seed}"


def train(out: Path, mix: float, seed: int, steps: int | None) -> dict[str, Any]:
    """The run's test figures (training and evaluating it first unless its ``eval.json`` exists)."""
    folder = run_dir(out, mix, seed)
    report = folder / RECIPE / "eval.json"
    if not report.is_file():
        more = [f"train.steps={steps}"] if steps else []
        resume = ["--resume"] if (folder / RECIPE / "checkpoints").is_dir() else []
        t0 = time.perf_counter()
        code = ebms_main(["train", RECIPE, f"run.out_dir={folder}", f"run.seed={seed}",
                          f"electric.uniform_mix={mix}", f"run.progress={str(sys.stderr.isatty()).lower()}",
                          *more, *resume])
        if code != 0:
            raise SystemExit(f"ebms train {RECIPE} (mix {mix}, seed {seed}) failed with exit status {code}")
        (folder / "wall_s.txt").write_text(f"{time.perf_counter() - t0:.1f}\n")
    test = json.loads(report.read_text())["figures"]["test"]
    wall = folder / "wall_s.txt"
    return {**{k: test[k] for k in FIGURES}, "sentences": test["sentences"],
            "wall_s": float(wall.read_text()) if wall.is_file() else None}


def compare(per: dict[float, dict[int, dict[str, Any]]], seeds: list[int]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    mixes = list(per)
    for mix in mixes:
        rows = [per[mix][s] for s in seeds]
        out[f"mix{mix:g}: electric - noise, prefers"] = compare_over_seeds(
            [r["prefers"] for r in rows], [r["noise_prefers"] for r in rows], seeds=seeds, name_a="Electric",
            name_b="its noise", metric="prefers", higher_is_better=True).to_dict()
    first = mixes[0]
    for mix in mixes[1:]:
        for key in ("prefers", "pll", "noise_prefers"):
            out[f"mix{mix:g} - mix{first:g}: {key}"] = compare_over_seeds(
                [per[mix][s][key] for s in seeds], [per[first][s][key] for s in seeds], seeds=seeds,
                name_a=f"uniform_mix={mix:g}", name_b=f"uniform_mix={first:g}", metric=key,
                higher_is_better=True).to_dict()
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--mix", type=float, nargs="+", default=[0.0, 0.1], help="electric.uniform_mix arms")
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    p.add_argument("--steps", type=int, default=None, help="train.steps (default: the recipe's 3000)")
    p.add_argument("--out", type=Path, default=None, help="runs folder (default runs/electric-noise)")
    p.add_argument("--record", default=None, help="write benchmarks/records/NAME.json")
    p.add_argument("--quick", action="store_true", help="30 steps, seed 0, runs under runs/electric-noise-quick")
    args = p.parse_args(argv)
    if args.quick:
        args.steps, args.seeds = 30, [0]
    if len(set(args.mix)) != len(args.mix):
        raise SystemExit(f"--mix: expected distinct values; got {args.mix}")
    out = args.out or ROOT / "runs" / ("electric-noise-quick" if args.quick else "electric-noise")
    rec = Recorder(args.record, seeds=args.seeds, settings={
        "recipe": RECIPE, "mix": args.mix, "steps": args.steps or 3000, "quick": args.quick,
        "threads": int(os.environ.get("OMP_NUM_THREADS", "0") or 0)}) if args.record else None
    per: dict[float, dict[int, dict[str, Any]]] = {m: {} for m in args.mix}
    for seed in args.seeds:  # seed-major: the first seed's arms finish first
        for mix in args.mix:
            C.note(f"[electric_noise] uniform_mix {mix:g}, seed {seed}")
            per[mix][seed] = train(out, mix, seed, args.steps)
    rows = [[f"{m:g}", str(s), *(f"{per[m][s][k]:.4f}" for k in FIGURES)] for m in args.mix for s in args.seeds]
    print(C.format_table(["uniform_mix", "seed", *FIGURES], rows))
    comparisons = compare(per, args.seeds) if len(args.seeds) > 1 else {}
    for c in comparisons.values():
        print(c["sentence"])
    if rec is not None:
        rec.write({"per_run": {f"mix{m:g}": {f"seed{s}": v for s, v in per[m].items()} for m in args.mix},
                   "comparisons": comparisons},
                  notes="Test lines of Tiny Shakespeare (characters): pll = one-pass pseudo-log-likelihood per "
                        "character (Electric's is unnormalised), prefers = share of lines scored above the same "
                        "line with one character replaced uniformly at random, for Electric and its two-tower "
                        "noise. comparisons: compare_over_seeds, paired by seed, 95 % Student-t interval. "
                        "wall_s: training + evaluation on a shared 2-core machine (load-dependent).")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
