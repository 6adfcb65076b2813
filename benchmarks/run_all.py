"""Run every benchmark in ``benchmarks/`` and collect their one-line JSON summaries.

Each ``benchmarks/<name>.py`` (except private ``_*.py`` modules and this file)
runs in its own process with the same flags; ``--quick`` and any other
arguments after the ones below are passed through unchanged. The last
stdout line of each run must be its JSON summary; all of them go to
``benchmarks/results/summary.json``. Exit status 1 if any benchmark failed.

Usage::

    python benchmarks/run_all.py [--quick] [--only langevin,...] [--timeout S] [extra flags]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
RESULTS = HERE / "results"


def discover() -> list[Path]:
    """Benchmark scripts, sorted by name."""
    return sorted(p for p in HERE.glob("*.py") if not p.name.startswith("_") and p.name != "run_all.py")


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
    sys.stderr.write(proc.stderr)
    summary = last_json_line(proc.stdout)
    if proc.returncode != 0:
        tail = proc.stderr.strip().splitlines()[-1:] or [""]
        return {"bench": script.stem, "error": f"exit status {proc.returncode}: {tail[0]}", "wall_s": wall}
    if summary is None:
        return {"bench": script.stem, "error": "last stdout line is not a JSON object", "wall_s": wall}
    summary.setdefault("bench", script.stem)
    summary["wall_s"] = round(wall, 2)
    return summary


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="pass --quick to every benchmark")
    p.add_argument("--only", default="", help="comma-separated benchmark names to run (default: all)")
    p.add_argument("--timeout", type=float, default=3600.0, help="seconds per benchmark (default 3600)")
    args, passthrough = p.parse_known_args()
    scripts = discover()
    if args.only:
        wanted = {w.strip() for w in args.only.split(",") if w.strip()}
        unknown = wanted - {s.stem for s in scripts}
        if unknown:
            p.error(f"--only: unknown benchmark(s) {sorted(unknown)}; available: {[s.stem for s in scripts]}")
        scripts = [s for s in scripts if s.stem in wanted]
    flags = (["--quick"] if args.quick else []) + passthrough
    results = [run_one(s, flags, args.timeout) for s in scripts]
    RESULTS.mkdir(parents=True, exist_ok=True)
    record = {"flags": flags, "python": sys.version.split()[0], "results": results}
    tmp = RESULTS / "summary.json.tmp"
    tmp.write_text(json.dumps(record, indent=2) + "\n")
    os.replace(tmp, RESULTS / "summary.json")
    failed = [r["bench"] for r in results if "error" in r]
    print(f"== {len(results) - len(failed)}/{len(results)} benchmarks ok; summary in {RESULTS / 'summary.json'}")
    for r in results:
        if "error" in r:
            print(f"   FAILED {r['bench']}: {r['error']}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
