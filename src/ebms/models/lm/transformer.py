r"""Decoder-only Transformer language model (word or character level).

.. math::  x^0_t = E[y_{t-1}] + P_{t-1}, \quad
           x^{l} = x^{l-1} + \mathrm{drop}(\mathrm{Attn}(\mathrm{LN}(x^{l-1}))), \quad
           x^{l} \mathrel{+}= \mathrm{drop}(\mathrm{FF}(\mathrm{LN}(x^{l}))), \quad
           p(y_t \mid y_{<t}) = \mathrm{softmax}(W\, \mathrm{LN}(x^{N}_t) + b),

with causal multi-head self-attention (position ``t`` attends to ``0..t``), a GELU feed-forward
layer, pre-layer-norm blocks (:class:`~ebms.nets.text_energy.PreLNBlock`; Vaswani et al. 2017,
*Attention is all you need*; Radford et al. 2019, *Language models are unsupervised multitask
learners*), learned or sinusoidal positions ``P`` for positions ``0 .. max_length`` and
``y_0 = <s>`` (id 0). ``</s>`` (id 0) is the last outcome (see :mod:`ebms.models.lm`). Dropout on
the embeddings, the attention weights and each residual branch, in training mode only.
``tie_weights`` uses ``E`` as ``W``.

Incremental decoding: ``forward(inputs, state)`` continues from a :class:`KVCache` (each layer's
keys and values of the inputs so far, a validity mask for ragged prefixes, each row's next
position). A sampled token costs ``O(N (d^2 + t d))`` at position ``t`` instead of a full
recomputation's ``O(N t d^2)``; the cache holds ``2 N B t d`` numbers and grows by one copy per
step (``O(t)`` memory traffic). Sentences (plus ``<s>``) must fit the ``max_length + 1`` positions;
running text in chunks of at most ``max_length + 1`` inputs, each from ``state=None`` (or one
carried cache while the positions last).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import Tensor, nn

from ebms._checks import check_bool, check_int, check_probability
from ebms.models.lm._base import AutoregressiveLM, LMState
from ebms.nets.text_energy import PreLNBlock

__all__ = ["KVCache", "TransformerLM"]

POSITIONS = ("learned", "sinusoidal")


@dataclass(frozen=True)
class KVCache(LMState):
    """Keys and values of every layer, each ``(B, num_heads, P, d_model / num_heads)``; ``valid``
    ``(B, P)`` bool marks the slots holding real inputs; ``positions`` ``(B,)`` the next input's
    position; ``horizon`` (an int) bounds ``max(positions)`` from above without a host sync."""

    keys: tuple[Tensor, ...]
    values: tuple[Tensor, ...]
    valid: Tensor
    positions: Tensor
    horizon: int

    @property
    def batch_size(self) -> int:
        return int(self.positions.shape[0])

    def detach(self) -> KVCache:
        return KVCache(tuple(k.detach() for k in self.keys), tuple(v.detach() for v in self.values),
                       self.valid, self.positions, self.horizon)

    def select(self, index: Tensor) -> KVCache:
        return KVCache(tuple(k[index] for k in self.keys), tuple(v[index] for v in self.values),
                       self.valid[index], self.positions[index], self.horizon)


def _sinusoids(n: int, d: int) -> Tensor:
    """``(n, d)``: ``sin(t / 10000^(2i/d))`` in even columns, ``cos`` in odd ones."""
    t = torch.arange(n, dtype=torch.float64).unsqueeze(1)
    freq = torch.exp(-math.log(10000.0) * torch.arange(0, d, 2, dtype=torch.float64) / d)
    table = torch.zeros(n, d, dtype=torch.float64)
    table[:, 0::2] = torch.sin(t * freq)
    table[:, 1::2] = torch.cos(t * freq)[:, : d // 2]
    return table.float()


class TransformerLM(AutoregressiveLM):
    """Causal Transformer sentence LM over ids ``0 .. V-1`` (id 0 = ``<s>``/``</s>``; see the module
    docstring).

    Args:
        vocab_size: ``V >= 2`` (the boundary id included).
        d_model: model width ``d`` (a multiple of ``num_heads``).
        num_heads: attention heads.
        num_layers: decoder blocks ``N``.
        dim_feedforward: hidden width of the feed-forward layers.
        dropout: dropout probability in ``[0, 1)`` (training mode only).
        max_length: the longest sentence scored (positions ``0 .. max_length``, ``<s>`` included).
        positions: ``"learned"`` (an embedding per position) or ``"sinusoidal"`` (fixed).
        tie_weights: share the token embedding with the output layer.

    Initialisation: linear and embedding weights normal with std 0.02, biases 0.

    Example:
        >>> import torch
        >>> lm = TransformerLM(5, d_model=8, num_heads=2, num_layers=1, dim_feedforward=16, max_length=10).eval()
        >>> y = lm.sample(3, generator=torch.Generator().manual_seed(0), truncate=True)
        >>> lm.log_prob(y).shape
        torch.Size([3])
    """

    sinusoids: Tensor | None
    max_length: int

    def __init__(self, vocab_size: int, *, d_model: int = 256, num_heads: int = 4, num_layers: int = 4,
                 dim_feedforward: int = 1024, dropout: float = 0.0, max_length: int = 256,
                 positions: str = "learned", tie_weights: bool = False) -> None:
        super().__init__()
        self.vocab_size = check_int(vocab_size, "vocab_size", minimum=2)
        self.d_model = check_int(d_model, "d_model", minimum=1)
        self.num_heads = check_int(num_heads, "num_heads", minimum=1)
        if d_model % num_heads:
            raise ValueError(f"num_heads: expected a divisor of d_model={d_model}; got {num_heads}")
        self.num_layers = check_int(num_layers, "num_layers", minimum=1)
        check_int(dim_feedforward, "dim_feedforward", minimum=1)
        self.dropout = check_probability(dropout, "dropout", open_high=True)
        self.max_length = check_int(max_length, "max_length", minimum=1)
        if positions not in POSITIONS:
            raise ValueError(f"positions: expected one of {', '.join(POSITIONS)}; got {positions!r}")
        check_bool(tie_weights, "tie_weights")
        self.positions, self.tie_weights = positions, tie_weights
        self.embedding = nn.Embedding(vocab_size, d_model)
        self.position_embedding = nn.Embedding(max_length + 1, d_model) if positions == "learned" else None
        self.register_buffer("sinusoids", _sinusoids(max_length + 1, d_model) if positions == "sinusoidal" else None,
                             persistent=False)
        self.layers = nn.ModuleList(PreLNBlock(d_model, num_heads, dim_feedforward, self.dropout)
                                    for _ in range(num_layers))
        self.ln = nn.LayerNorm(d_model)
        self.drop = nn.Dropout(self.dropout)
        self.decoder = nn.Linear(d_model, vocab_size)
        for m in self.modules():
            if isinstance(m, (nn.Linear, nn.Embedding)):
                nn.init.normal_(m.weight, std=0.02)
            if isinstance(m, nn.Linear) and m.bias is not None:
                nn.init.zeros_(m.bias)
        if tie_weights:
            self.decoder.weight = self.embedding.weight

    def _position_vectors(self, pos: Tensor) -> Tensor:
        if self.position_embedding is not None:
            return self.position_embedding(pos)
        assert self.sinusoids is not None
        return self.sinusoids.to(self.embedding.weight.dtype)[pos]

    def forward(self, inputs: Tensor, state: LMState | None = None) -> tuple[Tensor, KVCache]:
        """Logits ``(B, S, V)`` after each of ``inputs (B, S)`` and the cache after the last input
        (``state``: the :class:`KVCache` of the previous call, or ``None`` to start at position 0).

        Raises:
            ValueError: a position beyond ``max_length``.
        """
        x, cache = self._hidden(self._check_inputs(inputs), state)
        return self.decoder(self.ln(x)), cache

    def _hidden(self, inputs: Tensor, state: LMState | None) -> tuple[Tensor, KVCache]:
        """The last block's outputs ``(B, S, d)`` (before the final layer norm) and the cache."""
        B, S = inputs.shape
        dev = inputs.device
        steps = torch.arange(S, device=dev)
        if state is None:
            pos, mask, horizon = steps.expand(B, S), None, S
        elif isinstance(state, KVCache):
            pos, horizon = state.positions.unsqueeze(1) + steps, state.horizon + S
            causal = torch.ones(S, S, dtype=torch.bool, device=dev).tril()
            mask = torch.cat([state.valid.unsqueeze(1).expand(B, S, -1), causal.expand(B, S, S)], -1).unsqueeze(1)
        else:
            raise TypeError(f"state: expected a KVCache or None; got {type(state).__name__}")
        if horizon - 1 > self.max_length:
            raise ValueError(f"inputs: position {horizon - 1} exceeds max_length={self.max_length} (positions "
                             "0..max_length); use shorter sequences or chunks, or a model with a larger max_length")
        x = self.drop(self.embedding(inputs) + self._position_vectors(pos))
        keys, values = [], []
        for i, block in enumerate(self.layers):
            past = None if state is None else (state.keys[i], state.values[i])
            x, k, v = block(x, mask, past)
            keys.append(k)
            values.append(v)
        valid = torch.ones(B, S, dtype=torch.bool, device=dev)
        if state is not None:
            valid = torch.cat([state.valid, valid], 1)
        if S:
            after = pos[:, -1] + 1
        else:
            after = inputs.new_zeros(B) if state is None else state.positions
        return x, KVCache(tuple(keys), tuple(values), valid, after, horizon)

    def _encode(self, histories: Tensor, lengths: Tensor) -> tuple[Tensor, KVCache]:
        x, cache = self._hidden(histories, None)
        S = histories.shape[1]
        valid = torch.arange(S, device=histories.device) < lengths.unsqueeze(1)
        last = x.gather(1, (lengths - 1).view(-1, 1, 1).expand(-1, 1, x.shape[-1])).squeeze(1)  # (B, d)
        # the output layer only at each history's last input (not at every position)
        return self.decoder(self.ln(last)), KVCache(cache.keys, cache.values, valid, lengths.clone(), int(lengths.max()))

    def extra_repr(self) -> str:
        return (f"vocab_size={self.vocab_size}, max_length={self.max_length}, positions={self.positions!r}, "
                f"tie_weights={self.tie_weights}")
