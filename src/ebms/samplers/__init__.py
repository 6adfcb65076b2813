"""Markov kernels for energies ``p(x) ∝ exp(-E(x))``.

Every sampler follows one contract (see :mod:`ebms.samplers._base`)::

    state = sampler.init(energy, x0)                        # x, E(x), grad E(x), step size
    state, info = sampler.step(energy, state, generator=g)   # one transition
    x = sampler.sample(energy, x0, steps=100, generator=g)   # convenience loop

``info.accept_prob``/``info.acceptance_rate`` and ``info.energy`` are always
present. Randomness only from ``generator``. Samplers keep no per-run state.
"""

from ebms.samplers._base import ChainResult, ChainState, Sampler, StepInfo, mh_accept
from ebms.samplers.langevin import SGLD, ULA

__all__ = ["SGLD", "ULA", "ChainResult", "ChainState", "Sampler", "StepInfo", "mh_accept"]
