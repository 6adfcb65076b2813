"""The committed record of a side-by-side benchmark (``benchmarks/records/<name>.json``).

The benchmarks built on :mod:`_common` collect one run record (``machine``, ``workload`` and
their results, every timed repeat included) and save it to the git-ignored
``benchmarks/results/<name>.json``. This module writes the *committed* record of the same run
through :class:`_record.Recorder`: the summaries the pages quote (medians, ratios, throughputs,
check differences), without the per-repeat lists (keys starting with ``all_``).

Usage, in a benchmark's ``main``::

    args = C.parse_args(...)
    rec = start("langevin", args)            # notes the start time and the machine load
    ...                                      # the run; ``record`` as saved to results/
    finish(rec, args, record, notes="...")   # writes benchmarks/records/langevin.json

A ``--quick`` run (fewer repeats) and a ``--no-save`` run write no record: the committed record
is the full protocol's.
"""

from __future__ import annotations

import argparse
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from _record import Recorder

__all__ = ["finish", "start", "summarise"]

_HEADER_KEYS = ("bench", "quick", "machine", "workload")


def start(name: str, args: argparse.Namespace, *, seeds: tuple[int, ...] = ()) -> Recorder:
    """A :class:`Recorder` for benchmark ``name``, made when the run starts (time and load)."""
    return Recorder(name, seeds=seeds, settings={"quick": bool(getattr(args, "quick", False))})


def summarise(obj: Any) -> Any:
    """``obj`` without its per-repeat lists: every key starting with ``all_`` is dropped."""
    if isinstance(obj, Mapping):
        return {k: summarise(v) for k, v in obj.items() if not str(k).startswith("all_")}
    if isinstance(obj, (list, tuple)):
        return [summarise(v) for v in obj]
    return obj


def finish(rec: Recorder, args: argparse.Namespace, record: Mapping[str, Any], *, notes: str = "",
           settings: Mapping[str, Any] | None = None, directory: Path | None = None) -> Path | None:
    """Write the committed record of the run ``record`` (the benchmark's results dict).

    Settings: the run's ``workload``, the repeat count flags, the peer libraries' versions (from
    ``record["machine"]["peers"]``) and ``settings``. Figures: the rest of ``record``, summarised.
    ``directory`` replaces ``benchmarks/records/`` (tests). Returns the path, or ``None`` for a
    ``--quick`` or ``--no-save`` run (no record written).
    """
    quick, no_save = bool(getattr(args, "quick", False)), bool(getattr(args, "no_save", False))
    machine = record.get("machine") or {}
    rec.settings = {
        "quick": quick,
        "repeats_flag": getattr(args, "repeats", None),
        "workload": summarise(record.get("workload")),
        "peers": dict(machine.get("peers") or {}),
        **dict(settings or {}),
    }
    figures = {k: summarise(v) for k, v in record.items() if k not in _HEADER_KEYS}
    return rec.write(figures, notes=notes, directory=directory, enabled=not (quick or no_save))
