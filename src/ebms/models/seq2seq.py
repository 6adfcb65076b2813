r"""Encoder-decoder Transformer for translation and its E-ARM adapter.

.. math::  h = \mathrm{Enc}(E_x[x_1 .. x_S\, \texttt{</s>}] + P_x), \qquad
           p(y_t \mid y_{<t}, x) = \mathrm{softmax}(W\, \mathrm{Dec}(E_y[\texttt{<s>}\, y_{<t}] + P_y, h)_t + b),

    \log p(y \mid x) = \sum_{t=1}^{L} \log p(y_t \mid y_{<t}, x) + \log p(\texttt{</s>} \mid y, x),

a law over all finite targets (Vaswani et al. 2017, *Attention is all you need*): pre-layer-norm
encoder and decoder stacks (:class:`torch.nn.TransformerEncoderLayer` /
:class:`~torch.nn.TransformerDecoderLayer`, GELU), learned positions ``0 .. max_length`` on each
side, the source read with a final ``</s>`` (so an empty source still has one key), padding
masked out of self- and cross-attention. Token ids follow the text contract: 0 is ``</s>`` (and
``<s>`` as the first decoder input), sentences hold ids ``>= 1``.

* :class:`Seq2SeqTransformer` — ``logits``, ``token_log_probs``, ``log_prob`` (teacher-forced, one
  pass), ``greedy``, ``beam_search``, ``sample``.
* :class:`Seq2SeqAdapter` — the ``EARMModel`` protocol of :mod:`ebms.objectives.earm`.
* :func:`source_target_pair` — a batch as ``(src, tgt)`` Sequences.

The training objective is :class:`ebms.objectives.Seq2SeqNLL` (cross-entropy per target token,
with label smoothing and scheduled sampling).

Modes: every method uses the module's current mode (dropout in training mode); call ``eval()``
for the model's law. Batches are pairs ``(src, tgt)`` of :class:`~ebms.sequences.Sequences`.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ebms._checks import check_bool, check_int, check_probability
from ebms.models._beam import BeamSearchResult, beam_search, greedy, sample
from ebms.sequences import Sequences

__all__ = ["BeamSearchResult", "Seq2SeqAdapter", "Seq2SeqTransformer", "source_target_pair"]


class Seq2SeqTransformer(nn.Module):
    """Encoder-decoder Transformer ``p(y | x)`` over token ids (see the module docstring).

    Args:
        src_vocab, tgt_vocab: vocabulary sizes ``V_x, V_y >= 2`` (id 0 = boundary included).
        d_model: width ``d`` (a multiple of ``heads``).
        heads: attention heads.
        layers: encoder layers and decoder layers (each).
        ff: hidden width of the feed-forward layers.
        dropout: in ``[0, 1)``, training mode only.
        max_length: the longest source and target sentence.

    Shapes: ``B`` pairs, ``T`` the padded target width, ``V = V_y``. Cost of a teacher-forced pass:
    ``O(B (S + T) layers d (d + ff) + B layers (S^2 + T^2 + S T) d)``.

    Example:
        >>> import torch
        >>> m = Seq2SeqTransformer(6, 7, d_model=8, heads=2, layers=1, ff=16, max_length=5).eval()
        >>> x = Sequences.from_lists([[1, 2], [3]])
        >>> y = m.sample(x, torch.Generator().manual_seed(0))
        >>> m.log_prob(x, y).shape
        torch.Size([2])
    """

    boundary = 0

    def __init__(self, src_vocab: int, tgt_vocab: int, *, d_model: int = 128, heads: int = 4, layers: int = 2,
                 ff: int = 256, dropout: float = 0.1, max_length: int = 64) -> None:
        super().__init__()
        self.src_vocab = check_int(src_vocab, "src_vocab", minimum=2)
        self.tgt_vocab = check_int(tgt_vocab, "tgt_vocab", minimum=2)
        self.d_model = check_int(d_model, "d_model", minimum=1)
        self.heads = check_int(heads, "heads", minimum=1)
        if d_model % heads:
            raise ValueError(f"heads: expected a divisor of d_model={d_model}; got {heads}")
        self.layers = check_int(layers, "layers", minimum=1)
        check_int(ff, "ff", minimum=1)
        self.dropout = check_probability(dropout, "dropout", open_high=True)
        self.max_length = check_int(max_length, "max_length", minimum=1)
        self.src_embedding, self.tgt_embedding = nn.Embedding(src_vocab, d_model), nn.Embedding(tgt_vocab, d_model)
        self.src_positions = nn.Embedding(max_length + 1, d_model)
        self.tgt_positions = nn.Embedding(max_length + 1, d_model)
        enc = nn.TransformerEncoderLayer(d_model, heads, ff, self.dropout, activation="gelu", batch_first=True,
                                         norm_first=True)
        dec = nn.TransformerDecoderLayer(d_model, heads, ff, self.dropout, activation="gelu", batch_first=True,
                                         norm_first=True)
        self.encoder = nn.TransformerEncoder(enc, layers, norm=nn.LayerNorm(d_model), enable_nested_tensor=False)
        self.decoder = nn.TransformerDecoder(dec, layers, norm=nn.LayerNorm(d_model))
        self.output = nn.Linear(d_model, tgt_vocab)
        self.drop = nn.Dropout(self.dropout)
        for emb in (self.src_embedding, self.tgt_embedding, self.src_positions, self.tgt_positions):
            nn.init.normal_(emb.weight, std=0.02)
        nn.init.normal_(self.output.weight, std=0.02)
        nn.init.zeros_(self.output.bias)

    # --- network ------------------------------------------------------------------------------
    def encode(self, src: Sequences) -> tuple[Tensor, Tensor]:
        """``memory (B, S, d)`` of ``x </s>`` (``S`` = longest source + 1) and its padding mask
        ``(B, S)`` (True = padding). ``src`` must be checked (:meth:`check_source`)."""
        width = int(src.lengths.max()) if src.batch_size else 0
        tokens = F.pad(src.tokens[:, :width].masked_fill(~src.mask()[:, :width], 0), (0, 1))
        pad = torch.arange(width + 1, device=tokens.device) > src.lengths.unsqueeze(1)
        x = self.drop(self.src_embedding(tokens) + self.src_positions.weight[: width + 1])
        return self.encoder(x, src_key_padding_mask=pad), pad

    def decode(self, memory: Tensor, pad: Tensor, inputs: Tensor) -> Tensor:
        """Logits ``(N, t, V)`` after each decoder input ``inputs (N, t)`` (``inputs[:, 0] = 0``);
        causal: position ``s`` sees inputs ``0..s`` and the whole (unpadded) source."""
        t = inputs.shape[1]
        if t > self.max_length + 1:
            raise ValueError(f"inputs: {t} decoder inputs exceed the max_length + 1 = {self.max_length + 1} positions")
        causal = torch.ones(t, t, dtype=torch.bool, device=inputs.device).triu(1)
        y = self.drop(self.tgt_embedding(inputs) + self.tgt_positions.weight[:t])
        h = self.decoder(y, memory, tgt_mask=causal, memory_key_padding_mask=pad, tgt_is_causal=True)
        return self.output(h)

    def forward(self, src: Sequences, inputs: Tensor) -> Tensor:
        """:meth:`decode` after :meth:`encode`: logits ``(B, t, V)`` for decoder inputs ``(B, t)``."""
        return self.decode(*self.encode(self.check_source(src)), inputs)

    # --- checks -------------------------------------------------------------------------------
    def _check(self, x: Any, name: str, vocab: int) -> Sequences:
        x = Sequences.coerce(x, name=name, pairs=False, expected="an ebms.sequences.Sequences")
        x.check_vocabulary(vocab, name, boundary=self.boundary, where="sequence")
        longest = int(x.lengths.max()) if x.batch_size else 0
        if longest > self.max_length:
            raise ValueError(f"{name}: the longest sequence has {longest} tokens; this model takes at most "
                             f"max_length={self.max_length}")
        return x.to(self.output.weight.device)

    def check_source(self, src: Any) -> Sequences:
        """``src`` validated (ids in ``[1, V_x)``, lengths ``<= max_length``) on the model's device."""
        return self._check(src, "src", self.src_vocab)

    def check_pair(self, src: Any, tgt: Any) -> tuple[Sequences, Sequences]:
        """Both sides validated, with one row each per pair."""
        s, y = self.check_source(src), self._check(tgt, "tgt", self.tgt_vocab)
        if s.batch_size != y.batch_size:
            raise ValueError(f"tgt: expected one target per source ({s.batch_size}); got {y.batch_size}")
        return s, y

    @staticmethod
    def teacher_forcing(tgt: Sequences) -> tuple[Tensor, Tensor, Tensor]:
        """``inputs (B, W + 1)`` = ``<s> y``, ``targets (B, W + 1)`` = ``y </s>`` (0 after) and
        ``mask (B, W + 1)`` = ``t <= L`` for the longest target ``W``."""
        width = int(tgt.lengths.max()) if tgt.batch_size else 0
        y = tgt.tokens[:, :width].masked_fill(~tgt.mask()[:, :width], 0)
        mask = torch.arange(width + 1, device=y.device) <= tgt.lengths.unsqueeze(1)
        return F.pad(y, (1, 0)), F.pad(y, (0, 1)), mask

    # --- scoring ------------------------------------------------------------------------------
    def logits(self, src: Sequences, tgt: Sequences) -> Tensor:
        """Teacher-forced logits ``(B, T + 1, V)``: position ``t`` scores ``y_{t+1}`` (``</s>`` at
        ``t = L``); positions beyond the longest target are 0. One pass."""
        s, y = self.check_pair(src, tgt)
        inputs, _, _ = self.teacher_forcing(y)
        logits = self.decode(*self.encode(s), inputs)
        return F.pad(logits, (0, 0, 0, y.max_length + 1 - inputs.shape[1]))

    def token_log_probs(self, src: Sequences, tgt: Sequences) -> Tensor:
        r"""``(B, T + 1)``: :math:`\log p(y_{t+1} \mid y_{\le t}, x)` at ``t < L``,
        :math:`\log p(\texttt{</s>} \mid y, x)` at ``t = L``, 0 after. Independent of the padding."""
        s, y = self.check_pair(src, tgt)
        inputs, targets, mask = self.teacher_forcing(y)
        logits = self.decode(*self.encode(s), inputs)
        per = -F.cross_entropy(logits.transpose(1, 2), targets, reduction="none")
        return F.pad(per.masked_fill(~mask, 0.0), (0, y.max_length + 1 - inputs.shape[1]))

    def log_prob(self, src: Sequences, tgt: Sequences) -> Tensor:
        """``log p(y | x)`` of each pair, ``</s>`` included, ``(B,)``."""
        return self.token_log_probs(src, tgt).sum(-1)

    # --- decoding -----------------------------------------------------------------------------
    def _limit(self, max_length: int | None) -> int:
        if max_length is None:
            return self.max_length
        limit = check_int(max_length, "max_length", minimum=0)
        if limit > self.max_length:
            raise ValueError(f"max_length: expected at most the model's max_length={self.max_length}; got {limit}")
        return limit

    @torch.no_grad()
    def greedy(self, src: Sequences, max_length: int | None = None) -> Sequences:
        """The most likely next token at each step until ``</s>`` or ``max_length`` tokens (default:
        the model's). Cost ``O(L)`` decoder passes (no cache)."""
        return greedy(self, self.check_source(src), self._limit(max_length))

    @torch.no_grad()
    def beam_search(self, src: Sequences, *, beam: int = 5, max_length: int | None = None,
                    length_penalty: float = 1.0) -> BeamSearchResult:
        r"""Beam search for :math:`\arg\max_y \log p(y \mid x) / (L + 1)^\alpha`, batched over sentences.

        Args:
            src: ``B`` source sentences.
            beam: hypotheses kept per sentence (``beam=1`` is :meth:`greedy`).
            max_length: longest output (``</s>`` is forced after it; default the model's).
            length_penalty: ``alpha >= 0`` (0: raw log-probability; 1: per predicted token).

        Returns:
            :class:`BeamSearchResult` (best sequence, its score and its log-probability per row).

        Finished hypotheses stay in the beam with frozen scores; the search ends when all ``beam``
        hypotheses of every sentence have finished (details in :func:`ebms.models._beam.beam_search`).
        Cost ``O(L)`` decoder passes over ``B * beam`` rows and a top-k over ``beam * V`` per step.
        """
        beam = check_int(beam, "beam", minimum=1)
        alpha = float(length_penalty)
        if not (alpha >= 0.0 and alpha < float("inf")):
            raise ValueError(f"length_penalty: expected a finite number >= 0; got {length_penalty!r}")
        return beam_search(self, self.check_source(src), beam, self._limit(max_length), alpha)

    @torch.no_grad()
    def sample(self, src: Sequences, generator: torch.Generator | None = None, max_length: int | None = None,
               truncate: bool = True) -> Sequences:
        """One draw ``y ~ p(. | x)`` per source row (exact up to ``max_length``, default the model's;
        a longer draw is cut when ``truncate``, else raises ValueError)."""
        check_bool(truncate, "truncate")
        return sample(self, self.check_source(src), generator, self._limit(max_length), truncate)

    def extra_repr(self) -> str:
        return f"src_vocab={self.src_vocab}, tgt_vocab={self.tgt_vocab}, max_length={self.max_length}"


def source_target_pair(batch: Any) -> tuple[Sequences, Sequences]:
    """``(src, tgt)`` Sequences, or the four tensors ``(src tokens, src lengths, tgt tokens, tgt lengths)``
    that the :class:`~ebms.train.Trainer` streams (every tensor has ``B`` rows)."""
    if isinstance(batch, (tuple, list)) and len(batch) == 4 and all(isinstance(b, Tensor) for b in batch):
        batch = (Sequences(batch[0], batch[1]), Sequences(batch[2], batch[3]))
    if not (isinstance(batch, tuple) and len(batch) == 2 and all(isinstance(b, Sequences) for b in batch)):
        raise TypeError(f"batch: expected a pair (src, tgt) of Sequences, or four tensors (src tokens, src lengths, "
                        f"tgt tokens, tgt lengths); got {type(batch).__name__}")
    if batch[0].batch_size == 0:
        raise ValueError("batch: expected at least one pair; got an empty batch")
    return batch


class Seq2SeqAdapter(nn.Module):
    r"""A :class:`Seq2SeqTransformer` seen through the ``EARMModel`` protocol of :mod:`ebms.objectives.earm`.

    Batches are ``(src, tgt)`` pairs of Sequences; the steps are the target side given the source:
    step ``k < L`` predicts ``y_{k+1}`` after ``<s> y_1..y_k``, step ``L`` predicts ``</s>``, so
    ``K = W + 1`` for the longest target ``W`` of the batch (as :class:`ebms.objectives.earm.LMAdapter`).

    **Horizon** (the ISSUE12 contract, as ``LMAdapter``): ``H = max_length`` when given, else the
    model's ``max_length``. A target with ``L >= H`` is read cut to its first ``H`` tokens, without a
    ``</s>`` step, for the data and the draws alike. :meth:`draw` samples ``y ~ p(. | x)`` for the
    batch's own sources, in evaluation mode (no dropout; the mode is restored), without gradient,
    cut at ``cap = H`` when ``max_length`` is given, else one token past the batch's longest
    target (at most ``H``): a draw cut there has every step the data have, and its unreal ``</s>``
    step lies after the data's last step, which ``EARM`` ignores. (The paper draws translations of
    a source-dependent length; pass ``max_length`` to fix it.)

    Args:
        model: the wrapped model (a submodule: ``adapter.parameters()`` are its parameters).
        max_length: horizon ``H`` in ``[1, model.max_length]``, or ``None``.
    """

    def __init__(self, model: Seq2SeqTransformer, *, max_length: int | None = None) -> None:
        super().__init__()
        if not isinstance(model, Seq2SeqTransformer):
            raise TypeError(f"model: expected a Seq2SeqTransformer; got {type(model).__name__}")
        self.model = model
        self.max_length = None if max_length is None else model._limit(check_int(max_length, "max_length",
                                                                                   minimum=1))
        self.horizon = model.max_length if self.max_length is None else self.max_length

    def forward(self, batch: tuple[Sequences, Sequences]) -> tuple[Tensor, Tensor, Tensor]:
        """Same as :meth:`teacher_forced`."""
        return self.teacher_forced(batch)

    def teacher_forced(self, batch: tuple[Sequences, Sequences]) -> tuple[Tensor, Tensor, Tensor]:
        """``logits (B, K, V)`` (with grad), ``targets (B, K)`` long (``y`` then ``</s>`` = 0, 0 after)
        and ``mask (B, K)`` bool (steps ``k < L``, and ``k = L`` when ``L < H``); one pass."""
        src, tgt = source_target_pair(batch)
        H = self.horizon
        if int(tgt.lengths.max()) > H:
            tgt = Sequences(tgt.tokens[:, :H], tgt.lengths.clamp(max=H), validate=False)
        src, tgt = self.model.check_pair(src, tgt)
        inputs, targets, mask = self.model.teacher_forcing(tgt)
        logits = self.model.decode(*self.model.encode(src), inputs)
        lengths = tgt.lengths.unsqueeze(1)
        mask = mask & ~((torch.arange(mask.shape[1], device=mask.device) == lengths) & (lengths >= H))
        return logits, targets, mask

    def draw(self, batch: Any, generator: torch.Generator | None) -> Any:
        """``(src, y)``: the same sources and one draw ``y ~ p(. | src)`` per row (cut at the cap above),
        as four tensors when ``batch`` was four tensors."""
        src, tgt = source_target_pair(batch)
        cap = self.max_length if self.max_length is not None else min(int(tgt.lengths.max()) + 1, self.horizon)
        was_training = self.model.training
        self.model.eval()
        try:
            drawn = self.model.sample(src, generator, cap, truncate=True)
        finally:
            self.model.train(was_training)
        if not isinstance(batch[0], Sequences):
            return src.tokens, src.lengths, drawn.tokens, drawn.lengths
        return src, drawn

    def extra_repr(self) -> str:
        return f"max_length={self.max_length}"
