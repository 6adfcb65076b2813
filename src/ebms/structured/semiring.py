"""Semirings for dynamic programs over structured outputs, all in log space.

A dynamic program written once against ``zero``, ``one``, ``plus``, ``sum`` and ``times`` gives
a different quantity for each semiring (Goodman, 1999, "Semiring parsing"):

* :class:`LogSemiring` (``plus = logaddexp``): the log partition function; its gradient with
  respect to the log-potentials is the vector of marginals.
* :class:`MaxSemiring` (``plus = max``): the Viterbi score; its gradient is the indicator of one
  best structure (``torch.max`` routes the gradient to a single index, also under ties).
* :class:`KMaxSemiring` (``plus = top-k of the union``): the ``k`` best scores in descending order;
  the gradient of the ``i``-th score is the indicator of the ``i``-th best structure.

Values carry a leading *semiring axis* of size :attr:`Semiring.size` (1 for log and max, ``k`` for
k-max). ``times(a, b)`` multiplies a semiring value ``a`` (with the leading axis) by a plain
log-potential ``b`` (without it): in log space that is ``a + b`` broadcast over the leading axis,
which is exact for all three semirings because a plain potential lifts to ``(b, -inf, ..., -inf)``.
Entropy and sampling are not semirings here: the entropy comes from ``log Z`` and the marginals,
and sampling is forward filtering (log semiring) followed by backward sampling; see
:mod:`ebms.structured.linear_chain`.
"""

from __future__ import annotations

import abc

import torch
from torch import Tensor

from ebms._checks import check_int

__all__ = ["KMaxSemiring", "LogSemiring", "MaxSemiring", "Semiring"]


class Semiring(abc.ABC):
    """Log-space semiring acting on tensors of shape ``(size, *shape)``."""

    zero: float = float("-inf")
    """Additive identity (log of 0)."""
    one: float = 0.0
    """Multiplicative identity (log of 1)."""

    @property
    def size(self) -> int:
        """Length of the leading semiring axis."""
        return 1

    def lift(self, x: Tensor) -> Tensor:
        """Plain log-potentials ``x`` -> semiring value of shape ``(size, *x.shape)``."""
        return x.unsqueeze(0)

    def times(self, a: Tensor, b: Tensor) -> Tensor:
        """``a (size, ...)`` times plain potential ``b (...)``: ``a + b`` (broadcast)."""
        return a + b

    @abc.abstractmethod
    def sum(self, x: Tensor, dim: int) -> Tensor:
        """Semiring sum of ``x (size, ...)`` over ``dim`` (an axis after the leading one)."""

    @abc.abstractmethod
    def plus(self, a: Tensor, b: Tensor) -> Tensor:
        """Semiring sum of two values of the same shape ``(size, ...)``."""


class LogSemiring(Semiring):
    """``plus = log(exp a + exp b)``, ``times = +``. Gradient of the total: marginals."""

    def sum(self, x: Tensor, dim: int) -> Tensor:
        return torch.logsumexp(x, dim=dim)

    def plus(self, a: Tensor, b: Tensor) -> Tensor:
        return torch.logaddexp(a, b)


class MaxSemiring(Semiring):
    """``plus = max``, ``times = +`` (Viterbi). Gradient of the total: one best structure."""

    def sum(self, x: Tensor, dim: int) -> Tensor:
        return x.max(dim=dim).values

    def plus(self, a: Tensor, b: Tensor) -> Tensor:
        return torch.maximum(a, b)


class KMaxSemiring(Semiring):
    """The ``k`` largest scores, kept in descending order on the leading axis.

    ``plus`` takes the top ``k`` of the union of two lists; ``sum`` over ``dim`` takes the top
    ``k`` of the ``k * n`` candidates. Cost: a ``topk`` over ``k * n`` entries per output cell.
    Missing entries (fewer than ``k`` structures) are ``-inf``.

    Args:
        k: number of best scores kept (``k >= 1``).
    """

    def __init__(self, k: int) -> None:
        self.k = check_int(k, "k", minimum=1)

    @property
    def size(self) -> int:
        return self.k

    def lift(self, x: Tensor) -> Tensor:
        pad = x.new_full((self.k - 1, *x.shape), self.zero)
        return torch.cat([x.unsqueeze(0), pad], dim=0)

    def sum(self, x: Tensor, dim: int) -> Tensor:
        dim = dim % x.dim()
        if dim == 0:
            raise ValueError(f"dim: expected an axis after the leading semiring axis; got {dim}")
        x = x.movedim(dim, 1)
        flat = x.reshape(x.shape[0] * x.shape[1], *x.shape[2:])
        return self._top(flat)

    def plus(self, a: Tensor, b: Tensor) -> Tensor:
        return self._top(torch.cat([a, b], dim=0))

    def _top(self, flat: Tensor) -> Tensor:
        if flat.shape[0] < self.k:
            pad = flat.new_full((self.k - flat.shape[0], *flat.shape[1:]), self.zero)
            flat = torch.cat([flat, pad], dim=0)
        return torch.topk(flat, self.k, dim=0).values
