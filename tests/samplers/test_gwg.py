"""Gibbs-with-Gradients: invariance on enumerable targets, exact acceptance on linear energies, failures."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from _discrete_checks import assert_matches_exact, empirical_probs, exact_probs, tv_distance, tv_threshold

from ebms.energy import energy_and_grad, from_fn
from ebms.samplers.gwg import GibbsWithGradients
from ebms.spaces import Binary, Categorical, Spins


def ising_energy(n: int = 10, seed: int = 0, scale: float = 1.0):
    """``E = -x'Jx/2 - h.x`` with a random symmetric coupling (zero diagonal) and field."""
    g = torch.Generator().manual_seed(seed)
    a = 0.35 * torch.randn(n, n, generator=g)
    J = scale * (a + a.T).fill_diagonal_(0.0)
    h = scale * 0.3 * torch.randn(n, generator=g)
    return from_fn(lambda x: -0.5 * ((x @ J) * x).sum(-1) - x @ h)


def rbm_free_energy(n_visible: int = 10, n_hidden: int = 3, seed: int = 1):
    """Bernoulli RBM free energy ``F(v) = -b.v - sum_j softplus(c_j + W_j.v)``."""
    g = torch.Generator().manual_seed(seed)
    W = 0.8 * torch.randn(n_visible, n_hidden, generator=g)
    b = 0.3 * torch.randn(n_visible, generator=g)
    c = 0.3 * torch.randn(n_hidden, generator=g)
    return from_fn(lambda v: -v @ b - F.softplus(v @ W + c).sum(-1))


def potts_energy(seed: int = 2):
    """3-state Potts model on a free-boundary 3x3 grid: ``-J sum_<ij> [x_i = x_j] - sum_i h_i . x_i``."""
    g = torch.Generator().manual_seed(seed)
    h = 0.5 * torch.randn(9, 3, generator=g)
    A = torch.zeros(9, 9)
    for r in range(3):
        for c in range(3):
            if c < 2:
                A[r * 3 + c, r * 3 + c + 1] = A[r * 3 + c + 1, r * 3 + c] = 1.0
            if r < 2:
                A[r * 3 + c, (r + 1) * 3 + c] = A[(r + 1) * 3 + c, r * 3 + c] = 1.0

    def energy(x):
        x = x.reshape(x.shape[0], 9, 3)
        return -0.35 * (x * (A @ x)).sum((1, 2)) - (x * h).sum((1, 2))  # 0.35 = 0.7 / 2 (each pair twice)

    return from_fn(energy)


def run_final(energy, space, chains: int, steps: int, seed: int, **kwargs):
    g = torch.Generator().manual_seed(seed)
    return GibbsWithGradients(space=space, **kwargs).sample(energy, space.random(chains, generator=g), steps, generator=g)


# -- invariance -----------------------------------------------------------------


def test_gwg_leaves_10_spin_ising_invariant_and_a_wrong_target_is_rejected():
    energy, space = ising_energy(), Spins(10)
    x = run_final(energy, space, chains=20000, steps=150, seed=0)
    assert_matches_exact(x, energy, space)
    # the check has power: the same samples are far from the energy scaled by 1.3
    wrong = from_fn(lambda v: 1.3 * energy(v))
    p = exact_probs(wrong, space)
    assert tv_distance(empirical_probs(x, space), p) > tv_threshold(p, x.shape[0])


@pytest.mark.slow  # the same kernel and target are in test_discrete_invariance.py's table
def test_gwg_leaves_tiny_rbm_free_energy_on_binary_invariant():
    energy, space = rbm_free_energy(), Binary(10)
    x = run_final(energy, space, chains=20000, steps=150, seed=1)
    assert_matches_exact(x, energy, space)


@pytest.mark.slow  # the same kernel and target are in test_discrete_invariance.py's table
def test_gwg_leaves_3x3_potts_on_categorical_invariant():
    energy, space = potts_energy(), Categorical(9, 3)
    x = run_final(energy, space, chains=20000, steps=100, seed=2)
    assert_matches_exact(x, energy, space)


def test_gwg_with_other_proposal_temperature_is_still_exact():
    energy, space = ising_energy(seed=3), Spins(10)
    x = run_final(energy, space, chains=20000, steps=150, seed=3, temperature=1.0)
    assert_matches_exact(x, energy, space)


# -- the acceptance ratio ----------------------------------------------------------


class Recorder:
    """Linear energy ``E = c . x`` with analytic gradient; remembers the last batch it was evaluated on."""

    def __init__(self, c):
        self.c, self.last = c, None

    def __call__(self, x):
        return (x * self.c).flatten(1).sum(1)

    def energy_and_grad(self, x):
        self.last = x.clone()
        return self(x), self.c.expand_as(x).clone()


def _normaliser(x, space, c):
    """``log sum_j exp(-Delta_j(x) / 2)`` over single-site moves, with exact energy changes."""
    B = x.shape[0]
    if isinstance(space, Categorical):
        x3, c3 = x.reshape(B, space.num_sites, -1), c.reshape(space.num_sites, -1)
        d = c3 - (x3 * c3).sum(-1, keepdim=True)  # (B, N, K), zero at the current category
        d = d.masked_fill(x3 > 0.5, float("inf"))
    else:
        d = (c * (space.flip(x) - x)).flatten(1)
    return torch.logsumexp(-d.flatten(1) / 2, 1)


@pytest.mark.parametrize("space", [Spins(12), Binary(12), Categorical(5, 4)], ids=repr)
def test_gwg_acceptance_on_linear_energy_is_ratio_of_proposal_normalisers(space):
    """For E = c.x the Taylor estimate is exact and, with temperature 2, the MH ratio is Z(x)/Z(x')."""
    g = torch.Generator().manual_seed(4)
    c = torch.randn(space.event_shape, generator=g)
    energy = Recorder(c)
    sampler = GibbsWithGradients(space=space)
    x = space.random(500, generator=g)
    state = sampler.init(energy, x)
    new, info = sampler.step(energy, state, generator=g)
    y = energy.last  # the proposals
    assert ((y != x).flatten(1).sum(1) == (2 if isinstance(space, Categorical) else 1)).all()
    expected = torch.exp(_normaliser(x, space, c) - _normaliser(y, space, c)).clamp(max=1.0)
    torch.testing.assert_close(info.accept_prob, expected, rtol=1e-5, atol=1e-6)
    assert torch.equal(new.x, torch.where(info.accepted.reshape(-1, *[1] * len(space.event_shape)), y, x))


def test_gwg_cached_energy_and_grad_match_fresh_evaluation():
    energy, space = potts_energy(), Categorical(9, 3)
    g = torch.Generator().manual_seed(5)
    sampler = GibbsWithGradients(space=space)
    state = sampler.init(energy, space.random(64, generator=g))
    for state, _ in sampler.iterate(energy, state, 20, generator=g):  # noqa: B007, B020
        pass
    space.validate(state.x)
    e, grad = energy_and_grad(energy, state.x)
    torch.testing.assert_close(state.energy, e)
    torch.testing.assert_close(state.grad, grad)
    assert state.t == 20


def test_gwg_same_seed_same_chain():
    energy, space = ising_energy(), Spins(10)
    a = run_final(energy, space, chains=50, steps=30, seed=7)
    b = run_final(energy, space, chains=50, steps=30, seed=7)
    c = run_final(energy, space, chains=50, steps=30, seed=8)
    assert torch.equal(a, b) and not torch.equal(a, c)


def test_gwg_rejects_and_flags_nonfinite_proposals():
    """Flipping site 0 to +1 gives a NaN energy: never accepted, always flagged."""
    space = Spins(6)

    def fn(x):
        e = 0.1 * x.sum(-1)
        return torch.where(x[:, 0] > 0, torch.full_like(e, float("nan")), e)

    energy = from_fn(fn, grad_fn=lambda x: torch.full_like(x, 0.1))
    g = torch.Generator().manual_seed(9)
    x0 = space.random(200, generator=g)
    x0[:, 0] = -1.0
    sampler = GibbsWithGradients(space=space)
    state = sampler.init(energy, x0)
    flagged = torch.zeros(200, dtype=torch.bool)
    for state, info in sampler.iterate(energy, state, 50, generator=g):  # noqa: B007, B020
        assert not (info.accepted & info.nonfinite).any()
        flagged |= info.nonfinite
    assert (state.x[:, 0] == -1).all() and torch.isfinite(state.energy).all()
    assert flagged.any()


# -- validation --------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kwargs", "exc", "match"),
    [
        ({"temperature": 0.0}, ValueError, "temperature"),
        ({"temperature": -1.0}, ValueError, "temperature"),
        ({"space": "spins"}, TypeError, "space: expected an ebms.spaces.DiscreteSpace"),
    ],
)
def test_gwg_bad_arguments_messages_name_argument(kwargs, exc, match):
    with pytest.raises(exc, match=match):
        GibbsWithGradients(**kwargs)


def test_gwg_without_any_space_or_with_off_space_start_is_a_clear_error():
    energy = ising_energy()
    with pytest.raises(TypeError, match="space: expected an ebms.spaces.DiscreteSpace"):
        GibbsWithGradients().init(energy, Spins(10).random(3))
    with pytest.raises(ValueError, match=r"x0: expected values in \{-1, 1\}"):
        GibbsWithGradients(space=Spins(10)).init(energy, Binary(10).random(3, generator=torch.Generator().manual_seed(0)))
