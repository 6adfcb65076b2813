"""GaussianEnergy keeps float64 inputs in float64: energy and log Z equal the closed form to rounding."""

from __future__ import annotations

import math

import pytest
import torch
from torch.distributions import MultivariateNormal

from ebms.nets import GaussianEnergy

F64 = torch.float64


def _problem(diag: tuple[float, ...], seed: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    d = len(diag)
    a = torch.randn(d, d, generator=gen, dtype=F64)
    prec = a @ a.T + torch.diag(torch.tensor(diag, dtype=F64))
    mean = torch.randn(d, generator=gen, dtype=F64)
    x = mean + torch.randn(16, d, generator=gen, dtype=F64) / 10
    return mean, prec, x


@pytest.mark.parametrize("learnable", [True, False])
@pytest.mark.parametrize(
    "diag",
    [(1.0, 2.0, 0.5), (500.0, 0.3, 1000.0, 2.0), (5000.0, 900.0, 450.0)],
    ids=["moderate", "mixed_past_400", "all_past_400"],
)
def test_float64_energy_and_log_partition_match_the_closed_form(diag, learnable):
    mean, prec, x = _problem(diag, seed=len(diag))
    g = GaussianEnergy(len(diag), mean=mean, precision=prec, learnable=learnable)
    assert g.mean.dtype == F64 and g.raw_factor.dtype == F64
    mvn = MultivariateNormal(mean, precision_matrix=prec)
    log_z = 0.5 * len(diag) * math.log(2 * math.pi) - 0.5 * float(torch.linalg.slogdet(prec)[1])
    diff = x - mean
    energy = 0.5 * torch.einsum("bi,ij,bj->b", diff, prec, diff)
    with torch.no_grad():
        e, grad = g.energy_and_grad(x)
        # Cholesky of P and its products: a few hundred roundings at most in these small problems;
        # 1e-13 relative leaves a margin (before: 7.7e-8 energy, 8.0e-9 log Z from float32 and threshold 20)
        assert float(((g(x) - energy).abs() / energy).max()) <= 1e-13
        assert float(((e - energy).abs() / energy).max()) <= 1e-13
        assert float((grad - diff @ prec).abs().max()) <= 1e-13 * float((diff @ prec).abs().max())
        assert abs(float(g.log_partition()) - log_z) <= 1e-13 * abs(log_z)
        assert float((g.log_prob(x) - mvn.log_prob(x)).abs().max()) <= 1e-13 * float(mvn.log_prob(x).abs().max())
        assert float((g.precision - prec).abs().max()) <= 1e-13 * float(prec.abs().max())


def test_float32_stays_the_default_for_lists_float32_tensors_and_no_arguments():
    prec32 = torch.tensor([[2.0, 0.5], [0.5, 1.0]])
    for g in (
        GaussianEnergy(2),
        GaussianEnergy(2, mean=[1.0, -1.0], precision=prec32),
        GaussianEnergy(2, mean=torch.ones(2)),
    ):
        assert g.mean.dtype == torch.float32 and g.raw_factor.dtype == torch.float32
        assert g.log_partition().dtype == torch.float32


def test_float32_factor_is_the_float64_cholesky_rounded_once():
    prec = torch.tensor([[500.0, 3.0], [3.0, 2.0]])
    g = GaussianEnergy(2, precision=prec)
    chol = torch.linalg.cholesky(prec.double()).float()
    assert torch.equal(torch.tril(g.raw_factor, -1), torch.tril(chol, -1))
    torch.testing.assert_close(g.factor, chol, rtol=2e-7, atol=0.0)  # one softplus round trip in float32


def test_a_float64_precision_makes_a_float64_module_even_with_a_list_mean():
    prec = torch.tensor([[900.0, 1.0], [1.0, 3.0]], dtype=F64)
    g = GaussianEnergy(2, mean=[0.25, -0.5], precision=prec)
    assert g.mean.dtype == F64 and g.factor.dtype == F64
    assert torch.equal(g.mean, torch.tensor([0.25, -0.5], dtype=F64))
    assert float((g.precision.detach() - prec).abs().max()) <= 1e-13 * 900


def test_validation_messages_are_unchanged_in_float64():
    with pytest.raises(ValueError, match="precision: expected a symmetric matrix; got an asymmetric one"):
        GaussianEnergy(2, precision=torch.tensor([[1.0, 0.5], [0.0, 1.0]], dtype=F64))
    with pytest.raises(ValueError, match="precision: expected a positive definite matrix; Cholesky failed"):
        GaussianEnergy(2, precision=torch.tensor([[1.0, 2.0], [2.0, 1.0]], dtype=F64))
