"""The dtype-aware softplus: exact to rounding in float64, bit-identical to torch's in float32."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from _exact_refs import exact_sigmoid, exact_softplus

from ebms._numerics import softplus, softplus_threshold

EPS64 = torch.finfo(torch.float64).eps




def test_threshold_is_torchs_20_for_float32_and_37_for_float64():
    assert softplus_threshold(torch.float32) == 20.0
    assert softplus_threshold(torch.float16) == 20.0 and softplus_threshold(torch.bfloat16) == 20.0
    assert softplus_threshold(torch.float64) == 37.0
    # beyond the cut the dropped term e^-t is below the float64 unit round-off (eps / 2)
    assert math.exp(-37.0) < EPS64 / 2 < math.exp(-36.0)


def test_float64_value_and_gradient_are_exact_to_rounding_on_minus_50_to_60():
    x = torch.linspace(-50.0, 60.0, 22001, dtype=torch.float64).requires_grad_(True)
    y = softplus(x)
    (grad,) = torch.autograd.grad(y.sum(), x)
    ref, dref = exact_softplus(x.detach()), exact_sigmoid(x.detach())
    # a handful of roundings on either side: 4 eps bounds it (measured: 1.0 eps value, 1.8 eps gradient)
    assert float(((y.detach() - ref).abs() / ref).max()) <= 4 * EPS64
    assert float(((grad - dref).abs() / dref).max()) <= 4 * EPS64


def test_torchs_default_drops_e_minus_20_in_float64_and_this_one_does_not():
    x = torch.tensor([20.5, 30.0], dtype=torch.float64, requires_grad=True)
    (torch_grad,) = torch.autograd.grad(F.softplus(x).sum(), x)
    # the defect: log1p(e^-x) ~ 1e-9 dropped (~1e7 ulps at 20.5), and the derivative rounded up to 1
    assert torch.equal(F.softplus(x).detach(), x.detach()) and torch.equal(torch_grad, torch.ones_like(x))
    out = softplus(x)
    (grad,) = torch.autograd.grad(out.sum(), x)
    assert float((out.detach() - x.detach()).min()) > 1e-14 and bool((grad < 1).all())
    assert float(((out.detach() - exact_softplus(x.detach())).abs() / out.detach()).max()) <= 2 * EPS64
    assert float(((grad - exact_sigmoid(x.detach())).abs()).max()) <= EPS64


def test_float32_results_and_gradients_are_bit_identical_to_torch():
    x = torch.linspace(-60.0, 60.0, 24001).requires_grad_(True)
    ours, theirs = softplus(x), F.softplus(x)
    assert torch.equal(ours, theirs)
    g = torch.randn(x.shape, generator=torch.Generator().manual_seed(0))
    assert torch.equal(torch.autograd.grad(ours, x, g)[0], torch.autograd.grad(theirs, x, g)[0])


def test_gradcheck_in_float64_across_the_cut():
    x = torch.tensor([-40.0, -5.0, 0.0, 3.0, 19.0, 21.0, 30.0, 36.5, 37.5, 50.0], dtype=torch.float64)
    assert torch.autograd.gradcheck(softplus, (x.requires_grad_(True),))
    assert torch.autograd.gradgradcheck(softplus, (x,))


@pytest.mark.parametrize(
    "module",
    ["ebms.models._rbm_layers", "ebms.distributions.bernoulli", "ebms.objectives._nce_core"],
)
def test_every_user_shares_the_one_softplus(module):
    import importlib

    assert importlib.import_module(module).softplus is softplus
