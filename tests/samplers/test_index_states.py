"""Integer (index-form) states: discrete kernels on :class:`CategoricalIndices` draw exactly the chains
they draw on the one-hot :class:`Categorical` form of the same energy (so the one-hot invariance tests
in ``test_gibbs.py``/``test_metropolis.py`` carry over), and one index-form chain matches enumeration."""

from __future__ import annotations

import pytest
import torch
from _discrete_checks import assert_matches_exact

from ebms.energy import from_fn
from ebms.samplers import BlockGibbs, Gibbs
from ebms.spaces import Categorical, CategoricalIndices

SITES, K = 6, 3


def energies():
    """A chain of 6 three-state sites with random pair couplings, on indices and on one-hot rows."""
    g = torch.Generator().manual_seed(20)
    field, pair = torch.randn(SITES, K, generator=g), torch.randn(SITES - 1, K, K, generator=g)
    pos = torch.arange(SITES - 1)

    def on_indices(i):
        return field[torch.arange(SITES), i].sum(-1) + pair[pos, i[:, :-1], i[:, 1:]].sum(-1)

    return from_fn(on_indices), from_fn(lambda o: on_indices(o.argmax(-1)))


@pytest.mark.parametrize("scan", ["systematic", "random"])
def test_index_gibbs_draws_the_one_hot_chain(scan):
    e_idx, e_oh = energies()
    x0 = CategoricalIndices(SITES, K).random(30, generator=torch.Generator().manual_seed(21))
    a = Gibbs(scan, space=CategoricalIndices(SITES, K)).sample(e_idx, x0, 4, generator=torch.Generator().manual_seed(22))
    oh = Categorical(SITES, K)
    b = Gibbs(scan, space=oh).sample(e_oh, oh.from_indices(x0), 4, generator=torch.Generator().manual_seed(22))
    assert a.dtype == torch.long and torch.equal(a, oh.indices(b))


def test_index_block_gibbs_draws_the_one_hot_chain():
    e_idx, e_oh = energies()
    blocks = [torch.arange(0, SITES, 2), torch.arange(1, SITES, 2)]  # a chain is two-colourable
    x0 = CategoricalIndices(SITES, K).random(30, generator=torch.Generator().manual_seed(23))
    a = BlockGibbs(blocks, space=CategoricalIndices(SITES, K)).sample(e_idx, x0, 4, generator=torch.Generator().manual_seed(24))
    oh = Categorical(SITES, K)
    b = BlockGibbs(blocks, space=oh).sample(e_oh, oh.from_indices(x0), 4, generator=torch.Generator().manual_seed(24))
    assert a.dtype == torch.long and torch.equal(a, oh.indices(b))


def test_index_gibbs_matches_enumeration():
    """729 states, 20000 chains, 10 sweeps (TV stops falling after about 3); bound as in _discrete_checks."""
    e_idx, _ = energies()
    space = CategoricalIndices(SITES, K)
    g = torch.Generator().manual_seed(25)
    x = Gibbs(space=space).sample(e_idx, space.random(20000, generator=g), 10, generator=g)
    assert_matches_exact(x, e_idx, space)


def test_integer_states_keep_a_float_step_size_and_energy():
    e_idx, _ = energies()
    state = Gibbs(space=CategoricalIndices(SITES, K)).init(e_idx, torch.zeros(2, SITES, dtype=torch.long))
    assert state.x.dtype == torch.long and state.energy.dtype == torch.float32 and state.step_size.dtype == torch.float32


def test_float_states_are_refused_by_the_index_space():
    e_idx, _ = energies()
    with pytest.raises(TypeError, match=r"x0: expected an integer tensor of category indices; got dtype torch.float32"):
        Gibbs(space=CategoricalIndices(SITES, K)).init(e_idx, torch.zeros(2, SITES))
