"""Gradients of the linear-chain ``log Z``: a scaled forward-backward, and marginals by autograd.

* :func:`chain_log_z` computes ``log Z (B,)`` from ``init (B, C)``, ``em (B, T-1, C)``, ``tr (C, C)``
  and ``end (C,)`` (shapes as in :mod:`ebms.structured._chain_dp`). When no product of
  potentials can underflow it runs the scaled exp-space forward recursion with a hand-written
  scaled backward recursion for the gradient (Rabiner, 1989, "A tutorial on hidden Markov
  models", section V.A), one ``(B, C) x (C, C)`` product per step; otherwise, and for second
  derivatives, the log-space recursion differentiated by autograd.
* :func:`marginals_by_grad` returns the node and pair marginals as gradients of ``log Z`` with
  respect to the potentials (Eisner, 2016, "Inside-outside and forward-backward algorithms are
  just backprop"), with ``create_graph`` when they must stay differentiable.
* :func:`safe_dot` is the ``sum p * x`` of the entropy, with ``0 * -inf = 0``.
* :class:`GraphResults` is the base of :class:`~ebms.structured.linear_chain.LinearChainCRF` that
  caches each result per grad mode and joins every result to all the potentials requiring grad.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor

from ebms.structured._chain_dp import chain_forward
from ebms.structured._chain_inputs import no_allowed
from ebms.structured.semiring import LogSemiring

__all__ = ["GraphResults", "chain_log_z", "marginals_by_grad", "safe_dot"]

# Scaled exp-space recursion (Rabiner, 1989, "A tutorial on hidden Markov models", section V.A):
# one (B, C) x (C, C) product per step instead of a (B, C, C) log-sum-exp. It is exact up to
# rounding when no product can underflow, i.e. all potentials are finite and their spread (range of
# the transitions + largest per-step range of the node potentials + range of ``end``) is at most
# ``_SPREAD[dtype]`` nats: then every term is >= exp(-2 spread) / C^2, far above the smallest
# normal number. Otherwise the log-space recursion ``chain_forward`` is used.
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
            z = chain_forward(init, edges, end, lengths, LogSemiring())[0][0]
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


def chain_log_z(init: Tensor, em: Tensor, tr: Tensor, end: Tensor | None, lengths: Tensor) -> Tensor:
    """``log Z (B,)`` from ``init (B, C)``, ``em (B, T-1, C)``, ``tr (C, C)``, ``end (C,)``."""
    end_ = init.new_zeros(init.shape[-1]) if end is None else end
    if _scaled_ok(init, em, tr, end_):
        return _ScaledLogZ.apply(init, em, tr, end_, lengths)
    return chain_forward(init, tr + em.unsqueeze(-2), end, lengths, LogSemiring())[0][0]


def marginals_by_grad(init: Tensor, edges: Tensor, end: Tensor | None, lengths: Tensor,
                      create_graph: bool) -> tuple[Tensor, Tensor]:
    """Node marginals ``(B, T, C)`` and pair marginals ``(B, T-1, C, C)`` as ``d log Z``.

    ``init (B, C)`` and ``edges (B, T-1, C, C)`` as in :func:`~ebms.structured._chain_dp.chain_forward`.
    Raises if a sequence has no allowed tagging. With ``create_graph`` the marginals are
    differentiable in the potentials (second-order gradients, e.g. of the entropy, are exact).
    """
    # Differentiate with respect to the potentials themselves when they carry a graph (then
    # the marginals do too, via create_graph); fresh leaves otherwise.
    init = init if init.requires_grad else init.detach().requires_grad_()
    edges = edges if edges.requires_grad else edges.detach().requires_grad_()
    with torch.enable_grad():
        z = chain_forward(init, edges, end, lengths, LogSemiring())[0][0]
        no_allowed(z.detach())
        g_init, g_edges = torch.autograd.grad(z.sum(), (init, edges), create_graph=create_graph,
                                              allow_unused=True)
    if g_edges is None:  # T = 1: no edge is used
        g_edges = torch.zeros_like(edges)
    node = torch.cat([g_init.unsqueeze(1), g_edges.sum(-2)], dim=1)
    return node, g_edges


def safe_dot(p: Tensor, x: Tensor) -> Tensor:
    """``sum p * x`` per batch row, with ``0 * -inf = 0`` and a zero (not NaN) gradient there."""
    return (p * x.masked_fill(torch.isneginf(x), 0.0)).flatten(1).sum(1)


class GraphResults:
    """Base class: results cached per grad mode and joined to every potential requiring grad.

    The subclass sets ``_params`` (the caller's potentials), ``_cache`` (an empty dict) and
    ``_uses_all`` (whether every potential enters every result's computation).
    """

    _params: tuple[Tensor, ...]
    _cache: dict[tuple[str, bool], object]
    _uses_all: bool

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


def _detached(x: Any) -> Any:
    if isinstance(x, Tensor):
        return x.detach()
    return tuple(_detached(v) for v in x)
