"""``ebms score`` and ``ebms rescore``: a language-model run applied to new text (issue 27).

* ``ebms score RUN FILE``: each non-blank line of ``FILE`` (``-``: stdin) is a sentence, tokenised as the run's
  training text was; a TSV line per sentence (log-probability with ``</s>``, tokens, ``<unk>`` tokens, perplexity)
  to ``--out`` and one summary line on stderr (:func:`ebms.apply.text.sentence_scorer`).
* ``ebms rescore RUN [RUN ...] NBEST``: n-best lists (a TSV file or a Kaldi folder, :mod:`ebms.data.nbest`)
  rescored with the runs' log-linear interpolation (:func:`ebms.apply.text.rescore`); ``utt_id<TAB>words`` per
  utterance to ``--out``; with ``--refs``, the word error rates before and after on stderr.

See ``docs/apply-score.md``.
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path
from typing import Any

from ebms.cli.applied import add_run_argument, open_applied, output, read_lines
from ebms.cli.config import ConfigError
from ebms.errors import DataError

NBEST_FORMS = ("NBEST is a TSV file (utt_id, rank, acoustic_score, lm_score, hypothesis) or a Kaldi folder with "
               "text, ac_cost and lm_cost")


def cmd_score(args: argparse.Namespace) -> int:
    """Score every sentence of ``args.file`` with the run ``args.run``."""
    where = "stdin" if args.file == "-" else args.file
    lines = read_lines(args.file, "FILE")
    kept = [(no, line) for no, line in enumerate(lines, 1) if line.strip()]
    if not kept:
        raise DataError(f"FILE: {where!r} holds no sentence (empty or blank lines only); give one sentence per line")
    _, scorer = open_applied(args.run, "score")
    if args.batch_size is not None:
        scorer.batch_size = args.batch_size
    scores = scorer([line for _, line in kept], names=[f"FILE {where}:{no}" for no, _ in kept])
    with output(args.out) as out:
        out.writelines(f"{row}\n" for row in scores.tsv([line.strip() for _, line in kept], [no for no, _ in kept]))
    n = len(lines) - len(kept)
    blank = f" ({n} blank line{'s' * (n > 1)} skipped)" if n else ""
    print(f"score: {where}{blank}: {scores.summary()}", file=sys.stderr)
    return 0


def _nbest(path: str) -> Any:
    """The n-best lists of ``path``: a Kaldi folder (``text``, ``ac_cost``, optional ``lm_cost``) or a TSV file."""
    from ebms.data.nbest import read_kaldi_nbest, read_nbest_tsv

    p = Path(path)
    try:
        if p.is_dir():
            missing = [n for n in ("text", "ac_cost") if not (p / n).is_file()]
            if missing:
                raise DataError(f"a folder without {' and '.join(missing)}")
            lm = p / "lm_cost"
            return read_kaldi_nbest(p / "text", ac_cost=p / "ac_cost", lm_cost=lm if lm.is_file() else None)
        if not p.is_file():
            raise DataError("not found")
        return read_nbest_tsv(p)
    except DataError as e:
        raise DataError(f"NBEST: {path!r}: {e}; {NBEST_FORMS}") from None


def _weights(args: argparse.Namespace, names: list[str]) -> dict[str, float]:
    if args.weights is None:
        return dict.fromkeys(names, 1.0 / len(names))
    if len(args.weights) != len(names):
        raise ConfigError(f"--weights: expected one weight per run ({len(names)}: {', '.join(names)}); got "
                          f"{len(args.weights)}")
    return dict(zip(names, args.weights))


def cmd_rescore(args: argparse.Namespace) -> int:
    """Rescore ``args.nbest`` with the runs ``args.runs``; the best hypotheses out, WERs with ``--refs``."""
    from ebms.apply.text import check_references, rescore
    from ebms.data.nbest import read_references

    _weights(args, args.runs)  # the count, before anything is read
    nbest = _nbest(args.nbest)
    refs = None
    if args.refs is not None:
        if not Path(args.refs).is_file():
            raise DataError(f"--refs: {args.refs!r} not found; expected a file of 'utt word word ...' lines")
        refs = read_references(args.refs)
        check_references(nbest, refs, source=f"--refs {args.refs!r}")
    scorers: dict[str, Any] = {}
    for path in args.runs:
        name, k = Path(path).name or path, 2
        while name in scorers:
            name, k = f"{Path(path).name}#{k}", k + 1
        scorers[name] = open_applied(path, "score")[1]
    weights = _weights(args, list(scorers))
    result = rescore(nbest, scorers, weights, lm_scale=args.lm_scale, length_penalty=args.length_penalty)
    with output(args.out) as out:
        out.writelines(f"{u}\t{' '.join(h)}\n" for u, h in zip(nbest.utt_ids, result.hypotheses))
    lms = ", ".join(f"{k} {v:g}" for k, v in result.weights.items())
    unscored = "".join(f"; {n} hypotheses {k} has no score for (never chosen with weight > 0)"
                       for k, n in result.unscored.items() if n)
    print(f"rescore: {nbest.num_utterances} utterances, {len(nbest)} hypotheses; LM weights {lms}, length penalty "
          f"{args.length_penalty:g}{unscored}", file=sys.stderr)
    if refs is not None:
        before, after = result.error_rates(nbest, refs, source=f"--refs {args.refs!r}")
        print(f"rescore: WER first pass {before.percent:.2f}% ({before.errors}/{before.ref_length}) -> rescored "
              f"{after.percent:.2f}% ({after.errors}/{after.ref_length})", file=sys.stderr)
    return 0


def _number(flag: str, *, low: float | None = 0.0) -> Any:
    """An argparse type: a finite number (``>= low`` unless ``None``)."""

    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a number; got {text!r}") from None
        if not math.isfinite(value) or (low is not None and value < low):
            raise argparse.ArgumentTypeError(f"expected a finite number{'' if low is None else f' >= {low:g}'}; "
                                             f"got {text!r}")
        return value

    parse.__name__ = flag
    return parse


def add_parser(sub: Any, common: argparse.ArgumentParser) -> None:
    """``ebms score``'s and ``ebms rescore``'s arguments."""
    from ebms.cli.main import _count

    s = sub.add_parser("score", parents=[common], help="log-probability of each sentence of a file under a "
                                                       "language-model run (TSV out)")
    add_run_argument(s)
    s.add_argument("file", metavar="FILE", help="one sentence per line, tokens as the run's training text (-: stdin)")
    s.add_argument("--batch-size", type=_count("--batch-size", 1), default=None,
                   help="sentences per model call (default 64)")
    s.set_defaults(fn=cmd_score)

    s = sub.add_parser("rescore", parents=[common], help="rescore n-best lists with one or more language-model runs")
    s.add_argument("runs", metavar="RUN", nargs="+", help="run folders of language models (`ebms train`)")
    s.add_argument("nbest", metavar="NBEST", help=NBEST_FORMS.replace("NBEST is ", ""))
    s.add_argument("--weights", type=_number("--weights"), nargs="+", default=None, metavar="W",
                   help="one interpolation weight >= 0 per run (default: 1/number of runs each)")
    s.add_argument("--lm-scale", type=_number("--lm-scale"), default=1.0, metavar="S",
                   help="scale of the LM scores against the acoustic ones, multiplying every weight (default 1)")
    s.add_argument("--length-penalty", type=_number("--length-penalty", low=None), default=0.0, metavar="B",
                   help="added per word of a hypothesis (a bonus when positive; default 0)")
    s.add_argument("--refs", default=None, metavar="REFS", help="references, 'utt word word ...' lines: WER on stderr")
    s.add_argument("--out", "-o", default="-", help="output file (default -: stdout); written whole or not at all")
    s.set_defaults(fn=cmd_rescore)
