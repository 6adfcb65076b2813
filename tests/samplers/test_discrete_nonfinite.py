"""Review fixes: NaN energies never move a chain silently, site arguments are checked, AIS edge cases."""

from __future__ import annotations

import pytest
import torch

from ebms.energy import from_fn
from ebms.estimators import GeometricPath, ais, linear_betas
from ebms.estimators.importance import BernoulliBase
from ebms.models import BernoulliRBM, IsingModel
from ebms.samplers import BlockGibbs, Gibbs, ParallelTempering
from ebms.spaces import Binary, Spins


def _nan_when_site0_up():
    # energy NaN whenever spin 0 is +1: a Gibbs update of site 0 sees a NaN conditional
    return from_fn(lambda x: torch.where(x[:, 0] > 0, torch.nan, -(x[:, :-1] * x[:, 1:]).sum(-1)))


@pytest.mark.parametrize(
    "sampler",
    [Gibbs("systematic", space=Spins(4)), Gibbs("random", space=Spins(4)),
     BlockGibbs([[0, 2], [1, 3]], space=Spins(4))],
    ids=["gibbs-systematic", "gibbs-random", "block-gibbs"],
)
def test_chains_that_meet_a_nan_energy_stay_put_and_are_flagged(sampler):
    energy = _nan_when_site0_up()
    x0 = -torch.ones(64, 4)
    state = sampler.init(energy, x0)
    g = torch.Generator().manual_seed(0)
    flagged = torch.zeros(64, dtype=torch.bool)
    for _ in range(5):
        new, info = sampler.step(energy, state, generator=g)
        moved = (new.x != state.x).any(1)
        assert not (moved & info.nonfinite).any(), "a flagged chain moved"
        assert torch.isfinite(new.energy).all()
        assert torch.equal(info.accepted, ~info.nonfinite)
        flagged |= info.nonfinite
        state = new
    assert flagged.any(), "site 0's NaN conditional must be reported"


def test_rbm_conditional_logits_refuse_a_zero_dim_site_tensor():
    rbm = BernoulliRBM(5, 2, generator=torch.Generator().manual_seed(0))
    x = Binary(5).random(3, generator=torch.Generator().manual_seed(1))
    with pytest.raises(ValueError, match=r"site: expected an int or a LongTensor \(3,\); got torch.int64 \(\)"):
        rbm.conditional_logits(x, torch.tensor(2))
    with pytest.raises(ValueError, match=r"site: expected an int in \[0, 4\]"):
        rbm.conditional_logits(x, 5)


def test_rbm_ais_runs_under_inference_mode():
    rbm = BernoulliRBM(6, 3, generator=torch.Generator().manual_seed(0))
    with torch.inference_mode():
        r = ais(rbm.ais_path(torch.zeros(6)), 16, linear_betas(5), generator=torch.Generator().manual_seed(0))
    assert torch.isfinite(torch.tensor(r.estimate.estimate))


def test_state_index_refuses_spaces_too_large_for_int64():
    with pytest.raises(ValueError, match="do not fit a 64-bit state index"):
        Binary(70).state_index(torch.zeros(2, 70))
    assert Binary(62).state_index(torch.ones(1, 62)).item() == (1 << 62) - 1


def test_geometric_path_accepts_a_tempering_kernel():
    model = IsingModel.lattice(2, 3, coupling=0.3, boundary="free")
    path = GeometricPath(model, BernoulliBase(torch.zeros(2, 3), space=model.space),
                         ParallelTempering(Gibbs(), betas=[1.0, 0.5]))
    r = ais(path, 8, linear_betas(10), generator=torch.Generator().manual_seed(0))
    assert r.samples.shape == (8, 2, 3)


@pytest.mark.parametrize("blocks", [[[0, 1], [1, 2, 3]], [[0, 1], [2]]], ids=["overlap", "missing"])
def test_block_gibbs_refuses_blocks_that_do_not_partition_the_sites_at_init(blocks):
    energy = from_fn(lambda x: -(x[:, :-1] * x[:, 1:]).sum(-1))
    with pytest.raises(ValueError, match="blocks: expected a partition of the 4 sites"):
        BlockGibbs(blocks, space=Spins(4)).init(energy, -torch.ones(3, 4))


@pytest.mark.parametrize("K", [2, 4])
def test_sample_categorical_matches_softmax_and_never_draws_a_zero_probability_category(K):
    from ebms.samplers._discrete import sample_categorical

    p = torch.tensor([0.2, 0.8]) if K == 2 else torch.tensor([0.2, 0.0, 0.3, 0.5])
    n = 200_000
    draws = sample_categorical(p.log().expand(n, K), torch.Generator().manual_seed(0))
    freq = torch.bincount(draws, minlength=K).double() / n
    se = (p.double() * (1 - p.double()) / n).sqrt()
    assert ((freq - p.double()).abs() <= 5 * se + 1e-12).all(), freq  # z = 5 per category
    assert freq[p == 0].sum() == 0
