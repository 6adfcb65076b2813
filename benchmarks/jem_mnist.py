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

Run: ``python benchmarks/jem_mnist.py [--quick] [--data mnist|fashion-mnist] [--steps N] [--threads N] [--override KEY=VALUE ...]``. ``--quick``: 5,000
training images, 100 steps, 500 OOD images (a smoke test of the comparison, not its figures).
Writes ``benchmarks/results/jem_mnist.json`` and the runs under ``runs/bench-jem-mnist/``.
"""

from __future__ import annotations

import json
import tempfile
import time
from pathlib import Path
from typing import Any

import _common as C

from ebms.cli.main import main as ebms_main
from ebms.data.images import load_continuous_images

RECIPES = ("classifier-mnist", "jem-mnist")
SCORES = ("logp", "max_softmax", "grad_norm")


def _has_fashion() -> bool:
    try:
        load_continuous_images("fashion-mnist", "test", limit=1)
    except (FileNotFoundError, OSError):
        return False
    return True


def _train(recipe: str, out: Path, overrides: list[str]) -> tuple[dict[str, Any], float]:
    t0 = time.perf_counter()
    code = ebms_main(["train", recipe, f"run.out_dir={out}", "run.progress=false", *overrides, "--overwrite"])
    if code != 0:
        raise SystemExit(f"ebms train {recipe} failed with exit status {code}")
    return json.loads((out / recipe / "eval.json").read_text()), time.perf_counter() - t0


def _auroc(report: dict[str, Any], ood: str, score: str) -> tuple[float, float, float] | None:
    for row in report["ood"]:
        if row["set"] == ood and row["score"] == score:
            return row["auroc"], row["auroc_low"], row["auroc_high"]
    return None


def _fmt(x: tuple[float, float, float] | None) -> str:
    return "-" if x is None else f"{x[0]:.4f} [{x[1]:.4f}, {x[2]:.4f}]"


def main() -> None:
    args = C.parse_args(__doc__.splitlines()[0], lambda p: (
        p.add_argument("--steps", type=int, default=None, help="training steps of both recipes (default: theirs)"),
        p.add_argument("--out", type=Path, default=None, help="folder for the two runs (default: a temporary one)"),
        p.add_argument("--data", choices=("mnist", "fashion-mnist"), default="mnist",
                       help="train both on this set; the other 28x28 set becomes the OOD set"),
        p.add_argument("--override", action="append", default=[], metavar="KEY=VALUE",
                       help="a config override for both recipes (repeatable), e.g. vision.limit=1000")))
    overrides = ["vision.limit=5000", "train.steps=100", "vision.ood_size=500", "data.n_test=2000",
                 "eval.n_samples=16", "eval.sample_steps=10"] if args.quick else []
    if args.steps:
        overrides.append(f"train.steps={args.steps}")  # the later value of a key wins
    other = "fashion-mnist" if args.data == "mnist" else "mnist"
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
    with tempfile.TemporaryDirectory() as tmp:
        out = args.out or Path(tmp)
        results = {r: _train(r, out, overrides) for r in RECIPES}
    clf, jem = (results[r][0] for r in RECIPES)
    rows = [["accuracy", f"{clf['accuracy']:.4f}", f"{jem['accuracy']:.4f}"],
            ["NLL", f"{clf['nll']:.4f}", f"{jem['nll']:.4f}"],
            ["ECE class-wise (20 bins)", f"{clf['ece_classwise']:.4f}", f"{jem['ece_classwise']:.4f}"],
            ["ECE top-label", f"{clf['ece_top_label']:.4f}", f"{jem['ece_top_label']:.4f}"],
            ["temperature T", f"{clf['temperature']:.3f}", f"{jem['temperature']:.3f}"],
            ["ECE class-wise, T-scaled", f"{clf['ece_classwise_scaled']:.4f}", f"{jem['ece_classwise_scaled']:.4f}"],
            ["ECE top-label, T-scaled", f"{clf['ece_top_label_scaled']:.4f}", f"{jem['ece_top_label_scaled']:.4f}"]]
    for o in ood:
        for s in SCORES:
            rows.append([f"AUROC {o} ({s})", _fmt(_auroc(clf, o, s)), _fmt(_auroc(jem, o, s))])
    rows.append(["seconds (train + eval)", f"{results['classifier-mnist'][1]:.0f}", f"{results['jem-mnist'][1]:.0f}"])
    print(C.format_table(["figure", "classifier", "JEM"], rows))
    claims: dict[str, Any] = {
        "accuracy_within_1_point": abs(jem["accuracy"] - clf["accuracy"]) <= 0.01,
        "lower_classwise_ece": jem["ece_classwise"] < clf["ece_classwise"],
    }
    fashion = _auroc(jem, other, "logp")
    if fashion is not None:
        base = _auroc(clf, other, "max_softmax")
        own = _auroc(jem, other, "max_softmax")
        claims["logp_auroc_above_max_softmax"] = fashion[0] > max(base[0], own[0]) if base and own else None
    else:
        claims["logp_auroc_above_max_softmax"] = "not measured (no Fashion-MNIST)"
    for k, v in claims.items():
        print(f"{k}: {v}")
    summary = {"bench": "jem_mnist", "data": args.data, "ood_set": other, "quick": bool(args.quick),
               "classifier_accuracy": clf["accuracy"],
               "jem_accuracy": jem["accuracy"], "classifier_ece_classwise": clf["ece_classwise"],
               "jem_ece_classwise": jem["ece_classwise"],
               "jem_fashion_auroc_logp": None if fashion is None else fashion[0],
               "classifier_fashion_auroc_max_softmax": None if fashion is None else _auroc(clf, other,
                                                                                          "max_softmax")[0],
               "claims": claims}
    C.save_results("jem_mnist" if args.data == "mnist" else "jem_fashion_mnist", {**summary, "classifier": clf, "jem": jem, "overrides": overrides,
                                 "machine": C.machine_info()}, enabled=not args.no_save)
    C.emit_final_line(summary)


if __name__ == "__main__":
    main()
