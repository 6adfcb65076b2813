"""Random-walk MH and the Metropolis independence sampler on discrete spaces, and their proposals.

Invariance tests run ``S`` independent chains from uniform random starts and compare the final
states with the exact distribution (``tests/_discrete_checks.assert_matches_exact``: tolerance from
the sample size, failure probability < 1e-4 for exact draws). Step counts are several times the
number after which the TV distance stops falling on these targets (random walk: ~10 steps per
site, run 30; independence sampler with a fitted independent-site proposal: ~100 steps, because
chains on states with a large weight p/q leave them slowly; run 150), so the remaining burn-in
bias is negligible.
"""

from __future__ import annotations

import math

import pytest
import torch
from _discrete_checks import assert_matches_exact, exact_probs
from _discrete_targets import ising_energy, potts_energy, rbm_free_energy

from ebms.energy import from_fn
from ebms.samplers.metropolis import MetropolisHastings, MetropolisIndependence
from ebms.samplers.proposals import IndependentCategorical
from ebms.spaces import Binary, Box, Categorical, DiscreteSpace, Spins

TARGETS = {
    "ising": (ising_energy, Spins(10), 20000),
    "potts": (potts_energy, Categorical((3, 3), 3), 30000),
    "rbm": (rbm_free_energy, Binary(10), 20000),
}


class ExactProposal:
    """q = p exactly, by enumeration (tests the proposal protocol with a non-factorised q)."""

    def __init__(self, energy, space: DiscreteSpace) -> None:
        self.space, self.log_p = space, exact_probs(energy, space).log()

    def sample(self, n, generator=None):
        s = torch.multinomial(self.log_p.exp(), n, replacement=True, generator=generator)
        K, N = self.space.num_categories, self.space.num_sites
        powers = K ** torch.arange(N - 1, -1, -1)
        return self.space.from_indices((s[:, None] // powers) % K)

    def log_prob(self, x):
        return self.log_p[self.space.state_index(x)].float()


def fitted_proposal(energy, space: DiscreteSpace, n: int = 4000) -> IndependentCategorical:
    """Independent-site proposal fitted to the marginals of ``n`` exact draws."""
    data = ExactProposal(energy, space).sample(n, torch.Generator().manual_seed(11))
    return IndependentCategorical(space).fit(data)


def run_chains(sampler, energy, space, chains: int, steps: int, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    return sampler.sample(energy, space.random(chains, generator=g), steps, generator=g)


# -- random-walk Metropolis–Hastings ----------------------------------------------------------------


# potts: the table of test_discrete_invariance.py has one flip; ising 3 keeps a multi-flip case fast
@pytest.mark.parametrize(("target", "n_flips"), [("ising", 1), ("ising", 3), pytest.param("potts", 1, marks=pytest.mark.slow),
                                                 pytest.param("potts", 2, marks=pytest.mark.slow), ("rbm", 1)])
def test_metropolis_hastings_leaves_target_invariant(target, n_flips):
    make, space, chains = TARGETS[target]
    energy = make()
    x = run_chains(MetropolisHastings(n_flips, space=space), energy, space, chains, steps=30 * space.num_sites)
    assert_matches_exact(x, energy, space)


def test_metropolis_hastings_invariance_check_rejects_wrong_target():
    """Chains targeting 1.3 E fail the check against E (exact TV between the two is 0.18 > bound 0.076)."""
    energy, space = ising_energy(), Spins(10)
    x = run_chains(MetropolisHastings(space=space), from_fn(lambda s: 1.3 * energy(s)), space, 20000, 300)
    with pytest.raises(AssertionError, match="exceeds the sample-size bound"):
        assert_matches_exact(x, energy, space)


@pytest.mark.parametrize("space", [Binary(1), Spins(1), Categorical(1, 2)], ids=repr)
def test_metropolis_hastings_accept_prob_is_min_one_exp_minus_delta_e_on_two_states(space):
    """Two states; the proposal always moves to the other one: alpha = min(1, exp(E(x) - E(x')))."""
    a = 0.7
    energy = from_fn(lambda x: a * space.indices(x)[:, 0].to(x.dtype))  # E(state 0) = 0, E(state 1) = a
    x0 = space.from_indices(torch.tensor([[0], [1], [0], [1]]))
    sampler = MetropolisHastings(space=space)
    state = sampler.init(energy, x0)
    new, info = sampler.step(energy, state, generator=torch.Generator().manual_seed(0))
    expected = torch.tensor([math.exp(-a), 1.0, math.exp(-a), 1.0])
    torch.testing.assert_close(info.accept_prob, expected)
    moved = space.indices(new.x)[:, 0] != space.indices(x0)[:, 0]
    assert torch.equal(moved, info.accepted)
    assert bool(info.accepted[[1, 3]].all())  # downhill moves are always taken
    torch.testing.assert_close(new.energy, energy(new.x))


@pytest.mark.parametrize("space", [Spins(7), Categorical((2, 3), 4)], ids=repr)
def test_metropolis_hastings_proposal_changes_exactly_n_flips_sites(space):
    g = torch.Generator().manual_seed(1)
    x = space.random(500, generator=g)
    x_prop = MetropolisHastings(3, space=space).propose(space, x, g)
    space.validate(x_prop)
    changed = (space.indices(x_prop) != space.indices(x)).sum(1)
    assert bool((changed == 3).all())


def test_metropolis_hastings_evaluates_energy_once_per_step_and_caches_it():
    space = Categorical((3, 3), 3)
    base = potts_energy()
    calls = []
    energy = from_fn(lambda x: calls.append(x.shape[0]) or base(x))
    sampler = MetropolisHastings(2, space=space)
    g = torch.Generator().manual_seed(2)
    state = sampler.init(energy, space.random(50, generator=g))
    for _ in range(5):
        state, info = sampler.step(energy, state, generator=g)
    assert calls == [50] * 6  # init + one call per step
    torch.testing.assert_close(state.energy, base(state.x))
    assert state.t == 5 and 0 < float(info.acceptance_rate) < 1


def test_metropolis_hastings_rejects_and_flags_nan_proposals():
    space = Binary(1)
    energy = from_fn(lambda x: torch.where(x[:, 0] > 0.5, torch.full_like(x[:, 0], float("nan")), x[:, 0]))
    sampler = MetropolisHastings(space=space)
    state = sampler.init(energy, torch.zeros(4, 1))
    new, info = sampler.step(energy, state, generator=torch.Generator().manual_seed(0))
    assert not bool(info.accepted.any()) and bool(info.nonfinite.all())
    assert torch.equal(new.x, state.x)


def test_metropolis_hastings_is_reproducible_with_a_seeded_generator():
    energy, space = potts_energy(), Categorical((3, 3), 3)
    a = run_chains(MetropolisHastings(2, space=space), energy, space, 100, 10, seed=3)
    b = run_chains(MetropolisHastings(2, space=space), energy, space, 100, 10, seed=3)
    c = run_chains(MetropolisHastings(2, space=space), energy, space, 100, 10, seed=4)
    assert torch.equal(a, b) and not torch.equal(a, c)


def test_metropolis_hastings_validates_its_arguments():
    energy, space = ising_energy(), Spins(10)
    with pytest.raises(ValueError, match="n_flips"):
        MetropolisHastings(0)
    with pytest.raises(ValueError, match="n_flips: expected at most the number of sites N=10; got 11"):
        MetropolisHastings(11, space=space).init(energy, space.random(4))
    with pytest.raises(TypeError, match="space: expected an ebms.spaces.DiscreteSpace.*got Box"):
        MetropolisHastings(space=Box(10))
    with pytest.raises(ValueError, match=r"x0: expected values in \{-1, 1\}"):
        MetropolisHastings(space=space).init(energy, torch.zeros(4, 10))
    with pytest.raises(ValueError, match=r"x0: expected one-hot rows"):
        MetropolisHastings(space=Categorical(5, 2)).init(energy, torch.zeros(4, 5, 2))


# -- Metropolis independence sampler ----------------------------------------------------------------


@pytest.mark.parametrize("target", ["ising", pytest.param("potts", marks=pytest.mark.slow), "rbm"])
def test_metropolis_independence_leaves_target_invariant(target):
    make, space, chains = TARGETS[target]
    energy = make()
    x = run_chains(MetropolisIndependence(fitted_proposal(energy, space), space=space), energy, space, chains, 150)
    assert_matches_exact(x, energy, space)


def test_metropolis_independence_invariance_check_rejects_wrong_target():
    energy, space = ising_energy(), Spins(10)
    wrong = from_fn(lambda s: 1.3 * energy(s))
    x = run_chains(MetropolisIndependence(fitted_proposal(wrong, space), space=space), wrong, space, 20000, 150)
    with pytest.raises(AssertionError, match="exceeds the sample-size bound"):
        assert_matches_exact(x, energy, space)


def test_metropolis_independence_with_exact_proposal_accepts_everything():
    energy, space = ising_energy(), Spins(10)
    sampler = MetropolisIndependence(ExactProposal(energy, space), space=space)
    g = torch.Generator().manual_seed(5)
    state = sampler.init(energy, space.random(500, generator=g))
    state, _ = sampler.step(energy, state, generator=g)  # leave the uniform start
    for _ in range(3):
        state, info = sampler.step(energy, state, generator=g)
        torch.testing.assert_close(info.accept_prob, torch.ones(500), rtol=0, atol=1e-4)


def test_metropolis_independence_accept_prob_matches_importance_weight_ratio():
    energy, space = potts_energy(), Categorical((3, 3), 3)
    q = fitted_proposal(energy, space)
    x = space.random(200, generator=torch.Generator().manual_seed(6))
    sampler = MetropolisIndependence(q, space=space)
    _, info = sampler.step(energy, sampler.init(energy, x), generator=torch.Generator().manual_seed(7))
    x_prop = q.sample(200, torch.Generator().manual_seed(7))  # the kernel draws the proposal first

    def log_w(v):
        return -energy(v).double() - q.log_prob(v).double()

    expected = torch.exp((log_w(x_prop) - log_w(x)).clamp(max=0))
    torch.testing.assert_close(info.accept_prob.double(), expected, rtol=1e-4, atol=1e-6)


def test_metropolis_independence_validates_the_proposal():
    energy, space = ising_energy(), Spins(10)

    class NoLogProb:
        def sample(self, n, generator=None):
            return space.random(n, generator=generator)

    with pytest.raises(TypeError, match=r"proposal: expected an object with sample.*log_prob.*\(ebms.distributions.NormalisedModel\); got NoLogProb"):
        MetropolisIndependence(NoLogProb())

    class WrongShapes(NoLogProb):
        def __init__(self, n_sites, lp_shape):
            self.n_sites, self.lp_shape = n_sites, lp_shape

        def sample(self, n, generator=None):
            return Spins(self.n_sites).random(n, generator=generator)

        def log_prob(self, x):
            return torch.zeros(x.shape[0], *self.lp_shape)

    x0 = space.random(4)
    with pytest.raises(ValueError, match=r"proposal.sample\(n=4\): expected shape \(4, 10\); got \(4, 9\)"):
        MetropolisIndependence(WrongShapes(9, ()), space=space).sample(energy, x0, 1)
    with pytest.raises(ValueError, match=r"proposal.log_prob\(x\): expected shape \(4,\); got \(4, 1\)"):
        MetropolisIndependence(WrongShapes(10, (1,)), space=space).sample(energy, x0, 1)
    with pytest.raises(ValueError, match=r"x0: expected values in \{-1, 1\}"):
        MetropolisIndependence(WrongShapes(10, ()), space=space).init(energy, torch.zeros(4, 10))


def test_metropolis_independence_is_reproducible_with_a_seeded_generator():
    energy, space = rbm_free_energy(), Binary(10)
    q = fitted_proposal(energy, space)
    a = run_chains(MetropolisIndependence(q, space=space), energy, space, 100, 5, seed=8)
    b = run_chains(MetropolisIndependence(q, space=space), energy, space, 100, 5, seed=8)
    assert torch.equal(a, b)


# The IndependentCategorical proposal's own tests live in tests/distributions/test_dist_categorical.py.
