"""Data drawn from a known discrete model by long-run block Gibbs (``ebms.samplers.model_samples``)."""

from __future__ import annotations

import pytest
import torch
from _discrete_checks import assert_matches_exact

from ebms.models import BernoulliRBM, IsingModel
from ebms.samplers import model_samples


def test_samples_follow_the_model_exactly_on_an_enumerable_lattice():
    model = IsingModel.lattice(3, 4, coupling=0.35, field=0.1, boundary="free")
    draws = model_samples(model, 20000, sweeps=50, seed=4)
    assert draws.x.shape == (20000, 3, 4)
    assert_matches_exact(draws.x.reshape(20000, 3, 4), model, model.space)


def test_the_recorded_seed_regenerates_the_same_data_and_chunking_is_recorded():
    model = BernoulliRBM(6, 2, generator=torch.Generator().manual_seed(0))
    a = model_samples(model, 300, sweeps=5, seed=11, chunk=128)
    b = model_samples(model, 300, **{k: a.settings[k] for k in ("sweeps", "seed", "chunk")})
    assert torch.equal(a.x, b.x)
    assert a.settings == {"n": 300, "sweeps": 5, "seed": 11, "chunk": 128, "sampler": "BlockGibbs",
                          "space": "Binary(event_shape=(6,))"}
    assert not torch.equal(a.x, model_samples(model, 300, sweeps=5, seed=12, chunk=128).x)


def test_bad_arguments_name_themselves():
    model = IsingModel.lattice(2, 2)
    with pytest.raises(ValueError, match="sweeps"):
        model_samples(model, 10, sweeps=0)
    with pytest.raises(TypeError, match="space: expected an ebms.spaces.DiscreteSpace"):
        model_samples(lambda x: x.sum(-1), 10)
