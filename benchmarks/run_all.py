"""Run every benchmark in ``benchmarks/`` and collect their one-line JSON summaries.

Each ``benchmarks/<name>.py`` (except private ``_*.py`` modules and this file) runs in its own
process with the same flags (``--quick``, ``--threads``, ``--repeats``, ``--no-save`` and any
other flag given after them are passed through unchanged). The last stdout line of each run must
be its JSON summary; all of them go to ``benchmarks/results/summary.json``.

A benchmark that cannot run here is *skipped* with one line saying why and what to install: a
peer library missing (``pip install -e ".[bench]"``) or a data set missing (``$EBMS_DATA``).
Benchmarks that compare with several peers run the rows they can and list the rest as skipped
themselves. Exit status 1 if any benchmark failed; skips are not failures.
"""

from __future__ import annotations

import argparse
import ast
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

from _peers import distribution_of, installed_version, missing_peers

HERE = Path(__file__).resolve().parent
RESULTS = HERE / "results"
_NO_MODULE = re.compile(r"No module named '([\w.]+)'")
_NO_DATA = re.compile(r"data not found|not found under \$EBMS_DATA|EBMS_DATA")


def discover() -> list[Path]:
    """Benchmark scripts, sorted by name."""
    return sorted(p for p in HERE.glob("*.py") if not p.name.startswith("_") and p.name != "run_all.py")


def summary_line(script: Path) -> str:
    """The first line of a script's docstring (read without importing it)."""
    try:
        doc = ast.get_docstring(ast.parse(script.read_text(encoding="utf-8")))
    except (OSError, SyntaxError, ValueError):
        doc = None
    return (doc or "").strip().splitlines()[0] if doc else ""


def last_json_line(text: str) -> dict | None:
    """The final non-empty stdout line parsed as a JSON object, else ``None``."""
    lines = [ln for ln in text.splitlines() if ln.strip()]
    if not lines:
        return None
    try:
        out = json.loads(lines[-1])
    except json.JSONDecodeError:
        return None
    return out if isinstance(out, dict) else None


def skip_reason(stderr: str) -> str | None:
    """Why a failed run could not run here (a missing peer or data set), else ``None``."""
    tail = "\n".join(stderr.strip().splitlines()[-5:])
    m = _NO_MODULE.search(tail)
    if m:
        dist = distribution_of(m.group(1))
        if dist is None:
            return None
        version = installed_version(dist)
        fix = "pip install -e \".[bench]\", or `make bench`, installs the pinned peers"
        if version is None:
            return f"peer library {dist} is not installed ({fix})"
        return f"peer library {dist} {version} is installed but has no module {m.group(1)!r} ({fix})"
    if _NO_DATA.search(tail):
        last = stderr.strip().splitlines()[-1]
        return f"data set not found: {last.split(': ', 1)[-1][:300]}"
    return None


def run_one(script: Path, flags: list[str], timeout: float) -> dict:
    cmd = [sys.executable, str(script), *flags]
    print(f"== {script.stem}: {' '.join(cmd[1:])}", flush=True)
    t0 = time.perf_counter()
    try:
        proc = subprocess.run(cmd, cwd=HERE.parent, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired as exc:
        out = exc.stdout.decode() if isinstance(exc.stdout, bytes) else (exc.stdout or "")
        sys.stdout.write(out)
        return {"bench": script.stem, "error": f"timed out after {timeout:.0f} s"}
    wall = time.perf_counter() - t0
    sys.stdout.write(proc.stdout)
    if proc.returncode != 0:
        reason = skip_reason(proc.stderr)
        if reason is not None:
            print(f"   skipped {script.stem}: {reason}", flush=True)
            return {"bench": script.stem, "skipped": reason, "wall_s": round(wall, 2)}
        sys.stderr.write(proc.stderr)
        tail = proc.stderr.strip().splitlines()[-1:] or [""]
        return {"bench": script.stem, "error": f"exit status {proc.returncode}: {tail[0]}", "wall_s": wall}
    sys.stderr.write(proc.stderr)
    summary = last_json_line(proc.stdout)
    if summary is None:
        return {"bench": script.stem, "error": "last stdout line is not a JSON object", "wall_s": wall}
    summary.setdefault("bench", script.stem)
    summary["wall_s"] = round(wall, 2)
    return summary


def build_parser(scripts: list[Path]) -> argparse.ArgumentParser:
    listing = "\n".join(f"  {s.stem:<24} {summary_line(s)}" for s in scripts)
    p = argparse.ArgumentParser(
        prog="python benchmarks/run_all.py",
        description=__doc__.split("\n\n")[0],
        epilog=f"benchmarks:\n{listing}\n\nany other flag is passed through to every benchmark "
               f"(see python benchmarks/<name>.py --help).",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--quick", action="store_true", help="fewer repeats / smaller runs, same comparison")
    p.add_argument("--threads", type=int, default=None,
                   help="torch threads for every implementation (each benchmark's default: 1)")
    p.add_argument("--repeats", type=int, default=None, help="timed repeats per implementation")
    p.add_argument("--no-save", action="store_true", help="do not write benchmarks/results/<bench>.json")
    p.add_argument("--only", default="", help="comma-separated benchmark names to run (default: all)")
    p.add_argument("--skip", default="", help="comma-separated benchmark names to leave out")
    p.add_argument("--timeout", type=float, default=3600.0, help="seconds per benchmark (default 3600)")
    p.add_argument("--list", action="store_true", help="list the benchmarks and exit")
    return p


def _names(p: argparse.ArgumentParser, flag: str, value: str, scripts: list[Path]) -> set[str]:
    wanted = {w.strip() for w in value.split(",") if w.strip()}
    unknown = wanted - {s.stem for s in scripts}
    if unknown:
        p.error(f"{flag}: unknown benchmark(s) {sorted(unknown)}; available: {[s.stem for s in scripts]}")
    return wanted


def main(argv: list[str] | None = None) -> int:
    scripts = discover()
    p = build_parser(scripts)
    args, passthrough = p.parse_known_args(argv)
    if args.list:
        for s in scripts:
            print(f"{s.stem:<24} {summary_line(s)}")
        return 0
    if args.threads is not None and args.threads < 1:
        p.error(f"--threads: expected an int >= 1; got {args.threads}")
    if args.repeats is not None and args.repeats < 1:
        p.error(f"--repeats: expected an int >= 1; got {args.repeats}")
    if args.only:
        wanted = _names(p, "--only", args.only, scripts)
        scripts = [s for s in scripts if s.stem in wanted]
    if args.skip:
        left_out = _names(p, "--skip", args.skip, discover())
        scripts = [s for s in scripts if s.stem not in left_out]
    flags = ["--quick"] if args.quick else []
    flags += ["--threads", str(args.threads)] if args.threads is not None else []
    flags += ["--repeats", str(args.repeats)] if args.repeats is not None else []
    flags += ["--no-save"] if args.no_save else []
    flags += passthrough
    absent = missing_peers()
    if absent:
        print(f"== peers not installed: {', '.join(absent)}; their rows are skipped "
              f"(pip install -e \".[bench]\" installs the pinned versions)", flush=True)
    results = [run_one(s, flags, args.timeout) for s in scripts]
    RESULTS.mkdir(parents=True, exist_ok=True)
    record = {"flags": flags, "python": sys.version.split()[0], "results": results}
    tmp = RESULTS / "summary.json.tmp"
    tmp.write_text(json.dumps(record, indent=2) + "\n")
    os.replace(tmp, RESULTS / "summary.json")
    failed = [r for r in results if "error" in r]
    skipped = [r for r in results if "skipped" in r]
    ok = len(results) - len(failed) - len(skipped)
    print(f"== {ok}/{len(results)} benchmarks ok, {len(skipped)} skipped, {len(failed)} failed; "
          f"summary in {RESULTS / 'summary.json'}")
    for r in skipped:
        print(f"   skipped {r['bench']}: {r['skipped']}")
    for r in failed:
        print(f"   FAILED {r['bench']}: {r['error']}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
