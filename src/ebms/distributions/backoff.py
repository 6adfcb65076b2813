r"""Sparse backoff n-gram language models for real vocabularies (PTB: 10k words, order 5).

A :class:`BackoffNGram` stores, for each order ``m``, only the ``m``-grams seen in training, with
:math:`\log p(w \mid h)` and the backoff weight :math:`\log b(h)` of each row used as a context.
The probability of ``w`` after the history ``h = w_{i-n+1} .. w_{i-1}`` (ARPA semantics, as SRILM
and KenLM read it) is

.. math::  p(w \mid h) = \begin{cases} P(h w) & h w \text{ stored} \\
                                       b(h)\, p(w \mid h') & \text{otherwise} \end{cases}

with ``h'`` the history without its oldest word and :math:`b(h) = 1` for an unstored ``h``. Ids
follow :class:`~ebms.distributions.NGram`'s ``boundary=0`` contract: id 0 is ``<s>`` in histories
and ``</s>`` as an outcome, id 1 is ``<unk>`` (an ordinary word), ``V = vocab_size`` outcomes.
Sentences are read as ``<s> y_1 .. y_L </s>``; a history reaching before the start is cut at
``<s>`` (padding with ``n - 1`` boundaries gives the same numbers, as no stored n-gram holds two).

* :meth:`BackoffNGram.fit` estimates interpolated modified Kneser–Ney (default), Kneser–Ney,
  Witten–Bell or add-k tables, optionally pruned by count (see :mod:`ebms.distributions._kneser_ney`
  for the formulas); every distribution sums to 1 over the ``V`` outcomes;
* :meth:`to_arpa` / :meth:`from_arpa` move models to and from SRILM and KenLM;
* scoring is vectorised: the row of every n-gram of a batch is looked up by its int64 key
  ``parent_row * V + w`` in a cuckoo hash table of each order (:mod:`ebms.distributions._backoff_hash`:
  two reads per key, built once per model on the first call, about ``2.5 N`` int32 slots per
  order), only where the ``(m-1)``-gram is stored, and the backoff sums are tensor ops over the
  packed sentences. Cost ``O(tokens n)``; memory ``O(tokens n)``. The same numbers as the binary
  search in the sorted keys it replaced (``tests/distributions/test_backoff_fast.py``).

Differences from the dense :class:`~ebms.distributions.NGram` with the same smoothing: that one
treats ``<s> <s>`` (the padded history of the first word when ``n >= 3``) as a context of its own
and its add-k does not back off (an unseen history is uniform); the two agree on every position
whose history holds at most one ``<s>`` (``t >= n - 2``) for Witten–Bell, and on the seen n-grams
and on unigrams for add-k.
"""

from __future__ import annotations

import math
import os
from collections.abc import Sequence

import torch
from torch import Tensor

from ebms._checks import check_choice, check_int, check_positive
from ebms.distributions import _arpa, _backoff_hash, _backoff_sampling, _kneser_ney
from ebms.distributions import _backoff_tables as _tables
from ebms.distributions._base import Distribution
from ebms.distributions.ngram import _as_sequences
from ebms.errors import DataError
from ebms.sequences import Sequences

__all__ = ["BackoffNGram"]

#: the default ``tolerance`` of :meth:`BackoffNGram.from_arpa` and the constructor: the largest
#: ``|sum - 1|`` of a history's next-word probabilities.
TOLERANCE = 1e-3


class BackoffNGram(Distribution):
    """Sparse backoff n-gram over token sequences (see the module docstring).

    Args:
        vocab_size: ``V``, the number of ids (id 0 is ``<s>``/``</s>``).
        ngrams: per order ``m = 1..n``, an ``(N_m, m)`` int64 tensor of n-grams (order 1: every
            id exactly once); id 0 only first (``<s>``) or last (``</s>``); every n-gram's
            context (its first ``m - 1`` ids) must be an ``(m-1)``-gram of the table.
        log_probs: per order, ``(N_m,)`` natural-log probabilities (row 0 of order 1: ``</s>``).
        backoffs: per order, ``(N_m,)`` natural-log backoff weights (row 0 of order 1: ``<s>``);
            ``None``: all 0.
        tolerance: the tables must be a law: no log-probability above 0, and after every history
            (and for the unigrams) the ``V`` outcome probabilities, backoff included, sum to 1
            within ``tolerance`` (default 1e-3); ``None`` skips the sums (a score table).

    Example:
        >>> from ebms.sequences import Sequences
        >>> corpus = Sequences.from_lists([[2, 3], [2, 2, 3], [3], [2, 4, 3]])
        >>> lm = BackoffNGram.fit(corpus, vocab_size=5, order=2, discounts=[0.5, 0.5])
        >>> lm.next_log_probs(Sequences.from_lists([[2]])).exp().sum().item()  # doctest: +ELLIPSIS
        1.0...

    Attributes:
        vocab_size, order: ``V`` and ``n``.
        discounts: Kneser–Ney's ``[D1, D2, D3+]`` per order used by :meth:`fit` (else ``None``).
        words: the vocabulary read by :meth:`from_arpa` (else ``None``).
    """

    discounts: list[list[float]] | None = None
    words: list[str] | None = None
    log_probs_1: Tensor  # (V,) the unigram table; the other tables are buffers named <kind>_<m>

    def __init__(self, vocab_size: int, ngrams: Sequence[Tensor], log_probs: Sequence[Tensor],
                 backoffs: Sequence[Tensor] | None = None, *, tolerance: float | None = TOLERANCE) -> None:
        super().__init__()
        check_int(vocab_size, "vocab_size", minimum=2)
        tolerance = _check_tolerance(tolerance)
        backoffs = _tables.check_rows(vocab_size, ngrams, log_probs, backoffs)
        try:
            tables, given = _tables.tables_from_ngrams(vocab_size, ngrams, [t.double() for t in log_probs],
                                                       [t.double() for t in backoffs])
        except _tables.TableError as err:
            raise ValueError(f"ngrams[{err.order - 1}] row {err.row}: {err}") from None
        bad = None if tolerance is None else _tables.unnormalised(tables, vocab_size, tolerance)
        if bad is not None:
            where = "" if bad.order == 0 else f"ngrams[{bad.order - 1}] row {int(given[bad.order - 1][bad.row])}: "
            raise ValueError(f"log_probs, backoffs: {where}{_tables.describe(bad, tables, vocab_size, None)}; "
                             f"expected 1 within tolerance={tolerance:g} (pass tolerance=None to skip this check)")
        self._install(vocab_size, tables)

    def _install(self, vocab_size: int, tables: _kneser_ney.Tables) -> None:
        self.vocab_size, self.order = vocab_size, len(tables.log_probs)
        for m in range(1, self.order + 1):
            if m > 1:
                self.register_buffer(f"keys_{m}", tables.keys[m - 1])
            self.register_buffer(f"log_probs_{m}", tables.log_probs[m - 1])
            self.register_buffer(f"backoffs_{m}", tables.backoffs[m - 1])

    @classmethod
    def _from_tables(cls, vocab_size: int, tables: _kneser_ney.Tables) -> BackoffNGram:
        model = cls.__new__(cls)
        Distribution.__init__(model)
        model._install(vocab_size, tables)
        return model

    @classmethod
    def uniform(cls, vocab_size: int, order: int) -> BackoffNGram:
        """Every one of the ``V`` outcomes at ``log(1/V)`` after any history, no n-gram stored above the unigrams:
        a model of ``order`` to load a saved one into (``load_state_dict`` takes the saved tables whatever
        their sizes, e.g. a trained run's checkpoint without the text it was counted on)."""
        check_int(vocab_size, "vocab_size", minimum=2)
        check_int(order, "order", minimum=1)
        empty = torch.zeros(0, dtype=torch.float64)
        tables = _kneser_ney.Tables([None, *(torch.zeros(0, dtype=torch.long) for _ in range(order - 1))],
                                    [torch.full((vocab_size,), -math.log(vocab_size), dtype=torch.float64),
                                     *(empty for _ in range(order - 1))],
                                    [torch.zeros(vocab_size, dtype=torch.float64), *(empty for _ in range(order - 1))])
        return cls._from_tables(vocab_size, tables)

    def _load_from_state_dict(self, state_dict, prefix, *args, **kwargs) -> None:  # type: ignore[no-untyped-def]
        # the tables above the unigrams hold the n-grams seen in training, so their sizes are the saved model's:
        # take them (same dtype) before the copy; V and the order stay checked (order 1's size, the buffer names)
        for m in range(2, self.order + 1):
            for kind in ("keys", "log_probs", "backoffs"):
                name, have = f"{kind}_{m}", self._table(kind, m)
                new = state_dict.get(prefix + name)
                if isinstance(new, Tensor) and new.dim() == have.dim() == 1 and new.shape != have.shape:
                    setattr(self, name, torch.empty(new.shape, dtype=have.dtype, device=have.device))
        self.__dict__.pop("_sampler_cache", None)
        self.__dict__.pop("_hash_cache", None)
        super()._load_from_state_dict(state_dict, prefix, *args, **kwargs)

    def _tables(self) -> _kneser_ney.Tables:
        t = _kneser_ney.Tables([None], [], [])
        for m in range(1, self.order + 1):
            if m > 1:
                t.keys.append(self._table("keys", m))
            t.log_probs.append(self._table("log_probs", m))
            t.backoffs.append(self._table("backoffs", m))
        return t

    @property
    def num_ngrams(self) -> tuple[int, ...]:
        """Stored n-grams per order (order 1: ``V``, ``</s>`` included, ``<s>`` not)."""
        return tuple(int(self._table("log_probs", m).numel()) for m in range(1, self.order + 1))

    def ngrams(self, order: int) -> tuple[Tensor, Tensor, Tensor]:
        """``(ids (N, order), log_probs (N,), backoffs (N,))`` of one order, in table order."""
        check_int(order, "order", minimum=1)
        if order > self.order:
            raise ValueError(f"order: expected at most the model's order {self.order}; got {order}")
        t = self._tables()
        return _tables.ngram_ids(t, self.vocab_size)[order - 1], t.log_probs[order - 1], t.backoffs[order - 1]

    # --- construction -------------------------------------------------------------------------
    @classmethod
    def fit(cls, corpus: Sequences | Sequence[Sequence[int]], vocab_size: int, order: int = 3, *,
            smoothing: str = "modified_kneser_ney", discounts: Sequence[float | Sequence[float] | None] | None = None,
            k: float = 1.0, prune: Sequence[int] | None = None) -> BackoffNGram:
        """Count ``corpus`` (token ids in ``[1, V - 1]``) and estimate the tables.

        Args:
            corpus: a :class:`~ebms.sequences.Sequences` or lists of token ids.
            vocab_size: ``V``; ids never seen get their share of the unigram smoothing mass.
            order: ``n >= 1``.
            smoothing: ``"modified_kneser_ney"`` (interpolated, three discounts per order, as SRILM's
                ``-kndiscount -interpolate`` and KenLM's ``lmplz``), ``"kneser_ney"`` (one
                discount per order), ``"witten_bell"`` (interpolated) or ``"add_k"`` (backoff).
            discounts: Kneser–Ney only: one entry per order, unigrams first, each one number
                (every count), ``(D1, D2, D3+)`` (modified) with ``0 <= D_k <= k``, or ``None``
                to estimate that order's from the counts-of-counts (Chen & Goodman, 1998, eq. 26);
                ``discounts=None`` estimates every order. An estimate needs n-grams of adjusted
                count 1, 2 and 3 at its order, which a tiny corpus, or a small vocabulary whose
                n-grams are all frequent (characters), lacks: then the error names the order and
                suggests values (KenLM's fallback ``(0.5, 1.0, 1.5)``).
            k: add-k's pseudo-count (``> 0``).
            prune: raw-count thresholds per order, unigrams first (``prune[0] = 0``,
                non-decreasing; a shorter list repeats its last value): an ``m``-gram seen at most
                ``prune[m-1]`` times is dropped and its mass moves to its context's backoff
                weight (KenLM's ``--prune``). Normalisation is kept.

        Raises:
            ValueError: a bad order, smoothing name, discounts, prune list or token id; discounts
                that cannot be estimated.
        """
        check_int(vocab_size, "vocab_size", minimum=2)
        check_int(order, "order", minimum=1)
        check_choice(smoothing, "smoothing", _kneser_ney.SMOOTHINGS)
        k = check_positive(k, "k")
        if discounts is not None and smoothing not in ("modified_kneser_ney", "kneser_ney"):
            raise ValueError(f"discounts: only Kneser-Ney smoothing takes discounts; got discounts with "
                             f"smoothing={smoothing!r}")
        seqs = _as_sequences(corpus, "corpus")
        seqs.check_vocabulary(vocab_size, "corpus", boundary=0, where="sequence")
        tables, used = _kneser_ney.estimate(seqs, vocab_size, order, smoothing, discounts, k, prune)
        model = cls._from_tables(vocab_size, tables)
        model.discounts = used
        return model

    @classmethod
    def from_arpa(cls, path: str | os.PathLike[str], vocab: Sequence[str] | None = None, *,
                  tolerance: float | None = TOLERANCE) -> BackoffNGram:
        """Read an ARPA file (log10 in the file, natural logs inside; UTF-8, optionally gzip, bzip2 or
        xz compressed; ``<U+hhhh>`` fields are whitespace tokens, see :meth:`to_arpa`).

        The model must be a law: no probability above 1, and after every history (and for the
        unigrams) the probabilities of the ``V`` outcomes, backoff included, must sum to 1 within
        ``tolerance`` (checked with one lookup per stored n-gram).

        Args:
            path: the file.
            vocab: the id -> word list (``vocab[0] = "</s>"``; an :class:`ebms.data.text.Vocabulary`
                works too): every word must have a unigram entry and every word of the file must
                be in it. ``None``: the file's own, ``</s>``, ``<unk>`` (when listed), then the
                unigrams in file order; it is kept as ``model.words``.
            tolerance: the largest accepted ``|sum - 1|`` (default 1e-3: files with at least four
                significant digits pass); ``None`` skips the check (a hand-made or deficient file).

        Raises:
            FileNotFoundError: the file cannot be opened.
            ebms.errors.DataError: a malformed or unnormalised file, naming the file and the line
                (the byte offset of a NUL byte or of bytes that are not UTF-8).
            ValueError: a bad ``vocab`` or ``tolerance``.
        """
        tolerance = _check_tolerance(tolerance)
        words = _arpa.check_words(vocab, None, "vocab") if vocab is not None else None
        where = os.fspath(path)
        words, ngrams, lps, bows, lines, start_line = _arpa.read_arpa(path, words)
        try:
            tables, given = _tables.tables_from_ngrams(len(words), ngrams, lps, bows)
        except _tables.TableError as err:
            raise DataError(f"{where}:{lines[err.order - 1][err.row]}: {err}") from None
        bad = None if tolerance is None else _tables.unnormalised(tables, len(words), tolerance)
        if bad is not None:
            line = 0 if bad.order == 0 else (start_line if bad.order == 1 and bad.row == 0 else
                                             lines[bad.order - 1][int(given[bad.order - 1][bad.row])])
            raise DataError(f"{where}{f':{line}' if line else ''}: {_tables.describe(bad, tables, len(words), words)}"
                            f"; expected 1 within tolerance={tolerance:g}: not a normalised backoff model (pass "
                            "tolerance=None to read it anyway)")
        model = cls._from_tables(len(words), tables)
        model.words = words
        return model

    def to_arpa(self, path: str | os.PathLike[str], words: Sequence[str], *, digits: int = 7) -> None:
        """Write the model as an ARPA file that KenLM and SRILM read.

        A token holding whitespace (the space of a character-level model) is written with each
        whitespace character as ``<U+hhhh>``, its code point in hex: the space token is the word
        ``<U+0020>`` (query KenLM with the same spelling); :meth:`from_arpa` reads it back as the
        space.

        Args:
            path: the file to write.
            words: the id -> word list (``V`` distinct non-empty strings, ``words[0] = "</s>"``,
                no ``<s>``, none already holding a ``<U+hhhh>`` spelling of whitespace), e.g.
                ``Vocabulary.tokens``.
            digits: significant digits of each log10 value (7 matches KenLM's float32; fewer than
                4 can leave sums that :meth:`from_arpa`'s default ``tolerance`` refuses).
        """
        check_int(digits, "digits", minimum=1)
        _arpa.write_arpa(path, _arpa.check_words(words, self.vocab_size), self._tables(), digits)

    # --- scoring ------------------------------------------------------------------------------
    def _lookup(self, m: int, query: Tensor) -> tuple[Tensor, Tensor]:
        """``(found, row)`` of the order-``m`` keys ``query`` (1-D), from the cached cuckoo tables
        (:mod:`ebms.distributions._backoff_hash`): the rows :func:`_tables.find` returns where found."""
        return _backoff_hash.lookup(self._table("keys", m), self._hash_tables()[m - 2], query)

    def _hash_tables(self) -> list[_backoff_hash.CuckooTable | None]:
        """The cuckoo tables of orders 2..n, cached until a buffer changes (as the sampler's)."""
        cached = self.__dict__.get("_hash_cache")
        fingerprint = _backoff_sampling.fingerprint(self)
        if cached is None or cached[0] != fingerprint:
            with torch.no_grad():
                cached = (fingerprint, [_backoff_hash.build(self._table("keys", m)) for m in range(2, self.order + 1)])
            self.__dict__["_hash_cache"] = cached
        tables: list[_backoff_hash.CuckooTable | None] = cached[1]
        return tables

    def _walk(self, z: Tensor) -> list[Tensor]:
        """Rows of the ``m``-gram starting at each position of ``z (B, K)`` (``-1``: not stored or
        crossing a ``-1``), ``m = 1..n``; ``rows[m-1]`` has shape ``(B, K - m + 1)``."""
        rows = [z]
        for m in range(2, self.order + 1):
            prev, nxt = rows[-1][:, :-1], z[:, m - 1 :]
            live = (prev >= 0) & (nxt >= 0)  # only the windows whose prefix is stored are searched
            row = torch.full_like(prev, -1)
            found, at = self._lookup(m, prev[live] * self.vocab_size + nxt[live])
            row[live] = torch.where(found, at, -1)
            rows.append(row)
        return rows

    def _table(self, kind: str, m: int) -> Tensor:
        """The buffer ``<kind>_<m>`` (``kind``: keys, log_probs or backoffs)."""
        table: Tensor = getattr(self, f"{kind}_{m}")
        return table

    def _gather(self, m: int, kind: str, rows: Tensor, missing: float) -> Tensor:
        """``table[rows]`` of order ``m`` (``kind``: log_probs or backoffs), ``missing`` where ``rows < 0``."""
        table = self._table(kind, m)
        if table.numel() == 0:
            return torch.full(rows.shape, missing, dtype=table.dtype, device=rows.device)
        return torch.where(rows >= 0, table[rows.clamp(min=0)], missing)

    def token_log_probs(self, x: Sequences) -> Tensor:
        """``(B, T + 1)``: ``log p(y_t | y_<t)`` at ``t < L``, ``log p(</s> | y)`` at ``t = L``, 0 after.

        Float64 (the tables' dtype) on ``x``'s device; the work runs on the model's device over the
        packed sentences (padding costs nothing). One host sync (the token check), one more for
        the packed size.

        The sentences are laid end to end, each as ``n - 2`` marks (``-1``), ``<s>``, its words and
        ``</s>``. The ``m``-grams starting at a position are looked up order by order, only where
        the ``(m-1)``-gram is stored (a cuckoo table per order, built on the first call and kept
        until a buffer changes); each stored ``m``-gram gives the log-probability of the word it
        ends at (the longest wins) and the backoff weight of the word after it, which counts when
        that word's longest stored n-gram is at most ``m`` long.
        """
        x = Sequences.coerce(x, name="x", pairs=False)
        dev, dtype = self.log_probs_1.device, self.log_probs_1.dtype
        seq = x.to(dev)
        n, V, (B, T) = self.order, self.vocab_size, seq.tokens.shape
        if B == 0:
            return torch.zeros(0, T + 1, dtype=dtype, device=x.device)
        lengths, lead = seq.lengths, n - 1
        kept = (torch.arange(T, device=dev) < lengths.unsqueeze(1)).view(-1).nonzero().squeeze(1)
        words = seq.tokens.reshape(-1).index_select(0, kept)  # the real tokens, one sentence after another
        if words.numel() and bool(((words < 1) | (words >= V)).any()):
            seq.check_vocabulary(V, "x", boundary=0, where="sequence")  # raises, naming the first one
        size = lengths + n  # marks, <s>, words, </s>
        start = torch.cumsum(size, 0) - size
        sizes = torch.stack([size.sum(), lengths.sum()]).tolist()
        P, A = sizes[0], sizes[1] + B  # positions, outcomes (the words and each </s>)
        sentence = torch.repeat_interleave(torch.arange(B, device=dev), lengths + 1, output_size=A)
        outcomes = torch.arange(A, device=dev)
        at = outcomes + (sentence + 1) * lead  # position of each outcome
        flat = torch.zeros(P + n, dtype=torch.long, device=dev)  # + n marks: no window runs off the end
        flat[P:] = -1
        if n > 2:
            flat.index_fill_(0, (start.unsqueeze(1) + torch.arange(n - 2, device=dev)).view(-1), -1)
        shift = start + lead - torch.arange(B, device=dev) * T  # kept (b * T + t) -> position
        flat.index_copy_(0, kept + torch.repeat_interleave(shift, lengths, output_size=words.numel()), words)
        outcome_at = torch.full((P + n + 1,), A, dtype=torch.long, device=dev)  # A: not an outcome (a spare slot)
        outcome_at.index_copy_(0, at, outcomes)
        # best: log p of the longest stored n-gram ending at each outcome, longest: its order
        best = torch.zeros(A + 1, dtype=dtype, device=dev)
        best[:A] = self.log_probs_1.index_select(0, flat.index_select(0, at))
        longest = torch.ones(A + 1, dtype=torch.long, device=dev)
        start_at = (flat[:P] >= 0).nonzero().squeeze(1)  # the stored m-grams: start, row
        stored = [(start_at, flat.index_select(0, start_at))]
        for m in range(2, n + 1):
            prev_at, prev_row = stored[-1]
            nxt = flat.index_select(0, prev_at + m - 1)
            found, row = self._lookup(m, torch.where(nxt >= 0, prev_row * V + nxt, -1))
            hit = found.nonzero().squeeze(1)
            start_at, row = prev_at.index_select(0, hit), row.index_select(0, hit)
            stored.append((start_at, row))
            ends = outcome_at.index_select(0, start_at + m - 1)
            best.index_copy_(0, ends, self._table("log_probs", m).index_select(0, row))
            longest.index_fill_(0, ends, m)
        # tail: the backoff weights of the contexts longer than the n-gram used, longest first
        tail = torch.zeros(A + 1, dtype=dtype, device=dev)
        for j in range(n - 1, 0, -1):
            start_at, row = stored[j - 1]
            after = outcome_at.index_select(0, start_at + j)
            weight = self._table("backoffs", j).index_select(0, row)
            tail.index_add_(0, after, torch.where(longest.index_select(0, after) <= j, weight, 0.0))
        out = best[:A] + tail[:A]
        keep = torch.arange(T + 1, device=dev) <= lengths.unsqueeze(1)
        return torch.zeros(B, T + 1, dtype=dtype, device=dev).masked_scatter_(keep, out).to(x.device)

    def log_prob(self, x: Sequences) -> Tensor:
        """``log p(y)`` of each sentence, ``</s>`` included, ``(B,)`` (float64 unless the tables were converted)."""
        return self.token_log_probs(x).sum(-1)

    def next_log_probs(self, prefixes: Sequences) -> Tensor:
        """``(B, V)``: :math:`\\log p(w \\mid <s>\\, y)` of every outcome after each prefix (column 0: ``</s>``)."""
        seq = self._checked(prefixes, "prefixes").to(self.log_probs_1.device)
        n, B = self.order, seq.batch_size
        y = seq.tokens.masked_fill(~seq.mask(), 0)
        hist = y.new_zeros(B, 0)
        if n > 1:  # the last n - 1 symbols of [-1 ... -1, <s>, y_1 .. y_L]
            full = torch.cat([y.new_full((B, n - 2), -1), y.new_zeros(B, 1), y], 1)
            hist = full.gather(1, seq.lengths.unsqueeze(1) + torch.arange(n - 1, device=y.device))
        return self._next_from_history(hist).to(prefixes.device)

    def _next_from_history(self, hist: Tensor) -> Tensor:
        """``(B, V)`` next-outcome log-probabilities after the last ``n - 1`` symbols ``hist`` (``-1``: none)."""
        n, V, B = self.order, self.vocab_size, hist.shape[0]
        rows = self._walk(hist)
        ctx = [rows[j - 1][:, n - 1 - j] for j in range(1, n)]  # the j-gram ending at the last symbol
        bows = [self._gather(j, "backoffs", c, 0.0) for j, c in enumerate(ctx, 1)]
        tails = [torch.zeros(B, dtype=self.log_probs_1.dtype, device=hist.device)]
        for bow in reversed(bows):  # tails[m-1]: the backoff weights of the contexts longer than m - 1
            tails.insert(0, tails[0] + bow)
        out = self.log_probs_1.unsqueeze(0) + tails[0].unsqueeze(1)
        for m in range(2, n + 1):
            keys, c = self._table("keys", m), ctx[m - 2]
            lo = torch.where(c >= 0, torch.searchsorted(keys, c * V), 0)
            hi = torch.where(c >= 0, torch.searchsorted(keys, (c + 1) * V), 0)
            sizes = hi - lo
            b = torch.repeat_interleave(torch.arange(B, device=hist.device), sizes)
            at = lo[b] + torch.arange(b.numel(), device=hist.device) - (torch.cumsum(sizes, 0) - sizes)[b]
            out[b, keys[at] - torch.div(keys[at], V, rounding_mode="floor") * V] = (
                self._table("log_probs", m)[at] + tails[m - 1][b])
        return out

    def _checked(self, x: Sequences, name: str) -> Sequences:
        x = Sequences.coerce(x, name=name, pairs=False)
        return x.check_vocabulary(self.vocab_size, name, boundary=0, where="sequence")

    # --- sampling -----------------------------------------------------------------------------
    def sample(self, n: int, generator: torch.Generator | None = None, *, max_length: int = 1024) -> Sequences:
        """``n`` ancestral draws (until ``</s>``) as :class:`~ebms.sequences.Sequences`, padding 0.

        Each token comes from the full next-word law :math:`p(w \\mid h)` (each row normalised), drawn
        without ``V``-wide rows: from the longest context down, the listed words with probability
        their share of the row's mass, else the shorter history's law restricted to the unlisted
        words by rejection (exact; see :mod:`ebms.distributions._backoff_sampling`). Cost about
        ``O(n log N)`` per token and try, vectorised over the draws; the tables (a few arrays as
        long as the stored n-grams) are built on the first call and rebuilt when a buffer changes
        (in place, by ``load_state_dict`` or ``.to``). Randomness only from ``generator``. A draw
        still running after ``max_length`` tokens raises (naming how many did).
        """
        check_int(n, "n", minimum=1)
        check_int(max_length, "max_length", minimum=0)
        return _backoff_sampling.draw(self, self._sampler_tables(), n, generator, max_length)

    def _sampler_tables(self) -> _backoff_sampling.SamplerTables:
        """The sampler's tables, cached until a buffer changes."""
        cached: _backoff_sampling.SamplerTables | None = self.__dict__.get("_sampler_cache")
        if cached is None or cached.fingerprint != _backoff_sampling.fingerprint(self):
            with torch.no_grad():
                cached = _backoff_sampling.build(self)
            self.__dict__["_sampler_cache"] = cached
        return cached

    def extra_repr(self) -> str:
        return f"vocab_size={self.vocab_size}, order={self.order}, ngrams={list(self.num_ngrams)}"


def _check_tolerance(tolerance: object) -> float | None:
    """``None`` or a finite number >= 0."""
    return None if tolerance is None else check_positive(tolerance, "tolerance", allow_zero=True)

