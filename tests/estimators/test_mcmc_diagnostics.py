"""MCMC diagnostics against closed forms: AR(1) autocorrelation/ESS, iid draws, R-hat controls.

Statistical checks use independent replicates (the D axis of a ``(S, C, D)`` tensor) to
measure the spread of an estimator, and pass within 4 standard errors (two-sided false
alarm rate ~6e-5 per comparison).
"""

from __future__ import annotations

import math

import pytest
import torch

from ebms.estimators import Estimate, autocorrelation, effective_sample_size, mcmc_mean, split_rhat

Z_MAX = 4.0


def ar1(rho: float, draws: int, chains: int, replicates: int, seed: int) -> torch.Tensor:
    """Stationary AR(1) ``x_t = rho x_{t-1} + sqrt(1 - rho^2) e_t``, shape ``(S, C, R)``, float64."""
    g = torch.Generator().manual_seed(seed)
    e = torch.randn(draws, chains, replicates, generator=g, dtype=torch.float64)
    x = torch.empty_like(e)
    x[0] = e[0]
    c = math.sqrt(1 - rho**2)
    for t in range(1, draws):
        x[t] = rho * x[t - 1] + c * e[t]
    return x


def test_autocorrelation_matches_direct_definition():
    g = torch.Generator().manual_seed(0)
    x = torch.randn(37, 3, 2, generator=g, dtype=torch.float64).cumsum(0)
    got = autocorrelation(x)
    xc = x - x.mean(0)
    direct = torch.stack([(xc[: 37 - k] * xc[k:]).sum(0) / 37 for k in range(37)])
    torch.testing.assert_close(got, direct / direct[0])
    assert got.shape == x.shape and got.dtype == torch.float64
    assert autocorrelation(x[..., 0].float()).shape == (37, 3)


def test_autocorrelation_of_ar1_decays_like_rho_to_the_lag():
    # Per-chain rho_k has sd ~ sqrt((1 - rho^2)/S) = 0.005; its bias ~ (1+rho)/((1-rho) S) = 3e-4
    # is ~0.2 SE of the mean over chains, so the chains' spread gives the tolerance.
    rho = 0.7
    x = ar1(rho, 20000, 10, 1, seed=1)[..., 0]
    acf = autocorrelation(x)[1:4]  # lags 1..3, (3, C)
    est, se = acf.mean(1), acf.std(1) / math.sqrt(acf.shape[1])
    exact = torch.tensor([rho, rho**2, rho**3], dtype=torch.float64)
    z = (est - exact) / se
    assert z.abs().max() < Z_MAX, f"z = {z.tolist()}"


@pytest.mark.parametrize("rho", [-0.5, 0.5, 0.9])
def test_ess_of_ar1_chains_matches_closed_form(rho):
    """ESS / N -> (1 - rho) / (1 + rho) for AR(1) (3N for the antithetic rho = -0.5)."""
    x = ar1(rho, 2000, 4, 100, seed=2)  # 100 independent replicates of 4 chains x 2000 draws
    ratio = effective_sample_size(x) / (2000 * 4)
    exact = (1 - rho) / (1 + rho)
    z = (ratio.mean() - exact) / (ratio.std() / math.sqrt(ratio.numel()))
    assert abs(float(z)) < Z_MAX, f"mean ESS/N {float(ratio.mean()):.4f} vs {exact:.4f}, z = {float(z):.2f}"


def test_ess_of_iid_draws_is_about_the_number_of_draws():
    """For iid draws ESS ~ N: the mean over replicates is within one single-estimate sd of N.

    Geyer's truncation keeps the leading positive noise pairs, a known downward bias of order
    1/sqrt(N) (~2% at N = 4000), which is below the estimator's own sd (~4.5%); that sd is of
    the size of the leading noise term 2 rho_1, sd 2/sqrt(N) (Bartlett).
    """
    g = torch.Generator().manual_seed(3)
    n = 1000 * 4
    ratio = effective_sample_size(torch.randn(1000, 4, 200, generator=g, dtype=torch.float64)) / n
    sd = float(ratio.std())
    assert abs(float(ratio.mean()) - 1.0) < sd
    assert 0.5 < sd / (2 / math.sqrt(n)) < 2.0


def test_ess_falls_when_chains_disagree():
    """Multi-chain ESS uses the between-chain variance: offset chains count as few draws."""
    g = torch.Generator().manual_seed(4)
    x = torch.randn(500, 4, generator=g, dtype=torch.float64)
    assert float(effective_sample_size(x + 3.0 * torch.arange(4.0))) < 0.05 * float(effective_sample_size(x))


def test_split_rhat_is_one_for_mixed_chains_and_large_for_stuck_chains():
    g = torch.Generator().manual_seed(5)
    x = torch.randn(1000, 4, 5, generator=g, dtype=torch.float64)
    for rank in (True, False):
        assert float(split_rhat(x, rank_normalize=rank).max()) < 1.01
        stuck = x + 0.5 * torch.arange(4.0, dtype=torch.float64)[None, :, None]  # chains in different places
        assert float(split_rhat(stuck, rank_normalize=rank).min()) > 1.1


def test_rank_normalized_rhat_catches_chains_that_differ_only_in_scale():
    g = torch.Generator().manual_seed(6)
    x = torch.randn(1000, 4, 5, generator=g, dtype=torch.float64) * torch.tensor([1.0, 1.0, 1.0, 3.0])[:, None]
    assert float(split_rhat(x, rank_normalize=False).max()) < 1.01  # the classic one looks at means only
    assert float(split_rhat(x).min()) > 1.1  # the folded, rank-normalised one sees the spread


def test_split_rhat_catches_a_single_drifting_chain():
    g = torch.Generator().manual_seed(7)
    trend = torch.linspace(0, 3, 1000, dtype=torch.float64)[:, None]
    x = torch.randn(1000, 1, generator=g, dtype=torch.float64) + trend
    assert float(split_rhat(x)) > 1.1


def test_split_rhat_handles_ties_and_disagreeing_constant_chains():
    ties = torch.tensor([[0.0, 1.0]]).repeat(8, 1)  # each chain constant, chains disagree
    assert math.isinf(float(split_rhat(ties)))
    assert math.isinf(float(split_rhat(ties, rank_normalize=False)))
    g = torch.Generator().manual_seed(8)
    binary = (torch.rand(2000, 4, generator=g) < 0.3).double()  # heavy ties
    assert float(split_rhat(binary)) < 1.01


def test_mcmc_mean_standard_error_covers_truth_at_nominal_rate():
    """|mean| < 2 se in ~95.4% of 200 independent AR(1) data sets (binomial SE 0.015)."""
    x = ar1(0.8, 500, 4, 200, seed=9)
    covered = [abs(e.estimate) < 2 * e.stderr for e in (mcmc_mean(x[..., r]) for r in range(200))]
    rate = sum(covered) / 200
    se = math.sqrt(0.954 * 0.046 / 200)
    assert abs(rate - 0.954) < Z_MAX * se, f"coverage {rate:.3f}"


def test_mcmc_mean_returns_estimate_with_ess_and_settings():
    g = torch.Generator().manual_seed(10)
    x = 3.0 + torch.randn(500, 20, generator=g)
    est = mcmc_mean(x)
    assert isinstance(est, Estimate)
    assert abs(est.estimate - 3.0) < Z_MAX * est.stderr
    assert est.settings["draws"] == 500 and est.settings["chains"] == 20
    assert est.settings["split_rhat"] < 1.01
    assert est.ess == pytest.approx(float(effective_sample_size(x)), rel=1e-5)
    assert est.stderr == pytest.approx(math.sqrt(float(x.double().var()) / est.ess), rel=1e-5)


def test_mcmc_mean_of_constant_draws_has_zero_stderr():
    est = mcmc_mean(torch.full((10, 3), 0.25))
    assert est.estimate == 0.25 and est.stderr == 0.0 and est.ess is None


def test_diagnostics_keep_float32_and_promote_integers():
    g = torch.Generator().manual_seed(11)
    x = torch.randn(100, 4, generator=g)
    assert effective_sample_size(x).dtype == torch.float32
    assert split_rhat((x > 0).long()).dtype == torch.float64


@pytest.mark.parametrize("fn", [autocorrelation, effective_sample_size, split_rhat, mcmc_mean])
@pytest.mark.parametrize(
    ("bad", "exc", "match"),
    [
        (torch.zeros(10), ValueError, r"chains: expected shape \(S, C\).* got \(10,\)"),
        (torch.zeros(10, 2, 2, 2), ValueError, r"chains: expected shape \(S, C\).* got \(10, 2, 2, 2\)"),
        (torch.zeros(3, 2), ValueError, r"chains: expected at least 4 draws per chain .*got shape \(3, 2\)"),
        (torch.zeros(10, 0), ValueError, r"chains: expected at least 4 draws .*non-empty C, D; got shape \(10, 0\)"),
        (torch.tensor([[float("nan"), 1.0]] * 5), ValueError, r"chains: expected a finite tensor; got 5 NaN and 0 Inf"),
        (torch.zeros(10, 2, dtype=torch.bool), TypeError, r"chains: expected a real floating or integer .*torch.bool"),
        ([[1.0, 2.0]] * 5, TypeError, r"chains: expected a torch.Tensor; got list"),
    ],
)
def test_bad_chains_messages_name_argument_and_value(fn, bad, exc, match):
    with pytest.raises(exc, match=match):
        fn(bad)


def test_mcmc_mean_wants_a_scalar_quantity():
    with pytest.raises(ValueError, match=r"chains: expected shape \(S, C\) for a scalar quantity .*got \(10, 2, 3\)"):
        mcmc_mean(torch.zeros(10, 2, 3))


def test_undefined_diagnostics_raise_instead_of_returning_nan():
    const = torch.ones(10, 3)
    with pytest.raises(ValueError, match=r"chains: expected every chain to vary; chain 0, quantity 0 is constant"):
        autocorrelation(const)
    with pytest.raises(ValueError, match=r"chains: expected draws that vary; quantity 0 is constant .*ESS undefined"):
        effective_sample_size(const)
    with pytest.raises(ValueError, match=r"chains: expected draws that vary; quantity 0 is constant .*R-hat undefined"):
        split_rhat(const)


def test_draws_far_from_zero_keep_their_spread_and_stderr():
    # Draws at 1e6 with a spread of 1e-5 (45,000 float64 ulps) were called constant: ESS raised
    # and mcmc_mean reported stderr 0. Shifting the draws must not change ESS or the stderr.
    g = torch.Generator().manual_seed(0)
    noise = 1e-5 * torch.randn(400, 4, generator=g, dtype=torch.float64)
    far, near = mcmc_mean(1e6 + noise), mcmc_mean(noise)
    assert far.stderr > 0 and far.stderr == pytest.approx(near.stderr, rel=1e-4)
    assert far.ess == pytest.approx(near.ess, rel=1e-4)
    assert float(effective_sample_size(1e6 + noise)) == pytest.approx(float(effective_sample_size(noise)), rel=1e-4)
    assert float(split_rhat(1e6 + noise, rank_normalize=False)) == pytest.approx(
        float(split_rhat(noise, rank_normalize=False)), rel=1e-4)
    for value in (0.1, 1e6 + 0.1, -3.7e12):  # equal draws are still constant, whatever their rounding
        assert mcmc_mean(torch.full((500, 3), value, dtype=torch.float64)).stderr == 0.0
        with pytest.raises(ValueError, match="constant"):
            effective_sample_size(torch.full((500, 3), value, dtype=torch.float64))
