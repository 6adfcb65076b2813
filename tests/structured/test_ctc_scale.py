"""CTC is exact at every logit scale: against an independent log-space forward-backward
(``_ctc_reference``), torch's ``ctc_loss``, and finite differences.

The issue this guards against: a probability-space recursion renormalised per frame still
underflows when one lattice state is ``e^{-745}`` times the frame's largest (float64), which
gave ``inf`` for a loss of 800.69 and 10 % errors at logit scale 10-30. Large grids (T up to
2000, 200-label targets) are marked slow.
"""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from _ctc_reference import reference_batch

from ebms.structured.ctc import ctc_log_likelihood, ctc_loss

EPS32 = torch.finfo(torch.float32).eps


def _case(scale, t, v, s, b, seed):
    g = torch.Generator().manual_seed(seed)
    logits = scale * torch.randn(t, b, v, generator=g, dtype=torch.float64)
    targets = torch.randint(1, v, (b, s), generator=g)
    targets[0, 1] = targets[0, 0]  # a repeated label
    input_lengths = [t] + [int(x) for x in torch.randint(max(1, t - 10), t + 1, (b - 1,), generator=g)]
    target_lengths = [s] + [int(x) for x in torch.randint(max(0, s - 5), s + 1, (b - 1,), generator=g)]
    return logits, targets, input_lengths, target_lengths


def _check_grid(scale, t, v, s, b, seed, dtype):
    logits, targets, il, tl = _case(scale, t, v, s, b, seed)
    logits = logits.to(dtype)
    lp = logits.log_softmax(-1).detach()
    ys = [targets[i, : tl[i]].tolist() for i in range(b)]
    ref, ref_grad = reference_batch(lp.double(), ys, il)
    assert torch.isfinite(ref).all()
    for method in ("auto", "dp"):
        x = lp.clone().requires_grad_()
        ll = ctc_log_likelihood(x, targets, il, tl, method=method)
        (g,) = torch.autograd.grad(ll.sum(), x)
        if dtype == torch.float64:
            # float64 rounding only: relative 1e-12 on values of |log p| up to 1e5
            torch.testing.assert_close(ll, ref, rtol=1e-12, atol=0)
            torch.testing.assert_close(g, ref_grad, rtol=0, atol=1e-9)
        else:
            # float32 log-space recursions (ours and torch's) round each of T steps at
            # |alpha| <= |log p|: relative error of the value <= T * eps32
            torch.testing.assert_close(ll.double(), ref, rtol=t * EPS32, atol=0)
    # the loss and the logit gradient equal torch's
    ours = ctc_loss(lp, targets, il, tl, reduction="none")
    torch.testing.assert_close(ours, F.ctc_loss(lp, targets, il, tl, reduction="none"),
                               rtol=1e-12 if dtype == torch.float64 else 1e-6, atol=0)
    grads = []
    for fn in (ctc_loss, F.ctc_loss):
        x = logits.clone().requires_grad_()
        (gx,) = torch.autograd.grad(fn(x.log_softmax(-1), targets, il, tl, reduction="sum"), x)
        grads.append(gx)
    torch.testing.assert_close(grads[0], grads[1], rtol=0, atol=1e-12 if dtype == torch.float64 else 1e-5)


def test_issue_repro_is_exact():
    lp = torch.tensor([[[0.0, -400, 0]], [[0.0, -300, -400]]], dtype=torch.float64).log_softmax(-1)
    targets, lengths = torch.tensor([[1, 2]]), torch.tensor([2])
    loss = ctc_loss(lp, targets, lengths, lengths, reduction="none")
    exact = -(lp[0, 0, 1] + lp[1, 0, 2])  # the only alignment is (1, 2)
    torch.testing.assert_close(loss[0], exact, rtol=1e-15, atol=0)
    torch.testing.assert_close(loss, F.ctc_loss(lp, targets, lengths, lengths, reduction="none"))
    assert abs(float(loss) - 800.6931) < 1e-3
    x = lp.clone().requires_grad_()
    (g,) = torch.autograd.grad(ctc_log_likelihood(x, targets, lengths, lengths).sum(), x)
    want = torch.zeros_like(lp)
    want[0, 0, 1] = want[1, 0, 2] = 1.0  # d log p / d lp: the single path's indicator
    # gamma = exp(log alpha + log beta - lp - log p), exponents of size 800: 4 * 800 * eps64
    torch.testing.assert_close(g, want, rtol=0, atol=4 * 800 * torch.finfo(torch.float64).eps)


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
@pytest.mark.parametrize("scale", [1.0, 10.0, 30.0, 100.0])
def test_value_and_gradient_exact_over_logit_scales(scale, dtype):
    _check_grid(scale, t=120, v=20, s=24, b=3, seed=int(scale), dtype=dtype)


@pytest.mark.slow
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
@pytest.mark.parametrize("scale", [1.0, 3.0, 10.0, 30.0, 100.0])
@pytest.mark.parametrize("t", [1000, 2000])
def test_value_and_gradient_exact_long_sequences(t, scale, dtype):
    _check_grid(scale, t=t, v=20, s=200, b=2, seed=t + int(scale), dtype=dtype)


@pytest.mark.parametrize("method", ["auto", "dp"])
@pytest.mark.parametrize("scale", [1.0, 30.0, 100.0])
def test_gradient_equals_finite_differences_at_scale(scale, method):
    g = torch.Generator().manual_seed(int(scale))
    lp = (scale * torch.randn(6, 2, 4, generator=g, dtype=torch.float64)).log_softmax(-1)
    targets, il, tl = torch.tensor([[1, 1, 2], [3, 2, 0]]), [6, 5], [3, 2]
    x = lp.clone().requires_grad_()
    assert torch.isfinite(ctc_log_likelihood(x, targets, il, tl, method=method)).all()
    assert torch.autograd.gradcheck(lambda y: ctc_log_likelihood(y, targets, il, tl, method=method),
                                    (x,), eps=1e-6, atol=1e-6, rtol=1e-5)


@pytest.mark.parametrize("method", ["auto", "dp"])
def test_gradient_is_the_derivative_for_unnormalised_log_probs(method):
    # torch's backward assumes normalised rows (it returns exp(lp) - gamma); ebms's is exact
    g = torch.Generator().manual_seed(9)
    lp = torch.randn(5, 2, 3, generator=g, dtype=torch.float64).requires_grad_()
    targets, il, tl = torch.tensor([[1, 2], [2, 2]]), [5, 5], [2, 2]
    assert torch.autograd.gradcheck(lambda y: ctc_log_likelihood(y, targets, il, tl, method=method), (lp,))
    assert torch.autograd.gradgradcheck(lambda y: ctc_log_likelihood(y, targets, il, tl, method=method), (lp,))


def test_impossible_symbols_and_unreachable_targets_give_zero_gradient_never_nan():
    lp = torch.randn(4, 3, 4, dtype=torch.float64).log_softmax(-1)
    lp[:, 0, 3] = -math.inf  # symbol 3 impossible everywhere for item 0
    lp[1, 1, 0] = -math.inf  # a blank impossible at frame 1 for item 1
    targets, il, tl = torch.tensor([[1, 2], [1, 2], [3, 3]]), [4, 4, 2], [2, 2, 2]
    ys = [[1, 2], [1, 2], [3, 3]]
    ref, ref_grad = reference_batch(lp, ys, il)
    for method in ("auto", "dp"):
        x = lp.clone().requires_grad_()
        ll = ctc_log_likelihood(x, targets, il, tl, method=method)
        (g,) = torch.autograd.grad(ll.sum(), x)
        assert float(ll[2].detach()) == -math.inf  # (3, 3) needs 3 frames
        torch.testing.assert_close(ll, ref.to(ll.dtype), rtol=1e-12, atol=0)
        assert torch.isfinite(g).all()
        torch.testing.assert_close(g, ref_grad, rtol=0, atol=1e-12)


@pytest.mark.parametrize("method", ["auto", "dp"])
def test_short_inputs_empty_targets_and_repeats_match_the_reference(method):
    g = torch.Generator().manual_seed(11)
    lp = (20 * torch.randn(5, 6, 4, generator=g, dtype=torch.float64)).log_softmax(-1)
    targets = torch.tensor([[1, 1], [2, 0], [1, 0], [3, 3], [1, 2], [2, 2]])
    il = [0, 0, 1, 3, 1, 5]
    tl = [0, 1, 1, 2, 0, 2]
    ys = [targets[i, : tl[i]].tolist() for i in range(6)]
    ref, ref_grad = reference_batch(lp, ys, il)
    x = lp.clone().requires_grad_()
    ll = ctc_log_likelihood(x, targets, il, tl, method=method)
    (gr,) = torch.autograd.grad(ll.sum(), x)
    assert ll[0] == 0.0 and ll[1] == -math.inf  # no frames: only the empty target is possible
    torch.testing.assert_close(ll, ref, rtol=1e-13, atol=0)
    torch.testing.assert_close(gr, ref_grad, rtol=0, atol=1e-12)
    # an empty target is all blanks: log p = sum of the blank log-probs
    torch.testing.assert_close(ll[4], lp[0, 4, 0])
