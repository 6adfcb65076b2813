r"""Class-factored LSTM language model: a two-stage softmax over word classes (cheap NCE/DNCE noise).

.. math::  h_t = \mathrm{LSTM}(E[y_{t-1}], h_{t-1}), \qquad
           p(y_t = w \mid y_{<t}) = p(c(w) \mid h_t)\; p(w \mid c(w), h_t),

.. math::  p(c \mid h) = \mathrm{softmax}_c(U\, \mathrm{drop}(h) + a), \qquad
           p(w \mid c, h) = \mathrm{softmax}_{v \in c}(W_v\, \mathrm{drop}(h) + b_v),

a hard clustering ``c(w)`` of the words ``1 .. V-1`` into ``C`` classes (e.g. exchange classes,
:meth:`ebms.models.trf.WordClasses.fit`). The boundary ``</s>`` (id 0, fed as ``<s>`` before the
first token) is a class of its own, index ``C``, with one member, so
:math:`p(\texttt{</s>} \mid h) = p(C \mid h)`: the same sentence law over all finite sentences as
:class:`~ebms.models.lm.LSTMLM`. Classes without members get probability 0.

Cost per token: ``O(layers (E H + H^2) + H (C + |c|))`` where the class layer and the members of
one class are computed, as :meth:`ClassFactoredLSTMLM.token_log_probs` (each class's positions in
one product) and :meth:`~ClassFactoredLSTMLM.sample` (class draw, then a draw among the drawn
class's members, listed flat over the running rows) do; ``O(H V)`` for the full next-token logits
(``forward``, :meth:`~ebms.models.lm.AutoregressiveLM.logits`, and the filtered laws of
``temperature``/``top_k``/``top_p``, which take the base class's route). Sampling carries the LSTM
state and runs each step's cell as one product (a fused single-step ``nn.LSTM`` call costs several
times more on CPU).

References:
    Goodman (2001), *Classes for fast maximum entropy training*; Mikolov, Kombrink, Burget,
    Černocký & Khudanpur (2011), *Extensions of recurrent neural network language model*.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch.nn.utils.rnn import pack_padded_sequence

from ebms._checks import check_int, check_probability
from ebms.distributions import sample_categorical
from ebms.models.lm._base import AutoregressiveLM, LMState
from ebms.models.lm._filter import check_filter
from ebms.models.lm.lstm import LSTMState
from ebms.sequences import Sequences

__all__ = ["ClassFactoredLSTMLM"]


def _segment_draw(s: Tensor, seg: Tensor, first: Tensor, size: Tensor, generator: torch.Generator | None) -> Tensor:
    """One flat index per segment ``[first, first + size)`` of ``s (K,)`` (no gradient), with probability
    ``softmax`` inside it: inverse CDF in float64, one uniform per segment; ``seg (K,)`` is each element's segment."""
    S = size.numel()
    u = torch.rand(S, generator=generator, device=s.device, dtype=torch.float64)
    v = s.double()
    top = v.new_full((S,), -torch.inf).scatter_reduce_(0, seg, v, "amax")
    e = (v - top.index_select(0, seg)).exp()
    cum = torch.cumsum(e, 0)
    last = first + size - 1
    end = cum.index_select(0, last)
    before = cum.index_select(0, first) - e.index_select(0, first)
    k = torch.searchsorted(cum, before + u * (end - before), right=True)
    return torch.clamp(k, first, last)  # rounding at a segment's end stays inside it


class ClassFactoredLSTMLM(AutoregressiveLM):
    """LSTM sentence LM with a class-factored output layer (see the module docstring).

    Args:
        classes: ``LongTensor (V,)``, the class of each token; entries ``1 .. V-1`` in ``[0, C)``,
            entry 0 (the boundary) is ignored, as in :class:`~ebms.models.trf.WordClasses`.
        num_classes: ``C`` (default ``classes[1:].max() + 1``).
        embedding_dim: width ``E`` of the input embeddings.
        hidden_size: LSTM width ``H``.
        num_layers: stacked LSTM layers.
        dropout: dropout probability in ``[0, 1)`` on the embeddings, between layers and on the top
            layer's output (training mode only).

    Parameters: ``embedding (V, E)``, ``lstm``, ``class_decoder`` (``Linear(H, C + 1)``, output ``C``
    = ``</s>``), ``word_decoder`` (``Linear(H, V)``, row ``w`` scores word ``w`` inside its class; row
    0 cancels out, the boundary's class having one member). Buffers: ``word_class (V,)`` (``C`` at
    id 0), ``members (V,)`` (the ids by class, then id), ``class_start``/``class_size (C + 1,)``.
    Initialisation: weights uniform in ``[-0.1, 0.1]``, biases 0 (:meth:`init_unigram` sets them).

    Example:
        >>> import torch
        >>> lm = ClassFactoredLSTMLM(torch.tensor([0, 0, 0, 1, 1, 2]), embedding_dim=8, hidden_size=8,
        ...                          num_layers=1).eval()
        >>> y = lm.sample(3, generator=torch.Generator().manual_seed(0))
        >>> lm.log_prob(y).shape
        torch.Size([3])
    """

    word_class: Tensor
    members: Tensor
    class_start: Tensor
    class_size: Tensor
    empty: Tensor

    def __init__(self, classes: Tensor, *, num_classes: int | None = None, embedding_dim: int = 256,
                 hidden_size: int = 256, num_layers: int = 2, dropout: float = 0.0) -> None:
        super().__init__()
        if not isinstance(classes, Tensor) or classes.dtype != torch.long or classes.dim() != 1:
            got = (f"{classes.dtype} tensor of shape {tuple(classes.shape)}" if isinstance(classes, Tensor)
                   else type(classes).__name__)
            raise TypeError(f"classes: expected a LongTensor (V,) of class indices (e.g. WordClasses.classes); got {got}")
        if classes.numel() < 2:
            raise ValueError(f"classes: expected V >= 2 entries (the boundary id 0 and at least one word); got "
                             f"{classes.numel()}")
        V = self.vocab_size = classes.numel()
        words = classes.detach().cpu()[1:]
        C = self.num_classes = check_int(int(words.max()) + 1 if num_classes is None else num_classes,
                                         "num_classes", minimum=1)
        if int(words.min()) < 0 or int(words.max()) >= C:
            raise ValueError(f"classes: expected entries 1..{V - 1} in [0, {C}) (num_classes={C}); got min "
                             f"{int(words.min())}, max {int(words.max())}")
        self.embedding_dim = check_int(embedding_dim, "embedding_dim", minimum=1)
        self.hidden_size = check_int(hidden_size, "hidden_size", minimum=1)
        self.num_layers = check_int(num_layers, "num_layers", minimum=1)
        self.dropout = check_probability(dropout, "dropout", open_high=True)
        word_class = torch.cat([torch.tensor([C]), words])
        size = torch.bincount(word_class, minlength=C + 1)
        self.register_buffer("word_class", word_class)
        self.register_buffer("members", torch.argsort(word_class, stable=True))
        self.register_buffer("class_start", torch.cumsum(size, 0) - size)
        self.register_buffer("class_size", size)
        self.register_buffer("empty", size == 0)
        self.embedding = nn.Embedding(V, self.embedding_dim)
        self.lstm = nn.LSTM(self.embedding_dim, self.hidden_size, self.num_layers, batch_first=True,
                            dropout=self.dropout if self.num_layers > 1 else 0.0)
        self.drop = nn.Dropout(self.dropout)
        self.class_decoder = nn.Linear(self.hidden_size, C + 1)
        self.word_decoder = nn.Linear(self.hidden_size, V)
        for lin in (self.class_decoder, self.word_decoder):
            nn.init.uniform_(lin.weight, -0.1, 0.1)
            nn.init.zeros_(lin.bias)
        nn.init.uniform_(self.embedding.weight, -0.1, 0.1)

    @torch.no_grad()
    def init_unigram(self, counts: Tensor) -> None:
        r"""Set the output biases to a unigram law: :math:`a_c = \log N_c / N`, :math:`b_w = \log N_w / N_{c(w)}`
        (the law the model has while the weights are 0; DNCE's usual start).

        Args:
            counts: ``(V,)`` positive counts, entry 0 the number of sentences (the ``</s>`` count).
        """
        if not isinstance(counts, Tensor) or counts.shape != (self.vocab_size,) or not bool((counts > 0).all()):
            got = tuple(counts.shape) if isinstance(counts, Tensor) else type(counts).__name__
            raise ValueError(f"counts: expected a positive tensor ({self.vocab_size},) (add-one counts for unseen "
                             f"words); got {got}")
        n = counts.double().cpu()
        per_class = torch.zeros(self.num_classes + 1, dtype=torch.float64).index_add_(0, self.word_class.cpu(), n)
        self.class_decoder.bias.copy_((per_class / per_class.sum()).log().clamp_min(-1e4))
        self.word_decoder.bias.copy_((n / per_class[self.word_class.cpu()]).log())

    # --- network ----------------------------------------------------------------------------------
    def _hidden(self, inputs: Tensor, state: LMState | None = None) -> tuple[Tensor, LSTMState]:
        """Top-layer outputs ``(B, S, H)`` (after dropout) and the state after the last input."""
        self._check_inputs(inputs)
        if state is not None and not isinstance(state, LSTMState):
            raise TypeError(f"state: expected an LSTMState or None; got {type(state).__name__}")
        out, (h, c) = self.lstm(self.drop(self.embedding(inputs)), None if state is None else (state.h, state.c))
        return self.drop(out), LSTMState(h, c)

    def _class_log_probs(self, h: Tensor) -> Tensor:
        """``log p(c | h)``, ``(..., C + 1)`` (``-inf`` for classes without members)."""
        return self.class_decoder(h).masked_fill(self.empty, -torch.inf).log_softmax(-1)

    def _full(self, h: Tensor) -> Tensor:
        """``log p(w | h)`` of every token, ``(..., V)``: ``O(H V)``."""
        s = self.word_decoder(h)
        idx = self.word_class.expand_as(s)
        top = s.detach().new_full((*s.shape[:-1], self.num_classes + 1), -torch.inf)
        top = top.scatter_reduce(-1, idx, s.detach(), "amax").masked_fill(self.empty, 0.0)
        total = torch.zeros_like(top).scatter_add(-1, idx, (s - top.gather(-1, idx)).exp())
        lse = total.masked_fill(self.empty, 1.0).log() + top  # per-class log-normaliser
        return self._class_log_probs(h).gather(-1, idx) + s - lse.gather(-1, idx)

    def forward(self, inputs: Tensor, state: LMState | None = None) -> tuple[Tensor, LSTMState]:
        """Next-token log-probabilities (normalised logits) ``(B, S, V)`` after each of ``inputs (B, S)``
        and the state after the last input (``state``: an :class:`LSTMState`, or ``None`` for zeros)."""
        out, state = self._hidden(inputs, state)
        return self._full(out), state

    def _encode_hidden(self, histories: Tensor, lengths: Tensor) -> tuple[Tensor, LSTMState]:
        packed = pack_padded_sequence(self.drop(self.embedding(histories)), lengths.cpu(), batch_first=True,
                                      enforce_sorted=False)
        _, (h, c) = self.lstm(packed)  # the final states sit at each row's own length
        return self.drop(h[-1]), LSTMState(h, c)

    def _encode(self, histories: Tensor, lengths: Tensor) -> tuple[Tensor, LSTMState]:
        h, state = self._encode_hidden(histories, lengths)
        return self._full(h), state

    # --- scoring: the class layer and the target's class only ----------------------------------
    def _score(self, h: Tensor, w: Tensor) -> Tensor:
        """``log p(w_i | h_i)`` for ``h (N, H)``, ``w (N,)``: each class's positions in one product."""
        cls = self.word_class[w]
        lc = self._class_log_probs(h).gather(1, cls.unsqueeze(1)).squeeze(1)
        W, b = self.word_decoder.weight, self.word_decoder.bias
        s = (h * W[w]).sum(-1) + b[w]
        order = torch.argsort(cls, stable=True)
        sizes, starts = self.class_size.tolist(), self.class_start.tolist()  # buffers: a loaded state dict's
        parts, off = [], 0
        for c, n in enumerate(torch.bincount(cls, minlength=self.num_classes + 1).tolist()):
            if n == 0:
                continue
            at = order[off:off + n]
            off += n
            if sizes[c] == 1:  # the only member: log p(w | c) = 0 exactly
                parts.append(s[at])
                continue
            mem = self.members[starts[c]:starts[c] + sizes[c]]
            parts.append(F.linear(h[at], W[mem], b[mem]).logsumexp(-1))
        lse = torch.cat(parts)[torch.argsort(order)]
        return lc + s - lse

    def token_log_probs(self, x: Sequences | Tensor, *, temperature: float = 1.0, top_k: int | None = None,
                        top_p: float | None = None) -> Tensor:
        """As :meth:`AutoregressiveLM.token_log_probs` ``(B, T + 1)``; the model's own law is scored at the real
        positions only, ``O(H (C + |c|))`` each (the filtered laws take the base class's ``O(H V)`` route)."""
        temperature, top_k, top_p = check_filter(temperature, top_k, top_p)
        if temperature != 1.0 or top_k is not None or top_p is not None:
            return super().token_log_probs(x, temperature=temperature, top_k=top_k, top_p=top_p)
        seqs = self._sequences(x, "x")
        B, T = seqs.tokens.shape
        if B == 0:
            return torch.zeros(0, T + 1, dtype=self._dtype(), device=self._device())
        width = int(seqs.lengths.max())
        y = self._real(seqs, width)
        h, _ = self._hidden(F.pad(y, (1, 0), value=self.boundary))  # (B, width + 1, H)
        keep = torch.arange(width + 1, device=y.device) <= seqs.lengths.unsqueeze(1)
        per = self._score(h[keep], F.pad(y, (0, 1), value=self.boundary)[keep])
        out = per.new_zeros(B, width + 1).masked_scatter(keep, per)
        return F.pad(out, (0, T - width))

    # --- sampling: a class, then a member of it ------------------------------------------------
    def _cells(self) -> list[tuple[Tensor, Tensor]]:
        """Per layer, ``[W_ih, W_hh]^T ((E or H) + H, 4 H)`` and ``b_ih + b_hh (4 H,)``: one product per step."""
        p = dict(self.lstm.named_parameters())
        return [(torch.cat([p[f"weight_ih_l{k}"], p[f"weight_hh_l{k}"]], 1).t(), p[f"bias_ih_l{k}"] + p[f"bias_hh_l{k}"])
                for k in range(self.num_layers)]

    def _step(self, w: Tensor, state: LSTMState, cells: list[tuple[Tensor, Tensor]]) -> tuple[Tensor, LSTMState]:
        """Top-layer output ``(A, H)`` and state after the new tokens ``w (A,)``: ``nn.LSTM``'s cell written out."""
        dropping = self.training and self.dropout > 0
        x, hs, cs = self.embedding(w), [], []
        for layer, (weight, bias) in enumerate(cells):
            if dropping:
                x = self.drop(x)
            i, f, g, o = torch.addmm(bias, torch.cat([x, state.h[layer]], 1), weight).chunk(4, 1)
            c = torch.sigmoid(f) * state.c[layer] + torch.sigmoid(i) * torch.tanh(g)
            x = torch.sigmoid(o) * torch.tanh(c)
            hs.append(x)
            cs.append(c)
        return (self.drop(x) if dropping else x), LSTMState(torch.stack(hs), torch.stack(cs))

    def _next(self, h: Tensor, generator: torch.Generator | None) -> Tensor:
        """One token per row of ``h (A, H)``: ``c ~ p(c | h)``, then ``w ~ p(w | c, h)`` over the members of
        the drawn classes, listed flat (``K`` = the sum of their sizes; ``O(H (C A + K))``)."""
        c = sample_categorical(F.linear(h, self.class_decoder.weight,
                                        self.class_decoder.bias.masked_fill(self.empty, -torch.inf)), generator)
        size = self.class_size.index_select(0, c)
        seg = torch.repeat_interleave(size)  # (K,) the row of each listed member
        first = torch.cumsum(size, 0) - size
        at = (self.class_start.index_select(0, c) - first).index_select(0, seg)
        words = self.members.index_select(0, torch.arange(seg.numel(), device=c.device) + at)
        s = (self.word_decoder.weight.index_select(0, words) * h.index_select(0, seg)).sum(-1)
        s = s + self.word_decoder.bias.index_select(0, words)
        return words.index_select(0, _segment_draw(s, seg, first, size, generator))

    def _draw(self, hist: Tensor, hist_len: Tensor, limit: int, generator: torch.Generator | None,
              law: tuple[float, int | None, float | None], truncate: bool, per_prefix: int = 1) -> Sequences:
        if law != (1.0, None, None):  # the filtered laws need every logit: the base class's loop
            return super()._draw(hist, hist_len, limit, generator, law, truncate, per_prefix)
        h, state = self._encode_hidden(hist, hist_len)
        cells = self._cells()
        return self._draw_loop(h, state, limit, truncate, per_prefix, lambda h: self._next(h, generator),
                               lambda w, state: self._step(w, state, cells))

    def extra_repr(self) -> str:
        return f"vocab_size={self.vocab_size}, num_classes={self.num_classes}"
