r"""Dense n-gram language models over :class:`~ebms.sequences.Sequences`.

Symbols are the ids ``0 .. V-1``; one of them, ``boundary`` (default 0), is never a token: it
stands for the sentence start ``<s>`` in histories and the end ``</s>`` as an outcome. An order-``n``
model is one table ``table[h_1, ..., h_{n-1}, w] = log p(w | h)`` of ``V ** n`` entries (histories
shorter than ``n - 1`` tokens at the start are padded with ``<s>``), and

.. math::  \log p(y) = \sum_{i=1}^{L} \log p(y_i \mid y_{i-n+1..i-1}) \;+\; \log p(\texttt{</s>} \mid y_{L-n+2..L})

with ``end=True`` (a law over all finite sequences), or without the last term with ``end=False``
(a law over the sequences of each length ``L``: :math:`p(y \mid L)`, sampled with
``sample(n, lengths=...)``; the table's boundary column is then unused).

* :meth:`NGram.fit` counts a corpus and smooths the counts (:class:`~ebms.distributions.WittenBell`,
  :class:`~ebms.distributions.AddK`, or any :class:`~ebms.distributions.Smoothing`);
* ``sample(n, lengths=L)`` draws from :math:`p(y \mid |y| = L)` exactly for either kind: for
  ``end=True`` the outcome at position ``t`` is weighted by the mass :math:`\gamma_r(h)` of all
  completions with exactly ``r = L - t - 1`` more tokens and then ``</s>``,
  :math:`\gamma_0(h) = p(\texttt{</s>} \mid h)`, :math:`\gamma_r(h) = \sum_{w} p(w \mid h)\,\gamma_{r-1}(hw)`;
* ``sample(n)`` (``end=True``) draws ancestrally until ``</s>``.

Costs: ``log_prob`` ``O(B T n)``; ancestral sampling ``O(n T V)``; length-conditional sampling of an
``end=True`` model adds ``O(T V^n)`` for :math:`\gamma`. Dense tables are limited to
``V ** n <= 5e7`` entries. The CTC-CRF denominator LM (``ebms.structured``) is the ``boundary=0``,
``end=True`` case, with the CTC blank as the boundary id.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
from torch import Tensor

from ebms._checks import check_int, check_shape, check_tensor
from ebms.distributions._base import Distribution
from ebms.distributions._sampling import sample_categorical
from ebms.distributions.smoothing import Smoothing, resolve_smoothing
from ebms.sequences import Sequences, token_id_row

__all__ = ["NGram"]

_MAX_ENTRIES = 50_000_000


def _check_sizes(vocab_size: int, order: int, boundary: int) -> None:
    check_int(vocab_size, "vocab_size", minimum=2)
    check_int(order, "order", minimum=1)
    check_int(boundary, "boundary", minimum=0)
    if boundary >= vocab_size:
        raise ValueError(f"boundary: expected an id in [0, {vocab_size - 1}] (vocab_size {vocab_size}); got {boundary}")
    if vocab_size**order > _MAX_ENTRIES:
        raise ValueError(f"order: vocab_size ** order = {vocab_size}**{order} exceeds the dense-table "
                         f"limit {_MAX_ENTRIES}; use a lower order")


class NGram(Distribution):
    """Dense n-gram over token sequences (see the module docstring).

    Args:
        vocab_size: ``V``, the number of symbol ids, the boundary id included.
        order: ``n >= 1`` (1 = unigram, 2 = bigram, ...).
        table: ``(V,) * n`` float log-probabilities ``log p(w | h)`` (no NaN or ``+inf``).
        boundary: the id of ``<s>``/``</s>``, never a token.
        end: whether sentences end with ``</s>`` (see the module docstring).

    Attributes:
        normalised: every row is a distribution over its outcomes (``</s>`` and the tokens, or the
            tokens alone when ``end=False``). :meth:`zeros` is not: it scores every sequence 0 (the
            CTC-CRF "no LM" case), and ``sample`` refuses it.
        conditional_on_length: ``not end``.

    Example:
        >>> from ebms.sequences import Sequences
        >>> corpus = Sequences.from_lists([[1, 2], [1, 1, 2], [2]])
        >>> lm = NGram.fit(corpus, vocab_size=3, order=2)        # tokens 1, 2; id 0 is <s>/</s>
        >>> float(lm.log_prob(Sequences.from_lists([[1, 2]]))) < 0
        True
    """

    table: Tensor

    def __init__(self, vocab_size: int, order: int, table: Tensor, *, boundary: int = 0, end: bool = True) -> None:
        super().__init__()
        _check_sizes(vocab_size, order, boundary)
        check_tensor(table, "table", floating=True)
        check_shape(table, (vocab_size,) * order, "table")
        if bool(torch.isnan(table).any()) or bool((table == math.inf).any()):
            raise ValueError("table: expected no NaN or +inf entries")
        self.vocab_size, self.order, self.boundary, self.end = vocab_size, order, boundary, bool(end)
        self.conditional_on_length = not self.end
        self.register_buffer("table", table.detach())
        rows = table.double().masked_fill(~self._allowed(table.device), -math.inf)
        # a sanity check (float32-rounded tables pass), not exactness: it tells a score table such as
        # zeros(), off by log V or more, from a law
        self.normalised = bool((torch.logsumexp(rows, -1).abs() <= 1e-5).all())

    def _allowed(self, device: torch.device | None = None) -> Tensor:
        """``(V,)`` bool: the outcomes a history may have (the boundary only as ``</s>`` with ``end``)."""
        allowed = torch.ones(self.vocab_size, dtype=torch.bool, device=device)
        allowed[self.boundary] = self.end
        return allowed

    # --- construction -------------------------------------------------------------------------
    @classmethod
    def fit(cls, corpus: Sequences | Sequence[Sequence[int]], vocab_size: int, order: int = 2, *,
            smoothing: str | Smoothing = "witten_bell", k: float = 1.0, boundary: int = 0,
            end: bool = True) -> NGram:
        """Count ``corpus`` and smooth the counts.

        Args:
            corpus: a :class:`~ebms.sequences.Sequences` or lists of token ids (empty sentences
                count one ``<s> </s>`` when ``end``).
            vocab_size, order, boundary, end: as in the constructor.
            smoothing: ``"witten_bell"`` (interpolated), ``"add_k"`` (with ``k > 0``), or a
                :class:`~ebms.distributions.Smoothing` instance.
        """
        _check_sizes(vocab_size, order, boundary)
        smoother = resolve_smoothing(smoothing, k)
        seqs = _as_sequences(corpus, "corpus")
        seqs.check_vocabulary(vocab_size, "corpus", boundary=boundary, where="sequence")
        windows, valid = _windows(seqs, order, boundary, end)
        w = windows[valid]  # (M, n): history then outcome, one row per counted event
        counts = []
        for m in range(1, order + 1):
            powers = vocab_size ** torch.arange(m - 1, -1, -1, device=w.device)
            flat = (w[:, order - m:] * powers).sum(1)
            counts.append(torch.bincount(flat, minlength=vocab_size**m).double().view((vocab_size,) * m))
        allowed = torch.ones(vocab_size, dtype=torch.bool, device=w.device)
        allowed[boundary] = bool(end)
        return cls(vocab_size, order, smoother.log_table(counts, allowed), boundary=boundary, end=end)

    @classmethod
    def zeros(cls, vocab_size: int, order: int = 2, *, boundary: int = 0) -> NGram:
        """All weights 0: every sequence scores 0 (an unnormalised constant "LM"; CTC-CRF becomes CTC)."""
        _check_sizes(vocab_size, order, boundary)
        return cls(vocab_size, order, torch.zeros((vocab_size,) * order, dtype=torch.float64), boundary=boundary)

    @classmethod
    def uniform(cls, vocab_size: int, order: int = 1, *, boundary: int = 0, end: bool = True) -> NGram:
        """Every allowed outcome equally likely after every history (``V`` outcomes with ``end``, else ``V - 1``)."""
        _check_sizes(vocab_size, order, boundary)
        row = torch.full((vocab_size,), -math.log(vocab_size if end else vocab_size - 1), dtype=torch.float64)
        if not end:
            row[boundary] = -math.inf
        return cls(vocab_size, order, row.expand((vocab_size,) * order).clone(), boundary=boundary, end=end)

    # --- the protocol -------------------------------------------------------------------------
    def log_prob(self, x: Sequences) -> Tensor:
        """``log p(y)`` (``end=True``, ``</s>`` included) or ``log p(y | L)`` of each sequence, ``(B,)``.

        Float in the table's dtype (float64 unless converted). One host sync (the token check).
        """
        x = Sequences.coerce(x, name="x", pairs=False)
        x.check_vocabulary(self.vocab_size, "x", boundary=self.boundary, where="sequence")
        windows, keep = _windows(x, self.order, self.boundary, self.end)
        powers = self.vocab_size ** torch.arange(self.order - 1, -1, -1, device=x.device)
        table = self.table.reshape(-1).to(x.device)
        scores = table[(windows * powers).sum(-1)]  # (B, T + 1)
        return torch.where(keep, scores, scores.new_zeros(())).sum(-1)

    def sample(self, n: int, generator: torch.Generator | None = None, *, lengths: int | Tensor | None = None,
               max_length: int = 1024) -> Sequences:
        """``n`` draws as :class:`~ebms.sequences.Sequences` on the table's device (padding 0).

        Args:
            lengths: ``None`` (``end=True`` only): run until ``</s>``; an int or a ``(n,)`` integer
                tensor: draw from :math:`p(y \\mid |y| = L)` (required when ``end=False``).
            max_length: with ``lengths=None``, the longest draw allowed; a draw still running after
                it raises (no silent truncation).
        """
        check_int(n, "n", minimum=1)
        if not self.normalised:
            raise ValueError("sample: this table is not normalised (e.g. NGram.zeros scores sequences, it is not "
                             "a distribution); fit or normalise it first")
        if lengths is None:
            if not self.end:
                raise ValueError("lengths: this n-gram is conditional on length (end=False); pass lengths=")
            return self._sample_to_end(n, check_int(max_length, "max_length", minimum=0), generator)
        return self._sample_lengths(self._as_lengths(lengths, n), generator)

    # --- sampling -----------------------------------------------------------------------------
    def _as_lengths(self, lengths: int | Tensor, n: int) -> Tensor:
        dev = self.table.device
        if isinstance(lengths, Tensor):
            if lengths.dtype.is_floating_point or lengths.dtype == torch.bool or tuple(lengths.shape) != (n,):
                raise ValueError(f"lengths: expected an int or an integer tensor ({n},); got {lengths.dtype} "
                                 f"{tuple(lengths.shape)}")
            if n and int(lengths.min()) < 0:
                raise ValueError(f"lengths: expected values >= 0; got min {int(lengths.min())}")
            return lengths.to(dev, torch.long)
        return torch.full((n,), check_int(lengths, "lengths", minimum=0), dtype=torch.long, device=dev)

    def _step_tables(self) -> tuple[Tensor, Tensor, int]:
        """Table ``(H, V)`` by history index, next-history index ``(H, V)``, and the ``<s>...<s>`` index."""
        V, H = self.vocab_size, self.vocab_size ** (self.order - 1)
        dev = self.table.device
        nxt = (torch.arange(H, device=dev).unsqueeze(1) * V + torch.arange(V, device=dev)) % H
        start = sum(self.boundary * V**j for j in range(self.order - 1))
        return self.table.reshape(H, V), nxt, start

    def _sample_to_end(self, n: int, max_length: int, generator: torch.Generator | None) -> Sequences:
        rows, nxt, start = self._step_tables()
        dev, b = rows.device, self.boundary
        tokens = torch.zeros(n, max_length, dtype=torch.long, device=dev)
        lengths = torch.zeros(n, dtype=torch.long, device=dev)
        h = torch.full((n,), start, dtype=torch.long, device=dev)
        alive = torch.ones(n, dtype=torch.bool, device=dev)
        for t in range(max_length + 1):
            w = sample_categorical(rows[h], generator)
            ended = alive & (w == b)
            lengths = torch.where(ended, t, lengths)
            alive = alive & ~ended
            if not bool(alive.any()):
                break
            if t == max_length:
                raise ValueError(f"max_length: {int(alive.sum())} of {n} draws had not ended after {max_length} "
                                 "tokens; raise max_length or sample with lengths=")
            tokens[:, t] = torch.where(alive, w, 0)
            h = torch.where(alive, nxt[h, w], h)
        return Sequences(tokens[:, : int(lengths.max())], lengths, validate=False)

    def _completions(self, rows: Tensor, nxt: Tensor, longest: int) -> Tensor:
        """``gamma[r, h]``: log-mass of exactly ``r`` more tokens then ``</s>`` from history ``h``, ``(longest+1, H)``."""
        tok = rows.double().clone()
        tok[:, self.boundary] = -math.inf
        gamma = [rows[:, self.boundary].double()]
        for _ in range(longest):
            gamma.append(torch.logsumexp(tok + gamma[-1][nxt], 1))
        return torch.stack(gamma)

    def _sample_lengths(self, lengths: Tensor, generator: torch.Generator | None) -> Sequences:
        rows, nxt, start = self._step_tables()
        n, longest = lengths.shape[0], int(lengths.max())
        gamma = self._completions(rows, nxt, longest) if self.end else None
        if gamma is not None:
            impossible = torch.isinf(gamma[lengths, start])
            if bool(impossible.any()):
                raise ValueError(f"lengths: the model gives length {int(lengths[impossible][0])} probability 0")
        if self.order == 1:  # no history: given the length, every position draws from the same law
            return self._sample_unigram_lengths(rows[start], lengths, generator)
        tokens = torch.zeros(n, longest, dtype=torch.long, device=rows.device)
        h = torch.full((n,), start, dtype=torch.long, device=rows.device)
        for t in range(longest):
            logits = rows[h].double()
            if gamma is not None:
                logits = logits + gamma[(lengths - t - 1).clamp(min=0).unsqueeze(1), nxt[h]]
            logits[:, self.boundary] = -math.inf
            w = sample_categorical(logits, generator)
            active = t < lengths
            tokens[:, t] = torch.where(active, w, 0)
            h = torch.where(active, nxt[h, w], h)
        return Sequences(tokens, lengths, validate=False)

    def _sample_unigram_lengths(self, row: Tensor, lengths: Tensor, generator: torch.Generator | None) -> Sequences:
        """Order 1 with given lengths: every token i.i.d. from ``row`` without the boundary (the completion
        mass of the remaining length is the same for every token), one uniform per position drawn
        position-major as the general loop draws them; one CDF instead of an ``(n, V)`` row per position."""
        n, longest = lengths.shape[0], int(lengths.max())
        logits = row.double().clone()
        logits[self.boundary] = -math.inf
        cdf = torch.softmax(logits, -1).cumsum(-1)
        u = torch.rand((longest, n, 1), generator=generator, device=row.device, dtype=cdf.dtype)
        w = torch.searchsorted(cdf, (u * cdf[-1]).view(longest, n), right=True).clamp_(max=self.vocab_size - 1)
        active = torch.arange(longest, device=row.device) < lengths.unsqueeze(1)
        return Sequences(torch.where(active, w.t(), 0), lengths, validate=False)

    def extra_repr(self) -> str:
        return f"vocab_size={self.vocab_size}, order={self.order}, boundary={self.boundary}, end={self.end}"


def _as_sequences(corpus: Sequences | Sequence[Sequence[int]], name: str) -> Sequences:
    if isinstance(corpus, Sequences):
        seqs = corpus
    elif isinstance(corpus, (str, bytes)) or not isinstance(corpus, Sequence):
        raise TypeError(f"{name}: expected an ebms.sequences.Sequences or a list of token-id lists; "
                        f"got {type(corpus).__name__}")
    else:
        try:
            rows = [token_id_row(s, i) for i, s in enumerate(corpus)]  # a float id is refused, never truncated
        except TypeError as err:
            raise TypeError(f"{name}: {err}") from None
        width = max((len(r) for r in rows), default=0)
        tokens = torch.zeros(len(rows), width, dtype=torch.long)
        for i, r in enumerate(rows):
            tokens[i, : len(r)] = torch.tensor(r, dtype=torch.long)
        seqs = Sequences(tokens, torch.tensor([len(r) for r in rows], dtype=torch.long), validate=False)
    if seqs.batch_size == 0:
        raise ValueError(f"{name}: expected at least one sequence; got an empty corpus")
    return seqs


def _windows(seqs: Sequences, order: int, boundary: int, end: bool) -> tuple[Tensor, Tensor]:
    """``(B, T+1, n)`` (history, outcome) windows with padding read as the boundary, and the ``(B, T+1)``
    mask of the positions that count: the tokens, plus ``</s>`` at position ``L`` with ``end``."""
    B, T = seqs.tokens.shape
    dev = seqs.device
    y = seqs.tokens.masked_fill(~seqs.mask(), boundary)
    padded = torch.cat([y.new_full((B, order - 1), boundary), y, y.new_full((B, 1), boundary)], 1)
    keep = torch.arange(T + 1, device=dev) < (seqs.lengths + int(end)).unsqueeze(1)
    return padded.unfold(1, order, 1), keep
