"""Private: the trainer's side of the divergence guard (:mod:`ebms.train.guard`).

Before a step that may need it, the trainer captures a snapshot of the complete state (pending
until the step is judged healthy, then the last good one). When the guard rejects a step, the last
good snapshot is put back, the log loses the undone step lines, and every learning rate is lowered
by ``lr_factor ** retries``; after ``max_retries`` restores in a row (or with nothing to restore)
:class:`~ebms.train.guard.TrainingDiverged` is raised with advice.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import TYPE_CHECKING

from ebms.train import _snapshot
from ebms.train.guard import ADVICE, TrainingDiverged

if TYPE_CHECKING:
    from ebms.train.trainer import Trainer

logger = logging.getLogger("ebms.train")

#: where an in-memory run (``run_dir=None``) names itself in error messages
IN_MEMORY = "<in-memory run>"


def snapshot_due(t: Trainer) -> bool:
    """Whether to capture the state before the coming step (first step, snapshot and checkpoint steps)."""
    if t._pending is not None or t.guard is None:
        return False
    if t._snapshot is None:
        return True
    if t._snapshot.step == t.step:
        return False
    every = t.guard.snapshot_every
    at_ckpt = t.checkpoint_every is not None and t.step % t.checkpoint_every == 0
    return at_ckpt or (every is not None and t.step % every == 0)


def checkpoint_of_now(t: Trainer) -> Path | None:
    """The checkpoint record that holds the current state, where a snapshot may read its tensors back
    from it: the one this trainer just saved or restored at this step, in a store that keeps at least
    two (a newer save must not delete it while it is the last good state), on one process."""
    if t.store is None or t.dist.enabled or (t.store.keep is not None and t.store.keep < 2):
        return None
    path = t._saved_path
    if t._saved_step != t.step or path is None or not path.is_file():
        return None
    return path


def healthy(t: Trainer, loss_f: float, metrics: dict[str, float], gnorm: float) -> bool:
    """The divergence guard's verdict; on failure the last good state is restored (``False``),
    otherwise the snapshot taken before this step becomes the last good one."""
    if t.guard is None:
        return True
    metrics = {k: v for k, v in metrics.items() if k not in t._unanchored}  # levels the objective leaves free
    reason = t.guard.check(loss_f, metrics, gnorm, t._guard_history)
    if reason is not None:
        recover(t, reason)
        return False
    t.guard.record(t._guard_history, loss_f, metrics)
    if t._pending is not None:
        t._snapshot, t._pending, t._retries = t._pending, None, 0
    return True


def recover(t: Trainer, reason: str) -> None:
    """Restore the last good snapshot and lower the learning rates, or raise :class:`TrainingDiverged`."""
    assert t.guard is not None
    failed = t.step + 1
    t._retries += 1
    if t._snapshot is None or t._retries > t.guard.max_retries:
        t.log_event("diverged", failed_step=failed, reason=reason, action="stop")
        if t._snapshot is None:
            msg = (
                f"training diverged at step {failed}: {reason}; no earlier healthy state to restore "
                "(the first step after the start or resume failed). Check the data, the initialisation "
                f"and the objective, or {ADVICE}"
            )
        else:
            lr = float(t.optimizer.param_groups[0]["lr"])
            start_lr = lr / t.guard.lr_factor ** (t._retries - 1)
            msg = (
                f"training diverged at step {failed}: {reason}; gave up after {t.guard.max_retries} "
                f"restore(s) to step {t._snapshot.step} (lr {start_lr:.3g} lowered to {lr:.3g}, "
                f"grad_clip={t.grad_clip}). To fix: {ADVICE}"
            )
        raise TrainingDiverged(msg)
    t._pending = None
    # a snapshot read back from its checkpoint is this restore's own copy; one kept in memory serves the next too
    snap = _snapshot.read_back(t, t._snapshot)
    _snapshot.apply(t, snap, IN_MEMORY if t.run_dir is None else str(t.run_dir), copy=snap is t._snapshot)
    t._log.rewind(t._snapshot.log_offset)  # the undone steps leave the log too
    factor = t.guard.lr_factor**t._retries
    for g in t.optimizer.param_groups:
        g["lr"] = g["lr"] * factor
        g["initial_lr"] = g["initial_lr"] * factor
    t.optimizer.zero_grad(set_to_none=True)
    t._restores += 1
    lr = float(t.optimizer.param_groups[0]["lr"])
    t.log_event(
        "diverged", failed_step=failed, reason=reason, action="restore",
        retry=t._retries, max_retries=t.guard.max_retries, lr=lr,
    )
    logger.warning(
        "step %d diverged (%s): restored step %d, lr -> %.3g (retry %d/%d)",
        failed, reason, t.step, lr, t._retries, t.guard.max_retries,
    )
