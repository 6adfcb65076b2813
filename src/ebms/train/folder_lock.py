"""One writer per run folder, and what a run folder holds.

:class:`RunFolderLock` is what ``ebms train`` holds while it trains into a folder and reports: an
exclusive ``flock`` on the folder itself (no file is written for it). A second ``ebms train`` (or
``demo``) into the same folder is refused with one line (:class:`~ebms.errors.RunFolderError`)
instead of writing checkpoints and metrics lines beside the first. The kernel drops the lock with
its holder, kill -9 included. Readers (``eval``, ``sample``) do not take it, and neither does the
:class:`~ebms.train.Trainer` itself: two Python processes given one ``run_dir`` are the caller's to
keep apart.
"""

from __future__ import annotations

import os
from pathlib import Path
from types import TracebackType

from ebms.errors import RunFolderError
from ebms.train.checkpoint import CheckpointStore
from ebms.train.distributed import DistributedContext

try:
    import fcntl
except ImportError:  # pragma: no cover - not POSIX (Windows): run folders are not locked there
    fcntl = None  # type: ignore[assignment]

__all__ = ["RunFolderLock", "run_state"]


def run_state(run_dir: Path) -> str:
    """``"empty"``, ``"checkpoints"`` (a committed checkpoint) or ``"log"`` (a metrics log or the weights of
    a first checkpoint killed before it committed: something to keep, nothing to continue from)."""
    store = CheckpointStore(run_dir / "checkpoints")
    if store.has_checkpoint():
        return "checkpoints"
    log = run_dir / "metrics.jsonl"
    return "log" if store.has_any() or (log.is_file() and log.stat().st_size > 0) else "empty"


class RunFolderLock:
    """An exclusive lock on one run folder, held from :meth:`take` to :meth:`release` (or the end of the ``with``
    block, or of the process). Under ``torchrun`` only global rank 0 takes it (the ranks share the folder);
    without :mod:`fcntl` (not POSIX) it does nothing.

    Example::

        with RunFolderLock("runs/toy") as lock:
            lock.take()  # RunFolderError if another process holds runs/toy
            ...          # write into it
    """

    def __init__(self, run_dir: str | Path) -> None:
        self.run_dir = Path(run_dir)
        self._fd: int | None = None

    @property
    def held(self) -> bool:
        return self._fd is not None

    def take(self) -> None:
        """Create the folder and lock it (when held already: nothing).

        Raises:
            RunFolderError: another process holds it.
        """
        if self._fd is not None or fcntl is None or not DistributedContext.from_env().is_main:
            return
        self.run_dir.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.run_dir, os.O_RDONLY)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise RunFolderError(f"run folder {str(self.run_dir)!r} is being written by another ebms train; wait for "
                                 "it to end, or use another run.name") from None
        self._fd = fd

    def take_fresh(self) -> None:
        """:meth:`take` for a folder that held no run when the caller looked (it may not have existed): refused
        too when another process wrote a run into it meanwhile and has ended.

        Raises:
            RunFolderError: another process holds it, or a run is in it now.
        """
        if self.held:
            return
        self.take()
        if run_state(self.run_dir) != "empty":
            raise RunFolderError(f"run folder {str(self.run_dir)!r}: another process trained into it while this "
                                 "command prepared; run the command again (with --resume to continue that run)")

    def release(self) -> None:
        if self._fd is not None:
            os.close(self._fd)  # closing the descriptor drops the lock
            self._fd = None

    def __enter__(self) -> RunFolderLock:
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None, tb: TracebackType | None) -> None:
        self.release()
