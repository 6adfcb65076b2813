"""``ebms classify RUN IMAGES...``: labels, probabilities and out-of-distribution scores of new images.

For an image run (``data.name`` = ``mnist``, ``fashion-mnist``, ``digits``; ``model.kind`` = ``classifier``,
``jem`` or ``conv``). The images (pictures, tensor files, IDX files) are read and checked by
:func:`ebms.apply.images.read_images`; the run's :class:`~ebms.apply.images.ImageClassifier` (or
:class:`~ebms.apply.images.ImageEnergyScorer` for ``conv``) computes a TSV table: ``input``, ``label``,
``p_label`` (``--probs``: every class's probability), and the score, higher for more in-distribution images
(``ood_logsumexp`` = ``logsumexp f(x)``, ``ood_neg_energy`` = ``-E(x)``). docs/apply-classify.md has the details.
"""

from __future__ import annotations

import argparse
import math
import sys
from typing import Any

from ebms.cli.applied import add_run_argument, open_applied, output
from ebms.cli.config import ConfigError
from ebms.cli.main import _count


def _temperature(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number > 0; got {text!r}") from None
    if not 0 < value < math.inf:
        raise argparse.ArgumentTypeError(f"expected a finite number > 0; got {text!r}")
    return value


def cmd_classify(args: argparse.Namespace) -> int:
    from ebms.apply.images import evaluated_calibration, read_images

    run, applier = open_applied(args.run, "classify")
    if applier.has_labels and args.temperature is None:  # the T `ebms eval` fitted on these weights, if it kept it
        applier.use_calibration(evaluated_calibration(run.path / "eval.json", run.model))
    if not applier.has_labels:
        for flag, value in (("--probs", args.probs or None), ("--temperature", args.temperature)):
            if value is not None:
                raise ConfigError(f"{flag}: the run in {args.run!r} is an image energy (model.kind="
                                  f"{run.config.model.kind!r}) with no labels, only the score ood_neg_energy; "
                                  f"drop {flag}")
    inputs = read_images(args.images, applier.size, "IMAGES")
    kw = {"temperature": args.temperature} if applier.has_labels else {}
    result = applier(inputs.images, batch_size=args.batch_size, **kw)
    with output(args.out) as f:
        for row in [result.header(probs=args.probs), *result.rows(inputs.names, probs=args.probs)]:
            f.write("\t".join(row) + "\n")
    if result.calibration is not None and args.temperature is None and len(result):
        print(f"classify: {result.calibration.note}", file=sys.stderr)
    return 0


def add_parser(sub: Any, common: argparse.ArgumentParser) -> None:
    s = sub.add_parser("classify", parents=[common],
                       help="labels, probabilities and OOD scores of images by an image run (TSV)")
    add_run_argument(s)
    s.add_argument("images", nargs="+", metavar="IMAGES",
                   help="pictures (PNG, JPEG; colour becomes grey), tensor files (.safetensors, .pt, .npy: (N, H, W) "
                        "in [0, 1] or uint8 0..255) or IDX files, of the run's image size")
    s.add_argument("--probs", action="store_true", help="add every class's probability (p_<class> columns)")
    s.add_argument("--temperature", type=_temperature, default=None, metavar="T",
                   help="probabilities softmax(logits / T) (default: the T `ebms eval` fits on the run's "
                        "validation images; 1: the raw softmax)")
    s.add_argument("--batch-size", type=_count("--batch-size", 1), default=500, metavar="N",
                   help="images per network call (default 500)")
    s.set_defaults(fn=cmd_classify)
