"""Fitting a learnable Gaussian energy with an objective, and the estimator's standard error.

Every objective here is an M-estimator: theta_hat minimises an average of
per-row losses. Its asymptotic covariance is the sandwich
``H^{-1} Var(grad L) H^{-1}`` (H the Hessian of the average loss, Var(grad L)
the variance of the average gradient computed from per-row gradients). The
tests write the per-row loss of each objective for the Gaussian energy by hand,
in the natural parameters theta = (mean_1, mean_2, P_11, P_12, P_22[, zeta]),
and use that covariance for two checks:

* exact: the hand-written average loss is stationary at the objective's fitted
  parameters (the objective computes the loss it documents);
* statistical: the fitted parameters lie within Z standard errors of the
  population optimum (the closed form the method is known to reach).
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Sequence

import torch
from torch import Tensor

from ebms.nets import GaussianEnergy

DTYPE = torch.float64
TRUE_MEAN = torch.tensor([1.0, -0.5], dtype=DTYPE)
TRUE_COV = torch.tensor([[1.5, 0.5], [0.5, 1.0]], dtype=DTYPE)
N_DATA = 4000
# Two-sided z per parameter: P(|N(0,1)| > 4) = 6.3e-5, so with <= 6 parameters per fit the
# chance of a false failure is below 4e-4 (and the generators are fixed anyway).
Z = 4.0


def gaussian_data(n: int = N_DATA, seed: int = 0) -> Tensor:
    g = torch.Generator().manual_seed(seed)
    L = torch.linalg.cholesky(TRUE_COV)
    return TRUE_MEAN + torch.randn(n, 2, generator=g, dtype=DTYPE) @ L.T


def new_energy() -> GaussianEnergy:
    return GaussianEnergy(2, learnable=True).double()


def fit(objective, energy, x: Tensor, *, seed: int, extra: Sequence[torch.nn.Parameter] = ()):
    """Full-batch L-BFGS. The generator is re-seeded on every evaluation, so the random
    draws (noise, projections) are the same each time and the objective is deterministic."""
    params = [*energy.parameters(), *extra]
    opt = torch.optim.LBFGS(
        params, lr=1.0, max_iter=400, history_size=20, tolerance_grad=1e-11,
        tolerance_change=1e-15, line_search_fn="strong_wolfe",
    )

    def closure():
        opt.zero_grad()
        out = objective(energy, x, generator=torch.Generator().manual_seed(seed))
        out.loss.backward()
        for p in params:  # L-BFGS views grads as flat; some arrive non-contiguous
            if p.grad is not None:
                p.grad = p.grad.contiguous()
        return out.loss

    opt.step(closure)
    return objective(energy, x, generator=torch.Generator().manual_seed(seed))


def theta_of(energy: GaussianEnergy, *extra: Tensor) -> Tensor:
    m = energy.mean.detach()
    P = energy.precision.detach()
    parts = [m, P[0, 0:2], P[1, 1:2], *[e.detach().reshape(1) for e in extra]]
    return torch.cat([p.to(DTYPE) for p in parts])


def unpack(theta: Tensor) -> tuple[Tensor, Tensor]:
    m = theta[:2]
    P = torch.stack([torch.stack([theta[2], theta[3]]), torch.stack([theta[3], theta[4]])])
    return m, P


def precision_theta(mean: Tensor, cov: Tensor, *extra: float) -> Tensor:
    P = torch.linalg.inv(cov)
    return torch.cat([mean, P[0, 0:2], P[1, 1:2], torch.tensor(extra, dtype=DTYPE)])


PerRow = Callable[[Tensor], Tensor]


def sandwich(theta: Tensor, terms: Sequence[tuple[PerRow, float]]) -> tuple[Tensor, Tensor]:
    """Objective ``sum_k w_k mean(f_k(theta))``; returns (Newton step to its stationary point, SE)."""
    theta = theta.detach().clone()

    def total(th: Tensor) -> Tensor:
        return sum(w * f(th).mean() for f, w in terms)

    H = torch.autograd.functional.hessian(total, theta)
    grad = torch.autograd.functional.jacobian(total, theta)
    var = torch.zeros_like(H)
    for f, w in terms:
        with warnings.catch_warnings():  # torch's forward-AD setup warns about its own torch.jit use
            warnings.simplefilter("ignore", DeprecationWarning)
            G = torch.func.jacfwd(f)(theta)  # (N_k, p) per-row gradients
        var = var + w * w * torch.cov(G.T) / G.shape[0]
    Hi = torch.linalg.inv(H)
    cov = Hi @ var @ Hi
    return Hi @ grad, cov.diagonal().sqrt()


def check_fit(theta_hat: Tensor, target: Tensor, terms: Sequence[tuple[PerRow, float]]) -> None:
    step, se = sandwich(theta_hat, terms)
    # exact part: stationary point of the hand-written loss (to 1% of a standard error)
    assert torch.all(step.abs() < 0.01 * se), f"not stationary: newton step {step.tolist()} vs se {se.tolist()}"
    # statistical part: within Z standard errors of the population optimum
    z = (theta_hat - target) / se
    assert torch.all(z.abs() < Z), f"z-scores {z.tolist()} (theta_hat {theta_hat.tolist()}, target {target.tolist()})"
