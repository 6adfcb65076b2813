"""``ebms tag RUN [FILE]``: tags of new sentences by a trained tagging run (issue 27).

Reads ``FILE`` (``-`` or none: stdin) as CoNLL lines or plain tokens (``--format``), tags every
sentence with the run's tagger as ``ebms eval`` decodes (:class:`ebms.apply.tagging.SentenceTagger`)
and writes CoNLL lines, the predicted tag last, to ``--out`` (default stdout). When the input carries
gold tags, one line on stderr gives the chunk F1, precision and recall against them. See
``docs/apply-tag.md``.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from ebms.cli.applied import add_run_argument, open_applied, output, read_lines


def cmd_tag(args: argparse.Namespace) -> int:
    """Tag ``args.file`` with the run ``args.run``; the scores against gold tags on stderr."""
    from ebms.apply.tagging import read_tagging_input

    name = "stdin" if args.file == "-" else repr(args.file)
    inp = read_tagging_input(read_lines(args.file, "FILE"), fmt=args.format, source=f"FILE {name}")
    _, tagger = open_applied(args.run, "tag")
    result = tagger.tag_input(inp, batch_size=args.batch_size)
    with output(args.out) as out:
        out.writelines(f"{line}\n" for line in result.conll_lines())
    if result.scores is not None:
        print(f"tag: {result.summary()}", file=sys.stderr)
    return 0


def add_parser(sub: Any, common: argparse.ArgumentParser) -> None:
    """``ebms tag``'s arguments."""
    from ebms.cli.main import _count

    s = sub.add_parser("tag", parents=[common], help="tag new sentences with a trained tagging run (CoNLL out)")
    add_run_argument(s)
    s.add_argument("file", metavar="FILE", nargs="?", default="-",
                   help="CoNLL lines (one token per line, blank line between sentences) or one sentence per line "
                        "(default -: stdin)")
    s.add_argument("--format", choices=("auto", "conll", "tokens"), default="auto",
                   help="input format (default auto: CoNLL when blank lines split it into multi-line sentences)")
    s.add_argument("--batch-size", type=_count("--batch-size", 1), default=None,
                   help="sentences per decoding batch (default: as `ebms eval`, 512)")
    s.set_defaults(fn=cmd_tag)
