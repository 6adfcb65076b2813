"""Run ``ebms`` commands and write what they measured as a committed record.

For figures that come from the command line (``ebms train RECIPE`` then ``ebms eval``), this runs
the commands one after the other (each in its own process; ``{seed}`` in a command is replaced by
each seed of ``--seeds``), then reads the JSON files named by ``--collect`` (an ``eval.json``,
``{seed}`` replaced too) and writes them, per seed, as the figures of
``benchmarks/records/NAME.json`` with the commands, wall time and peak memory of the children.

Example::

    python benchmarks/record_cli.py kn5_ptb \\
        --cmd "ebms train kn5-ptb run.name=kn5-ptb --overwrite" \\
        --cmd "ebms eval runs/kn5-ptb" --collect runs/kn5-ptb/eval.json

A command that fails stops the script (exit status of the command) and writes no record.
"""

from __future__ import annotations

import argparse
import json
import shlex
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _record import ROOT, Recorder  # noqa: E402


def _seeds(text: str) -> list[int]:
    try:
        return [int(s) for s in text.split(",") if s.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers; got {text!r}") from None


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("name", help="record name: benchmarks/records/NAME.json")
    p.add_argument("--cmd", action="append", required=True, help="a command to run ({seed} is replaced); repeat")
    p.add_argument("--collect", action="append", default=[], help="a JSON file whose content is a figure ({seed})")
    p.add_argument("--seeds", type=_seeds, default=None, help="comma-separated seeds; each runs every --cmd")
    p.add_argument("--notes", default="", help="what the figures mean, what was left out")
    p.add_argument("--dry-run", action="store_true", help="print the commands, run nothing")
    args = p.parse_args(argv)
    seeds = args.seeds if args.seeds is not None else [None]
    rec = Recorder(args.name, seeds=[s for s in seeds if s is not None],
                   settings={"commands": args.cmd, "collect": args.collect})
    figures: dict[str, object] = {}
    for seed in seeds:
        def sub(s: str, seed: int | None = seed) -> str:
            return s if seed is None else s.replace("{seed}", str(seed))

        for cmd in args.cmd:
            line = sub(cmd)
            print(f"$ {line}", file=sys.stderr, flush=True)
            if args.dry_run:
                continue
            t0 = time.perf_counter()
            rc = subprocess.run(shlex.split(line), cwd=ROOT).returncode
            if rc != 0:
                print(f"record_cli: {line!r} exited with {rc}; no record written", file=sys.stderr)
                return rc
            print(f"  ({time.perf_counter() - t0:.1f} s)", file=sys.stderr)
        if args.dry_run:
            continue
        got = {}
        for path in args.collect:
            data = json.loads((ROOT / sub(path)).read_text())
            if isinstance(data, dict):
                data.pop("time", None)
            got[Path(sub(path)).parent.name + "/" + Path(path).name] = data
        figures[f"seed{seed}" if seed is not None else "run"] = got
    if not args.dry_run:
        rec.write(figures, notes=args.notes)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
