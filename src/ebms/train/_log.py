"""Private: the append-only ``metrics.jsonl`` writer (strict JSON, one object per line)."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import IO, Any


def jsonable(obj: Any) -> Any:
    """Strict-JSON copy: non-finite floats become the strings ``"nan"``, ``"inf"``, ``"-inf"``."""
    if isinstance(obj, float) and not math.isfinite(obj):
        return "nan" if math.isnan(obj) else ("inf" if obj > 0 else "-inf")
    if isinstance(obj, dict):
        return {str(k): jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [jsonable(v) for v in obj]
    return obj


class MetricsLog:
    """Appends records to ``path`` (only when ``enabled``: rank 0 of a run with a folder), flushing
    every line. ``path=None`` (an in-memory run) writes nothing."""

    def __init__(self, path: Path | None, *, enabled: bool) -> None:
        self.path = path
        self.enabled = enabled and path is not None
        self._f: IO[str] | None = None

    def open(self, *, truncate_to: int | None = None) -> None:
        """Open for appending; with ``truncate_to``, first drop bytes written after that offset."""
        if not self.enabled or self.path is None:
            return
        self.path.parent.mkdir(parents=True, exist_ok=True)
        if truncate_to is not None and self.path.exists() and self.path.stat().st_size > truncate_to:
            with open(self.path, "r+b") as f:
                f.truncate(truncate_to)
        self._f = open(self.path, "a", encoding="utf-8")

    def write(self, record: dict[str, Any]) -> None:
        if self._f is not None:
            self._f.write(json.dumps(jsonable(record), allow_nan=False) + "\n")
            self._f.flush()

    def offset(self) -> int:
        """Bytes written so far (stored in checkpoints; a resume truncates back to it)."""
        if self._f is None:
            return 0
        return self._f.tell()

    def rewind(self, offset: int) -> None:
        """Drop the step lines written after ``offset`` (steps a restore has undone).

        Event lines (``{"event": ...}``, e.g. earlier restores) are kept, in order.
        """
        if self._f is None or self.path is None or self._f.tell() <= offset:
            return
        self._f.flush()
        with open(self.path, "rb") as f:
            f.seek(offset)
            tail = f.read().decode("utf-8").splitlines(keepends=True)
        keep = [line for line in tail if '"event"' in line and "event" in json.loads(line)]
        self._f.truncate(offset)
        self._f.seek(offset)
        for line in keep:
            self._f.write(line)
        self._f.flush()

    def close(self) -> None:
        if self._f is not None:
            self._f.close()
            self._f = None
