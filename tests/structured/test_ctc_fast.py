"""The fused CTC's backward (torch's backward kernel called directly) against the route through torch's
autograd node it replaces (bit for bit), and against ebms's own recursion."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from ebms.structured._ctc_fused import fused_log_likelihood
from ebms.structured._ctc_inputs import prepare
from ebms.structured.ctc import ctc_log_likelihood


def _through_torch_autograd(lp, labels, il, tl, blank, g):
    """The former backward: torch's gradient from its own autograd node, then g e^lp - that, masked."""
    leaf = lp.detach().requires_grad_()
    with torch.enable_grad():
        nll = F.ctc_loss(leaf, labels, il, tl, blank=blank, reduction="none", zero_infinity=False)
    finite = torch.isfinite(nll)
    gb = torch.where(finite, g, 0.0)
    (torch_grad,) = torch.autograd.grad(nll, leaf, gb)
    frames = torch.arange(lp.shape[0]).unsqueeze(1) < il.unsqueeze(0)
    grad = lp.exp().mul_(frames.unsqueeze(-1) * gb.view(1, -1, 1)).sub_(torch_grad)
    grad = torch.where(finite.view(1, -1, 1), grad, 0.0)
    return grad.masked_fill_(torch.isneginf(lp), 0.0), -nll.detach()


def _case(dtype, neginf):
    g = torch.Generator().manual_seed(7)
    t, b, v = 10, 7, 5
    lp = torch.randn(t, b, v, generator=g, dtype=dtype).mul(2).log_softmax(-1)
    if neginf:  # an impossible symbol in some frames (renormalised)
        lp[2:5, 1, 3] = float("-inf")
        lp = lp.log_softmax(-1)
    targets = torch.tensor([[1, 1, 2], [3, 2, 1], [2, 0, 0], [1, 2, 1], [3, 3, 3], [4, 0, 0], [2, 0, 0]])
    tl = torch.tensor([3, 3, 1, 0, 3, 1, 0])  # repeats, empty targets, one unreachable (3 3 3 in 4 frames)
    il = torch.tensor([10, 6, 1, 4, 4, 0, 0])  # full, partial, one frame, none
    return lp, targets, il, tl


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("neginf", [False, True])
def test_fused_gradient_equals_the_route_through_torch_autograd_bit_for_bit(dtype, neginf):
    lp, targets, il, tl = _case(dtype, neginf)
    x = prepare(lp, targets, il, tl, 0)
    upstream = torch.linspace(-1.5, 2.0, lp.shape[1], dtype=dtype)
    leaf = x.log_probs.detach().requires_grad_()
    ll = fused_log_likelihood(leaf, x.labels, x.input_lengths, x.target_lengths, 0, has_neginf=x.has_neginf)
    (grad,) = torch.autograd.grad(ll, leaf, upstream)
    want, want_ll = _through_torch_autograd(x.log_probs, x.labels, x.input_lengths, x.target_lengths, 0, upstream)
    assert torch.equal(ll.detach(), want_ll)
    assert torch.equal(grad, want)
    assert not bool(torch.isnan(grad).any())
    assert bool((grad[:, 4] == 0).all()) and bool((grad[:, 5] == 0).all())  # unreachable; no frames


@pytest.mark.parametrize("dtype,atol", [(torch.float32, 2e-5), (torch.float64, 1e-12)])
def test_fused_gradient_equals_the_recursion(dtype, atol):
    lp, targets, il, tl = _case(dtype, neginf=True)
    grads, values = [], []
    for method in ("torch", "dp"):
        leaf = lp.clone().requires_grad_()
        ll = ctc_log_likelihood(leaf, targets, il, tl, method=method)
        (grad,) = torch.autograd.grad(ll, leaf, torch.linspace(0.5, 1.5, lp.shape[1], dtype=dtype))
        grads.append(grad)
        values.append(ll.detach())
    torch.testing.assert_close(values[0], values[1], rtol=0, atol=atol * 10)
    torch.testing.assert_close(grads[0], grads[1], rtol=0, atol=atol)


def test_fused_backward_twice_and_without_grad():
    lp, targets, il, tl = _case(torch.float64, neginf=False)
    x = prepare(lp, targets, il, tl, 0)
    leaf = x.log_probs.detach().requires_grad_()
    ll = fused_log_likelihood(leaf, x.labels, x.input_lengths, x.target_lengths, 0)
    first = torch.autograd.grad(ll.sum(), leaf, retain_graph=True)[0]
    assert torch.equal(first, torch.autograd.grad(ll.sum(), leaf)[0])
    with torch.no_grad():
        assert torch.equal(fused_log_likelihood(leaf, x.labels, x.input_lengths, x.target_lengths, 0), ll.detach())
