"""Softplus activation: value and derivative exact to float64 rounding, float32 unchanged.

The reference is the closed form in float64 (``log1p``/``exp`` on the well-conditioned side, and
the logistic sigmoid for the derivative); the derivative is checked through every route an
:class:`~ebms.nets._activations.Activation` offers: autograd, the fused aten kernel, the public
closed form, and :meth:`ebms.nets.MLPEnergy.energy_and_grad` with fast paths on and off.
"""

from __future__ import annotations

import contextlib

import pytest
import torch
import torch.nn.functional as F
from _exact_refs import exact_sigmoid, exact_softplus

import ebms.nets._activations as acts
import ebms.nets._fastpaths as fp
from ebms.nets import MLPEnergy

F64 = torch.float64
EPS64 = torch.finfo(F64).eps
SOFTPLUS = acts.ACTIVATIONS["softplus"]




def _max_rel(a: torch.Tensor, b: torch.Tensor) -> float:
    return float(((a - b).abs() / b.abs()).max())


def _grid() -> torch.Tensor:
    return torch.linspace(-50.0, 60.0, 11001, dtype=F64)


def test_softplus_value_is_exact_in_float64_on_minus_50_to_60():
    z = _grid()
    # a few roundings in value and reference: 4 eps bounds them (torch's threshold 20 gave 1.0e-10)
    assert _max_rel(SOFTPLUS(z), exact_softplus(z)) <= 4 * EPS64


@pytest.mark.parametrize("route", ["autograd", "vjp", "public_vjp"])
def test_softplus_derivative_is_exact_in_float64_on_minus_50_to_60(route):
    z = _grid()
    g = torch.linspace(0.5, 2.0, z.numel(), dtype=F64).expand(2, -1)  # a broadcast grad_a, as MLPEnergy passes
    zz = z.expand(2, -1).contiguous()
    if route == "autograd":
        zg = zz.clone().requires_grad_(True)
        (out,) = torch.autograd.grad(SOFTPLUS(zg), zg, g)
    else:
        fn = SOFTPLUS.vjp if route == "vjp" else SOFTPLUS.public_vjp
        assert fn is not None
        out = fn(g, zz, SOFTPLUS(zz))
    # before: threshold 20 returned g above 20, relative error e^-20 = 2.0e-9
    assert _max_rel(out, g * exact_sigmoid(zz)) <= 4 * EPS64


def test_softplus_float32_value_and_derivatives_are_unchanged():
    z = torch.linspace(-60.0, 60.0, 12001)
    g = torch.randn(z.shape, generator=torch.Generator().manual_seed(0))
    a = SOFTPLUS(z)
    assert torch.equal(a, F.softplus(z))
    # the kernel, the closed form and the threshold used before
    old_aten = torch.ops.aten.softplus_backward(g, z, 1.0, 20.0)
    old_public = g * torch.where(z > 20.0, torch.ones_like(z), torch.sigmoid(z))
    assert torch.equal(SOFTPLUS.vjp(g, z, a), old_aten if acts._USE_ATEN else old_public)
    assert SOFTPLUS.public_vjp is not None
    assert torch.equal(SOFTPLUS.public_vjp(g, z, a), old_public)


class _WithVJP(torch.autograd.Function):
    """softplus whose backward is the activation's own vjp (so gradcheck tests that vjp)."""

    @staticmethod
    def forward(ctx, z, public):  # type: ignore[override]
        a = SOFTPLUS(z)
        ctx.save_for_backward(z, a)
        ctx.public = public
        return a

    @staticmethod
    def backward(ctx, g):  # type: ignore[override]
        z, a = ctx.saved_tensors
        fn = SOFTPLUS.public_vjp if ctx.public else SOFTPLUS.vjp
        return fn(g, z, a), None


@pytest.mark.parametrize("public", [False, True], ids=["aten", "public"])
def test_softplus_vjps_pass_gradcheck_across_both_thresholds(public):
    z = torch.tensor([[-45.0, -3.0, 0.0, 2.5, 19.5, 20.5, 30.0, 36.9, 37.1, 55.0]], dtype=F64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda t: _WithVJP.apply(t, public), (z,))
    assert torch.autograd.gradcheck(SOFTPLUS.fn, (z,))


@pytest.mark.parametrize("fast", [True, False], ids=["fast_paths", "public_route"])
def test_mlp_energy_and_input_gradient_are_exact_with_preactivations_past_20(fast):
    torch.manual_seed(0)
    net = MLPEnergy(3, (5,), activation="softplus").to(F64)
    with torch.no_grad():  # pre-activations W x + b in about (20, 27): the range torch's threshold got wrong
        net.layers[0].weight.copy_(torch.rand(5, 3, dtype=F64))
        net.layers[0].bias.fill_(23.5)
    x = torch.rand(8, 3, generator=torch.Generator().manual_seed(1), dtype=F64) * 2 - 1
    W, b = net.layers[0].weight.detach(), net.layers[0].bias.detach()
    w, c = net.head.weight.detach()[0], net.head.bias.detach()
    z = x @ W.T + b
    assert 20.0 < float(z.min()) and float(z.max()) < 37.0
    e_ref = exact_softplus(z) @ w + c
    g_ref = (exact_sigmoid(z) * w) @ W
    with contextlib.nullcontext() if fast else fp.disabled():
        e, g = net.energy_and_grad(x)
    # sums of 5 terms of either sign: compare on the scale of the terms, 1e-13 ~ 450 eps of margin
    # (before: e^-z, above 5e-12 of the gradient's scale, dropped per unit)
    assert float((e - e_ref).abs().max()) <= 1e-13 * float(e_ref.abs().max())
    assert float((g - g_ref).abs().max()) <= 1e-13 * float((W.abs() * w.abs()[:, None]).sum(0).max())
    assert float((net(x).detach() - e_ref).abs().max()) <= 1e-13 * float(e_ref.abs().max())
