"""Metropolis–Hastings over the positions of token sequences: exact distribution by enumeration
(uniform and given proposals over tokens, one and two positions per move), fixed lengths and
padding, edges, validation.

Invariance tests start ``S = 20000`` chains with lengths from the exact length marginal and compare
the final states with the enumerated distribution (``_token_targets``: TV bound from the sample size,
``z = 4.3``, failure probability < 1e-4 for exact draws). On this target the TV stops falling after
about 60 steps (one position, uniform proposal) and 150 (two positions, given proposal); the tests
run 2-3x that.
"""

from __future__ import annotations

import pytest
import torch
from _token_targets import (
    MAX_LENGTH,
    TokenEnergy,
    V,
    assert_matches_exact,
    exact_probs,
    length_marginal,
    starts,
    token_space,
)

from ebms.energy import from_fn
from ebms.samplers import MetropolisHastings
from ebms.sequences import Sequences
from ebms.spaces import Binary, CategoricalIndices, TokenSequences

S = 20000
Q = torch.tensor([0.5, 0.3, 0.2])


@pytest.mark.parametrize(
    ("make", "steps"),
    [
        (lambda space: MetropolisHastings(space=space), 150),
        (lambda space: MetropolisHastings(category_probs=Q, space=space), 150),
        (lambda space: MetropolisHastings(2, category_probs=Q, space=space), 320),
    ],
    ids=["one-position-uniform", "one-position-given-q", "two-positions-given-q"],
)
def test_token_metropolis_matches_enumeration(make, steps):
    space, energy = token_space(), TokenEnergy()
    p = exact_probs(energy, space)
    g = torch.Generator().manual_seed(10)
    x = make(space).sample(energy, starts(space, length_marginal(p, space), S, g), steps, generator=g)
    assert isinstance(x, Sequences)
    assert_matches_exact(x, p, space)


def test_given_proposal_ratio_is_the_proposal_correction():
    """One step from a known state: log alpha = E(x) - E(x') + log q(x_t) - log q(x'_t) at the changed position."""
    space, energy = token_space(), TokenEnergy()
    sampler = MetropolisHastings(category_probs=Q, space=space)
    x = Sequences(torch.tensor([[0, 1, 2, 0]] * 4000), torch.full((4000,), 3))
    state = sampler.init(energy, x)
    new, info = sampler.step(energy, state, generator=torch.Generator().manual_seed(11))
    x_prop = sampler.propose(space, x, torch.Generator().manual_seed(11))
    changed = (x_prop.tokens != x.tokens)
    assert bool((changed.sum(1) <= 1).all()) and not bool(changed[:, 3:].any())  # inside the length only
    old_tok = (x.tokens * changed).sum(1)
    new_tok = (x_prop.tokens * changed).sum(1)
    log_q = (Q / Q.sum()).log()
    moved = changed.any(1)
    expected = energy(x) - energy(x_prop) + torch.where(moved, log_q[old_tok] - log_q[new_tok], torch.zeros(()))
    torch.testing.assert_close(info.accept_prob, torch.exp(expected.clamp(max=0)))
    assert torch.equal(new.x.lengths, x.lengths)


def test_lengths_and_padding_are_left_unchanged():
    space, energy = token_space(), TokenEnergy()
    g = torch.Generator().manual_seed(12)
    x0 = space.random(300, generator=g)
    padded = Sequences(x0.tokens.masked_fill(~x0.mask(), 1), x0.lengths)
    for n_flips in (1, 3):
        x = MetropolisHastings(n_flips, space=space).sample(energy, padded, 20, generator=g)
        assert torch.equal(x.lengths, x0.lengths) and bool((x.tokens[~x.mask()] == 1).all())
        assert not torch.equal(x.tokens, padded.tokens)


def test_two_position_moves_change_min_of_two_and_the_length():
    space = token_space()
    x = space.random(500, generator=torch.Generator().manual_seed(13))
    x_prop = MetropolisHastings(2, space=space).propose(space, x, torch.Generator().manual_seed(14))
    changed = (x_prop.tokens != x.tokens).sum(1)  # the default proposal always changes the token
    assert torch.equal(changed, x.lengths.clamp(max=2))


def test_empty_sequences_and_empty_batches_step():
    space, energy = token_space(min_length=0), TokenEnergy()
    x0 = Sequences(torch.tensor([[0, 0], [1, 2]]), torch.tensor([0, 2]))
    for n_flips in (1, 2):
        sampler = MetropolisHastings(n_flips, space=space)
        state, info = sampler.step(energy, sampler.init(energy, x0), generator=torch.Generator().manual_seed(15))
        assert state.x.tolist()[0] == [] and bool(info.accepted[0])  # an empty chain proposes itself
        none = Sequences(torch.zeros(3, 0, dtype=torch.long), torch.zeros(3, dtype=torch.long))
        state, info = sampler.step(energy, sampler.init(energy, none))
        assert state.x.tokens.shape == (3, 0) and bool(info.accepted.all())
        state, info = sampler.step(energy, sampler.init(energy, space.random(0)))
        assert state.energy.shape == (0,) and info.accept_prob.shape == (0,)


def test_one_token_vocabulary_proposes_the_same_sequence():
    space = TokenSequences(1, 3)
    energy = from_fn(lambda s: s.lengths.float())
    x = MetropolisHastings(space=space).sample(energy, space.random(4, generator=torch.Generator().manual_seed(0)), 3)
    assert bool((x.tokens == 0).all())


def test_cached_energy_equals_fresh_evaluation():
    space, energy = token_space(), TokenEnergy()
    g = torch.Generator().manual_seed(16)
    sampler = MetropolisHastings(2, category_probs=Q, space=space)
    state = sampler.init(energy, space.random(64, generator=g))
    for _ in range(10):
        state, _ = sampler.step(energy, state, generator=g)
    torch.testing.assert_close(state.energy, energy(state.x))


def test_index_form_metropolis_matches_one_hot_chain():
    """CategoricalIndices and one-hot Categorical draw the same proposals and decisions."""
    from ebms.spaces import Categorical

    idx_space, oh_space = CategoricalIndices(5, 3), Categorical(5, 3)
    w = torch.randn(5, 3, generator=torch.Generator().manual_seed(17))
    e_idx = from_fn(lambda i: w[torch.arange(5), i].sum(-1))
    e_oh = from_fn(lambda o: (o * w).sum((-1, -2)))
    x0 = idx_space.random(40, generator=torch.Generator().manual_seed(18))
    for kw in ({}, {"category_probs": Q}, {"n_flips": 2}):
        a = MetropolisHastings(space=idx_space, **kw).sample(e_idx, x0, 25, generator=torch.Generator().manual_seed(19))
        b = MetropolisHastings(space=oh_space, **kw).sample(
            e_oh, oh_space.from_indices(x0), 25, generator=torch.Generator().manual_seed(19)
        )
        assert a.dtype == torch.long and torch.equal(a, oh_space.indices(b))


# ---------------------------------------------------------------- validation


@pytest.mark.parametrize(
    ("probs", "error", "message"),
    [
        (torch.tensor([1, 2, 3]), TypeError, r"category_probs: expected a floating-point tensor; got dtype torch.int64"),
        (torch.ones(3, 1), ValueError, r"category_probs: expected a 1-D tensor \(K,\) of probabilities; got shape \(3, 1\)"),
        (torch.tensor([0.5, float("nan"), 0.5]), ValueError, r"category_probs: expected a finite tensor; got 1 NaN"),
        (torch.tensor([0.5, 0.0, 0.5]), ValueError, r"category_probs: expected positive probabilities .*; got min 0"),
        ([0.5, 0.5], TypeError, r"category_probs: expected a torch.Tensor; got list"),
    ],
)
def test_bad_category_probs_are_refused_by_name(probs, error, message):
    with pytest.raises(error, match=message):
        MetropolisHastings(category_probs=probs)


def test_category_probs_must_fit_the_space():
    energy = TokenEnergy()
    with pytest.raises(ValueError, match=r"category_probs: expected 3 probabilities \(one per category of TokenSequences"):
        MetropolisHastings(category_probs=torch.ones(4), space=token_space()).init(energy, token_space().random(2))
    with pytest.raises(ValueError, match=r"category_probs: Binary sites flip; a proposal over categories needs"):
        MetropolisHastings(category_probs=torch.ones(2), space=Binary(3)).init(
            from_fn(lambda x: x.sum(-1)), torch.zeros(2, 3)
        )


def test_n_flips_beyond_max_length_is_refused():
    with pytest.raises(ValueError, match=rf"n_flips: expected at most max_length={MAX_LENGTH}; got 5"):
        MetropolisHastings(5, space=token_space()).init(TokenEnergy(), token_space().random(2))


def test_vocabulary_of_the_example_target():
    assert token_space().num_states == sum(V**n for n in range(1, MAX_LENGTH + 1)) == 120
