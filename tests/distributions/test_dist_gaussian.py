"""Gaussian (full and diagonal): torch.distributions on the same inputs, moments, fit, gradients, errors.

Moved here from tests/objectives/test_objective_nce.py (GaussianNoise) and
tests/estimators/test_importance.py (GaussianBase).
"""

from __future__ import annotations

import math

import pytest
import torch

from ebms.distributions import Gaussian

DTYPE = torch.float64


def test_full_gaussian_sample_moments_and_log_prob_match_torch():
    cov = torch.tensor([[2.0, 0.6], [0.6, 1.0]], dtype=DTYPE)
    q = Gaussian(torch.tensor([1.0, -1.0], dtype=DTYPE), cov)
    ref = torch.distributions.MultivariateNormal(torch.tensor([1.0, -1.0], dtype=DTYPE), cov)
    x = torch.randn(5, 2, dtype=DTYPE, generator=torch.Generator().manual_seed(3))
    torch.testing.assert_close(q.log_prob(x), ref.log_prob(x))
    torch.testing.assert_close(q.to_torch().log_prob(x), ref.log_prob(x))
    n = 20000
    y = q.sample(n, generator=torch.Generator().manual_seed(0))
    # z = 4 with SE sqrt(C_ii / n) for each mean coordinate
    se = (cov.diagonal() / n).sqrt()
    assert torch.all((y.mean(0) - q.mean).abs() < 4 * se)
    fitted = Gaussian.fit(y, scale=2.0)
    torch.testing.assert_close(fitted.covariance, 4.0 * torch.cov(y.T))


def test_diagonal_gaussian_matches_torch_normal():
    mean, std = torch.tensor([0.5, -1.0]), torch.tensor([2.0, 0.3])
    q = Gaussian(mean, std=std)
    x = torch.randn(6, 2, generator=torch.Generator().manual_seed(0))
    ref = torch.distributions.Normal(mean, std).log_prob(x).sum(-1)
    assert torch.allclose(q.log_prob(x), ref, atol=1e-5)
    assert torch.allclose(q.to_torch().log_prob(x), ref, atol=1e-5)
    assert torch.allclose(q.log_prob_and_grad(x)[1], -(x - mean) / std**2)
    with pytest.raises(ValueError, match=r"std: expected a number or shape \(2,\); got \(3,\)"):
        Gaussian(mean, std=torch.ones(3))
    with pytest.raises(ValueError, match=r"x: expected shape \(B, 2\); got \(6, 3\)"):
        q.log_prob(torch.zeros(6, 3))


def test_diagonal_gaussian_takes_any_event_shape():
    mean = torch.randn(2, 3, generator=torch.Generator().manual_seed(1), dtype=DTYPE)
    q = Gaussian(mean, std=0.5)
    x = q.sample(4, generator=torch.Generator().manual_seed(2))
    assert x.shape == (4, 2, 3) and x.dtype == DTYPE
    ref = torch.distributions.Normal(mean, 0.5).log_prob(x).sum((1, 2))
    torch.testing.assert_close(q.log_prob(x), ref)


@pytest.mark.parametrize("diagonal", [True, False])
def test_entropy_and_input_gradient_match_torch_and_autograd(diagonal):
    mean = torch.tensor([0.3, -0.7], dtype=DTYPE)
    q = Gaussian(mean, std=torch.tensor([0.5, 2.0], dtype=DTYPE)) if diagonal else \
        Gaussian(mean, torch.tensor([[1.0, 0.4], [0.4, 0.8]], dtype=DTYPE))
    torch.testing.assert_close(q.entropy(), q.to_torch().entropy())
    x = torch.randn(5, 2, dtype=DTYPE, generator=torch.Generator().manual_seed(4)).requires_grad_(True)
    (auto,) = torch.autograd.grad(q.log_prob(x).sum(), x)
    lp, grad = q.log_prob_and_grad(x)
    torch.testing.assert_close(grad, auto)
    torch.testing.assert_close(lp, q.log_prob(x).detach())
    assert not lp.requires_grad and not grad.requires_grad


@pytest.mark.parametrize("diagonal", [True, False])
def test_rsample_carries_the_gradient_to_the_parameters_and_sample_does_not(diagonal):
    q = Gaussian(torch.zeros(2, dtype=DTYPE), std=1.5) if diagonal else Gaussian(torch.zeros(2, dtype=DTYPE), 2.25)
    q.mean.requires_grad_(True)
    y = q.rsample(7, generator=torch.Generator().manual_seed(5))
    (g,) = torch.autograd.grad(y.sum(), q.mean)
    torch.testing.assert_close(g, torch.full((2,), 7.0, dtype=DTYPE))  # d(mean + L eps)/d mean = 1 per draw
    z = q.sample(7, generator=torch.Generator().manual_seed(5))
    assert not z.requires_grad
    torch.testing.assert_close(z, y.detach())  # the same draws from the same generator


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("diagonal", [True, False])
def test_dtype_follows_the_mean_and_double_converts(dtype, diagonal):
    q = Gaussian(torch.zeros(3, dtype=dtype), std=1.0) if diagonal else Gaussian(torch.zeros(3, dtype=dtype), 1.0)
    x = q.sample(4, generator=torch.Generator().manual_seed(0))
    assert x.dtype == dtype and q.log_prob(x).dtype == dtype
    assert q.double().sample(2).dtype == torch.float64
    # log N(0; 0, I_3) = -1.5 log(2 pi)
    assert float(q.log_prob(torch.zeros(1, 3, dtype=torch.float64))) == pytest.approx(-1.5 * math.log(2 * math.pi))


def test_fit_diagonal_uses_per_coordinate_moments_with_a_floor():
    x = torch.tensor([[0.0, 1.0], [2.0, 1.0], [4.0, 1.0]], dtype=DTYPE)
    q = Gaussian.fit(x, diagonal=True, min_std=0.1)
    assert q.diagonal
    torch.testing.assert_close(q.mean, torch.tensor([2.0, 1.0], dtype=DTYPE))
    torch.testing.assert_close(q.std, torch.tensor([2.0, 0.1], dtype=DTYPE))  # sample sd 2; the constant hits the floor


def test_bad_arguments_are_named():
    with pytest.raises(ValueError, match=r"mean: expected shape \(D,\)"):
        Gaussian([[0.0]], 1.0)
    with pytest.raises(ValueError, match="cov: expected a finite number > 0; got -1.0"):
        Gaussian([0.0], -1.0)
    with pytest.raises(ValueError, match=r"cov: expected shape \(2, 2\); got \(3, 3\)"):
        Gaussian([0.0, 0.0], torch.eye(3))
    with pytest.raises(ValueError, match="cov: expected a positive definite matrix"):
        Gaussian([0.0, 0.0], torch.tensor([[1.0, 2.0], [2.0, 1.0]]))
    with pytest.raises(ValueError, match="cov: expected a symmetric matrix"):
        Gaussian([0.0, 0.0], torch.tensor([[1.0, 0.5], [0.0, 1.0]]))
    with pytest.raises(ValueError, match="cov, std: expected one of the two"):
        Gaussian([0.0], 1.0, std=1.0)
    with pytest.raises(ValueError, match="std: expected finite entries > 0"):
        Gaussian(torch.zeros(2), std=torch.tensor([1.0, 0.0]))
    with pytest.raises(ValueError, match=r"x: expected shape \(N, D\) with N >= 2; got \(1, 2\)"):
        Gaussian.fit(torch.zeros(1, 2))
    with pytest.raises(ValueError, match="scale: expected a finite number > 0"):
        Gaussian.fit(torch.zeros(3, 2), scale=0.0)
    with pytest.raises(ValueError, match="n: expected an int >= 1; got 0"):
        Gaussian([0.0], 1.0).sample(0)
    with pytest.raises(TypeError, match="x: expected a floating-point tensor"):
        Gaussian([0.0], 1.0).log_prob(torch.zeros(2, 1, dtype=torch.long))
