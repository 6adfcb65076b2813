"""``ebms decode RUN WAV [WAV ...]``: transcripts of wav files by a speech run (:mod:`ebms.apply.speech`).

Prints ``file<TAB>transcript`` per file in input order (``--out`` writes a file, whole or not at all). ``WAV``
arguments are files, ``@LIST`` (a text file of paths, one a line) or ``-`` (paths on stdin). Every file is read
and checked before the run is loaded. ``--refs`` (lines ``file<TAB>transcript``) adds the label error rate on
stderr, the figure ``ebms eval`` writes (``ler`` best path, ``ler_lm`` the CTC-CRF's n-gram decoder).
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from ebms.cli.applied import add_run_argument, open_applied, output, read_lines
from ebms.cli.config import ConfigError
from ebms.cli.main import _count


def _paths(items: list[str]) -> list[str]:
    """The wav paths of the WAV arguments: files, ``@LIST`` files and ``-`` (stdin), blank lines skipped."""
    if items.count("-") > 1:
        raise ConfigError("WAV: '-' (paths on stdin) given more than once")
    out: list[str] = []
    for item in items:
        if item == "-" or item.startswith("@"):
            listed = [ln.strip() for ln in read_lines(item.removeprefix("@"), "WAV list") if ln.strip()]
            if not listed:
                raise ConfigError(f"WAV: {'stdin' if item == '-' else repr(item[1:])} lists no wav file")
            out += listed
        else:
            out.append(item)
    return out


def _fn(args: argparse.Namespace) -> int:
    from ebms.apply.speech import read_audio

    if args.rms is not None and not (0 < args.rms < float("inf")):
        raise ConfigError(f"--rms: expected a positive level (e.g. 0.1); got {args.rms}")
    if args.refs == "-" and "-" in args.wavs:
        raise ConfigError("--refs: stdin already gives the WAV list; give the references as a file")
    paths = _paths(args.wavs)
    audio = [read_audio(p) for p in paths]
    ref_lines = read_lines(args.refs, "--refs") if args.refs else None
    _, decoder = open_applied(args.run, "decode")
    refs = decoder.references(ref_lines, paths, f"--refs {args.refs!r}") if ref_lines is not None else None
    if args.decoder is not None and args.decoder not in decoder.decoders:
        raise ConfigError(f"--decoder: this run decodes with {' or '.join(decoder.decoders)}; got {args.decoder!r} "
                          f"(ngram needs a run trained with objective.kind = 'ctc-crf')")
    result = decoder.decode_audio(audio, paths, decoder=args.decoder, batch_size=args.batch_size, rms=args.rms)
    with output(args.out) as f:
        f.writelines(f"{p}\t{text}\n" for p, text in zip(paths, result.words))
    if refs is not None:
        print(f"ebms decode: {decoder.summary(decoder.score(refs, result), result.decoder)}", file=sys.stderr)
    return 0


def add_parser(sub: Any, common: argparse.ArgumentParser) -> None:
    s = sub.add_parser("decode", parents=[common], help="transcribe wav files with a speech run (fsdd-digits)",
                       description="Print FILE<TAB>TRANSCRIPT for each wav file, decoded by a speech run (CTC: best "
                       "path; CTC-CRF: its denominator n-gram) from the run's stored front end; --refs adds the label "
                       "error rate on stderr, the figure `ebms eval` reports.")
    add_run_argument(s)
    s.add_argument("wavs", nargs="+", metavar="WAV", help="wav files (PCM); @LIST: a file of paths; -: paths on stdin")
    s.add_argument("--refs", default=None, help="reference transcripts, lines FILE<TAB>TRANSCRIPT: prints the label "
                   "error rate on stderr")
    s.add_argument("--batch-size", type=_count("--batch-size", 1), default=64, help="utterances per forward (default 64, as ebms eval)")
    s.add_argument("--decoder", choices=("best-path", "ngram"), default=None,
                   help="best-path, or ngram (a CTC-CRF run's denominator n-gram; its default)")
    s.add_argument("--rms", type=float, default=None, help="scale each recording to this RMS level first "
                   "(training scaled each spoken digit to 0.1); default: as recorded")
    s.set_defaults(fn=_fn)
