"""Private: Ctrl-C (SIGINT) and SIGTERM deferred to the next step boundary while the trainer runs.

While :class:`DeferredInterrupt` is active (and installed: main thread, SIGINT
still on Python's default handler, SIGTERM on the system's default), the first
SIGINT or SIGTERM only sets
:attr:`DeferredInterrupt.requested`; the training loop checks it after each
complete step (update, log line, callbacks, scheduled checkpoint) and stops
there, so the checkpoint it writes and the log agree. SIGTERM is what ``kill``,
job schedulers and container stops send, and the signal that still reaches a
job started in the background of a script, whose SIGINT the shell ignores. A second signal raises
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
    """Context manager deferring the first SIGINT or SIGTERM (see the module docstring).

    Args:
        enabled: ``False`` leaves both signals alone (e.g. under ``torchrun``, where
            the ranks would stop at different steps).

    Attributes:
        requested: a signal arrived and is waiting for the step boundary.
        installed: the handler is in place for at least one of the two (main thread, default
            handler before).
    """

    #: each signal with the handler it must still have for this one to take over
    SIGNALS = ((signal.SIGINT, signal.default_int_handler), (signal.SIGTERM, signal.SIG_DFL))

    def __init__(self, *, enabled: bool = True) -> None:
        self.enabled = enabled
        self.requested = False
        self._previous: dict[int, Any] = {}  # each signal taken over, with the handler it had

    @property
    def installed(self) -> bool:
        return bool(self._previous)

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        if self.requested:
            raise KeyboardInterrupt  # the second signal: stop now, unsaved
        self.requested = True

    def __enter__(self) -> DeferredInterrupt:
        if self.enabled and threading.current_thread() is threading.main_thread():
            for signum, default in self.SIGNALS:
                current = signal.getsignal(signum)
                if current is default:
                    self._previous[signum] = current
                    signal.signal(signum, self._handle)
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        for signum, previous in self._previous.items():
            signal.signal(signum, previous)
        self._previous = {}
