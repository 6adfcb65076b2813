"""MALA: exact MH correction, target recovery, caching, failures, validation."""

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
from ebms.samplers import MALA, warmup
from ebms.spaces import Box


def test_mala_accept_prob_matches_hand_computed_mh_ratio():
    """One step reproduces log alpha = E(x) - E(x') + log q(x|x') - log q(x'|x) in float64."""
    energy = GaussianEnergy(1, mean=[0.5], precision=torch.tensor([[4.0]]), learnable=False)
    x = torch.linspace(-2.0, 2.0, 9)[:, None]
    eps = 0.3
    sampler = MALA(step_size=eps)
    state = sampler.init(energy, x)
    _, info = sampler.step(energy, state, generator=torch.Generator().manual_seed(7))

    # The kernel draws the proposal noise first, then the MH uniforms.
    xi = torch.randn(x.shape, generator=torch.Generator().manual_seed(7)).double()
    xd = x.double()

    def e(v):
        return 2.0 * (v - 0.5) ** 2  # 0.5 * 4 * (v - mu)^2

    def g(v):
        return 4.0 * (v - 0.5)

    xp = xd - 0.5 * eps * g(xd) + math.sqrt(eps) * xi
    log_fwd = -((xp - xd + 0.5 * eps * g(xd)) ** 2) / (2 * eps)
    log_bwd = -((xd - xp + 0.5 * eps * g(xp)) ** 2) / (2 * eps)
    log_ratio = (e(xd) - e(xp) + log_bwd - log_fwd)[:, 0]
    expected = torch.exp(log_ratio.clamp(max=0.0))
    torch.testing.assert_close(info.accept_prob.double(), expected, rtol=1e-4, atol=1e-6)


def test_mala_recovers_correlated_gaussian_mean_and_covariance():
    energy = gaussian_energy()
    g = torch.Generator().manual_seed(0)
    sampler = MALA(step_size=0.1)
    state = warmup(sampler, energy, broad_start(1000, 2, g), 300, generator=g)
    run = sampler.run(energy, state, 600, generator=g)
    q, exact = gaussian_moments(run.samples, energy)
    z, _, _ = z_scores(q, exact)
    assert z.abs().max() < Z_MAX, f"z-scores {z.tolist()} (mean x2, var x2, cov)"


def test_mala_recovers_two_mode_mixture_weights_from_broad_start():
    energy = mixture_energy()
    g = torch.Generator().manual_seed(1)
    sampler = MALA(step_size=0.1)
    state = warmup(sampler, energy, broad_start(1000, 1, g), 200, generator=g)
    run = sampler.run(energy, state, 600, generator=g)
    assert fraction_crossing(run.samples) > 0.9  # chains really move between the modes
    q, exact = mode_weight(run.samples, energy)
    z, _, _ = z_scores(q, exact)
    assert abs(float(z)) < Z_MAX, f"mode-weight z = {float(z):.2f}"


def test_mala_rejects_proposals_outside_box_instead_of_clamping():
    """On [-1, 1] with E(x) = x the density is e^{-x}: mean 1 - coth(1), no mass at the walls."""
    energy = from_fn(lambda x: x[:, 0])
    g = torch.Generator().manual_seed(2)
    sampler = MALA(step_size=0.5, space=Box(1, -1.0, 1.0))
    x0 = 2 * torch.rand(1000, 1, generator=g) - 1
    run = sampler.run(energy, x0, 400, burn_in=50, generator=g)
    x = run.samples
    # Clamping would put every accepted outside proposal exactly on a wall (~10% of
    # draws here); rejecting leaves the walls with probability ~0 (float rounding only).
    assert float((x.abs() == 1.0).float().mean()) < 1e-3, "draws pile up on the walls: proposals were clamped"
    exact = torch.tensor([1.0 - 1.0 / math.tanh(1.0)])
    z, _, _ = z_scores(x, exact)
    assert abs(float(z)) < Z_MAX, f"z = {float(z):.2f}"
    assert float(run.acceptance.mean()) < 0.9  # outside proposals were rejected


def test_mala_cached_energy_and_grad_match_fresh_evaluation():
    energy = mixture_energy()
    g = torch.Generator().manual_seed(3)
    sampler = MALA(step_size=0.5)
    state = sampler.init(energy, broad_start(64, 1, g))
    for _ in range(20):
        state, _ = sampler.step(energy, state, generator=g)
    e, grad = energy_and_grad(energy, state.x)
    torch.testing.assert_close(state.energy, e)
    torch.testing.assert_close(state.grad, grad)


def test_mala_costs_one_energy_and_grad_per_step():
    energy = CountingEnergy(gaussian_energy())
    sampler = MALA(step_size=0.5)
    state = sampler.init(energy, torch.zeros(8, 2))
    assert energy.calls == 1
    g = torch.Generator().manual_seed(0)
    for _ in range(10):
        state, _ = sampler.step(energy, state, generator=g)
    assert energy.calls == 11


def test_mala_same_seed_same_chain_different_seed_different_chain():
    energy = gaussian_energy()
    x0 = torch.zeros(16, 2)

    def chain(seed):
        return MALA(step_size=0.5).run(energy, x0, 20, generator=torch.Generator().manual_seed(seed)).samples

    assert torch.equal(chain(5), chain(5))
    assert not torch.equal(chain(5), chain(6))


@pytest.mark.parametrize("fill", [float("inf"), -float("inf"), float("nan")])
def test_mala_rejects_and_flags_nonfinite_proposals(fill):
    """Proposals into a region where E is inf/-inf/nan are rejected and flagged, never taken."""
    energy = WallEnergy(fill)
    g = torch.Generator().manual_seed(4)
    sampler = MALA(step_size=0.5)
    n = 2000
    state = sampler.init(energy, torch.tensor([[0.9, 0.0]]).repeat(n, 1))
    new, info = sampler.step(energy, state, generator=g)
    flagged = info.nonfinite
    assert not bool((flagged & info.accepted).any())
    assert torch.equal(new.x[flagged], state.x[flagged])
    # x0' = 0.9 - 0.25 * 0.9 + sqrt(0.5) xi > 1  <=>  xi > 0.325 / sqrt(0.5): binomial proportion.
    p = 0.5 * math.erfc(0.325 / math.sqrt(0.5) / math.sqrt(2))
    se = math.sqrt(p * (1 - p) / n)
    assert abs(float(flagged.float().mean()) - p) < Z_MAX * se
    for _ in range(30):
        new, info = sampler.step(energy, new, generator=g)
    assert bool((new.x[:, 0] <= 1.0).all())
    assert bool(torch.isfinite(new.energy).all())


def test_mala_per_chain_step_sizes_act_per_chain():
    energy = gaussian_energy()
    sampler = MALA(step_size=0.1)
    state = sampler.init(energy, torch.zeros(400, 2) + torch.tensor([1.0, -1.0]))
    step = torch.cat([torch.full((200,), 1e-4), torch.full((200,), 50.0)])
    state = state.replace(step_size=step)
    g = torch.Generator().manual_seed(0)
    acc = torch.zeros(400)
    for _ in range(10):
        state, info = sampler.step(energy, state, generator=g)
        acc += info.accept_prob / 10
    assert float(acc[:200].mean()) > 0.99  # tiny steps are almost always accepted
    assert float(acc[200:].mean()) < 0.01  # huge steps almost never
    assert state.step_size.shape == (400,)


@pytest.mark.parametrize("frozen", [False, True])
def test_mala_leaves_parameter_requires_grad_and_grad_untouched(frozen):
    energy = small_mlp_energy()
    for p in energy.parameters():
        p.requires_grad_(not frozen)
    sampler = MALA(step_size=0.3)
    run = sampler.run(energy, torch.zeros(8, 2), 5, generator=torch.Generator().manual_seed(0))
    for p in energy.parameters():
        assert p.requires_grad is (not frozen)
        assert p.grad is None
    assert not run.samples.requires_grad and not run.state.energy.requires_grad


@pytest.mark.parametrize(
    ("kwargs", "exc", "match"),
    [
        ({"step_size": -1.0}, ValueError, r"step_size: expected a finite number > 0; got -1\.0"),
        ({"step_size": 0.0}, ValueError, r"step_size: expected a finite number > 0; got 0\.0"),
        ({"step_size": "big"}, TypeError, r"step_size: expected a number; got 'big'"),
        ({"space": "box"}, TypeError, r"space: expected an ebms.spaces.Space or None; got str"),
    ],
)
def test_mala_bad_arguments_messages_name_argument_and_value(kwargs, exc, match):
    with pytest.raises(exc, match=match):
        MALA(**kwargs)


def test_mala_bad_state_messages_name_field_and_shape():
    energy = gaussian_energy()
    sampler = MALA(step_size=0.1)
    state = sampler.init(energy, torch.zeros(5, 2))
    with pytest.raises(ValueError, match=r"state.step_size: expected shape \(\) or \(5,\); got \(3,\)"):
        sampler.step(energy, state.replace(step_size=torch.ones(3)))
    with pytest.raises(ValueError, match=r"state.grad: expected the cached gradient .* got None"):
        sampler.step(energy, state.replace(grad=None))
