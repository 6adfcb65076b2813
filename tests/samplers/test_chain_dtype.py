"""Chains and energies share one dtype: every kernel refuses a float ``x0`` in another precision
than the energy's parameters with one ``TypeError`` naming ``x0`` and both dtypes, before the
energy runs (a float64 chain on a float32 model used to end in a matmul traceback)."""

from __future__ import annotations

import pytest
import torch

from ebms.distributions import IndependentCategorical
from ebms.energy import from_fn
from ebms.models.ising import IsingModel
from ebms.nets import MLPEnergy
from ebms.samplers import (
    HMC,
    MALA,
    SGLD,
    ULA,
    BlockGibbs,
    Gibbs,
    GibbsWithGradients,
    MetropolisHastings,
    MetropolisIndependence,
    ParallelTempering,
    StepSizeAdaptation,
)
from ebms.spaces import CategoricalIndices, Spins

CONTINUOUS = {
    "ULA": lambda: ULA(0.01),
    "SGLD": lambda: SGLD(0.01),
    "MALA": lambda: MALA(0.1),
    "HMC": lambda: HMC(0.1, n_leapfrog=2),
    "StepSizeAdaptation(MALA)": lambda: StepSizeAdaptation(MALA(0.1)),
    "ParallelTempering(ULA)": lambda: ParallelTempering(ULA(0.01), betas=[1.0, 0.5]),
}


def _ising() -> IsingModel:
    g = torch.Generator().manual_seed(0)
    a = torch.randn(6, 6, generator=g) * 0.3
    return IsingModel((a + a.T) * (1 - torch.eye(6)), field=0.1)


DISCRETE = {
    "Gibbs": lambda: Gibbs(),
    "BlockGibbs": lambda: BlockGibbs(blocks=[torch.arange(6)]),
    "MetropolisHastings": lambda: MetropolisHastings(),
    "MetropolisIndependence": lambda: MetropolisIndependence(IndependentCategorical(Spins(6))),
    "GibbsWithGradients": lambda: GibbsWithGradients(),
    "ParallelTempering(Gibbs)": lambda: ParallelTempering(Gibbs(), betas=[1.0, 0.5]),
}


@pytest.mark.parametrize("name", list(CONTINUOUS))
@pytest.mark.parametrize(("model_dtype", "chain_dtype"), [(torch.float32, torch.float64), (torch.float64, torch.float32)])
def test_continuous_kernels_refuse_chains_in_another_dtype_than_the_model(name, model_dtype, chain_dtype):
    model = MLPEnergy(2, (8,)).to(model_dtype)
    x0 = torch.zeros(3, 2, dtype=chain_dtype)
    msg = rf"x0: expected dtype {model_dtype}, the dtype of the energy's parameters \(MLPEnergy\); got {chain_dtype}"
    with pytest.raises(TypeError, match=msg):
        CONTINUOUS[name]().sample(model, x0, steps=1, generator=torch.Generator().manual_seed(0))
    # the same chains in the model's dtype run
    out = CONTINUOUS[name]().sample(model, x0.to(model_dtype), steps=1, generator=torch.Generator().manual_seed(0))
    assert out.dtype == model_dtype and out.shape == (3, 2)


@pytest.mark.parametrize("name", list(DISCRETE))
def test_discrete_kernels_refuse_float_states_in_another_dtype_than_the_model(name):
    model = _ising()  # float32 couplings
    x0 = Spins(6).random(4, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    with pytest.raises(TypeError, match=r"x0: expected dtype torch.float32, .*\(IsingModel\); got torch.float64"):
        DISCRETE[name]().sample(model, x0, steps=1, generator=torch.Generator().manual_seed(0))
    out = DISCRETE[name]().sample(model, x0.float(), steps=2, generator=torch.Generator().manual_seed(0))
    assert out.dtype == torch.float32 and set(out.unique().tolist()) <= {-1.0, 1.0}


def test_integer_states_and_parameter_free_energies_are_not_checked():
    from ebms.samplers._base import energy_dtype

    # category indices are integers whatever the model computes in
    space = CategoricalIndices(4, 3)
    table = torch.nn.Embedding(3, 1).double()
    energy = from_fn(lambda x: table(x).squeeze(-1).sum(-1))
    x0 = space.random(5, generator=torch.Generator().manual_seed(0))
    assert Gibbs(space=space).sample(energy, x0, steps=1, generator=torch.Generator().manual_seed(0)).dtype == torch.long
    # a plain function has no parameters: its dtype is whatever x is
    quad = from_fn(lambda x: 0.5 * (x**2).sum(-1))
    assert energy_dtype(quad) is None
    assert ULA(0.01).sample(quad, torch.zeros(2, 3, dtype=torch.float64), steps=1).dtype == torch.float64


def test_energy_dtype_sees_through_from_fn_and_bound_methods():
    from ebms.samplers._base import energy_dtype

    net = MLPEnergy(2, (4,)).double()
    assert energy_dtype(net) == torch.float64
    assert energy_dtype(from_fn(net)) == torch.float64  # a module wrapped by from_fn
    assert energy_dtype(net.forward) == torch.float64  # a bound method of a module
    assert energy_dtype(from_fn(net.forward)) == torch.float64
    with pytest.raises(TypeError, match=r"x0: expected dtype torch.float64, .*\(MLPEnergy\); got torch.float32"):
        ULA(0.01).init(from_fn(net.forward), torch.zeros(2, 2))


def test_model_samples_draws_chains_in_the_models_dtype():
    from ebms.samplers import model_samples

    model = _ising().double()
    out = model_samples(model, 5, sweeps=2, seed=0)
    assert out.x.dtype == torch.float64 and out.x.shape == (5, 6)
    assert set(out.x.unique().tolist()) <= {-1.0, 1.0}
