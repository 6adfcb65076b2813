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
steps, ``O(T B C^2)`` memory for the edge potentials. Marginals, Viterbi paths and k-best paths are
gradients of the totals with respect to the potentials (Eisner, 2016, "Inside-outside and
forward-backward algorithms are just backprop").
"""

from __future__ import annotations

from functools import cached_property

import torch
from torch import Tensor

from ebms._checks import check_bool_mask, check_finite, check_int, check_shape, check_tensor
from ebms.structured.semiring import KMaxSemiring, LogSemiring, Semiring

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


def _check_lengths(lengths: Tensor | None, batch: int, steps: int, device: torch.device) -> Tensor:
    if lengths is None:
        return torch.full((batch,), steps, dtype=torch.long, device=device)
    check_tensor(lengths, "lengths")
    if lengths.is_floating_point() or lengths.is_complex() or lengths.dtype == torch.bool:
        raise TypeError(f"lengths: expected an integer tensor; got dtype {lengths.dtype}")
    check_shape(lengths, (batch,), "lengths")
    if lengths.device != device:
        raise ValueError(f"lengths: expected device {device}; got {lengths.device}")
    lo, hi = int(lengths.min()), int(lengths.max())
    if lo < 1 or hi > steps:
        raise ValueError(f"lengths: expected values in [1, {steps}] (T = emissions.shape[1]); "
                         f"got min {lo}, max {hi}")
    return lengths.long()


def _check_potentials(emissions: Tensor, transitions: Tensor, start: Tensor | None,
                      end: Tensor | None) -> None:
    check_tensor(emissions, "emissions", floating=True)
    if emissions.dim() != 3:
        raise ValueError(f"emissions: expected shape (B, T, C); got {tuple(emissions.shape)}")
    b, t, c = emissions.shape
    if b == 0 or t == 0 or c == 0:
        raise ValueError(f"emissions: expected a non-empty batch, length and tag set; "
                         f"got shape {(b, t, c)}")
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
        lengths: ``(B,)`` integers in ``[1, T]``; ``None`` means all ``T``.
        semiring: e.g. ``LogSemiring()``, ``MaxSemiring()``, ``KMaxSemiring(k)``.
        start, end: optional ``(C,)`` log-potentials of the first and last tag.
    """
    _check_potentials(emissions, transitions, start, end)
    b, t, _ = emissions.shape
    lengths = _check_lengths(lengths, b, t, emissions.device)
    init = emissions[:, 0] if start is None else emissions[:, 0] + start
    edges = transitions + emissions[:, 1:].unsqueeze(-2)
    return _chain(init, edges, end, lengths, semiring)[0]


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


def _grad(total: Tensor, init: Tensor, edges: Tensor, *, retain_graph: bool | None = None,
          create_graph: bool = False) -> tuple[Tensor, Tensor]:
    """``d total / d (init, edges)``; zero edge gradient when ``T = 1`` (no edges used)."""
    g_init, g_edges = torch.autograd.grad(total, (init, edges), allow_unused=True,
                                          retain_graph=retain_graph, create_graph=create_graph)
    return g_init, torch.zeros_like(edges) if g_edges is None else g_edges


def _mask(x: Tensor | None, mask: Tensor | None, c: int, like: Tensor) -> Tensor | None:
    if mask is None:
        return x
    base = like.new_zeros(c) if x is None else x
    return base.masked_fill(~mask.to(like.device), NEG_INF)


class LinearChainCRF:
    """Distribution over tag sequences ``y`` of a linear-chain CRF (see the module docstring).

    Args:
        emissions: ``(B, T, C)`` finite float node log-potentials.
        transitions: ``(C, C)`` finite edge log-potentials, ``transitions[prev, next]``.
        lengths: ``(B,)`` integers in ``[1, T]``; ``None`` means every sequence has length ``T``.
        start, end: optional ``(C,)`` log-potentials of the first and last tag.
        allowed: optional ``(C, C)`` bool mask; ``False`` transitions get log-potential ``-inf``.
        allowed_start, allowed_end: optional ``(C,)`` bool masks for the first and last tag.

    Decoded tags are ``(..., B, T)`` long tensors padded with ``-1`` beyond each length.
    Every result is differentiable with respect to the potentials.
    """

    def __init__(self, emissions: Tensor, transitions: Tensor, lengths: Tensor | None = None, *,
                 start: Tensor | None = None, end: Tensor | None = None,
                 allowed: Tensor | None = None, allowed_start: Tensor | None = None,
                 allowed_end: Tensor | None = None) -> None:
        _check_potentials(emissions, transitions, start, end)
        b, t, c = emissions.shape
        self.lengths = _check_lengths(lengths, b, t, emissions.device)
        self.emissions = emissions
        mask = check_bool_mask(allowed, (c, c), "allowed")
        self.transitions: Tensor = transitions if mask is None else transitions.masked_fill(
            ~mask.to(emissions.device), NEG_INF)
        self.start = _mask(start, check_bool_mask(allowed_start, (c,), "allowed_start"), c, emissions)
        self.end = _mask(end, check_bool_mask(allowed_end, (c,), "allowed_end"), c, emissions)

    # -- potentials -------------------------------------------------------------------------
    def _potentials(self) -> tuple[Tensor, Tensor]:
        init = self.emissions[:, 0] if self.start is None else self.emissions[:, 0] + self.start
        edges = self.transitions + self.emissions[:, 1:].unsqueeze(-2)
        return init, edges

    def _leaf_potentials(self) -> tuple[Tensor, Tensor, bool]:
        """Potentials that require grad, so totals can be differentiated w.r.t. them."""
        with torch.enable_grad():
            init, edges = self._potentials()
        graph = init.requires_grad and torch.is_grad_enabled()
        if not graph:
            init, edges = init.detach().requires_grad_(), edges.detach().requires_grad_()
        return init, edges, graph

    def _paths(self, init: Tensor, edges: Tensor, total: Tensor) -> Tensor:
        """Tags ``(B, T)`` of the single structure whose indicator is ``d total / d potentials``."""
        g_init, g_edges = _grad(total, init, edges, retain_graph=True)
        tags = torch.cat([g_init.argmax(-1, keepdim=True), g_edges.sum(-2).argmax(-1)], dim=1)
        pos = torch.arange(tags.shape[1], device=tags.device)
        return tags.masked_fill(pos >= self.lengths[:, None], -1)

    # -- partition and probabilities --------------------------------------------------------
    @cached_property
    def log_partition(self) -> Tensor:
        """``log Z`` per sequence, ``(B,)``. Raises if a sequence has no allowed tagging."""
        init = self.emissions[:, 0] if self.start is None else self.emissions[:, 0] + self.start
        log_z = _log_z(init, self.emissions[:, 1:], self.transitions, self.end, self.lengths)
        bad = torch.isneginf(log_z)
        if bool(bad.any()):
            raise ValueError(f"allowed: no tag sequence is allowed for batch elements "
                             f"{bad.nonzero().flatten().tolist()}")
        return log_z

    def score(self, tags: Tensor) -> Tensor:
        """Unnormalised log-potential ``score(y)`` of ``tags (B, T)``, ``(B,)``."""
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

    @cached_property
    def _marginals(self) -> tuple[Tensor, Tensor]:
        init, edges, graph = self._leaf_potentials()
        with torch.enable_grad():
            log_z = _chain(init, edges, self.end, self.lengths, LogSemiring())[0][0]
            g_init, g_edges = _grad(log_z.sum(), init, edges, create_graph=graph)
        node = torch.cat([g_init.unsqueeze(1), g_edges.sum(-2)], dim=1)
        return node, g_edges

    @property
    def marginals(self) -> Tensor:
        """Node marginals ``p(y_t = k)``, ``(B, T, C)``; zero beyond each length."""
        return self._marginals[0]

    @property
    def pair_marginals(self) -> Tensor:
        """Pair marginals ``p(y_{t} = j, y_{t+1} = k)``, ``(B, T-1, C, C)``; zero beyond length."""
        return self._marginals[1]

    @cached_property
    def entropy(self) -> Tensor:
        """``H = log Z - E[score(y)]``, ``(B,)``, from the marginals (``0 * -inf`` taken as 0)."""
        node, pair = self._marginals
        init, edges = self._potentials()

        def dot(p: Tensor, x: Tensor) -> Tensor:
            return torch.where(p > 0, p * x, p.new_zeros(())).flatten(1).sum(1)

        expected = dot(node[:, 0], init) + dot(pair, edges)
        if self.end is not None:
            last = node.gather(1, (self.lengths - 1).view(-1, 1, 1).expand(-1, 1, node.shape[2]))
            expected = expected + dot(last[:, 0], self.end.expand_as(last[:, 0]))
        return self.log_partition - expected

    # -- decoding and sampling --------------------------------------------------------------
    @cached_property
    def _viterbi(self) -> tuple[Tensor, Tensor]:
        init = self.emissions[:, 0] if self.start is None else self.emissions[:, 0] + self.start
        tags, best = _viterbi(init, self.emissions[:, 1:], self.transitions, self.end, self.lengths)
        if bool(torch.isneginf(best).any()):
            self.log_partition  # noqa: B018  (raises: nothing is allowed)
        return tags, best

    @property
    def argmax(self) -> Tensor:
        """Viterbi tags ``(B, T)``, ``-1`` beyond each length."""
        return self._viterbi[0]

    @property
    def max_score(self) -> Tensor:
        """``score(argmax)``, ``(B,)``."""
        return self._viterbi[1]

    def kbest(self, k: int) -> tuple[Tensor, Tensor]:
        """The ``k`` highest-scoring sequences: tags ``(k, B, T)`` and scores ``(k, B)``,
        descending. If fewer than ``k`` sequences exist, the rest have score ``-inf`` and tags
        ``-1``. Ties are broken arbitrarily."""
        check_int(k, "k", minimum=1)
        init, edges, graph = self._leaf_potentials()
        with torch.enable_grad():
            scores = _chain(init, edges, self.end, self.lengths, KMaxSemiring(k))[0]
            tags = torch.stack([self._paths(init, edges, scores[i].sum()) for i in range(k)])
        tags = tags.masked_fill(torch.isneginf(scores)[..., None], -1)
        return tags, scores if graph else scores.detach()

    def sample(self, n: int, generator: torch.Generator | None = None) -> Tensor:
        """``n`` exact draws ``(n, B, T)`` by forward filtering, backward sampling
        (Carter & Kohn, 1994; Gumbel-max at each step); ``-1`` beyond each length."""
        check_int(n, "n", minimum=1)
        self.log_partition  # noqa: B018  (raises if nothing is allowed)
        with torch.no_grad():
            init, edges = self._potentials()
            _, alphas = _chain(init, edges, None, self.lengths, LogSemiring(), keep=True)
            b, t, c = self.emissions.shape
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
