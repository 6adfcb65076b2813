r"""Electric: an energy-based cloze model scored in one pass.

A bidirectional Transformer reads the whole sentence ``<s> x_1 .. x_l </s>`` (no ``[MASK]``),
and each position's output state :math:`h_t` gives an unnormalised conditional (monograph
Eq. 3.16)

.. math::  \log\hat p_\theta(x_t \mid x_{\setminus t}) = -(w^\top h_t + b),
           \qquad p_\theta(x_t \mid x_{\setminus t}) = \hat p_\theta(x_t \mid x_{\setminus t})
           / Z_\theta(x_{\setminus t}),

with no softmax: the model is trained by noise-contrastive estimation
(:class:`ebms.objectives.ElectricNCE`, Eq. 3.18) to be self-normalised, :math:`Z_\theta = 1`.
A sentence is scored by its pseudo-log-likelihood (Eq. 3.19)

.. math::  \mathrm{PLL}(x) = \sum_{t=1}^{l} \log\hat p_\theta(x_t \mid x_{\setminus t})
           = -\sum_{t=1}^{l} (w^\top h_t + b),

from ONE pass, where a masked LM needs ``l`` passes. PLL is a score, not a normalised law over
sentences; :meth:`ElectricCloze.log_prob` returns it so that n-best rescoring
(:func:`ebms.metrics.rescoring.lm_scores`) takes the model as a sentence LM.
:meth:`ElectricCloze.exact_pll` normalises every conditional by enumerating the vocabulary
(``l (V - 1)`` sentence evaluations) to measure how far :math:`Z_\theta` is from 1.

The model holds its noise law (``noise``, typically a :class:`ebms.nets.TwoTowerCloze`) as a
submodule so that one optimizer and one checkpoint cover both; ``noise`` plays no part in
scoring.

Token ids: id 0 is the boundary ``<s>``/``</s>`` (never inside a sentence), tokens are
``1 .. V-1``; sentences have at most ``max_length`` tokens. Cost of a pass: ``O(N T d (d + T))``
for ``N`` blocks of width ``d``.

Reference:
    Clark, K., Luong, M.-T., Le, Q. V. & Manning, C. D. (2020). "Pre-training transformers as
    energy-based cloze models." EMNLP.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from ebms._checks import check_int, check_probability
from ebms.sequences import Sequences

__all__ = ["ElectricCloze"]


class ElectricCloze(nn.Module):
    r"""Energy-based cloze model :math:`\log\hat p(x_t \mid x_{\setminus t}) = -(w^\top h_t + b)`.

    Args:
        vocab_size: ``V >= 2`` ids, the boundary id 0 included.
        dim: Transformer width ``d`` (a multiple of ``heads``).
        layers: pre-LN bidirectional Transformer blocks ``N`` (GELU feed-forward of width ``4 d``).
        heads: attention heads.
        dropout: dropout in ``[0, 1)`` (training only).
        max_length: the longest sentence scored (learned positions ``0 .. max_length + 1`` for
            ``<s> x </s>``).
        noise: the noise model :class:`ebms.objectives.ElectricNCE` trains alongside (an
            ``nn.Module`` with ``log_probs(x) -> (B, T, V)`` and ``sample_replacements``), or
            ``None`` for a scoring-only model.

    Example:
        >>> m = ElectricCloze(6, dim=8, layers=1, heads=2, max_length=10)
        >>> m.pseudo_log_likelihood(Sequences.from_lists([[1, 2, 3], [4]])).shape
        torch.Size([2])
    """

    def __init__(self, vocab_size: int, *, dim: int = 64, layers: int = 2, heads: int = 2, dropout: float = 0.0,
                 max_length: int = 64, noise: nn.Module | None = None) -> None:
        super().__init__()
        self.vocab_size = check_int(vocab_size, "vocab_size", minimum=2)
        self.dim = check_int(dim, "dim", minimum=1)
        self.layers = check_int(layers, "layers", minimum=1)
        self.heads = check_int(heads, "heads", minimum=1)
        if dim % heads:
            raise ValueError(f"heads: expected a divisor of dim={dim}; got {heads}")
        self.dropout = check_probability(dropout, "dropout", open_high=True)
        self.max_length = check_int(max_length, "max_length", minimum=1)
        if noise is not None and not isinstance(noise, nn.Module):
            raise TypeError(f"noise: expected an nn.Module (e.g. TwoTowerCloze) or None; got {type(noise).__name__}")
        self.embedding = nn.Embedding(vocab_size, dim)
        self.position = nn.Embedding(max_length + 2, dim)
        self.drop = nn.Dropout(self.dropout)
        block = nn.TransformerEncoderLayer(dim, heads, 4 * dim, self.dropout, activation="gelu", batch_first=True,
                                           norm_first=True)
        self.encoder = nn.TransformerEncoder(block, layers, enable_nested_tensor=False)
        self.ln = nn.LayerNorm(dim)
        self.score = nn.Linear(dim, 1)  # w, b
        self.noise = noise

    def _sentences(self, x: object, name: str = "x") -> Sequences:
        x = Sequences.coerce(x, name=name, pairs=False, expected="Sequences of token ids")
        x.check_vocabulary(self.vocab_size, name, boundary=0)
        mask = x.mask()
        longest = int(x.lengths.max()) if x.batch_size else 0
        if longest > self.max_length:
            raise ValueError(f"{name}: expected sentences of at most max_length={self.max_length} tokens; "
                             f"got length {longest}")
        return Sequences(x.tokens.masked_fill(~mask, 0), x.lengths, validate=False)

    def hidden(self, x: Sequences) -> Tensor:
        r"""``(B, T, d)`` states :math:`h_t` of the real positions of ``x`` (padding rows are 0).

        The encoder reads ``<s> x </s>`` with padding keys masked out, so real positions do not
        depend on padding or batch mates.

        Raises:
            TypeError: ``x`` is not Sequences.
            ValueError: a real token outside ``[1, V-1]`` or a sentence longer than ``max_length``.
        """
        return self._encode(self._sentences(x))

    def _encode(self, x: Sequences) -> Tensor:
        B, T = x.tokens.shape
        width = int(x.lengths.max()) if B else 0  # padding beyond the longest sentence is not read
        tokens = x.tokens[:, :width]
        inputs = torch.cat([tokens.new_zeros(B, 1), tokens, tokens.new_zeros(B, 1)], 1)  # <s> x </s> + padding
        pos = torch.arange(width + 2, device=tokens.device)
        ignore = pos > (x.lengths.unsqueeze(1) + 1)  # True = padding key
        e = self.drop(self.embedding(inputs) + self.position(pos))
        h = self.ln(self.encoder(e, src_key_padding_mask=ignore))[:, 1:width + 1]
        h = h.masked_fill(~x.mask()[:, :width].unsqueeze(-1), 0.0)
        if width < T:
            h = torch.cat([h, h.new_zeros(B, T - width, h.shape[-1])], 1)
        return h

    def token_scores(self, x: Sequences) -> Tensor:
        r"""``(B, T)`` :math:`\log\hat p_\theta(x_t \mid x_{\setminus t}) = -(w^\top h_t + b)` at real
        positions, 0 at padding. One pass; differentiable."""
        x = self._sentences(x)
        s = -self.score(self._encode(x)).squeeze(-1)
        return s.masked_fill(~x.mask(), 0.0)

    def pseudo_log_likelihood(self, x: Sequences) -> Tensor:
        r"""``(B,)`` :math:`\mathrm{PLL}(x) = \sum_t \log\hat p_\theta(x_t \mid x_{\setminus t})` (Eq. 3.19),
        one pass; 0 for an empty sentence."""
        return self.token_scores(x).sum(1)

    def log_prob(self, x: Sequences) -> Tensor:
        """``(B,)`` the pseudo-log-likelihood :meth:`pseudo_log_likelihood`, under the sentence-LM name
        that rescoring expects. A SCORE (self-normalised conditionals summed), not the log of a
        normalised law over sentences: compare sentences with it, do not compute perplexities."""
        return self.pseudo_log_likelihood(x)

    def exact_pll(self, x: Sequences, *, batch_size: int = 256) -> Tensor:
        r"""``(B,)`` the pseudo-log-likelihood with each conditional normalised over the tokens,

        .. math::  \sum_t \Big[\log\hat p_\theta(x_t \mid x_{\setminus t})
                   - \log \sum_{v=1}^{V-1} \hat p_\theta(v \mid x_{\setminus t})\Big],

        where :math:`\hat p_\theta(v \mid x_{\setminus t})` is read at position ``t`` of ``x``
        with ``x_t`` set to ``v``. ``exact_pll - pseudo_log_likelihood`` is
        :math:`-\sum_t \log Z_\theta(x_{\setminus t})`, 0 for a perfectly self-normalised model.
        Cost: ``sum(lengths) * (V - 1)`` sentence evaluations, in chunks of ``batch_size``; meant for
        small vocabularies and checks. Float64 result.

        Raises:
            ValueError: ``batch_size < 1`` and the checks of :meth:`hidden`.
        """
        check_int(batch_size, "batch_size", minimum=1)
        x = self._sentences(x)
        B, T = x.tokens.shape
        rows, cols = x.mask().nonzero(as_tuple=True)  # one cloze question per real token
        n, V1 = int(rows.numel()), self.vocab_size - 1
        if n == 0:
            return torch.zeros(B, dtype=torch.float64, device=x.tokens.device)
        cand = torch.arange(1, self.vocab_size, device=x.tokens.device)
        q_rows, q_cols = rows.repeat_interleave(V1), cols.repeat_interleave(V1)
        tokens = x.tokens[q_rows].clone()
        tokens[torch.arange(n * V1, device=tokens.device), q_cols] = cand.repeat(n)
        lengths = x.lengths[q_rows]
        scores = []
        for s in range(0, n * V1, batch_size):
            part = Sequences(tokens[s:s + batch_size], lengths[s:s + batch_size], validate=False)
            scores.append(self.token_scores(part).gather(1, q_cols[s:s + batch_size, None]).squeeze(1))
        table = torch.cat(scores).double().view(n, V1)
        gold = table.gather(1, (x.tokens[rows, cols] - 1).unsqueeze(1)).squeeze(1)
        terms = gold - table.logsumexp(1)
        return torch.zeros(B, dtype=torch.float64, device=terms.device).index_add(0, rows, terms)

    def extra_repr(self) -> str:
        return f"vocab_size={self.vocab_size}, dim={self.dim}, layers={self.layers}, max_length={self.max_length}"
