r"""A text classifier with a residual energy head, and the masked-completion noise LM that trains it.

Calibrated classification by a residual joint EBM (monograph §5.5; He, McCann, Xiong &
Hosseini-Asl 2021, *Joint energy-based model training for better calibrated natural language
understanding models*, EACL) needs two models:

* :class:`ResidualTextClassifier`: an encoder :math:`h = \mathrm{enc}(x)` (embeddings, then a
  BiLSTM or a CNN, :class:`~ebms.nets.SequenceEncoder`, max-pooled over the real positions), the
  classification head :math:`f_{CLS}(h) = W h + b \in \mathbb R^K` and a scalar head
  :math:`g_S(h) = w^\top h + c`; ``joint(x)`` returns both from one encoder pass, the input of
  :class:`~ebms.objectives.ResidualJointNCE`.
* :class:`MaskedCompletionLM`: the noise law :math:`p_N`. The source fine-tunes GPT-2 to complete
  a sentence whose tokens were masked with ratio :math:`M` (:math:`\mathcal L_{MLM} = -\mathbb
  E\log p_N(x \mid x_m)`), because noise from a plain LM is too easy to tell from data; a noise
  sample masks a training sentence with the same ratio and lets :math:`p_N` fill it in. Here
  :math:`p_N(x \mid x_m) = \prod_{t \in m} p_N(x_t \mid x_m)` is a bidirectional LSTM over the
  masked sentence (a ``[MASK]`` id in place of each masked token) with a softmax at each position,
  trained by that objective, and the masked tokens are drawn **independently** given
  :math:`x_m` in one pass: a factorised completion, not GPT-2's left-to-right one.

Token ids: 0 is padding (never predicted: its log-probability is :math:`-\infty`), the tokens are
``1 .. V-1``; the mask id is ``V`` (an embedding row of :class:`MaskedCompletionLM` only).
Masking takes exactly :math:`m = \max(1, \lfloor M l + 1/2\rfloor)` of the :math:`l` tokens of a
sentence (none of an empty one), uniformly without replacement.

Shapes: sentences :class:`~ebms.sequences.Sequences` ``(B, T)``; logits ``(B, K)``; scalar
energies ``(B,)``; :meth:`MaskedCompletionLM.log_probs` ``(B, T, V)``. Cost: one encoder pass,
:math:`O(B T H^2)` for the BiLSTM.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

from ebms._checks import check_int, check_probability
from ebms.nets.sequence import SequenceEncoder
from ebms.sequences import Sequences

__all__ = ["MaskedCompletionLM", "ResidualTextClassifier", "mask_positions"]


def _sentences(x: object, vocab_size: int, name: str = "x") -> Sequences:
    s = Sequences.coerce(x, name=name)
    real = s.mask()
    if s.tokens.numel() and bool(((s.tokens < 1) | (s.tokens >= vocab_size))[real].any()):
        bad = s.tokens[real]
        raise ValueError(f"{name}: expected token ids in [1, {vocab_size - 1}] at real positions; got values in "
                         f"[{int(bad.min())}, {int(bad.max())}]")
    return s


def mask_positions(x: Sequences, ratio: float, *, generator: torch.Generator | None = None) -> Tensor:
    r"""``(B, T)`` bool: :math:`\max(1, \lfloor M l_b + 1/2\rfloor)` real positions of each row, uniformly
    without replacement (none in an empty row).

    Args:
        x: sentences.
        ratio: the mask ratio :math:`M \in (0, 1]`.
        generator: random source.
    """
    ratio = check_probability(ratio, "ratio", open_low=True)
    B, T = x.tokens.shape
    real = x.mask()
    keys = torch.rand(B, T, generator=generator, device=x.tokens.device if generator is None else "cpu")
    keys = keys.to(x.tokens.device).masked_fill(~real, math.inf)
    rank = keys.argsort(dim=1).argsort(dim=1)
    m = torch.floor(ratio * x.lengths.double() + 0.5).long().clamp(min=1)
    m = torch.where(x.lengths > 0, torch.minimum(m, x.lengths), torch.zeros_like(m))
    return (rank < m[:, None]) & real


class ResidualTextClassifier(nn.Module):
    r"""Sentence classifier :math:`f_{CLS}(\mathrm{enc}(x))` with a scalar energy head :math:`g_S(\mathrm{enc}(x))`.

    Args:
        vocab_size: word ids ``0 .. V-1`` (0 padding).
        n_classes: ``K >= 2``.
        embedding_dim, hidden, kind, layers, dropout: of the :class:`~ebms.nets.SequenceEncoder`
            (``kind`` ``"bilstm"`` or ``"cnn"``).

    ``joint(x) -> (logits (B, K), scalar (B,))``; ``logits(x)``; calling the module gives the logits.
    An empty sentence encodes to zeros.
    """

    def __init__(self, vocab_size: int, n_classes: int, *, embedding_dim: int = 64, hidden: int = 64,
                 kind: str = "cnn", layers: int = 1, dropout: float = 0.0) -> None:
        super().__init__()
        self.vocab_size = check_int(vocab_size, "vocab_size", minimum=2)
        self.n_classes = check_int(n_classes, "n_classes", minimum=2)
        self.encoder = SequenceEncoder(vocab_size, embedding_dim, hidden, kind=kind, layers=layers, dropout=dropout)
        self.head = nn.Linear(self.encoder.out_dim, n_classes)
        self.scalar_head = nn.Linear(self.encoder.out_dim, 1)

    def encode(self, x: Sequences) -> Tensor:
        """``(B, H)``: the encoder's features max-pooled over each sentence's real positions."""
        s = _sentences(x, self.vocab_size)
        B = s.batch_size
        nonempty = s.lengths > 0
        out = s.tokens.new_zeros(B, self.encoder.out_dim, dtype=self.head.weight.dtype)
        if bool(nonempty.any()):
            sub = s[nonempty] if not bool(nonempty.all()) else s
            h = self.encoder(sub.tokens, sub.lengths)
            h = h.masked_fill(~sub.mask().unsqueeze(-1), -math.inf).amax(dim=1)
            out = out.index_put((nonempty.nonzero().squeeze(1),), h) if not bool(nonempty.all()) else h
        return out

    def joint(self, x: Sequences) -> tuple[Tensor, Tensor]:
        """``(logits (B, K), scalar energy (B,))`` from one encoder pass."""
        h = self.encode(x)
        return self.head(h), self.scalar_head(h).squeeze(1)

    def logits(self, x: Sequences) -> Tensor:
        """``(B, K)`` class logits."""
        return self.head(self.encode(x))

    def forward(self, x: Sequences) -> Tensor:
        return self.logits(x)


class MaskedCompletionLM(nn.Module):
    r"""Noise law :math:`p_N(x_t \mid x_m)` of a masked sentence, factorised over the masked positions.

    Args:
        vocab_size: ``V >= 2`` ids (0 padding, tokens ``1 .. V-1``); the mask id is ``V``.
        dim: embedding width and LSTM hidden size per direction.
        layers: BiLSTM layers.
        mask_ratio: :math:`M \in (0, 1]`, used by :meth:`loss` and :meth:`complete`.
        dropout: on embeddings and outputs (training only).

    Example:
        >>> lm = MaskedCompletionLM(5, dim=4)
        >>> x = Sequences.from_lists([[1, 2, 3, 4], [2]])
        >>> lm.complete(x, n=3, generator=torch.Generator().manual_seed(0)).batch_size
        6
    """

    def __init__(self, vocab_size: int, *, dim: int = 64, layers: int = 1, mask_ratio: float = 0.4,
                 dropout: float = 0.0) -> None:
        super().__init__()
        self.vocab_size = check_int(vocab_size, "vocab_size", minimum=2)
        self.mask_ratio = check_probability(mask_ratio, "mask_ratio", open_low=True)
        check_int(dim, "dim", minimum=1)
        check_int(layers, "layers", minimum=1)
        self.mask_id = vocab_size
        self.embed = nn.Embedding(vocab_size + 1, dim, padding_idx=0)
        self.rnn = nn.LSTM(dim, dim, num_layers=layers, batch_first=True, bidirectional=True)
        self.drop = nn.Dropout(check_probability(dropout, "dropout", open_high=True))
        self.output = nn.Linear(2 * dim, vocab_size)

    def _states(self, masked: Sequences) -> Tensor:
        """``(B, T, 2 dim)``: the BiLSTM's states over the masked sentences."""
        s = Sequences.coerce(masked, name="masked")
        T = s.tokens.shape[1]
        real = s.mask()
        if s.tokens.numel() and bool(((s.tokens < 1) | (s.tokens > self.vocab_size))[real].any()):
            raise ValueError(f"masked: expected ids in [1, {self.vocab_size}] (the mask id is {self.vocab_size}) at "
                             f"real positions")
        e = self.drop(self.embed(s.tokens.masked_fill(~real, 0)))
        lengths = s.lengths.clamp(min=1).cpu()
        h, _ = self.rnn(pack_padded_sequence(e, lengths, batch_first=True, enforce_sorted=False))
        h, _ = pad_packed_sequence(h, batch_first=True, total_length=T)
        return self.drop(h)

    def _log_softmax(self, h: Tensor) -> Tensor:
        tok = torch.log_softmax(self.output(h)[..., 1:], -1)
        return torch.cat([torch.full_like(tok[..., :1], -math.inf), tok], -1)

    def log_probs(self, masked: Sequences) -> Tensor:
        r"""``(B, T, V)`` :math:`\log p_N(v \mid x_m)` at every position of the masked sentences ``masked``
        (tokens ``1 .. V-1`` or the mask id ``V``); column 0 is :math:`-\infty`, padding rows are 0."""
        s = Sequences.coerce(masked, name="masked")
        return self._log_softmax(self._states(s)).masked_fill(~s.mask().unsqueeze(-1), 0.0)

    def _masked(self, x: Sequences, generator: torch.Generator | None) -> tuple[Sequences, Tensor]:
        pos = mask_positions(x, self.mask_ratio, generator=generator)
        return x.with_tokens(x.tokens.masked_fill(pos, self.mask_id)), pos

    def loss(self, x: Sequences, *, generator: torch.Generator | None = None) -> Tensor:
        r""":math:`\mathcal L_{MLM}`: mean over the masked positions of :math:`-\log p_N(x_t \mid x_m)`, one
        mask of ratio :math:`M` per sentence (0-d; 0 for a batch of empty sentences)."""
        x = _sentences(x, self.vocab_size)
        masked, pos = self._masked(x, generator)
        if not bool(pos.any()):
            return self.output.weight.sum() * 0.0
        lp = self._log_softmax(self._states(masked)[pos])  # the output layer at the masked positions only
        return -lp.gather(1, x.tokens[pos].unsqueeze(1)).mean()

    @torch.no_grad()
    def complete(self, x: Sequences, *, n: int = 1, generator: torch.Generator | None = None) -> Sequences:
        r"""``n B`` noise sentences, row ``b``'s at ``b n .. b n + n - 1``: each a fresh mask of ratio :math:`M`
        of sentence ``b`` with the masked tokens drawn independently from :math:`p_N(\cdot \mid x_m)`
        (lengths kept). No gradient."""
        x = _sentences(x, self.vocab_size)
        check_int(n, "n", minimum=1)
        rep = Sequences(x.tokens.repeat_interleave(n, 0), x.lengths.repeat_interleave(n), validate=False)
        masked, pos = self._masked(rep, generator)
        out = rep.tokens.clone()
        if bool(pos.any()):
            probs = self._log_softmax(self._states(masked)[pos]).exp()
            draws = torch.multinomial(probs, 1, generator=generator).squeeze(1)
            out[pos] = draws.to(out.device)
        return rep.with_tokens(out)

    def extra_repr(self) -> str:
        return f"vocab_size={self.vocab_size}, mask_ratio={self.mask_ratio:g}"
