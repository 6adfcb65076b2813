r"""Globally normalised energy-based LM (GN-ELM; monograph Eq. 3.3, and 3.6 with length features).

.. math::  p(x) = \frac{e^{-E(x)}}{Z}, \qquad Z = \sum_{l=1}^{L} \sum_{x \in V^l} e^{-E(x)} = \sum_l Z_l,

one normaliser over all lengths. The length is the energy's business: read ``</s>`` in the features
(:class:`~ebms.models.trf.DiscreteFeatures` with ``eos=True``) and/or add *dimension features*
:math:`\nu_l` (``length_features=True``): :math:`E(x) - \nu_{|x|}` (Eq. 3.6, which under maximum
likelihood is a TRF with another parameterisation). The implied length law is :math:`Z_l / Z` (Eq.
3.8), free to differ from the data's by orders of magnitude, which is why TRFs fix it. ``log_z`` is
one learnable scalar; in n-best rescoring it cancels.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn

from ebms._checks import check_int
from ebms.models.trf._common import field_energy, token_scores
from ebms.sequences import Sequences
from ebms.spaces import TokenSequences

__all__ = ["GNELM"]


class GNELM(nn.Module):
    """GN-ELM over sentences of lengths ``1..max_length`` with tokens ``1..V-1``.

    Args:
        energy: a sentence energy module ``E(Sequences) -> (B,)``.
        vocab_size: ``V``.
        max_length: ``L``.
        log_z: initial :math:`\\log Z`; default :math:`\\log \\sum_l (V-1)^l` (exact for :math:`E = 0`).
        length_features: add learnable :math:`\\nu` ``(L,)`` (zeros at first) to the energy.

    Example:
        >>> from ebms.models.trf import DiscreteFeatures, feature_templates
        >>> from ebms.sequences import Sequences
        >>> corpus = Sequences.from_lists([[1, 2], [2, 1, 1]])
        >>> feats = DiscreteFeatures.fit(corpus, 3, feature_templates(("w",), order=2), eos=True)
        >>> GNELM(feats, vocab_size=3, max_length=3).log_prob(corpus)  # E = 0: -log(2 + 4 + 8)
        tensor([-2.6391, -2.6391], grad_fn=<SubBackward0>)
    """

    def __init__(self, energy: nn.Module, vocab_size: int, max_length: int, *, log_z: float | None = None,
                 length_features: bool = False) -> None:
        super().__init__()
        if not isinstance(energy, nn.Module):
            raise TypeError(f"energy: expected an nn.Module E(Sequences) -> (B,); got {type(energy).__name__}")
        self.field = energy
        self.vocab_size = check_int(vocab_size, "vocab_size", minimum=2)
        L = check_int(max_length, "max_length", minimum=1)
        if log_z is None:
            log_z = float(torch.logsumexp(torch.arange(1, L + 1, dtype=torch.float64) * math.log(vocab_size - 1), 0))
        self.log_z = nn.Parameter(torch.tensor(float(log_z)))
        self.nu = nn.Parameter(torch.zeros(L)) if length_features else None
        self._max_length = L

    @property
    def max_length(self) -> int:
        return self._max_length

    @property
    def space(self) -> TokenSequences:
        return TokenSequences(self.vocab_size, self.max_length)

    def energy(self, x: Sequences) -> Tensor:
        """:math:`E(x) - \\nu_{|x|}`, ``(B,)``; :math:`+\\infty` for sentences holding the boundary id."""
        e = field_energy(self.field, x)
        return e if self.nu is None else e - self.nu[x.lengths - 1]

    def token_logits(self, x: Sequences, position: Tensor, candidates: Tensor) -> Tensor:
        """Single-position substitution scores for samplers (the length term is a per-row constant)."""
        return token_scores(self.field, x, position, candidates)

    def length_log_weights(self) -> Tensor:
        """All lengths weigh alike (``0``; ``-inf`` at length 0): the energy carries the length, ``(L + 1,)``."""
        a = torch.zeros(self.max_length + 1, device=self.log_z.device)
        a[0] = -math.inf
        return a

    def log_prob(self, x: Sequences) -> Tensor:
        """:math:`-E(x) - \\log Z`, ``(B,)`` (sentences checked)."""
        self.space.check(x, boundary=0)
        return -self.energy(x) - self.log_z

    def forward(self, x: Sequences) -> Tensor:
        return self.energy(x)

    def extra_repr(self) -> str:
        return f"vocab_size={self.vocab_size}, max_length={self.max_length}, length_features={self.nu is not None}"
