"""HMC and the leapfrog integrator: exactness, target recovery, divergences, validation."""

from __future__ import annotations

import math

import pytest
import torch
from _sampler_checks import (
    Z_MAX,
    CountingEnergy,
    WallEnergy,
    broad_start,
    fraction_crossing,
    gaussian_energy,
    gaussian_moments,
    mixture_energy,
    mode_weight,
    small_mlp_energy,
    z_scores,
)

from ebms.energy import energy_and_grad, from_fn
from ebms.nets import GaussianEnergy
from ebms.samplers import HMC, HMCInfo, leapfrog, warmup
from ebms.spaces import Box


def test_hmc_accept_prob_matches_hand_computed_hamiltonian_ratio():
    """One leapfrog step with mass m on E = 2 (x - 0.5)^2, worked out in float64."""
    energy = GaussianEnergy(1, mean=[0.5], precision=torch.tensor([[4.0]]), learnable=False)
    x = torch.linspace(-2.0, 2.0, 9)[:, None]
    eps, m = 0.4, 2.0
    sampler = HMC(step_size=eps, n_leapfrog=1, mass=[m])
    _, info = sampler.step(energy, sampler.init(energy, x), generator=torch.Generator().manual_seed(3))

    xi = torch.randn(x.shape, generator=torch.Generator().manual_seed(3)).double()  # momentum noise first
    xd = x.double()

    def e(v):
        return 2.0 * (v - 0.5) ** 2

    def g(v):
        return 4.0 * (v - 0.5)

    p0 = math.sqrt(m) * xi
    p_half = p0 - 0.5 * eps * g(xd)
    x1 = xd + eps * p_half / m
    p1 = p_half - 0.5 * eps * g(x1)
    d_h = ((e(x1) + p1**2 / (2 * m)) - (e(xd) + p0**2 / (2 * m)))[:, 0]
    torch.testing.assert_close(info.energy_error.double(), d_h, rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(info.accept_prob.double(), torch.exp((-d_h).clamp(max=0.0)), rtol=1e-4, atol=1e-6)


def test_leapfrog_is_reversible_and_costs_one_gradient_per_step():
    energy = CountingEnergy(mixture_energy().double())
    g = torch.Generator().manual_seed(0)
    x = broad_start(16, 1, g).double()
    p = torch.randn(16, 1, generator=g, dtype=torch.float64)
    e, grad = energy_and_grad(energy, x)
    eps = torch.tensor(0.1, dtype=torch.float64)
    fwd = leapfrog(energy, x, p, e, grad, eps, 7)
    assert energy.calls == 1 + 7
    back = leapfrog(energy, fwd.x, -fwd.momentum, fwd.energy, fwd.grad, eps, 7)
    torch.testing.assert_close(back.x, x, rtol=0, atol=1e-10)
    torch.testing.assert_close(-back.momentum, p, rtol=0, atol=1e-10)
    assert bool(fwd.finite.all() & fwd.inside.all())


def test_leapfrog_energy_error_is_second_order_in_step_size():
    """Over a fixed trajectory length, halving eps divides |H error| by ~4 (global O(eps^2))."""
    energy = gaussian_energy().double()
    g = torch.Generator().manual_seed(1)
    x = torch.randn(256, 2, generator=g, dtype=torch.float64)
    p = torch.randn(256, 2, generator=g, dtype=torch.float64)
    e, grad = energy_and_grad(energy, x)
    h0 = e + 0.5 * (p * p).sum(-1)
    errs = []
    for eps, n in [(0.1, 10), (0.05, 20)]:
        t = leapfrog(energy, x, p, e, grad, torch.tensor(eps, dtype=torch.float64), n)
        errs.append(float((t.energy + 0.5 * (t.momentum**2).sum(-1) - h0).abs().mean()))
    assert 3.5 < errs[0] / errs[1] < 4.5


def test_hmc_recovers_correlated_gaussian_mean_and_covariance():
    energy = gaussian_energy()
    g = torch.Generator().manual_seed(2)
    sampler = HMC(step_size=0.2, n_leapfrog=5)
    state = warmup(sampler, energy, broad_start(1000, 2, g), 150, generator=g)
    run = sampler.run(energy, state, 300, generator=g)
    q, exact = gaussian_moments(run.samples, energy)
    z, _, _ = z_scores(q, exact)
    assert z.abs().max() < Z_MAX, f"z-scores {z.tolist()} (mean x2, var x2, cov)"


def test_hmc_with_diagonal_mass_recovers_badly_scaled_gaussian():
    """Variances 25 and 0.04: a mass equal to the precision diagonal evens out the scales."""
    prec = torch.diag(torch.tensor([1 / 25.0, 25.0]))
    energy = GaussianEnergy(2, precision=prec, learnable=False)
    g = torch.Generator().manual_seed(3)
    sampler = HMC(step_size=0.3, n_leapfrog=5, mass=torch.diagonal(prec))
    state = warmup(sampler, energy, broad_start(1000, 2, g) * torch.tensor([5.0, 0.1]), 150, generator=g)
    run = sampler.run(energy, state, 300, generator=g)
    z, _, _ = z_scores(run.samples**2, torch.tensor([25.0, 0.04]))
    assert z.abs().max() < Z_MAX, f"variance z-scores {z.tolist()}"


def test_hmc_recovers_two_mode_mixture_weights_from_broad_start():
    energy = mixture_energy()
    g = torch.Generator().manual_seed(4)
    sampler = HMC(step_size=0.3, n_leapfrog=5)
    state = warmup(sampler, energy, broad_start(1000, 1, g), 150, generator=g)
    run = sampler.run(energy, state, 400, generator=g)
    assert fraction_crossing(run.samples) > 0.9  # chains really move between the modes
    q, exact = mode_weight(run.samples, energy)
    z, _, _ = z_scores(q, exact)
    assert abs(float(z)) < Z_MAX, f"mode-weight z = {float(z):.2f}"


def test_hmc_rejects_paths_leaving_box():
    """On [-1, 1] with E(x) = x the mean is 1 - coth(1); paths that leave are rejected, not clamped."""
    energy = from_fn(lambda x: x[:, 0])
    g = torch.Generator().manual_seed(5)
    sampler = HMC(step_size=0.3, n_leapfrog=4, space=Box(1, -1.0, 1.0))
    x0 = 2 * torch.rand(1000, 1, generator=g) - 1
    run = sampler.run(energy, x0, 300, burn_in=50, generator=g)
    x = run.samples
    assert float((x.abs() == 1.0).float().mean()) < 1e-3
    z, _, _ = z_scores(x, torch.tensor([1.0 - 1.0 / math.tanh(1.0)]))
    assert abs(float(z)) < Z_MAX, f"z = {float(z):.2f}"


def test_hmc_flags_divergent_and_nonfinite_trajectories():
    energy = from_fn(lambda x: 10.0 * x[:, 0] ** 4)
    x0 = torch.full((4, 1), 2.0)
    g = torch.Generator().manual_seed(0)
    # One step of size 0.5 throws x from 2 to about -38: energy error ~ 2e7, finite.
    one = HMC(step_size=0.5, n_leapfrog=1)
    _, info = one.step(energy, one.init(energy, x0), generator=g)
    assert isinstance(info, HMCInfo)
    assert bool(info.divergent.all()) and not bool(info.nonfinite.any())
    assert bool((info.energy_error > 1000).all() & torch.isfinite(info.energy_error).all())
    assert not bool(info.accepted.any())
    # Five steps overflow float32: non-finite, divergent, rejected, energy error +inf.
    five = HMC(step_size=0.5, n_leapfrog=5)
    state = five.init(energy, x0)
    new, info = five.step(energy, state, generator=g)
    assert bool(info.nonfinite.all() & info.divergent.all())
    assert bool(torch.isinf(info.energy_error).all()) and not bool(info.accepted.any())
    assert torch.equal(new.x, state.x)


@pytest.mark.parametrize("fill", [float("inf"), -float("inf"), float("nan")])
def test_hmc_rejects_and_flags_paths_into_nonfinite_region(fill):
    energy = WallEnergy(fill)
    g = torch.Generator().manual_seed(6)
    sampler = HMC(step_size=0.4, n_leapfrog=3)
    state = sampler.init(energy, torch.tensor([[0.9, 0.0]]).repeat(500, 1))
    flagged_any = False
    for _ in range(20):
        state, info = sampler.step(energy, state, generator=g)
        assert not bool((info.nonfinite & info.accepted).any())
        flagged_any |= bool(info.nonfinite.any())
    assert flagged_any
    assert bool((state.x[:, 0] <= 1.0).all()) and bool(torch.isfinite(state.energy).all())


def test_hmc_costs_n_leapfrog_energy_and_grad_calls_per_step():
    energy = CountingEnergy(gaussian_energy())
    sampler = HMC(step_size=0.2, n_leapfrog=6)
    state = sampler.init(energy, torch.zeros(8, 2))
    g = torch.Generator().manual_seed(0)
    for _ in range(3):
        state, _ = sampler.step(energy, state, generator=g)
    assert energy.calls == 1 + 3 * 6


def test_hmc_cached_energy_and_grad_match_fresh_evaluation():
    energy = mixture_energy()
    g = torch.Generator().manual_seed(7)
    sampler = HMC(step_size=0.3, n_leapfrog=4)
    state = sampler.init(energy, broad_start(64, 1, g))
    for _ in range(15):
        state, _ = sampler.step(energy, state, generator=g)
    e, grad = energy_and_grad(energy, state.x)
    torch.testing.assert_close(state.energy, e)
    torch.testing.assert_close(state.grad, grad)


def test_hmc_same_seed_same_chain_different_seed_different_chain():
    energy = gaussian_energy()
    x0 = torch.zeros(16, 2)

    def chain(seed):
        sampler = HMC(step_size=0.3, n_leapfrog=3)
        return sampler.run(energy, x0, 10, generator=torch.Generator().manual_seed(seed)).samples

    assert torch.equal(chain(5), chain(5))
    assert not torch.equal(chain(5), chain(6))


def test_hmc_per_chain_step_sizes_act_per_chain():
    energy = gaussian_energy()
    sampler = HMC(step_size=0.1, n_leapfrog=3)
    state = sampler.init(energy, torch.zeros(400, 2) + torch.tensor([1.0, -1.0]))
    state = state.replace(step_size=torch.cat([torch.full((200,), 1e-3), torch.full((200,), 5.0)]))
    g = torch.Generator().manual_seed(0)
    acc = torch.zeros(400)
    for _ in range(10):
        state, info = sampler.step(energy, state, generator=g)
        acc += info.accept_prob / 10
    assert float(acc[:200].mean()) > 0.99
    assert float(acc[200:].mean()) < 0.01


@pytest.mark.parametrize("frozen", [False, True])
def test_hmc_leaves_parameter_requires_grad_and_grad_untouched(frozen):
    energy = small_mlp_energy()
    for p in energy.parameters():
        p.requires_grad_(not frozen)
    run = HMC(step_size=0.2, n_leapfrog=3).run(energy, torch.zeros(8, 2), 4, generator=torch.Generator().manual_seed(0))
    for p in energy.parameters():
        assert p.requires_grad is (not frozen)
        assert p.grad is None
    assert not run.samples.requires_grad and not run.state.energy.requires_grad


@pytest.mark.parametrize(
    ("kwargs", "exc", "match"),
    [
        ({"step_size": -0.1}, ValueError, r"step_size: expected a finite number > 0; got -0\.1"),
        ({"n_leapfrog": 0}, ValueError, r"n_leapfrog: expected an int >= 1; got 0"),
        ({"n_leapfrog": 2.5}, TypeError, r"n_leapfrog: expected an int; got 2\.5"),
        ({"integrator": "leapfrog"}, TypeError, r"integrator: expected a callable like .*leapfrog; got str"),
        ({"mass": [1.0, -2.0]}, ValueError, r"mass: expected positive entries with the event shape; got shape \(2,\)"),
        ({"mass": [1.0, float("nan")]}, ValueError, r"mass: expected a finite tensor; got 1 NaN"),
        ({"divergence_threshold": 0.0}, ValueError, r"divergence_threshold: expected a finite number > 0; got 0\.0"),
    ],
)
def test_hmc_bad_arguments_messages_name_argument_and_value(kwargs, exc, match):
    with pytest.raises(exc, match=match):
        HMC(**kwargs)


def test_hmc_mass_shape_must_match_event_shape():
    energy = gaussian_energy()
    with pytest.raises(ValueError, match=r"mass: expected shape \(2,\); got \(3,\)"):
        HMC(mass=[1.0, 1.0, 1.0]).init(energy, torch.zeros(4, 2))
