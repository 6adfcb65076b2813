r"""Independent-site proposal distributions for the Metropolis independence sampler.

:class:`IndependentCategorical` is the product distribution

.. math::  q(x) = \prod_{i=1}^{N} \mathrm{softmax}(\ell_i)_{x_i},

one categorical per site with logits :math:`\ell \in \mathbb R^{N \times K}`, on any
:class:`~ebms.spaces.DiscreteSpace` (for Binary/Spins it is a product of Bernoullis). It follows the
*proposal protocol* of :class:`~ebms.samplers.metropolis.MetropolisIndependence`:
``sample(n, generator) -> x (n, *event)`` and ``log_prob(x) -> (n,)`` (normalised).
:meth:`IndependentCategorical.fit` sets the logits from the per-site marginals of data, the usual
cheap proposal for a model trained on that data.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from ebms._checks import check_finite, check_int, check_positive, check_tensor
from ebms.samplers._discrete import sample_categorical
from ebms.spaces import DiscreteSpace

__all__ = ["IndependentCategorical"]


class IndependentCategorical(nn.Module):
    r"""Product of independent per-site categoricals on a discrete space.

    Args:
        space: the :class:`~ebms.spaces.DiscreteSpace` of the states.
        logits: ``(N, K)`` or ``(*site_shape, K)`` per-site logits; for Binary/Spins also
            ``(*site_shape)`` or ``(N,)``, the Bernoulli logit of the second value (1 or +1).
            ``None`` means uniform.

    ``log_prob`` costs one gather over ``B x N``; ``sample`` one uniform per site. The logits are a
    buffer (moved by ``.to(device)``), not a parameter.

    Example:
        >>> import torch
        >>> from ebms.spaces import Binary
        >>> from ebms.samplers.proposals import IndependentCategorical
        >>> data = Binary(4).random(100, generator=torch.Generator().manual_seed(0))
        >>> q = IndependentCategorical(Binary(4)).fit(data)
        >>> q.log_prob(q.sample(3)).shape
        torch.Size([3])
    """

    logits: Tensor

    def __init__(self, space: DiscreteSpace, logits: Tensor | None = None) -> None:
        super().__init__()
        if not isinstance(space, DiscreteSpace):
            raise TypeError(f"space: expected an ebms.spaces.DiscreteSpace; got {type(space).__name__}")
        self.space = space
        N, K = space.num_sites, space.num_categories
        if logits is None:
            logits = torch.zeros(N, K)
        self.register_buffer("logits", self._as_table(logits))

    def _as_table(self, logits: Tensor) -> Tensor:
        N, K = self.space.num_sites, self.space.num_categories
        check_tensor(logits, "logits", floating=True)
        check_finite(logits, "logits")
        if K == 2 and logits.numel() == N and tuple(logits.shape) in ((N,), self.space.site_shape):
            flat = logits.reshape(N, 1)
            return torch.cat([torch.zeros_like(flat), flat], 1)
        if logits.numel() != N * K or logits.shape[-1] != K:
            raise ValueError(
                f"logits: expected shape ({N}, {K}) or (*{self.space.site_shape}, {K})"
                + (f" or {self.space.site_shape} (Bernoulli logits)" if K == 2 else "")
                + f"; got {tuple(logits.shape)}"
            )
        return logits.reshape(N, K).clone()

    @property
    def log_probs(self) -> Tensor:
        """Per-site log probabilities ``(N, K)``."""
        return torch.log_softmax(self.logits, -1)

    def fit(self, x: Tensor, *, pseudocount: float = 1.0) -> IndependentCategorical:
        r"""Set the logits to the smoothed per-site marginals of data ``x: (B, *event)``; returns ``self``.

        :math:`q_i(k) = (n_{ik} + c) / (B + K c)` with counts :math:`n_{ik}` and pseudocount
        :math:`c > 0`, so every state keeps a positive proposal probability (needed for the
        independence sampler to reach every state).
        """
        self.space.validate(x, "x")
        c = check_positive(pseudocount, "pseudocount")
        idx = self.space.indices(x)  # (B, N)
        counts = torch.nn.functional.one_hot(idx, self.space.num_categories).sum(0).to(self.logits.dtype)
        self.logits = torch.log(counts.to(self.logits.device) + c)
        return self

    def log_prob(self, x: Tensor) -> Tensor:
        """Normalised log probability of states ``x: (B, *event)``, ``(B,)`` (no validation)."""
        idx = self.space.indices(x)  # (B, N)
        lp = self.log_probs.to(x.dtype)
        return lp.unsqueeze(0).expand(idx.shape[0], -1, -1).gather(2, idx.unsqueeze(2)).squeeze(2).sum(1)

    def sample(self, n: int, generator: torch.Generator | None = None) -> Tensor:
        """``n`` independent draws, ``(n, *event)`` float states of the space."""
        check_int(n, "n", minimum=1)
        logits = self.logits.expand(n, *self.logits.shape)
        return self.space.from_indices(sample_categorical(logits, generator), dtype=self.logits.dtype)

    def extra_repr(self) -> str:
        return f"space={self.space!r}"
