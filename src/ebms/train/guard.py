"""Divergence detection for the training loop.

EBM training diverges in recognisable ways: the loss or a metric becomes NaN or
Inf, gradients blow up to non-finite values, or the energies run away (the
positive/negative energies of a contrastive loss drift to huge magnitudes while
the gap grows without bound). :class:`DivergenceGuard` turns one step's numbers
into a verdict; the :class:`~ebms.train.Trainer` acts on it:

1. the offending update is **not** applied;
2. the model, objective, optimizer, RNG and data position go back to the last
   good in-memory snapshot (a state whose following loss was checked healthy);
3. every optimizer learning rate becomes ``snapshot_lr * lr_factor ** k`` for
   the ``k``-th consecutive retry;
4. an ``{"event": "diverged", ...}`` line goes to ``metrics.jsonl`` and a
   warning to the ``ebms.train`` logger (the console by default).

The retry count resets when training reaches the next snapshot. More than
``max_retries`` consecutive restores raise :class:`TrainingDiverged`.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

from ebms._checks import check_int, check_positive, check_probability

__all__ = ["DivergenceGuard", "TrainingDiverged"]


class TrainingDiverged(RuntimeError):
    """Training kept diverging after the allowed number of restores."""


@dataclass(frozen=True)
class DivergenceGuard:
    r"""Configuration and verdict for divergence handling (see the module docstring).

    Args:
        max_abs_energy: bound on :math:`|e_{pos}|` and :math:`|e_{neg}|` (the
            metrics named in ``energy_keys``); ``None`` disables the bound.
            Non-finite values are always divergence.
        lr_factor: multiply learning rates by this after each restore, in (0, 1].
        max_retries: consecutive restores allowed before :class:`TrainingDiverged`.
        snapshot_every: also keep an in-memory snapshot every this many steps
            (``None``: only at the start and at each checkpoint step). Each
            snapshot copies model, objective and optimizer state to CPU memory.
        energy_keys: metric names bounded by ``max_abs_energy``.
    """

    max_abs_energy: float | None = 1e6
    lr_factor: float = 0.5
    max_retries: int = 3
    snapshot_every: int | None = None
    energy_keys: tuple[str, ...] = ("e_pos", "e_neg")

    def __post_init__(self) -> None:
        if self.max_abs_energy is not None:
            check_positive(self.max_abs_energy, "max_abs_energy")
        check_probability(self.lr_factor, "lr_factor", open_low=True)
        check_int(self.max_retries, "max_retries", minimum=0)
        if self.snapshot_every is not None:
            check_int(self.snapshot_every, "snapshot_every", minimum=1)
        if not isinstance(self.energy_keys, tuple) or not all(isinstance(k, str) for k in self.energy_keys):
            raise TypeError(f"energy_keys: expected a tuple of metric names; got {self.energy_keys!r}")

    def check(self, loss: float, metrics: Mapping[str, float], grad_norm: float) -> str | None:
        """The reason this step diverged, or ``None`` when it looks healthy.

        Args:
            loss: the step's loss value.
            metrics: the objective's metrics for the step.
            grad_norm: global gradient norm (before clipping).
        """
        if not math.isfinite(loss):
            return f"loss is {loss}"
        for name, value in metrics.items():
            if not math.isfinite(value):
                return f"metric {name!r} is {value}"
        if not math.isfinite(grad_norm):
            return f"grad_norm is {grad_norm}"
        if self.max_abs_energy is not None:
            for name in self.energy_keys:
                if name in metrics and abs(metrics[name]) > self.max_abs_energy:
                    return f"|{name}| = {abs(metrics[name]):.4g} exceeds max_abs_energy={self.max_abs_energy:g}"
        return None
