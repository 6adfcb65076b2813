r"""Independent categorical sites on any discrete space: :math:`q(x) = \prod_i \operatorname{softmax}(\ell_i)_{x_i}`.

One categorical per site with logits :math:`\ell \in \mathbb R^{N \times K}`, on any
:class:`~ebms.spaces.DiscreteSpace` (one-hot :class:`~ebms.spaces.Categorical` sites, or
:class:`~ebms.spaces.Binary`/:class:`~ebms.spaces.Spins` sites, where it is a product of Bernoullis).
``log_prob`` is linear in the float state (one-hot rows, or ``b = (x - low)/(high - low)`` for
two-valued sites), so it has an input gradient, and costs ``O(B N K)``. :meth:`IndependentCategorical.fit`
sets the logits from the smoothed per-site frequencies of data: the usual cheap proposal for a
model trained on that data (every state keeps a positive probability).
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from ebms._checks import check_finite, check_int, check_positive, check_tensor
from ebms.distributions._base import Distribution, check_event
from ebms.distributions._sampling import sample_categorical
from ebms.spaces import Binary, Categorical, DiscreteSpace, Spins

__all__ = ["IndependentCategorical"]


class IndependentCategorical(Distribution):
    r"""Product of independent per-site categoricals on a discrete space (see the module docstring).

    Args:
        space: the :class:`~ebms.spaces.DiscreteSpace` of the states.
        logits: ``(N, K)`` or ``(*site_shape, K)`` per-site logits; for Binary/Spins also
            ``(*site_shape)`` or ``(N,)``, the Bernoulli logit of the second value (1 or +1).
            ``None`` means uniform.

    The logits are a buffer ``(N, K)`` (moved by ``.to(device)``), not a parameter.

    Example:
        >>> import torch
        >>> from ebms.spaces import Binary
        >>> data = Binary(4).random(100, generator=torch.Generator().manual_seed(0))
        >>> q = IndependentCategorical(Binary(4)).fit(data)
        >>> q.log_prob(q.sample(3)).shape
        torch.Size([3])
    """

    has_entropy = True
    logits: Tensor
    space: DiscreteSpace

    def __init__(self, space: DiscreteSpace, logits: Tensor | None = None) -> None:
        super().__init__()
        if not isinstance(space, DiscreteSpace):
            raise TypeError(f"space: expected an ebms.spaces.DiscreteSpace; got {type(space).__name__}")
        self.space = space
        N, K = space.num_sites, space.num_categories
        self.register_buffer("logits", self._as_table(torch.zeros(N, K) if logits is None else logits))

    def _as_table(self, logits: Tensor) -> Tensor:
        N, K = self.space.num_sites, self.space.num_categories
        check_tensor(logits, "logits", floating=True)
        check_finite(logits, "logits")
        if K == 2 and logits.numel() == N and tuple(logits.shape) in ((N,), self.space.site_shape):
            flat = logits.detach().reshape(N, 1)
            return torch.cat([torch.zeros_like(flat), flat], 1)
        if logits.numel() != N * K or logits.shape[-1] != K:
            raise ValueError(
                f"logits: expected shape ({N}, {K}) or (*{self.space.site_shape}, {K})"
                + (f" or {self.space.site_shape} (Bernoulli logits)" if K == 2 else "")
                + f"; got {tuple(logits.shape)}"
            )
        return logits.detach().reshape(N, K).clone()

    @property
    def log_probs(self) -> Tensor:
        """Per-site log-probabilities ``(N, K)``."""
        return torch.log_softmax(self.logits, -1)

    def fit(self, x: Tensor, *, pseudocount: float = 1.0) -> IndependentCategorical:
        r"""Set the logits to the smoothed per-site frequencies of data ``x: (B, *event)``; returns ``self``.

        :math:`q_i(k) = (n_{ik} + c) / (B + K c)` with counts :math:`n_{ik}` and pseudocount
        :math:`c > 0`, so every state keeps a positive probability (needed for an independence
        sampler to reach every state, and for an importance proposal to cover the target).
        """
        self.space.validate(x, "x")
        c = check_positive(pseudocount, "pseudocount")
        idx = self.space.indices(x)  # (B, N)
        counts = torch.nn.functional.one_hot(idx, self.space.num_categories).sum(0).to(self.logits.dtype)
        self.logits = torch.log(counts.to(self.logits.device) + c)
        return self

    def log_prob(self, x: Tensor) -> Tensor:
        """Normalised ``log q(x)`` of states ``x: (B, *event)``, ``(B,)``.

        Linear in the float state (so differentiable in ``x``) on Categorical, Binary and Spins
        spaces; a gather of the sites' category indices on any other discrete space.
        """
        space = self.space
        check_event(x, space.event_shape, floating=isinstance(space, (Categorical, Binary, Spins)))
        lp = self.log_probs.to(x.dtype if x.is_floating_point() else self.logits.dtype)
        B, N, K = x.shape[0], space.num_sites, space.num_categories
        if isinstance(space, Categorical):
            return (x.reshape(B, N, K) * lp).sum((1, 2))
        if isinstance(space, (Binary, Spins)):
            b = ((x - space.low) / (space.high - space.low)).reshape(B, N)
            return (b * lp[:, 1] + (1 - b) * lp[:, 0]).sum(1)
        idx = space.indices(x)
        return lp.unsqueeze(0).expand(B, N, K).gather(2, idx.unsqueeze(2)).squeeze(2).sum(1)

    def log_prob_and_grad(self, x: Tensor) -> tuple[Tensor, Tensor]:
        """Detached ``log q(x)`` ``(B,)`` and its (constant) input gradient ``(B, *event)``.

        Raises:
            TypeError: on a space whose states are not Categorical, Binary or Spins floats.
        """
        lp = self.log_prob(x).detach()
        table = self.log_probs.to(x.dtype)
        space = self.space
        if isinstance(space, Categorical):
            return lp, table.reshape(space.event_shape).expand_as(x)
        if isinstance(space, (Binary, Spins)):
            slope = (table[:, 1] - table[:, 0]) / (space.high - space.low)
            return lp, slope.reshape(space.event_shape).expand_as(x)
        raise TypeError(f"log_prob_and_grad: expected a Categorical, Binary or Spins space; got {space!r}")

    def site_logits(self) -> Tensor:
        """Per-site category log-probabilities ``(N, K)``."""
        return self.log_probs

    def sample(self, n: int, generator: torch.Generator | None = None) -> Tensor:
        """``n`` independent draws, ``(n, *event)`` float states of the space (the logits' dtype)."""
        check_int(n, "n", minimum=1)
        logits = self.logits.expand(n, *self.logits.shape)
        return self.space.from_indices(sample_categorical(logits, generator), dtype=self.logits.dtype)

    def entropy(self) -> Tensor:
        r""":math:`-\sum_{i,k} q_i(k) \log q_i(k)`, a 0-d tensor."""
        lp = self.log_probs
        return -(lp.exp() * lp).sum()

    def to_torch(self) -> Any:
        """The same law as a ``torch.distributions`` object: ``Independent(OneHotCategorical)`` on
        one-hot sites, ``Independent(Bernoulli)`` on Binary sites (Spins have no torch counterpart)."""
        D = torch.distributions
        site_shape = self.space.site_shape
        if isinstance(self.space, Categorical):
            table = self.log_probs.reshape(*site_shape, self.space.num_categories)
            return D.Independent(D.OneHotCategorical(logits=table), len(site_shape))
        if isinstance(self.space, Binary):
            lp = self.log_probs
            return D.Independent(D.Bernoulli(logits=(lp[:, 1] - lp[:, 0]).reshape(site_shape)), len(site_shape))
        raise ValueError(f"to_torch: torch has no distribution on {self.space!r}")

    def extra_repr(self) -> str:
        return f"space={self.space!r}"
