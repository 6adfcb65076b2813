"""Linear-chain CRF: one forward recursion over a semiring, and a distribution on top.

Score convention (log-potentials, i.e. ``score = -energy``): for a sequence of length ``L``,

    score(y) = start[y_1] + sum_{t=1..L} emissions[t, y_t] + sum_{t=2..L} transitions[y_{t-1}, y_t]
               + end[y_L],        p(y | x) = exp(score(y) - log Z),

the linear-chain CRF of Lafferty, McCallum & Pereira (2001), "Conditional random fields", Eq. 4.3
of the monograph with ``transitions = A``. Shapes: ``B`` batch, ``T`` padded length, ``C`` tags.

The recursion (forward algorithm; max gives Viterbi) is written once::

    alpha_1(k) = start[k] + emissions[1, k]
    alpha_t(k) = (+)_j alpha_{t-1}(j) (x) (transitions[j, k] + emissions[t, k])      t <= L
    total      = (+)_k alpha_L(k) (x) end[k]

with ``(+), (x)`` from :mod:`ebms.structured.semiring`; for ``t > L`` the state is carried over,
so ragged batches need no Python loop over the batch. Cost: ``O(T B C^2)`` time, ``T`` sequential
steps, ``O(T B C^2)`` memory for the edge potentials. Marginals are gradients of ``log Z`` with
respect to the potentials (Eisner, 2016, "Inside-outside and forward-backward algorithms are just
backprop"), taken with ``create_graph`` so that they stay differentiable; Viterbi and k-best paths
are read from back-pointers (k-best: the ``k`` best prefixes per tag, the parallel list Viterbi
algorithm of Seshadri & Sundberg, 1994, "List Viterbi decoding algorithms with applications"). Sequences of length
0 (and empty batches) are split off: they have one tagging, the empty one, of score 0.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor

from ebms._checks import check_bool_mask, check_finite, check_int, check_shape, check_tensor
from ebms.structured.semiring import LogSemiring, Semiring

__all__ = ["LinearChainCRF", "bio_allowed_transitions", "linear_chain_forward"]

NEG_INF = float("-inf")


def _chain(init: Tensor, edges: Tensor, end: Tensor | None, lengths: Tensor, semiring: Semiring,
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


# Scaled exp-space recursion (Rabiner, 1989, "A tutorial on hidden Markov models", section V.A):
# one (B, C) x (C, C) product per step instead of a (B, C, C) log-sum-exp. It is exact up to
# rounding when no product can underflow, i.e. all potentials are finite and their spread (range of
# the transitions + largest per-step range of the node potentials + range of ``end``) is at most
# ``_SPREAD[dtype]`` nats: then every term is >= exp(-2 spread) / C^2, far above the smallest
# normal number. Otherwise the log-space recursion ``_chain`` is used.
_SPREAD = {torch.float32: 30.0, torch.float64: 300.0}


def _spread(x: Tensor) -> Tensor:
    return (x.amax(-1) - x.amin(-1)).max()


def _scaled_ok(init: Tensor, em: Tensor, tr: Tensor, end: Tensor) -> bool:
    limit = _SPREAD.get(init.dtype)
    if limit is None or init.shape[-1] > 4096:
        return False
    with torch.no_grad():
        r = _spread(tr) + _spread(init) + _spread(end)
        if em.shape[1]:
            r = r + _spread(em)
        return bool(r <= limit)  # False for nan/inf (masked potentials)


class _ScaledLogZ(torch.autograd.Function):
    """``log Z`` by the scaled forward recursion; gradient by the scaled backward recursion.

    Buffers are time-major ``(T, B, C)`` so that each step reads and writes one contiguous
    block, and each step is four kernels (``mm``, ``mul_``, ``sum``, ``div`` into the buffer):
    at 10 tags the loop's per-kernel overhead, not arithmetic, is the cost.
    """

    @staticmethod
    def forward(ctx, init: Tensor, em: Tensor, tr: Tensor, end: Tensor,  # type: ignore[override]
                lengths: Tensor) -> Tensor:
        b, c = init.shape
        x = torch.cat([init.unsqueeze(0), em.transpose(0, 1)], dim=0)  # (T, B, C)
        t = x.shape[0]
        m = x.amax(-1, keepdim=True)
        e = (x - m).exp_()
        s = tr.max()
        mat = (tr - s).exp_()
        e_max = end.max()
        e_end = (end - e_max).exp_()
        a = torch.empty_like(x)
        norms = []
        cur = e[0]
        for i in range(t):
            if i:
                cur = torch.mm(a[i - 1], mat).mul_(e[i])
            ni = cur.sum(-1, keepdim=True)
            norms.append(ni)
            torch.div(cur, ni, out=a[i])
        n = torch.cat(norms, 1)  # (B, T)
        last = lengths - 1
        a_last = a[last, torch.arange(b, device=a.device)]
        f = a_last @ e_end
        logc = (n.log() + m.squeeze(-1).t()).cumsum(1).gather(1, last[:, None]).squeeze(1)
        log_z = f.log() + e_max + logc + last.to(x.dtype) * s
        ctx.save_for_backward(init, em, tr, end, lengths, a, n, e, mat, e_end, f, a_last)
        return log_z

    @staticmethod
    def backward(ctx, g: Tensor):  # type: ignore[override]
        init, em, tr, end, lengths, a, n, e, mat, e_end, f, a_last = ctx.saved_tensors
        if torch.is_grad_enabled():  # double backward: differentiate the log-space recursion
            ins = [x for x in (init, em, tr, end) if x.requires_grad]
            edges = tr + em.unsqueeze(-2)
            z = _chain(init, edges, end, lengths, LogSemiring())[0][0]
            gs = iter(torch.autograd.grad(z, ins, g, create_graph=True, allow_unused=True))
            out = [next(gs) if x.requires_grad else None for x in (init, em, tr, end)]
            return (*[o if o is not None or not x.requires_grad else torch.zeros_like(x)
                      for o, x in zip(out, (init, em, tr, end))], None)
        t, b, c = a.shape
        last = lengths - 1
        start_beta = e_end / f[:, None]  # (B, C): scaled beta at each sequence's last step
        at_last = (last[None, :] == torch.arange(t, device=a.device)[:, None]).unsqueeze(-1)  # (T, B, 1)
        w = e[1:] / n.t()[1:, :, None]  # (T-1, B, C)
        beta = a.new_zeros(b, c)
        betas = torch.empty_like(a)
        mat_t = mat.t()
        for i in range(t - 1, -1, -1):
            torch.where(at_last[i], start_beta, beta, out=betas[i])
            if i:
                beta = torch.mm(betas[i] * w[i - 1], mat_t)
        gg = g[None, :, None]
        node = a * betas  # node marginals, zero beyond each length
        g_init = g_em = g_tr = g_end = None
        if ctx.needs_input_grad[0]:
            g_init = node[0] * g[:, None]
        if ctx.needs_input_grad[1]:
            g_em = (node[1:] * gg).transpose(0, 1)
        if ctx.needs_input_grad[2] and t > 1:
            lhs = (a[:-1] * gg).reshape(-1, c)
            g_tr = torch.mm(lhs.t(), (betas[1:] * w).reshape(-1, c)).mul_(mat)
        elif ctx.needs_input_grad[2]:
            g_tr = torch.zeros_like(tr)
        if ctx.needs_input_grad[3]:
            g_end = a_last * start_beta * g[:, None]
        return g_init, g_em, g_tr, g_end, None


def _log_z(init: Tensor, em: Tensor, tr: Tensor, end: Tensor | None, lengths: Tensor) -> Tensor:
    """``log Z (B,)`` from ``init (B, C)``, ``em (B, T-1, C)``, ``tr (C, C)``, ``end (C,)``."""
    end_ = init.new_zeros(init.shape[-1]) if end is None else end
    if _scaled_ok(init, em, tr, end_):
        return _ScaledLogZ.apply(init, em, tr, end_, lengths)
    return _chain(init, tr + em.unsqueeze(-2), end, lengths, LogSemiring())[0][0]


def _viterbi(init: Tensor, em: Tensor, tr: Tensor, end: Tensor | None,
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


def _kbest(init: Tensor, em: Tensor, tr: Tensor, end: Tensor | None, lengths: Tensor,
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


def _count_paths(transitions: Tensor, start: Tensor | None, end: Tensor | None, lengths: Tensor,
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


def _check_lengths(lengths: Tensor | None, batch: int, steps: int,
                   device: torch.device) -> tuple[Tensor, int, int]:
    """Checked ``(B,)`` long lengths and their min and max (0 for an empty batch)."""
    if lengths is None:
        full = steps if batch else 0
        return torch.full((batch,), steps, dtype=torch.long, device=device), full, full
    check_tensor(lengths, "lengths")
    if lengths.is_floating_point() or lengths.is_complex() or lengths.dtype == torch.bool:
        raise TypeError(f"lengths: expected an integer tensor; got dtype {lengths.dtype}")
    check_shape(lengths, (batch,), "lengths")
    if lengths.device != device:
        raise ValueError(f"lengths: expected device {device}; got {lengths.device}")
    lo, hi = (int(lengths.min()), int(lengths.max())) if batch else (0, 0)
    if lo < 0 or hi > steps:
        raise ValueError(f"lengths: expected values in [0, {steps}] (T = emissions.shape[1]); "
                         f"got min {lo}, max {hi}")
    return lengths.long(), lo, hi


def _check_potentials(emissions: Tensor, transitions: Tensor, start: Tensor | None,
                      end: Tensor | None) -> None:
    check_tensor(emissions, "emissions", floating=True)
    if emissions.dim() != 3:
        raise ValueError(f"emissions: expected shape (B, T, C); got {tuple(emissions.shape)}")
    b, t, c = emissions.shape
    if c == 0:
        raise ValueError(f"emissions: expected at least one tag (C = shape[2] >= 1); got shape {(b, t, c)}")
    check_finite(emissions, "emissions")
    for name, x, shape in (("transitions", transitions, (c, c)), ("start", start, (c,)),
                           ("end", end, (c,))):
        if x is None:
            continue
        check_tensor(x, name, floating=True)
        check_shape(x, shape, f"{name} (C = emissions.shape[2] = {c})")
        if x.dtype != emissions.dtype or x.device != emissions.device:
            raise TypeError(f"{name}: expected dtype {emissions.dtype} on {emissions.device} "
                            f"(as emissions); got {x.dtype} on {x.device}")
        check_finite(x, name)


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
    _check_potentials(emissions, transitions, start, end)
    b, t, _ = emissions.shape
    lengths, lo, hi = _check_lengths(lengths, b, t, emissions.device)
    if lo > 0:
        init = emissions[:, 0] if start is None else emissions[:, 0] + start
        return _chain(init, transitions + emissions[:, 1:].unsqueeze(-2), end, lengths, semiring)[0]
    one = semiring.lift(emissions.new_zeros(b))  # (size, B): the empty sequence's total
    if hi == 0:
        return one
    rows = (lengths > 0).nonzero().squeeze(1)
    total = linear_chain_forward(emissions[rows, :hi], transitions, lengths[rows], semiring, start, end)
    return one.index_copy(1, rows, total)


def bio_allowed_transitions(tags: list[str]) -> tuple[Tensor, Tensor]:
    """BIO constraints: ``I-X`` may only follow ``B-X`` or ``I-X``, and may not start a sequence.

    Args:
        tags: tag names, each ``"O"``, ``"B-<type>"`` or ``"I-<type>"``.

    Returns:
        ``(allowed (C, C), allowed_start (C,))`` boolean masks for :class:`LinearChainCRF`.
    """
    if not isinstance(tags, (list, tuple)) or len(tags) == 0:
        raise ValueError(f"tags: expected a non-empty list of tag names; got {tags!r}")
    kinds = []
    for tag in tags:
        if tag == "O":
            kinds.append(("O", ""))
        elif isinstance(tag, str) and len(tag) > 2 and tag[:2] in ("B-", "I-"):
            kinds.append((tag[0], tag[2:]))
        else:
            raise ValueError(f"tags: expected 'O', 'B-<type>' or 'I-<type>'; got {tag!r}")
    c = len(tags)
    allowed = torch.ones(c, c, dtype=torch.bool)
    allowed_start = torch.ones(c, dtype=torch.bool)
    for k, (kind, typ) in enumerate(kinds):
        if kind == "I":
            allowed_start[k] = False
            for j, (pk, pt) in enumerate(kinds):
                allowed[j, k] = pk in ("B", "I") and pt == typ
    return allowed, allowed_start


def _mask(x: Tensor | None, mask: Tensor | None, c: int, like: Tensor) -> Tensor | None:
    if mask is None:
        return x
    base = like.new_zeros(c) if x is None else x
    return base.masked_fill(~mask.to(like.device), NEG_INF)


def _dot(p: Tensor, x: Tensor) -> Tensor:
    """``sum p * x`` per batch row, with ``0 * -inf = 0`` and a zero (not NaN) gradient there."""
    return (p * x.masked_fill(torch.isneginf(x), 0.0)).flatten(1).sum(1)


def _no_allowed(log_z: Tensor) -> None:
    bad = torch.isneginf(log_z)
    if bool(bad.any()):
        raise ValueError(f"allowed: no tag sequence is allowed for batch elements "
                         f"{bad.nonzero().flatten().tolist()}")


class LinearChainCRF:
    """Distribution over tag sequences ``y`` of a linear-chain CRF (see the module docstring).

    Args:
        emissions: ``(B, T, C)`` finite float node log-potentials; ``B = 0`` and ``T = 0`` allowed.
        transitions: ``(C, C)`` finite edge log-potentials, ``transitions[prev, next]``.
        lengths: ``(B,)`` integers in ``[0, T]``; ``None`` means every sequence has length ``T``.
            A sequence of length 0 has exactly one tagging, the empty one, of score 0.
        start, end: optional ``(C,)`` log-potentials of the first and last tag.
        allowed: optional ``(C, C)`` bool mask; ``False`` transitions get log-potential ``-inf``.
        allowed_start, allowed_end: optional ``(C,)`` bool masks for the first and last tag.

    Decoded tags are ``(..., B, T)`` long tensors padded with ``-1`` beyond each length.

    Gradients: every floating result (``log_partition``, ``score``, ``log_prob``, ``marginals``,
    ``pair_marginals``, ``entropy``, ``max_score``, ``kbest`` scores) is differentiable with
    respect to each of ``emissions``, ``transitions``, ``start`` and ``end`` that requires grad,
    in any combination, and is joined to all of them in the autograd graph (with an exactly zero
    gradient where it does not depend on one, e.g. ``transitions`` when every length is 1), so
    ``backward`` never fails for lack of a graph. Marginals are gradients of ``log Z`` taken with
    ``create_graph`` whenever a potential requires grad, so the entropy's gradient (second order)
    is exact. Results are computed once per object and grad mode (a result first read under
    ``torch.no_grad()`` is recomputed, not reused, when read again with gradients on).
    """

    def __init__(self, emissions: Tensor, transitions: Tensor, lengths: Tensor | None = None, *,
                 start: Tensor | None = None, end: Tensor | None = None,
                 allowed: Tensor | None = None, allowed_start: Tensor | None = None,
                 allowed_end: Tensor | None = None) -> None:
        _check_potentials(emissions, transitions, start, end)
        b, t, c = emissions.shape
        ln, lo, hi = _check_lengths(lengths, b, t, emissions.device)
        mask = check_bool_mask(allowed, (c, c), "allowed")
        tr = transitions if mask is None else transitions.masked_fill(~mask.to(emissions.device), NEG_INF)
        st = _mask(start, check_bool_mask(allowed_start, (c,), "allowed_start"), c, emissions)
        en = _mask(end, check_bool_mask(allowed_end, (c,), "allowed_end"), c, emissions)
        params = tuple(p for p in (emissions, transitions, start, end) if p is not None)
        self._setup(emissions, tr, ln, st, en, params, lo, hi)

    def _setup(self, emissions: Tensor, transitions: Tensor, lengths: Tensor, start: Tensor | None,
               end: Tensor | None, params: tuple[Tensor, ...], lo: int, hi: int) -> None:
        """Store checked potentials; empty sequences are split off into ``_rows`` / ``_inner``."""
        self.emissions, self.transitions, self.lengths = emissions, transitions, lengths
        self.start, self.end = start, end
        self._params = params  # the caller's potentials, before masking
        self._cache: dict[tuple[str, bool], object] = {}
        self._uses_all = hi >= 2  # every potential enters the nonempty rows' computations
        self._rows: Tensor | None = None  # indices of nonempty sequences, when some are empty
        self._inner: LinearChainCRF | None = None  # the CRF of those rows
        if lo == 0:
            self._rows = (lengths > 0).nonzero().squeeze(1)
            if hi > 0:
                inner = LinearChainCRF.__new__(LinearChainCRF)
                inner_lengths = lengths[self._rows]
                inner._setup(emissions[self._rows, :hi], transitions, inner_lengths, start, end, params,
                             int(inner_lengths.min()), hi)
                self._inner = inner

    # -- plumbing ---------------------------------------------------------------------------
    def _graph(self) -> bool:
        """Whether results must carry gradients (grad mode on, some potential requires grad)."""
        return torch.is_grad_enabled() and any(p.requires_grad for p in self._params)

    def _memo(self, key: str, fn: Callable[[], Any]) -> Any:
        """``fn()`` cached per grad mode; a graph-carrying result is reused, detached, without."""
        graph = self._graph()
        if (key, graph) not in self._cache:
            if not graph and (key, True) in self._cache:
                return _detached(self._cache[(key, True)])
            self._cache[(key, graph)] = fn()
        return self._cache[(key, graph)]

    def _connect(self, x: Tensor) -> Tensor:
        """``x + 0 * sum(potentials requiring grad)`` where ``x`` may not use all of them."""
        if self._uses_all or not self._graph():
            return x
        return x + torch.stack([p.sum() for p in self._params if p.requires_grad]).sum() * 0.0

    def _potentials(self) -> tuple[Tensor, Tensor]:
        init = self.emissions[:, 0] if self.start is None else self.emissions[:, 0] + self.start
        edges = self.transitions + self.emissions[:, 1:].unsqueeze(-2)
        return init, edges

    def _scatter(self, full: Tensor, part: Tensor, dim: int = 0) -> Tensor:
        """``full`` with the nonempty rows (axis ``dim``) replaced by ``part``, zero-padded in T."""
        assert self._rows is not None
        if full.dim() > dim + 1 and full.shape[dim + 1] > part.shape[dim + 1]:
            pad = [0, 0] * (full.dim() - dim - 1)
            pad[-1] = full.shape[dim + 1] - part.shape[dim + 1]
            part = torch.nn.functional.pad(part, pad)
        return full.index_copy(dim, self._rows, part)

    # -- partition and probabilities --------------------------------------------------------
    @property
    def log_partition(self) -> Tensor:
        """``log Z`` per sequence, ``(B,)``. Raises if a sequence has no allowed tagging."""
        return self._memo("log_z", self._log_partition)

    def _log_partition(self) -> Tensor:
        if self._rows is not None:
            z = self.emissions.new_zeros(self.emissions.shape[0])
            return self._connect(z if self._inner is None else self._scatter(z, self._inner.log_partition))
        init = self.emissions[:, 0] if self.start is None else self.emissions[:, 0] + self.start
        log_z = _log_z(init, self.emissions[:, 1:], self.transitions, self.end, self.lengths)
        _no_allowed(log_z)
        return self._connect(log_z)

    def score(self, tags: Tensor) -> Tensor:
        """Unnormalised log-potential ``score(y)`` of ``tags (B, T)``, ``(B,)``; entries beyond
        each length are ignored, and an empty sequence scores 0."""
        b, t, c = self.emissions.shape
        check_tensor(tags, "tags")
        if tags.is_floating_point() or tags.dtype == torch.bool:
            raise TypeError(f"tags: expected an integer tensor; got dtype {tags.dtype}")
        check_shape(tags, (b, t), "tags")
        valid = torch.arange(t, device=tags.device) < self.lengths[:, None]
        inside = tags[valid]
        if inside.numel() and (int(inside.min()) < 0 or int(inside.max()) >= c):
            raise ValueError(f"tags: expected values in [0, {c - 1}] within each length; "
                             f"got min {int(inside.min())}, max {int(inside.max())}")
        if self._rows is not None:
            s = self.emissions.new_zeros(b)
            if self._inner is not None:
                sub = tags[self._rows, : self._inner.emissions.shape[1]]
                s = self._scatter(s, self._inner._score(sub, valid[self._rows, : sub.shape[1]]))
            return self._connect(s)
        return self._connect(self._score(tags, valid))

    def _score(self, tags: Tensor, valid: Tensor) -> Tensor:
        y = tags.long().masked_fill(~valid, 0)
        s = (self.emissions.gather(-1, y.unsqueeze(-1)).squeeze(-1) * valid).sum(1)
        trans = self.transitions[y[:, :-1], y[:, 1:]]
        s = s + torch.where(valid[:, 1:], trans, trans.new_zeros(())).sum(1)
        if self.start is not None:
            s = s + self.start[y[:, 0]]
        if self.end is not None:
            s = s + self.end[y.gather(1, (self.lengths - 1)[:, None]).squeeze(1)]
        return s

    def log_prob(self, tags: Tensor) -> Tensor:
        """``log p(tags)``, ``(B,)``; entries beyond each length are ignored (``-inf`` if the
        sequence uses a disallowed transition)."""
        return self.score(tags) - self.log_partition

    def _marginals(self) -> tuple[Tensor, Tensor]:
        return self._memo("marginals", self._compute_marginals)

    def _compute_marginals(self) -> tuple[Tensor, Tensor]:
        b, t, c = self.emissions.shape
        if self._rows is not None:
            node = self.emissions.new_zeros(b, t, c)
            pair = self.emissions.new_zeros(b, max(t - 1, 0), c, c)
            if self._inner is not None:
                n_in, p_in = self._inner._marginals()
                node, pair = self._scatter(node, n_in), self._scatter(pair, p_in)
            return self._connect(node), self._connect(pair)
        graph = self._graph()
        with torch.set_grad_enabled(graph):
            init, edges = self._potentials()
        end = self.end if graph or self.end is None else self.end.detach()
        # Differentiate with respect to the potentials themselves when they carry a graph (then
        # the marginals do too, via create_graph); fresh leaves otherwise.
        init = init if init.requires_grad else init.detach().requires_grad_()
        edges = edges if edges.requires_grad else edges.detach().requires_grad_()
        with torch.enable_grad():
            log_z = _chain(init, edges, end, self.lengths, LogSemiring())[0][0]
            _no_allowed(log_z.detach())
            g_init, g_edges = torch.autograd.grad(log_z.sum(), (init, edges), create_graph=graph,
                                                  allow_unused=True)
        if g_edges is None:  # T = 1: no edge is used
            g_edges = torch.zeros_like(edges)
        node = torch.cat([g_init.unsqueeze(1), g_edges.sum(-2)], dim=1)
        return self._connect(node), self._connect(g_edges)

    @property
    def marginals(self) -> Tensor:
        """Node marginals ``p(y_t = k)``, ``(B, T, C)``; zero beyond each length."""
        return self._marginals()[0]

    @property
    def pair_marginals(self) -> Tensor:
        """Pair marginals ``p(y_{t} = j, y_{t+1} = k)``, ``(B, T-1, C, C)``; zero beyond length."""
        return self._marginals()[1]

    @property
    def entropy(self) -> Tensor:
        """``H = log Z - E[score(y)]``, ``(B,)``, from the marginals (``0 * -inf`` taken as 0).

        Absolute rounding error about ``eps * |log Z|`` (cancellation); a result rounded below 0
        is returned as 0.
        """
        return self._memo("entropy", self._entropy)

    def _entropy(self) -> Tensor:
        if self._rows is not None:
            h = self.emissions.new_zeros(self.emissions.shape[0])
            return self._connect(h if self._inner is None else self._scatter(h, self._inner.entropy))
        node, pair = self._marginals()
        init, edges = self._potentials()
        expected = _dot(node[:, 0], init) + _dot(pair, edges)
        if self.end is not None:
            last = node[torch.arange(node.shape[0], device=node.device), self.lengths - 1]
            expected = expected + _dot(last, self.end.expand_as(last))
        return self._connect((self.log_partition - expected).clamp_min(0.0))

    # -- decoding and sampling --------------------------------------------------------------
    def _best(self) -> tuple[Tensor, Tensor]:
        return self._memo("viterbi", self._compute_best)

    def _compute_best(self) -> tuple[Tensor, Tensor]:
        b, t, _ = self.emissions.shape
        if self._rows is not None:
            tags = torch.full((b, t), -1, dtype=torch.long, device=self.emissions.device)
            best = self.emissions.new_zeros(b)
            if self._inner is not None:
                tags_in, best_in = self._inner._best()
                tags[self._rows, : tags_in.shape[1]] = tags_in
                best = self._scatter(best, best_in)
            return tags, self._connect(best)
        init = self.emissions[:, 0] if self.start is None else self.emissions[:, 0] + self.start
        tags, best = _viterbi(init, self.emissions[:, 1:], self.transitions, self.end, self.lengths)
        if bool(torch.isneginf(best).any()):
            self.log_partition  # noqa: B018  (raises: nothing is allowed)
        return tags, self._connect(best)

    @property
    def argmax(self) -> Tensor:
        """Viterbi tags ``(B, T)``, ``-1`` beyond each length."""
        return self._best()[0]

    @property
    def max_score(self) -> Tensor:
        """``score(argmax)``, ``(B,)``."""
        return self._best()[1]

    def kbest(self, k: int) -> tuple[Tensor, Tensor]:
        """The ``k`` highest-scoring sequences, best first: tags ``(K, B, T)``, scores ``(K, B)``.

        ``K = min(k, N)`` where ``N`` is the largest number of allowed tag sequences of any
        sequence in the batch (``C ** L`` without masks; 1 for an empty sequence), so the work is
        bounded by the number of paths however large ``k`` is: ``O(K T B C^2)`` time and
        ``O(K T B C)`` memory (back-pointers). A sequence with fewer than ``K`` taggings has score
        ``-inf`` and tags ``-1`` in the remaining slots. Ties are broken arbitrarily; the ``K``
        sequences are distinct.
        """
        check_int(k, "k", minimum=1)
        b, t, _ = self.emissions.shape
        counts = _count_paths(self.transitions, self.start, self.end, self.lengths, k) if b else None
        if counts is not None and bool((counts == 0).any()):
            _no_allowed(torch.where(counts == 0, NEG_INF, 0.0))
        kk = int(counts.max()) if counts is not None else 0
        dev = self.emissions.device
        if self._rows is not None:
            tags = torch.full((kk, b, t), -1, dtype=torch.long, device=dev)
            scores = self.emissions.new_full((kk, b), NEG_INF)
            if kk:  # the empty sequence is the only tagging of length 0
                scores[0] = torch.where(self.lengths == 0, 0.0, NEG_INF)
            if self._inner is not None:
                tags_in, scores_in = self._inner.kbest(kk)
                tags[: tags_in.shape[0], self._rows, : tags_in.shape[2]] = tags_in
                scores_in = torch.nn.functional.pad(scores_in, (0, 0, 0, kk - scores_in.shape[0]),
                                                    value=NEG_INF)
                scores = scores.index_copy(1, self._rows, scores_in)
            return tags, self._connect(scores)
        with torch.set_grad_enabled(self._graph()):
            init = self.emissions[:, 0] if self.start is None else self.emissions[:, 0] + self.start
            tags, scores = _kbest(init, self.emissions[:, 1:], self.transitions, self.end,
                                  self.lengths, kk)
        tags = tags.masked_fill(torch.isneginf(scores)[..., None], -1)
        return tags, self._connect(scores)

    def sample(self, n: int, generator: torch.Generator | None = None) -> Tensor:
        """``n`` exact draws ``(n, B, T)`` by forward filtering, backward sampling
        (Carter & Kohn, 1994; Gumbel-max at each step); ``-1`` beyond each length."""
        check_int(n, "n", minimum=1)
        self.log_partition  # noqa: B018  (raises if nothing is allowed)
        b, t, c = self.emissions.shape
        if self._rows is not None:
            out = torch.full((n, b, t), -1, dtype=torch.long, device=self.emissions.device)
            if self._inner is not None:
                draws = self._inner.sample(n, generator)
                out[:, self._rows, : draws.shape[2]] = draws
            return out
        with torch.no_grad():
            init, edges = self._potentials()
            _, alphas = _chain(init, edges, None, self.lengths, LogSemiring(), keep=True)
            end = self.end if self.end is not None else init.new_zeros(c)
            out = torch.full((n, b, t), -1, dtype=torch.long, device=init.device)
            nxt = torch.zeros((n, b), dtype=torch.long, device=init.device)
            for s in range(t - 1, -1, -1):
                logits = (alphas[s][0] + end).expand(n, b, c)
                if s < t - 1:
                    idx = nxt.clamp(min=0).view(n, b, 1, 1).expand(n, b, c, 1)
                    cond = alphas[s][0] + edges[:, s].expand(n, b, c, c).gather(-1, idx).squeeze(-1)
                    logits = torch.where((s < self.lengths - 1).view(1, b, 1), cond, logits)
                u = torch.rand((n, b, c), generator=generator, dtype=logits.dtype,
                               device=logits.device).clamp_min(torch.finfo(logits.dtype).tiny)
                draw = (logits - torch.log(-torch.log(u))).argmax(-1)
                nxt = torch.where((s < self.lengths).view(1, b), draw, nxt.new_full((), -1))
                out[:, :, s] = nxt
        return out


def _detached(x: Any) -> Any:
    if isinstance(x, Tensor):
        return x.detach()
    return tuple(_detached(v) for v in x)
