"""The result of the per-length log-normaliser estimators: :class:`LengthLogZ` (exported by
:mod:`ebms.estimators.sequence_log_z`)."""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
from torch import Tensor

from ebms._checks import check_int, check_tensor
from ebms.estimators._base import Estimate


@dataclass(frozen=True)
class LengthLogZ:
    r"""Estimates of :math:`\log Z_l`, one :class:`~ebms.estimators.Estimate` per length.

    Attributes:
        lengths: the lengths, increasing.
        estimates: their estimates, in the same order (``settings`` hold ``length``, ``n``, ``method``).
        method: ``"importance"``, ``"ais"``, ``"ais bracket"`` or ``"exact"``.
        log_weights: the forward log weights of each length, float64 ``(n,)`` each, in the order of
            ``lengths`` (``None`` for exact values): for weight diagnostics, or to split the draws
            into independent smaller runs.
        reverse_log_weights: with a reverse AIS run, its log weights (of :math:`1/Z_l`) per length,
            ``None`` for lengths without target samples.
    """

    lengths: tuple[int, ...]
    estimates: tuple[Estimate, ...]
    method: str
    log_weights: tuple[Tensor, ...] | None = field(default=None, compare=False, repr=False)
    reverse_log_weights: tuple[Tensor | None, ...] | None = field(default=None, compare=False, repr=False)

    def __post_init__(self) -> None:
        if len(self.lengths) != len(self.estimates) or not self.lengths:
            raise ValueError(f"estimates: expected one Estimate per length ({len(self.lengths)}); "
                             f"got {len(self.estimates)}")
        if list(self.lengths) != sorted(set(self.lengths)):
            raise ValueError(f"lengths: expected increasing distinct lengths; got {list(self.lengths)[:8]}")

    @classmethod
    def exact(cls, log_z: Tensor, *, first_length: int = 1) -> LengthLogZ:
        """Known values (e.g. :func:`ebms.models.trf.exact_log_z`), ``(n,)`` for lengths ``first_length..``."""
        check_tensor(log_z, "log_z", floating=True)
        if log_z.dim() != 1 or not bool(torch.isfinite(log_z).all()):
            raise ValueError(f"log_z: expected a 1-D tensor of finite values; got shape {tuple(log_z.shape)}")
        lengths = tuple(range(first_length, first_length + log_z.shape[0]))
        ests = tuple(Estimate(float(v), exact=True, settings={"method": "exact", "length": n})
                     for n, v in zip(lengths, log_z.tolist()))
        return cls(lengths, ests, "exact")

    def __getitem__(self, length: int) -> Estimate:
        if length not in self.lengths:
            raise KeyError(f"length {length}: not estimated (lengths {self.lengths[0]}..{self.lengths[-1]})")
        return self.estimates[self.lengths.index(length)]

    def values(self) -> Tensor:
        r""":math:`\log\hat Z_l`, float64 ``(n,)``."""
        return torch.tensor([e.estimate for e in self.estimates], dtype=torch.float64)

    def stderrs(self) -> Tensor:
        """Their standard errors, float64 ``(n,)``."""
        return torch.tensor([e.stderr for e in self.estimates], dtype=torch.float64)

    def as_log_z(self, max_length: int) -> Tensor:
        r"""Values for lengths ``1..max_length``, float64 ``(max_length,)`` (e.g. to load into a TRF's :math:`\zeta`)."""
        missing = [n for n in range(1, check_int(max_length, "max_length", minimum=1) + 1) if n not in self.lengths]
        if missing:
            raise ValueError(f"max_length: lengths {missing[:8]} were not estimated")
        return torch.stack([self.values()[self.lengths.index(n)] for n in range(1, max_length + 1)])

    def total(self, length_log_weights: Tensor | None = None) -> Estimate:
        r""":math:`\log\sum_l e^{a_l} \hat Z_l` (default :math:`a = 0`: a GN-ELM's :math:`\log Z`).

        Delta method over independent lengths: with shares :math:`s_l = e^{a_l}\hat Z_l / \sum_k e^{a_k}\hat Z_k`,
        :math:`\mathrm{se} = \sqrt{\sum_l s_l^2\,\mathrm{se}_l^2}`. When every length has a bracket,
        the bracket of the sum is the log-sum-exp of the brackets. ``length_log_weights``: ``(n,)``
        aligned with ``lengths``.
        """
        a = torch.zeros(len(self.lengths), dtype=torch.float64)
        if length_log_weights is not None:
            check_tensor(length_log_weights, "length_log_weights", floating=True)
            if tuple(length_log_weights.shape) != (len(self.lengths),):
                raise ValueError(f"length_log_weights: expected shape ({len(self.lengths)},) (one per length); "
                                 f"got {tuple(length_log_weights.shape)}")
            a = length_log_weights.detach().double().cpu()
        y = a + self.values()
        value = float(torch.logsumexp(y, 0))
        share = torch.softmax(y, 0)
        se = float(torch.sqrt((share.square() * self.stderrs().square()).sum()))
        lows = [e.lower for e in self.estimates]
        highs = [e.upper for e in self.estimates]
        lo = float(torch.logsumexp(a + torch.tensor(lows, dtype=torch.float64), 0)) if None not in lows else None
        hi = float(torch.logsumexp(a + torch.tensor(highs, dtype=torch.float64), 0)) if None not in highs else None
        return Estimate(value, stderr=se, lower=lo, upper=hi, exact=all(e.exact for e in self.estimates),
                        settings={"method": f"{self.method} total", "lengths": len(self.lengths)})

    def __str__(self) -> str:
        bracket = any(e.lower is not None for e in self.estimates)
        head = "   l      log Z_l     stderr        ESS" + ("      lower      upper" if bracket else "")
        rows = [f"log Z_l by {self.method} ({len(self.lengths)} lengths)", head]
        for n, e in zip(self.lengths, self.estimates):
            ess = f"{e.ess:10.1f}" if e.ess is not None else "         -"
            row = f"{n:4d} {e.estimate:12.4f} {e.stderr:10.4f} {ess}"
            if bracket:
                row += "          -          -" if e.lower is None else f" {e.lower:10.4f} {e.upper:10.4f}"
            rows.append(row)
        return "\n".join(rows)
