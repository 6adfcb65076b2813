r"""Private: the one progress bar every long loop of the library goes through.

:func:`progress_bar` gives a live tqdm bar when its stream is a terminal (or a Jupyter kernel),
and otherwise (a file, a pipe, a CI log) plain ``\n``-terminated lines that are never redrawn:

* at most one line every :data:`LINE_INTERVAL` seconds (``TQDM_MININTERVAL`` when set), the
  first one only once that much time has gone by, so a loop that ends sooner prints nothing
  in the middle;
* when the bar closes: one summary line if ``leave`` (the trainer's bar), or if it had printed
  a line already (an evaluation long enough to be reported); a short ``leave=False`` bar stays
  silent;
* the line is tqdm's own meter (``desc: 45%|####5     | 45/100 [00:10<00:12, 4.50it/s, k=v]``)
  with a fixed 10-character ASCII bar, whatever the terminal width.

So a run written to a file holds a few lines per bar instead of one ``\r`` redraw per refresh
(tqdm writes ``\r`` redraws to any stream, terminal or not).

Environment, read at each call (tqdm reads it once, when it is imported): ``TQDM_DISABLE`` set to
a non-empty value other than ``0``/``false``/``no``/``off`` turns every bar off (tqdm itself reads
the variable as a Python truth value, so for tqdm ``0`` also turns bars off; here it keeps them);
``TQDM_MININTERVAL`` (seconds, a number ``>= 0``) is the live bar's refresh interval and the
line interval off a terminal. An unreadable ``TQDM_MININTERVAL`` gives a ``RuntimeWarning`` naming
it and the default applies.

Callers keep the switch (``progress=`` on library functions, ``run.progress`` in the CLI) and
pass it as ``enabled``; a disabled bar still iterates and accepts every call.
"""

from __future__ import annotations

import math
import os
import sys
import time
import warnings
from collections.abc import Iterable, Iterator, Mapping
from typing import IO, Any

__all__ = ["LINE_INTERVAL", "progress_bar"]

#: seconds between two lines when the stream is not a terminal (``TQDM_MININTERVAL`` overrides)
LINE_INTERVAL = 30.0

_FALSE = {"", "0", "false", "no", "off"}
_clock = time.monotonic  # a name of its own, so tests can move time


def _disabled_by_env() -> bool:
    return os.environ.get("TQDM_DISABLE", "").strip().lower() not in _FALSE


def _env_interval() -> float | None:
    raw = os.environ.get("TQDM_MININTERVAL")
    if raw is None or not raw.strip():
        return None
    try:
        value = float(raw)
    except ValueError:
        value = math.nan
    if not (math.isfinite(value) and value >= 0):
        warnings.warn(f"TQDM_MININTERVAL: expected a number of seconds >= 0; got {raw!r}; using the default",
                      RuntimeWarning, stacklevel=3)
        return None
    return value


def _is_terminal(stream: Any) -> bool:
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError, OSError):  # no isatty, or a closed stream
        return False


def _in_notebook() -> bool:
    """Whether tqdm.auto would draw a Jupyter widget (a kernel's stderr is not a terminal)."""
    import tqdm.auto  # noqa: F401  (imported first: it silences autonotebook's experimental warning)
    from tqdm import autonotebook, std

    return autonotebook.tqdm is not std.tqdm


class _LineBar:
    """A progress bar as ``\\n``-terminated lines, at most one per ``interval`` seconds (module docstring).

    Has the part of tqdm's interface the library uses: iteration, ``update``, ``set_postfix``,
    ``close``, the context-manager protocol, ``n`` and ``total``. ``stream=None``: silent.
    """

    def __init__(self, iterable: Iterable[Any] | None, *, total: float | None, desc: str, leave: bool,
                 unit: str, initial: int, stream: IO[str] | None, interval: float) -> None:
        if total is None and iterable is not None:
            try:
                total = len(iterable)  # type: ignore[arg-type]
            except (TypeError, AttributeError):
                total = None
        self.iterable, self.total, self.desc, self.leave, self.unit = iterable, total, desc, leave, unit
        self.initial = int(initial)
        self.n: float = self.initial
        self.stream, self.interval = stream, interval
        self.postfix = ""
        self.start = self.last = _clock()
        self.lines = 0
        self.written_n: float | None = None  # the count the last line showed
        self.closed = False

    def __iter__(self) -> Iterator[Any]:
        if self.iterable is None:
            raise TypeError("progress_bar: iterating needs an iterable; got None (use update() instead)")
        try:
            for item in self.iterable:
                yield item
                self.update(1)
        finally:
            self.close()

    def __enter__(self) -> _LineBar:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def update(self, n: float = 1) -> None:
        """Advance by ``n``; prints a line when ``interval`` seconds have passed since the last one."""
        self.n += n
        if self.stream is not None and _clock() - self.last >= self.interval:
            self._write()

    def set_postfix(self, ordered_dict: Mapping[str, Any] | None = None, refresh: bool = True,
                    **kwargs: Any) -> None:
        """Text after the meter, ``key=value`` pairs as tqdm writes them (``refresh`` is ignored: lines
        are only written on time)."""
        items = {**(ordered_dict or {}), **kwargs}
        self.postfix = ", ".join(f"{k}={v:.3g}" if isinstance(v, float) else f"{k}={str(v).strip()}"
                                 for k, v in items.items())

    def close(self) -> None:
        """The summary line (when ``leave``, or after any earlier line; not twice the same count);
        later calls do nothing."""
        if self.closed:
            return
        self.closed = True
        if self.stream is not None and (self.leave or self.lines) and self.n != self.written_n:
            self._write()

    def _write(self) -> None:
        from tqdm import tqdm

        if self.stream is None:
            return
        now = _clock()
        elapsed = now - self.start
        rate = (self.n - self.initial) / elapsed if elapsed > 0 else None
        line = tqdm.format_meter(self.n, self.total, elapsed, ncols=None, prefix=self.desc, ascii=True,
                                 unit=self.unit, rate=rate, postfix=self.postfix or None)
        self.stream.write(line.replace("\r", " ") + "\n")
        self.stream.flush()
        self.last, self.lines, self.written_n = now, self.lines + 1, self.n


def progress_bar(iterable: Iterable[Any] | None = None, *, total: float | None = None, desc: str = "",
                 enabled: bool = True, leave: bool = True, unit: str = "it", initial: int = 0,
                 file: IO[str] | None = None) -> Any:
    """A progress bar over ``iterable`` (or driven by ``update``): live on a terminal, lines elsewhere.

    Args:
        iterable: what to iterate over (``None``: call ``update(n)``).
        total: the expected count (default ``len(iterable)`` when it has one).
        desc: the label before the meter.
        enabled: ``False`` gives a silent bar (the caller's ``progress=`` switch).
        leave: keep the bar when it closes (off a terminal: print the summary line even for a short loop).
        unit: what one step counts. initial: the count it starts from (a resumed run).
        file: the stream (default: ``sys.stderr`` at call time).

    Returns:
        A ``tqdm.auto.tqdm`` when ``file`` is a terminal or the process is a Jupyter kernel, else a
        line bar with tqdm's interface (``update``, ``set_postfix``, ``close``, iteration, ``with``).
        Off a terminal it writes at most one line per ``TQDM_MININTERVAL`` (default
        :data:`LINE_INTERVAL`) seconds plus the summary line, never a carriage return.
    """
    stream = sys.stderr if file is None else file
    on = bool(enabled) and stream is not None and not _disabled_by_env()
    interval = _env_interval() if on else None
    if on and (_is_terminal(stream) or _in_notebook()):
        from tqdm.auto import tqdm

        # explicit values: tqdm's own environment overrides were fixed when it was imported
        return tqdm(iterable, total=total, desc=desc or None, leave=leave, unit=unit, initial=initial, file=stream,
                    dynamic_ncols=True, disable=False, mininterval=0.1 if interval is None else interval)
    return _LineBar(iterable, total=total, desc=desc, leave=leave, unit=unit, initial=initial,
                    stream=stream if on else None, interval=LINE_INTERVAL if interval is None else interval)
