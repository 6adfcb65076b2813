r"""Sorted n-gram tables of :class:`~ebms.distributions.BackoffNGram`: checks, keys, normalisation (private).

Order ``m`` is one table of ``N_m`` rows sorted by the int64 key ``parent * V + w`` (``parent``: the
row of the ``(m-1)``-gram prefix in the table of order ``m - 1``; order 1 is dense, row = id, and
row 0 is ``</s>`` as an outcome and ``<s>`` as a context).

Normalisation (:func:`unnormalised`). After a history ``h`` (a stored row of order ``< n`` that can be
one: not ending in ``</s>``) the backoff law gives

.. math::  \sum_w p(w \mid h) = \sum_{w \in S(h)} P(h w)
           + b(h) \Big(1 - \sum_{w \in S(h)} p(w \mid h')\Big),

with ``S(h)`` the stored successors of ``h`` and ``h'`` the history without its oldest word, so
each history's total needs only its own successors: one backoff lookup per stored n-gram,
``O(N n^2 log N)`` for ``N`` stored n-grams, no ``(contexts, V)`` table.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch import Tensor

from ebms.distributions._kneser_ney import Tables

#: the largest natural-log probability accepted in a table: ``p <= 1 + 1e-6`` (float32 rounding of
#: a probability of 1 written by another tool), so that no entry says ``p > 1``.
MAX_LOG_PROB = 1e-6


class TableError(ValueError):
    """A bad n-gram row: ``order`` (1-based) and ``row`` (in the order given) locate it."""

    def __init__(self, order: int, row: int, message: str) -> None:
        super().__init__(message)
        self.order, self.row = order, row


@dataclass(frozen=True)
class Unnormalised:
    """A history whose next-word probabilities do not sum to 1.

    ``order`` is the history's length (0: the unigram law, ``row = -1``), ``row`` its row in the
    sorted table, ``total`` the sum, ``stored`` the part from its stored successors.
    """

    order: int
    row: int
    total: float
    stored: float


def check_rows(vocab_size: int, ngrams: object, log_probs: object, backoffs: object) -> list[Tensor]:
    """Types and shapes of :class:`~ebms.distributions.BackoffNGram`'s constructor arguments;
    returns the backoffs (zeros when ``None``). A log-probability above :data:`MAX_LOG_PROB` (a
    probability above 1) raises."""
    order = len(ngrams) if isinstance(ngrams, Sequence) else 0
    if order < 1 or not isinstance(log_probs, Sequence) or len(log_probs) != order:
        got = len(log_probs) if isinstance(log_probs, Sequence) else log_probs
        raise ValueError(f"ngrams, log_probs: expected one tensor per order (at least 1, the same number); got "
                         f"{order} and {got!r}")
    assert isinstance(ngrams, Sequence)
    if backoffs is None:
        backoffs = [torch.zeros(getattr(lp, "shape", (0,))[:1], dtype=torch.float64) for lp in log_probs]
    if not isinstance(backoffs, Sequence) or len(backoffs) != order:
        raise ValueError(f"backoffs: expected one tensor per order ({order}) or None; got {backoffs!r}")
    for m, (g, lp, bo) in enumerate(zip(ngrams, log_probs, backoffs), 1):
        if not isinstance(g, Tensor) or g.dtype != torch.long or g.dim() != 2 or g.shape[1] != m:
            raise ValueError(f"ngrams[{m - 1}]: expected an int64 tensor (N, {m}); got "
                             f"{getattr(g, 'dtype', type(g).__name__)} {tuple(getattr(g, 'shape', ()))}")
        if g.numel() and (int(g.min()) < 0 or int(g.max()) >= vocab_size):
            raise ValueError(f"ngrams[{m - 1}]: expected ids in [0, {vocab_size - 1}]; got {int(g.min())}..{int(g.max())}")
        for name, t in ((f"log_probs[{m - 1}]", lp), (f"backoffs[{m - 1}]", bo)):
            if not isinstance(t, Tensor) or not t.is_floating_point() or tuple(t.shape) != (g.shape[0],):
                raise ValueError(f"{name}: expected a float tensor ({g.shape[0]},); got "
                                 f"{getattr(t, 'dtype', type(t).__name__)} {tuple(getattr(t, 'shape', ()))}")
            if bool(torch.isnan(t).any()) or bool((t == math.inf).any()):
                raise ValueError(f"{name}: expected no NaN or +inf entries")
        if lp.numel() and bool((lp > MAX_LOG_PROB).any()):
            r = int((lp > MAX_LOG_PROB).nonzero()[0])
            raise ValueError(f"log_probs[{m - 1}]: row {r} ({g[r].tolist()}) has the log-probability "
                             f"{float(lp[r]):.6g} > 0, a probability above 1; expected natural logs <= 0")
    return list(backoffs)


def tables_from_ngrams(vocab_size: int, ngrams: Sequence[Tensor], log_probs: Sequence[Tensor],
                       backoffs: Sequence[Tensor]) -> tuple[Tables, list[Tensor]]:
    """Sorted key tables from ``(N_m, m)`` id rows, and per order the given row of each sorted row.

    Raises:
        TableError: a missing or repeated unigram, ``<s>``/``</s>`` inside an n-gram, an n-gram
            listed twice or one whose context is not stored.
    """
    V = vocab_size
    first = ngrams[0][:, 0]
    perm = torch.argsort(first)
    if first.numel() != V or not bool((first[perm] == torch.arange(V, device=first.device)).all()):
        have = torch.zeros(V + 1, dtype=torch.long, device=first.device)
        have.index_add_(0, first.clamp(0, V), torch.ones_like(first))
        bad = int((have[:V] != 1).nonzero()[0]) if bool((have[:V] != 1).any()) else V
        raise TableError(1, 0, f"expected every id 0..{V - 1} exactly once among the unigrams; id {bad} "
                               f"appears {int(have[bad]) if bad < V else 'out of range'} times")
    keys: list[Tensor | None] = [None]
    lps, bows, given = [log_probs[0][perm]], [backoffs[0][perm]], [perm]
    for m in range(2, len(ngrams) + 1):
        g = ngrams[m - 1]
        if m > 2 and bool((g[:, 1:-1] == 0).any()):
            r = int((g[:, 1:-1] == 0).any(1).nonzero()[0])
            raise TableError(m, r, f"id 0 (<s>/</s>) inside the {m}-gram {g[r].tolist()}; it may only begin or end one")
        row = g[:, 0]
        for j in range(1, m - 1):
            row = find(keys[j], row * V + g[:, j])  # type: ignore[arg-type]
        if bool((row < 0).any()):
            r = int((row < 0).nonzero()[0])
            raise TableError(m, r, f"the {m}-gram {g[r].tolist()} has no entry for its context {g[r, :-1].tolist()}")
        key = row * V + g[:, -1]
        key, order = torch.sort(key, stable=True)
        dup = key[1:] == key[:-1]
        if bool(dup.any()):
            r = int(order[1:][dup][0])
            raise TableError(m, r, f"the {m}-gram {g[r].tolist()} appears twice")
        keys.append(key)
        lps.append(log_probs[m - 1][order])
        bows.append(backoffs[m - 1][order])
        given.append(order)
    return Tables(keys, lps, bows), given


def find(keys: Tensor, query: Tensor) -> Tensor:
    """Row of each query key in the sorted ``keys``, ``-1`` when absent (or the query is negative).

    The queries are sorted first: a binary search over sorted queries revisits the same cache
    lines, about twice as fast as in random order on large tables.
    """
    if keys.numel() == 0 or query.numel() == 0:
        return torch.full_like(query, -1)
    flat = query.reshape(-1)
    sorted_q, order = torch.sort(flat)
    pos = torch.searchsorted(keys, sorted_q).clamp_(max=keys.numel() - 1)
    found = torch.where((keys[pos] == sorted_q) & (sorted_q >= 0), pos, -1)
    return torch.empty_like(flat).index_put_((order,), found).reshape(query.shape)


def ngram_ids(tables: Tables, vocab_size: int) -> list[Tensor]:
    """The ``(N_m, m)`` id rows of every order, in table order."""
    V = vocab_size
    ids = [torch.arange(V, device=tables.log_probs[0].device).unsqueeze(1)]
    for key in tables.keys[1:]:
        assert key is not None
        parent = torch.div(key, V, rounding_mode="floor")
        ids.append(torch.cat([ids[-1][parent], (key - parent * V).unsqueeze(1)], 1))
    return ids


def _rows_of(tables: Tables, V: int, z: Tensor, start: int, stop: int) -> Tensor:
    """Row of the n-gram ``z[:, start:stop]`` in the table of order ``stop - start`` (``-1``: not stored)."""
    row = z[:, start]
    for j in range(start + 1, stop):
        row = find(tables.keys[j - start], row * V + z[:, j])  # type: ignore[arg-type]
    return row


def backoff_log_prob(tables: Tables, V: int, z: Tensor) -> Tensor:
    """``log p(z[:, k] | z[:, :k])`` under the backoff law, ``(N,)``, for ``z`` ``(N, k + 1)`` ids
    (``k < n``; no ``<s>``/``</s>`` inside): the longest stored n-gram ending in the outcome, times the
    backoff weights of the longer contexts (1 for an unstored one)."""
    k = z.shape[1] - 1
    out = tables.log_probs[0][z[:, k]]  # log p_1(w); then p_j(w | c) = P(c w) if stored, else b(c) p_{j-1}(w | c')
    for j in range(2, k + 2):  # the j-gram ending in the outcome and its context c of length j - 1
        ctx = _rows_of(tables, V, z, k - j + 1, k)
        gram = torch.where(ctx >= 0, find(tables.keys[j - 1], ctx * V + z[:, k]), -1)  # type: ignore[arg-type]
        bow = torch.where(ctx >= 0, tables.backoffs[j - 2][ctx.clamp(min=0)], 0.0)
        out = torch.where(gram >= 0, tables.log_probs[j - 1][gram.clamp(min=0)], out + bow)
    return out


def unnormalised(tables: Tables, vocab_size: int, tolerance: float) -> Unnormalised | None:
    """The first history (shortest first, then table order) whose next-word probabilities sum to more
    than ``tolerance`` away from 1 (module docstring), or ``None`` when every one sums to 1."""
    V, n = vocab_size, len(tables.log_probs)
    total = float(tables.log_probs[0].double().exp().sum())
    if not abs(total - 1.0) <= tolerance:
        return Unnormalised(0, -1, total, total)
    ids = ngram_ids(tables, V)
    for m in range(2, n + 1):  # histories: the rows of order m - 1, their successors: order m
        key = tables.keys[m - 1]
        assert key is not None
        grams = ids[m - 1]
        parent = torch.div(key, V, rounding_mode="floor")
        lower = backoff_log_prob(tables, V, grams[:, 1:]).exp() if m > 2 else tables.log_probs[0][grams[:, 1]].exp()
        h = tables.log_probs[m - 2].numel()
        stored = torch.zeros(h, dtype=torch.float64, device=key.device).index_add_(
            0, parent, tables.log_probs[m - 1].double().exp())
        covered = torch.zeros_like(stored).index_add_(0, parent, lower.double())
        mass = stored + tables.backoffs[m - 2].double().exp() * (1.0 - covered).clamp(min=0.0)
        history = torch.ones(h, dtype=torch.bool, device=key.device)
        if m > 2:  # an (m-1)-gram ending in </s> is never a history
            history = ids[m - 2][:, -1] != 0
        bad = history & ~((mass - 1.0).abs() <= tolerance)
        if bool(bad.any()):
            r = int(bad.nonzero()[0])
            return Unnormalised(m - 1, r, float(mass[r]), float(stored[r]))
    return None


def describe(bad: Unnormalised, tables: Tables, V: int, words: Sequence[str] | None) -> str:
    """What does not sum to 1: the unigram law, or the law after one history (named by words or ids)."""
    if bad.order == 0:
        return f"the unigram probabilities sum to {bad.total:.6g}"
    ids = ngram_ids(tables, V)[bad.order - 1][bad.row].tolist()
    if words is None:
        history = "[" + ", ".join("<s>" if j == 0 and i == 0 else str(i) for j, i in enumerate(ids)) + "]"
    else:
        history = repr(" ".join(["<s>" if j == 0 and i == 0 else words[i] for j, i in enumerate(ids)]))
    return (f"the probabilities after the history {history} sum to {bad.total:.6g} ({bad.stored:.6g} from its "
            "stored n-grams, the rest through its backoff weight)")
