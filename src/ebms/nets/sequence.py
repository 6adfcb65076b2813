r"""Token-sequence encoders: word (and optional character) embeddings, then a BiLSTM or a CNN.

The encoder turns a padded batch of token ids into one feature vector per position,

.. math::  e_t = [\,E_w[w_t];\ \mathrm{charCNN}(c_{t,1:L})\,], \qquad
           h_{1:T} = \mathrm{BiLSTM}(e_{1:T}) \ \text{ or } \ \mathrm{CNN}(e_{1:T}),

the :math:`h_t` of the neural CRF node potentials :math:`\phi_t^k = w_k^\top h_t + b_k`
(monograph eq. 4.5; Huang, Xu & Yu 2015, *Bidirectional LSTM-CRF models for sequence
tagging*; Ma & Hovy 2016, *End-to-end sequence labeling via bi-directional
LSTM-CNNs-CRF*; Collobert et al. 2011 for the convolutional encoder).

Shapes: ``words (B, T)`` long, ``lengths (B,)`` long, ``chars (B, T, L)`` long (optional,
0 = padding); output ``(B, T, out_dim)``. Positions at or beyond a sequence's length are
padding: the BiLSTM packs the batch so they never reach the backward direction of a real
position, and the CNN zeroes them before every convolution, so the features of real
positions do not depend on how much padding the batch carries.

Cost: BiLSTM :math:`O(T\,H^2)` sequential per direction; CNN :math:`O(T\,k\,H^2)`,
parallel over time.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

from ebms._checks import check_int, check_probability

__all__ = ["ENCODERS", "SequenceEncoder"]

#: encoder kinds :class:`SequenceEncoder` accepts.
ENCODERS = ("bilstm", "cnn")


def _check_batch(words: Tensor, lengths: Tensor, vocab: int) -> None:
    if not isinstance(words, Tensor) or words.dim() != 2 or words.dtype != torch.long:
        got = f"{tuple(words.shape)} {words.dtype}" if isinstance(words, Tensor) else type(words).__name__
        raise ValueError(f"words: expected a (B, T) long tensor of token ids; got {got}")
    b, t = words.shape
    if not isinstance(lengths, Tensor) or lengths.shape != (b,) or lengths.dtype != torch.long:
        got = f"{tuple(lengths.shape)} {lengths.dtype}" if isinstance(lengths, Tensor) else type(lengths).__name__
        raise ValueError(f"lengths: expected a ({b},) long tensor; got {got}")
    if b and (int(lengths.min()) < 1 or int(lengths.max()) > t):
        raise ValueError(f"lengths: expected values in [1, {t}] (the padded length of words); "
                         f"got min {int(lengths.min())}, max {int(lengths.max())}")
    if words.numel() and (int(words.min()) < 0 or int(words.max()) >= vocab):
        raise ValueError(f"words: expected ids in [0, {vocab}); got min {int(words.min())}, max {int(words.max())}")


class SequenceEncoder(nn.Module):
    """Embeddings (+ character CNN) followed by a BiLSTM or a stack of 1-D convolutions.

    Args:
        vocab_size: number of word ids (id 0 is conventionally padding/unknown).
        embedding_dim: word embedding width.
        hidden: BiLSTM hidden size per direction, or CNN channels.
        kind: ``"bilstm"`` or ``"cnn"``.
        layers: LSTM layers or convolution blocks.
        dropout: dropout on embeddings and between layers (training only).
        kernel_size: CNN kernel width (odd).
        char_vocab_size: enables the character CNN when given (id 0 = padding).
        char_dim: character embedding width; ``char_channels``: its filters (kernel 3, max-pooled).

    Attributes:
        out_dim: width of the returned features (``2 * hidden`` for the BiLSTM, ``hidden`` for the CNN).
    """

    def __init__(self, vocab_size: int, embedding_dim: int = 100, hidden: int = 100, *, kind: str = "bilstm",
                 layers: int = 1, dropout: float = 0.0, kernel_size: int = 3, char_vocab_size: int | None = None,
                 char_dim: int = 25, char_channels: int = 30) -> None:
        super().__init__()
        self.vocab_size = check_int(vocab_size, "vocab_size", minimum=1)
        check_int(embedding_dim, "embedding_dim", minimum=1)
        check_int(hidden, "hidden", minimum=1)
        self.layers = check_int(layers, "layers", minimum=1)
        check_probability(dropout, "dropout", open_high=True)
        if kind not in ENCODERS:
            raise ValueError(f"kind: expected one of {', '.join(ENCODERS)}; got {kind!r}")
        if check_int(kernel_size, "kernel_size", minimum=1) % 2 == 0:
            raise ValueError(f"kernel_size: expected an odd width (same-length convolution); got {kernel_size}")
        self.kind = kind
        self.embed = nn.Embedding(vocab_size, embedding_dim)
        self.char_vocab_size = char_vocab_size
        width = embedding_dim
        if char_vocab_size is not None:
            check_int(char_vocab_size, "char_vocab_size", minimum=1)
            self.char_embed = nn.Embedding(char_vocab_size, check_int(char_dim, "char_dim", minimum=1), padding_idx=0)
            self.char_conv = nn.Conv1d(char_dim, check_int(char_channels, "char_channels", minimum=1), 3, padding=1)
            width += char_channels
        self.drop = nn.Dropout(dropout)
        if kind == "bilstm":
            self.rnn = nn.LSTM(width, hidden, num_layers=layers, batch_first=True, bidirectional=True,
                               dropout=dropout if layers > 1 else 0.0)
            self.out_dim = 2 * hidden
        else:
            self.convs = nn.ModuleList(
                nn.Conv1d(width if i == 0 else hidden, hidden, kernel_size, padding=kernel_size // 2)
                for i in range(layers)
            )
            self.out_dim = hidden

    def _chars(self, chars: Tensor, words: Tensor) -> Tensor:
        b, t = words.shape
        if chars.dim() != 3 or chars.shape[:2] != (b, t) or chars.dtype != torch.long:
            raise ValueError(f"chars: expected a ({b}, {t}, L) long tensor of character ids; "
                             f"got {tuple(chars.shape)} {chars.dtype}")
        assert self.char_vocab_size is not None
        if chars.numel() and (int(chars.min()) < 0 or int(chars.max()) >= self.char_vocab_size):
            raise ValueError(f"chars: expected ids in [0, {self.char_vocab_size}); "
                             f"got min {int(chars.min())}, max {int(chars.max())}")
        c = self.char_embed(chars.reshape(b * t, -1)).transpose(1, 2)  # (B*T, char_dim, L)
        h = self.char_conv(c)
        h = h.masked_fill((chars.reshape(b * t, 1, -1) == 0), float("-inf")).amax(-1)
        return torch.nan_to_num(h, neginf=0.0).reshape(b, t, -1)  # an all-padding word pools to 0

    def forward(self, words: Tensor, lengths: Tensor, chars: Tensor | None = None) -> Tensor:
        """Features ``(B, T, out_dim)``; rows at or beyond ``lengths`` are zero."""
        _check_batch(words, lengths, self.vocab_size)
        if (chars is None) != (self.char_vocab_size is None):
            raise ValueError("chars: expected character ids exactly when the encoder was built with "
                             f"char_vocab_size (char_vocab_size={self.char_vocab_size}, chars "
                             f"{'missing' if chars is None else 'given'})")
        b, t = words.shape
        x = self.embed(words)
        if chars is not None:
            x = torch.cat([x, self._chars(chars, words)], dim=-1)
        x = self.drop(x)
        mask = (torch.arange(t, device=words.device) < lengths[:, None]).unsqueeze(-1)
        if b == 0:
            return x.new_zeros(0, t, self.out_dim)
        if self.kind == "bilstm":
            packed = pack_padded_sequence(x, lengths.cpu(), batch_first=True, enforce_sorted=False)
            h, _ = self.rnn(packed)
            out, _ = pad_packed_sequence(h, batch_first=True, total_length=t)
            return self.drop(out)
        h = x.masked_fill(~mask, 0.0).transpose(1, 2)
        m = mask.transpose(1, 2)
        for conv in self.convs:
            h = torch.relu(conv(h)).masked_fill(~m, 0.0)
            h = self.drop(h)
        return h.transpose(1, 2)
