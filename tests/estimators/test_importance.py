"""Importance-sampling log Z and weight ESS, with any normalised proposal.

The factorised proposals' own tests moved with them to tests/distributions/.
"""

import math

import pytest
import torch

from ebms.distributions import Gaussian, IndependentBernoulli, NGram
from ebms.energy import from_fn
from ebms.estimators.exact import exact_log_partition
from ebms.estimators.importance import importance_ess, importance_log_partition, log_mean_weight
from ebms.sequences import Sequences
from ebms.spaces import Spins


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
    q = IndependentBernoulli(torch.zeros(10), space=space)
    est = importance_log_partition(energy, q, 20000, generator=torch.Generator().manual_seed(1))
    # z = 3 (two-sided failure rate 0.27% for this fixed seed); ESS is large so the delta method holds
    assert est.ess > 1000
    assert abs(est.estimate - exact) < 3 * est.stderr
    assert est.stderr < 0.1


def test_gaussian_proposal_recovers_gaussian_normaliser():
    energy = from_fn(lambda x: 0.5 * ((x - 0.5) ** 2).sum(-1) / 0.36)
    est = importance_log_partition(energy, Gaussian(torch.zeros(3), std=1.0), 20000,
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
    with pytest.raises(TypeError, match=r"proposal: expected a normalised model with sample\(n, \*, generator\) and "
                                        r"log_prob\(x\) -> \(B,\) .*; got P"):
        importance_log_partition(energy, type("P", (), {"sample": lambda self, n, generator=None: None})(), 10)
    with pytest.raises(ValueError, match="n_samples: expected an int >= 2; got 1"):
        importance_log_partition(energy, IndependentBernoulli(torch.zeros(3)), 1)
    bad = type("P", (), {"sample": lambda self, n, generator=None: torch.zeros(n + 1, 3),
                         "log_prob": lambda self, x: torch.zeros(x.shape[0])})()
    with pytest.raises(ValueError, match=r"proposal.sample\(10\): expected a tensor or Sequences with 10 rows; "
                                         r"got \(11, 3\)"):
        importance_log_partition(energy, bad, 10)


def test_torch_distribution_proposal_is_wrapped_and_recovers_the_normaliser():
    energy = from_fn(lambda x: 0.5 * (x**2).sum(-1))
    q = torch.distributions.Normal(torch.zeros(2, dtype=torch.float64), 1.2)  # batch shape (2,): the event
    est = importance_log_partition(energy, q, 8000, generator=torch.Generator().manual_seed(3))
    assert est.settings["proposal"] == "Normal"
    assert abs(est.estimate - math.log(2 * math.pi)) < 4 * est.stderr  # z = 4


def test_sequence_proposal_gives_the_exact_log_partition_of_a_tiny_sequence_energy():
    # The energy over token sequences of any length, E(y) = 0.2 * sum(y) + 1.5 |y|, has a closed-form
    # Z (a geometric series over lengths); the proposal is a uniform bigram with an end symbol.
    lm = NGram.uniform(3, 2)  # tokens {1, 2}, </s>: p(y) = 3^-(|y| + 1)

    class TokenEnergy(torch.nn.Module):
        def forward(self, s: Sequences) -> torch.Tensor:
            return 0.2 * (s.tokens * s.mask()).sum(1).double() + 1.5 * s.lengths.double()

    # Z = sum_L (e^-1.5 (e^-0.2 + e^-0.4))^L, a geometric series
    r = math.exp(-1.5) * (math.exp(-0.2) + math.exp(-0.4))
    exact = -math.log(1 - r)
    est = importance_log_partition(TokenEnergy(), lm, 20000, generator=torch.Generator().manual_seed(4))
    assert est.ess > 2000
    assert abs(est.estimate - exact) < 4 * est.stderr  # z = 4
