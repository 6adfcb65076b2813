r"""Neural linear-chain CRF tagger: a sequence encoder for the node potentials, a learned
transition matrix for the edges.

Model (monograph eqs. 4.5 and 4.14; Huang, Xu & Yu 2015, *Bidirectional LSTM-CRF models for
sequence tagging*; Lample et al. 2016, *Neural architectures for named entity recognition*;
Ma & Hovy 2016, *End-to-end sequence labeling via bi-directional LSTM-CNNs-CRF*):

.. math::  h_{1:T} = \mathrm{Encoder}(x_{1:T}), \qquad \phi_t^k = w_k^\top h_t + b_k,

.. math::  U_\theta(x, y) = s_{y_1} + \sum_{t=1}^{L} \phi_t^{y_t}
           + \sum_{t=2}^{L} A_{y_{t-1}, y_t} + e_{y_L},
           \qquad p_\theta(y \mid x) = \exp U_\theta(x, y) / Z_\theta(x),

with the encoder of :class:`ebms.nets.sequence.SequenceEncoder` (word embeddings, optional
character CNN, BiLSTM or CNN), start/end potentials ``s, e`` and transitions ``A``, all learned.
:meth:`NeuralCRFTagger.forward` returns the :class:`~ebms.structured.linear_chain.LinearChainCRF`
of ``p(y | x)``; train it with :class:`ebms.objectives.conditional.ConditionalML` (or
``ConditionalNCE``) and decode with :meth:`NeuralCRFTagger.decode` (Viterbi).

Constraints: given ``allowed``/``allowed_start`` masks (e.g. from
:func:`~ebms.structured.linear_chain.bio_allowed_transitions`: ``I-X`` only after ``B-X``/``I-X``),
:meth:`decode` and ``forward(..., constrained=True)`` give forbidden transitions probability 0.
Training uses the unconstrained chain by default: the masked chain has ``-inf`` potentials, which
rules out the fast scaled forward recursion (about 6x slower at B=32, T=40, C=23), and a model
trained on valid tag sequences learns strongly negative forbidden transitions anyway.

Shapes: ``words (B, T)`` long, ``lengths (B,)`` long in ``[1, T]``, ``chars (B, T, L)`` long
(0 = padding), emissions ``(B, T, C)``. Cost per sentence: the encoder's (BiLSTM
``O(T H^2)``) plus ``O(T C^2)`` for the forward-backward.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from ebms._checks import check_bool_mask, check_int
from ebms.nets.sequence import ENCODERS, SequenceEncoder
from ebms.structured.linear_chain import LinearChainCRF

__all__ = ["NeuralCRFTagger"]


def _cloned(mask: Tensor | None) -> Tensor | None:
    return None if mask is None else mask.clone()


class NeuralCRFTagger(nn.Module):
    """BiLSTM-CRF / CNN-CRF sequence tagger (see the module docstring).

    Args:
        vocab_size: number of word ids (``0`` padding, by the convention of the data code).
        n_tags: number of tags ``C``.
        embedding_dim: word embedding width.
        hidden: BiLSTM hidden size per direction, or CNN channels.
        encoder: ``"bilstm"`` or ``"cnn"``.
        layers: LSTM layers or convolution blocks.
        dropout: dropout on the embeddings and on the encoder output (training only).
        char_vocab_size: enables the character CNN (then ``forward`` needs ``chars``).
        char_dim: character embedding width.
        allowed: optional ``(C, C)`` bool mask of allowed transitions ``prev -> next``.
        allowed_start: optional ``(C,)`` bool mask of allowed first tags.

    Parameters: the encoder's, ``proj`` (``Linear(out_dim, C)``), ``transitions (C, C)``,
    ``start (C,)`` and ``end (C,)`` (initialised at 0). Buffers: ``allowed``, ``allowed_start``.
    """

    allowed: Tensor | None
    allowed_start: Tensor | None

    def __init__(self, vocab_size: int, n_tags: int, *, embedding_dim: int = 100, hidden: int = 100,
                 encoder: str = "bilstm", layers: int = 1, dropout: float = 0.0,
                 char_vocab_size: int | None = None, char_dim: int = 25,
                 allowed: Tensor | None = None, allowed_start: Tensor | None = None) -> None:
        super().__init__()
        self.n_tags = check_int(n_tags, "n_tags", minimum=1)
        if encoder not in ENCODERS:
            raise ValueError(f"encoder: expected one of {', '.join(ENCODERS)}; got {encoder!r}")
        self.encoder = SequenceEncoder(vocab_size, embedding_dim, hidden, kind=encoder, layers=layers,
                                       dropout=dropout, char_vocab_size=char_vocab_size, char_dim=char_dim)
        self.proj = nn.Linear(self.encoder.out_dim, n_tags)
        self.transitions = nn.Parameter(torch.zeros(n_tags, n_tags))
        self.start = nn.Parameter(torch.zeros(n_tags))
        self.end = nn.Parameter(torch.zeros(n_tags))
        self.register_buffer("allowed", _cloned(check_bool_mask(allowed, (n_tags, n_tags), "allowed")))
        self.register_buffer("allowed_start", _cloned(check_bool_mask(allowed_start, (n_tags,), "allowed_start")))

    def emissions(self, words: Tensor, lengths: Tensor, chars: Tensor | None = None) -> Tensor:
        """Node potentials ``phi (B, T, C)`` (rows beyond each length are the bias ``b``)."""
        return self.proj(self.encoder(words, lengths, chars))

    def forward(self, words: Tensor, lengths: Tensor, chars: Tensor | None = None, *,
                constrained: bool = False) -> LinearChainCRF:
        """The distribution ``p(y | x)`` of a padded batch.

        Args:
            words: ``(B, T)`` word ids.
            lengths: ``(B,)`` sentence lengths in ``[1, T]``.
            chars: ``(B, T, L)`` character ids, exactly when built with ``char_vocab_size``.
            constrained: apply the ``allowed``/``allowed_start`` masks (if any).

        The call ``model(words, chars, lengths)`` (the ``(*inputs, lengths)`` order of the
        objectives in :mod:`ebms.objectives.conditional`) is accepted too: a 3-D second argument
        with a 1-D third one is read as ``chars, lengths``.
        """
        if isinstance(lengths, Tensor) and isinstance(chars, Tensor) and lengths.dim() == 3 and chars.dim() == 1:
            lengths, chars = chars, lengths
        em = self.emissions(words, lengths, chars)
        allowed: Tensor | None = self.allowed if constrained else None
        allowed_start: Tensor | None = self.allowed_start if constrained else None
        return LinearChainCRF(em, self.transitions, lengths, start=self.start, end=self.end, allowed=allowed,
                              allowed_start=allowed_start)

    @torch.no_grad()
    def decode(self, words: Tensor, lengths: Tensor, chars: Tensor | None = None) -> Tensor:
        """Constrained Viterbi tags ``(B, T)`` long, ``-1`` beyond each length (arguments as
        :meth:`forward`)."""
        return self(words, lengths, chars, constrained=True).argmax
