r"""Independent two-valued sites: a product of Bernoullis on :class:`~ebms.spaces.Binary` or :class:`~ebms.spaces.Spins`.

With ``b_i = (x_i - low) / (high - low)`` (1 at the space's high value: 1 for Binary, +1 for Spins)
and logits :math:`\ell_i` of the high value,

.. math::  \log q(x) = \sum_i -b_i \operatorname{softplus}(-\ell_i) - (1 - b_i)\operatorname{softplus}(\ell_i)
           = \sum_i b_i \ell_i - \operatorname{softplus}(\ell_i) .

The first form is what is computed: each term is a log-probability taken directly, so a site with
a large logit adds its tiny :math:`\log\sigma(\ell)` to full relative precision (no cancellation
in :math:`\ell - \operatorname{softplus}(\ell)`), with the dtype-aware softplus of
:func:`ebms._numerics.softplus`. It is linear in ``b``: the input gradient is
:math:`\ell_i / (\text{high} - \text{low})`. Cost ``O(B N)``.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from ebms._checks import check_finite, check_int, check_positive, check_tensor
from ebms._numerics import softplus
from ebms.distributions._base import Distribution, check_event
from ebms.spaces import Binary, Spins

__all__ = ["IndependentBernoulli"]


class IndependentBernoulli(Distribution):
    r"""Product of Bernoullis over the sites of a Binary or Spins space (see the module docstring).

    Args:
        logits: ``(*sites)`` finite float tensor, the log-odds of each site's high value.
        space: :class:`~ebms.spaces.Binary` (default) or :class:`~ebms.spaces.Spins` whose
            ``event_shape`` equals ``logits.shape``.

    Example:
        >>> import torch
        >>> q = IndependentBernoulli(torch.zeros(3))      # uniform on {0, 1}^3
        >>> float(q.log_prob(torch.tensor([[0.0, 1.0, 1.0]])).exp())
        0.125
    """

    has_entropy = True
    logits: Tensor
    space: Binary | Spins

    def __init__(self, logits: Tensor, *, space: Binary | Spins | None = None) -> None:
        super().__init__()
        check_tensor(logits, "logits", floating=True, min_dim=1)
        check_finite(logits, "logits")
        space = Binary(tuple(logits.shape)) if space is None else space
        if not isinstance(space, (Binary, Spins)):
            raise TypeError(f"space: expected ebms.spaces.Binary or Spins; got {type(space).__name__}")
        if space.event_shape != tuple(logits.shape):
            raise ValueError(f"logits: expected the space's shape {space.event_shape}; got {tuple(logits.shape)}")
        self.register_buffer("logits", logits.detach().clone())
        self.space = space
        self._scale = space.high - space.low

    @classmethod
    def from_data(cls, x: Tensor, *, smoothing: float = 1.0, space: Binary | Spins | None = None) -> IndependentBernoulli:
        """Site frequencies of data ``x: (B, *sites)`` with ``smoothing`` pseudo-counts per value (> 0)."""
        space = Binary(tuple(x.shape[1:])) if space is None else space
        space.validate(x, "x")
        a = check_positive(smoothing, "smoothing")
        b = (x.double() - space.low) / (space.high - space.low)
        p = (b.sum(0) + a) / (x.shape[0] + 2 * a)
        return cls((torch.log(p) - torch.log1p(-p)).to(x.dtype), space=space)

    def sample(self, n: int, generator: torch.Generator | None = None) -> Tensor:
        """``n`` independent draws, ``(n, *sites)`` in the logits' dtype."""
        check_int(n, "n", minimum=1)
        u = torch.rand((n, *self.logits.shape), generator=generator, device=self.logits.device, dtype=self.logits.dtype)
        return self.space.low + self._scale * (u < torch.sigmoid(self.logits)).to(self.logits.dtype)

    def log_prob(self, x: Tensor) -> Tensor:
        """``log q(x)``, ``(B,)`` (differentiable in ``x``; values are not checked to be in the space)."""
        check_event(x, self.space.event_shape)
        b = (x - self.space.low) / self._scale
        log_high, log_low = -softplus(-self.logits), -softplus(self.logits)
        return (b * log_high + (1 - b) * log_low).flatten(1).sum(1)

    def log_prob_and_grad(self, x: Tensor) -> tuple[Tensor, Tensor]:
        """Detached ``log q(x)`` ``(B,)`` and its (constant) input gradient ``logits / (high - low)``."""
        return self.log_prob(x).detach(), (self.logits / self._scale).expand_as(x)

    def site_logits(self) -> Tensor:
        """Per-site category log-weights ``(N, 2)`` (category 0 = low, 1 = high; softmax gives ``q``)."""
        flat = self.logits.flatten()
        return torch.stack([torch.zeros_like(flat), flat], 1)

    def entropy(self) -> Tensor:
        r""":math:`\sum_i \operatorname{softplus}(\ell_i) - \sigma(\ell_i)\,\ell_i`, a 0-d tensor."""
        lg = self.logits
        return (softplus(lg) - torch.sigmoid(lg) * lg).sum()

    def to_torch(self) -> Any:
        """The same law as ``torch.distributions.Independent(Bernoulli(logits))`` (Binary spaces only)."""
        if not isinstance(self.space, Binary):
            raise ValueError(f"to_torch: torch's Bernoulli has values {{0, 1}}; this model is on {self.space!r}")
        return torch.distributions.Independent(torch.distributions.Bernoulli(logits=self.logits), self.logits.dim())

    def extra_repr(self) -> str:
        return f"space={self.space!r}"
