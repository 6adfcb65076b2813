r"""Trans-dimensional random field (TRF) language model (monograph Eq. 3.5; Wang, Ou & Tan 2018).

.. math::  p(l, x) = \pi_l\, \frac{e^{-E(x)}}{Z_l}, \qquad Z_l = \sum_{x \in V^l} e^{-E(x)}, \qquad l = 1..L,

a mixture of one random field per length with fixed weights :math:`\pi` (the empirical length
probabilities, the maximum-likelihood value) and log normalisers :math:`\zeta_l \approx \log Z_l`
kept as parameters (``log_z``), estimated during training (AugSA, NCE) and re-estimated afterwards.
Sentences are token ids in ``[1, V)`` (0 is the boundary; a sentence holding it has energy
:math:`+\infty`); the energy has no ``</s>`` term (the length is the mixture's business).

* ``log_prob(x)`` :math:`= \log\pi_l - E(x) - \zeta_l` uses the current :math:`\zeta` (so it is a
  normalised log-probability exactly when :math:`\zeta = \log Z`; :func:`exact_log_z` gives that
  on tiny vocabularies). With ``anchor_first`` only differences count,
  :math:`\log Z_l = \log Z_1 + \zeta_l - \zeta_1`, with :math:`\log Z_1` summed exactly over the
  ``V - 1`` one-token sentences (as in the authors' code).
* As a sampler target (:class:`~ebms.samplers.trans_dimensional.TransDimensionalTarget`): ``energy``
  and ``length_log_weights`` :math:`= \log\pi^0_l - \zeta_l` with a sampling length prior
  :math:`\pi^0` (default :math:`\pi`; AugSA raises short lengths, :meth:`TRF.raised_length_prior`).
  If :math:`\zeta = \log Z`, the sampler's length marginal is :math:`\pi^0`.
* ``forward(x)`` is the joint energy :math:`E(x) - \log\pi_l + \zeta_l` (:math:`= -`\ ``log_prob``
  without the anchor).
"""

from __future__ import annotations

import math
from typing import Any

import torch
from torch import Tensor, nn

from ebms._checks import check_int, check_positive, check_tensor
from ebms.capabilities import (
    SupportsFlatTokenLogits,
    SupportsInteractionRange,
    SupportsSingleTokenEnergies,
    supports,
)
from ebms.models.trf._common import LengthMixture, field_energy, token_scores
from ebms.sequences import Sequences

__all__ = ["TRF"]


def _probs(p: Tensor, name: str) -> Tensor:
    check_tensor(p, name, floating=True)
    if p.dim() != 1 or p.shape[0] < 1:
        raise ValueError(f"{name}: expected a 1-D tensor (L,) of probabilities for lengths 1..L; got {tuple(p.shape)}")
    if not bool(torch.isfinite(p).all()) or float(p.min()) < 0 or float(p.sum()) <= 0:
        raise ValueError(f"{name}: expected finite non-negative weights with a positive sum; got {p.tolist()[:8]}")
    return (p / p.sum()).detach().float()


class TRF(LengthMixture):
    """TRF language model over sentences of lengths ``1..L``.

    Args:
        energy: a sentence energy ``E(Sequences) -> (B,)`` (module), e.g.
            :class:`~ebms.models.trf.DiscreteFeatures`, :class:`~ebms.models.trf.Hidden2Scalar`,
            :class:`~ebms.models.trf.MixedEnergy`.
        length_probs: :math:`\\pi` for lengths ``1..L``, ``(L,)`` (normalised here).
        vocab_size: ``V`` (tokens ``1..V-1``).
        log_z: initial :math:`\\zeta` ``(L,)``; default :math:`l \\log(V-1)`, exact for :math:`E = 0`.
        sampling_length_probs: :math:`\\pi^0` ``(L,)`` for samplers; default :math:`\\pi`.
        anchor_first: normalise with the exact :math:`\\log Z_1` and :math:`\\zeta_l - \\zeta_1`.

    Example:
        >>> from ebms.models.trf import DiscreteFeatures, feature_templates
        >>> from ebms.sequences import Sequences
        >>> corpus = Sequences.from_lists([[1, 2], [2, 1, 3], [3]])
        >>> feats = DiscreteFeatures.fit(corpus, 4, feature_templates(("w",), order=2))
        >>> model = TRF.from_corpus(feats, corpus, vocab_size=4)
        >>> model.log_prob(corpus)   # E = 0: log(1/3) - l log 3
        tensor([-3.2958, -4.3944, -2.1972], grad_fn=<SubBackward0>)
    """

    def __init__(self, energy: nn.Module, length_probs: Tensor, vocab_size: int, *, log_z: Tensor | None = None,
                 sampling_length_probs: Tensor | None = None, anchor_first: bool = False) -> None:
        super().__init__()
        if not isinstance(energy, nn.Module):
            raise TypeError(f"energy: expected an nn.Module E(Sequences) -> (B,); got {type(energy).__name__}")
        self.field = energy
        self.vocab_size = check_int(vocab_size, "vocab_size", minimum=2)
        pi = _probs(length_probs, "length_probs")
        L = pi.shape[0]
        pi0 = pi if sampling_length_probs is None else _probs(sampling_length_probs, "sampling_length_probs")
        if pi0.shape != pi.shape:
            raise ValueError(f"sampling_length_probs: expected shape ({L},) like length_probs; got {tuple(pi0.shape)}")
        self._init_lengths(pi, pi0, log_z, math.log(self.vocab_size - 1), anchor_first)

    @classmethod
    def from_corpus(cls, energy: nn.Module, corpus: Sequences, vocab_size: int, *, max_length: int | None = None,
                    smoothing: float = 0.0, **kwargs: Any) -> TRF:
        """:math:`\\pi` from the lengths of ``corpus`` (plus ``smoothing`` per length), ``L`` = the longest by default."""
        if not isinstance(corpus, Sequences):
            raise TypeError(f"corpus: expected an ebms.sequences.Sequences; got {type(corpus).__name__}")
        longest = int(corpus.lengths.max()) if corpus.batch_size else 0
        L = check_int(longest if max_length is None else max_length, "max_length", minimum=1)
        if longest > L:
            raise ValueError(f"max_length: the corpus has a sentence of length {longest} > max_length {L}")
        counts = torch.bincount(corpus.lengths.cpu(), minlength=L + 1)[1:].double()
        return cls(energy, counts + check_positive(smoothing, "smoothing", allow_zero=True), vocab_size, **kwargs)

    @staticmethod
    def raised_length_prior(length_probs: Tensor, *, floor: float = 1e-5) -> Tensor:
        """AugSA's sampling prior: lengths below the mode raised to the mode's probability, all floored
        at ``floor``, renormalised (so short lengths are visited and no length is unreachable)."""
        p = _probs(length_probs, "length_probs").double()
        mode = int(p.argmax())
        p[:mode] = p[mode]
        p = p.clamp(min=check_positive(floor, "floor"))
        return (p / p.sum()).float()

    def energy(self, x: Sequences) -> Tensor:
        """:math:`E(x)`, ``(B,)``; :math:`+\\infty` for sentences holding the boundary id (values not checked)."""
        return field_energy(self.field, x)

    def single_token_energies(self) -> Tensor:
        """:math:`E` of the ``V - 1`` one-token sentences ``(V - 1,)`` (the field's cached ones when offered)."""
        if supports(self.field, SupportsSingleTokenEnergies):
            return self.field.single_token_energies()
        return self.energy(Sequences(torch.arange(1, self.vocab_size, device=self.log_z.device)[:, None],
                                     validate=False))

    def interaction_range(self) -> int | None:
        """The field's :meth:`~ebms.capabilities.SupportsInteractionRange.interaction_range` (``None`` when it
        declares none: the length term reads no position)."""
        return self.field.interaction_range() if supports(self.field, SupportsInteractionRange) else None

    def token_logits(self, x: Sequences, position: Tensor, candidates: Tensor) -> Tensor:
        """Single-position substitution scores for samplers (the field's own when it offers them)."""
        return token_scores(self.field, x, position, candidates)

    def token_logits_flat(self, x: Sequences, position: Tensor, row: Tensor, candidates: Tensor) -> Tensor:
        """:meth:`token_logits` of a flat list of substitutions ``(N,)`` (the field's own flat scores when it
        offers them; ``-inf`` for the boundary id)."""
        if supports(self.field, SupportsFlatTokenLogits):
            s = self.field.token_logits_flat(x, position, row, candidates)
        else:
            rows = Sequences(x.tokens[row], x.lengths[row], validate=False)
            s = token_scores(self.field, rows, position[row], candidates[:, None])[:, 0]
        return s.masked_fill(candidates == 0, -math.inf)

    def extra_repr(self) -> str:
        return f"vocab_size={self.vocab_size}, max_length={self.max_length}, anchor_first={self.anchor_first}"
