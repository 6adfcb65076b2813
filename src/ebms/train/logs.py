"""The training log as a table, and the writers users look at runs with: CSV and TensorBoard.

``metrics.jsonl`` (written by :class:`~ebms.train.Trainer`) is the run's log of record: one JSON
object per logged step (``{"step": 100, "loss": ..., "grad_norm": ..., "lr": ..., "metrics": {"e_pos": ...},
"time": {...}}``) and one per
event (``{"event": "eval", "step": 100, "values": {...}}``, ``resume``, ``stop``, ...).
:func:`read_metrics` turns it into a table: one row per logged step, in step order, with the
objective's metrics under their own names (``e_pos``, as the callbacks see them), the
evaluation values of that step as ``eval/<name>`` columns (a list such as ``lr_groups`` is left out); when a step appears twice (a run resumed
by hand from an older checkpoint, or a divergence guard's restore) the row written last is kept.

Two callbacks mirror the log as it grows:

* :class:`CSVLog` writes ``metrics.csv`` (one row per logged step, a column per metric, the header
  grows when a metric first appears, in which case the file is rewritten whole);
* :class:`TensorBoardLog` writes TensorBoard event files (the optional ``tensorboard`` package:
  ``pip install ebms[tensorboard]``); a resumed run purges the events written after its checkpoint,
  so the curves are those of an uninterrupted run.

Both derive what they write from ``metrics.jsonl`` or the step's metrics, change no number of
training, keep no state in checkpoints and write on the main process only.
"""

from __future__ import annotations

import csv
import io
import json
import math
import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ebms.errors import DataError
from ebms.train.callbacks import Callback

if TYPE_CHECKING:
    from ebms.train.trainer import Trainer

__all__ = ["LOG_WRITERS", "CSVLog", "MetricsTable", "TensorBoardLog", "read_metrics"]

#: the writers by name (``ebms``'s key ``run.log_to``): :class:`CSVLog`, :class:`TensorBoardLog`.
LOG_WRITERS = ("csv", "tensorboard")

#: keys of a step line that are not metrics.
_NOT_METRICS = ("step", "time", "event")


def _number(v: Any) -> float | None:
    """A metric value as a float (``"nan"``/``"inf"``/``"-inf"`` strings too), else ``None``."""
    if isinstance(v, bool):
        return float(v)
    if isinstance(v, (int, float)):
        return float(v)
    if v in ("nan", "inf", "-inf"):
        return float(v)
    return None


@dataclass
class MetricsTable:
    """The logged steps of a run as a table (:func:`read_metrics`).

    Attributes:
        columns: metric names in the order they first appear (``elapsed_s``, the seconds since the
            fit that logged the row started, is the last column when present).
        rows: ``{step: {column: value}}`` in increasing step order (a row lacks the metrics not
            logged at its step).
    """

    columns: list[str]
    rows: dict[int, dict[str, float]]

    @property
    def steps(self) -> list[int]:
        """The logged steps, increasing."""
        return list(self.rows)

    def column(self, name: str) -> tuple[list[int], list[float]]:
        """``(steps, values)`` of one metric, at the steps that logged it.

        Raises:
            KeyError: no row has ``name`` (the message lists the columns).
        """
        if name not in self.columns:
            raise KeyError(f"{name!r}: not a logged metric; the log has {', '.join(self.columns) or 'none'}")
        pairs = [(s, r[name]) for s, r in self.rows.items() if name in r]
        return [s for s, _ in pairs], [v for _, v in pairs]

    def csv_text(self) -> str:
        """The table as CSV: a ``step`` column, then :attr:`columns` (an empty cell: not logged at that step)."""
        out = io.StringIO()
        w = csv.writer(out, lineterminator="\n")
        w.writerow(["step", *self.columns])
        for step, row in self.rows.items():
            w.writerow([step, *(_cell(row.get(c)) for c in self.columns)])
        return out.getvalue()


def _cell(v: float | None) -> str:
    return "" if v is None else repr(float(v)) if math.isfinite(v) else str(v)


class _Builder:
    """Parses ``metrics.jsonl`` lines into a :class:`MetricsTable`, incrementally."""

    def __init__(self) -> None:
        self.table = MetricsTable([], {})
        self.reordered = False  # a row came out of step order, or an earlier row changed

    def add(self, line: str, where: str) -> None:
        try:
            rec = json.loads(line)
        except json.JSONDecodeError:
            raise DataError(f"{where}: not a JSON line; is it a metrics.jsonl written by ebms?") from None
        if not isinstance(rec, dict) or not isinstance(rec.get("step"), int):
            raise DataError(f"{where}: expected a JSON object with an integer 'step'; is it a metrics.jsonl "
                            f"written by ebms?")
        step = rec["step"]
        event = rec.get("event")
        if event == "eval" and isinstance(rec.get("values"), dict):
            values = {f"eval/{k}": _number(v) for k, v in rec["values"].items()}
            self._update(step, {k: v for k, v in values.items() if v is not None}, merge=True)
        elif event is None:
            flat = {**{k: v for k, v in rec.items() if k not in _NOT_METRICS and k != "metrics"},
                    **(rec["metrics"] if isinstance(rec.get("metrics"), dict) else {})}
            values = {k: _number(v) for k, v in flat.items()}
            row = {k: v for k, v in values.items() if v is not None}
            elapsed = _number(rec["time"].get("elapsed_s")) if isinstance(rec.get("time"), dict) else None
            if elapsed is not None:
                row["elapsed_s"] = elapsed
            self._update(step, row, merge=False)

    def _update(self, step: int, row: dict[str, float], *, merge: bool) -> None:
        t = self.table
        rows = t.rows
        if step in rows and not merge:  # the same step again: the later line is the run that went on
            self.reordered = True
        elif rows and step not in rows and step < next(reversed(rows)):
            self.reordered = True
        elif merge and step in rows and step != next(reversed(rows)):
            self.reordered = True
        if merge and step in rows:
            rows[step].update(row)
        else:
            rows.pop(step, None)
            rows[step] = dict(row)
        for k in row:
            if k not in t.columns:
                t.columns.append(k)
        if "elapsed_s" in t.columns and t.columns[-1] != "elapsed_s":
            t.columns.remove("elapsed_s")
            t.columns.append("elapsed_s")

    def finish(self) -> MetricsTable:
        if self.reordered:
            self.table.rows = dict(sorted(self.table.rows.items()))
        return self.table


def _lines(text: str, path: Path, first_line: int) -> Iterable[tuple[str, str]]:
    for i, line in enumerate(text.splitlines(), first_line):
        if line.strip():
            yield line, f"{path}:{i}"


def read_metrics(path: str | Path) -> MetricsTable:
    """The logged steps of ``metrics.jsonl`` (or of the run folder holding it) as a :class:`MetricsTable`.

    Raises:
        DataError: no such file, or a line that is not one ebms writes (named by file and line).
    """
    p = Path(path)
    if p.is_dir():
        p = p / "metrics.jsonl"
    if not p.is_file():
        raise DataError(f"{p}: no such file (a run folder made by `ebms train` holds metrics.jsonl once it has "
                        f"logged a step)")
    b = _Builder()
    for line, where in _lines(p.read_text(encoding="utf-8"), p, 1):
        b.add(line, where)
    return b.finish()


def _write_atomic(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    try:
        tmp.write_text(text, encoding="utf-8")
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


class CSVLog(Callback):
    """``metrics.csv`` beside ``metrics.jsonl``: the table of :func:`read_metrics`, kept up to date.

    After every logged step (and at the end of the fit) the lines ``metrics.jsonl`` gained are read;
    new rows are appended, and the file is written whole when a metric first appears or an earlier
    row changes (an evaluation logged after its step's row, a resume). Add it after the callbacks that
    log evaluations (:class:`~ebms.train.PeriodicEval`) so a step's row is complete when written.

    Args:
        path: the CSV file (default ``<run_dir>/metrics.csv``; a trainer without a run folder writes none).
    """

    def __init__(self, path: str | Path | None = None) -> None:
        self.path = None if path is None else Path(path)
        self._source: Path | None = None
        self._target: Path | None = None
        self._builder = _Builder()
        self._offset = 0
        self._written_columns: list[str] = []
        self._written_rows = 0

    def on_fit_start(self, trainer: Trainer) -> None:
        self._source = self._target = None
        if not trainer.is_main or trainer.run_dir is None:
            return
        self._source = trainer.run_dir / "metrics.jsonl"
        self._target = self.path or trainer.run_dir / "metrics.csv"
        self._builder, self._offset, self._written_rows = _Builder(), 0, 0  # a resume cut the log: read it again
        self._sync(rewrite=True)

    def on_step_end(self, trainer: Trainer, step: int, metrics: dict[str, float]) -> None:
        if self._source is not None and step % trainer.log_every == 0:
            self._sync(rewrite=False)

    def on_fit_end(self, trainer: Trainer) -> None:
        if self._source is not None:
            self._sync(rewrite=False)

    def _sync(self, *, rewrite: bool) -> None:
        assert self._source is not None and self._target is not None
        if self._source.is_file():
            with open(self._source, "rb") as f:
                f.seek(self._offset)
                data = f.read()
            end = data.rfind(b"\n") + 1  # whole lines only
            self._offset += end
            for line, where in _lines(data[:end].decode("utf-8"), self._source, 0):
                self._builder.add(line, where)
        b, t = self._builder, self._builder.table
        if rewrite or b.reordered or t.columns != self._written_columns:
            table = b.finish()
            b.reordered = False
            _write_atomic(self._target, table.csv_text())
        elif len(t.rows) > self._written_rows:
            new = list(t.rows.items())[self._written_rows:]
            with open(self._target, "a", encoding="utf-8", newline="") as f:
                out = csv.writer(f, lineterminator="\n")
                for step, row in new:
                    out.writerow([step, *(_cell(row.get(c)) for c in t.columns)])
        self._written_columns, self._written_rows = list(t.columns), len(t.rows)


class TensorBoardLog(Callback):
    """TensorBoard event files of the logged steps' metrics (the optional ``tensorboard`` package).

    After every logged step each numeric metric of the step (``loss``, ``grad_norm``, ``lr``, the
    objective's, ``eval/<name>`` from an earlier :class:`~ebms.train.PeriodicEval`) is written as a
    scalar at its step. A resumed fit opens the writer with ``purge_step`` at the first step it runs
    again, so TensorBoard drops what the interrupted fit wrote after its checkpoint.

    Args:
        log_dir: the event files' folder (default ``<run_dir>/tensorboard``).

    Raises:
        ImportError: (at the start of the fit) ``tensorboard`` is not installed; the message says how.
    """

    def __init__(self, log_dir: str | Path | None = None) -> None:
        self.log_dir = None if log_dir is None else Path(log_dir)
        self._writer: Any = None

    def on_fit_start(self, trainer: Trainer) -> None:
        self._writer = None
        if not trainer.is_main or (trainer.run_dir is None and self.log_dir is None):
            return
        try:
            from torch.utils.tensorboard import SummaryWriter
        except ImportError:
            raise ImportError("TensorBoardLog needs the tensorboard package: pip install 'ebms[tensorboard]'") \
                from None
        folder = self.log_dir or trainer.run_dir / "tensorboard"  # type: ignore[operator]
        self._writer = SummaryWriter(str(folder), purge_step=trainer.step + 1 if trainer.step > 0 else None)

    def on_step_end(self, trainer: Trainer, step: int, metrics: dict[str, float]) -> None:
        if self._writer is None or step % trainer.log_every:
            return
        for k, v in _scalars(metrics).items():
            self._writer.add_scalar(k, v, step)
        self._writer.flush()

    def on_fit_end(self, trainer: Trainer) -> None:
        if self._writer is not None:
            self._writer.close()
            self._writer = None


def _scalars(metrics: Mapping[str, Any]) -> dict[str, float]:
    return {k: float(v) for k, v in metrics.items() if _number(v) is not None and not isinstance(v, str)}
