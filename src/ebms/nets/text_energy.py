r"""Sequence-level energy networks for residual EBMs over text.

A residual energy :math:`E_\theta(c, x)` scores a continuation ``x`` of a prefix ``c`` as one
whole sequence (Deng, Bakhtin, Ott, Szlam & Ranzato 2020, *Residual energy-based models for text
generation*, ICLR). The network reads ``<s> c x`` (the boundary id 0, then the prefix, then the
continuation: ``S_b = 1 + L_c + L_x`` real positions), encodes it, mean-pools the top hidden
states over the real positions and projects the mean to a scalar:

.. math::  E_\theta(c, x) = w^\top \frac{1}{S_b}\sum_{s < S_b} h_s + b .

Encoders (``kind``):

* ``"bilstm"``: embeddings and a packed bidirectional LSTM (padding never reaches a real position);
* ``"transformer"``: a bidirectional pre-LN Transformer (the paper's BIT energies, a BERT/RoBERTa
  body with a mean-pooled scalar head), padded keys masked out;
* ``"causal"``: a causal pre-LN Transformer (the paper's UNIT energy, the base LM's architecture),
  which :meth:`TextEnergy.from_lm` initialises from a trained
  :class:`~ebms.models.TransformerLM` (same parameter names: ``embedding``,
  ``position_embedding``, ``layers.i.{ln1, qkv, out, ln2, ff1, ff2}``, ``ln``).

The head starts at zero, so a fresh energy is 0 everywhere and the joint model starts as the
base LM. Lower energy = more likely. Padding beyond ``lengths`` never changes the energy.

Shapes: ``B`` rows, prefix width ``T_c``, continuation width ``T_x``, ``S = 1 + T_c + T_x``,
model width ``d``. Cost per batch: BiLSTM :math:`O(B S d^2)` sequential in ``S``; Transformer
:math:`O(N_{layers} B (S d^2 + S^2 d))`.
"""

from __future__ import annotations

from typing import Any, cast

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ebms._checks import check_int, check_probability
from ebms.nets.sequence import SequenceEncoder
from ebms.sequences import Sequences

__all__ = ["KINDS", "PreLNBlock", "TextEnergy"]

#: encoder kinds :class:`TextEnergy` accepts.
KINDS = ("bilstm", "transformer", "causal")


class PreLNBlock(nn.Module):
    """One pre-LN Transformer block: self-attention and a GELU feed-forward layer, each residual.

    The block of :class:`TextEnergy` and of :class:`~ebms.models.TransformerLM` (one parameter
    layout, which :meth:`TextEnergy.from_lm` copies). ``forward(x (B, S, d), mask, past=None) ->
    (x, keys, values)``: ``mask`` bool ``(B, 1, S, P + S)``, True where attention is allowed, or
    ``None`` for causal attention; ``past`` the ``(keys, values)`` ``(B, heads, P, d / heads)`` of
    earlier positions (a cache), put before this call's, which come back for the next call.
    """

    def __init__(self, d: int, heads: int, ff: int, dropout: float) -> None:
        super().__init__()
        self.heads, self.p = heads, dropout
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.qkv, self.out = nn.Linear(d, 3 * d), nn.Linear(d, d)
        self.ff1, self.ff2 = nn.Linear(d, ff), nn.Linear(ff, d)
        self.drop = nn.Dropout(dropout)

    def forward(self, x: Tensor, mask: Tensor | None, past: tuple[Tensor, Tensor] | None = None
                ) -> tuple[Tensor, Tensor, Tensor]:
        B, S, d = x.shape
        q, k, v = self.qkv(self.ln1(x)).view(B, S, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        if past is not None:
            k, v = torch.cat([past[0], k], 2), torch.cat([past[1], v], 2)
        a = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=self.p if self.training else 0.0,
                                           is_causal=mask is None)
        x = x + self.drop(self.out(a.transpose(1, 2).reshape(B, S, d)))
        x = x + self.drop(self.ff2(self.drop(F.gelu(self.ff1(self.ln2(x))))))
        return x, k, v


def _check_pair(prefix: Any, x: Any, vocab_size: int) -> None:
    prefix, x = Sequences.coerce(prefix, name="prefix", pairs=False), Sequences.coerce(x, name="x", pairs=False)
    if prefix.batch_size != x.batch_size:
        raise ValueError(f"prefix: expected one prefix per continuation ({x.batch_size} rows); got {prefix.batch_size}")
    for name, s in (("prefix", prefix), ("x", x)):
        s.check_vocabulary(vocab_size, name, boundary=0, where="row")


def _join(prefix: Sequences, x: Sequences) -> tuple[Tensor, Tensor]:
    """``<s> c x`` as ``(tokens (B, S), lengths (B,))`` with padding 0; ``S = 1 + max(L_c + L_x)``."""
    pl, xl = prefix.lengths.to(x.device), x.lengths
    width = int((pl + xl).max()) if x.batch_size else 0
    ctok = F.pad(prefix.tokens.to(x.device).masked_fill(~prefix.mask().to(x.device), 0), (0, width + 1))
    xtok = F.pad(x.tokens.masked_fill(~x.mask(), 0), (0, width + 1))
    idx = torch.arange(width, device=x.device)
    P = pl.unsqueeze(1)
    inside = torch.where(idx < P, ctok.gather(1, idx.expand(len(pl), -1)), xtok.gather(1, (idx - P).clamp(min=0)))
    lengths = pl + xl
    inside = inside.masked_fill(idx >= lengths.unsqueeze(1), 0)
    return F.pad(inside, (1, 0)), lengths + 1


def _mean_over(h: Tensor, real: Tensor) -> Tensor:
    """The mean of the states ``h (B, S, d)`` over the real positions ``real (B, S)`` of each row: ``(B, d)``."""
    return h.masked_fill(~real.unsqueeze(-1), 0.0).sum(1) / real.sum(1, keepdim=True).to(h.dtype)


class TextEnergy(nn.Module):
    r"""Mean-pooled scalar energy :math:`E_\theta(c, x)` of ``<s> c x`` (see the module docstring).

    Args:
        vocab_size: ``V``, id 0 the boundary; tokens of ``c`` and ``x`` are in ``[1, V - 1]``.
        kind: ``"bilstm"``, ``"transformer"`` (bidirectional) or ``"causal"``.
        dim: model width ``d`` (BiLSTM: embedding width and hidden size per direction).
        layers: LSTM layers or Transformer blocks.
        heads: attention heads (Transformers; a divisor of ``dim``).
        dropout: dropout probability in ``[0, 1)`` (training mode only).
        ff: feed-forward width of the Transformer blocks (default ``4 * dim``).
        max_length: Transformers: the longest ``c x`` (positions ``0 .. max_length``).

    Call: ``energy(prefix, x) -> (B,)`` with ``prefix`` and ``x`` :class:`~ebms.sequences.Sequences`
    of ``B`` rows each (row ``b`` of ``x`` continues row ``b`` of ``prefix``; either may be empty).

    Example:
        >>> e = TextEnergy(6, kind="transformer", dim=8, layers=1, heads=2)
        >>> c, x = Sequences.from_lists([[1, 2], [3]]), Sequences.from_lists([[4], [5, 1]])
        >>> e(c, x).shape
        torch.Size([2])
    """

    def __init__(self, vocab_size: int, *, kind: str = "bilstm", dim: int = 64, layers: int = 2, heads: int = 4,
                 dropout: float = 0.0, ff: int | None = None, max_length: int = 256) -> None:
        super().__init__()
        self.vocab_size = check_int(vocab_size, "vocab_size", minimum=2)
        if kind not in KINDS:
            raise ValueError(f"kind: expected one of {', '.join(KINDS)}; got {kind!r}")
        self.kind = kind
        self.dim = check_int(dim, "dim", minimum=1)
        self.num_layers = check_int(layers, "layers", minimum=1)
        self.dropout = check_probability(dropout, "dropout", open_high=True)
        self.max_length = check_int(max_length, "max_length", minimum=1)
        if kind == "bilstm":
            self.encoder = SequenceEncoder(vocab_size, dim, dim, kind="bilstm", layers=layers, dropout=dropout)
            width = self.encoder.out_dim
        else:
            self.heads = check_int(heads, "heads", minimum=1)
            if dim % heads:
                raise ValueError(f"heads: expected a divisor of dim={dim}; got {heads}")
            ff = 4 * dim if ff is None else check_int(ff, "ff", minimum=1)
            self.embedding = nn.Embedding(vocab_size, dim)
            self.position_embedding = nn.Embedding(max_length + 1, dim)
            self.layers = nn.ModuleList(PreLNBlock(dim, heads, ff, self.dropout) for _ in range(layers))
            self.ln = nn.LayerNorm(dim)
            self.drop = nn.Dropout(self.dropout)
            for m in self.modules():
                if isinstance(m, (nn.Linear, nn.Embedding)):
                    nn.init.normal_(m.weight, std=0.02)
                if isinstance(m, nn.Linear) and m.bias is not None:
                    nn.init.zeros_(m.bias)
            width = dim
        self.head = nn.Linear(width, 1)
        nn.init.zeros_(self.head.weight)
        nn.init.zeros_(self.head.bias)

    @classmethod
    def from_lm(cls, lm: Any, *, dropout: float | None = None) -> TextEnergy:
        """A ``"causal"`` energy with a Transformer LM's architecture and weights (UNIT analogue).

        Copies every tensor whose name and shape match (token and position embeddings, every
        block, the final layer norm; a sinusoidal LM's position table becomes the learned
        position embedding). The LM's output layer is not used; the scalar head starts at zero.

        Args:
            lm: a :class:`~ebms.models.TransformerLM` (read through its attributes ``vocab_size``,
                ``d_model``, ``num_heads``, ``num_layers``, ``max_length``, ``layers``, ``dropout``,
                ``sinusoids``).
            dropout: the energy's dropout (default the LM's).
        """
        need = ("vocab_size", "d_model", "num_heads", "num_layers", "max_length", "layers", "dropout", "sinusoids")
        missing = [a for a in need if not hasattr(lm, a)]
        if missing or not isinstance(cast(Any, lm), nn.Module):
            raise TypeError(f"lm: expected a TransformerLM (attributes {', '.join(need)}); got {type(lm).__name__}"
                            + (f" without {', '.join(missing)}" if missing else ""))
        ff = int(lm.layers[0].ff1.out_features)
        energy = cls(int(lm.vocab_size), kind="causal", dim=int(lm.d_model), layers=int(lm.num_layers),
                     heads=int(lm.num_heads), ff=ff, max_length=int(lm.max_length),
                     dropout=float(lm.dropout) if dropout is None else dropout)
        source = dict(lm.state_dict())
        if "position_embedding.weight" not in source and isinstance(lm.sinusoids, Tensor):
            source["position_embedding.weight"] = lm.sinusoids
        own = energy.state_dict()
        copied = {k: v for k, v in source.items() if k in own and own[k].shape == v.shape and not k.startswith("head.")}
        energy.load_state_dict(copied, strict=False)
        return energy

    def _encode(self, tokens: Tensor, lengths: Tensor) -> Tensor:
        if self.kind == "bilstm":
            return self.encoder(tokens, lengths)
        B, S = tokens.shape
        if S - 1 > self.max_length:
            raise ValueError(f"x: <s> c x needs positions 0..{S - 1}; this energy has max_length={self.max_length}")
        pos = torch.arange(S, device=tokens.device)
        keys = pos < lengths.unsqueeze(1)  # (B, S)
        mask = keys[:, None, None, :]
        if self.kind == "causal":
            mask = mask & (pos.unsqueeze(1) >= pos).view(1, 1, S, S)
        h = self.drop(self.embedding(tokens) + self.position_embedding(pos))
        for block in self.layers:
            h = block(h, mask)[0]
        return self.ln(h)

    def forward(self, prefix: Sequences, x: Sequences) -> Tensor:
        """Energies ``(B,)`` of the continuations ``x`` of ``prefix`` (one host sync for the checks).

        Raises:
            TypeError: ``prefix`` or ``x`` not :class:`~ebms.sequences.Sequences`.
            ValueError: different batch sizes, token ids outside ``[1, V - 1]``, too long for a
                Transformer's positions.
        """
        _check_pair(prefix, x, self.vocab_size)
        dev = self.head.weight.device
        x = x.to(dev)
        if x.batch_size == 0:
            return self.head.weight.new_zeros(0)
        tokens, lengths = _join(prefix.to(dev), x)
        h = self._encode(tokens, lengths)  # (B, S, width)
        real = torch.arange(tokens.shape[1], device=dev) < lengths.unsqueeze(1)
        return self.head(_mean_over(h, real)).squeeze(-1)

    def extra_repr(self) -> str:
        return f"vocab_size={self.vocab_size}, kind={self.kind!r}, dim={self.dim}, layers={self.num_layers}"
