r"""Private: the record of the last training values of a TRF's :math:`\log Z_l` and their average.

The TRF objectives (:class:`~ebms.objectives.AugSA`, :class:`~ebms.objectives.TRFNCE`,
:class:`~ebms.objectives.DynamicNCE`) estimate :math:`\zeta_l \approx \log Z_l` as they train, and
the last iterate is a noisy value. With ``trace=W`` they keep the last ``W`` values the model used
(a ring buffer in ``state_dict``) and report their average with a **batch-means** standard error:
the window is cut into ``b`` consecutive batches, and the spread of the batch means, divided by
:math:`\sqrt b`, estimates the error of the average (Flegal & Jones 2010). It is honest when a
batch is much longer than the autocorrelation time of the iterates (about :math:`1/\gamma` steps for
an SA rate :math:`\gamma`), and when the model no longer drifts over the window (late in training,
or with the parameters frozen while :math:`\zeta` keeps its updates). Under ``b - 1`` degrees of
freedom the ratio error / stderr follows Student's t.

Reference:
    Flegal, J. M. & Jones, G. L. (2010). "Batch means and spectral variance estimators in Markov
    chain Monte Carlo." Annals of Statistics 38(2).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor, nn

from ebms._checks import check_int

__all__ = ["ZetaEstimate", "ZetaTrace", "ZetaTraced"]


@dataclass(frozen=True)
class ZetaEstimate:
    r"""A training estimate of the per-length log normalisers.

    Attributes:
        log_z: average of the recorded values, float64 ``(L,)`` (lengths ``1..L``).
        stderr: batch-means standard error of ``log_z``, ``(L,)``.
        spread: standard deviation of the recorded values themselves, ``(L,)``.
        steps: number of recorded values averaged.
        batches: number of batches ``b`` (the error over ``stderr`` has ``b - 1`` degrees of freedom).
    """

    log_z: Tensor
    stderr: Tensor
    spread: Tensor
    steps: int
    batches: int


class ZetaTrace(nn.Module):
    """Ring buffer of the last ``window`` vectors :math:`\\log Z_{1..L}` (module docstring).

    Buffers: ``values`` float64 ``(window, L)`` (empty until the first :meth:`record`) and
    ``count`` (values recorded so far).
    """

    values: Tensor
    count: Tensor

    def __init__(self, window: int) -> None:
        super().__init__()
        self.window = check_int(window, "trace", minimum=1)
        self.register_buffer("values", torch.zeros(0, 0, dtype=torch.float64))
        self.register_buffer("count", torch.zeros((), dtype=torch.long))

    @torch.no_grad()
    def record(self, log_z: Tensor) -> None:
        """Append one vector ``(L,)`` (detached, as float64)."""
        z = log_z.detach().to(torch.float64)
        if self.values.numel() == 0 or self.values.shape[1] != z.shape[0]:
            self.values = torch.zeros(self.window, z.shape[0], dtype=torch.float64, device=z.device)
            self.count.zero_()
        self.values[int(self.count) % self.window] = z
        self.count.add_(1)

    def ordered(self) -> Tensor:
        """The recorded values, oldest first, ``(min(count, window), L)``."""
        n = int(self.count)
        if n <= self.window:
            return self.values[:n]
        start = n % self.window
        return torch.cat([self.values[start:], self.values[:start]])

    def estimate(self, batches: int = 10) -> ZetaEstimate:
        """Average of the window and its batch-means standard error over ``batches`` batches.

        Raises:
            ValueError: ``batches < 2``, or fewer than ``2 * batches`` values recorded.
        """
        b = check_int(batches, "batches", minimum=2)
        v = self.ordered()
        n = v.shape[0]
        if n < 2 * b:
            raise ValueError(f"batches: {b} batches need at least {2 * b} recorded values; the trace holds {n} "
                             "(train longer, or ask for fewer batches)")
        m = n // b
        v = v[n - m * b:]  # drop the oldest values that do not fill a batch
        means = v.view(b, m, -1).mean(1)
        return ZetaEstimate(log_z=v.mean(0), stderr=means.std(0) / b**0.5, spread=v.std(0), steps=m * b, batches=b)

    def _load_from_state_dict(self, state_dict: dict[str, Any], prefix: str, *args: Any) -> None:
        stored = state_dict.get(prefix + "values")
        if isinstance(stored, Tensor) and stored.shape != self.values.shape:
            self.values = torch.empty(stored.shape, dtype=torch.float64, device=self.values.device)
        super()._load_from_state_dict(state_dict, prefix, *args)

    def extra_repr(self) -> str:
        return f"window={self.window}"


class ZetaTraced:
    """Base of the TRF objectives that keep a ``trace`` (a :class:`ZetaTrace`, or ``None`` without ``trace=W``)."""

    trace: ZetaTrace | None

    def zeta_estimate(self, batches: int = 10) -> ZetaEstimate:
        """Average of the traced :math:`\\log Z_l` with its batch-means standard error
        (:class:`~ebms.objectives.ZetaEstimate`).

        Raises:
            ValueError: built without ``trace``, or too few values recorded for ``batches``.
        """
        if self.trace is None:
            raise ValueError("trace: this objective keeps no trace of log Z; construct it with trace=W (W > 0)")
        return self.trace.estimate(batches)
