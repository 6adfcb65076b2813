"""Private: the trainer's loop around its steps: start (rank agreement, log, callbacks, progress
bar), the steps with their log lines, callbacks and checkpoints, Ctrl-C, and the exit checkpoint."""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from ebms._progress import progress_bar
from ebms.train import _snapshot
from ebms.train._interrupt import DeferredInterrupt

if TYPE_CHECKING:
    from ebms.train.trainer import Trainer

HEALTH = ("loss", "e_pos", "e_neg", "gap", "acc", "grad_norm")


@dataclass(frozen=True)
class TrainResult:
    """What :meth:`Trainer.fit` returns.

    Attributes:
        step: steps completed (the optimizer step counter).
        metrics: the last step's flat metrics (``loss``, ``grad_norm``, ``lr``, objective metrics).
        stop_reason: why training ended before ``steps`` (early stopping), else ``None``.
        checkpoint: the exit checkpoint's JSON record (``None`` on non-zero ranks).
        restores: divergence restores performed during this fit.
    """

    step: int
    metrics: dict[str, float]
    stop_reason: str | None
    checkpoint: Path | None
    restores: int


def run(t: Trainer, interrupt: DeferredInterrupt, truncate: int | None) -> TrainResult:
    """:meth:`Trainer.fit` once the run folder is open (``truncate``: the offset metrics.jsonl is cut to)."""
    resumed_from, t._restored_from = t._restored_from, None  # also set by a direct restore()
    if t.dist.enabled:
        steps = [int(x) for x in t.dist.gather_tensor(torch.tensor([t.step], device=t.device))]
        if len(set(steps)) > 1:
            raise RuntimeError(f"distributed: ranks resumed at different steps {steps}; is run_dir shared by all ranks?")
    t.dist.broadcast_(_snapshot.sync_tensors(t))
    t._t0 = time.time()
    # a resumed run drops what was logged after its checkpoint (those steps are re-run exactly)
    t._log.open(truncate_to=truncate)
    if resumed_from is not None:
        t.log_event("resume", checkpoint=str(resumed_from))
    stopped_before = t._stop_reason  # a resumed run that had stopped early stays stopped
    t._restores, t._snapshot, t._pending = 0, None, None
    for cb in t.callbacks:
        cb.on_fit_start(t)
    bar = progress_bar(total=t.steps, initial=t.step, desc="train", enabled=t.progress and t.is_main)
    at_boundary = True  # between two complete steps: the state, the log and the callbacks agree
    try:
        while t.step < t.steps and t._stop_reason is None:
            at_boundary = False
            if t._one_step():
                after_step(t, bar)
            at_boundary = True
            if interrupt.requested:
                raise KeyboardInterrupt
    except KeyboardInterrupt:
        saved = at_boundary and not t.dist.enabled
        reason = "interrupted" if saved else "interrupted during a step (not saved)"
        t.log_event("stop", reason=reason)
        if saved and t.step != t._saved_step and t.store is not None:
            t.save_checkpoint()
        t._log.close()
        raise
    except BaseException:
        t._log.close()
        raise
    finally:
        bar.close()
    if t._stop_reason is not None and stopped_before is None:
        t.log_event("stop", reason=t._stop_reason)
    if t.store is None:
        path = None
    else:
        path = t.save_checkpoint() if t.step != t._saved_step else t.store.latest()
    for cb in t.callbacks:
        cb.on_fit_end(t)
    t._log.close()
    return TrainResult(t.step, dict(t.metrics), t._stop_reason, path if t.is_main else None, t._restores)


def after_step(t: Trainer, bar: Any) -> None:
    """After an accepted step: its log line (on log steps), the bar, the callbacks, a checkpoint when due,
    and under torchrun the ranks' agreement on stopping."""
    if t.step % t.log_every == 0:
        t._log.write({**t._record, "time": t._time()})
        bar.set_postfix({k: f"{t.metrics[k]:.4g}" for k in HEALTH if k in t.metrics}, refresh=False)
    bar.update(1)
    for cb in t.callbacks:
        cb.on_step_end(t, t.step, t.metrics)
    if t.checkpoint_every is not None and t.store is not None and t.step % t.checkpoint_every == 0:
        t.save_checkpoint()
    if t.dist.enabled:  # every rank stops at the same step, whichever asked
        flag = torch.tensor([float(t._stop_reason is not None)], device=t.device)
        if float(t.dist.mean(flag)) > 0 and t._stop_reason is None:
            t._stop_reason = "stop requested on another rank"
