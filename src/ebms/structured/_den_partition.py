r"""``log Z_den`` of a :class:`~ebms.structured.den_graph.DenominatorGraph`, exact at every scale.

Two recursions over the graph (``E = exp(W)`` its arc weights, ``sym(s)`` the symbol entering
state ``s``, ``lp`` the ``(T, B, V)`` log-probabilities):

* **scaled** (fast): in probability space with per-frame renormalisation (Rabiner, 1989, "A
  tutorial on hidden Markov models", section V.A),

  .. math:: a_t = (\hat a_{t-1} E) \odot e^{lp_t(\mathrm{sym}) - m_t},\quad r_t = \textstyle\sum_s a_t(s),
            \quad \hat a_t = a_t / r_t,\quad
            \log Z = \textstyle\sum_{t<T_b} (\log r_t + m_t) + \log(\hat a_{T_b-1} \cdot e^{\mathrm{final}})

  with ``m_t = max_v lp_t(v)``, and the mirrored ``beta`` recursion with ``E^T`` in a
  hand-written backward, ``d log Z / d lp_t(v) = sum_{s: sym(s)=v} a_t(s) b_t(s) / sum_s a_t b_t``.
  Renormalising per frame keeps the *sum* of each frame near 1, but not every entry: a state
  whose weight is ``e^{-800}`` times the frame's largest underflows to 0 in float64
  (``e^{-90}`` in float32), and when later frames favour that state the result is wrong by any
  amount. An underflowed entry loses less than ``D tiny`` (``D`` the largest in-degree); its
  effect on ``Z`` (and on every occupancy) is that loss times ``beta_t(s) / sum_s a_t b_t``.
  When the LM has no ``-inf`` entry, any two states' ``beta`` differ by at most a factor ``R``
  (:meth:`~ebms.structured.den_graph.DenominatorGraph.ratio_bound_log`), so a sequence is exact
  (relative error of order ``T eps``) when every frame sum ``r_t``, every unnormalised ``beta``
  sum, every ``sum_s a_t b_t`` and the final readout is at least ``tau S D R``,
  ``tau = tiny / eps`` of the dtype. Otherwise (an LM with forbidden n-grams, which can make the
  graph as narrow as a single CTC path) the check is per entry: every state that can carry
  weight at all (:meth:`~ebms.structured.den_graph.DenominatorGraph.support`) must have
  ``a_t(s) >= tau``, likewise the unnormalised ``beta``.
* **arcs** (exact, slower): the same forward in log space, ``logsumexp`` over the padded
  incoming arcs, differentiated by autograd.

A sequence that fails the check in float32 is re-run scaled in float64, and one that fails in
float64 by the log-space recursion, for the value and the gradient; second derivatives always
use the log-space recursion. Cost ``O(T B A)``.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from ebms.structured.den_graph import DenominatorGraph

__all__ = ["den_arcs", "den_scaled"]

NEG_INF = float("-inf")


def _tau(dtype: torch.dtype) -> float:
    info = torch.finfo(dtype)
    return info.tiny / info.eps


def _threshold(graph: DenominatorGraph, dtype: torch.dtype) -> float | None:
    """``tau S D R`` when the LM has full support (sum checks suffice), else ``None``."""
    log_r = graph.ratio_bound_log()
    if math.isinf(log_r):
        return None
    log_thr = math.log(_tau(dtype) * graph.n_states * graph.in_src.shape[1]) + log_r
    return math.exp(log_thr) if log_thr < 700 else math.inf


def _mul(x: Tensor, m: Tensor) -> Tensor:
    """``x (B, S)`` times a :meth:`DenominatorGraph.transition_matrix` (dense or CSR)."""
    if m.layout == torch.sparse_csr:
        return (m @ x.t()).t()
    return x @ m


def _final(graph: DenominatorGraph, dtype: torch.dtype, device: torch.device) -> tuple[Tensor, Tensor]:
    final = graph.tables(dtype, device)["final"]
    fmax = final.max()
    fmax = torch.where(torch.isfinite(fmax), fmax, 0.0)
    return (final - fmax).exp(), fmax


class _DenScaled(torch.autograd.Function):
    @staticmethod
    def forward(ctx, log_probs: Tensor, lengths: Tensor, graph: DenominatorGraph):  # type: ignore[override]
        t, b, v = log_probs.shape
        dt, dev = log_probs.dtype, log_probs.device
        sym = graph.tables(dt, dev)["state_symbol"]
        fwd = graph.transition_matrix(dt, dev, transpose=False)
        steps = int(lengths.max())
        lp = log_probs[:steps]
        m = lp.amax(-1, keepdim=True)  # (T, B, 1)
        m = torch.where(torch.isneginf(m), 0.0, m)
        em = (lp - m).exp().index_select(2, sym)  # (T, B, S)
        alphas = log_probs.new_zeros(steps + 1, b, graph.n_states)
        alphas[0, :, graph.start] = 1.0
        norms = log_probs.new_zeros(steps, b, 1)
        tiny, tau = torch.finfo(dt).tiny, _tau(dt)
        for step in range(steps):
            a = _mul(alphas[step], fwd) * em[step]
            r = a.sum(-1, keepdim=True)
            torch.div(a, r.clamp_min(tiny), out=alphas[step + 1])
            norms[step] = r
        frames = torch.arange(steps, device=dev).unsqueeze(1) < lengths.unsqueeze(0)  # (T, B)
        log_c = torch.where(frames, (norms.log() + m).squeeze(-1), 0.0).sum(0)
        fin, fmax = _final(graph, dt, dev)
        last = alphas[lengths, torch.arange(b, device=dev)]  # (B, S): each row at its own length
        tot = (last * fin).sum(-1)
        thr = _threshold(graph, dt)
        if thr is not None:  # full-support LM: the frame sums decide
            ok = ~((norms.squeeze(-1) < thr) & frames).any(0) & (tot >= thr)
        else:  # every state that can carry weight must be above tau
            supp = graph.support(steps).to(dev)  # (T + 1, S)
            under = (alphas[1:] * norms < tau) & supp[1:].unsqueeze(1) & frames.unsqueeze(-1)
            reachable = (supp[lengths] & torch.isfinite(graph.tables(dt, dev)["final"])).any(-1)
            ok = ~under.any(-1).any(0) & ((tot >= tau) | ~reachable)
        out = log_c + tot.log() + fmax
        ctx.save_for_backward(log_probs, alphas, em, lengths, out)
        ctx.graph = graph
        ctx.mark_non_differentiable(ok)
        return out, ok

    @staticmethod
    def backward(ctx, grad_out: Tensor, _grad_ok: Tensor | None):  # type: ignore[override]
        log_probs, alphas, em, lengths, out = ctx.saved_tensors
        graph: DenominatorGraph = ctx.graph
        if torch.is_grad_enabled():  # a second derivative: differentiate the log-space recursion
            with torch.enable_grad():
                z = den_arcs(log_probs, lengths, graph)
            (grad,) = torch.autograd.grad(z, log_probs, grad_out, create_graph=True)
            return grad, None, None
        t, b, v = log_probs.shape
        dt, dev = alphas.dtype, alphas.device
        sym = graph.tables(dt, dev)["state_symbol"]
        bwd = graph.transition_matrix(dt, dev, transpose=True)
        steps = em.shape[0]
        tiny, tau = torch.finfo(dt).tiny, _tau(dt)
        fin, _ = _final(graph, dt, dev)
        fin = fin / fin.sum().clamp_min(tiny)
        thr = _threshold(graph, dt)
        cosupp = graph.support(steps, backward=True).to(dev)  # (T + 1, S)
        bad = ((fin < tau) & cosupp[0]).any().expand(b).clone()
        low = tau if thr is None else thr
        fin = fin.expand(b, -1)
        gam = alphas[1:].clone()  # gamma_t before normalisation: alpha_t * beta_t
        beta = fin
        for step in range(steps - 1, -1, -1):
            beta = torch.where((lengths == step + 1).unsqueeze(1), fin, beta)
            gam[step].mul_(beta)
            if step == 0:
                break
            nb = _mul(beta * em[step], bwd)  # beta_{step-1}, unnormalised
            if thr is None:
                live = (step < lengths).unsqueeze(1) & cosupp[(lengths - step).clamp(0, steps)]
                bad |= ((nb < tau) & live).any(-1)
            else:
                bad |= (nb.sum(-1) < thr) & (step < lengths)
            beta = nb / nb.sum(-1, keepdim=True).clamp_min(tiny)
        frames = torch.arange(steps, device=dev).view(steps, 1, 1) < lengths.view(1, b, 1)
        z = gam.sum(-1, keepdim=True)
        bad |= ((z < low) & frames).flatten(1).any(0)
        gam = gam / z.clamp_min(tiny)
        scale = torch.where(torch.isfinite(out), grad_out, 0.0).view(1, b, 1)
        gam = torch.where(frames, gam * scale, 0.0)
        occ = alphas.new_zeros(t, b, v)
        occ[:steps].index_add_(2, sym, gam)
        redo = (bad & (grad_out != 0)).nonzero().squeeze(1)
        if redo.numel():  # an underflow: these rows' gradient from the exact log-space recursion
            with torch.enable_grad():
                x = log_probs[:, redo].detach().double().requires_grad_()
                zx = den_arcs(x, lengths[redo], graph)
                g = torch.where(torch.isfinite(zx), grad_out[redo].double(), 0.0)
                (gx,) = torch.autograd.grad(zx, x, g)
            occ[:, redo] = gx.to(dt)
        return occ, None, None


def den_arcs(log_probs: Tensor, lengths: Tensor, graph: DenominatorGraph) -> Tensor:
    """Log-space forward over the padded incoming-arc table, differentiated by autograd."""
    _, b, _ = log_probs.shape
    tab = graph.tables(log_probs.dtype, log_probs.device)
    em = log_probs.index_select(2, tab["state_symbol"])  # (T, B, S)
    alpha = log_probs.new_full((b, graph.n_states), NEG_INF)
    alpha[:, graph.start] = 0.0
    src, w = tab["in_src"], tab["in_weight"]
    for step in range(int(lengths.max()) if b else 0):
        cand = alpha[:, src] + w  # (B, S, D)
        dead = torch.isneginf(cand).all(-1)
        tot = torch.logsumexp(torch.where(dead.unsqueeze(-1), 0.0, cand), -1)
        new = torch.where(dead, NEG_INF, tot) + em[step]
        alpha = torch.where((step < lengths).unsqueeze(1), new, alpha)
    end = alpha + tab["final"]
    dead = torch.isneginf(end).all(-1)
    tot = torch.logsumexp(torch.where(dead.unsqueeze(-1), 0.0, end), -1)
    return torch.where(dead, NEG_INF, tot)


def den_scaled(log_probs: Tensor, lengths: Tensor, graph: DenominatorGraph) -> Tensor:
    """``log Z_den (B,)`` by the checked scaled recursion, with the fallbacks of the module
    docstring for the sequences where an entry underflowed."""
    out, ok = _DenScaled.apply(log_probs, lengths, graph)
    if bool(ok.all()):
        return out
    rows = (~ok).nonzero().squeeze(1)
    sub_lp, sub_len = log_probs[:, rows], lengths[rows]
    if log_probs.dtype != torch.float64:
        sub, ok64 = _DenScaled.apply(sub_lp.double(), sub_len, graph)
        if not bool(ok64.all()):
            r2 = (~ok64).nonzero().squeeze(1)
            sub = sub.index_put((r2,), den_arcs(sub_lp[:, r2].double(), sub_len[r2], graph))
        sub = sub.to(log_probs.dtype)
    else:
        sub = den_arcs(sub_lp, sub_len, graph)
    return out.index_put((rows,), sub)
