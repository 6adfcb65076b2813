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

Chains keep the energy's precision: a float ``x0`` in another dtype than the energy's parameters
(:func:`energy_dtype`) is a ``TypeError`` naming ``x0`` and both dtypes, from every kernel's ``init``.

Discrete kernels (spaces :class:`~ebms.spaces.Binary`, :class:`~ebms.spaces.Spins`,
:class:`~ebms.spaces.Categorical`; the space comes from ``space=`` or ``energy.space``):
:class:`Gibbs` (systematic or random scan, one batched energy call per site or the model's
closed-form conditionals), :class:`BlockGibbs` (RBM layers, or colour classes of a lattice),
:class:`MetropolisHastings` (random flips / category changes), :class:`MetropolisIndependence`
(a proposal model such as :class:`IndependentCategorical`), :class:`GibbsWithGradients`
(gradient-informed flips). :class:`ParallelTempering` wraps any kernel, discrete or continuous.

Token sequences (:class:`~ebms.spaces.TokenSequences`, states are :class:`~ebms.sequences.Sequences`):
Gibbs and MetropolisHastings move tokens within fixed lengths; :class:`TransDimensional` also jumps
between lengths, for targets ``p(l, x) ∝ exp(a_l - E(x))`` such as TRF language models
(:class:`~ebms.capabilities.TransDimensionalTarget`).

Controlled generation (monograph §4.4.2): :class:`MixAndMatch` samples a :class:`ProductOfExperts`
over token sequences by MH-within-Gibbs with a cloze (masked-LM) proposal; :func:`cold_decode` runs
Langevin dynamics on soft logits of a sequence and discretises them guided by a language model's
top-k (COLD).
"""

from ebms.samplers._base import ChainResult, ChainState, Sampler, StepInfo, energy_dtype, mh_accept
from ebms.samplers.adaptation import StepSizeAdaptation, StepSizeAdaptationState, warmup
from ebms.samplers.block_gibbs import BlockGibbs
from ebms.samplers.cold import ColdResult, cold_decode, cold_langevin, guided_discretise, noise_schedule
from ebms.samplers.gibbs import Gibbs
from ebms.samplers.gwg import GibbsWithGradients
from ebms.samplers.hmc import HMC, HMCInfo, Trajectory, leapfrog
from ebms.samplers.joint_resampling import (
    JointSample,
    TokenLevelSample,
    resample,
    token_level_joint_sample,
    top_k_joint_sample,
)
from ebms.samplers.langevin import SGLD, ULA
from ebms.samplers.mala import MALA
from ebms.samplers.metropolis import MetropolisHastings, MetropolisIndependence
from ebms.samplers.mix_and_match import MixAndMatch, ProductOfExperts, mix_and_match_log_ratio
from ebms.samplers.model_samples import ModelSamples, model_samples
from ebms.samplers.proposals import IndependentCategorical
from ebms.samplers.tempering import ParallelTempering, TemperingInfo
from ebms.samplers.trans_dimensional import TransDimensional, TransDimensionalInfo

__all__ = [
    "ModelSamples",
    "model_samples",
    "BlockGibbs",
    "ChainResult",
    "ChainState",
    "Gibbs",
    "GibbsWithGradients",
    "HMC",
    "HMCInfo",
    "IndependentCategorical",
    "MALA",
    "MetropolisHastings",
    "MetropolisIndependence",
    "ParallelTempering",
    "SGLD",
    "Sampler",
    "StepInfo",
    "StepSizeAdaptation",
    "StepSizeAdaptationState",
    "TemperingInfo",
    "Trajectory",
    "TransDimensional",
    "TransDimensionalInfo",
    "ULA",
    "energy_dtype",
    "leapfrog",
    "mh_accept",
    "warmup",
    "JointSample",
    "TokenLevelSample",
    "resample",
    "token_level_joint_sample",
    "top_k_joint_sample",
    "ColdResult",
    "MixAndMatch",
    "ProductOfExperts",
    "cold_decode",
    "cold_langevin",
    "guided_discretise",
    "mix_and_match_log_ratio",
    "noise_schedule",
]
