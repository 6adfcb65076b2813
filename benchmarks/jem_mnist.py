"""JEM against the same network trained as a plain classifier, on MNIST, side by side in one run.

Trains the packaged recipes ``classifier-mnist`` and ``jem-mnist`` with the same seed, network
(``ConvClassifier``, ``vision.channels``), data noise, batches, optimizer and steps, through the
command line (``ebms.cli.main``), then prints their test figures side by side:

* accuracy and NLL on the 10,000 test images;
* class-wise ECE (the monograph's Eq. 5.19, 20 bins) and top-label ECE, raw and after temperature
  scaling fitted on the 6,000 held-out training images;
* OOD detection, MNIST test images (positive) against Fashion-MNIST, uniform noise, upside-down
  and quarter-turned digits, 2,000 of each: AUROC with its 95 % bootstrap interval for the scores
  ``logp`` (JEM's ``log sum_y exp f(x)``), ``max_softmax`` and ``grad_norm``.

The issue's claims, checked and printed as yes/no: JEM's accuracy within 1 point of the
classifier's; JEM's class-wise ECE below the classifier's; JEM's MNIST-vs-Fashion-MNIST AUROC with
``logp`` above the max-softmax AUROC (of the classifier, the usual baseline, and of JEM itself).

Fashion-MNIST comes from ``$EBMS_DATA/fashion-mnist`` or Debian's ``dataset-fashion-mnist``; without
it the Fashion-MNIST rows are left out and the claim is reported as not measured.

``--data fashion-mnist`` runs the same comparison trained on Fashion-MNIST (a harder set, where the
classifier is less accurate and calibration has more room), with MNIST as the other set; its
"fashion" summary keys then name that other set.

Seeds: ``--seeds 0,1,2`` trains both recipes once per seed (``run.seed``: network initialisation,
held-out split, batches, chains and the evaluation's draws), and every figure is then compared
JEM against classifier over the seeds with ``ebms.metrics.compare_over_seeds`` (paired by seed, a
95 % Student-t interval and its verdict). One seed gives "one seed, no interval": no claim.

Run: ``python benchmarks/jem_mnist.py [--quick] [--data mnist|fashion-mnist] [--seeds 0,1,2] [--steps N] [--threads N]
[--override KEY=VALUE ...] [--record NAME] [--out DIR]``. ``--quick``: 5,000 training images, 100 steps,
500 OOD images (a smoke test of the comparison, not its figures).
Writes the committed record ``benchmarks/records/<--record>.json`` (``benchmarks/_record.py``; default
``jem_mnist``, ``jem_fashion_mnist`` with ``--data fashion-mnist``, ``_quick`` appended with ``--quick``),
the full detail to ``benchmarks/results/`` (not committed), and the runs under ``--out`` (default: a
temporary folder, removed at the end). With ``--out``, a seed's finished runs (same overrides) are read
back instead of trained again: ``--seeds 0,1,2`` then ``--seeds 0,1,2,3,4`` trains only seeds 3 and 4.
"""

from __future__ import annotations

import json
import tempfile
import time
from pathlib import Path
from typing import Any

import _common as C
from _record import Recorder

from ebms.cli.main import main as ebms_main
from ebms.data.images import load_continuous_images
from ebms.metrics.seeds import compare_over_seeds

RECIPES = ("classifier-mnist", "jem-mnist")
SCORES = ("logp", "max_softmax", "grad_norm")
#: the figures of eval.json compared JEM against classifier, and whether higher is better (None: no direction)
COMPARED = {"accuracy": True, "nll": False, "ece_classwise": False, "ece_top_label": False, "temperature": None,
            "ece_classwise_scaled": False, "ece_top_label_scaled": False}


def _has_fashion() -> bool:
    try:
        load_continuous_images("fashion-mnist", "test", limit=1)
    except (FileNotFoundError, OSError):
        return False
    return True


def _train(recipe: str, out: Path, overrides: list[str]) -> tuple[dict[str, Any], float]:
    """The run's eval.json and wall seconds; a finished run of the same overrides in ``out`` is read, not
    trained again (``bench.json`` beside it keeps the overrides and the seconds), so seeds can be added later; a
    stopped one (checkpoints, no ``bench.json``) is resumed when its settings match, its seconds those of every
    segment (:func:`_common.logged_seconds` for the earlier ones)."""
    done = out / recipe / "bench.json"
    if done.is_file() and (out / recipe / "eval.json").is_file():
        kept = json.loads(done.read_text())
        if kept["overrides"] == overrides:
            C.note(f"[jem_mnist] reusing {out / recipe} (trained before with the same overrides)")
            return json.loads((out / recipe / "eval.json").read_text()), float(kept["seconds"])
    run, argv = out / recipe, ["train", recipe, f"run.out_dir={out}", "run.progress=false", *overrides]
    t0, earlier, code = time.perf_counter(), C.logged_seconds(run / "metrics.jsonl"), 2
    if (run / "checkpoints" / "latest").exists():  # a stopped run: resumed when its settings are these
        code = ebms_main([*argv, "--resume"])
    if code == 2:  # nothing to resume, or other settings (ebms refuses with exit 2): train afresh
        t0, earlier = time.perf_counter(), 0.0
        code = ebms_main([*argv, "--overwrite"])
    elif code == 0:
        C.note(f"[jem_mnist] resumed {run} (its earlier segments logged {earlier:.1f} s)")
    if code != 0:
        raise SystemExit(f"ebms train {recipe} failed with exit status {code}")
    seconds = earlier + time.perf_counter() - t0
    done.write_text(json.dumps({"overrides": overrides, "seconds": seconds}) + "\n")
    return json.loads((out / recipe / "eval.json").read_text()), seconds


def _auroc(report: dict[str, Any], ood: str, score: str) -> tuple[float, float, float] | None:
    for row in report["ood"]:
        if row["set"] == ood and row["score"] == score:
            return row["auroc"], row["auroc_low"], row["auroc_high"]
    return None


def _fmt(x: tuple[float, float, float] | None) -> str:
    return "-" if x is None else f"{x[0]:.4f} [{x[1]:.4f}, {x[2]:.4f}]"


def _seeds(text: str) -> list[int]:
    try:
        seeds = [int(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise SystemExit(f"--seeds: expected comma-separated integers; got {text!r}") from None
    if not seeds or len(set(seeds)) != len(seeds):
        raise SystemExit(f"--seeds: expected distinct seeds; got {text!r}")
    return seeds


def _figures(report: dict[str, Any], seconds: float) -> dict[str, Any]:
    """The figures of one eval.json kept in the record: scalars and the AUROC (with its interval) per set and score."""
    out: dict[str, Any] = {k: report.get(k) for k in COMPARED}
    out["auroc"] = {f"{row['set']}/{row['score']}": [row["auroc"], row["auroc_low"], row["auroc_high"]]
                    for row in report["ood"]}
    out["seconds"] = seconds
    return out


def _mean(xs: list[float]) -> float:
    return sum(xs) / len(xs)


def compare(per_seed: dict[int, dict[str, Any]], other: str) -> dict[str, Any]:
    """JEM against the classifier over the seeds, one ``compare_over_seeds`` per figure (paired by seed)."""
    seeds = list(per_seed)
    clf = [per_seed[s]["classifier"] for s in seeds]
    jem = [per_seed[s]["jem"] for s in seeds]
    out: dict[str, Any] = {}
    for key, higher in COMPARED.items():
        if any(r[key] is None for r in clf + jem):
            continue
        out[key] = compare_over_seeds([r[key] for r in jem], [r[key] for r in clf], seeds=seeds, name_a="JEM",
                                      name_b="classifier", metric=key, higher_is_better=higher).to_dict()
    for row in jem[0]["auroc"]:
        if all(row in r["auroc"] for r in clf + jem):
            out[f"auroc {row}"] = compare_over_seeds(
                [r["auroc"][row][0] for r in jem], [r["auroc"][row][0] for r in clf], seeds=seeds, name_a="JEM",
                name_b="classifier", metric=f"AUROC {row}", higher_is_better=True).to_dict()
    a, b = f"{other}/logp", f"{other}/max_softmax"
    if all(a in r["auroc"] for r in jem) and all(b in r["auroc"] for r in clf):  # the claim
        out["auroc JEM logp vs classifier max_softmax"] = compare_over_seeds(
            [r["auroc"][a][0] for r in jem], [r["auroc"][b][0] for r in clf], seeds=seeds, name_a="JEM logp",
            name_b="classifier max_softmax", metric=f"AUROC vs {other}", higher_is_better=True).to_dict()
    return out


def means(per_seed: dict[int, dict[str, Any]]) -> dict[str, Any]:
    """Per model, the mean over seeds of every figure (AUROC: the mean of the point estimates)."""
    out: dict[str, Any] = {}
    for model in ("classifier", "jem"):
        rs = [r[model] for r in per_seed.values()]
        m: dict[str, Any] = {k: _mean([r[k] for r in rs]) for k in COMPARED if all(r[k] is not None for r in rs)}
        m["auroc"] = {row: _mean([r["auroc"][row][0] for r in rs]) for row in rs[0]["auroc"]}
        m["seconds"] = _mean([r["seconds"] for r in rs])
        out[model] = m
    return out


def main() -> None:
    args = C.parse_args(__doc__.splitlines()[0], lambda p: (
        p.add_argument("--steps", type=int, default=None, help="training steps of both recipes (default: theirs)"),
        p.add_argument("--out", type=Path, default=None, help="folder for the runs (default: a temporary one)"),
        p.add_argument("--data", choices=("mnist", "fashion-mnist"), default="mnist",
                       help="train both on this set; the other 28x28 set becomes the OOD set"),
        p.add_argument("--seeds", default="0", help="comma-separated run seeds (run.seed of both recipes)"),
        p.add_argument("--record", default=None, help="record name: benchmarks/records/NAME.json"),
        p.add_argument("--override", action="append", default=[], metavar="KEY=VALUE",
                       help="a config override for both recipes (repeatable), e.g. vision.limit=1000")))
    seeds = _seeds(args.seeds)
    overrides = ["vision.limit=5000", "train.steps=100", "vision.ood_size=500", "data.n_test=2000",
                 "eval.n_samples=16", "eval.sample_steps=10"] if args.quick else []
    if args.steps:
        overrides.append(f"train.steps={args.steps}")  # the later value of a key wins
    other = "fashion-mnist" if args.data == "mnist" else "mnist"
    name = args.record or (("jem_mnist" if args.data == "mnist" else "jem_fashion_mnist") + ("_quick" if args.quick
                                                                                             else ""))
    if args.data == "fashion-mnist":
        if not _has_fashion():
            C.note("skipping: --data fashion-mnist needs Fashion-MNIST (Debian package dataset-fashion-mnist or "
                   "$EBMS_DATA/fashion-mnist)")
            C.emit_final_line({"bench": "jem_mnist", "data": args.data, "skipped": "Fashion-MNIST not found"})
            return
        overrides.append("data.name=fashion-mnist")
    overrides += args.override
    ood = [other, "noise", "flip", "rotate"] if _has_fashion() else ["noise", "flip", "rotate"]
    if other not in ood:
        C.note("Fashion-MNIST not installed (Debian package dataset-fashion-mnist or $EBMS_DATA/fashion-mnist): "
               "its rows are left out")
    overrides.append("vision.ood=[" + ",".join(f"'{o}'" for o in ood) + "]")
    rec = Recorder(name, seeds=seeds, settings={"data": args.data, "recipes": list(RECIPES), "overrides": overrides,
                                                "ood": ood, "quick": bool(args.quick)})
    reports: dict[int, dict[str, Any]] = {}
    per_seed: dict[int, dict[str, Any]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for seed in seeds:
            out = (args.out or Path(tmp)) / (f"seed{seed}" if len(seeds) > 1 else "")
            C.note(f"[jem_mnist] seed {seed}")
            got = {r: _train(r, out, [*overrides, f"run.seed={seed}"]) for r in RECIPES}
            reports[seed] = {r: got[r][0] for r in RECIPES}
            per_seed[seed] = {"classifier": _figures(*got["classifier-mnist"]), "jem": _figures(*got["jem-mnist"])}
    mean = means(per_seed)
    clf, jem = mean["classifier"], mean["jem"]
    rows = [["accuracy", f"{clf['accuracy']:.4f}", f"{jem['accuracy']:.4f}"],
            ["NLL", f"{clf['nll']:.4f}", f"{jem['nll']:.4f}"],
            ["ECE class-wise (20 bins)", f"{clf['ece_classwise']:.4f}", f"{jem['ece_classwise']:.4f}"],
            ["ECE top-label", f"{clf['ece_top_label']:.4f}", f"{jem['ece_top_label']:.4f}"]]
    for key, label in (("temperature", "temperature T"), ("ece_classwise_scaled", "ECE class-wise, T-scaled"),
                       ("ece_top_label_scaled", "ECE top-label, T-scaled")):
        if key in clf and key in jem:
            rows.append([label, f"{clf[key]:.4f}", f"{jem[key]:.4f}"])
    for o in ood:
        for s in SCORES:
            if len(seeds) == 1:
                rows.append([f"AUROC {o} ({s})", _fmt(_auroc(reports[seeds[0]]["classifier-mnist"], o, s)),
                             _fmt(_auroc(reports[seeds[0]]["jem-mnist"], o, s))])
            else:
                rows.append([f"AUROC {o} ({s}), mean", f"{clf['auroc'][f'{o}/{s}']:.4f}",
                             f"{jem['auroc'][f'{o}/{s}']:.4f}"])
    rows.append(["seconds (train + eval)", f"{clf['seconds']:.0f}", f"{jem['seconds']:.0f}"])
    seed_text = f"seed {seeds[0]}" if len(seeds) == 1 else f"mean over seeds {', '.join(map(str, seeds))}"
    print(f"{args.data}, {seed_text}")
    print(C.format_table(["figure", "classifier", "JEM"], rows))
    comparisons = compare(per_seed, other)
    for c in comparisons.values():
        print(c["sentence"])
    claims: dict[str, Any] = {
        "accuracy_within_1_point": abs(jem["accuracy"] - clf["accuracy"]) <= 0.01,
        "lower_classwise_ece": jem["ece_classwise"] < clf["ece_classwise"],
    }
    fashion = jem["auroc"].get(f"{other}/logp")
    if fashion is not None:
        base, own = clf["auroc"].get(f"{other}/max_softmax"), jem["auroc"].get(f"{other}/max_softmax")
        claims["logp_auroc_above_max_softmax"] = fashion > max(base, own) if base is not None and own is not None \
            else None
    else:
        claims["logp_auroc_above_max_softmax"] = "not measured (no Fashion-MNIST)"
    for k, v in claims.items():
        print(f"{k} ({seed_text}): {v}")
    summary = {"bench": "jem_mnist", "data": args.data, "ood_set": other, "quick": bool(args.quick), "seeds": seeds,
               "classifier_accuracy": clf["accuracy"],
               "jem_accuracy": jem["accuracy"], "classifier_ece_classwise": clf["ece_classwise"],
               "jem_ece_classwise": jem["ece_classwise"],
               "jem_fashion_auroc_logp": fashion,
               "classifier_fashion_auroc_max_softmax": clf["auroc"].get(f"{other}/max_softmax"),
               "claims": claims}
    C.save_results(name, {**summary, "reports": {str(k): v for k, v in reports.items()}, "overrides": overrides,
                          "machine": C.machine_info()}, enabled=not args.no_save)
    rec.write({"per_seed": {f"seed{s}": v for s, v in per_seed.items()}, "means": mean, "comparisons": comparisons},
              notes=NOTES.format(other=other), enabled=not args.no_save)
    C.emit_final_line(summary)


NOTES = ("Per seed, test figures of classifier-mnist and jem-mnist as eval.json reports them (accuracy, NLL, "
         "class-wise and top-label ECE with 20 bins, raw and after temperature scaling fitted on the held-out "
         "training images; auroc: [AUROC, 95 % bootstrap low, high] of the test images against each OOD set "
         "({other} is the other 28x28 set) for each score; seconds: train + eval wall time). means: over the "
         "seeds. comparisons: JEM minus classifier, paired by seed (ebms.metrics.compare_over_seeds, 95 % "
         "Student-t interval); with one seed the verdict is 'one seed, no interval'.")


if __name__ == "__main__":
    main()
