r"""``log p(y | x)`` from torch's fused CTC kernel, with the exact derivative in ``log_probs``.

The value is ``-torch.nn.functional.ctc_loss(..., reduction="none")``: torch's kernel runs the
CTC forward recursion in log space (exact at every logit scale) in compiled code. Its backward
is written for normalised inputs: per unit upstream gradient it returns, for ``t < T_b``,

.. math::  G_t(k) = e^{lp_t(k)} - \gamma_t(k),\qquad
           \gamma_t(k) = \sum_{s:\,y'_s = k} \frac{\alpha_t(s)\,\beta_t(s)}{p(y|x)}
           = \frac{\partial \log p(y|x)}{\partial lp_t(k)},

i.e. the gradient with respect to the logits of a ``log_softmax`` (Graves et al., 2006, Eq. 16),
not with respect to ``log_probs``. Here the exact derivative is recovered from it,

.. math::  \frac{\partial \log p(y|x)}{\partial lp_t(k)} = g_b\,e^{lp_t(k)} - g_b\,G_t(k)
           \quad (t < T_b,\ lp_t(k) > -\infty,\ p(y|x) > 0),\qquad 0 \text{ otherwise},

with ``g_b`` the upstream gradient of sequence ``b``: frames past ``input_lengths`` carry no
gradient, an impossible symbol (``lp = -inf``, where torch's formula gives NaN) has occupancy 0,
and an unreachable target (``p = 0``, value ``-inf``) gets a zero gradient, never NaN. The
subtraction costs one rounding of ``e^{lp}`` (absolute error about ``eps * |g|``).

The forward is ``torch._ctc_loss`` (values and ``log_alpha``, no autograd node of torch's) and the
backward calls torch's backward kernel (``aten._ctc_loss_backward``) with those, as torch's own
autograd node would, without re-entering autograd (the same numbers, about 0.1 ms less per call).

A second derivative is not available from torch's kernel; when the backward itself is recorded
(``create_graph=True``) it differentiates ebms's own log-space recursion
(:func:`ebms.structured._ctc_dp.dp_total`) instead, which is exact as well.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

from ebms.structured._ctc_dp import dp_total
from ebms.structured.semiring import LogSemiring

__all__ = ["FUSED_DTYPES", "fused_log_likelihood"]

FUSED_DTYPES = (torch.float32, torch.float64)


class _FusedCTC(torch.autograd.Function):
    @staticmethod
    def forward(ctx, log_probs: Tensor, labels: Tensor, input_lengths: Tensor,  # type: ignore[override]
                target_lengths: Tensor, blank: int, has_neginf: bool) -> Tensor:
        # torch's kernel without its autograd node: the forward values and log_alpha, which its backward reads
        nll, log_alpha = torch._ctc_loss(log_probs, labels, input_lengths, target_lengths, blank, False)
        ctx.blank = blank
        ctx.has_neginf = has_neginf
        ctx.save_for_backward(log_probs, labels, input_lengths, target_lengths, nll, log_alpha)
        return -nll

    @staticmethod
    def backward(ctx, g: Tensor):  # type: ignore[override]
        log_probs, labels, input_lengths, target_lengths, nll, log_alpha = ctx.saved_tensors
        if torch.is_grad_enabled():  # a second derivative: differentiate ebms's own recursion
            with torch.enable_grad():
                ll = dp_total(log_probs, labels, input_lengths, target_lengths, ctx.blank,
                              LogSemiring())
            (grad,) = torch.autograd.grad(ll, log_probs, g, create_graph=True)
            return grad, None, None, None, None, None
        finite = torch.isfinite(nll)
        all_finite, full_length = torch.stack([finite.all(), (input_lengths == log_probs.shape[0]).all()]).tolist()
        gb = g if all_finite else torch.where(finite, g, 0.0)
        lp = log_probs.detach()
        # torch's backward pass called as its autograd node would (no autograd re-entry): gb (e^lp - gamma)
        torch_grad = torch.ops.aten._ctc_loss_backward.Tensor(gb, lp, labels, input_lengths, target_lengths, nll,
                                                              log_alpha, ctx.blank, False)
        t, b, _ = log_probs.shape
        coef = gb.view(1, b, 1)
        if not full_length:  # frames past T_b carry no gradient (torch's part is 0 there)
            frames = torch.arange(t, device=lp.device).unsqueeze(1) < input_lengths.unsqueeze(0)
            coef = frames.unsqueeze(-1) * coef  # (T, B, 1)
        grad = lp.exp().mul_(coef).sub_(torch_grad)
        if not all_finite:  # an unreachable target: torch's part is NaN, the truth 0
            grad = torch.where(finite.view(1, b, 1), grad, 0.0)
        if ctx.has_neginf:  # an impossible symbol has occupancy 0 (torch's formula gives NaN)
            grad.masked_fill_(torch.isneginf(lp), 0.0)
        return grad, None, None, None, None, None


def fused_log_likelihood(log_probs: Tensor, labels: Tensor, input_lengths: Tensor,
                         target_lengths: Tensor, blank: int, *, has_neginf: bool = True) -> Tensor:
    """``log p(y | x) (B,)`` by torch's kernel, exact gradient (see the module docstring).

    Arguments as :func:`ebms.structured._ctc_dp.dp_total` (checked beforehand); ``log_probs``
    float32 or float64. ``has_neginf=False`` promises no ``-inf`` entry (skips a mask).
    """
    if not (torch.is_grad_enabled() and log_probs.requires_grad):
        return -F.ctc_loss(log_probs, labels, input_lengths, target_lengths, blank=blank,
                           reduction="none", zero_infinity=False)
    return _FusedCTC.apply(log_probs, labels, input_lengths, target_lengths, blank, has_neginf)
