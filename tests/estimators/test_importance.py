"""Importance-sampling log Z, weight ESS, and the factorised proposals."""

import math

import pytest
import torch

from ebms.energy import from_fn
from ebms.estimators.exact import exact_log_partition
from ebms.estimators.importance import (
    BernoulliBase,
    CategoricalBase,
    GaussianBase,
    importance_ess,
    importance_log_partition,
    log_mean_weight,
)
from ebms.spaces import Binary, Categorical, Spins


def _ising(n, seed=0, scale=0.4):
    g = torch.Generator().manual_seed(seed)
    J = torch.randn(n, n, generator=g) * scale
    J = (J + J.T) / 2
    J.fill_diagonal_(0)
    h = torch.randn(n, generator=g) * 0.3
    return from_fn(lambda s: -0.5 * ((s @ J) * s).sum(-1) - s @ h)


class ExactProposal:
    """The target itself, by enumeration: sample by inverse CDF over all states."""

    def __init__(self, energy, space):
        self.space = space
        self.states = torch.cat(list(space.enumerate()))
        self.energy = energy
        self.log_z = exact_log_partition(energy, space).estimate

    def sample(self, n, generator=None):
        with torch.no_grad():
            p = torch.softmax(-self.energy(self.states).double(), 0)
        idx = torch.multinomial(p, n, replacement=True, generator=generator)
        return self.states[idx]

    def log_prob(self, x):
        return -self.energy(x).double() - self.log_z


def test_exact_proposal_gives_exact_log_z_with_zero_variance_and_full_ess():
    energy, space = _ising(6), Spins(6)
    q = ExactProposal(energy, space)
    est = importance_log_partition(energy, q, 500, generator=torch.Generator().manual_seed(0), batch_size=128)
    assert est.estimate == pytest.approx(q.log_z, abs=1e-9)
    assert est.stderr < 1e-12
    assert est.ess == pytest.approx(500, rel=1e-9)
    assert est.settings == {"method": "importance", "n_samples": 500, "batch_size": 128, "proposal": "ExactProposal"}


def test_estimate_is_within_three_stderr_of_enumeration():
    energy, space = _ising(10, seed=3), Spins(10)
    exact = exact_log_partition(energy, space).estimate
    q = BernoulliBase(torch.zeros(10), space=space)
    est = importance_log_partition(energy, q, 20000, generator=torch.Generator().manual_seed(1))
    # z = 3 (two-sided failure rate 0.27% for this fixed seed); ESS is large so the delta method holds
    assert est.ess > 1000
    assert abs(est.estimate - exact) < 3 * est.stderr
    assert est.stderr < 0.1


def test_gaussian_proposal_recovers_gaussian_normaliser():
    energy = from_fn(lambda x: 0.5 * ((x - 0.5) ** 2).sum(-1) / 0.36)
    est = importance_log_partition(energy, GaussianBase(torch.zeros(3), 1.0), 20000,
                                   generator=torch.Generator().manual_seed(2))
    exact = 1.5 * math.log(2 * math.pi * 0.36)
    assert abs(est.estimate - exact) < 3 * est.stderr  # z = 3


def test_weight_summary_matches_hand_formula():
    w = torch.tensor([1.0, 2.0, 3.0, 10.0], dtype=torch.float64)
    log_mean, stderr, ess = log_mean_weight(torch.log(w) + 100.0)  # shift: must not matter
    assert log_mean == pytest.approx(math.log(4.0) + 100.0)
    assert stderr == pytest.approx(float(w.std()) / (2.0 * 4.0))
    assert ess == pytest.approx(16.0**2 / 114.0)
    assert importance_ess(torch.zeros(7)) == pytest.approx(7.0)
    assert importance_ess(torch.tensor([0.0, -1e4, -1e4, -math.inf])) == pytest.approx(1.0)


def test_weight_validation_messages():
    with pytest.raises(ValueError, match=r"log_weights: expected shape \(n,\) with n >= 2; got \(1,\)"):
        log_mean_weight(torch.zeros(1))
    with pytest.raises(ValueError, match="got 1 NaN and 1 \\+inf entries"):
        log_mean_weight(torch.tensor([0.0, math.nan, math.inf]))
    with pytest.raises(ValueError, match="at least one finite log weight; got all 2 equal to -inf"):
        log_mean_weight(torch.full((2,), -math.inf))


def test_proposal_and_sample_count_messages():
    energy = _ising(3)
    with pytest.raises(TypeError, match="proposal: expected an object with sample.*lacks log_prob"):
        importance_log_partition(energy, type("P", (), {"sample": lambda self, n, generator=None: None})(), 10)
    with pytest.raises(ValueError, match="n_samples: expected an int >= 2; got 1"):
        importance_log_partition(energy, BernoulliBase(torch.zeros(3)), 1)


@pytest.mark.parametrize("space", [Binary(4), Spins(4)])
def test_bernoulli_base_is_normalised_and_matches_its_samples(space):
    logits = torch.tensor([0.5, -1.0, 2.0, 0.0])
    q = BernoulliBase(logits, space=space)
    states = torch.cat(list(space.enumerate()))
    assert float(torch.logsumexp(q.log_prob(states).double(), 0)) == pytest.approx(0.0, abs=1e-6)
    x = q.sample(40000, generator=torch.Generator().manual_seed(0))
    space.validate(x)
    p = torch.sigmoid(logits)
    freq = ((x - space.low) / (space.high - space.low)).mean(0)
    # z = 4 per site on the binomial standard error
    assert torch.all((freq - p).abs() < 4 * torch.sqrt(p * (1 - p) / 40000))
    lp, grad = q.log_prob_and_grad(x[:5])
    xg = x[:5].clone().requires_grad_(True)
    (auto,) = torch.autograd.grad(q.log_prob(xg).sum(), xg)
    assert torch.allclose(grad, auto) and torch.allclose(lp, q.log_prob(x[:5]))


def test_bernoulli_from_data_uses_smoothed_site_frequencies():
    x = torch.tensor([[1.0, 0.0], [1.0, 0.0], [0.0, 0.0]])
    q = BernoulliBase.from_data(x, smoothing=1.0)
    assert torch.allclose(torch.sigmoid(q.logits), torch.tensor([3 / 5, 1 / 5]))
    with pytest.raises(ValueError, match="x: expected values in"):
        BernoulliBase.from_data(torch.tensor([[0.5, 1.0]]))
    with pytest.raises(ValueError, match="logits: expected the space's shape"):
        BernoulliBase(torch.zeros(3), space=Spins(2))


def test_categorical_base_is_normalised_and_fits_data():
    space = Categorical(2, 3)
    q = CategoricalBase(torch.tensor([[0.0, 1.0, -1.0], [2.0, 0.0, 0.0]]))
    states = torch.cat(list(space.enumerate()))
    assert float(torch.logsumexp(q.log_prob(states).double(), 0)) == pytest.approx(0.0, abs=1e-6)
    x = q.sample(30000, generator=torch.Generator().manual_seed(0))
    space.validate(x)
    p = q.log_probs.exp()
    assert torch.all((x.mean(0) - p).abs() < 4 * torch.sqrt(p * (1 - p) / 30000))  # z = 4
    fitted = CategoricalBase.from_data(x, smoothing=1.0)
    assert torch.allclose(fitted.log_probs.exp(), (x.sum(0) + 1) / (30000 + 3))
    assert fitted.site_logits().shape == (2, 3)


def test_gaussian_base_matches_torch_normal():
    mean, std = torch.tensor([0.5, -1.0]), torch.tensor([2.0, 0.3])
    q = GaussianBase(mean, std)
    x = torch.randn(6, 2, generator=torch.Generator().manual_seed(0))
    ref = torch.distributions.Normal(mean, std).log_prob(x).sum(-1)
    assert torch.allclose(q.log_prob(x), ref, atol=1e-5)
    assert torch.allclose(q.log_prob_and_grad(x)[1], -(x - mean) / std**2)
    with pytest.raises(ValueError, match=r"std: expected a number or shape \(2,\); got \(3,\)"):
        GaussianBase(mean, torch.ones(3))
    with pytest.raises(ValueError, match=r"x: expected shape \(B, 2\); got \(6, 3\)"):
        q.log_prob(torch.zeros(6, 3))


def _exact_log_sigmoid(t: float) -> float:
    """log sigmoid(t) = -softplus(-t) in the closed form min(t, 0) - log1p(exp(-|t|)) (no cut-off)."""
    return min(t, 0.0) - math.log1p(math.exp(-abs(t)))


@pytest.mark.parametrize("space_cls", [Binary, Spins])
def test_bernoulli_base_log_prob_is_exact_in_float64_for_large_logits(space_cls):
    # torch's softplus returns l itself above 20, so l - softplus(l) was 0 where the exact
    # log-probability of the likely value at l = 25 is -1.4e-11 (and off by up to 2e-9 near 20).
    logits = torch.tensor([25.0, -25.0, 21.0, 36.0, 40.0, -3.0], dtype=torch.float64)
    space = space_cls(6)
    q = BernoulliBase(logits, space=space)
    lo, hi = space.low, space.high
    bits = torch.tensor([[1, 1, 1, 1, 1, 1], [0, 0, 0, 0, 0, 0], [1, 0, 1, 0, 1, 0]], dtype=torch.float64)
    x = lo + (hi - lo) * bits
    got = q.log_prob(x)
    for row, b in enumerate(bits.tolist()):
        exact = sum(_exact_log_sigmoid(v if bi else -v) for v, bi in zip(logits.tolist(), b))
        assert float(got[row]) == pytest.approx(exact, rel=1e-14, abs=1e-300)
    # all-high row: a sum of tiny log-probabilities, relative precision kept
    assert float(got[0]) < 0


def test_bernoulli_base_log_prob_input_gradient_is_the_logits_per_unit():
    logits = torch.tensor([25.0, -2.0, 0.5], dtype=torch.float64)
    q = BernoulliBase(logits, space=Spins(3))
    x = torch.tensor([[1.0, -1.0, 1.0]], dtype=torch.float64, requires_grad=True)
    (g,) = torch.autograd.grad(q.log_prob(x).sum(), x)
    torch.testing.assert_close(g[0], logits / 2, rtol=1e-14, atol=1e-14)
    torch.testing.assert_close(q.log_prob_and_grad(x)[1][0], logits / 2)
