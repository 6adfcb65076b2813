"""Electric against its own noise, and the uniform share of the noise, over seeds (issue 26, item 2).

Trains the packaged recipe ``electric-shakespeare`` (Tiny Shakespeare characters, 3,000 steps) once
per seed and per arm through the command line; an arm ``MIX`` or ``MIX:bernoulli`` is a value of
``electric.uniform_mix`` (:class:`ebms.objectives.ElectricNCE`'s ``uniform_mix``: the share of a
uniform law over the characters mixed into the jointly trained two-tower noise), with the replaced
positions drawn as ``electric.positions = fixed`` (``ceil(0.15 l)`` per line) or ``bernoulli``
(each character independently). Every run's ``eval.json`` gives, on the
test lines, the one-pass pseudo-log-likelihood per character and how often the model prefers a line
over the same line with one character replaced uniformly at random (``prefers``), for Electric and
for its noise (``noise_prefers``).

Why the arm: NCE trains the energy only where the data and the noise put mass. A jointly trained
noise soon draws only plausible characters, so the energy's score of an implausible one is never
trained, and the corruption test asks exactly about such characters. With a uniform share the
implausible characters stay among the negatives; the NCE logit reads the mixed law, so the estimator
is still consistent.

Why ``bernoulli``: with a fixed count the labels of one line depend on each other, and the energy,
which reads the whole noised line in one pass, learns it: a visibly replaced character makes the other
positions more likely data and raises their scores, which the corruption test then counts in the
corrupted line's favour. Independent positions remove the dependence.

Why ``freezeN`` (``MIX:POSITIONS:freezeN``, ``electric.noise_steps=N``): the jointly trained noise ends as strong as
the energy on the corruption test, and a classifier against a noise that keeps improving learns the residual of a
moving target. A noise trained for ``N`` steps and then frozen is one fixed law of the quality it reached, the
fixed-noise NCE of Gutmann & Hyvärinen, which Electric should beat once the energy has learnt more than the noise.

Comparisons (``ebms.metrics.compare_over_seeds``, paired by seed, 95 % Student-t interval):
Electric minus its noise in each arm, and each arm minus the first (``--arms`` order) on Electric's
figures. ``--diagnose`` adds, per run, the corruption test split into the corrupted position's own
score change and the total change of the other positions.

``--curve`` (training length, the issue's first suspect): every kept checkpoint (the recipe keeps one per 1,000
steps) is evaluated as ``ebms eval`` evaluates the last one, on the same corrupted lines, beside the NCE classifier's
training accuracy since the previous checkpoint; with several seeds the last checkpoint is compared with step
``--baseline-step`` (3000, the recipe's length), paired by seed. So one run of ``--steps 6000`` answers whether
doubling the recipe's training moves the corruption test, with no second run of 3,000 steps (the learning rate is
constant: the longer run passes through the shorter one's state).

Resumable: a run with an ``eval.json`` is kept; one with checkpoints continues (``--resume``). The
runs live under ``--out`` (default ``runs/electric-noise``), ``mix<e>[-bernoulli]/seed<s>``.

Run: ``python benchmarks/electric_noise.py [--arms 0 0.25 0.25:bernoulli] [--seeds 0 1 2] [--steps N]
[--diagnose] [--curve [--baseline-step S]] [--record NAME] [--quick]``. ``--quick``: 30 steps, 1 seed (a smoke test).
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

from ebms.cli.config import load_config
from ebms.cli.main import main as ebms_main
from ebms.cli.main import recipe_path
from ebms.metrics.seeds import compare_over_seeds

ROOT = Path(__file__).resolve().parents[1]
RECIPE = "electric-shakespeare"
FIGURES = ("pll", "noise_pll", "prefers", "noise_prefers")


Arm = tuple  # (uniform_mix, positions[, noise_steps]): electric.uniform_mix, electric.positions, electric.noise_steps
ARM_FORMAT = "MIX[:fixed|bernoulli][:freezeN] (MIX a number in [0, 1), N an integer >= 0)"


def parse_arm(text: str) -> Arm:
    """``"0.25"`` -> ``(0.25, "fixed")``, ``"0.25:bernoulli"`` -> ``(0.25, "bernoulli")``, ``"0.25:bernoulli:freeze300"``
    -> ``(0.25, "bernoulli", 300)`` (the noise trained for 300 steps, then frozen: ``electric.noise_steps``)."""
    parts = text.split(":")
    freeze = None
    if len(parts) > 1 and parts[-1].startswith("freeze"):
        n = parts.pop()[len("freeze"):]
        if not n.isdigit():
            raise SystemExit(f"--arms: expected {ARM_FORMAT}; got {text!r}")
        freeze = int(n)
    try:
        value = float(parts[0])
    except ValueError:
        raise SystemExit(f"--arms: expected {ARM_FORMAT}; got {text!r}") from None
    positions = parts[1] if len(parts) == 2 else "fixed"
    if len(parts) > 2 or not 0 <= value < 1 or positions not in ("fixed", "bernoulli"):
        raise SystemExit(f"--arms: expected {ARM_FORMAT}; got {text!r}")
    return (value, positions) if freeze is None else (value, positions, freeze)


def arm_name(arm: Arm) -> str:
    return (f"mix{arm[0]:g}" + ("" if arm[1] == "fixed" else f"-{arm[1]}")
            + (f"-freeze{arm[2]}" if len(arm) > 2 else ""))


def run_dir(out: Path, arm: Arm, seed: int) -> Path:
    return out / arm_name(arm) / f"seed{seed}"


def diagnose(folder: Path) -> dict[str, float]:
    """The corruption test of the run's test lines split into the corrupted position's own score change and the
    total change of the other positions (the evaluation's own corruptions: same seed offset)."""
    import torch

    from ebms.cli.generation import EVAL_SEED_OFFSET
    from ebms.cli.run import load_run
    from ebms.data.text import replace_one_token

    cfg, model, data, _ = load_run(folder)
    g = torch.Generator().manual_seed(cfg.run.seed + EVAL_SEED_OFFSET)
    for split, held in data.held_out.items():  # the evaluation's draws, split by split in its order
        held = held[held.lengths > 0]
        corrupted = replace_one_token(held, len(data.vocab), generator=g)
        if split == "test":
            x, bad = held, corrupted
    with torch.no_grad():
        change = model.eval().token_scores(bad) - model.token_scores(x)
    where = bad.tokens != x.tokens
    own = change[where]
    rest = (change * (x.mask() & ~where)).sum(1)
    return {"own_change": float(own.mean()), "own_prefers": float((own < 0).double().mean()),
            "rest_change": float(rest.mean()), "rest_lowers": float((rest < 0).double().mean()),
            "prefers": float(((own + rest) < 0).double().mean())}


def curve(folder: Path) -> dict[str, dict[str, float]]:
    """The corruption test at every kept checkpoint of a run (``train.checkpoint_every`` steps apart), with the NCE
    classifier's training accuracy over the steps since the previous checkpoint: whether a longer run keeps gaining.

    Each checkpoint is evaluated as ``ebms eval`` evaluates the last one (the same corrupted lines: the evaluation's
    seed); keyed by step: ``prefers`` and ``noise_prefers`` on the test lines, ``nce_accuracy`` the mean of the logged
    ``accuracy`` (real against replaced tokens, on the training batches) over the steps in ``(previous, step]``.
    Kept in the run's ``curve.json`` and read from there while the checkpoints are the same.
    """
    import torch

    from ebms.cli.run import open_run, serving_task
    from ebms.train import CheckpointStore

    store = CheckpointStore(folder / "checkpoints")
    cache = folder / "curve.json"  # kept beside eval.json, read again while the checkpoints are the same
    if cache.is_file():
        kept = json.loads(cache.read_text())
        if sorted(map(int, kept)) == store.steps():
            return kept
    cfg, model, data, _ = open_run(folder)
    task = serving_task(cfg)
    logged: list[tuple[int, float]] = []
    for line in (folder / "metrics.jsonl").read_text().splitlines():
        rec = json.loads(line)
        if isinstance(rec.get("metrics"), dict) and "accuracy" in rec["metrics"]:
            logged.append((int(rec["step"]), float(rec["metrics"]["accuracy"])))
    out: dict[str, dict[str, float]] = {}
    previous = 0
    for step in store.steps():
        model.load_state_dict(store.load(step).state())
        with torch.no_grad():
            test = task.evaluate(cfg, model.eval(), data, step, use_ais=False).figures["test"]
        acc = [a for s, a in logged if previous < s <= step]
        out[str(step)] = {"prefers": test["prefers"], "noise_prefers": test["noise_prefers"],
                          "nce_accuracy": sum(acc) / len(acc) if acc else float("nan")}
        previous = step
    cache.write_text(json.dumps(out, indent=1))
    return out


def train(out: Path, arm: Arm, seed: int, steps: int | None, diag: bool = False,
          with_curve: bool = False, extra: tuple[str, ...] = ()) -> dict[str, Any]:
    """The run's test figures (training and evaluating it first unless its ``eval.json`` exists); ``extra``: more
    ``key=value`` overrides of a new run (the tests' smaller ``data.n_test``)."""
    folder = run_dir(out, arm, seed)
    report = folder / RECIPE / "eval.json"
    if not report.is_file():
        more = [f"train.steps={steps}"] if steps else []
        more += [f"electric.noise_steps={arm[2]}"] if len(arm) > 2 else []
        resume = ["--resume"] if (folder / RECIPE / "checkpoints").is_dir() else []
        t0 = time.perf_counter()
        code = ebms_main(["train", RECIPE, f"run.out_dir={folder}", f"run.seed={seed}",
                          f"electric.uniform_mix={arm[0]}", f"electric.positions={arm[1]}",
                          f"run.progress={str(sys.stderr.isatty()).lower()}",
                          *more, *extra, *resume])
        if code != 0:
            raise SystemExit(f"ebms train {RECIPE} ({arm_name(arm)}, seed {seed}) failed with exit status {code}")
        (folder / "wall_s.txt").write_text(f"{time.perf_counter() - t0:.1f}\n")
    test = json.loads(report.read_text())["figures"]["test"]
    wall = folder / "wall_s.txt"
    out = {**{k: test[k] for k in FIGURES}, "sentences": test["sentences"],
           "wall_s": float(wall.read_text()) if wall.is_file() else None}
    if diag:
        out["diagnosis"] = diagnose(folder / RECIPE)
    if with_curve:
        out["curve"] = curve(folder / RECIPE)
    return out


def compare(per: dict[str, dict[int, dict[str, Any]]], seeds: list[int]) -> dict[str, Any]:
    """Per arm (named as its folder), Electric minus its noise; each later arm minus the first."""
    out: dict[str, Any] = {}
    arms = list(per)
    for arm in arms:
        rows = [per[arm][s] for s in seeds]
        out[f"{arm}: electric - noise, prefers"] = compare_over_seeds(
            [r["prefers"] for r in rows], [r["noise_prefers"] for r in rows], seeds=seeds, name_a="Electric",
            name_b="its noise", metric="prefers", higher_is_better=True).to_dict()
    first = arms[0]
    for arm in arms[1:]:
        for key in ("prefers", "noise_prefers"):  # not pll: Electric's is unnormalised, arms' scales differ
            out[f"{arm} - {first}: {key}"] = compare_over_seeds(
                [per[arm][s][key] for s in seeds], [per[first][s][key] for s in seeds], seeds=seeds,
                name_a=arm, name_b=first, metric=key, higher_is_better=True).to_dict()
    return out


def compare_length(per: dict[str, dict[int, dict[str, Any]]], seeds: list[int], baseline: int) -> dict[str, Any]:
    """Per arm, the corruption test at the run's last checkpoint minus at step ``baseline``, paired by seed."""
    out: dict[str, Any] = {}
    for arm, runs in per.items():
        last = [max(runs[s]["curve"], key=int) for s in seeds]
        for key in ("prefers", "noise_prefers"):
            out[f"{arm}: last - step {baseline}, {key}"] = compare_over_seeds(
                [runs[s]["curve"][k][key] for s, k in zip(seeds, last)],
                [runs[s]["curve"][str(baseline)][key] for s in seeds], seeds=seeds,
                name_a=f"step {last[0]}" if len(set(last)) == 1 else "the last step",
                name_b=f"step {baseline}", metric=key, higher_is_better=True).to_dict()
    return out


def _curve_table(per: dict[str, dict[int, dict[str, Any]]], seeds: list[int]) -> str:
    rows = [[arm, str(s), step, f"{c['prefers']:.4f}", f"{c['noise_prefers']:.4f}", f"{c['nce_accuracy']:.4f}"]
            for arm, runs in per.items() for s in seeds for step, c in runs[s]["curve"].items()]
    return C.format_table(["arm", "seed", "step", "prefers", "noise prefers", "NCE accuracy (train)"], rows)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--arms", nargs="+", default=["0", "0.25", "0.25:bernoulli"],
                   help=f"{ARM_FORMAT} per arm (electric.uniform_mix, electric.positions, electric.noise_steps)")
    p.add_argument("--diagnose", action="store_true", help="split each run's corruption test by position")
    p.add_argument("--curve", action="store_true",
                   help="evaluate every kept checkpoint too; compare each arm's last step with --baseline-step")
    p.add_argument("--baseline-step", type=int, default=3000,
                   help="--curve: the step to compare the last one with (default 3000, the recipe's length)")
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    p.add_argument("--steps", type=int, default=None, help="train.steps (default: the recipe's 3000)")
    p.add_argument("--out", type=Path, default=None, help="runs folder (default runs/electric-noise)")
    p.add_argument("--record", default=None, help="write benchmarks/records/NAME.json")
    p.add_argument("--quick", action="store_true", help="30 steps, seed 0, runs under runs/electric-noise-quick")
    args = p.parse_args(argv)
    if args.quick:
        args.steps, args.seeds = 30, [0]
    recipe = load_config(recipe_path(RECIPE)).train
    every, total = recipe.checkpoint_every, args.steps or recipe.steps
    if args.curve and not (0 < args.baseline_step < total and args.baseline_step % every == 0):
        raise SystemExit(f"--baseline-step: expected a multiple of {every} (the recipe's checkpoint interval) below the "
                         f"run's {total} steps; got {args.baseline_step}")
    arms = [parse_arm(a) for a in args.arms]
    if len(set(arms)) != len(arms):
        raise SystemExit(f"--arms: expected distinct arms; got {args.arms}")
    out = args.out or ROOT / "runs" / ("electric-noise-quick" if args.quick else "electric-noise")
    rec = Recorder(args.record, seeds=args.seeds, settings={
        "recipe": RECIPE, "arms": [arm_name(a) for a in arms], "steps": total, "quick": args.quick,
        "curve": args.curve, "baseline_step": args.baseline_step if args.curve else None,
        "threads": int(os.environ.get("OMP_NUM_THREADS", "0") or 0)}) if args.record else None
    per: dict[str, dict[int, dict[str, Any]]] = {arm_name(a): {} for a in arms}
    for seed in args.seeds:  # seed-major: the first seed's arms finish first
        for arm in arms:
            C.note(f"[electric_noise] {arm_name(arm)}, seed {seed}")
            per[arm_name(arm)][seed] = train(out, arm, seed, args.steps, args.diagnose, args.curve)
    rows = [[a, str(s), *(f"{per[a][s][k]:.4f}" for k in FIGURES),
             *((f"{per[a][s]['diagnosis']['own_change']:+.3f}", f"{per[a][s]['diagnosis']['rest_change']:+.3f}")
               if args.diagnose else ())] for a in per for s in args.seeds]
    print(C.format_table(["arm", "seed", *FIGURES, *(("own change", "rest change") if args.diagnose else ())], rows))
    comparisons = compare(per, args.seeds) if len(args.seeds) > 1 else {}
    if args.curve:
        print(_curve_table(per, args.seeds))
        if len(args.seeds) > 1:
            comparisons.update(compare_length(per, args.seeds, args.baseline_step))
    for c in comparisons.values():
        print(c["sentence"])
    if rec is not None:
        rec.write({"per_run": {a: {f"seed{s}": v for s, v in per[a].items()} for a in per},
                   "comparisons": comparisons},
                  notes="Test lines of Tiny Shakespeare (characters): pll = one-pass pseudo-log-likelihood per "
                        "character (Electric's is unnormalised), prefers = share of lines scored above the same "
                        "line with one character replaced uniformly at random, for Electric and its two-tower "
                        "noise. comparisons: compare_over_seeds, paired by seed, 95 % Student-t interval. "
                        "diagnosis (with --diagnose): the corrupted position's own score change (mean, share below "
                        "0) and the total change of the other positions (mean, share below 0). wall_s: training + "
                        "evaluation on a shared 2-core machine (load-dependent). curve (with --curve): per kept checkpoint, "
                        "the same test figures and nce_accuracy, the mean logged training accuracy of the NCE "
                        "classifier since the previous checkpoint; 'last - step S' comparisons pair the last "
                        "checkpoint with step S by seed.")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
