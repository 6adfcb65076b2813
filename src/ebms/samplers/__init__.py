"""Markov kernels for energies ``p(x) ∝ exp(-E(x))``.

Every sampler follows one contract (see :mod:`ebms.samplers._base`)::

    state = sampler.init(energy, x0)                        # x, E(x), grad E(x), step size
    state, info = sampler.step(energy, state, generator=g)   # one transition
    x = sampler.sample(energy, x0, steps=100, generator=g)   # convenience loop

``info.accept_prob``/``info.acceptance_rate`` and ``info.energy`` are always
present. Randomness only from ``generator``; ``generator=None`` falls back to
torch's global RNG, which works but is not reproducible run to run, so pass one.
Samplers keep no per-run state.

Continuous kernels: :class:`ULA` and :class:`SGLD` (unadjusted, biased, one
gradient per step), :class:`MALA` (exact, one gradient per step),
:class:`HMC` (exact, ``n_leapfrog`` gradients per step). Step sizes are tuned
by wrapping a kernel in :class:`StepSizeAdaptation` or calling :func:`warmup`;
ULA/SGLD step-size schedules live in :mod:`ebms.samplers.schedules`.
"""

from ebms.samplers._base import ChainResult, ChainState, Sampler, StepInfo, mh_accept
from ebms.samplers.adaptation import StepSizeAdaptation, StepSizeAdaptationState, warmup
from ebms.samplers.hmc import HMC, HMCInfo, Trajectory, leapfrog
from ebms.samplers.langevin import SGLD, ULA
from ebms.samplers.mala import MALA

__all__ = [
    "ChainResult",
    "ChainState",
    "HMC",
    "HMCInfo",
    "MALA",
    "SGLD",
    "Sampler",
    "StepInfo",
    "StepSizeAdaptation",
    "StepSizeAdaptationState",
    "Trajectory",
    "ULA",
    "leapfrog",
    "mh_accept",
    "warmup",
]
