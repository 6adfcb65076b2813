"""MLPEnergy: the analytic input gradient against autograd and finite differences, shapes, checks."""

from __future__ import annotations

import pytest
import torch

from ebms.energy import autograd_energy_and_grad, from_fn
from ebms.nets import ACTIVATIONS, Activation, MLPEnergy, resolve_activation
from ebms.samplers import ULA

F64 = torch.float64
NAMES = sorted(ACTIVATIONS)


def _net(in_dim, hidden, activation="silu", seed=0, **kw) -> MLPEnergy:
    torch.manual_seed(seed)
    return MLPEnergy(in_dim, hidden, activation=activation, **kw).to(F64)


def _x(*shape, seed=1) -> torch.Tensor:
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed), dtype=F64)


@pytest.mark.parametrize("activation", NAMES)
@pytest.mark.parametrize("hidden", [(6,), (7, 5), (4, 6, 3)])
def test_analytic_grad_matches_autograd_float64(activation, hidden, fast_paths):
    net = _net(3, hidden, activation)
    x = _x(11, 3)
    e, g = net.energy_and_grad(x)
    e_ref, g_ref = autograd_energy_and_grad(net, x)
    torch.testing.assert_close(e, e_ref, rtol=0, atol=1e-12)
    torch.testing.assert_close(g, g_ref, rtol=0, atol=1e-12)


@pytest.mark.parametrize("in_dim", [1, 2, 5, 8, 9, 40])
def test_analytic_grad_matches_autograd_for_every_input_width(in_dim):
    # widths 2..8 take the transposed-product branch on CPU, the others the plain one
    net = _net(in_dim, (16, 16))
    x = _x(13, in_dim)
    e, g = net.energy_and_grad(x)
    e_ref, g_ref = autograd_energy_and_grad(net, x)
    torch.testing.assert_close(g, g_ref, rtol=0, atol=1e-12)
    assert g.is_contiguous()


def test_analytic_grad_matches_autograd_float32(fast_paths):
    torch.manual_seed(0)
    net = MLPEnergy(784, (128, 128))
    x = torch.randn(64, 784)
    e, g = net.energy_and_grad(x)
    e_ref, g_ref = autograd_energy_and_grad(net, x)
    # float32 with different summation orders: a few ulps of the gradient scale
    torch.testing.assert_close(e, e_ref, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(g, g_ref, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("activation", ["silu", "tanh", "softplus", "elu", "gelu"])
def test_analytic_grad_matches_central_differences(activation):
    # independent of autograd: O(h^2) central differences in float64, h = 1e-5 -> error ~1e-10
    net = _net(4, (8, 8), activation)
    x = _x(5, 4)
    _, g = net.energy_and_grad(x)
    h = 1e-5
    fd = torch.empty_like(x)
    with torch.no_grad():
        for j in range(x.shape[1]):
            step = torch.zeros_like(x)
            step[:, j] = h
            fd[:, j] = (net(x + step) - net(x - step)) / (2 * h)
    torch.testing.assert_close(g, fd, rtol=0, atol=1e-7)


@pytest.mark.parametrize("activation", NAMES)
def test_activation_vjp_is_grad_times_closed_form_derivative(activation):
    act = ACTIVATIONS[activation]
    z = torch.linspace(-3, 3, 61, dtype=F64)
    z = z[z.abs() > 0.05]  # keep clear of the ReLU kinks
    grad_out = torch.linspace(0.5, 2.0, z.numel(), dtype=F64)
    h = 1e-6
    deriv = (act.fn(z + h) - act.fn(z - h)) / (2 * h)
    torch.testing.assert_close(act.vjp(grad_out, z, act.fn(z)), grad_out * deriv, rtol=0, atol=1e-8)


def test_energy_matches_forward_and_outputs_are_detached():
    torch.manual_seed(0)
    net = MLPEnergy(3, (8, 8))
    x = torch.randn(6, 3)
    e, g = net.energy_and_grad(x)
    assert e.shape == (6,) and g.shape == (6, 3)
    assert not e.requires_grad and not g.requires_grad
    assert all(p.grad is None for p in net.parameters())
    torch.testing.assert_close(e, net(x).detach(), rtol=1e-6, atol=1e-6)


def test_event_shape_input_is_flattened():
    flat = _net(16, (8,), seed=3)
    img = _net((1, 4, 4), (8,), seed=3)
    x = _x(5, 1, 4, 4)
    e, g = img.energy_and_grad(x)
    e_flat, g_flat = flat.energy_and_grad(x.reshape(5, 16))
    assert g.shape == x.shape
    torch.testing.assert_close(e, e_flat, rtol=0, atol=0)
    torch.testing.assert_close(g.reshape(5, 16), g_flat, rtol=0, atol=0)


def test_energy_of_a_row_does_not_depend_on_other_rows():
    net = _net(3, (8, 8))
    x = _x(7, 3)
    y = x.clone()
    y[1:] = _x(6, 3, seed=9)
    e_x, g_x = net.energy_and_grad(x)
    e_y, g_y = net.energy_and_grad(y)
    e_0, g_0 = net.energy_and_grad(x[:1])
    torch.testing.assert_close(e_x[0], e_y[0], rtol=0, atol=1e-14)
    torch.testing.assert_close(g_x[0], g_y[0], rtol=0, atol=1e-14)
    torch.testing.assert_close(e_x[:1], e_0, rtol=0, atol=1e-14)
    torch.testing.assert_close(g_x[:1], g_0, rtol=0, atol=1e-14)


def test_spectral_norm_bounds_each_largest_singular_value():
    torch.manual_seed(0)
    net = MLPEnergy(5, (32, 32), spectral_norm=True)
    with torch.no_grad():
        for layer in net.layers:  # start far from norm 1
            layer.parametrizations.weight.original.mul_(10.0)
    x = torch.randn(4, 5)
    for _ in range(100):  # one power iteration per weight read in train mode
        net(x)
    net.eval()
    for layer in [*net.layers, net.head]:
        sigma = torch.linalg.matrix_norm(layer.weight.detach(), ord=2)
        assert abs(float(sigma) - 1.0) < 1e-3, float(sigma)
    plain = MLPEnergy(5, (32, 32))
    assert float(torch.linalg.matrix_norm(plain.layers[1].weight.detach(), ord=2)) != pytest.approx(1.0, abs=1e-2)


def test_spectral_norm_grad_matches_autograd():
    net = _net(3, (8, 8), spectral_norm=True).eval()  # eval: weights fixed between reads
    x = _x(5, 3)
    _, g = net.energy_and_grad(x)
    _, g_ref = autograd_energy_and_grad(net, x)
    torch.testing.assert_close(g, g_ref, rtol=0, atol=1e-12)


def test_ula_with_analytic_grad_follows_the_autograd_chain(fast_paths):
    torch.manual_seed(0)
    net = MLPEnergy(2, (16, 16))
    slow = from_fn(net.forward)  # same energy, gradient through autograd
    x0 = torch.randn(32, 2)
    a = ULA(step_size=0.05).sample(net, x0, 20, generator=torch.Generator().manual_seed(4))
    b = ULA(step_size=0.05).sample(slow, x0, 20, generator=torch.Generator().manual_seed(4))
    torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5)


def test_activation_objects_and_names_resolve_to_the_same_thing():
    assert resolve_activation("swish") is resolve_activation("silu")
    assert resolve_activation("TANH") is ACTIVATIONS["tanh"]
    act = ACTIVATIONS["softplus"]
    assert isinstance(act, Activation) and resolve_activation(act) is act
    assert MLPEnergy(2, (4,), activation=act).activation is act


def test_unknown_activation_message_lists_valid_names():
    with pytest.raises(ValueError, match=r"activation: expected one of 'elu', .*'tanh' or an Activation; got 'swoosh'"):
        MLPEnergy(2, activation="swoosh")
    with pytest.raises(TypeError, match=r"activation: expected a name \(str\) or an Activation; got int"):
        MLPEnergy(2, activation=3)


@pytest.mark.parametrize(
    "kwargs, exc, pattern",
    [
        (dict(in_dim=0), ValueError, r"in_dim: expected a positive int or a tuple of positive ints .*; got 0"),
        (dict(in_dim=(2, -1)), ValueError, r"in_dim: .*; got \(2, -1\)"),
        (dict(in_dim=2.5), ValueError, r"in_dim: .*; got 2.5"),
        (dict(in_dim=2, hidden=()), ValueError, r"hidden: expected a non-empty sequence of positive ints; got \(\)"),
        (dict(in_dim=2, hidden=(8, 0)), ValueError, r"hidden: .*; got \(8, 0\)"),
        (dict(in_dim=2, hidden=8), ValueError, r"hidden: .*; got 8"),
        (dict(in_dim=2, spectral_norm="yes"), TypeError, r"spectral_norm: expected a bool; got 'yes'"),
    ],
)
def test_bad_constructor_arguments_are_named(kwargs, exc, pattern):
    with pytest.raises(exc, match=pattern):
        MLPEnergy(**kwargs)


def test_bad_input_messages_name_x():
    net = MLPEnergy((1, 4, 4), (8,))
    with pytest.raises(ValueError, match=r"x: expected shape \(B, 1, 4, 4\); got \(3, 16\)"):
        net(torch.zeros(3, 16))
    with pytest.raises(ValueError, match=r"x: expected shape \(B, 1, 4, 4\); got \(3, 16\)"):
        net.energy_and_grad(torch.zeros(3, 16))
    with pytest.raises(TypeError, match=r"x: expected a floating-point tensor; got dtype torch.int64"):
        net.energy_and_grad(torch.zeros(3, 1, 4, 4, dtype=torch.long))
    with pytest.raises(TypeError, match=r"x: expected a torch.Tensor; got list"):
        net([[0.0] * 16])
