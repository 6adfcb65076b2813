"""Mixed precision (``ebms._precision``, ``ebms.energy.mixed_precision``/``compiled``): bfloat16 energies and
gradients against autograd under the same autocast and against float32 within bfloat16's rounding; closed-form
energies exact under autocast; samplers still sample their target; compiled energies equal eager ones."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from ebms._precision import PRECISIONS, autocast, autocast_dtype, check_precision
from ebms.energy import autograd_energy_and_grad, compiled, energy_and_grad, evaluate, from_fn, mixed_precision
from ebms.models import BernoulliRBM, GaussianBernoulliRBM
from ebms.nets import GaussianEnergy, MLPEnergy
from ebms.samplers import MALA, ULA

#: bfloat16's unit round-off (8 significant bits)
U = 2.0**-8


def _forward_scale(net: MLPEnergy, x: torch.Tensor) -> torch.Tensor:
    """``|w|^T |h_L| + |b|`` per sample (float64): the size of the head's sum, what its rounding error scales with."""
    h = x.double().flatten(1)
    for layer in net.layers:
        h = net.activation.fn(h @ layer.weight.double().t() + layer.bias.double())
    return h.abs() @ net.head.weight.double().abs()[0] + net.head.bias.double().abs()


@pytest.mark.parametrize("dim, activation", [(2, "silu"), (784, "silu"), (5, "tanh"), (3, "softplus"), (4, "gelu")])
def test_bf16_analytic_gradient_is_autograd_under_the_same_autocast(dim, activation):
    torch.manual_seed(dim)
    net = MLPEnergy(dim, (64, 32), activation=activation)
    x = torch.randn(50, dim)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        e, g = net.energy_and_grad(x)
        e_ref, g_ref = autograd_energy_and_grad(net, x)
    assert e.dtype == g.dtype == torch.float32 and e_ref.dtype == torch.float32
    # the same bfloat16 products; autograd's head runs in bfloat16, ours in float32
    torch.testing.assert_close(g, g_ref, rtol=4 * U, atol=4 * U * float(g_ref.abs().max()))
    scale = _forward_scale(net, x).float()
    assert bool(((e - e_ref).abs() <= 4 * U * scale).all())


@pytest.mark.parametrize("dim", [2, 64, 784])
def test_bf16_energies_and_gradients_are_float32_within_bfloat16_rounding(dim):
    """|E_bf16 - E_32| <= 8u (|w|^T|h| + |b|) per sample; relative gradient error <= 8u (u = 2^-8), over 5 nets."""
    for seed in range(5):
        torch.manual_seed(seed)
        net = MLPEnergy(dim, (128, 128))
        x = torch.randn(256, dim)
        e32, g32 = net.energy_and_grad(x)
        e16, g16 = mixed_precision(net).energy_and_grad(x)
        assert bool(((e16 - e32).abs() <= 8 * U * _forward_scale(net, x).float()).all())
        assert float((g16 - g32).norm() / g32.norm()) <= 8 * U
        f16 = mixed_precision(net)(x)
        assert f16.dtype == torch.float32 and bool(((f16 - e32).abs() <= 8 * U * _forward_scale(net, x).float()).all())


def test_float64_inputs_come_back_in_float64_and_images_keep_their_shape():
    torch.manual_seed(0)
    net = MLPEnergy((1, 4, 4), (16,)).double()
    x = torch.randn(3, 1, 4, 4, dtype=torch.float64)
    e, g = mixed_precision(net).energy_and_grad(x)
    assert e.dtype == g.dtype == torch.float64 and g.shape == x.shape
    e64, g64 = net.energy_and_grad(x)
    assert float((g - g64).norm() / g64.norm()) <= 8 * U


def test_fp32_precision_is_the_energy_unchanged():
    torch.manual_seed(0)
    net = MLPEnergy(3, (8,))
    x = torch.randn(4, 3)
    e, g = mixed_precision(net, "fp32").energy_and_grad(x)
    e0, g0 = net.energy_and_grad(x)
    assert torch.equal(e, e0) and torch.equal(g, g0)


def test_closed_form_energies_stay_exact_under_autocast():
    torch.manual_seed(0)
    gauss = GaussianEnergy(3)
    rbm, grbm = BernoulliRBM(6, 4), GaussianBernoulliRBM(3, 4)
    x, v = torch.randn(5, 3), torch.bernoulli(torch.full((5, 6), 0.5))
    for energy, inp in ((gauss, x), (rbm, v), (grbm, x)):
        want = energy.energy_and_grad(inp)
        with torch.autocast("cpu", dtype=torch.bfloat16):
            got = energy.energy_and_grad(inp)
        assert all(torch.equal(a, b) for a, b in zip(got, want)), type(energy).__name__


def test_an_autograd_energy_under_autocast_returns_float32():
    lin = nn.Linear(3, 1)
    energy = from_fn(lambda x: lin(x).squeeze(-1) ** 2)
    x = torch.randn(4, 3)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        assert lin(x).dtype == torch.bfloat16  # what autocast does to the product
        e, g = energy_and_grad(energy, x)
        e2 = evaluate(energy, x)
    assert e.dtype == g.dtype == e2.dtype == torch.float32


def test_outside_autocast_a_bfloat16_model_keeps_bfloat16():
    net = MLPEnergy(2, (4,)).to(torch.bfloat16)
    x = torch.randn(3, 2, dtype=torch.bfloat16)
    assert evaluate(net, x).dtype == torch.bfloat16


def test_mala_under_bf16_still_samples_its_gaussian_target():
    """MALA stays a Metropolis kernel of exp(-E_bf16); E here is a Gaussian whose products run in bfloat16."""
    prec = torch.tensor([[2.0, 0.6], [0.6, 1.0]])
    chol = torch.linalg.cholesky(prec)

    def quad(x: torch.Tensor) -> torch.Tensor:
        return 0.5 * (x @ chol).pow(2).sum(-1)  # a product autocast runs in bfloat16

    energy = mixed_precision(from_fn(quad))
    g = torch.Generator().manual_seed(0)
    x0 = torch.randn(2000, 2, generator=g)
    x = MALA(step_size=0.5).sample(energy, x0, 300, generator=g)
    cov = torch.linalg.inv(prec)
    emp = torch.cov(x.T)
    se = (2 / x.shape[0]) ** 0.5 * cov.diagonal().max()  # ~ standard error of a variance estimate
    assert float((x.mean(0)).abs().max()) < 5 * float(cov.diagonal().max().sqrt()) / x.shape[0] ** 0.5 + 8 * U
    assert float((emp - cov).abs().max()) < 5 * float(se) + 8 * U * float(cov.abs().max())


def test_the_samplers_precision_option_is_the_mixed_precision_energy():
    torch.manual_seed(0)
    net = MLPEnergy(3, (32, 32))
    x0 = torch.randn(64, 3)

    def run(energy, **kw):
        return ULA(step_size=0.01).sample(energy, x0, 10, generator=torch.Generator().manual_seed(1), **kw)

    got = run(net, precision="bf16")
    assert got.dtype == torch.float32 and torch.equal(got, run(mixed_precision(net)))
    assert not torch.equal(got, run(net))
    trace = ULA(step_size=0.01).run(net, x0, 5, generator=torch.Generator().manual_seed(1), precision="bf16")
    assert trace.energies.dtype == torch.float32
    with pytest.raises(ValueError, match="^precision: 'bf16' evaluates energies of float tensor states"):
        from ebms.samplers import Gibbs
        from ebms.spaces import Binary

        Gibbs(space=Binary(3)).sample(from_fn(lambda v: v.float().sum(-1)), torch.zeros(2, 3, dtype=torch.long), 1,
                                      precision="bf16")
    with pytest.raises(ValueError, match="^precision: expected one of"):
        run(net, precision="float16")


def test_precision_names_and_autocast_state():
    assert set(PRECISIONS) == {"fp32", "bf16"}
    assert check_precision("bf16") == "bf16"
    with pytest.raises(ValueError, match=r"^precision: expected one of \['bf16', 'fp32'\]"):
        check_precision("fp16")
    with pytest.raises(ValueError, match="^trainer.precision: expected"):
        check_precision(16, "trainer.precision")
    assert autocast_dtype("cpu") is None
    with autocast("bf16", "cpu"):
        assert autocast_dtype("cpu") == torch.bfloat16
    with autocast("fp32", "cpu"):
        assert autocast_dtype("cpu") is None
    with pytest.raises(ValueError, match="^precision:"):
        mixed_precision(MLPEnergy(2, (4,)), "half")


@pytest.mark.slow
def test_compiled_energies_equal_eager_ones():
    torch.manual_seed(0)
    net = MLPEnergy(3, (16, 16))
    x = torch.randn(8, 3)
    c = compiled(net, dynamic=False)
    e, g = c.energy_and_grad(x)
    e0, g0 = net.energy_and_grad(x)
    torch.testing.assert_close(e, e0, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(g, g0, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(c(x), net(x), rtol=1e-5, atol=1e-6)
    auto = compiled(from_fn(lambda z: (z**2).sum(-1)))
    e1, g1 = auto.energy_and_grad(x)
    torch.testing.assert_close(g1, 2 * x)
