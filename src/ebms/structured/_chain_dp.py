"""The linear-chain recursions in log space: semiring totals, Viterbi, k-best, counting, sampling.

Shapes: ``B`` batch, ``T`` padded length, ``C`` tags; ``init (B, C)`` is the first step's node
potential (``start + emissions[:, 0]``), ``em (B, T-1, C)`` the later emissions, ``tr (C, C)``
the transitions ``tr[prev, next]`` and ``end (C,)`` (optional) the last tag's potential. With
``edges[b, t-1, j, k] = tr[j, k] + em[b, t-1, k]`` the forward recursion is::

    alpha_1(k) = init[k]
    alpha_t(k) = (+)_j alpha_{t-1}(j) (x) edges[t-1, j, k]      t <= L, carried over for t > L
    total      = (+)_k alpha_L(k) (x) end[k]

with ``(+), (x)`` from :mod:`ebms.structured.semiring` (:func:`chain_forward`;
:func:`linear_chain_forward` is its checked public form, re-exported by
:mod:`ebms.structured.linear_chain`). Carrying the state past each length handles ragged batches
without a loop over the batch. On top of it: Viterbi with the path recomputed backwards
(:func:`viterbi`), the parallel list Viterbi algorithm for the ``k`` best paths (Seshadri &
Sundberg, 1994, "List Viterbi decoding algorithms with applications"; :func:`kbest_paths`), the
number of allowed paths (:func:`count_paths`) and forward filtering, backward sampling (Carter &
Kohn, 1994, "On Gibbs sampling for state space models"; :func:`ffbs`). Every recursion is
``T`` sequential vectorised steps; all callers pass sequences of length ``>= 1`` only.
"""

from __future__ import annotations

import torch
from torch import Tensor

from ebms.structured._chain_inputs import check_lengths, check_potentials
from ebms.structured.semiring import LogSemiring, Semiring

__all__ = ["chain_forward", "count_paths", "ffbs", "kbest_paths", "linear_chain_forward", "viterbi"]

NEG_INF = float("-inf")


def chain_forward(init: Tensor, edges: Tensor, end: Tensor | None, lengths: Tensor, semiring: Semiring,
                  keep: bool = False) -> tuple[Tensor, list[Tensor]]:
    """Core recursion. ``init (B, C)``, ``edges (B, T-1, C, C)`` -> ``(size, B)`` totals.

    ``edges[b, t-1, j, k]`` is the potential of moving from tag ``j`` at ``t-1`` to ``k`` at ``t``
    (transition plus the emission at ``t``). With ``keep``, also returns every ``alpha_t``.
    """
    alpha = semiring.lift(init)  # (S, B, C)
    kept = [alpha] if keep else []
    for t in range(edges.shape[1]):
        new = semiring.sum(semiring.times(alpha.unsqueeze(-1), edges[:, t]), dim=-2)
        alpha = torch.where((t + 1 < lengths).view(1, -1, 1), new, alpha)
        if keep:
            kept.append(alpha)
    if end is not None:
        alpha = semiring.times(alpha, end)
    return semiring.sum(alpha, dim=-1), kept


def viterbi(init: Tensor, em: Tensor, tr: Tensor, end: Tensor | None,
            lengths: Tensor) -> tuple[Tensor, Tensor]:
    """Viterbi: tags ``(B, T)`` (``-1`` beyond each length) and best scores ``(B,)``.

    The forward max-sum recursion keeps only the values ``v_t (B, C)`` (``amax``, no
    argmax indices: on CPU the index-tracking ``max`` over ``(B, C, C)`` costs about as much
    again); the path is read backwards from each sequence's last position by recomputing
    ``argmax_j v_{t-1}(j) + A_{j, y_t}`` for the one chosen ``y_t`` per sequence, ``O(B C)`` per
    step instead of ``O(B C^2)``. Differentiable in the scores.
    """
    b, c = init.shape
    t = em.shape[1] + 1
    tr_t = tr.t().contiguous()  # (C_next, C_prev): reduce over the contiguous axis
    v = init
    vs = [v]
    for i in range(1, t):
        v = torch.amax(v.unsqueeze(1) + tr_t, -1) + em[:, i - 1]
        vs.append(v)
    stacked = torch.stack(vs, 1)
    values = stacked.detach()
    last = lengths - 1
    v_last = stacked[torch.arange(b, device=init.device), last]
    if end is not None:
        v_last = v_last + end
    score, tag = v_last.max(-1)
    tags = torch.empty(b, t, dtype=torch.long, device=init.device)
    cur = tag
    at_last = last[:, None] == torch.arange(t, device=init.device)
    tr_d = tr_t.detach()
    for i in range(t - 1, -1, -1):
        cur = torch.where(at_last[:, i], tag, cur)
        tags[:, i] = cur
        if i:
            cur = (values[:, i - 1] + tr_d[cur]).argmax(-1)
    pos = torch.arange(t, device=init.device)
    return tags.masked_fill(pos >= lengths[:, None], -1), score


def kbest_paths(init: Tensor, em: Tensor, tr: Tensor, end: Tensor | None, lengths: Tensor,
                k: int) -> tuple[Tensor, Tensor]:
    """k-best Viterbi with back-pointers: tags ``(k, B, T)`` and scores ``(k, B)``, descending.

    Each state keeps the ``k`` best prefixes ending in it, ``v_t (B, C, k)``; a step takes the top
    ``k`` of the ``C k`` extensions ``v_{t-1}(j, r) + A_{j, c}`` per next tag ``c`` (``topk``,
    ``O(B C^2 k)``) and records which ``(j, r)`` each came from. The prefixes kept per state are
    distinct, so the ``k`` results are distinct sequences; the pointers are read backwards in
    ``O(B k)`` per step. Scores are ``topk`` values, hence differentiable in every potential.
    Slots with no sequence left have score ``-inf`` (their tags are set to ``-1`` by the caller).
    """
    b, c = init.shape
    t = em.shape[1] + 1
    v = torch.cat([init.unsqueeze(-1), init.new_full((b, c, k - 1), NEG_INF)], -1)  # (B, C, k)
    pointers = []
    for i in range(1, t):
        cand = (v.unsqueeze(2) + tr[None, :, :, None]).transpose(1, 2).reshape(b, c, c * k)
        top, idx = cand.topk(k, dim=-1)  # (B, C_next, k): index j * k + r into (C_prev, k)
        v = torch.where((i < lengths).view(b, 1, 1), top + em[:, i - 1, :, None], v)
        pointers.append(idx)
    final = v if end is None else v + end[None, :, None]
    scores, flat = final.reshape(b, c * k).topk(k, dim=-1)  # (B, k)
    state, rank = flat // k, flat % k
    last = lengths - 1
    rows = torch.arange(b, device=init.device)[:, None]
    tags = torch.full((t, b, k), -1, dtype=torch.long, device=init.device)
    for i in range(t - 1, -1, -1):
        inside = (i <= last)[:, None]  # position i is part of the sequence
        tags[i] = torch.where(inside, state, -1)
        if i:
            came = pointers[i - 1][rows, state, rank]
            state = torch.where(inside, came // k, state)
            rank = torch.where(inside, came % k, rank)
    return tags.permute(2, 1, 0), scores.t()


def count_paths(transitions: Tensor, start: Tensor | None, end: Tensor | None, lengths: Tensor,
                cap: int) -> Tensor:
    """Number of allowed tag sequences per sequence, ``(B,)`` float64, clipped at ``cap``.

    A sequence is allowed when every potential on it is finite (the ``allowed*`` masks put
    ``-inf``); the count is the forward recursion over the counting semiring (``+``, ``x``).
    Per-state counts are clipped at ``cap``: a prefix that can still reach an allowed end extends
    to at least one distinct complete sequence, so the clipped total equals the true total whenever
    that is below ``cap``, and is ``>= cap`` otherwise. ``O(T B C^2)``; without masks it is
    ``C ** L`` in closed form.
    """
    c = transitions.shape[0]
    lengths = lengths.to(torch.float64)
    if (bool(torch.isfinite(transitions).all()) and (start is None or bool(torch.isfinite(start).all()))
            and (end is None or bool(torch.isfinite(end).all()))):
        return torch.clamp_max(torch.full_like(lengths, float(c)) ** lengths, float(cap))
    dev = transitions.device
    ones = torch.ones(c, dtype=torch.float64, device=dev)
    a = torch.isfinite(transitions).to(torch.float64)
    s = ones if start is None else torch.isfinite(start).to(torch.float64)
    e = ones if end is None else torch.isfinite(end).to(torch.float64)
    count = s.expand(lengths.shape[0], c)
    for i in range(1, int(lengths.max())):
        new = torch.clamp_max(count @ a, float(cap))
        count = torch.where((i < lengths)[:, None], new, count)
    total = torch.clamp_max(count @ e, float(cap))
    return torch.where(lengths == 0, torch.ones_like(total), total)


def ffbs(init: Tensor, edges: Tensor, end: Tensor | None, lengths: Tensor, n: int,
         generator: torch.Generator | None) -> Tensor:
    """``n`` exact draws ``(n, B, T)`` by forward filtering, backward sampling; ``-1`` beyond length.

    The log-semiring ``alpha_t (B, C)`` are kept; the last tag is drawn from ``alpha_L + end`` and
    each earlier one from ``alpha_t(j) + edges[t, j, y_{t+1}]``, every draw by Gumbel-max.
    ``O(T B C^2)`` for the filter and ``O(T n B C)`` for the draws; no gradient.
    """
    b, c = init.shape
    t = edges.shape[1] + 1
    _, alphas = chain_forward(init, edges, None, lengths, LogSemiring(), keep=True)
    end = end if end is not None else init.new_zeros(c)
    out = torch.full((n, b, t), -1, dtype=torch.long, device=init.device)
    nxt = torch.zeros((n, b), dtype=torch.long, device=init.device)
    for s in range(t - 1, -1, -1):
        logits = (alphas[s][0] + end).expand(n, b, c)
        if s < t - 1:
            idx = nxt.clamp(min=0).view(n, b, 1, 1).expand(n, b, c, 1)
            cond = alphas[s][0] + edges[:, s].expand(n, b, c, c).gather(-1, idx).squeeze(-1)
            logits = torch.where((s < lengths - 1).view(1, b, 1), cond, logits)
        u = torch.rand((n, b, c), generator=generator, dtype=logits.dtype,
                       device=logits.device).clamp_min(torch.finfo(logits.dtype).tiny)
        draw = (logits - torch.log(-torch.log(u))).argmax(-1)
        nxt = torch.where((s < lengths).view(1, b), draw, nxt.new_full((), -1))
        out[:, :, s] = nxt
    return out


def linear_chain_forward(emissions: Tensor, transitions: Tensor, lengths: Tensor | None,
                         semiring: Semiring, start: Tensor | None = None,
                         end: Tensor | None = None) -> Tensor:
    """Semiring total over all tag sequences: ``(size, B)``, e.g. ``log Z`` for the log semiring.

    Args:
        emissions: ``(B, T, C)`` node log-potentials.
        transitions: ``(C, C)`` edge log-potentials, ``transitions[prev, next]``.
        lengths: ``(B,)`` integers in ``[0, T]``; ``None`` means all ``T``. A sequence of length 0
            has one (empty) tagging of score 0, so its total is the semiring's ``one``.
        semiring: e.g. ``LogSemiring()``, ``MaxSemiring()``, ``KMaxSemiring(k)``.
        start, end: optional ``(C,)`` log-potentials of the first and last tag.
    """
    check_potentials(emissions, transitions, start, end)
    b, t, _ = emissions.shape
    lengths, lo, hi = check_lengths(lengths, b, t, emissions.device)
    if lo > 0:
        init = emissions[:, 0] if start is None else emissions[:, 0] + start
        return chain_forward(init, transitions + emissions[:, 1:].unsqueeze(-2), end, lengths, semiring)[0]
    one = semiring.lift(emissions.new_zeros(b))  # (size, B): the empty sequence's total
    if hi == 0:
        return one
    rows = (lengths > 0).nonzero().squeeze(1)
    total = linear_chain_forward(emissions[rows, :hi], transitions, lengths[rows], semiring, start, end)
    return one.index_copy(1, rows, total)
