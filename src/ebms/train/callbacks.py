"""Hooks into the training loop: evaluation, sample snapshots, early stopping, memory release.

A callback is a subclass of :class:`Callback`, whose hooks are no-ops to override::

    on_fit_start(trainer)                 once, after any resume
    on_step_end(trainer, step, metrics)   after every optimizer step
    on_fit_end(trainer)                   once, after the exit checkpoint
    state_dict() / load_state_dict(d)     state kept across steps (None: none)

``metrics`` is one flat dict per step — ``loss``, ``grad_norm``, ``lr`` and the
objective's metrics (``e_pos``, ``e_neg``, ``gap``, ...). The same dict is
handed to the callbacks in order, so an earlier callback may add entries for a
later one (:class:`PeriodicEval` adds ``eval/<name>``, which
:class:`EarlyStopping` can monitor).

Callbacks run on every rank under ``torchrun``; guard side effects (files,
plots) with ``trainer.is_main``. A callback that keeps state across steps
returns it from ``state_dict()`` (JSON-able) and takes it back in
``load_state_dict(d)``: the trainer stores it in checkpoints and snapshots so
resumes stay exact.
"""

from __future__ import annotations

import gc
import math
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from ebms._checks import check_int
from ebms._memory import release_free_memory

if TYPE_CHECKING:
    from ebms.train.trainer import Trainer

__all__ = ["Callback", "EarlyStopping", "PeriodicEval", "ReleaseMemory", "SampleSnapshot"]


class Callback:
    """Base class of the trainer's callbacks: every hook is a no-op (override what you need).

    The trainer calls all of them on every callback, so they are the declared protocol: no
    hook is looked up by name.
    """

    def on_fit_start(self, trainer: Trainer) -> None:
        """Called once when :meth:`Trainer.fit` starts (after resuming)."""

    def on_step_end(self, trainer: Trainer, step: int, metrics: dict[str, float]) -> None:
        """Called after optimizer step ``step`` (1-based) with that step's metrics."""

    def on_fit_end(self, trainer: Trainer) -> None:
        """Called once when :meth:`Trainer.fit` ends normally."""

    def state_dict(self) -> dict[str, Any] | None:
        """JSON-able state to checkpoint (``None``: the callback keeps no state)."""
        return None

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Take back what :meth:`state_dict` returned (called only for a non-``None`` state)."""
        raise TypeError(
            f"{type(self).__name__}: state_dict() returned state but load_state_dict() is not overridden"
        )


class ReleaseMemory(Callback):
    """When training starts and every ``every`` steps hand the C heap's free pages back to the kernel
    (:func:`ebms._memory.release_free_memory`, glibc's ``malloc_trim``; a no-op elsewhere).

    A long run whose steps allocate and free tens of MiB of temporaries otherwise holds on to the
    freed memory, and its resident set creeps up step after step without any leak (the TRF PTB
    recipe's main process grew by hundreds of MiB over 20,000 steps). Keeps no state and changes no
    number; ``ebms train`` adds it to every run.

    Args:
        every: period in steps (default 100; one call costs tens of milliseconds).
    """

    def __init__(self, every: int = 100) -> None:
        self.every = check_int(every, "every", minimum=1)
        self.calls = 0

    def on_fit_start(self, trainer: Trainer) -> None:
        # what building the model and resuming left free, before the first step forks any sampler worker
        # (a fork shares the parent's pages, freed ones included, until one side writes them)
        gc.collect()
        release_free_memory()

    def on_step_end(self, trainer: Trainer, step: int, metrics: dict[str, float]) -> None:
        if step % self.every == 0:
            release_free_memory()
            self.calls += 1


class PeriodicEval(Callback):
    """Every ``every`` steps call ``fn(trainer) -> {name: float}`` and log the result.

    Under ``torchrun`` ``fn`` runs on every rank and the values are averaged
    over ranks (so every rank sees the same numbers). The values go to
    ``metrics.jsonl`` as ``{"event": "eval", "step", "values"}``
    and into the step's metrics dict as ``<prefix><name>``. ``fn`` should use its
    own ``torch.Generator`` (the trainer's generator belongs to training, and
    drawing from it would make results depend on the evaluation schedule).

    Args:
        fn: evaluation function; gets the trainer (``trainer.model``,
            ``trainer.objective``, ``trainer.step``).
        every: period in steps.
        prefix: key prefix in the metrics dict.
    """

    def __init__(self, fn: Callable[[Trainer], Mapping[str, float]], every: int, *, prefix: str = "eval/") -> None:
        if not callable(fn):
            raise TypeError(f"fn: expected a callable trainer -> dict; got {type(fn).__name__}")
        self.fn = fn
        self.every = check_int(every, "every", minimum=1)
        self.prefix = prefix

    def on_step_end(self, trainer: Trainer, step: int, metrics: dict[str, float]) -> None:
        if step % self.every:
            return
        result = self.fn(trainer)
        if not isinstance(result, Mapping):
            raise TypeError(f"PeriodicEval fn: expected a dict of floats; got {type(result).__name__}")
        values = {}
        for k, v in result.items():
            try:
                values[str(k)] = float(v)
            except (TypeError, ValueError):
                raise TypeError(f"PeriodicEval fn: value {k!r} is not a number; got {v!r}") from None
        if trainer.dist.enabled and values:  # same numbers on every rank (mean over ranks)
            keys = sorted(values)
            mean = trainer.dist.mean(torch.tensor([values[k] for k in keys], dtype=torch.float64, device=trainer.device))
            values = dict(zip(keys, mean.tolist()))
        trainer.log_event("eval", values=values)
        metrics.update({self.prefix + k: v for k, v in values.items()})


class SampleSnapshot(Callback):
    """Every ``every`` steps call ``fn(trainer, step, path)`` to draw and save a picture.

    ``path`` is ``run_dir/<folder>/step_000000100.png``; ``fn`` writes the file
    (any plotting code; this module imports none) and may return the path it
    actually wrote. Runs on rank 0 only and logs ``{"event": "sample", "path"}``.

    Args:
        fn: ``(trainer, step, path) -> Path | None``.
        every: period in steps.
        folder: sub-folder of the run folder.
    """

    def __init__(
        self, fn: Callable[[Trainer, int, Path], Path | None], every: int, *, folder: str = "samples"
    ) -> None:
        if not callable(fn):
            raise TypeError(f"fn: expected a callable (trainer, step, path); got {type(fn).__name__}")
        self.fn = fn
        self.every = check_int(every, "every", minimum=1)
        self.folder = folder

    def on_fit_start(self, trainer: Trainer) -> None:
        if trainer.run_dir is None:
            raise ValueError("SampleSnapshot: expected a trainer with a run_dir to write pictures into; got run_dir=None")

    def on_step_end(self, trainer: Trainer, step: int, metrics: dict[str, float]) -> None:
        if step % self.every or not trainer.is_main or trainer.run_dir is None:
            return
        target = trainer.run_dir / self.folder / f"step_{step:09d}.png"
        target.parent.mkdir(parents=True, exist_ok=True)
        written = self.fn(trainer, step, target)
        trainer.log_event("sample", path=str(written if written is not None else target))


class EarlyStopping(Callback):
    """Stop when ``monitor`` has not improved for ``patience`` consecutive checks.

    A *check* is a step whose metrics dict holds ``monitor`` (every step for
    ``"loss"``; only evaluation steps for ``"eval/<name>"``). Improvement means
    ``value < best - min_delta`` (``mode="min"``) or ``value > best + min_delta``
    (``mode="max"``). Non-finite values never improve.

    Args:
        monitor: metric key.
        patience: checks without improvement before stopping.
        mode: ``"min"`` or ``"max"``.
        min_delta: smallest change that counts as improvement.
    """

    def __init__(self, monitor: str, *, patience: int = 10, mode: str = "min", min_delta: float = 0.0) -> None:
        if mode not in ("min", "max"):
            raise ValueError(f"mode: expected 'min' or 'max'; got {mode!r}")
        if not (isinstance(min_delta, (int, float)) and math.isfinite(min_delta) and min_delta >= 0):
            raise ValueError(f"min_delta: expected a finite number >= 0; got {min_delta!r}")
        self.monitor = monitor
        self.patience = check_int(patience, "patience", minimum=1)
        self.mode = mode
        self.min_delta = float(min_delta)
        self.best: float | None = None
        self.bad_checks = 0

    def on_step_end(self, trainer: Trainer, step: int, metrics: dict[str, float]) -> None:
        if self.monitor not in metrics:
            return
        value = metrics[self.monitor]
        better = math.isfinite(value) and (
            self.best is None
            or (value < self.best - self.min_delta if self.mode == "min" else value > self.best + self.min_delta)
        )
        if better:
            self.best, self.bad_checks = value, 0
            return
        self.bad_checks += 1
        if self.bad_checks >= self.patience:
            trainer.request_stop(
                f"early stopping: {self.monitor} did not improve on {self.best} for {self.patience} checks"
            )

    def state_dict(self) -> dict[str, Any]:
        return {"best": self.best, "bad_checks": self.bad_checks}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        self.best = state["best"]
        self.bad_checks = int(state["bad_checks"])
