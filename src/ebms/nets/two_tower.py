r"""Two-tower cloze network: a left-to-right and a right-to-left causal encoder.

For a sentence :math:`x = (x_1, \dots, x_l)` (token ids ``>= 1``; id 0 is the boundary
``<s>``/``</s>``) the left tower reads ``<s> x_1 .. x_l`` and the right tower reads
``</s> x_l .. x_1``, each causally, and

.. math::  q(x_t \mid x_{\setminus t}) = \operatorname{softmax}\big(W\,[\overrightarrow h_{t-1};
           \overleftarrow h_{t+1}] + b\big)_{x_t},

where :math:`\overrightarrow h_{t-1}` is the left tower's state after ``<s> x_1 .. x_{t-1}``
(:math:`\overrightarrow h_0` after ``<s>`` alone) and :math:`\overleftarrow h_{t+1}` the right
tower's state after ``</s> x_l .. x_{t+1}`` (:math:`\overleftarrow h_{l+1}` after ``</s>``
alone). Neither state has read :math:`x_t`, so :math:`q(\cdot \mid x_{\setminus t})` is a proper
cloze law for every position at once, from one pass of each tower. The boundary id 0 is never a
token inside a sentence, so its probability is 0 (``log q = -inf`` in column 0).

This is the noise model of Electric (Clark, Luong, Le & Manning, 2020, "Pre-training transformers
as energy-based cloze models", EMNLP; monograph §3, Eq. 3.18), trained by maximum likelihood
jointly with the energy model (:class:`ebms.objectives.ElectricNCE`).

Towers: ``kind="transformer"``: pre-LN causal Transformer blocks (GELU feed-forward of width
``4 dim``, fixed sinusoidal positions, so any length works); ``kind="lstm"``: a unidirectional
LSTM. Padding lies after each sentence in both reading orders, so causal reading makes the
result at real positions independent of the padding.

Shapes: ``x`` :class:`~ebms.sequences.Sequences` ``(B, T)``; :meth:`TwoTowerCloze.log_probs`
``(B, T, V)``. Cost: two causal passes over ``T + 1`` inputs, ``O(N T d (d + T))`` for the
Transformer (``O(N T d^2)`` for the LSTM), plus the ``O(B T d V)`` output layer.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn

from ebms._checks import check_bool_mask, check_int, check_probability, check_shape, check_tensor
from ebms.sequences import Sequences

__all__ = ["TwoTowerCloze"]

KINDS = ("transformer", "lstm")


def _check_sentences(x: object, vocab_size: int, name: str = "x") -> Sequences:
    """``x`` as Sequences of token ids in ``[1, vocab_size)`` at real positions, padding set to 0."""
    x = Sequences.coerce(x, name=name, pairs=False, expected="Sequences of token ids")
    mask = x.check_vocabulary(vocab_size, name, boundary=0).mask()
    return Sequences(x.tokens.masked_fill(~mask, 0), x.lengths, validate=False)


def _sinusoids(n: int, d: int, device: torch.device) -> Tensor:
    """``(n, d)`` fixed positions: ``sin(t / 10000^(2i/d))`` in even columns, ``cos`` in odd ones."""
    t = torch.arange(n, dtype=torch.float32, device=device).unsqueeze(1)
    freq = torch.exp(-math.log(10000.0) * torch.arange(0, d, 2, dtype=torch.float32, device=device) / d)
    table = torch.zeros(n, d, device=device)
    table[:, 0::2] = torch.sin(t * freq)
    table[:, 1::2] = torch.cos(t * freq)[:, : d // 2]
    return table


class _Tower(nn.Module):
    """One causal encoder: ``(B, S)`` ids -> ``(B, S, dim)`` states, state ``s`` having read ``0..s``."""

    def __init__(self, vocab_size: int, dim: int, layers: int, heads: int, dropout: float, kind: str) -> None:
        super().__init__()
        self.kind = kind
        self.embedding = nn.Embedding(vocab_size, dim)
        self.drop = nn.Dropout(dropout)
        if kind == "transformer":
            block = nn.TransformerEncoderLayer(dim, heads, 4 * dim, dropout, activation="gelu",
                                               batch_first=True, norm_first=True)
            self.encoder: nn.Module = nn.TransformerEncoder(block, layers, enable_nested_tensor=False)
            self.ln: nn.Module = nn.LayerNorm(dim)
        else:
            self.encoder = nn.LSTM(dim, dim, layers, batch_first=True, dropout=dropout if layers > 1 else 0.0)
            self.ln = nn.Identity()

    def forward(self, inputs: Tensor) -> Tensor:
        S = inputs.shape[1]
        e = self.embedding(inputs)
        if self.kind == "lstm":
            out, _ = self.encoder(self.drop(e))
            return self.drop(out)
        e = self.drop(e + _sinusoids(S, e.shape[-1], e.device).to(e.dtype))
        causal = torch.ones(S, S, dtype=torch.bool, device=inputs.device).triu(1)  # True = may not attend
        return self.ln(self.encoder(e, mask=causal, is_causal=True))


class TwoTowerCloze(nn.Module):
    r"""Cloze law :math:`q(x_t \mid x_{\setminus t})` from two causal towers (see the module docstring).

    Args:
        vocab_size: ``V >= 2`` ids, the boundary id 0 included.
        dim: width ``d`` of each tower (a multiple of ``heads`` for the Transformer).
        layers: blocks (Transformer) or stacked layers (LSTM) per tower.
        heads: attention heads (Transformer only).
        dropout: dropout in ``[0, 1)`` on embeddings, attention and residual branches (training only).
        kind: ``"transformer"`` or ``"lstm"``.

    Example:
        >>> q = TwoTowerCloze(6, dim=8, layers=1, heads=2)
        >>> lp = q.log_probs(Sequences.from_lists([[1, 2, 3], [4]]))
        >>> lp.shape
        torch.Size([2, 3, 6])
    """

    def __init__(self, vocab_size: int, *, dim: int = 64, layers: int = 2, heads: int = 2, dropout: float = 0.0,
                 kind: str = "transformer") -> None:
        super().__init__()
        self.vocab_size = check_int(vocab_size, "vocab_size", minimum=2)
        self.dim = check_int(dim, "dim", minimum=1)
        self.layers = check_int(layers, "layers", minimum=1)
        self.heads = check_int(heads, "heads", minimum=1)
        self.dropout = check_probability(dropout, "dropout", open_high=True)
        if kind not in KINDS:
            raise ValueError(f"kind: expected one of {', '.join(KINDS)}; got {kind!r}")
        if kind == "transformer" and dim % heads:
            raise ValueError(f"heads: expected a divisor of dim={dim}; got {heads}")
        self.kind = kind
        self.left = _Tower(vocab_size, dim, layers, heads, self.dropout, kind)
        self.right = _Tower(vocab_size, dim, layers, heads, self.dropout, kind)
        self.output = nn.Linear(2 * dim, vocab_size)

    def log_probs(self, x: Sequences) -> Tensor:
        r"""``(B, T, V)`` :math:`\log q(v \mid x_{\setminus t})` at every real position ``t``.

        Each real row is a normalised law over the tokens ``1 .. V-1`` (column 0, the boundary,
        is ``-inf``); rows at padding positions ``t >= lengths[b]`` are all 0 (no law; mask them
        with ``x.mask()``). Differentiable in the parameters.

        Raises:
            TypeError: ``x`` is not :class:`~ebms.sequences.Sequences`.
            ValueError: a real token outside ``[1, V-1]``.
        """
        x = _check_sentences(x, self.vocab_size)
        tokens, lengths, mask = x.tokens, x.lengths, x.mask()
        B, T = tokens.shape
        start = tokens.new_zeros(B, 1)
        ar = torch.arange(T, device=tokens.device).expand(B, T)
        # row b read right to left: position i holds x[L-1-i] for i < L, padding stays in place
        flip = torch.where(mask, lengths.unsqueeze(1) - 1 - ar, ar)
        left = self.left(torch.cat([start, tokens], 1))[:, :T]              # read x_0 .. x_{i-1}
        right_all = self.right(torch.cat([start, tokens.gather(1, flip)], 1))  # (B, T + 1, d)
        right = right_all.gather(1, flip.unsqueeze(-1).expand(B, T, right_all.shape[-1]))  # read x_{L-1} .. x_{i+1}
        logits = self.output(torch.cat([left, right], -1))
        tok = torch.log_softmax(logits[..., 1:], -1)
        out = torch.cat([torch.full_like(tok[..., :1], -math.inf), tok], -1)
        return out.masked_fill(~mask.unsqueeze(-1), 0.0)

    def sample_replacements(self, x: Sequences, positions: Tensor, *, generator: torch.Generator | None = None,
                            log_probs: Tensor | None = None) -> Tensor:
        r"""``(B, T)`` long: :math:`\hat x_t \sim q(\cdot \mid x_{\setminus t})` where ``positions``, ``x_t`` elsewhere.

        Every draw conditions on the clean sentence ``x`` (not on the other replacements), as in
        Electric's noise. No gradient. Cost: one :meth:`log_probs` (skipped when ``log_probs``,
        the ``(B, T, V)`` output of :meth:`log_probs` on ``x``, is given) and ``O(N V)`` for ``N``
        draws.

        Args:
            x: clean sentences.
            positions: ``(B, T)`` bool, True where a token is replaced (real positions only).
            generator: random source of the draws.
            log_probs: precomputed :meth:`log_probs` of ``x`` (detached here).

        Raises:
            TypeError: a non-bool ``positions``.
            ValueError: ``positions`` of the wrong shape or True at padding; ``log_probs`` of the
                wrong shape.
        """
        x = _check_sentences(x, self.vocab_size)
        B, T = x.tokens.shape
        check_bool_mask(positions, (B, T), "positions")
        if bool((positions & ~x.mask()).any()):
            raise ValueError("positions: expected True only at real tokens (t < lengths[b]); got True at padding")
        with torch.no_grad():
            if log_probs is None:
                log_probs = self.log_probs(x)
            else:
                check_tensor(log_probs, "log_probs", floating=True)
                check_shape(log_probs, (B, T, self.vocab_size), "log_probs")
            out = x.tokens.clone()
            if bool(positions.any()):
                probs = log_probs.detach()[positions].exp()
                out[positions] = torch.multinomial(probs, 1, generator=generator).squeeze(1)
        return out

    def extra_repr(self) -> str:
        return f"vocab_size={self.vocab_size}, dim={self.dim}, layers={self.layers}, kind={self.kind!r}"
