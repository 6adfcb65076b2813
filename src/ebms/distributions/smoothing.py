r"""Smoothing for :class:`~ebms.distributions.NGram`: from n-gram counts to conditional probabilities.

An estimator receives the counts of every order, ``counts[m-1][h_1, ..., h_{m-1}, w]`` = how
often outcome ``w`` followed the ``m-1`` symbols ``h`` (``m = 1..n``, histories padded with the
boundary id), and a mask of the outcomes allowed after any history (every id except the boundary
when the model has no end symbol). It returns ``log p(w | h)`` for the full order ``n``, each row
normalised over the allowed outcomes, ``-inf`` elsewhere. Estimators that need more than raw
counts (Kneser–Ney's continuation counts) derive it from the same tensors.

* :class:`AddK` (Lidstone): :math:`p(w \mid h) = (c(h, w) + k) / (c(h) + k A)`, ``A`` allowed outcomes;
* :class:`WittenBell` (Witten & Bell, 1991, "The zero-frequency problem: estimating the
  probabilities of novel events in adaptive text compression", IEEE Trans. Inf. Theory 37(4)),
  interpolated down to the uniform law: with :math:`c(h) = \sum_w c(h, w)` and
  :math:`N_1(h)` the number of distinct outcomes seen after ``h``,

  .. math::  p_m(w \mid h) = \frac{c(h, w) + N_1(h)\, p_{m-1}(w \mid h')}{c(h) + N_1(h)},

  ``h'`` being ``h`` without its oldest symbol, :math:`p_m = p_{m-1}` where :math:`c(h) = 0`, and
  :math:`p_0(w) = 1/A`.

Cost: ``O(V^n)`` time and memory (dense tables).
"""

from __future__ import annotations

import abc
from collections.abc import Sequence

import torch
from torch import Tensor

from ebms._checks import check_positive

__all__ = ["AddK", "Smoothing", "WittenBell", "resolve_smoothing"]


class Smoothing(abc.ABC):
    """How an n-gram turns counts into ``log p(w | h)`` (see the module docstring)."""

    @abc.abstractmethod
    def log_table(self, counts: Sequence[Tensor], allowed: Tensor) -> Tensor:
        """``(V,) * n`` float64 log-probabilities from ``counts[m-1]: (V,) * m`` and ``allowed: (V,)`` bool."""


class AddK(Smoothing):
    """Add ``k > 0`` to every allowed count of the full order (``k = 1``: Laplace)."""

    def __init__(self, k: float = 1.0) -> None:
        self.k = check_positive(k, "k")

    def log_table(self, counts: Sequence[Tensor], allowed: Tensor) -> Tensor:
        c = counts[-1] * allowed
        added = self.k * allowed.to(c.dtype)
        prob = (c + added) / (c.sum(-1, keepdim=True) + added.sum())
        return prob.log()

    def __repr__(self) -> str:
        return f"AddK(k={self.k})"


class WittenBell(Smoothing):
    """Interpolated Witten–Bell, down to the uniform law over the allowed outcomes."""

    def log_table(self, counts: Sequence[Tensor], allowed: Tensor) -> Tensor:
        mask = allowed.to(counts[0].dtype)
        prob = mask / mask.sum()  # p_0
        for c in counts:
            c = c * mask
            lower = prob.unsqueeze(0) if c.dim() > 1 else prob  # p_{m-1}(w | h'), broadcast over h's oldest
            total = c.sum(-1, keepdim=True)
            types = (c > 0).sum(-1, keepdim=True).to(c.dtype)
            mixed = (c + types * lower) / (total + types).clamp_min(1.0)
            prob = torch.where(total > 0, mixed, lower.expand_as(c))
        return prob.log()

    def __repr__(self) -> str:
        return "WittenBell()"


def resolve_smoothing(smoothing: str | Smoothing, k: float = 1.0) -> Smoothing:
    """A :class:`Smoothing` from an instance or a name: ``"witten_bell"``, or ``"add_k"`` with ``k``."""
    k = check_positive(k, "k")
    if isinstance(smoothing, Smoothing):
        return smoothing
    if smoothing == "witten_bell":
        return WittenBell()
    if smoothing == "add_k":
        return AddK(k)
    raise ValueError(f"smoothing: expected 'witten_bell', 'add_k' or an ebms.distributions.Smoothing; "
                     f"got {smoothing!r}")
