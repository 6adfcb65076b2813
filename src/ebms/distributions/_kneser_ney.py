r"""Estimation of sparse backoff n-gram tables: counting, Kneser–Ney, Witten–Bell, add-k, pruning.

Private to :class:`~ebms.distributions.BackoffNGram`. Every order ``m`` is one table of the
distinct ``m``-grams seen in the corpus, sorted by the key ``parent * V + w`` (``parent``: the
row of the ``(m-1)``-gram prefix in the table of order ``m - 1``; order 1 is dense, row = id).
Each sentence is read as ``<s> y_1 ... y_L </s>`` (id 0 at both ends), so an ``m``-gram may start
with ``<s>`` and end with ``</s>`` but holds neither elsewhere, as in SRILM and KenLM.

All smoothings produce, per order, the interpolated form

.. math::  p_m(w \mid h) = \alpha(h w) + \gamma(h)\, p_{m-1}(w \mid h'),  \qquad p_0(w) = 1 / V,

(``h'``: ``h`` without its oldest word; ``V`` outcomes: the tokens and ``</s>``), stored in
backoff form: the table holds :math:`p_m(w \mid h)` for the seen ``h w`` and the backoff weight
:math:`\gamma(h)` on the row of ``h``; an unseen ``h w`` gets :math:`\gamma(h)\,p_{m-1}(w \mid h')`.

* modified Kneser–Ney (Chen & Goodman, 1998, "An empirical study of smoothing techniques for
  language modeling", TR-10-98, §3.5 and eq. 26): adjusted counts ``a`` are the raw counts at
  the highest order and for n-grams starting with ``<s>``, otherwise the continuation counts
  :math:`N_{1+}(\bullet g)`; per order, with :math:`t_k` the number of n-grams of adjusted
  count ``k`` and :math:`Y = t_1 / (t_1 + 2 t_2)`, :math:`D_k = k - (k+1) Y t_{k+1} / t_k`
  (``k = 1, 2, 3+``); :math:`\alpha = (a - D_a) / \sum_x a(h x)` and
  :math:`\gamma(h) = \sum_k D_k N_k(h \bullet) / \sum_x a(h x)`. This is lmplz's computation
  (KenLM; Heafield et al., 2013, "Scalable modified Kneser-Ney language model estimation"),
  unigrams interpolated with the uniform law;
* Kneser–Ney (Kneser & Ney, 1995, "Improved backing-off for m-gram language modeling"): one
  discount per order, :math:`D = Y`;
* Witten–Bell (raw counts ``c``, ``T(h)`` distinct successors): :math:`\alpha = c / (c(h) + T(h))`,
  :math:`\gamma = T(h) / (c(h) + T(h))`;
* add-k with backoff: seen n-grams get :math:`(c + k) / (c(h) + k V)`, the rest of the mass goes
  to the lower order, renormalised over the unseen successors (Katz's backoff weight).

Pruning (``prune``): n-grams of order ``m >= 2`` whose **raw count** is at most ``t_m`` are
dropped (KenLM's ``--prune``; thresholds non-decreasing, so a kept n-gram keeps its prefix and
suffix). Discounts come from the unpruned counts; the mass of a dropped n-gram goes to its
context's backoff weight (:math:`\gamma' = \gamma + \sum_{dropped} \alpha`; add-k renormalises),
so every distribution still sums to 1.

Cost: one sort (``torch.unique``) per order over the ``N`` corpus positions, ``O(n N log N)``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch import Tensor

from ebms._checks import check_int, check_positive
from ebms.errors import DiscountError
from ebms.sequences import Sequences

SMOOTHINGS = ("modified_kneser_ney", "kneser_ney", "witten_bell", "add_k")


@dataclass
class Tables:
    """Backoff tables. ``keys[m-1]`` ``(N_m,)`` int64 sorted (``None`` for the dense order 1);
    ``log_probs[m-1]``, ``backoffs[m-1]`` ``(N_m,)`` float64 natural logs (0 where no context)."""

    keys: list[Tensor | None]
    log_probs: list[Tensor]
    backoffs: list[Tensor]


@dataclass
class _Counts:
    parent: list[Tensor]  # (N_m,) row of the prefix in order m-1 (order 1: empty)
    suffix: list[Tensor]  # (N_m,) row of the suffix in order m-1 (order 1: empty)
    word: list[Tensor]  # (N_m,) last id
    raw: list[Tensor]  # (N_m,) float64 raw counts
    bos: list[Tensor]  # (N_m,) bool: starts with <s>


def count_ngrams(seqs: Sequences, vocab_size: int, order: int) -> _Counts:
    """Distinct n-grams of orders ``1..order`` of ``<s> y </s>`` sentences with raw counts."""
    V = vocab_size
    B, T = seqs.tokens.shape
    dev = seqs.device
    mask = seqs.mask()
    y = seqs.tokens.masked_fill(~mask, 0)
    z = torch.cat([y.new_zeros(B, 1), y, y.new_zeros(B, 1)], 1)  # <s> y </s> (padding 0, cut below)
    inside = torch.arange(T + 2, device=dev) <= (seqs.lengths + 1).unsqueeze(1)
    flat = z[inside]
    pos = torch.arange(T + 2, device=dev).expand(B, T + 2)[inside]
    last = (seqs.lengths + 1).unsqueeze(1).expand(B, T + 2)[inside]  # position of </s>
    if flat.numel() * V >= 2**62:
        raise ValueError(f"corpus: {flat.numel()} positions times vocab_size {V} overflow the int64 n-gram keys")
    ids = torch.arange(V, device=dev)
    empty = ids.new_zeros(0)
    c = _Counts([empty], [empty], [ids], [torch.bincount(flat[pos >= 1], minlength=V).double()], [ids == 0])
    prev = flat  # row of the (m-1)-gram starting at each position (order 1: the id)
    for m in range(2, order + 1):
        start = (pos + m - 1 <= last).nonzero().squeeze(1)
        key = prev[start] * V + flat[start + m - 1]
        uniq, inv, cnt = torch.unique(key, sorted=True, return_inverse=True, return_counts=True)
        suffix = torch.empty_like(uniq)
        suffix[inv] = prev[start + 1]
        parent = torch.div(uniq, V, rounding_mode="floor")
        c.parent.append(parent)
        c.suffix.append(suffix)
        c.word.append(uniq - parent * V)
        c.raw.append(cnt.double())
        c.bos.append(c.bos[-1][parent])
        nxt = torch.full_like(prev, -1)
        nxt[start] = inv
        prev = nxt
    return c


def adjusted_counts(c: _Counts) -> list[Tensor]:
    """Kneser–Ney's counts: raw at the highest order and for n-grams starting with ``<s>``, else
    the number of distinct words seen before the n-gram (its suffix rows in the order above)."""
    order = len(c.raw)
    out = []
    for m in range(1, order):
        cont = torch.bincount(c.suffix[m], minlength=c.raw[m - 1].numel()).double()
        out.append(cont if m == 1 else torch.where(c.bos[m - 1], c.raw[m - 1], cont))
    return [*out, c.raw[-1]]


def _count_of_counts(a: Tensor) -> list[int]:
    return [int((a == k).sum()) for k in range(1, 5)]


#: discounts ``(D1, D2, D3+)`` suggested when the counts cannot give them (KenLM's ``--discount_fallback``).
FALLBACK_DISCOUNTS = (0.5, 1.0, 1.5)


def estimate_discounts(adjusted: Sequence[Tensor], modified: bool,
                       given: Sequence[list[float] | None] | None = None) -> list[list[float]]:
    """Per order ``[D_1, D_2, D_3+]``: ``given[m-1]`` where not ``None``, else estimated from the
    counts-of-counts of the adjusted counts (Chen & Goodman 1998, eq. 26).

    Raises:
        ebms.errors.DiscountError: (a ``ValueError``) naming every order that cannot be estimated and
            the ``discounts=`` list that gives those orders KenLM's fallback values.
    """
    out: list[list[float]] = []
    failed: list[tuple[int, str]] = []
    for m, a in enumerate(adjusted, 1):
        if given is not None and given[m - 1] is not None:
            out.append(list(given[m - 1]))  # type: ignore[arg-type]
            continue
        t1, t2, t3, t4 = _count_of_counts(a)
        if min((t1, t2, t3) if modified else (t1,)) == 0:
            need = "t1, t2, t3 > 0" if modified else "t1 > 0"
            failed.append((m, f"order {m}: counts-of-counts t1, t2, t3 = {t1}, {t2}, {t3}, the estimate needs {need}"))
            out.append([])
            continue
        y = t1 / (t1 + 2 * t2)
        d = [1 - 2 * y * t2 / t1, 2 - 3 * y * t3 / t2, 3 - 4 * y * t4 / t3] if modified else [y, y, y]
        bad = next((k for k, dk in enumerate(d, 1) if not 0 < dk <= min(k, 3)), None)
        if bad is not None:
            failed.append((m, f"order {m}: the estimate D{bad} = {d[bad - 1]:.4g} is outside (0, {bad}] "
                              f"(counts-of-counts {t1}, {t2}, {t3}, {t4})"))
        out.append(d)
    if failed:
        orders = [m for m, _ in failed]
        fallback = FALLBACK_DISCOUNTS if modified else FALLBACK_DISCOUNTS[0]
        example = [fallback if m in orders else None for m in range(1, len(adjusted) + 1)]
        raise DiscountError(f"discounts: cannot estimate the Kneser-Ney discounts of order{'s' * (len(orders) > 1)} "
                            f"{', '.join(map(str, orders))} "
                            f"from the counts ({'; '.join(r for _, r in failed)}): a small vocabulary whose n-grams "
                            f"are all frequent, or a tiny or repetitive corpus; pass discounts= with values for those "
                            f"orders, e.g. discounts={example} (KenLM's fallback; None: estimate that order)",
                            orders=orders, reasons=[r for _, r in failed])
    return out


def check_discounts(discounts: object, order: int, smoothing: str) -> list[list[float] | None]:
    """``order`` entries, each ``None`` (estimate), one number (every count) or three
    ``(D_1, D_2, D_3+)`` (modified Kneser-Ney), ``0 <= D_k <= k``."""
    if isinstance(discounts, (str, bytes)) or not isinstance(discounts, Sequence) or len(discounts) != order:
        raise ValueError(f"discounts: expected one entry per order ({order}), each None (estimate it), a number or "
                         f"(D1, D2, D3+); got {discounts!r}")
    out: list[list[float] | None] = []
    for m, d in enumerate(discounts, 1):
        if d is None:
            out.append(None)
            continue
        ds = list(d) if isinstance(d, Sequence) and not isinstance(d, (str, bytes)) else [d]
        allowed = (1, 3) if smoothing == "modified_kneser_ney" else (1,)
        if len(ds) not in allowed:
            what = "None, one number or three (D1, D2, D3+)" if len(allowed) == 2 else "None or one number"
            raise ValueError(f"discounts[{m - 1}]: expected {what} for smoothing={smoothing!r}; got {d!r}")
        ds = [check_positive(v, f"discounts[{m - 1}]", allow_zero=True) for v in ds] * (3 if len(ds) == 1 else 1)
        for k, v in enumerate(ds, 1):
            if v > k:
                raise ValueError(f"discounts[{m - 1}]: D{k} must be in [0, {k}] (a count of {k} minus its discount "
                                 f"stays >= 0); got {v}")
        out.append(ds)
    return out


def check_prune(prune: object, order: int) -> list[int]:
    """Raw-count thresholds per order (``t_1 = 0``, non-decreasing; a shorter list repeats its last value)."""
    if prune is None:
        return [0] * order
    if isinstance(prune, (str, bytes)) or not isinstance(prune, Sequence) or not 1 <= len(prune) <= order:
        raise ValueError(f"prune: expected 1 to {order} count thresholds (one per order, unigrams first); got {prune!r}")
    t = [check_int(v, f"prune[{i}]", minimum=0) for i, v in enumerate(prune)]
    t += [t[-1]] * (order - len(t))
    if t[0] != 0:
        raise ValueError(f"prune: unigrams are never pruned, so prune[0] must be 0; got {t[0]}")
    if any(b < a for a, b in zip(t, t[1:])):
        raise ValueError(f"prune: thresholds must be non-decreasing with the order (so that a kept n-gram keeps "
                         f"its prefix and suffix); got {t}")
    return t


def _per_context(values: Tensor, parent: Tensor | None, n: int) -> Tensor:
    """Sum of ``values`` over the successors of each context (``n`` rows; a scalar for order 1)."""
    if parent is None:
        return values.sum().reshape(1)
    return torch.zeros(n, dtype=values.dtype, device=values.device).index_add_(0, parent, values)


def estimate(seqs: Sequences, vocab_size: int, order: int, smoothing: str, discounts: object | None,
             k: float, prune: object | None) -> tuple[Tables, list[list[float]] | None]:
    """Count, smooth and prune; returns the tables and the discounts used (KN only)."""
    V = vocab_size
    thresholds = check_prune(prune, order)
    c = count_ngrams(seqs, V, order)
    if smoothing in ("modified_kneser_ney", "kneser_ney"):
        counts = adjusted_counts(c)
        given = check_discounts(discounts, order, smoothing) if discounts is not None else None
        d = estimate_discounts(counts, smoothing == "modified_kneser_ney", given)
    else:
        counts, d = c.raw, None
    kept = [torch.ones(V, dtype=torch.bool, device=seqs.device)]
    for m in range(2, order + 1):
        keep = (c.raw[m - 1] > thresholds[m - 1]) & kept[-1][c.parent[m - 1]] & kept[-1][c.suffix[m - 1]]
        kept.append(keep)
    probs: list[Tensor] = []
    gammas: list[Tensor] = []  # gamma'(h) for the rows of order m - 1 (order 0: one scalar)
    for m in range(1, order + 1):
        a = counts[m - 1]
        parent = c.parent[m - 1] if m > 1 else None
        n_ctx = probs[-1].numel() if m > 1 else 1
        pidx = parent if parent is not None else torch.zeros_like(a, dtype=torch.long)
        if smoothing == "add_k":
            total = _per_context(a, parent, n_ctx) + k * V
            p = (a + k) / total[pidx]
            if m == 1:
                gammas.append(torch.zeros(1, dtype=a.dtype, device=a.device))
            else:
                low = probs[-1][c.suffix[m - 1]]
                w = kept[m - 1].double()
                n_kept = _per_context(w, parent, n_ctx)
                num = 1 - _per_context(p * w, parent, n_ctx)
                den = 1 - _per_context(low * w, parent, n_ctx)
                gammas.append(torch.where((n_kept < V) & (den > 0), num / den.clamp_min(1e-300), 1.0))
            probs.append(p)
            continue
        if d is not None:  # Kneser-Ney
            dk = torch.tensor([0.0, *d[m - 1]], dtype=a.dtype, device=a.device)
            disc = dk[a.clamp(max=3).long()]
            denom = _per_context(a, parent, n_ctx)
            alpha = (a - disc) / denom[pidx]
            gamma = _per_context(disc, parent, n_ctx) / denom.clamp_min(1e-300)
        else:
            seen = (a > 0).double()
            denom = _per_context(a + seen, parent, n_ctx)
            alpha = a / denom[pidx]
            gamma = _per_context(seen, parent, n_ctx) / denom.clamp_min(1e-300)
        gamma = gamma + _per_context(alpha * (~kept[m - 1]).double(), parent, n_ctx)  # pruned mass
        lower = probs[-1][c.suffix[m - 1]] if m > 1 else torch.full_like(a, 1.0 / V)
        probs.append(alpha + gamma[pidx] * lower)
        gammas.append(gamma)
    return _compact(c, probs, gammas, kept, V), d


def _compact(c: _Counts, probs: list[Tensor], gammas: list[Tensor], kept: list[Tensor], V: int) -> Tables:
    """Keep the unpruned rows, re-key them, and turn probabilities and backoff weights into logs."""
    order = len(probs)
    keys: list[Tensor | None] = [None]
    log_probs, backoffs = [], []
    new_row = torch.arange(V, device=probs[0].device)
    for m in range(1, order + 1):
        keep = kept[m - 1]
        if m > 1:
            keys.append(new_row[c.parent[m - 1][keep]] * V + c.word[m - 1][keep])
        log_probs.append(probs[m - 1][keep].log())
        if m < order:  # contexts: rows with at least one successor get log gamma'
            has_next = torch.zeros(keep.numel(), dtype=torch.bool, device=keep.device)
            has_next[c.parent[m][kept[m]]] = True  # a context whose successors were all pruned has gamma' = 1
            bow = torch.where(has_next, gammas[m].log(), 0.0)
            backoffs.append(bow[keep])
        else:
            backoffs.append(torch.zeros(int(keep.sum()), dtype=torch.float64, device=keep.device))
        new_row = torch.cumsum(keep.long(), 0) - 1
    return Tables(keys, log_probs, backoffs)

