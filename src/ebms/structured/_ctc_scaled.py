r"""CTC ``log p(y | x)`` by the scaled (probability-space) forward-backward, hand-written backward.

Same recursion as :func:`ebms.structured.ctc.ctc_log_likelihood` with the log semiring, run on
probabilities in float64 with per-frame renormalisation (Rabiner 1989, "A tutorial on hidden
Markov models", section V.A):

.. math::  \hat\alpha_t(s) = \frac{[\hat\alpha_{t-1}(s) + \hat\alpha_{t-1}(s-1)
           + \mathrm{skip}_s\,\hat\alpha_{t-1}(s-2)]\; e_t(s)}{c_t},\qquad
           \log p(y|x) = \sum_{t<T_b} (\log c_t + m_t) + \log[\hat\alpha_{T_b-1}(2L) + \hat\alpha_{T_b-1}(2L-1)]

with ``e_t(s) = exp(lp_t(y'_s) - m_t)`` and ``m_t`` the largest log-probability of the frame. The
backward pass runs the mirrored recursion for :math:`\hat\beta` (renormalised per frame as well)
and returns the occupancies

.. math::  \frac{\partial \log p(y|x)}{\partial\, lp_t(k)} = \sum_{s:\,y'_s = k} \gamma_t(s),\qquad
           \gamma_t(s) = \frac{\hat\alpha_t(s)\hat\beta_t(s)}{\sum_{s'}\hat\alpha_t(s')\hat\beta_t(s')},

since every alignment occupies exactly one state per frame. Each step is a handful of kernels on
``(B, N)`` tensors with no autograd graph, which is what makes it several times faster than the
log-space recursion differentiated by autograd. It is used only when no factor can underflow:
every used log-probability finite and within ``_SPREAD`` nats of its frame's maximum (float64
keeps ``exp(-600)``); otherwise the log-space recursion runs. A second derivative falls back to
the log-space recursion too.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor

__all__ = ["scaled_ok", "scaled_log_likelihood"]

_SPREAD = 600.0  # nats; exp(-600) ~ 1e-261 is a normal float64


def scaled_ok(emissions: Tensor) -> bool:
    """Whether the scaled recursion is exact for ``emissions (T, B, N)`` (the used log-probs)."""
    if emissions.numel() == 0:
        return True
    with torch.no_grad():
        lo, hi = emissions.amin(), emissions.amax(-1).amax()
        return bool(torch.isfinite(lo) & torch.isfinite(hi) & (hi - lo <= _SPREAD))


class _ScaledCTC(torch.autograd.Function):
    @staticmethod
    def forward(ctx, log_probs: Tensor, ext: Tensor, skip: Tensor, input_lengths: Tensor,  # type: ignore[override]
                lengths: Tensor, slow: Callable[[Tensor], Tensor]) -> Tensor:
        t_all, b, _ = log_probs.shape
        n = ext.shape[1]
        t = int(input_lengths.max()) if b else 0
        em = log_probs[:t].detach().double().gather(2, ext.unsqueeze(0).expand(t, b, n))  # (T, B, N)
        m = em.amax(-1, keepdim=True)  # (T, B, 1)
        e = (em - m).exp_()
        skipf = skip.double()
        alphas = em.new_zeros(t + 1, b, n + 2)  # two zero columns in front: the s-1 and s-2 shifts
        alphas[0, :, 2] = 1.0  # the empty prefix, in state 0
        norms = em.new_empty(t, b, 1)
        # Frames past a sequence's length are run like the others and ignored afterwards: its
        # total reads alpha at its own last frame, and its normalisers are masked out below.
        for i in range(t):
            prev = alphas[i]
            cur = prev[:, 2:] + prev[:, 1:-1]
            cur.addcmul_(prev[:, :-2], skipf).mul_(e[i])
            c = torch.sum(cur, -1, keepdim=True, out=norms[i]).clamp_min_(1e-300)  # 0: every path is dead
            torch.div(cur, c, out=alphas[i + 1, :, 2:])
        active = (torch.arange(t, device=em.device)[:, None] < input_lengths[None, :])  # (T, B)
        rows = torch.arange(b, device=em.device)
        final = alphas[input_lengths, rows, 2:]  # (B, N): each sequence's alpha at its last frame
        end = final.gather(1, (2 * lengths)[:, None]).squeeze(1)
        before = final.gather(1, (2 * lengths - 1).clamp_min(0)[:, None]).squeeze(1)
        before = torch.where(lengths > 0, before, 0.0)
        tot = end + before
        used = torch.where(active, norms.squeeze(-1).log() + m.squeeze(-1), 0.0).sum(0)
        ll = torch.where(tot > 0, tot.log() + used, float("-inf"))
        ctx.slow = slow
        ctx.save_for_backward(log_probs, ext, skipf, input_lengths, lengths, alphas, e, active, tot)
        return ll.to(log_probs.dtype)

    @staticmethod
    def backward(ctx, g: Tensor):  # type: ignore[override]
        log_probs, ext, skipf, input_lengths, lengths, alphas, e, active, tot = ctx.saved_tensors
        if torch.is_grad_enabled():  # a second derivative: differentiate the log-space recursion
            with torch.enable_grad():
                ll = ctx.slow(log_probs)  # the saved input: the result stays connected to the graph
            (grad,) = torch.autograd.grad(ll, log_probs, g, create_graph=True)
            return grad, None, None, None, None, None
        t, b, n = e.shape
        start = e.new_zeros(b, n)  # beta at each sequence's last frame: 1 on the two accepting states
        start.scatter_(1, (2 * lengths)[:, None], 1.0)
        start.scatter_add_(1, (2 * lengths - 1).clamp_min(0)[:, None], (lengths > 0).double()[:, None])
        at_last = (torch.arange(t, device=e.device)[:, None] == (input_lengths - 1)[None, :]).unsqueeze(-1)
        betas = e.new_zeros(t, b, n + 2)  # two zero columns behind: the s+1 and s+2 shifts
        skip_next = torch.cat([skipf[:, 2:], skipf.new_zeros(b, 2)], 1)  # skip_{s+2}, aligned with s
        e_pad = torch.nn.functional.pad(e, (0, 2))
        w = e.new_empty(b, n + 2)
        beta = e.new_zeros(b, n)
        for i in range(t - 1, -1, -1):
            torch.where(at_last[i], start, beta, out=betas[i, :, :n])
            if i:
                torch.mul(betas[i], e_pad[i], out=w)  # beta_t(s') e_t(s'), zero-padded
                beta = w[:, :n] + w[:, 1 : n + 1]
                beta.addcmul_(w[:, 2 : n + 2], skip_next)
                beta.div_(beta.sum(-1, keepdim=True).clamp_min_(1e-300))
        ab = alphas[1:, :, 2:] * betas[:, :, :n]  # (T, B, N)
        z = ab.sum(-1, keepdim=True)
        ok = (z > 0) & active.unsqueeze(-1) & (tot > 0)[None, :, None]
        gamma = torch.where(ok, ab / torch.where(z > 0, z, 1.0), 0.0) * g.double()[None, :, None]
        grad = torch.zeros(log_probs.shape, dtype=torch.float64, device=e.device)
        grad[:t].scatter_add_(2, ext.unsqueeze(0).expand(t, b, n), gamma)
        return grad.to(log_probs.dtype), None, None, None, None, None


def scaled_log_likelihood(log_probs: Tensor, ext: Tensor, skip: Tensor, input_lengths: Tensor, lengths: Tensor,
                          slow: Callable[[Tensor], Tensor]) -> Tensor:
    """``log p(y | x) (B,)``; ``slow(log_probs)`` is the log-space recursion, used for second derivatives."""
    return _ScaledCTC.apply(log_probs, ext, skip, input_lengths, lengths, slow)
