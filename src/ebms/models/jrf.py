r"""Joint random field (JRF) for sequence labelling: one potential, a CRF tagger and a TRF language model.

The potential of a sentence :math:`x = x_{1:l}` (ids ``1..V-1``) with tags :math:`y = y_{1:l}`
(ids ``0..K-1``) is the neural CRF score (monograph Eq. 5.16, with boundary labels):

.. math::  U_\theta(x, y) = s_{y_1} + \sum_{i=1}^{l}\Psi_\theta(x)[i, y_i]
           + \sum_{i=2}^{l} A_{y_{i-1}, y_i} + e_{y_l},

where :math:`\Psi_\theta(x)` ``(B, T, K)`` are node potentials from word embeddings and a BiLSTM
(:class:`~ebms.nets.sequence.SequenceEncoder` plus a linear layer, i.e. the
:class:`~ebms.models.crf_tagger.NeuralCRFTagger` held in ``tagger``), :math:`A` ``(K, K)`` the
transitions. **Start handling**: Eq. 5.16's first edge :math:`A[y_0, y_1]` is read with a start
label :math:`y_0 = \langle s\rangle`, whose row of :math:`A` is the learned vector :math:`s`; a
symmetric end label gives :math:`e_{y_l} = A[y_l, \langle/s\rangle]`. Both start at 0, where the
score is Eq. 5.16 with the :math:`i = 1` edge dropped. The joint law over lengths ``1..L``
(Eq. 5.7–5.8) is

.. math::  p_\theta(l, x, y) = \frac{\pi_l}{Z_\theta(l)} e^{U_\theta(x, y)}, \qquad
           Z_\theta(l) = \sum_{x \in V^l,\, y \in K^l} e^{U_\theta(x, y)} ,

whose conditional is exactly the CRF :math:`p(y \mid x) = e^{U(x, y)} / e^{U(x)}` (:meth:`JRF.crf`,
a :class:`~ebms.structured.linear_chain.LinearChainCRF`) and whose marginal is a TRF language model

.. math::  \log p_\xi(l, x) = \log\pi_l + U_\theta(x) - \zeta_l, \qquad
           U_\theta(x) = \log\sum_{y} e^{U_\theta(x, y)} = \log Z^{CRF}_\theta(x),

with :math:`U_\theta(x)` from the CRF's forward algorithm and learned :math:`\zeta_l \approx \log
Z_\theta(l)` (``log_z``). In the package's sign, the sentence energy is :math:`E(x) = -U_\theta(x)`
(:meth:`JRF.energy`) and the joint energy :math:`-U_\theta(x, y)` (:meth:`JRF.joint_energy`).

**TRF contract.** A JRF offers what :class:`~ebms.objectives.trf_nce.TRFNCE`,
:class:`~ebms.objectives.trf_nce.DynamicNCE` and the trans-dimensional samplers read from a
:class:`~ebms.models.trf.TRF` (``energy``, the ``log_z`` parameter, ``log_pi``/``log_pi0``,
``log_normalisers``, ``length_log_weights``, ``space``, ``vocab_size``, ``token_logits``), so they
train and sample its marginal unchanged. Token id 0 is the sentence boundary (``</s>`` of the noise
LM) and the encoder's padding: a sentence holding it inside its length has energy :math:`+\infty`.

Cost per sentence: the BiLSTM's :math:`O(l H^2)` plus :math:`O(l K^2)` for the forward algorithm.

References:
    Song, Y., Ou, Z., Liu, Z. & Yang, S. (2020). "Upgrading CRFs to JRFs and its benefits to
    sequence modeling and labeling." ICASSP (the monograph's [163]).
    Wang, B. & Ou, Z. (2018). "Improved training of neural trans-dimensional random field language
    models with dynamic noise-contrastive estimation." IEEE SLT (DNCE, the monograph's [185]).
    Ou (2024), "Energy-Based Models with Applications to Speech and Language Processing",
    §5.3 (Eqs. 5.7–5.11) and §5.4 (Eq. 5.16).
"""

from __future__ import annotations

import math
from typing import Any

import torch
from torch import Tensor

from ebms._checks import check_int, check_positive, check_tensor
from ebms.models.crf_tagger import NeuralCRFTagger
from ebms.models.trf._common import LengthMixture, field_energy, token_scores
from ebms.sequences import Sequences
from ebms.structured.linear_chain import LinearChainCRF

__all__ = ["JRF"]


def _probs(p: Tensor, name: str, L: int | None) -> Tensor:
    check_tensor(p, name, floating=True)
    if p.dim() != 1 or p.shape[0] < 1 or (L is not None and p.shape[0] != L):
        want = f"({L},)" if L is not None else "(L,)"
        raise ValueError(f"{name}: expected a 1-D tensor {want} of probabilities for lengths 1..L; "
                         f"got shape {tuple(p.shape)}")
    if not bool(torch.isfinite(p).all()) or float(p.min()) < 0 or float(p.sum()) <= 0:
        raise ValueError(f"{name}: expected finite non-negative weights with a positive sum; got {p.tolist()[:8]}")
    return (p / p.sum()).detach().float()


class JRF(LengthMixture):
    r"""Joint random field over (length, sentence, tags) (see the module docstring).

    Args:
        vocab_size: ``V`` (sentence ids ``1..V-1``; 0 is the boundary / padding).
        n_tags: ``K``.
        max_length: ``L``, the longest sentence of the marginal TRF (the CRF takes any length).
        embed: word embedding width.
        hidden: BiLSTM hidden size per direction.
        layers: BiLSTM layers.
        dropout: dropout of the encoder (training mode only; makes the energy random).
        length_probs: :math:`\pi` ``(L,)`` (normalised here); default uniform.
        log_z: initial :math:`\zeta` ``(L,)``; default :math:`l\log((V-1)K)`, exact for zero potentials.
        sampling_length_probs: :math:`\pi^0` ``(L,)`` for samplers; default :math:`\pi`.
        anchor_first: use the exact :math:`\log Z_1` (a sum over ``V - 1`` sentences) and
            :math:`\zeta_l - \zeta_1` as :class:`~ebms.models.trf.TRF` does.

    Parameters: ``tagger`` (encoder, ``proj``, ``transitions`` :math:`A`, ``start`` :math:`s`,
    ``end`` :math:`e`) and ``log_z`` :math:`\zeta`. Buffers: ``log_pi``, ``log_pi0`` ``(L,)``.

    Example:
        >>> import torch
        >>> jrf = JRF(5, 3, max_length=4, embed=8, hidden=8)
        >>> x = Sequences.from_lists([[1, 2, 3], [4]])
        >>> jrf.energy(x).shape, jrf.crf(x).argmax.shape
        (torch.Size([2]), torch.Size([2, 3]))
    """

    def __init__(self, vocab_size: int, n_tags: int, *, max_length: int, embed: int = 32, hidden: int = 32,
                 layers: int = 1, dropout: float = 0.0, length_probs: Tensor | None = None,
                 log_z: Tensor | None = None, sampling_length_probs: Tensor | None = None,
                 anchor_first: bool = False) -> None:
        super().__init__()
        self.vocab_size = check_int(vocab_size, "vocab_size", minimum=2)
        self.n_tags = check_int(n_tags, "n_tags", minimum=1)
        L = check_int(max_length, "max_length", minimum=1)
        self.tagger = NeuralCRFTagger(self.vocab_size, self.n_tags, embedding_dim=embed, hidden=hidden,
                                      encoder="bilstm", layers=layers, dropout=dropout)
        pi = torch.ones(L) / L if length_probs is None else _probs(length_probs, "length_probs", L)
        pi0 = pi if sampling_length_probs is None else _probs(sampling_length_probs, "sampling_length_probs", L)
        self._init_lengths(pi, pi0, log_z, math.log((self.vocab_size - 1) * self.n_tags), anchor_first)

    @classmethod
    def from_corpus(cls, corpus: Sequences, vocab_size: int, n_tags: int, *, max_length: int | None = None,
                    smoothing: float = 0.0, **kwargs: Any) -> JRF:
        """A JRF whose :math:`\\pi` is the length frequencies of ``corpus`` (plus ``smoothing`` per
        length); ``max_length`` defaults to its longest sentence. Other keywords go to :class:`JRF`."""
        corpus = Sequences.coerce(corpus, name="corpus", pairs=False)
        longest = int(corpus.lengths.max()) if corpus.batch_size else 0
        L = check_int(longest if max_length is None else max_length, "max_length", minimum=1)
        if longest > L:
            raise ValueError(f"max_length: the corpus has a sentence of length {longest} > max_length {L}")
        counts = torch.bincount(corpus.lengths.cpu(), minlength=L + 1)[1:].double()
        counts = counts + check_positive(smoothing, "smoothing", allow_zero=True)
        return cls(vocab_size, n_tags, max_length=L, length_probs=counts, **kwargs)

    # -- the TRF contract (the per-length part: LengthMixture) -------------------------------
    def energy(self, x: Sequences) -> Tensor:
        """:math:`E(x) = -U_\\theta(x)`, ``(B,)``; :math:`+\\infty` for sentences holding id 0."""
        return field_energy(self.marginal_energy, x)

    def token_logits(self, x: Sequences, position: Tensor, candidates: Tensor) -> Tensor:
        """:math:`-E` of single-position substitutions ``(B, K')`` (whole sentences re-evaluated)."""
        return token_scores(self.marginal_energy, x, position, candidates)

    # -- the CRF side -----------------------------------------------------------------------------
    def potentials(self, x: Sequences) -> Tensor:
        """Node potentials :math:`\\Psi_\\theta(x)` ``(B, T, K)`` (rows beyond each length: the bias)."""
        x = Sequences.coerce(x, name="x", pairs=False)
        return self.tagger.emissions(x.tokens, x.lengths)

    def crf(self, x: Sequences) -> LinearChainCRF:
        """The conditional :math:`p_\\theta(y \\mid x)` of sentences of any length ``>= 1``."""
        x = Sequences.coerce(x, name="x", pairs=False)
        return self.tagger(x.tokens, x.lengths)

    def marginal_energy(self, x: Sequences) -> Tensor:
        """:math:`-U_\\theta(x) = -\\log\\sum_y e^{U_\\theta(x, y)}` by the forward algorithm, ``(B,)``."""
        return -self.crf(x).log_partition

    def joint_energy(self, x: Sequences, y: Tensor) -> Tensor:
        """:math:`-U_\\theta(x, y)` of tags ``y`` ``(B, T)`` (entries beyond each length ignored), ``(B,)``."""
        return -self.crf(x).score(y)

    def joint_log_prob(self, x: Sequences, y: Tensor) -> Tensor:
        """:math:`\\log p_\\xi(l, x, y) = \\log\\pi_l + U_\\theta(x, y) - \\log Z_l`, ``(B,)`` (sentences checked)."""
        self.space.check(x, boundary=0)
        e = self.joint_energy(x, y)
        idx = x.lengths - 1
        return self.log_pi[idx].to(e.dtype) - e - self.log_normalisers()[idx].to(e.dtype)

    @torch.no_grad()
    def decode(self, x: Sequences) -> Tensor:
        """Viterbi tags :math:`\\arg\\max_y U_\\theta(x, y)` ``(B, T)`` long, ``-1`` beyond each length."""
        return self.crf(x).argmax

    def extra_repr(self) -> str:
        return (f"vocab_size={self.vocab_size}, n_tags={self.n_tags}, max_length={self.max_length}, "
                f"anchor_first={self.anchor_first}")
