"""Gibbs over the positions of token sequences: exact distribution by enumeration, one batched energy
call per position, fixed lengths and padding, edges (empty batch, length 0 and 1), validation.

Invariance tests start ``S = 20000`` chains with lengths from the exact length marginal and compare the
final states with the enumerated distribution (``_token_targets``: TV bound from the sample size,
``z = 4.3``, failure probability < 1e-4 for exact draws). The TV stops falling after about 4 sweeps
(systematic scan) and 10 (random scan) on this target; the tests run 3x that.
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
    tv_and_bound,
)

from ebms.energy import from_fn
from ebms.samplers import MALA, ULA, BlockGibbs, Gibbs, GibbsWithGradients
from ebms.sequences import Sequences
from ebms.spaces import CategoricalIndices, Spins, TokenSequences

SWEEPS = {"systematic": 12, "random": 30}
S = 20000


@pytest.mark.parametrize("scan", ["systematic", "random"])
def test_token_gibbs_matches_enumeration(scan):
    space, energy = token_space(), TokenEnergy()
    p = exact_probs(energy, space)
    g = torch.Generator().manual_seed(0)
    x = Gibbs(scan, space=space).sample(energy, starts(space, length_marginal(p, space), S, g), SWEEPS[scan], generator=g)
    assert isinstance(x, Sequences) and x.tokens.dtype == torch.long
    assert_matches_exact(x, p, space)


def test_token_gibbs_check_rejects_wrong_target():
    """Chains targeting 1.5 E fail the check against E (exact TV between the two is 0.28 > bound 0.041)."""
    space, energy = token_space(), TokenEnergy()
    p = exact_probs(energy, space)
    wrong = TokenEnergy(scale=1.5)
    g = torch.Generator().manual_seed(1)
    x0 = starts(space, length_marginal(exact_probs(wrong, space), space), S, g)
    x = Gibbs(space=space).sample(wrong, x0, SWEEPS["systematic"], generator=g)
    tv, bound = tv_and_bound(x, p, space)
    assert tv > bound


def test_length_one_chains_are_exact_after_one_sweep():
    """One position: a sweep is one exact draw from p(x | L = 1), whatever the start."""
    space, energy = TokenSequences(V, 1), TokenEnergy()
    p = exact_probs(energy, space)
    g = torch.Generator().manual_seed(2)
    x = Gibbs(space=space).sample(energy, Sequences(torch.zeros(S, 1, dtype=torch.long)), 1, generator=g)
    assert_matches_exact(x, p, space)


def test_empty_sequences_stay_empty_and_the_rest_match_enumeration():
    """min_length = 0: empty chains have no position to update (their energy is E of the empty
    sequence); the others are sampled from their length's conditional, so the whole batch matches p."""
    space, energy = token_space(min_length=0), TokenEnergy()
    p = exact_probs(energy, space)
    assert space.num_states == 121 and float(p[0]) > 0  # the empty sequence comes first
    g = torch.Generator().manual_seed(3)
    x0 = starts(space, length_marginal(p, space), S, g)
    state = Gibbs(space=space).init(energy, x0)
    for _ in range(SWEEPS["systematic"]):
        state, info = Gibbs(space=space).step(energy, state, generator=g)
    assert torch.equal(state.x.lengths, x0.lengths) and bool(info.accepted.all())
    assert_matches_exact(state.x, p, space)


def test_all_empty_batch_of_width_zero_steps():
    space, energy = token_space(min_length=0), TokenEnergy()
    x0 = Sequences(torch.zeros(4, 0, dtype=torch.long), torch.zeros(4, dtype=torch.long))
    for scan in ("systematic", "random"):
        state, info = Gibbs(scan, space=space).step(energy, Gibbs(scan, space=space).init(energy, x0))
        assert state.x.tokens.shape == (4, 0) and torch.equal(state.energy, energy(x0))
        assert bool(info.accepted.all())


def test_empty_batch_steps_and_keeps_shapes():
    space, energy = token_space(), TokenEnergy()
    x0 = space.random(0)
    sampler = Gibbs(space=space)
    state, info = sampler.step(energy, sampler.init(energy, x0), generator=torch.Generator().manual_seed(0))
    assert state.x.tokens.shape == (0, MAX_LENGTH) and state.energy.shape == (0,) and info.accept_prob.shape == (0,)


@pytest.mark.parametrize("scan", ["systematic", "random"])
def test_each_update_is_one_energy_call_of_b_times_v_rows(scan):
    space, energy = token_space(), TokenEnergy()
    x0 = space.random(7, generator=torch.Generator().manual_seed(4))
    state = Gibbs(scan, space=space, sweeps=2).init(energy, x0)
    energy.calls.clear()
    Gibbs(scan, space=space, sweeps=2).step(energy, state, generator=torch.Generator().manual_seed(5))
    # 2 sweeps x T = 4 updates of B*V = 21 rows, then the new state's energy (B = 7 rows)
    assert energy.calls == [7 * V] * (2 * MAX_LENGTH) + [7]


@pytest.mark.parametrize("scan", ["systematic", "random"])
def test_lengths_and_padding_are_left_unchanged(scan):
    space, energy = token_space(), TokenEnergy()
    g = torch.Generator().manual_seed(6)
    x0 = space.random(200, generator=g)
    padded = Sequences(x0.tokens.masked_fill(~x0.mask(), 2), x0.lengths)  # padding holds token 2
    x = Gibbs(scan, space=space, sweeps=3).sample(energy, padded, 2, generator=g)
    assert torch.equal(x.lengths, x0.lengths)
    assert bool((x.tokens[~x.mask()] == 2).all())
    assert not torch.equal(x.tokens, padded.tokens)  # the real tokens did move


def test_systematic_token_gibbs_at_full_length_is_index_gibbs():
    """All lengths T: the token path draws exactly what the index-form path draws (shared update loop)."""
    energy = TokenEnergy()
    x0 = CategoricalIndices(MAX_LENGTH, V).random(50, generator=torch.Generator().manual_seed(7))
    on_tensors = from_fn(lambda idx: energy(Sequences(idx, validate=False)))
    a = Gibbs(space=CategoricalIndices(MAX_LENGTH, V)).sample(on_tensors, x0, 3, generator=torch.Generator().manual_seed(8))
    b = Gibbs(space=token_space()).sample(energy, Sequences(x0), 3, generator=torch.Generator().manual_seed(8))
    assert a.dtype == torch.long and torch.equal(a, b.tokens)


def test_cached_energy_equals_fresh_evaluation_and_run_returns_sequences():
    space, energy = token_space(), TokenEnergy()
    g = torch.Generator().manual_seed(9)
    res = Gibbs(space=space).run(energy, space.random(5, generator=g), 6, generator=g, burn_in=2, thin=2)
    assert isinstance(res.samples, Sequences) and res.samples.batch_size == 2 * 5 and res.energies.shape == (2, 5)
    torch.testing.assert_close(res.energies.reshape(-1), energy(res.samples))
    torch.testing.assert_close(res.state.energy, energy(res.state.x))
    assert res.state.step_size.dtype == torch.float32  # the energy's dtype: token states are integers


def test_space_comes_from_energy_space():
    space, energy = token_space(), TokenEnergy()
    energy.space = space
    x = Gibbs().sample(energy, space.random(3, generator=torch.Generator().manual_seed(0)), 1)
    assert isinstance(x, Sequences)


def test_token_state_memory_is_that_of_its_integers():
    """A (64, 50) state over V = 10^4 costs its int64 tokens and lengths; no one-hot anywhere."""
    V_big, B, T = 10_000, 64, 50
    space = TokenSequences(V_big, T)
    table = torch.randn(V_big, generator=torch.Generator().manual_seed(0))
    unigram = lambda s: (table[s.tokens] * s.mask()).sum(-1)  # noqa: E731
    from ebms.samplers import MetropolisHastings

    x0 = space.random(B, generator=torch.Generator().manual_seed(1), lengths=T)
    sampler = MetropolisHastings(space=space)
    state = sampler.init(unigram, x0)
    for _ in range(5):
        state, _ = sampler.step(unigram, state, generator=torch.Generator().manual_seed(2))
    fields = [state.x.tokens, state.x.lengths, state.energy, state.step_size]
    assert state.grad is None and state.x.tokens.dtype == torch.int64
    assert state.x.nbytes == B * T * 8 + B * 8 == 26_112  # one-hot float32 would be B*T*V*4 = 128 MB
    assert sum(t.element_size() * t.numel() for t in fields) == 26_112 + B * 4 + 4
    # a Gibbs update builds its B*V candidates per position but keeps the integer state
    small = Gibbs("random", updates=1, space=space)
    s2, _ = small.step(unigram, small.init(unigram, x0[:2]), generator=torch.Generator().manual_seed(3))
    assert s2.x.tokens.dtype == torch.int64 and s2.x.nbytes == 2 * T * 8 + 2 * 8


# ---------------------------------------------------------------- validation


def test_sequences_need_a_token_space_named_in_the_message():
    energy, x0 = TokenEnergy(), token_space().random(2)
    with pytest.raises(TypeError, match=r"space: Sequences states need an ebms.spaces.TokenSequences .*; got NoneType"):
        Gibbs().init(energy, x0)
    with pytest.raises(TypeError, match=r"space: Sequences states need an ebms.spaces.TokenSequences .*; got Spins"):
        Gibbs(space=Spins(4)).init(energy, x0)


def test_a_token_space_refuses_tensor_states():
    with pytest.raises(TypeError, match=r"x0: expected Sequences states for the space TokenSequences\(vocab_size=3.*; got a Tensor"):
        Gibbs(space=token_space()).init(TokenEnergy(), torch.zeros(2, 4, dtype=torch.long))


def test_token_states_outside_the_space_are_refused_by_name():
    space = token_space()
    bad = Sequences(torch.tensor([[0, 1, 5, 0]]), torch.tensor([3]))
    with pytest.raises(ValueError, match=r"x0.tokens: expected token ids in \[0, 2\] .*got 5 at sequence 0, position 2"):
        Gibbs(space=space).init(TokenEnergy(), bad)
    with pytest.raises(ValueError, match=r"x0.lengths: expected lengths in \[1, 4\]; got min 0, max 0"):
        Gibbs(space=space).init(TokenEnergy(), Sequences(torch.zeros(1, 4, dtype=torch.long), torch.tensor([0])))


def test_kernels_without_token_support_refuse_sequences_by_name():
    energy, x0 = TokenEnergy(), token_space().random(2)
    # (MetropolisIndependence takes sentences with a length-conditional proposal: tests/samplers/test_token_independence.py)
    sampler = BlockGibbs(blocks=[torch.arange(4)], space=Spins(4))
    with pytest.raises(TypeError, match=r"x0: BlockGibbs works on tensor states \(B, \*event\); got Sequences"):
        sampler.init(energy, x0)
    with pytest.raises(TypeError, match=r"space: BlockGibbs works on fixed-shape tensor states; got TokenSequences"):
        BlockGibbs(space=token_space())


@pytest.mark.parametrize("make", [lambda: ULA(0.1), lambda: MALA(0.1), lambda: GibbsWithGradients(space=Spins(4))])
def test_gradient_kernels_require_floating_states_in_one_line(make):
    sampler = make()
    name = type(sampler).__name__
    e = from_fn(lambda x: (x.float() ** 2).sum(-1))
    with pytest.raises(TypeError, match=rf"x0: expected a floating-point tensor; got dtype torch.int64 \({name} follows"):
        sampler.init(e, torch.ones(2, 4, dtype=torch.long))
    with pytest.raises(TypeError, match=rf"x0: {name} works on tensor states"):
        sampler.init(e, token_space().random(2))


def test_bool_states_are_refused():
    with pytest.raises(TypeError, match=r"x0: expected a floating-point or integer tensor; got dtype torch.bool"):
        Gibbs(space=CategoricalIndices(4, 3)).init(from_fn(lambda x: x.sum(-1).float()), torch.zeros(2, 4, dtype=torch.bool))
