"""The energy layer: sign convention, composition, dispatch and shape checks."""

import math

import pytest
import torch

from ebms.energy import (
    Residual,
    SumEnergy,
    ZeroEnergy,
    autograd_energy_and_grad,
    energy_and_grad,
    energy_to_potential,
    evaluate,
    from_fn,
    potential_to_energy,
)
from ebms.nets import GaussianEnergy


def _x(n=5, d=2, seed=0):
    return torch.randn(n, d, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)


def test_from_fn_energy_and_autograd_gradient_match_closed_form():
    e = from_fn(lambda x: 0.5 * (x**2).sum(-1))
    x = _x()
    val, grad = e.energy_and_grad(x)
    torch.testing.assert_close(val, 0.5 * (x**2).sum(-1))
    torch.testing.assert_close(grad, x)
    torch.testing.assert_close(e.score(x), -x)


def test_from_fn_analytic_grad_is_used_and_shape_checked():
    e = from_fn(lambda x: (x**2).sum(-1), grad_fn=lambda x: 2 * x)
    torch.testing.assert_close(e.energy_and_grad(_x())[1], 2 * _x())
    bad = from_fn(lambda x: (x**2).sum(-1), grad_fn=lambda x: x[:, :1])
    with pytest.raises(ValueError, match=r"grad_fn\(x\): expected shape \(5, 2\); got \(5, 1\)"):
        bad.energy_and_grad(_x())


def test_potential_and_energy_conversions_are_inverse_signs():
    U = lambda x: -((x - 1) ** 2).sum(-1)  # noqa: E731
    E = potential_to_energy(U)
    x = _x()
    torch.testing.assert_close(E(x), -U(x))
    torch.testing.assert_close(energy_to_potential(E)(x), U(x))
    torch.testing.assert_close(E.potential(x), U(x))


def test_sum_energy_is_product_of_experts_and_keeps_analytic_gradients():
    a = GaussianEnergy(2, mean=[1.0, 0.0], learnable=False).double()
    b = from_fn(lambda x: x[:, 0] ** 2)
    s = a + b
    assert isinstance(s, SumEnergy) and len(s.terms) == 2
    x = _x()
    val, grad = s.energy_and_grad(x)
    ref_val, ref_grad = autograd_energy_and_grad(lambda z: a(z) + b(z), x)
    torch.testing.assert_close(val, ref_val)
    torch.testing.assert_close(grad, ref_grad)
    assert len((s + b).terms) == 3  # sums flatten


def test_tempered_energy_divides_energy_and_gradient():
    g = GaussianEnergy(2, learnable=False).double()
    t = g.tempered(4.0)
    x = _x()
    torch.testing.assert_close(t(x), g(x) / 4)
    torch.testing.assert_close(t.energy_and_grad(x)[1], x / 4)
    with pytest.raises(ValueError, match=r"temperature: expected a finite number > 0; got -1"):
        g.tempered(-1)


def test_residual_with_zero_correction_is_the_normalised_base():
    base = torch.distributions.Independent(torch.distributions.Normal(torch.zeros(2).double(), 1.0), 1)
    # a correction that is constant in x states its (zero) gradient: autograd would find no graph
    r = Residual(base, from_fn(lambda x: torch.zeros(x.shape[0], dtype=x.dtype), grad_fn=torch.zeros_like))
    x = _x()
    torch.testing.assert_close(r(x), -base.log_prob(x))
    # exp(-E) integrates to 1: E(0) = log(2 pi) for a 2-D standard normal
    torch.testing.assert_close(r(torch.zeros(1, 2, dtype=torch.float64)), torch.tensor([math.log(2 * math.pi)], dtype=torch.float64))
    val, grad = r.energy_and_grad(x)
    torch.testing.assert_close(grad, x)


def test_residual_rejects_base_without_log_prob():
    with pytest.raises(TypeError, match=r"base: expected an object with log_prob"):
        Residual(object(), from_fn(lambda x: x.sum(-1)))


def test_energy_of_wrong_shape_is_a_clear_error_with_fix():
    e = from_fn(lambda x: (x**2).sum(-1, keepdim=True))
    with pytest.raises(ValueError, match=r"energy\(x\): expected shape \(5,\); got \(5, 1\) \(squeeze the last"):
        evaluate(e, _x())
    with pytest.raises(ValueError, match=r"expected shape \(5,\); got \(5, 1\)"):
        energy_and_grad(e, _x())


def test_energy_returning_non_tensor_is_a_type_error():
    with pytest.raises(TypeError, match=r"energy\(x\): expected a tensor of shape \(5,\); got float"):
        evaluate(lambda x: 1.0, _x())


def test_autograd_gradient_leaves_parameter_grads_untouched():
    g = GaussianEnergy(2)
    autograd_energy_and_grad(lambda x: g(x), torch.randn(4, 2))
    assert all(p.grad is None for p in g.parameters())


def test_gaussian_energy_log_partition_matches_closed_form():
    P = torch.tensor([[2.0, 0.5], [0.5, 1.0]])
    g = GaussianEnergy(2, precision=P)
    expected = math.log(2 * math.pi) - 0.5 * math.log(float(torch.linalg.det(P)))
    assert float(g.log_partition().detach()) == pytest.approx(expected, abs=1e-5)
    torch.testing.assert_close(g.covariance, torch.linalg.inv(P), atol=1e-5, rtol=1e-5)


def test_gaussian_energy_rejects_bad_precision():
    with pytest.raises(ValueError, match=r"precision: expected a symmetric matrix"):
        GaussianEnergy(2, precision=torch.tensor([[1.0, 0.5], [0.0, 1.0]]))
    with pytest.raises(ValueError, match=r"precision: expected a positive definite matrix"):
        GaussianEnergy(2, precision=-torch.eye(2))
    with pytest.raises(ValueError, match=r"mean: expected shape \(2,\); got \(3,\)"):
        GaussianEnergy(2, mean=[0.0, 0.0, 0.0])


def test_gaussian_mixture_samples_match_its_weights():
    from ebms.nets import GaussianMixtureEnergy

    m = GaussianMixtureEnergy([[-3.0], [3.0]], 0.25, [0.2, 0.8])
    n = 20000
    x = m.sample(n, generator=torch.Generator().manual_seed(0))
    frac = float((x > 0).float().mean())
    se = math.sqrt(0.8 * 0.2 / n)
    assert abs(frac - 0.8) < 4 * se  # z = 4
    # normalised: exp(-E) integrates to 1 on a fine grid
    grid = torch.linspace(-8, 8, 4001).unsqueeze(-1)
    assert float(torch.exp(-m(grid)).sum() * (grid[1] - grid[0])) == pytest.approx(1.0, abs=1e-4)


# --- energies a gradient sampler cannot use: errors naming the energy ------------------------------
def _detached(x):
    return (x**2).sum(-1).detach()


@pytest.mark.parametrize(
    ("energy", "name"),
    [
        (_detached, "_detached"),
        (lambda x: torch.as_tensor((x**2).sum(-1).detach().numpy()), "<lambda>"),  # through NumPy
        (from_fn(lambda x: torch.zeros(x.shape[0], dtype=x.dtype)), "<lambda>"),  # constant in x, no grad_fn
    ],
)
def test_energy_without_a_graph_to_x_is_an_error_naming_it(energy, name):
    with pytest.raises(ValueError, match=rf"energy\(x\): expected a tensor that autograd can differentiate w.r.t. x; energy '[^']*{name}' returned one with no graph back to x"):
        energy_and_grad(energy, _x())


def test_energy_depending_only_on_parameters_is_an_error_too():
    w = torch.nn.Parameter(torch.ones(()))
    with pytest.raises(ValueError, match=r"returned one with no graph back to x"):
        autograd_energy_and_grad(lambda x: w.expand(x.shape[0]), _x())


def test_energy_computed_under_no_grad_inside_is_an_error():
    class NoGrad(torch.nn.Module):
        def forward(self, x):
            with torch.no_grad():
                return (x**2).sum(-1)

    with pytest.raises(ValueError, match=r"energy 'NoGrad' returned one with no graph back to x"):
        energy_and_grad(NoGrad(), _x())


def test_integer_energy_is_a_type_error_naming_it():
    with pytest.raises(TypeError, match=r"energy\(x\): expected a floating-point tensor from energy '[^']*<lambda>'; got dtype torch.int64"):
        energy_and_grad(from_fn(lambda x: (x**2).sum(-1).long()), _x())


def test_custom_energy_and_grad_must_return_floating_tensors_of_the_right_shape():
    class Custom(torch.nn.Module):
        def __init__(self, e_dtype=torch.float64, g=None):
            super().__init__()
            self.e_dtype, self.g = e_dtype, g

        def forward(self, x):
            return (x**2).sum(-1)

        def energy_and_grad(self, x):
            g = 2 * x if self.g is None else self.g(x)
            return (x**2).sum(-1).to(self.e_dtype), g

    with pytest.raises(TypeError, match=r"energy_and_grad\(x\)\[0\]: expected a floating-point tensor from energy 'Custom'; got dtype torch.int32"):
        energy_and_grad(Custom(e_dtype=torch.int32), _x())
    with pytest.raises(TypeError, match=r"energy_and_grad\(x\)\[1\]: expected a floating-point tensor from energy 'Custom'; got dtype torch.int64"):
        energy_and_grad(Custom(g=lambda x: x.long()), _x())
    with pytest.raises(TypeError, match=r"energy_and_grad\(x\)\[1\]: expected a tensor of shape \(5, 2\); got NoneType"):
        energy_and_grad(Custom(g=lambda x: None), _x())
    with pytest.raises(ValueError, match=r"energy_and_grad\(x\)\[1\]: expected the gradient's shape \(5, 2\); got \(5, 1\)"):
        energy_and_grad(Custom(g=lambda x: x[:, :1]), _x())


def test_constant_energy_with_an_explicit_gradient_is_fine():
    e, g = energy_and_grad(from_fn(lambda x: torch.zeros(x.shape[0], dtype=x.dtype), grad_fn=torch.zeros_like), _x())
    assert torch.equal(g, torch.zeros(5, 2, dtype=torch.float64)) and torch.equal(e, torch.zeros(5, dtype=torch.float64))


def test_gradient_under_inference_mode_is_an_error_not_a_zero_gradient():
    with torch.inference_mode(), pytest.raises(RuntimeError, match=r"cannot differentiate energy '[^']*<lambda>' inside torch.inference_mode\(\)"):
        autograd_energy_and_grad(lambda x: (x**2).sum(-1), _x())
    with torch.no_grad():  # no_grad around sampling is fine: the gradient w.r.t. x is still computed
        torch.testing.assert_close(autograd_energy_and_grad(lambda x: (x**2).sum(-1), _x())[1], 2 * _x())


def test_energy_and_grad_on_the_device_matches_the_cpu(device):
    x = _x()
    for energy in (from_fn(lambda z: 0.5 * (z**2).sum(-1)), GaussianEnergy(2, mean=[1.0, 0.0], learnable=False).double()):
        energy = energy.to(device)
        e, g = energy_and_grad(energy, x.to(device))
        assert e.device.type == g.device.type == device.type
        e_cpu, g_cpu = energy_and_grad(energy.cpu(), x)
        torch.testing.assert_close(e.cpu(), e_cpu)
        torch.testing.assert_close(g.cpu(), g_cpu)
    with pytest.raises(ValueError, match=r"no graph back to x"):
        energy_and_grad(lambda z: (z**2).sum(-1).detach(), x.to(device))


def test_allow_constant_gives_the_zero_gradient_of_a_term_constant_in_x():
    base = torch.distributions.Independent(torch.distributions.Uniform(-torch.ones(2), torch.ones(2)), 1)
    x = 0.4 * torch.tanh(_x().float())  # inside the square
    e, g = autograd_energy_and_grad(lambda z: -base.log_prob(z), x, allow_constant=True)
    torch.testing.assert_close(e, torch.full((5,), math.log(4.0)))  # -log(1/4) inside the square
    assert torch.equal(g, torch.zeros_like(x))
    with pytest.raises(ValueError, match=r"no graph back to x"):
        autograd_energy_and_grad(lambda z: -base.log_prob(z), x)
    # a residual model over a uniform base: the base term is constant, the correction is not
    r = Residual(base, from_fn(lambda z: (z**2).sum(-1)))
    torch.testing.assert_close(r.energy_and_grad(x)[1], 2 * x)


def test_zero_energy_leaves_a_residual_lm_its_base_horizon_law():
    """``ZeroEnergy`` scores every (prefix, continuation) pair 0, so a ResidualLM around a plain LM is
    the LM's own horizon law: log Z = 0 per prefix and the joint log-probabilities are the base's."""
    from ebms.models import LSTMLM
    from ebms.models.residual_lm import ResidualLM, enumerate_continuations, exact_joint_log_probs, exact_log_z
    from ebms.sequences import Sequences

    zero = ZeroEnergy()
    prefix, x = Sequences.from_lists([[1, 2], [3], []]), Sequences.from_lists([[1], [2, 3], []])
    e = zero(prefix, x)
    assert e.shape == (3,) and e.dtype == torch.float32 and not e.any() and not list(zero.parameters())
    torch.manual_seed(0)
    joint = ResidualLM(LSTMLM(4, embedding_dim=6, hidden_size=6, num_layers=1).eval(), zero, horizon=2)
    torch.testing.assert_close(exact_log_z(joint, prefix), torch.zeros(3, dtype=torch.float64), rtol=0, atol=1e-6)
    xs = enumerate_continuations(4, 2)
    c = Sequences(prefix.tokens.repeat_interleave(xs.batch_size, 0), prefix.lengths.repeat_interleave(xs.batch_size))
    base = joint.base_log_prob(c, Sequences(xs.tokens.repeat(3, 1), xs.lengths.repeat(3))).double().view(3, -1)
    torch.testing.assert_close(exact_joint_log_probs(joint, prefix), base, rtol=0, atol=1e-6)
