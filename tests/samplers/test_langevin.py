"""ULA and SGLD: target recovery at small steps, the exact biased stationary law, contract checks."""

from __future__ import annotations

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

from ebms.energy import energy_and_grad
from ebms.nets import GaussianEnergy
from ebms.samplers import SGLD, ULA


def _ula_expected_moments(energy: GaussianEnergy, eps: float, var0: float, burn: int, steps: int, thin: int):
    """Exact expectation of the five moment estimators for ULA on a Gaussian.

    ULA is linear here: ``x' = mu + A (x - mu) + sqrt(eps) xi`` with ``A = I - eps P / 2``, so the
    mean and covariance at every step follow ``m' = mu + A (m - mu)``, ``S' = A S A^T + eps I`` from
    any start; averaging them over the kept steps gives the estimator's exact expectation
    (discretisation bias plus what is left of the burn-in transient).
    """
    P, mu = energy.precision.detach().double(), energy.mean.double()
    eye = torch.eye(2, dtype=torch.float64)
    A = eye - 0.5 * eps * P
    m, S = torch.zeros(2, dtype=torch.float64), var0 * eye  # start: mean 0, covariance var0 I
    total, kept = torch.zeros(5, dtype=torch.float64), 0
    for i in range(steps):
        m = mu + A @ (m - mu)
        S = A @ S @ A.T + eps * eye
        if i >= burn and (i - burn) % thin == 0:
            M2 = S + torch.outer(m - mu, m - mu)
            total += torch.stack([m[0], m[1], M2[0, 0], M2[1, 1], M2[0, 1]])
            kept += 1
    return total / kept


def test_ula_small_step_recovers_correlated_gaussian_mean_and_covariance():
    energy = gaussian_energy()
    eps, burn, steps, thin = 0.01, 2000, 5000, 10
    g = torch.Generator().manual_seed(0)
    run = ULA(step_size=eps).run(energy, broad_start(1000, 2, g), steps, burn_in=burn, thin=thin, generator=g)
    q, exact = gaussian_moments(run.samples, energy)
    z, se, _ = z_scores(q, exact)
    # ULA's stationary covariance is (P (I - eps P / 4))^-1 = Sigma + (eps/4) I + O(eps^2):
    # each variance is inflated by eps/4 = 0.0025, while its ESS-based SE here is ~0.015,
    # i.e. ~0.17 SE. Check that claim exactly (transient included) before testing the target.
    bias = _ula_expected_moments(energy, eps, 16.0 / 3.0, burn, steps, thin) - exact.double()
    assert (bias.abs() < 0.25 * se).all(), f"bias/SE {(bias / se).tolist()}"
    assert z.abs().max() < Z_MAX, f"z-scores {z.tolist()} (mean x2, var x2, cov)"


def test_ula_large_step_matches_closed_form_biased_stationary_covariance():
    """At eps = 0.4 ULA samples N(mu, (P (I - eps P/4))^-1), measurably not the target."""
    energy = gaussian_energy()
    eps = 0.4
    g = torch.Generator().manual_seed(1)
    run = ULA(step_size=eps).run(energy, broad_start(500, 2, g), 800, burn_in=300, generator=g)
    q, exact = gaussian_moments(run.samples, energy)
    P = energy.precision.detach().double()
    cov_eps = torch.linalg.inv(P @ (torch.eye(2, dtype=torch.float64) - 0.25 * eps * P))
    exact_eps = torch.cat([exact[:2].double(), torch.stack([cov_eps[0, 0], cov_eps[1, 1], cov_eps[0, 1]])])
    z, _, _ = z_scores(q, exact_eps)
    assert z.abs().max() < Z_MAX, f"z-scores vs ULA law {z.tolist()}"
    z_target, _, _ = z_scores(q, exact)
    # Negative control: the variances are inflated by ~12% (~12 SE), so the same 4-SE test
    # against the target fails.
    assert z_target[2:4].abs().min() > Z_MAX


def _ula_stationary_mode_weight(energy, eps: float, h: float = 0.02) -> float:
    """Mode weight under ULA's own stationary law, from its transition kernel on a grid.

    Grid spacing 0.02 is under 1/8 of the proposal sd (0.17 at eps = 0.03); halving it changes
    the result by < 1e-12 (checked when the test was written).
    """
    e64 = energy.double()
    grid = torch.arange(-5.0, 5.0 + h / 2, h, dtype=torch.float64)[:, None]
    _, grad = energy_and_grad(e64, grid)
    drift = grid[:, 0] - 0.5 * eps * grad[:, 0]
    K = torch.softmax(-((grid[:, 0][None, :] - drift[:, None]) ** 2) / (2 * eps), dim=1)  # rows sum to 1
    n = K.shape[0]
    A = (K - torch.eye(n, dtype=torch.float64)).T.clone()
    A[-1] = 1.0  # replace one balance equation by sum(pi) = 1
    b = torch.zeros(n, dtype=torch.float64)
    b[-1] = 1.0
    pi = torch.linalg.solve(A, b)
    resp = torch.softmax(e64.component_log_prob(grid), -1)[:, 1]
    return float((pi * resp).sum())


def test_ula_small_step_recovers_two_mode_mixture_weights_from_broad_start():
    energy = mixture_energy()
    eps = 0.03
    g = torch.Generator().manual_seed(2)
    # Burn-in: the weights relax from 0.5 with an e-folding time of ~170 steps at this eps,
    # so after 1000 steps the transient left is ~0.2 e^-6 = 5e-4 and decays further.
    run = ULA(step_size=eps).run(energy, broad_start(1000, 1, g), 3000, burn_in=1000, thin=5, generator=g)
    assert fraction_crossing(run.samples) > 0.9  # chains really move between the modes
    q, exact = mode_weight(run.samples, energy)
    z, se, _ = z_scores(q, exact)
    # The discretisation bias of the weight (-9.6e-4 at eps = 0.03; SE ~5e-3) is < 0.25 SE:
    bias = _ula_stationary_mode_weight(energy, eps) - float(exact)
    assert abs(bias) < 0.25 * float(se), f"bias {bias:.2e} vs SE {float(se):.2e}"
    assert abs(float(z)) < Z_MAX, f"mode-weight z = {float(z):.2f}"


def test_sgld_with_default_noise_is_ula_with_twice_the_step():
    energy = mixture_energy()
    x0 = torch.linspace(-3, 3, 32)[:, None]
    a = SGLD(step_size=0.05, noise_scale=None).run(energy, x0, 20, generator=torch.Generator().manual_seed(3))
    b = ULA(step_size=0.1).run(energy, x0, 20, generator=torch.Generator().manual_seed(3))
    torch.testing.assert_close(a.samples, b.samples)


def test_sgld_with_small_noise_samples_a_colder_gaussian_in_closed_form():
    """On E = |x|^2/2, x' = (1 - a) x + s xi has stationary variance s^2 / (1 - (1 - a)^2)."""
    energy = GaussianEnergy(2, learnable=False)
    alpha, sigma = 0.05, 0.05
    g = torch.Generator().manual_seed(4)
    run = SGLD(step_size=alpha, noise_scale=sigma).run(energy, broad_start(500, 2, g), 600, burn_in=300, generator=g)
    var = sigma**2 / (1 - (1 - alpha) ** 2)  # 0.0256, far below the target's 1
    z, _, _ = z_scores(run.samples**2, torch.full((2,), var))
    assert z.abs().max() < Z_MAX, f"z-scores {z.tolist()}"


def test_ula_costs_one_energy_and_grad_per_step_and_cache_matches_fresh_evaluation():
    counting = CountingEnergy(mixture_energy())
    sampler = ULA(step_size=0.05)
    g = torch.Generator().manual_seed(5)
    state = sampler.init(counting, broad_start(64, 1, g))
    for _ in range(10):
        state, _ = sampler.step(counting, state, generator=g)
    assert counting.calls == 11
    e, grad = energy_and_grad(counting.base, state.x)
    torch.testing.assert_close(state.energy, e)
    torch.testing.assert_close(state.grad, grad)


@pytest.mark.parametrize("cls", [ULA, SGLD])
def test_langevin_same_seed_same_chain_different_seed_different_chain(cls):
    energy = gaussian_energy()
    x0 = torch.zeros(16, 2)

    def chain(seed):
        return cls(step_size=0.05).run(energy, x0, 10, generator=torch.Generator().manual_seed(seed)).samples

    assert torch.equal(chain(5), chain(5))
    assert not torch.equal(chain(5), chain(6))


@pytest.mark.parametrize("fill", [float("inf"), float("nan")])
def test_ula_rejects_and_flags_nonfinite_proposals(fill):
    energy = WallEnergy(fill)
    sampler = ULA(step_size=0.5)
    state = sampler.init(energy, torch.tensor([[0.9, 0.0]]).repeat(500, 1))
    new, info = sampler.step(energy, state, generator=torch.Generator().manual_seed(6))
    assert bool(info.nonfinite.any())
    assert torch.equal(info.nonfinite, ~info.accepted)
    assert torch.equal(new.x[info.nonfinite], state.x[info.nonfinite])
    assert bool((new.x[:, 0] <= 1.0).all()) and bool(torch.isfinite(new.energy).all())


@pytest.mark.parametrize("frozen", [False, True])
def test_ula_leaves_parameter_requires_grad_and_grad_untouched(frozen):
    energy = small_mlp_energy()
    for p in energy.parameters():
        p.requires_grad_(not frozen)
    run = ULA(step_size=0.05).run(energy, torch.zeros(8, 2), 5, generator=torch.Generator().manual_seed(0))
    for p in energy.parameters():
        assert p.requires_grad is (not frozen)
        assert p.grad is None
    assert not run.samples.requires_grad


def test_sgld_grad_clamp_moves_each_coordinate_by_the_clamped_gradient():
    """One step on E = |x - m|^2/2 without noise: x' = x - a clamp(x - m, -c, c), coordinate by coordinate."""
    from ebms.energy import from_fn

    m = torch.tensor([0.0, 1.0, -2.0, 0.01], dtype=torch.float64)
    energy = from_fn(lambda x: 0.5 * ((x - m) ** 2).sum(-1))
    x0 = torch.zeros(3, 4, dtype=torch.float64)
    alpha, c = 10.0, 0.03
    got = SGLD(step_size=alpha, noise_scale=0.0, grad_clamp=c).run(energy, x0, 1).samples[-1]
    want = x0 - alpha * (x0 - m).clamp(-c, c)
    torch.testing.assert_close(got, want, rtol=0, atol=1e-15)  # 0.3 per coordinate at most; 0.1 for m = 0.01
    free = SGLD(step_size=alpha, noise_scale=0.0).run(energy, x0, 1).samples[-1]
    torch.testing.assert_close(free, x0 - alpha * (x0 - m), rtol=0, atol=1e-15)
    loose = SGLD(step_size=0.05, noise_scale=0.1, grad_clamp=1e9)  # a clamp that never binds changes nothing
    g1, g2 = torch.Generator().manual_seed(5), torch.Generator().manual_seed(5)
    a = loose.run(energy, x0, 5, generator=g1).samples
    b = SGLD(step_size=0.05, noise_scale=0.1).run(energy, x0, 5, generator=g2).samples
    torch.testing.assert_close(a, b, rtol=0, atol=0)


@pytest.mark.parametrize(
    ("make", "exc", "match"),
    [
        (lambda: ULA(step_size=-0.01), ValueError, r"step_size: expected a finite number > 0; got -0\.01"),
        (lambda: ULA(step_size=float("inf")), ValueError, r"step_size: expected a finite number > 0; got inf"),
        (lambda: ULA(schedule=0.5), TypeError, r"schedule: expected a callable t -> multiplier or None; got float"),
        (lambda: SGLD(noise_scale=-1.0), ValueError, r"noise_scale: expected a finite number >= 0; got -1\.0"),
        (lambda: SGLD(grad_clamp=0.0), ValueError, r"grad_clamp: expected a finite number > 0; got 0\.0"),
    ],
)
def test_langevin_bad_arguments_messages_name_argument_and_value(make, exc, match):
    with pytest.raises(exc, match=match):
        make()

