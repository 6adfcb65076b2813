"""Every sampler on the device chosen with ``--device`` (cpu by default, ``pytest --device cuda``).

Checks that hold on any device, against exact references:

* one ULA step and one MALA step equal the update rule written out by hand
  with the same random stream (a generator on the device, cloned);
* MALA, HMC, StepSizeAdaptation(MALA) and ParallelTempering(MALA) started
  from exact draws of a Gaussian keep it invariant: the chains are
  independent, so the mean of ``B`` final states has standard error
  ``sd / sqrt(B)`` exactly (no ESS needed); ``|z| < 4``;
* Gibbs after one sweep on independent spins draws each site exactly, and
  Metropolis-Hastings and Gibbs-with-Gradients keep that law invariant
  (binomial standard error, ``|z| < 4``);
* states, energies, gradients and infos stay on the device, in the chains' dtype.
"""

from __future__ import annotations

import math

import pytest
import torch
from torch import Tensor

from ebms.energy import from_fn
from ebms.samplers import (
    HMC,
    MALA,
    SGLD,
    ULA,
    Gibbs,
    GibbsWithGradients,
    MetropolisHastings,
    ParallelTempering,
    StepSizeAdaptation,
)
from ebms.spaces import Spins

Z_MAX = 4.0  # two-sided, per comparison: false alarm ~6e-5
SD = torch.tensor([1.0, 0.5])  # independent 2-D Gaussian with these standard deviations


def _gauss(x: Tensor) -> Tensor:
    return 0.5 * (x * x / (SD.to(x.device, x.dtype) ** 2)).sum(-1)


def _gen(device: torch.device, seed: int) -> torch.Generator:
    return torch.Generator(device=device).manual_seed(seed)


def _on(t: Tensor, device: torch.device) -> None:
    assert t.device.type == device.type, f"{t.device} is not {device}"


def _exact_draws(n: int, device: torch.device, seed: int) -> Tensor:
    return torch.randn(n, 2, generator=_gen(device, seed), device=device) * SD.to(device)


@pytest.mark.parametrize("sampler", [ULA(0.1), SGLD(0.05, noise_scale=0.2)], ids=["ULA", "SGLD"])
def test_langevin_step_is_the_update_rule_on_the_device(device, sampler):
    energy = from_fn(_gauss)
    x0 = _exact_draws(64, device, 0)
    state = sampler.init(energy, x0)
    new, info = sampler.step(energy, state, generator=_gen(device, 1))
    ref_gen = _gen(device, 1)  # the same stream: one N(0, I) draw of the chains' shape
    alpha, sigma = (0.05, math.sqrt(0.1)) if isinstance(sampler, ULA) else (0.05, 0.2)
    noise = torch.randn(x0.shape, generator=ref_gen, device=device)
    expected = x0 - alpha * x0 / SD.to(device) ** 2 + sigma * noise
    torch.testing.assert_close(new.x, expected, rtol=1e-6, atol=1e-6)
    for t in (new.x, new.energy, new.grad, info.accept_prob, info.nonfinite):
        _on(t, device)
    torch.testing.assert_close(new.grad, expected / SD.to(device) ** 2, rtol=1e-6, atol=1e-6)


def test_mala_step_is_the_mh_rule_on_the_device(device):
    energy, eps = from_fn(_gauss), 0.8
    x = _exact_draws(256, device, 2)
    sampler = MALA(eps)
    state = sampler.init(energy, x)
    g = _gen(device, 3)
    new, info = sampler.step(energy, state, generator=g)
    # the same stream by hand: the proposal noise, then one uniform per chain
    ref = _gen(device, 3)
    prec = 1 / SD.to(device) ** 2
    xi = torch.randn(x.shape, generator=ref, device=device)
    prop = x - 0.5 * eps * x * prec + math.sqrt(eps) * xi
    log_q = lambda a, b: -((a - b + 0.5 * eps * b * prec) ** 2).sum(-1) / (2 * eps)  # noqa: E731  log q(a | b)
    log_ratio = _gauss(x) - _gauss(prop) + log_q(x, prop) - log_q(prop, x)
    u = torch.rand(x.shape[0], generator=ref, device=device)
    accept = u < log_ratio.clamp(max=0).exp()
    torch.testing.assert_close(info.accept_prob, log_ratio.clamp(max=0).exp(), rtol=1e-5, atol=1e-6)
    assert torch.equal(info.accepted, accept)
    torch.testing.assert_close(new.x, torch.where(accept[:, None], prop, x))
    _on(new.x, device)


@pytest.mark.parametrize(
    "make",
    [
        lambda: MALA(0.5),
        lambda: HMC(0.3, n_leapfrog=4),
        lambda: StepSizeAdaptation(MALA(0.2)),
        lambda: ParallelTempering(MALA(0.5), n_replicas=2),
    ],
    ids=["MALA", "HMC", "adaptive-MALA", "PT-MALA"],
)
def test_exact_kernels_keep_a_gaussian_invariant_on_the_device(device, make):
    B, steps = 4000, 10
    sampler, energy = make(), from_fn(_gauss)
    if isinstance(sampler, ParallelTempering):
        # every replica starts at exact draws of its own target exp(-beta E): sd / sqrt(beta)
        xr = torch.cat([_exact_draws(B, device, 40 + r) / math.sqrt(b) for r, b in enumerate(sampler.betas)])
        inner = sampler.kernel.init(sampler._tempered(energy, B, xr), xr)
        state = inner.replace(step_size=inner.step_size.expand(xr.shape[0]).clone())
    else:
        state = sampler.init(energy, _exact_draws(B, device, 4))
    for state, _ in sampler.iterate(energy, state, steps, generator=_gen(device, 5)):  # noqa: B007, B020
        pass
    x = sampler.target(state)
    _on(x, device)
    assert x.shape == (B, 2) and x.dtype == torch.float32
    z_mean = x.mean(0).cpu() / (SD / math.sqrt(B))
    # the variance of x_i^2 / sd^2 is 2, so the standard error of the mean of B of them is sqrt(2 / B)
    z_var = ((x * x).mean(0).cpu() / SD**2 - 1) / math.sqrt(2 / B)
    assert float(z_mean.abs().max()) < Z_MAX, z_mean
    assert float(z_var.abs().max()) < Z_MAX, z_var


H = torch.tensor([0.8, -0.3, 0.0, 1.2, -1.0, 0.4])  # fields of independent spins: p(s_i = 1) = sigmoid(2 h_i)


def _spins_energy():
    return from_fn(lambda s: -(s * H.to(s.device, s.dtype)).sum(-1))


@pytest.mark.parametrize(
    ("make", "start_exact", "steps"),
    [
        (lambda sp: Gibbs(space=sp), False, 1),
        (lambda sp: MetropolisHastings(space=sp), True, 10),
        (lambda sp: GibbsWithGradients(space=sp), True, 10),
    ],
    ids=["Gibbs", "MH", "GWG"],
)
def test_discrete_kernels_draw_independent_spins_exactly_on_the_device(device, make, start_exact, steps):
    B, space = 8000, Spins(6)
    p_up = torch.sigmoid(2 * H)
    if start_exact:
        u = torch.rand(B, 6, generator=_gen(device, 6), device=device)
        x0 = torch.where(u < p_up.to(device), 1.0, -1.0)
    else:
        x0 = space.random(B, generator=_gen(device, 6), device=device)
    x = make(space).sample(_spins_energy(), x0, steps, generator=_gen(device, 7))
    _on(x, device)
    freq = (x > 0).float().mean(0).cpu()
    z = (freq - p_up) / torch.sqrt(p_up * (1 - p_up) / B)
    assert float(z.abs().max()) < Z_MAX, z


def test_float64_chains_stay_float64_on_the_device(device):
    x0 = _exact_draws(16, device, 8).double()
    for sampler in (ULA(0.1), MALA(0.1), HMC(0.1, n_leapfrog=2)):
        state = sampler.init(from_fn(_gauss), x0)
        state, info = sampler.step(from_fn(_gauss), state, generator=_gen(device, 9))
        assert state.x.dtype == state.energy.dtype == torch.float64
        _on(state.x, device)
        _on(info.accept_prob, device)
