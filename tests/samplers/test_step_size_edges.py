"""Step sizes that cannot move a chain, and energies that give no gradient, are reported, never silent.

* A step size (or SGLD noise scale) that overflows to ``inf`` or underflows to
  ``0`` in the chains' dtype is a ``ValueError`` at ``init``, naming it.
* A step in which every chain's proposal is non-finite (``step_size * grad``
  overflowed, or the energy is NaN everywhere proposed) makes ``iterate``
  (hence ``sample``/``run``) warn once per call with the count of such steps;
  the chains keep their last finite state, exactly.
* An energy returning a detached or integer tensor is an error naming the
  energy (it would turn Langevin into a random walk).
"""

from __future__ import annotations

import math
import warnings

import pytest
import torch

from ebms.energy import from_fn
from ebms.samplers import (
    HMC,
    MALA,
    SGLD,
    ULA,
    GibbsWithGradients,
    MetropolisHastings,
    ParallelTempering,
    StepSizeAdaptation,
)
from ebms.spaces import Spins

GAUSS = from_fn(lambda x: 0.5 * (x * x).sum(-1))
KERNELS = [
    lambda eps: ULA(eps),
    lambda eps: SGLD(eps, noise_scale=0.1),
    lambda eps: MALA(eps),
    lambda eps: HMC(eps, n_leapfrog=2),
    lambda eps: StepSizeAdaptation(MALA(eps)),
    lambda eps: ParallelTempering(ULA(eps), n_replicas=2),
]
IDS = ["ULA", "SGLD", "MALA", "HMC", "adaptive", "PT"]


def _x0(dtype=torch.float32, n=8):
    return torch.randn(n, 2, generator=torch.Generator().manual_seed(0), dtype=dtype)


@pytest.mark.parametrize("make", KERNELS, ids=IDS)
def test_step_size_that_overflows_the_chain_dtype_is_an_error_at_init(make):
    with pytest.raises(ValueError, match=r"step_size: 1e\+308 overflows to inf in torch.float32 \(largest finite value 3\.403e\+38\); use a smaller step_size"):
        make(1e308).init(GAUSS, _x0())
    with pytest.raises(ValueError, match=r"step_size: 1e-50 underflows to 0 in torch.float32 .*; use a larger step_size"):
        make(1e-50).init(GAUSS, _x0())
    with pytest.raises(ValueError, match=r"step_size: 1e-320 underflows to 0 in torch.float16"):
        make(1e-320).init(GAUSS, _x0(torch.float16))


def test_sgld_noise_scale_that_overflows_is_an_error_at_init():
    with pytest.raises(ValueError, match=r"noise_scale: 1e\+300 overflows to inf in torch.float32"):
        SGLD(0.1, noise_scale=1e300).init(GAUSS, _x0())
    SGLD(0.1, noise_scale=1e300).init(GAUSS, _x0(torch.float64))  # representable in float64: fine


@pytest.mark.parametrize("make", KERNELS, ids=IDS)
def test_steps_where_every_proposal_overflows_warn_once_and_keep_the_chains_exactly(make):
    # 1e308 is finite in float64, but 0.5 * eps * x and sqrt(eps) * xi overflow the energy: every proposal
    # is non-finite, so every chain must stay where it started, with a warning saying why
    sampler, x0 = make(1e308), _x0(torch.float64)
    with pytest.warns(RuntimeWarning) as record:
        x = sampler.sample(GAUSS, x0, steps=3, generator=torch.Generator().manual_seed(1))
    assert len(record) == 1
    msg = str(record[0].message)
    assert f"{type(sampler).__name__}: in 3 of 3 step(s) every chain's proposal had a non-finite energy" in msg
    assert "the step size (1e+308) is probably too large for this energy (step_size * grad overflows)" in msg
    assert torch.equal(x, x0)


def test_a_single_rejected_chain_does_not_warn():
    # chain 0 starts (and stays) where E = +inf, so its proposals are flagged; the others move: no warning
    wall = from_fn(lambda x: torch.where(x[:, 0] > 50, torch.full_like(x[:, 0], math.inf), 0.5 * (x * x).sum(-1)))
    x0 = _x0(torch.float64)
    x0[0, 0] = 100.0
    sampler = MALA(0.1)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        state = sampler.init(wall, x0)
        flagged = [info.nonfinite for _state, info in sampler.iterate(wall, state, 5, generator=torch.Generator().manual_seed(2))]
    assert all(bool(f[0]) and not bool(f[1:].any()) for f in flagged)


def test_discrete_kernels_name_the_energy_not_a_step_size():
    space = Spins(4)
    nan_energy = from_fn(lambda s: torch.where(s.sum(-1) > -4, torch.full_like(s[:, 0], math.nan), -s.sum(-1)))
    x0 = -torch.ones(6, 4)  # the only state with a finite energy; every single flip lands on NaN
    with pytest.warns(RuntimeWarning, match=r"MetropolisHastings: in 4 of 4 step\(s\) .*the energy is NaN or -inf at every proposed state"):
        x = MetropolisHastings(space=space).sample(nan_energy, x0, 4, generator=torch.Generator().manual_seed(3))
    assert torch.equal(x, x0)
    with pytest.warns(RuntimeWarning, match=r"GibbsWithGradients: in 2 of 2 step\(s\) .*the energy is NaN or -inf"):
        GibbsWithGradients(space=space).sample(nan_energy, x0, 2, generator=torch.Generator().manual_seed(4))


def test_sampler_with_a_detached_energy_is_an_error_naming_the_energy():
    def detached(x):
        return 0.5 * (x * x).sum(-1).detach()

    with pytest.raises(ValueError, match=r"energy 'test_sampler_with_a_detached_energy_is_an_error_naming_the_energy.<locals>.detached' returned one with no graph back to x"):
        ULA(0.1).sample(detached, _x0(), 3)


def test_sampler_with_an_integer_energy_is_a_type_error():
    with pytest.raises(TypeError, match=r"energy\(x\): expected a floating-point tensor from energy .*; got dtype torch.int64"):
        MALA(0.1).init(lambda x: (x * x).sum(-1).round().long(), _x0())


def test_schedule_returning_a_nan_or_negative_multiplier_is_an_error():
    for bad in (math.nan, -1.0, math.inf):
        sampler = ULA(0.1, schedule=lambda t, bad=bad: bad)
        with pytest.raises(ValueError, match=r"schedule\(0\): expected a finite multiplier >= 0; got"):
            sampler.sample(GAUSS, _x0(), 2)
    x0 = _x0()
    assert torch.equal(ULA(0.1, schedule=lambda t: 0.0).sample(GAUSS, x0, 2), x0)  # annealed to zero: allowed


def test_hmc_mass_that_overflows_the_chain_dtype_is_an_error_at_init():
    with pytest.raises(ValueError, match=r"mass: expected entries that stay finite and > 0 \(with a finite inverse\) in torch.float32; got min 1e-300"):
        HMC(0.1, mass=torch.tensor([1e-300, 1.0], dtype=torch.float64)).init(GAUSS, _x0())
    HMC(0.1, mass=torch.tensor([1e-300, 1.0], dtype=torch.float64)).init(GAUSS, _x0(torch.float64))
