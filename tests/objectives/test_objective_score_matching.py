"""Score matching: exact values on a non-quadratic energy, Gaussian recovery with derived tolerances."""

from __future__ import annotations

import pytest
import torch
from _objective_fit import (
    DTYPE,
    TRUE_COV,
    TRUE_MEAN,
    check_fit,
    fit,
    gaussian_data,
    new_energy,
    precision_theta,
    sandwich,
    theta_of,
    unpack,
)
from torch import nn

from ebms.nets import GaussianEnergy
from ebms.objectives import DenoisingScoreMatching, ScoreMatching, SlicedScoreMatching


class QuarticEnergy(nn.Module):
    """E(x) = a/4 (x0^4 + x1^4) + b x0 x1: grad = (a x0^3 + b x1, a x1^3 + b x0), laplacian = 3a(x0^2 + x1^2)."""

    def __init__(self, a: float = 0.7, b: float = 0.3) -> None:
        super().__init__()
        self.a = nn.Parameter(torch.tensor(a, dtype=DTYPE))
        self.b = nn.Parameter(torch.tensor(b, dtype=DTYPE))

    def forward(self, x):
        return self.a / 4 * (x**4).sum(-1) + self.b * x[:, 0] * x[:, 1]

    def grad(self, x):
        return torch.stack([self.a * x[:, 0] ** 3 + self.b * x[:, 1], self.a * x[:, 1] ** 3 + self.b * x[:, 0]], -1)

    def laplacian(self, x):
        return 3 * self.a * (x**2).sum(-1)


def _x(n=16, seed=1):
    return torch.randn(n, 2, generator=torch.Generator().manual_seed(seed), dtype=DTYPE)


# -- exact values -----------------------------------------------------------------------
def test_exact_sm_loss_matches_closed_form_on_quartic_energy():
    e, x = QuarticEnergy(), _x()
    out = ScoreMatching()(e, x)
    expected = (0.5 * (e.grad(x) ** 2).sum(-1) - e.laplacian(x)).mean()
    torch.testing.assert_close(out.loss, expected)
    assert set(out.metrics) == {"loss", "energy", "score_norm", "hessian_trace"}
    assert out.metrics["hessian_trace"] == pytest.approx(float(e.laplacian(x).detach().mean()))


def test_exact_sm_parameter_gradient_passes_gradcheck():
    x = _x(8)

    e = QuarticEnergy()

    def loss(a, b):
        f = lambda z: torch.func.functional_call(e, {"a": a, "b": b}, (z,))  # noqa: E731
        return ScoreMatching()(f, x).loss

    a = torch.tensor(0.7, dtype=DTYPE, requires_grad=True)
    b = torch.tensor(0.3, dtype=DTYPE, requires_grad=True)
    assert torch.autograd.gradcheck(loss, (a, b))


def test_dsm_loss_matches_formula_with_reproduced_noise():
    e, x = QuarticEnergy(), _x()
    dsm = DenoisingScoreMatching([0.1, 0.5, 1.0])
    out = dsm(e, x, generator=torch.Generator().manual_seed(3))
    xt, sigma, eps = dsm.perturb(x, generator=torch.Generator().manual_seed(3))
    torch.testing.assert_close(out.negatives, xt)
    assert set(sigma.tolist()) <= {0.1, 0.5, 1.0}
    s = sigma[:, None]
    expected = (sigma**2 * 0.5 * ((e.grad(xt) - eps / s) ** 2).sum(-1)).mean()
    torch.testing.assert_close(out.loss, expected)
    assert not out.negatives.requires_grad


def test_dsm_custom_weighting_is_applied():
    e, x = QuarticEnergy(), _x()
    dsm = DenoisingScoreMatching(0.5, weighting=lambda s: torch.ones_like(s))
    out = dsm(e, x, generator=torch.Generator().manual_seed(3))
    xt, _, eps = dsm.perturb(x, generator=torch.Generator().manual_seed(3))
    expected = (0.5 * ((e.grad(xt) - eps / 0.5) ** 2).sum(-1)).mean()
    torch.testing.assert_close(out.loss, expected)


def test_dsm_passes_noise_level_to_noise_conditional_energy():
    seen = {}

    def energy(x, sigma):
        seen["sigma"] = sigma
        return (x**2).sum(-1) / (2 * (1 + sigma**2))

    x = _x(10)
    DenoisingScoreMatching([0.5, 2.0], noise_conditional=True)(energy, x, generator=torch.Generator().manual_seed(0))
    assert seen["sigma"].shape == (10,)
    assert set(seen["sigma"].tolist()) == {0.5, 2.0}


@pytest.mark.parametrize("vr", [False, True])
def test_ssm_equals_exact_sm_when_projections_enumerate_rademacher_signs(vr):
    # E[v v^T] = I holds exactly for the 4 sign vectors in 2-D, so SSM(-VR) = exact SM.
    class AllSigns(SlicedScoreMatching):
        def projections(self, x, *, generator=None):
            signs = torch.tensor([[1, 1], [1, -1], [-1, 1], [-1, -1]], dtype=x.dtype)
            return signs[:, None, :].expand(4, *x.shape)

    e, x = QuarticEnergy(), _x()
    out = AllSigns(4, distribution="rademacher", variance_reduced=vr)(e, x)
    torch.testing.assert_close(out.loss, ScoreMatching()(e, x).loss)


def test_ssm_rademacher_projections_are_signs_and_reproducible():
    ssm = SlicedScoreMatching(3, distribution="rademacher")
    x = _x(5)
    v1 = ssm.projections(x, generator=torch.Generator().manual_seed(0))
    v2 = ssm.projections(x, generator=torch.Generator().manual_seed(0))
    assert v1.shape == (3, 5, 2) and set(v1.unique().tolist()) == {-1.0, 1.0}
    assert torch.equal(v1, v2)


# -- Gaussian recovery (tolerance: sandwich standard error, see _objective_fit) ----------
def test_exact_sm_recovers_gaussian_and_equals_sample_mle():
    x = gaussian_data(seed=10)
    energy = new_energy()
    fit(ScoreMatching(), energy, x, seed=0)
    # For a Gaussian energy the SM minimiser on a sample is the sample MLE.
    torch.testing.assert_close(energy.mean.detach(), x.mean(0), rtol=1e-7, atol=1e-7)
    S = torch.cov(x.T, correction=0)
    torch.testing.assert_close(energy.covariance.detach(), S, rtol=1e-6, atol=1e-7)

    def per_row(th):
        m, P = unpack(th)
        Pd = (x - m) @ P
        return 0.5 * (Pd**2).sum(-1) - torch.trace(P)

    check_fit(theta_of(energy), precision_theta(TRUE_MEAN, TRUE_COV), [(per_row, 1.0)])


def test_dsm_optimum_is_gaussian_with_inflated_covariance():
    sigma = 0.8
    x = gaussian_data(seed=11)
    energy = new_energy()
    out = fit(DenoisingScoreMatching(sigma), energy, x, seed=1)
    xt = out.negatives
    eps = (xt - x) / sigma

    def per_row(th):
        m, P = unpack(th)
        return 0.5 * ((sigma * (xt - m) @ P - eps) ** 2).sum(-1)

    inflated = TRUE_COV + sigma**2 * torch.eye(2, dtype=DTYPE)  # closed form: Sigma + sigma^2 I
    check_fit(theta_of(energy), precision_theta(TRUE_MEAN, inflated), [(per_row, 1.0)])
    # negative control: the un-inflated precision is many standard errors away
    _, se = sandwich(theta_of(energy), [(per_row, 1.0)])
    z_plain = (theta_of(energy) - precision_theta(TRUE_MEAN, TRUE_COV)) / se
    assert z_plain[2].abs() > 10 and z_plain[4].abs() > 10


def test_multilevel_dsm_fits_each_level_of_noise_conditional_gaussian():
    sigmas = [0.5, 1.0]

    class PerLevel(nn.Module):
        def __init__(self):
            super().__init__()
            self.levels = nn.ModuleList([new_energy() for _ in sigmas])

        def forward(self, x, sigma):
            e = torch.stack([lv(x) for lv in self.levels], -1)  # (B, L)
            k = torch.stack([sigma == s for s in sigmas], -1).to(DTYPE).argmax(-1)
            return e.gather(1, k[:, None]).squeeze(1)

    x = gaussian_data(seed=12)
    energy = PerLevel()
    dsm = DenoisingScoreMatching(sigmas, noise_conditional=True)
    fit(dsm, energy, x, seed=2)
    xt, sig, eps = dsm.perturb(x, generator=torch.Generator().manual_seed(2))
    for s, level in zip(sigmas, energy.levels):
        rows = sig == s
        xs, es = xt[rows], eps[rows]

        def per_row(th, xs=xs, es=es, s=s):
            m, P = unpack(th)
            return 0.5 * ((s * (xs - m) @ P - es) ** 2).sum(-1)

        target = precision_theta(TRUE_MEAN, TRUE_COV + s**2 * torch.eye(2, dtype=DTYPE))
        check_fit(theta_of(level), target, [(per_row, 1.0)])


@pytest.mark.parametrize(
    "distribution,vr,m", [("gaussian", False, 1), ("rademacher", False, 2), ("gaussian", True, 1)]
)
def test_ssm_recovers_gaussian(distribution, vr, m):
    x = gaussian_data(seed=13)
    energy = new_energy()
    ssm = SlicedScoreMatching(m, distribution=distribution, variance_reduced=vr)
    fit(ssm, energy, x, seed=3)
    v = ssm.projections(x, generator=torch.Generator().manual_seed(3))  # (M, N, 2)

    def per_row(th):
        mu, P = unpack(th)
        hess = -torch.einsum("mni,ij,mnj->mn", v, P, v).mean(0)
        Pd = (x - mu) @ P
        if vr:
            return hess + 0.5 * (Pd**2).sum(-1)
        return hess + 0.5 * ((v * Pd).sum(-1) ** 2).mean(0)

    check_fit(theta_of(energy), precision_theta(TRUE_MEAN, TRUE_COV), [(per_row, 1.0)])


# -- validation ---------------------------------------------------------------------------
@pytest.mark.parametrize("objective", [ScoreMatching(), DenoisingScoreMatching(0.1), SlicedScoreMatching()])
def test_nan_batch_is_rejected_with_count(objective):
    x = _x(4)
    x[1, 0] = float("nan")
    with pytest.raises(ValueError, match=r"batch: expected a finite tensor; got 1 NaN"):
        objective(GaussianEnergy(2).double(), x)


@pytest.mark.parametrize("objective", [ScoreMatching(), SlicedScoreMatching()])
def test_integer_batch_is_rejected(objective):
    with pytest.raises(TypeError, match=r"batch: expected a floating-point tensor; got dtype torch.int64"):
        objective(GaussianEnergy(2), torch.ones(3, 2, dtype=torch.long))


@pytest.mark.parametrize("sigma", [0.0, -1.0, float("nan"), [0.5, -0.1], []])
def test_bad_sigma_message_names_argument_and_value(sigma):
    with pytest.raises(ValueError, match=r"sigma: expected finite noise level\(s\) > 0; got \["):
        DenoisingScoreMatching(sigma)


def test_bad_sigma_type_and_weighting_and_flag():
    with pytest.raises(TypeError, match="sigma: expected a positive number"):
        DenoisingScoreMatching("big")
    with pytest.raises(TypeError, match="weighting: expected a callable"):
        DenoisingScoreMatching(0.1, weighting=2.0)
    with pytest.raises(TypeError, match="noise_conditional: expected a bool; got 'yes'"):
        DenoisingScoreMatching(0.1, noise_conditional="yes")


def test_weighting_with_wrong_shape_is_rejected():
    dsm = DenoisingScoreMatching(0.1, weighting=lambda s: s[:, None])
    with pytest.raises(ValueError, match=r"weighting\(sigma\): expected shape \(4,\); got \(4, 1\)"):
        dsm(GaussianEnergy(2), torch.zeros(4, 2))


def test_bad_ssm_settings_are_rejected():
    with pytest.raises(ValueError, match="n_projections: expected an int >= 1; got 0"):
        SlicedScoreMatching(0)
    with pytest.raises(ValueError, match=r"distribution: expected one of \['gaussian', 'rademacher'\]; got 'uniform'"):
        SlicedScoreMatching(distribution="uniform")
    with pytest.raises(TypeError, match="variance_reduced: expected a bool"):
        SlicedScoreMatching(variance_reduced=1)


def test_energy_with_wrong_output_shape_is_rejected():
    with pytest.raises(ValueError, match=r"energy\(x\): expected shape \(4,\); got \(4, 1\)"):
        ScoreMatching()(lambda x: (x**2).sum(-1, keepdim=True), torch.zeros(4, 2))
