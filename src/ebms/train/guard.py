"""Divergence detection for the training loop.

EBM training diverges in recognisable ways: the loss or a metric becomes NaN or
Inf, gradients blow up to non-finite values, the energies run away (the
positive/negative energies of a contrastive loss drift to huge magnitudes), or
the loss jumps by orders of magnitude after one too large step (score matching
with a large learning rate goes from 1 to 1e9 in a few steps and then stays
there, finite). :class:`DivergenceGuard` turns one step's numbers into a
verdict; the :class:`~ebms.train.Trainer` acts on it:

1. the offending update is **not** applied;
2. the model, objective, optimizer, RNG and data position go back to the last
   good in-memory snapshot (a state whose following loss was checked healthy);
3. every optimizer learning rate becomes ``snapshot_lr * lr_factor ** k`` for
   the ``k``-th consecutive retry;
4. an ``{"event": "diverged", ...}`` line goes to ``metrics.jsonl`` and a
   warning to the ``ebms.train`` logger (the console by default).

The retry count resets when training reaches the next snapshot. More than
``max_retries`` consecutive restores raise :class:`TrainingDiverged`.

**Explosion rule.** For each watched value ``v`` (``"loss"`` and the metrics in
``scale_keys``), the guard keeps the last ``window`` values of *healthy* steps
and their robust scale

.. math:: s = \\max\\bigl(\\operatorname{median}_{i \\in \\text{window}} |v_i|,\\; \\text{scale\\_floor}\\bigr).

A step whose ``|v| > explode_factor * s`` diverged. The rule needs one healthy
value (so the very first step is never judged by it, and an explosion on the
second step is caught before it can enter the history); the median ignores a
few earlier spikes; comparing magnitudes lets a loss decrease or change sign
freely; ``scale_floor`` keeps a loss that hovers near zero from firing on
ordinary noise. With the defaults (factor 100, floor 1, window 50) a value must
exceed 100 and be 100 times its recent typical magnitude. The history is part
of every snapshot and checkpoint, so resumed runs take the same decisions.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping
from dataclasses import dataclass

from ebms._checks import check_int, check_positive, check_probability

__all__ = ["DivergenceGuard", "TrainingDiverged"]

#: what to change when training keeps diverging (library keyword; ``ebms train`` key).
ADVICE = (
    "lower the learning rate (optimizer lr; `ebms train`: train.lr) or clip the gradient norm "
    "(grad_clip; `ebms train`: train.grad_clip), or regularise the energies (objective.regularization)"
)

History = dict[str, list[float]]


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
            snapshot copies model, objective and optimizer state to CPU memory,
            except at a checkpoint step with a store keeping two or more: that
            checkpoint is read back if a restore needs it.
        energy_keys: metric names bounded by ``max_abs_energy``.
        explode_factor: a watched value more than this many times its recent
            robust scale is divergence (``None`` disables the explosion rule).
        scale_floor: smallest scale the explosion rule uses (> 0).
        window: healthy steps over which the scale is taken.
        scale_keys: values watched by the explosion rule: ``"loss"`` and metric
            names (absent metrics are skipped).
    """

    max_abs_energy: float | None = 1e6
    lr_factor: float = 0.5
    max_retries: int = 3
    snapshot_every: int | None = None
    energy_keys: tuple[str, ...] = ("e_pos", "e_neg")
    explode_factor: float | None = 100.0
    scale_floor: float = 1.0
    window: int = 50
    scale_keys: tuple[str, ...] = ("loss", "e_pos", "e_neg", "energy")

    def __post_init__(self) -> None:
        if self.max_abs_energy is not None:
            check_positive(self.max_abs_energy, "max_abs_energy")
        check_probability(self.lr_factor, "lr_factor", open_low=True)
        check_int(self.max_retries, "max_retries", minimum=0)
        if self.snapshot_every is not None:
            check_int(self.snapshot_every, "snapshot_every", minimum=1)
        for name, keys in (("energy_keys", self.energy_keys), ("scale_keys", self.scale_keys)):
            if not isinstance(keys, tuple) or not all(isinstance(k, str) for k in keys):
                raise TypeError(f"{name}: expected a tuple of metric names; got {keys!r}")
        if self.explode_factor is not None:
            check_positive(self.explode_factor, "explode_factor")
            if self.explode_factor <= 1:
                raise ValueError(f"explode_factor: expected a number > 1 or None; got {self.explode_factor!r}")
        check_positive(self.scale_floor, "scale_floor")
        check_int(self.window, "window", minimum=1)

    def check(self, loss: float, metrics: Mapping[str, float], grad_norm: float,
              history: Mapping[str, list[float]] | None = None) -> str | None:
        """The reason this step diverged, or ``None`` when it looks healthy.

        Args:
            loss: the step's loss value.
            metrics: the objective's metrics for the step.
            grad_norm: global gradient norm (before clipping).
            history: recent healthy values (:meth:`record`); ``None`` or empty
                skips the explosion rule.
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
        if self.explode_factor is not None and history:
            for name, value in self._watched(loss, metrics).items():
                past = history.get(name)
                if not past:
                    continue
                scale = max(statistics.median(abs(v) for v in past), self.scale_floor)
                if abs(value) > self.explode_factor * scale:
                    return (
                        f"|{name}| = {abs(value):.4g} exploded: more than explode_factor={self.explode_factor:g} "
                        f"times its recent scale {scale:.4g} (median |{name}| of the last {len(past)} healthy steps)"
                    )
        return None

    def record(self, history: History, loss: float, metrics: Mapping[str, float]) -> None:
        """Append a healthy step's watched values to ``history`` (at most ``window`` per key)."""
        for name, value in self._watched(loss, metrics).items():
            past = history.setdefault(name, [])
            past.append(float(value))
            del past[: max(0, len(past) - self.window)]

    def _watched(self, loss: float, metrics: Mapping[str, float]) -> dict[str, float]:
        out = {}
        for name in self.scale_keys:
            if name == "loss":
                out[name] = loss
            elif name in metrics:
                out[name] = metrics[name]
        return out
