"""Committed records: the evidence behind every figure the documentation quotes.

A record is one small JSON file, ``benchmarks/records/<name>.json``, written by the run that
measured its figures and committed with the page that quotes them
(``tests/docs/figures.py`` checks every quoted figure against it). It holds::

    name, command, commit (+ "-dirty" when files differed from it, and their names), date (UTC),
    seeds, threads, cpu (model name), cpu_count, torch, python, ebms,
    wall_s, peak_rss_mb (this process and its children), load_avg_1min_at_start,
    settings   what the run was configured with (steps, sizes, learning rates ...)
    figures    what it measured (nested dicts of numbers; comparisons from
               ebms.metrics.compare_over_seeds(...).to_dict())
    notes      free text: what the figures mean, what was left out

Usage, in a benchmark::

    from _record import Recorder
    rec = Recorder("ctc_crf_digits", seeds=[0, 1, 2], settings={"epochs": 30})
    ...                                   # the run
    rec.write(figures={"wer": {...}, "crf_vs_ctc": cmp.to_dict()})

``Recorder`` notes the start time and load when it is made; ``write`` adds the wall time and peak
memory at that moment. Records must stay small (``MAX_BYTES``): per-step curves and weights go to
``benchmarks/results/`` (not committed), summaries to the record.
"""

from __future__ import annotations

import json
import math
import os
import platform
import resource
import shlex
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from datetime import datetime, timezone
from importlib import metadata
from pathlib import Path
from typing import Any

import torch

ROOT = Path(__file__).resolve().parents[1]
RECORDS_DIR = ROOT / "benchmarks" / "records"
MAX_BYTES = 64_000

__all__ = ["MAX_BYTES", "RECORDS_DIR", "Recorder", "cpu_model", "git_commit", "peak_rss_mb"]


def cpu_model() -> str:
    """The CPU's model name (``/proc/cpuinfo``), else what :mod:`platform` knows."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.lower().startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def git_commit() -> tuple[str | None, list[str]]:
    """``HEAD``'s hash, with ``-dirty`` when files differ from it, and the differing files (tracked
    and untracked, at most 400 names); ``(None, [])`` outside a checkout."""
    try:
        head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True,
                              check=True).stdout.strip()
        status = subprocess.run(["git", "status", "--porcelain"], cwd=ROOT, capture_output=True, text=True,
                                check=True).stdout.splitlines()
    except (OSError, subprocess.CalledProcessError):
        return None, []
    files = sorted(line[3:] for line in status if line[3:] and not line[3:].startswith("benchmarks/records/"))
    return head + ("-dirty" if files else ""), files[:400]


def peak_rss_mb() -> float:
    """Peak resident memory (MB) of this process plus its largest finished child (Linux: ru_maxrss in KB)."""
    own = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    kids = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    scale = 1 / 1024 if sys.platform != "darwin" else 1 / 2**20
    return round(max(own, kids) * scale, 1)


def _version(dist: str) -> str | None:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return None


def _command(argv: Sequence[str]) -> str:
    script = Path(argv[0]).resolve() if argv else None
    try:
        shown = str(script.relative_to(ROOT)) if script else ""
    except ValueError:
        shown = str(script)
    return shlex.join(["python", shown, *argv[1:]])


def _plain(obj: Any, where: str) -> Any:
    """``obj`` as plain JSON (tensors become lists); non-finite floats refused: a record states numbers."""
    if isinstance(obj, torch.Tensor):
        obj = obj.tolist()
    if isinstance(obj, Mapping):
        return {str(k): _plain(v, f"{where}.{k}") for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_plain(v, f"{where}[{i}]") for i, v in enumerate(obj)]
    if isinstance(obj, float) and not math.isfinite(obj):
        raise ValueError(f"{where}: {obj!r} is not a number a record can hold (write None and say why in notes)")
    if obj is None or isinstance(obj, (bool, int, float, str)):
        return obj
    if hasattr(obj, "item"):
        return _plain(obj.item(), where)
    raise TypeError(f"{where}: expected JSON values (numbers, strings, lists, dicts); got {type(obj).__name__}")


class Recorder:
    """Collects what a record says about the run; :meth:`write` writes it.

    Args:
        name: the record's file stem (``benchmarks/records/<name>.json``).
        seeds: the seeds the figures come from.
        settings: what the run was configured with.
        argv: the command line (default ``sys.argv``).
    """

    def __init__(self, name: str, *, seeds: Sequence[int] = (), settings: Mapping[str, Any] | None = None,
                 argv: Sequence[str] | None = None) -> None:
        if not name or "/" in name or name.startswith("."):
            raise ValueError(f"name: expected a file stem without '/'; got {name!r}")
        self.name = name
        self.seeds = [int(s) for s in seeds]
        self.settings = dict(settings or {})
        self.argv = list(sys.argv if argv is None else argv)
        self.t0 = time.perf_counter()
        self.commit, self.dirty = git_commit()  # the code that runs: read at the start
        self.load = os.getloadavg()[0] if hasattr(os, "getloadavg") else None

    def header(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "command": _command(self.argv),
            "commit": self.commit,
            "dirty_files": self.dirty,
            "date": datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
            "seeds": self.seeds,
            "threads": torch.get_num_threads(),
            "cpu": cpu_model(),
            "cpu_count": os.cpu_count(),
            "torch": torch.__version__,
            "python": platform.python_version(),
            "ebms": _version("ebms"),
            "wall_s": round(time.perf_counter() - self.t0, 1),
            "peak_rss_mb": peak_rss_mb(),
            "load_avg_1min_at_start": None if self.load is None else round(self.load, 2),
        }

    def write(self, figures: Mapping[str, Any], *, notes: str = "", directory: Path | None = None,
              enabled: bool = True) -> Path | None:
        """Write the record atomically; returns its path (``None`` when ``enabled`` is false)."""
        if not enabled:
            return None
        record = {**self.header(), "settings": _plain(self.settings, "settings"),
                  "figures": _plain(dict(figures), "figures"), "notes": notes}
        text = json.dumps(record, indent=1, sort_keys=False) + "\n"
        if len(text.encode()) > MAX_BYTES:
            raise ValueError(f"record {self.name!r}: {len(text.encode())} bytes, above {MAX_BYTES}; keep per-step "
                             "curves in benchmarks/results/ and summaries in the record")
        out = directory or RECORDS_DIR
        out.mkdir(parents=True, exist_ok=True)
        path = out / f"{self.name}.json"
        tmp = path.with_suffix(".json.tmp")
        tmp.write_text(text)
        os.replace(tmp, path)
        print(f"record: {path.relative_to(ROOT) if path.is_relative_to(ROOT) else path}", file=sys.stderr)
        return path
