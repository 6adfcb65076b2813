"""Single-site Gibbs: invariance against enumeration (Ising, Potts, RBM), fast path, scans, validation.

Invariance tests run ``S`` independent chains from uniform random starts and compare the final
states with the exact distribution (``tests/_discrete_checks.assert_matches_exact``: tolerance from
the sample size, failure probability < 1e-4 for exact draws). The sweeps used are 2-3 times
the number after which the TV distance stops falling on these targets (about 6 sweeps for the
systematic scan, 15 for the random scan), so the remaining burn-in bias is negligible next to the
tolerance.
"""

from __future__ import annotations

import pytest
import torch
from _discrete_checks import assert_matches_exact
from _discrete_targets import ising_parts, potts_energy, rbm_free_energy

from ebms.energy import Energy, from_fn
from ebms.samplers.gibbs import Gibbs
from ebms.spaces import Binary, Box, Categorical, DiscreteSpace, Spins


class IsingWithConditionals(Energy):
    """The same Ising energy with closed-form single-site conditionals (the fast path)."""

    def __init__(self, J: torch.Tensor, h: torch.Tensor) -> None:
        super().__init__()
        self.J, self.h, self.space = J, h, Spins(10)
        self.calls = 0

    def forward(self, s):
        return -0.5 * ((s @ self.J) * s).sum(-1) - s @ self.h

    def conditional_logits(self, s, site):
        self.calls += 1
        # local field: -E(s_i = v) = v * (sum_j J_ij s_j + h_i) + const  (J_ii = 0)
        field = (
            (s @ self.J + self.h)[torch.arange(s.shape[0]), site]
            if isinstance(site, torch.Tensor)
            else (s @ self.J[:, site] + self.h[site])
        )
        return torch.stack([-field, field], -1)


SWEEPS = {"systematic": 15, "random": 35}


def run_chains(sampler, energy, space, chains: int, steps: int, seed: int = 0, dtype=torch.float32):
    g = torch.Generator().manual_seed(seed)
    return sampler.sample(energy, space.random(chains, generator=g, dtype=dtype), steps, generator=g)


@pytest.mark.parametrize("scan", ["systematic", "random"])
def test_gibbs_leaves_ising_invariant(scan):
    energy, _, _ = ising_parts()
    space = Spins(10)
    x = run_chains(Gibbs(scan, space=space), energy, space, chains=20000, steps=SWEEPS[scan])
    assert_matches_exact(x, energy, space)


@pytest.mark.parametrize("scan", ["systematic", "random"])
def test_gibbs_fast_path_leaves_ising_invariant(scan):
    _, J, h = ising_parts()
    model = IsingWithConditionals(J, h)
    x = run_chains(Gibbs(scan), model, model.space, chains=20000, steps=SWEEPS[scan])  # space from energy.space
    assert model.calls == SWEEPS[scan] * 10  # N conditional calls per sweep, no generic evaluation
    assert_matches_exact(x, model, model.space)


def test_gibbs_invariance_check_rejects_wrong_target():
    """Chains targeting 1.3 E fail the check against E (exact TV between the two is 0.18 > bound 0.076)."""
    energy, _, _ = ising_parts()
    space = Spins(10)
    x = run_chains(Gibbs(space=space), from_fn(lambda s: 1.3 * energy(s)), space, chains=20000, steps=20)
    with pytest.raises(AssertionError, match="exceeds the sample-size bound"):
        assert_matches_exact(x, energy, space)


@pytest.mark.slow  # the same kernel and target are in test_discrete_invariance.py's table
@pytest.mark.parametrize("scan", ["systematic", "random"])
def test_gibbs_leaves_potts_invariant(scan):
    space = Categorical((3, 3), 3)
    energy = potts_energy()
    x = run_chains(Gibbs(scan, space=space), energy, space, chains=30000, steps=SWEEPS[scan])
    assert_matches_exact(x, energy, space)


def test_gibbs_leaves_rbm_free_energy_invariant():
    space = Binary(10)
    energy = rbm_free_energy()
    x = run_chains(Gibbs(space=space), energy, space, chains=20000, steps=15)
    assert_matches_exact(x, energy, space)


def test_gibbs_fast_path_draws_the_same_chain_as_energy_differences():
    """Same generator, float64: conditional_logits and -E of the variants give identical draws."""
    energy, J, h = ising_parts()
    model = IsingWithConditionals(J.double(), h.double())
    generic = from_fn(lambda s: -0.5 * ((s @ J.double()) * s).sum(-1) - s @ h.double())
    for scan in ("systematic", "random"):
        a = run_chains(Gibbs(scan, space=model.space), generic, model.space, 500, 3, seed=4, dtype=torch.float64)
        b = run_chains(Gibbs(scan, space=model.space), model, model.space, 500, 3, seed=4, dtype=torch.float64)
        torch.testing.assert_close(a, b, rtol=0, atol=0)


@pytest.mark.parametrize("space", [Spins((3, 4)), Binary(5), Categorical((2, 3), 4)], ids=repr)
def test_site_variants_into_a_reused_buffer_equal_fresh_ones(space):
    g = torch.Generator().manual_seed(3)
    x = space.random(6, generator=g)
    out = x.new_empty(6, space.num_categories, *space.event_shape)
    for site in (0, space.num_sites - 1, torch.randint(space.num_sites, (6,), generator=g)):
        got = space.site_variants(x, site, out=out)
        torch.testing.assert_close(got, space.site_variants(x, site), rtol=0, atol=0)


def test_gibbs_sweeps_per_step_equal_repeated_steps():
    space = Categorical((3, 3), 3)
    energy = potts_energy()
    a = run_chains(Gibbs(sweeps=3, space=space), energy, space, 200, 2, seed=5)
    b = run_chains(Gibbs(sweeps=1, space=space), energy, space, 200, 6, seed=5)
    torch.testing.assert_close(a, b, rtol=0, atol=0)


def test_gibbs_step_caches_new_energy_and_reports_acceptance_one():
    space = Spins(10)
    energy, _, _ = ising_parts()
    g = torch.Generator().manual_seed(6)
    sampler = Gibbs("random", space=space)
    state = sampler.init(energy, space.random(64, generator=g))
    x_before = state.x.clone()
    new, info = sampler.step(energy, state, generator=g)
    torch.testing.assert_close(new.energy, energy(new.x))
    torch.testing.assert_close(info.energy, new.energy)
    assert bool((info.accept_prob == 1).all()) and bool(info.accepted.all()) and not bool(info.nonfinite.any())
    assert new.t == 1
    torch.testing.assert_close(state.x, x_before, rtol=0, atol=0)  # the old state is not mutated
    space.validate(new.x)


def test_gibbs_is_reproducible_with_a_seeded_generator():
    space = Categorical((3, 3), 3)
    energy = potts_energy()
    a = run_chains(Gibbs("random", space=space), energy, space, 100, 3, seed=7)
    b = run_chains(Gibbs("random", space=space), energy, space, 100, 3, seed=7)
    c = run_chains(Gibbs("random", space=space), energy, space, 100, 3, seed=8)
    torch.testing.assert_close(a, b, rtol=0, atol=0)
    assert not torch.equal(a, c)


def test_gibbs_validates_its_arguments():
    energy, _, _ = ising_parts()
    with pytest.raises(ValueError, match=r"scan: expected one of \('systematic', 'random'\); got 'sequential'"):
        Gibbs("sequential")
    with pytest.raises(ValueError, match="sweeps"):
        Gibbs(sweeps=0)
    with pytest.raises(TypeError, match="space: expected an ebms.spaces.DiscreteSpace.*got Box"):
        Gibbs(space=Box(10))
    with pytest.raises(TypeError, match="space: expected an ebms.spaces.DiscreteSpace.*energy.space; got NoneType"):
        Gibbs().init(energy, Spins(10).random(4))
    with pytest.raises(ValueError, match=r"x0: expected values in \{-1, 1\}"):
        Gibbs(space=Spins(10)).init(energy, torch.zeros(4, 10))
    with pytest.raises(ValueError, match=r"x0: expected shape \(B, 10\)"):
        Gibbs(space=Spins(10)).init(energy, Spins(9).random(4))


class Ternary(DiscreteSpace):
    """A user-defined space: sites in {0, 1, 2} stored as floats."""

    def __init__(self, n: int) -> None:
        self.site_shape = self.event_shape = (n,)
        self.num_categories = 3

    def indices(self, x):
        return x.round().long()

    def from_indices(self, idx, dtype=torch.float32):
        return idx.to(dtype)

    def validate(self, x, name="x"):
        return x

    def category_values(self, dtype=torch.float32, device=None):
        return torch.arange(3, dtype=dtype, device=device)


@pytest.mark.parametrize("scan", ["systematic", "random"])
def test_gibbs_works_on_a_user_defined_discrete_space(scan):
    space = Ternary(4)
    w = torch.tensor([0.7, -0.4, 0.2, 0.5])
    energy = from_fn(lambda x: -(x @ w) + 0.3 * (x[:, 0] - x[:, 1]).abs() * x[:, 2])
    g = torch.Generator().manual_seed(0)
    x = Gibbs(scan, space=space).sample(energy, space.random(20000, generator=g), 15, generator=g)
    assert_matches_exact(x, energy, space)


def test_random_scan_with_n_updates_equals_one_ordinary_sweep():
    space = Spins(7)
    energy = from_fn(lambda x: -(x * x.roll(1, -1)).sum(-1) - 0.3 * x[:, 0])
    x0 = space.random(50, generator=torch.Generator().manual_seed(0))
    a = Gibbs("random", space=space).sample(energy, x0, 2, generator=torch.Generator().manual_seed(1))
    b = Gibbs("random", updates=7, space=space).sample(energy, x0, 2, generator=torch.Generator().manual_seed(1))
    assert torch.equal(a, b)


@pytest.mark.parametrize("updates", [1, 3])
def test_random_scan_with_few_updates_still_leaves_the_target_invariant(updates):
    space = Spins(6)
    energy = from_fn(lambda x: -0.6 * (x * x.roll(1, -1)).sum(-1) - 0.3 * x[:, 0])
    g = torch.Generator().manual_seed(updates)
    x = Gibbs("random", updates=updates, space=space).sample(energy, space.random(20000, generator=g), 60, generator=g)
    assert_matches_exact(x, energy, space)


def test_updates_needs_a_random_scan():
    with pytest.raises(ValueError, match="updates: only a random scan can stop part-way through the sites; got scan='systematic'"):
        Gibbs("systematic", updates=3)
