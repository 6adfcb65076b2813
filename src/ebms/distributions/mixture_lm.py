r"""A finite mixture of normalised sentence LMs, e.g. NCE noise with a heavy-tailed component.

.. math::  q(x) = \sum_{k=1}^{K} w_k\, q_k(x), \qquad
           \log q(x) = \operatorname{logsumexp}_k \big(\log w_k + \log q_k(x)\big),

with weights :math:`w_k \ge 0` summing to 1 and components :math:`q_k` that are each normalised
over the same set of sentences (e.g. all token sequences ending in ``</s>``), so :math:`q` is
normalised too. A draw picks its component :math:`k \sim \mathrm{Categorical}(w)` and then draws
from :math:`q_k`: the ``n`` component indices are drawn at once, each component is asked for its
share in one call, and the draws are put back in the order of the indices.

Use as TRF-NCE noise (:class:`~ebms.objectives.trf_nce.TRFNCE`): NCE constrains the model only
where the noise puts mass, and its :math:`\zeta_l` then matches the normaliser over the noise's
support. A KN bigram :math:`q_1` rarely proposes random-looking sentences, so an energy may leave
large mass there unseen; ``MixtureLM([bigram, unigram], [1 - eps, eps])`` (the unigram a
``BackoffNGram`` of order 1: every token sequence, geometric lengths) adds draws from that region
at a cost of at most :math:`-\log(1 - \epsilon)` nats on the data's noise log-probability.

A component with weight 0 is neither scored nor sampled; with a single positive weight the
mixture *is* that component: ``log_prob`` returns its values and ``sample`` its draws for the
same generator state.

Shapes: ``sample(n) -> Sequences`` of ``n`` sentences; ``log_prob(Sequences (B, T)) -> (B,)``
in the components' promoted dtype (float64 for the n-gram LMs). Cost: ``log_prob`` is the sum of
the components' costs (positive weights only), ``sample`` the components' costs for their shares
plus one ``multinomial`` of ``n`` indices.

References:
    McLachlan, G. & Peel, D. (2000). "Finite Mixture Models." Wiley (the mixture law).
    Gutmann, M. & Hyvärinen, A. (2012). "Noise-contrastive estimation of unnormalized statistical
    models, with applications to natural image statistics." JMLR 13 (the noise must cover the
    data and the model, Sec. 2.4).
    Wang, B. & Ou, Z. (2018). "Learning neural trans-dimensional random field language models with
    noise-contrastive estimation." ICASSP.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import torch
from torch import Tensor, nn

from ebms._checks import check_energy_output, check_int
from ebms.capabilities import HasLengthConditioning, HasSpace, HasVocabSize, NormalisedModel
from ebms.distributions._base import Distribution
from ebms.sequences import Sequences

__all__ = ["MixtureLM"]

_SUM_TOLERANCE = 1e-6


class MixtureLM(Distribution):
    r"""Mixture :math:`q = \sum_k w_k q_k` of normalised sentence LMs (see the module docstring).

    Args:
        components: ``K >= 1`` normalised sentence LMs over the same sentences, each with
            ``sample(n, generator=, **options) -> Sequences`` and ``log_prob(Sequences) -> (B,)``
            (e.g. :class:`~ebms.distributions.BackoffNGram`, :class:`~ebms.distributions.NGram`
            with ``end=True``, :class:`~ebms.models.lm.LSTMLM` in ``eval()``); not
            length-conditional ones. ``nn.Module`` components are submodules (``.to`` moves them).
        weights: ``K`` finite weights ``>= 0`` summing to 1 (within 1e-6; divided by their sum).

    Example:
        >>> from ebms.distributions import BackoffNGram
        >>> corpus = Sequences.from_lists([[2, 3], [2, 2, 3], [3], [2, 4, 3]])
        >>> bigram = BackoffNGram.fit(corpus, 5, order=2, discounts=[0.5, 0.5])
        >>> unigram = BackoffNGram.fit(corpus, 5, order=1, discounts=[0.5])
        >>> q = MixtureLM([bigram, unigram], [0.9, 0.1])
        >>> q.log_prob(q.sample(4, generator=torch.Generator().manual_seed(0))).shape
        torch.Size([4])

    Attributes:
        weights: ``(K,)`` float64 buffer, the normalised weights.
        vocab_size: the components' common ``vocab_size`` when they all have one (else ``None``).
    """

    weights: Tensor

    def __init__(self, components: Sequence[NormalisedModel], weights: Sequence[float] | Tensor) -> None:
        super().__init__()
        if isinstance(components, (str, bytes)) or not isinstance(components, Sequence) or not components:
            raise TypeError(f"components: expected a non-empty list of normalised sentence LMs; got {components!r}")
        for k, c in enumerate(components):
            if not isinstance(c, NormalisedModel):
                raise TypeError(f"components[{k}]: expected a normalised LM with sample(n, generator=) and "
                                f"log_prob(Sequences); got {type(c).__name__}")
            if isinstance(c, Distribution) and not c.normalised:
                raise ValueError(f"components[{k}]: expected a normalised LM; got a {type(c).__name__} whose "
                                 "normalised attribute is False (e.g. NGram.zeros, a score table, not a law)")
            if isinstance(c, HasLengthConditioning) and c.conditional_on_length:
                raise ValueError(f"components[{k}]: expected an LM over sentences ending in </s>; got a "
                                 f"length-conditional {type(c).__name__} (it needs sample(n, lengths=...))")
        K = len(components)
        w = self._check_weights(weights, K)
        sizes = [c.vocab_size if isinstance(c, HasVocabSize) else None for c in components]
        if all(s is not None for s in sizes) and len(set(sizes)) > 1:
            raise ValueError(f"components: expected one vocab_size for all; got {sizes}")
        self.vocab_size: int | None = sizes[0] if all(s is not None for s in sizes) else None
        self._components = list(components)
        self.component_modules = nn.ModuleList([c for c in components if isinstance(c, nn.Module)])
        self.register_buffer("weights", w)
        spaces: list[Any] = [c.space if isinstance(c, HasSpace) else None for c in components]
        self.space = spaces[0] if all(s is spaces[0] for s in spaces) else None

    @staticmethod
    def _check_weights(weights: Sequence[float] | Tensor, K: int) -> Tensor:
        try:
            w = torch.as_tensor(weights, dtype=torch.float64).detach().cpu()
        except (TypeError, ValueError, RuntimeError):
            raise TypeError(f"weights: expected {K} numbers; got {weights!r}") from None
        if w.shape != (K,):
            raise ValueError(f"weights: expected shape ({K},), one per component; got {tuple(w.shape)}")
        if not bool(torch.isfinite(w).all()) or bool((w < 0).any()):
            raise ValueError(f"weights: expected finite numbers >= 0; got {w.tolist()}")
        total = float(w.sum())
        if abs(total - 1.0) > _SUM_TOLERANCE:
            raise ValueError(f"weights: expected a sum of 1 (within {_SUM_TOLERANCE:g}); got {total!r} from {w.tolist()}")
        return w / total

    @property
    def components(self) -> list[NormalisedModel]:
        """The ``K`` components, in order."""
        return list(self._components)

    def _active(self) -> list[int]:
        return [k for k, v in enumerate(self.weights.tolist()) if v > 0.0]

    # --- scoring ------------------------------------------------------------------------------
    def component_log_probs(self, x: Sequences) -> Tensor:
        r"""``(B, K)``: :math:`\log w_k + \log q_k(x)` (``-inf`` in the columns of weight 0, never scored)."""
        x = Sequences.coerce(x, name="x", pairs=False)
        B, active = x.batch_size, self._active()
        scores = {k: check_energy_output(self._components[k].log_prob(x), B, f"components[{k}].log_prob(x)")
                  for k in active}
        dtype = torch.float64
        for s in scores.values():
            dtype = torch.promote_types(dtype, s.dtype) if s.is_floating_point() else dtype
        first = scores[active[0]]
        out = torch.full((B, len(self._components)), -math.inf, dtype=dtype, device=first.device)
        log_w = self.weights.log()
        for k, s in scores.items():
            out[:, k] = s.to(dtype) + float(log_w[k])
        return out

    def log_prob(self, x: Sequences) -> Tensor:
        r""":math:`\log q(x)`, ``(B,)``: the single component's own values when one weight is positive."""
        active = self._active()
        if len(active) == 1:
            k = active[0]
            x = Sequences.coerce(x, name="x", pairs=False)
            return check_energy_output(self._components[k].log_prob(x), x.batch_size, f"components[{k}].log_prob(x)")
        return torch.logsumexp(self.component_log_probs(x), dim=1)

    # --- sampling -----------------------------------------------------------------------------
    def sample(self, n: int, generator: torch.Generator | None = None, **options: Any) -> Sequences:
        """``n`` independent draws; ``options`` (e.g. ``max_length``) go to every component's ``sample``.

        The component indices come from ``torch.multinomial`` on ``generator`` (skipped when one
        weight is positive), then each component draws its share in one call, in component order.
        """
        check_int(n, "n", minimum=1)
        active = self._active()
        if len(active) == 1:
            return self._draw(active[0], n, generator, options)
        which = torch.multinomial(self.weights.float(), n, replacement=True, generator=generator)  # (n,)
        parts, slots = [], []
        for k in active:
            at = (which == k).nonzero().squeeze(1)
            if at.numel():
                parts.append(self._draw(k, at.numel(), generator, options))
                slots.append(at)
        out = Sequences.cat(parts)
        order = torch.argsort(torch.cat(slots)).to(out.device)  # back to the order of the indices
        return out[order]

    def _draw(self, k: int, m: int, generator: torch.Generator | None, options: dict[str, Any]) -> Sequences:
        y = self._components[k].sample(m, generator=generator, **options)
        if not isinstance(y, Sequences) or y.batch_size != m:
            raise TypeError(f"components[{k}].sample({m}): expected Sequences of {m} sentences; got {y!r}")
        return y

    def extra_repr(self) -> str:
        return f"weights={[round(v, 6) for v in self.weights.tolist()]}"
