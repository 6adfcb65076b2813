"""Private: Ctrl-C (SIGINT) deferred to the next step boundary while the trainer runs.

While :class:`DeferredInterrupt` is active (and installed: main thread, SIGINT
still on Python's default handler), the first SIGINT only sets
:attr:`DeferredInterrupt.requested`; the training loop checks it after each
complete step (update, log line, callbacks, scheduled checkpoint) and stops
there, so the checkpoint it writes and the log agree. A second SIGINT raises
``KeyboardInterrupt`` at once, wherever the program is, for a step that never
ends; the state is then mid-step and is not saved (the previous checkpoint
stands, as after ``kill -9``).
"""

from __future__ import annotations

import signal
import threading
from types import FrameType, TracebackType
from typing import Any


class DeferredInterrupt:
    """Context manager deferring the first SIGINT (see the module docstring).

    Args:
        enabled: ``False`` leaves SIGINT alone (e.g. under ``torchrun``, where
            the ranks would stop at different steps).

    Attributes:
        requested: a SIGINT arrived and is waiting for the step boundary.
        installed: the handler is in place (main thread, default handler before).
    """

    def __init__(self, *, enabled: bool = True) -> None:
        self.enabled = enabled
        self.requested = False
        self.installed = False
        self._previous: Any = None

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        if self.requested:
            raise KeyboardInterrupt  # the second Ctrl-C: stop now, unsaved
        self.requested = True

    def __enter__(self) -> DeferredInterrupt:
        if self.enabled and threading.current_thread() is threading.main_thread():
            current = signal.getsignal(signal.SIGINT)
            if current is signal.default_int_handler:
                self._previous = current
                signal.signal(signal.SIGINT, self._handle)
                self.installed = True
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        if self.installed:
            signal.signal(signal.SIGINT, self._previous)
            self.installed = False
