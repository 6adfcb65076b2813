r"""Exact ancestral sampling of :class:`~ebms.distributions.BackoffNGram` without ``V``-wide rows (private).

The next-word law after a history ``h`` with longest context ``c`` (stored or not) is

.. math::  p(w \mid h) \propto \begin{cases} P(c\,w) & w \in S(c) \\ b(c)\, p(w \mid h') & w \notin S(c) \end{cases}

with ``S(c)`` the words listed after ``c``, ``h'`` the history without its oldest word, and the
row total :math:`Z(c) = M(c) + b(c) R(c)`, :math:`M(c) = \sum_{w \in S(c)} P(c\,w)`,
:math:`R(c) = Z(h') - \sum_{w \in S(c)} p(w \mid h')` (``Z = 1`` for a normalised model; the old
``V``-wide sampler normalised every row, and so does this one). A draw is a two-stage choice,
level ``j = n-1 .. 1`` from the longest context down:

1. with probability :math:`M(c_j) / Z(c_j)` take a word from ``S(c_j)`` with probability
   :math:`P(c_j w) / M(c_j)` (inverse CDF in the context's segment of one sorted table);
2. otherwise draw ``w`` from the level below (the same procedure on ``h'``; the unigram at the
   bottom) until ``w`` is not in ``S(c_j)`` (rejection: what is left is :math:`p(\cdot \mid h')`
   restricted to the complement of ``S(c_j)``, the backoff branch's law).

An unstored context is skipped (``b = 1``, ``S`` empty). Each draw is exact: rejection sampling
returns the restricted law whatever the number of tries (von Neumann 1951, *Various techniques used
in connection with random digits*; Devroye 1986, *Non-Uniform Random Variate Generation*, II.3). The
expected number of lower draws per backoff is :math:`Z(h') / R(c)`; for the KN bigram of PTB
(``V = 10k``) about one token in five backs off and few of those draws are rejected. Rows whose
context makes rejection slow (more than :data:`MAX_EXPECTED_TRIES` expected tries) or whose row is
degenerate (total not finite and positive), and rows rejected :data:`MAX_TRIES` times in a row
(checked every :data:`MAX_TRIES` rounds), are drawn from the exact law of the state they are in, computed on ``V``-wide rows
(:func:`exact_law`), so the law stays exact.

Tables (:class:`SamplerTables`, built once per model and rebuilt when a buffer changes): every
context of orders ``1 .. n-1`` and the empty context (the unigram) is a *segment* of one array of
its listed words, with the within-segment cumulative share ``frac`` (a true segmented cumsum in
float64) and the search key ``segment + frac`` (non-decreasing). Memory ``O(sum_m N_m)``; building
costs one backoff lookup per stored n-gram. Sampling costs ``O(n log N)`` per token and try, all
draws advancing together (a rejected row retries while the others move on), so a batch of ``B``
draws of longest length ``T`` takes about ``T`` + (rejections of the slowest row) vectorised rounds.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch
from torch import Tensor

from ebms.distributions import _backoff_tables as _tables
from ebms.distributions._sampling import sample_categorical
from ebms.sequences import Sequences

if TYPE_CHECKING:
    from ebms.distributions.backoff import BackoffNGram

#: a history whose context costs more lower draws than this on average (``b(c) Z(h') / Z(c)``: the
#: backoff branch's probability over its acceptance rate) is drawn on its ``V``-wide row instead
MAX_EXPECTED_TRIES = 8.0
#: every this many rounds, a draw that has not advanced since the previous check (so rejected at
#: least this many times in a row) takes its next token from the exact ``V``-wide law of its state
MAX_TRIES = 32


@dataclass(frozen=True)
class SamplerTables:
    """Segments of listed words, one per context (segment 0: the unigram; see the module docstring).

    Attributes:
        offsets: segment of context row ``c`` of order ``j`` is ``offsets[j] + c`` (``offsets[0] = 0``).
        key: ``(E,)`` float64, ``segment + frac``, non-decreasing.
        frac: ``(E,)`` float64, cumulative share of each entry in its segment (1 at the segment's end).
        word: ``(E,)`` int64, the listed word of each entry.
        start, count: ``(S,)`` int64, first entry and number of entries of each segment.
        last: ``(S,)`` int64, the segment's last entry of positive probability.
        listed: ``(S,)`` float64, ``M(c) / Z(c)``, the probability of the listed branch (root: 1).
        exact: ``(S,)`` bool, histories with this context are drawn on their ``V``-wide row.
        any_exact: whether ``exact`` holds anywhere (else the check is skipped).
        fingerprint: the model's buffers (pointer, version, dtype, device, shape) when built.
    """

    offsets: tuple[int, ...]
    key: Tensor
    frac: Tensor
    word: Tensor
    start: Tensor
    count: Tensor
    last: Tensor
    listed: Tensor
    exact: Tensor
    any_exact: bool
    fingerprint: tuple[object, ...]


def fingerprint(model: BackoffNGram) -> tuple[object, ...]:
    """What identifies the model's tables: each buffer's storage, in-place version, dtype, device, shape."""
    return tuple((name, t.data_ptr(), getattr(t, "_version", 0), t.dtype, str(t.device), tuple(t.shape))
                 for name, t in model.named_buffers())


def segment_cumsum(values: Tensor, start: Tensor, count: Tensor) -> Tensor:
    """Inclusive cumulative sum of ``values (E,)`` within each segment ``[start, start + count)``.

    Segments are grouped by the bit length of their size and laid out as rows of a padded matrix
    (at most twice the entries), so each sum runs over its own segment only.
    """
    out = torch.zeros_like(values)
    live = count > 0
    bits = torch.zeros_like(count)
    bits[live] = torch.floor(torch.log2(count[live].double())).long()
    for b in torch.unique(bits[live]).tolist():
        segs = (live & (bits == b)).nonzero().squeeze(1)
        width = int(count[segs].max())
        cols = torch.arange(width, device=values.device)
        index = start[segs].unsqueeze(1) + cols
        inside = cols < count[segs].unsqueeze(1)
        block = torch.where(inside, values[index.clamp(max=values.numel() - 1)], 0.0).cumsum(1)
        out[index[inside]] = block[inside]
    return out


def build(model: BackoffNGram) -> SamplerTables:
    """The sampler's tables of ``model`` (module docstring); float64 on the model's device."""
    n, V = model.order, model.vocab_size
    t = model._tables()
    dev = t.log_probs[0].device
    ids = _tables.ngram_ids(t, V)
    sizes = [int(lp.numel()) for lp in t.log_probs]
    offsets = [0, 1]  # the unigram, then the contexts of orders 1 .. n-1
    for m in range(1, n - 1):
        offsets.append(offsets[-1] + sizes[m - 1])
    S = 1 + sum(sizes[: n - 1])
    seg_parts, word_parts, prob_parts = [torch.zeros(V, dtype=torch.long, device=dev)], [ids[0][:, 0]], \
        [t.log_probs[0].double().exp()]
    for m in range(1, n):  # contexts of order m, their continuations: the n-grams of order m + 1
        key = t.keys[m]
        assert key is not None
        seg_parts.append(offsets[m] + torch.div(key, V, rounding_mode="floor"))
        word_parts.append(key % V)
        prob_parts.append(t.log_probs[m].double().exp())
    seg, word, prob = torch.cat(seg_parts), torch.cat(word_parts), torch.cat(prob_parts)
    count = torch.bincount(seg, minlength=S)
    start = torch.cumsum(count, 0) - count
    local = segment_cumsum(prob, start, count)
    total = torch.zeros(S, dtype=torch.float64, device=dev)
    nonempty = count > 0
    total[nonempty] = local[(start + count - 1)[nonempty]]
    good = torch.isfinite(total) & (total > 0)
    frac = torch.where(good[seg], local / torch.where(good, total, 1.0)[seg], 1.0)
    frac[(start + count - 1)[nonempty & good]] = 1.0  # exact 1 at every segment's end
    index = torch.arange(seg.numel(), device=dev)
    last = torch.full((S,), -1, dtype=torch.long, device=dev).scatter_reduce_(
        0, seg[prob > 0], index[prob > 0], "amax")
    listed = torch.zeros(S, dtype=torch.float64, device=dev)
    exact = torch.zeros(S, dtype=torch.bool, device=dev)
    listed[0], exact[0] = 1.0, not bool(good[0])
    row_total = [total[0:1].clone()]  # Z of the histories whose longest stored context is a row of order j
    for m in range(1, n):
        rows = torch.arange(sizes[m - 1], device=dev)
        parent = seg_parts[m] - offsets[m]
        lower = (t.log_probs[0][ids[m][:, 1]] if m == 1 else _tables.backoff_log_prob(t, V, ids[m][:, 1:])).double()
        shadow = torch.zeros(sizes[m - 1], dtype=torch.float64, device=dev).index_add_(0, parent, lower.exp())
        suffix_total = _suffix_totals(model, ids[m - 1], row_total) if m > 1 else row_total[0].expand(sizes[0])
        rest = (suffix_total - shadow).clamp(min=0.0)
        rest = torch.where(count[offsets[m] + rows] >= V, 0.0, rest)  # every outcome listed: no backoff branch
        mass = total[offsets[m] + rows]
        back = t.backoffs[m - 1].double().exp() * rest
        z = mass + back
        ok = torch.isfinite(z) & (z > 0)
        listed[offsets[m] + rows] = torch.where(ok, mass / torch.where(ok, z, 1.0), 0.0)
        slow = (back > 0) & (t.backoffs[m - 1].double().exp() * suffix_total > MAX_EXPECTED_TRIES * z)
        history = torch.ones_like(ok) if m == 1 else ids[m - 1][:, -1] != 0  # "... </s>" is never a history
        exact[offsets[m] + rows] = history & (~ok | slow)
        row_total.append(z)
    key = seg.double() + frac
    return SamplerTables(tuple(offsets), key, frac, word, start, count, last, listed, exact, bool(exact.any()),
                         fingerprint(model))


def _suffix_totals(model: BackoffNGram, grams: Tensor, row_total: list[Tensor]) -> Tensor:
    """Row total ``Z`` after each context ``grams (N, m)`` without its oldest word: ``Z`` of the longest
    stored suffix (``row_total[j]``: the totals of the order-``j`` rows, ``row_total[0]`` the unigram's)."""
    m = grams.shape[1]
    walk = model._walk(grams)
    out = torch.full((grams.shape[0],), float("nan"), dtype=torch.float64, device=grams.device)
    found = torch.zeros(grams.shape[0], dtype=torch.bool, device=grams.device)
    for length in range(m - 1, 0, -1):
        r = walk[length - 1][:, m - length]
        hit = ~found & (r >= 0)
        out[hit] = row_total[length][r[hit]]
        found |= hit
    return out


def _contexts(model: BackoffNGram, hist: Tensor) -> Tensor:
    """``(B, n-1)``: column ``j-1`` holds the row of the ``j``-gram ending at the last symbol (``-1``: none)."""
    top = hist.shape[1]
    if top <= 1:
        return hist
    rows = model._walk(hist)
    return torch.stack([rows[j - 1][:, top - j] for j in range(1, top + 1)], 1)


def _lookup(keys: Tensor, ctx: Tensor, word: Tensor, V: int) -> Tensor:
    """Row of the n-gram ``(ctx, word)`` in the sorted ``keys`` of its order, ``-1`` when not stored
    (or ``ctx < 0``): the rejection test, and the context of the next token."""
    if keys.numel() == 0:
        return torch.full_like(word, -1)
    q = ctx * V + word
    pos = torch.searchsorted(keys, q).clamp_(max=keys.numel() - 1)
    return torch.where((keys[pos] == q) & (ctx >= 0), pos, -1)


def segment_draw(tabs: SamplerTables, seg: Tensor, u: Tensor) -> Tensor:
    """The first entry of segment ``seg (B,)`` whose ``frac`` exceeds ``u (B,)`` in ``[0, 1)``, as a word.

    One search in the global keys: rounding is monotone, so ``key > segment + u`` holds for the exact
    answer and fails for every earlier entry unless its key *equals* ``segment + u``; such ties are
    settled by a binary search on ``frac`` itself. The pick is the segment's exact inverse CDF (an
    entry of probability 0 is never returned).
    """
    q = u + seg
    hi = torch.searchsorted(tabs.key, q, right=True)
    tie = tabs.key[hi - 1] == q  # hi = 0 reads the last key, the number of segments: above any q
    if bool(tie.any()):
        at = tie.nonzero().squeeze(1)
        v = u[at]
        a = torch.searchsorted(tabs.key, q[at]).clamp_(min=tabs.start[seg[at]])
        b = torch.minimum(hi[at], tabs.last[seg[at]])
        while bool((a < b).any()):
            mid = torch.div(a + b, 2, rounding_mode="floor")
            above = tabs.frac[mid] > v
            b, a = torch.where(above, mid, b), torch.where(above, a, mid + 1)
        hi = hi.index_put((at,), b)
    return tabs.word[hi]


def _try(tabs: SamplerTables, keys: list[Tensor], ctx: Tensor, level: Tensor, u: Tensor,
         V: int) -> tuple[Tensor, list[Tensor], Tensor]:
    """One try per row: the word, the rows of ``(c_i, w)`` (order ``i + 1``, ``-1``: not stored) for
    ``i = 1 .. n-1``, and the level to restart from (``n - 1`` when the word is accepted).

    From the restart level down, a coin per stored context takes its listed branch with probability
    ``listed``; :func:`segment_draw` picks the word; the lowest stored context above the picked
    level that lists the word rejects it, and the row restarts one level below that context (its
    backoff loop draws the lower level afresh). Orders 1 and 2 go through :func:`_try_short`.
    """
    top = ctx.shape[1]
    offsets = torch.tensor(tabs.offsets[1 : top + 1], dtype=torch.long, device=ctx.device)
    seg = torch.where(ctx >= 0, ctx + offsets, -1)
    chosen = depth = torch.zeros_like(level)  # segment drawn from (0: the unigram), its level
    for j in range(top, 0, -1):
        sj = seg[:, j - 1]
        take = (u[:, j - 1] < tabs.listed[sj.clamp(min=0)]) & (level >= j) & (depth == 0) & (sj >= 0)
        chosen, depth = torch.where(take, sj, chosen), torch.where(take, j, depth)
    w = segment_draw(tabs, chosen, u[:, top])
    found = [_lookup(keys[i - 1], ctx[:, i - 1], w, V) for i in range(1, top + 1)]
    restart = torch.full_like(level, top)
    for i in range(top, 0, -1):
        restart = torch.where((depth < i) & (found[i - 1] >= 0), i - 1, restart)
    return w, found, restart


def _try_short(tabs: SamplerTables, keys: list[Tensor], prev: Tensor | None, fresh: Tensor, u: Tensor,
               V: int) -> tuple[Tensor, Tensor]:
    """:func:`_try` for orders 1 (``prev`` None) and 2, whose one context (the previous symbol ``prev (B,)``)
    is always stored: the word and whether it is accepted (``fresh (B,)`` bool: the row may take the
    listed branch, i.e. it is not in the unigram's rejection loop)."""
    if prev is None:
        return segment_draw(tabs, torch.zeros_like(fresh, dtype=torch.long), u[:, 0]), torch.ones_like(fresh)
    s = prev + 1
    take = (u[:, 0] < tabs.listed[s]) & fresh
    w = segment_draw(tabs, s * take, u[:, 1])
    if keys[0].numel() == 0:
        return w, torch.ones_like(fresh)
    q = prev * V + w
    listed = keys[0][torch.searchsorted(keys[0], q).clamp_(max=keys[0].numel() - 1)] == q
    return w, take | ~listed


def draw(model: BackoffNGram, tabs: SamplerTables, n: int, generator: torch.Generator | None,
         max_length: int) -> Sequences:
    """``n`` ancestral draws (see :meth:`BackoffNGram.sample`).

    Every round gives each running draw one try at its next token (:func:`_try`); accepted tokens
    advance their draw, finished draws leave the batch, rejected ones try again next round. Every
    :data:`MAX_TRIES` rounds, the draws that have not advanced since the previous check take their
    next token from :func:`exact_law` (as do, every round, histories flagged ``exact``). One or two
    host syncs per round.
    """
    dev, V, top = tabs.key.device, model.vocab_size, model.order - 1
    short = top <= 1
    keys = [model._table("keys", i + 1) for i in range(1, top + 1)]
    tokens = torch.zeros(n, min(64, max_length + 1), dtype=torch.long, device=dev)  # widened as draws grow
    lengths = torch.zeros(n, dtype=torch.long, device=dev)
    rows = torch.arange(n, device=dev)
    hist = torch.full((n, top), -1, dtype=torch.long, device=dev)
    if top:
        hist[:, -1] = 0
    ctx = _contexts(model, hist)  # (A, n-1): the stored context rows of each level (orders >= 3: kept up to date)
    prev = ctx[:, 0] if top == 1 else None  # order 2: the one context is the previous symbol
    pos = torch.zeros(n, dtype=torch.long, device=dev)
    level = torch.full((n,), top, dtype=torch.long, device=dev)  # restart level: levels above it are backing off
    fresh = torch.ones(n, dtype=torch.bool, device=dev)  # orders 1-2: level == n - 1
    seen = pos.clone()  # each draw's position at the last stall check
    unfinished, rnd = 0, 0
    while rows.numel():
        if rnd >= tokens.shape[1] and tokens.shape[1] < max_length + 1:  # a draw is at most rnd tokens long
            tokens = torch.cat([tokens, torch.zeros_like(tokens)], 1)[:, : max_length + 1]
        u = torch.rand((rows.numel(), top + 1), generator=generator, dtype=torch.float64, device=dev)
        if short:
            w, ok = _try_short(tabs, keys, prev, fresh, u, V)
            found: list[Tensor] = []
        else:
            w, found, restart = _try(tabs, keys, ctx, level, u, V)
            ok = restart == top
        check = rnd > 0 and rnd % MAX_TRIES == 0
        if tabs.any_exact or check:
            slow = (pos == seen) if check else torch.zeros_like(ok)
            if short:  # the state in draw()'s general form
                hist = ctx = prev.unsqueeze(1) if prev is not None else rows.new_zeros(rows.numel(), 0)
                level = torch.where(fresh, top, 0)
            if tabs.any_exact:
                seg = torch.where(ctx >= 0, ctx + torch.tensor(tabs.offsets[1 : top + 1], device=dev), -1)
                slow |= (tabs.exact[seg.clamp(min=0)] & (seg >= 0)).any(1) | bool(tabs.exact[0])
            if check:
                seen = pos.clone()
            if bool(slow.any()):
                at = slow.nonzero().squeeze(1)
                w = w.index_put((at,), _exact_draw(model, tabs, hist[at], ctx[at], level[at], generator))
                if not short:
                    found = [_lookup(keys[i - 1], ctx[:, i - 1], w, V) for i in range(1, top + 1)]
                    restart = torch.where(slow, top, restart)
                ok = ok | slow
        tokens[rows, pos] = w
        stop = ok & (w == 0) if rnd < max_length else ok & ((w == 0) | (pos == max_length))
        if short:
            fresh = ok
            if prev is not None:
                prev = torch.where(ok, w, prev)
        else:
            level = restart
            ctx = torch.where(ok.unsqueeze(1), torch.stack([w, *found[: top - 1]], 1), ctx)
            hist = torch.where(ok.unsqueeze(1), torch.cat([hist[:, 1:], w.unsqueeze(1)], 1), hist)
        rnd += 1
        if bool(stop.any()):
            end = stop if rnd <= max_length else stop & (w == 0)
            if rnd > max_length:
                unfinished += int((stop & ~end).sum())
            lengths[rows[end]] = pos[end]
            keep = (~stop).nonzero().squeeze(1)
            rows, pos, fresh, seen = rows[keep], (pos + ok)[keep], fresh[keep], seen[keep]
            if short:
                prev = None if prev is None else prev[keep]
            else:
                ctx, hist, level = ctx[keep], hist[keep], level[keep]
        else:
            pos = pos + ok
    if unfinished:
        raise ValueError(f"max_length: {unfinished} of {n} draws had not ended after {max_length} tokens; "
                         "raise max_length")
    return Sequences(tokens[:, : int(lengths.max())], lengths, validate=False)


def _listed_mask(tabs: SamplerTables, seg: Tensor, V: int) -> Tensor:
    """``(B, V)`` bool: the words listed in segment ``seg (B,)``."""
    cnt = tabs.count[seg]
    b = torch.repeat_interleave(torch.arange(seg.numel(), device=seg.device), cnt)
    at = tabs.start[seg][b] + torch.arange(b.numel(), device=seg.device) - (torch.cumsum(cnt, 0) - cnt)[b]
    mask = torch.zeros(seg.numel(), V, dtype=torch.bool, device=seg.device)
    mask[b, tabs.word[at]] = True
    return mask


def _law(model: BackoffNGram, hist: Tensor, keep: int) -> Tensor:
    """``(B, V)`` normalised next-word law after the last ``keep`` symbols of ``hist`` (float64)."""
    short = hist.clone()
    short[:, : hist.shape[1] - keep] = -1
    return torch.softmax(model._next_from_history(short).double(), -1)


def _exact_draw(model: BackoffNGram, tabs: SamplerTables, hist: Tensor, ctx: Tensor, level: Tensor,
                generator: torch.Generator | None) -> Tensor:
    """One draw per row from :func:`exact_law` (rows at the top level: the model's row, as the old
    ``V``-wide sampler drew it)."""
    if bool((level == hist.shape[1]).all()):
        return sample_categorical(model._next_from_history(hist), generator)
    return sample_categorical(exact_law(model, tabs, hist, ctx, level).log(), generator)


def exact_law(model: BackoffNGram, tabs: SamplerTables, hist: Tensor, ctx: Tensor, level: Tensor) -> Tensor:
    """``(B, V)`` law of the token that a row at restart level ``level (B,)`` ends with, on ``V``-wide rows.

    The row draws afresh from levels ``<= k`` (law :math:`D_k`: the normalised row after its last
    ``k`` symbols) while each stored context ``c_i``, ``i > k``, is in its backoff loop: a result in
    ``S(c_i)`` is replaced by a fresh draw of :math:`D_{i-1}` restricted to the complement. So, from
    ``i = k + 1`` up to ``n - 1``,
    :math:`D \\leftarrow D\\,1_{\\bar S_i} + D(S_i)\\, D_{i-1} 1_{\\bar S_i} / D_{i-1}(\\bar S_i)`;
    at ``k = n - 1`` it is the model's normalised row. ``hist (B, n-1)``, ``ctx (B, n-1)`` as in :func:`draw`.
    (A loop whose complement has no mass is never entered: its context's listed branch is certain.)
    """
    top, V = hist.shape[1], model.vocab_size
    law = torch.zeros(hist.shape[0], V, dtype=torch.float64, device=hist.device)
    for k in torch.unique(level).tolist():
        at = level == k
        law[at] = _law(model, hist[at], k)
    for i in range(1, top + 1):
        at = ((level < i) & (ctx[:, i - 1] >= 0)).nonzero().squeeze(1)
        if at.numel() == 0:
            continue
        listed = _listed_mask(tabs, tabs.offsets[i] + ctx[at, i - 1], V)
        d, lower = law[at], _law(model, hist[at], i - 1).masked_fill(listed, 0.0)
        caught = d.masked_fill(~listed, 0.0).sum(1, keepdim=True)
        law[at] = d.masked_fill(listed, 0.0) + caught * lower / lower.sum(1, keepdim=True).clamp(min=1e-300)
    return law
