"""Shared targets and ESS-based z-scores for the continuous-sampler tests.

Statistical tests here compare a Monte Carlo estimate with an exact value in
units of its MCMC standard error ``se = sqrt(var / ESS)``, ESS from
:func:`ebms.estimators.effective_sample_size` over all chains. A test passes
when ``|z| < 4``; for a correct sampler each comparison then fails with
probability about 6e-5, so the whole suite (< 40 comparisons) has a false
alarm rate under 0.3%.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from ebms.energy import Energy, energy_and_grad
from ebms.estimators import effective_sample_size
from ebms.nets import GaussianEnergy, GaussianMixtureEnergy

Z_MAX = 4.0

# Correlated 2-D Gaussian: correlation 0.6, precision eigenvalues 0.625 and 2.5.
GAUSS_MEAN = torch.tensor([1.0, -1.0])
GAUSS_COV = torch.tensor([[1.0, 0.6], [0.6, 1.0]])

# 1-D two-mode mixture: modes at -1 and +1 with sd 0.6 (clearly bimodal, density
# at 0 is ~1/4 of the peaks), weights 0.3 / 0.7. Chains start uniform on [-4, 4]
# (half of them on the wrong side), so the weights are right only if chains cross.
MIX_MEANS = [[-1.0], [1.0]]
MIX_VAR = 0.36
MIX_WEIGHTS = [0.3, 0.7]


def gaussian_energy() -> GaussianEnergy:
    return GaussianEnergy(2, mean=GAUSS_MEAN, precision=torch.linalg.inv(GAUSS_COV), learnable=False)


def mixture_energy() -> GaussianMixtureEnergy:
    return GaussianMixtureEnergy(MIX_MEANS, MIX_VAR, MIX_WEIGHTS)


def broad_start(n: int, dim: int, generator: torch.Generator, *, half_width: float = 4.0) -> Tensor:
    """Uniform on ``[-half_width, half_width]^dim``: far wider than either target."""
    return (2 * torch.rand(n, dim, generator=generator) - 1) * half_width


def z_scores(q: Tensor, exact: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """``q: (S, C, K)`` draws of K quantities -> (z, se, estimate), each ``(K,)``."""
    q = q.double()
    ess = effective_sample_size(q)
    est = q.mean((0, 1))
    se = (q.reshape(-1, q.shape[-1]).var(0) / ess).sqrt()
    return (est - exact.double()) / se, se, est


def gaussian_moments(samples: Tensor, energy: GaussianEnergy) -> tuple[Tensor, Tensor]:
    """Quantities whose means are the mean and covariance entries: ``(S, C, 5)`` and exact ``(5,)``."""
    mu = energy.mean.detach()
    d = samples - mu
    q = torch.stack([samples[..., 0], samples[..., 1], d[..., 0] ** 2, d[..., 1] ** 2, d[..., 0] * d[..., 1]], -1)
    cov = energy.covariance.detach()
    exact = torch.stack([mu[0], mu[1], cov[0, 0], cov[1, 1], cov[0, 1]])
    return q, exact


def mode_weight(samples: Tensor, energy: GaussianMixtureEnergy) -> tuple[Tensor, Tensor]:
    """Responsibility of the right mode, ``(S, C, 1)``; its exact mean is that mode's weight.

    ``E_p[w_k N_k(x) / p(x)] = w_k`` exactly, and the responsibility has a lower
    variance than the indicator ``x > 0``.
    """
    x = samples.reshape(-1, 1)
    r = torch.softmax(energy.component_log_prob(x), -1)[:, 1]
    return r.reshape(*samples.shape[:2], 1), torch.tensor([MIX_WEIGHTS[1]])


def fraction_crossing(samples: Tensor) -> float:
    """Fraction of chains that visited both modes (both signs of x)."""
    x = samples[..., 0]
    return float(((x > 0).any(0) & (x < 0).any(0)).float().mean())


class CountingEnergy(Energy):
    """Wraps an energy and counts ``energy_and_grad`` calls."""

    def __init__(self, base: nn.Module) -> None:
        super().__init__()
        self.base = base
        self.calls = 0

    def forward(self, x: Tensor) -> Tensor:
        return self.base(x)

    def energy_and_grad(self, x: Tensor) -> tuple[Tensor, Tensor]:
        self.calls += 1
        return energy_and_grad(self.base, x)


class WallEnergy(Energy):
    """Standard normal energy replaced by ``fill`` (inf, -inf or nan) where ``x[:, 0] > 1``."""

    def __init__(self, fill: float = float("inf")) -> None:
        super().__init__()
        self.fill = fill

    def forward(self, x: Tensor) -> Tensor:
        e = 0.5 * (x * x).sum(-1)
        return torch.where(x[:, 0] > 1.0, torch.full_like(e, self.fill), e)


def small_mlp_energy(seed: int = 0) -> nn.Module:
    """A learnable energy evaluated through autograd (no analytic gradient)."""
    with torch.random.fork_rng():
        torch.manual_seed(seed)
        net = nn.Sequential(nn.Linear(2, 8), nn.Tanh(), nn.Linear(8, 1))

    class _E(Energy):
        def __init__(self) -> None:
            super().__init__()
            self.net = net

        def forward(self, x: Tensor) -> Tensor:
            return self.net(x).squeeze(-1) + 0.5 * (x * x).sum(-1)

    return _E()
