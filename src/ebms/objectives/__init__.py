r"""Training objectives: losses that shape an energy ``E`` (``p ∝ exp(-E)``).

Every objective is an ``nn.Module`` with one call::

    out = objective(energy, batch, generator=g)   # -> LossOutput(loss, metrics, negatives)
    out.loss.backward()                           # 0-d tensor
    log(out.metrics)                              # dict[str, float], gathered with one host sync

* ``batch: (B, *event)`` is validated at the boundary (floating point, finite,
  event shape matching the objective's chains or buffer); the energy's output
  must be ``(B,)`` (checked by :func:`ebms.energy.evaluate`).
* Randomness comes **only** from ``generator`` (the trainer owns one and
  passes it), so a resumed run reproduces the same losses bit for bit.
  ``generator=None`` falls back to torch's global RNG: allowed for quick
  experiments, never reproducible.
* State an objective keeps — a replay buffer's chains, NCE's learned
  ``log Z`` — lives in parameters or registered buffers, so
  ``objective.state_dict()`` belongs in the checkpoint, and learned
  quantities (``NCE.log_z``) belong in the optimiser:
  ``Adam([*energy.parameters(), *objective.parameters()])``.
* ``out.negatives`` holds the detached samples the objective contrasted
  with the data (chain end points, noise samples, perturbed data), or
  ``None``.
* Contrastive losses always report ``e_pos``, ``e_neg`` and
  ``gap = e_neg - e_pos``; watch the gap, not the loss.

Which one:

* :class:`ContrastiveDivergence` — a sampler run ``k`` steps from the data;
  cheap, biased (does not converge to the MLE).
* :class:`PersistentContrastiveDivergence` — the same plus a
  :class:`ReplayBuffer` of persistent chains; maximum likelihood as far as
  the chains mix (SML).
* :class:`ScoreMatching` — exact Fisher divergence; twice-differentiable
  energy, small dimension.
* :class:`SlicedScoreMatching` — the same by random projections; any dimension.
* :class:`DenoisingScoreMatching` — fits the noise-smoothed density; one or
  several noise levels (NCSN), no second derivatives of the data term.
* :class:`NCE` — classify data against a known noise model; also learns
  ``log Z`` (see :class:`GaussianNoise`).
* :class:`ImprovedCD` — PCD plus the KL term through the last sampler step and a
  nearest-neighbour entropy term (Du et al. 2021), with augmentation and a
  :class:`ReservoirBuffer`.
* :class:`RecoveryLikelihood` — diffusion recovery likelihood: short-run conditional
  EBMs ``p(x_t | x_{t+1})`` at noise levels (Gao et al. 2021); :func:`recovery_sample`;
  the authors' levels, steps and options :func:`gao_sigmas`, :func:`gao_step_sizes`, :func:`protocol_options`.
* :class:`EnergyMatching` — one static energy whose :math:`-\nabla` is fitted to the OT flow from noise to
  data, then sharpened near the data by CD with tempered Langevin negatives (Balcerak et al. 2025);
  :func:`energy_matching_sample` is its sampler with the temperature schedule :func:`em_temperature`.
* :class:`InclusiveNRF` — maximum likelihood with negatives from a latent-variable generator
  (:class:`LatentGaussianGenerator`) revised by Langevin/SGHMC moves in :math:`(x, h)`
  (:func:`inclusive_nrf_revise`), the generator fitted to the revised samples (inclusive KL; Song & Ou 2018).
* :class:`JEMObjective` — a classifier as an EBM (:class:`~ebms.models.JEM`):
  cross-entropy on labelled rows plus PCD on ``E(x) = -logsumexp f(x)``, per-class
  buffers, warm-up, unlabelled rows (semi-supervised); :class:`CrossEntropy` — the
  supervised baseline on the same batches.
* :class:`ResidualJointNCE` — calibrated classification (monograph §5.5): cross-entropy plus NCE of a
  residual energy (scalar head, ``-logsumexp`` or ``-max`` of the logits) against masked-completion noise.
* :class:`JRFObjective` — semi-supervised joint random fields: the CRF likelihood on labelled
  sentences plus DNCE of the JRF's marginal on unlabelled ones (monograph Eq. 5.11).

Conditional and sequence objectives ``p(y | x)`` have the same call and output, with
``objective(model, batch, generator=g)``; the batch forms each accepts are tabled in
``docs/objectives.md``:

* :class:`ConditionalML` — exact conditional maximum likelihood, for any model whose
  ``model(*inputs, lengths)`` returns a distribution with ``log_prob(tags)``
  (:class:`~ebms.capabilities.SupportsLogProb`; a :class:`~ebms.structured.LinearChainCRF`: neural and feature
  CRF taggers), batch ``(*inputs, tags, lengths)``.
* :class:`ConditionalNCE` — Ma & Collins' conditional NCE against a tag-sequence noise law such
  as :class:`TagBigramNoise`; needs the unnormalised ``score(tags)`` (:class:`~ebms.capabilities.SupportsScore`).
* :class:`CorpusRowsObjective` — either of the two above over the rows of an unpadded feature
  corpus (pads only each batch), batch ``(rows, tags, lengths)``.
* :class:`TransducerML` — teacher-forced ML of a locally normalised transducer (aligned RNN-T).
* :class:`BeamEarlyUpdate` — beam search with early updates for a CRF transducer.
* :class:`MonteCarloNLL` — the CRF transducer's NLL with the model expectation by self-normalised
  importance sampling (the Monte Carlo training early updates replace).
* :class:`CTCObjective` — CTC and CTC-CRF for acoustic models,
  batch ``(features, lengths, targets, target_lengths)``.
* :class:`AutoregressiveNLL` — teacher-forced maximum likelihood of an autoregressive LM
  (:mod:`ebms.models.lm`), mean NLL per token with ``</s>``; sentence batches (``Sequences`` or
  ``(tokens, lengths)``) or running-text chunks ``(inputs, targets)`` with truncated BPTT.
* :class:`Seq2SeqNLL` — the same for a translation model (:class:`~ebms.models.Seq2SeqTransformer`),
  with label smoothing and scheduled sampling, batch ``(src, tgt)``; :class:`PixelNLL` — maximum
  likelihood of a :class:`~ebms.models.PixelCNNModel`, batch images ``(B, C, H, W)``.
* :class:`AugSA` — stochastic approximation for TRF language models (persistent
  trans-dimensional chains, per-length ``log Z`` updated by the objective at the rate of
  :class:`SAGain`); :class:`TRFNCE` and :class:`DynamicNCE` — NCE of a TRF against a fixed or a
  jointly trained noise LM. With ``trace=W`` each reports its ``log Z`` as a :class:`ZetaEstimate`.

:func:`nce_logits` and :func:`nce_loss` are the logistic core every NCE variant shares, with
``log Z`` as ``None`` (self-normalised), a scalar, a per-length table or one value per condition.
"""

from ebms.objectives._base import LossOutput, scalar_metrics
from ebms.objectives._nce_core import nce_logits, nce_loss
from ebms.objectives._trf_gain import SAGain
from ebms.objectives._trf_trace import ZetaEstimate
from ebms.objectives.autoregressive import AutoregressiveNLL
from ebms.objectives.buffer import BufferInit, ReplayBuffer
from ebms.objectives.cd import ContrastiveDivergence, PersistentContrastiveDivergence
from ebms.objectives.classification import CrossEntropy
from ebms.objectives.cloze import ClozePLL
from ebms.objectives.conditional import ConditionalML, ConditionalNCE, TagBigramNoise
from ebms.objectives.conditional_rows import CorpusRowsObjective
from ebms.objectives.ctc import CTCObjective
from ebms.objectives.earm import EARM, EARMTerms, LMAdapter, energy_resample, sequence_energy
from ebms.objectives.electric import ElectricNCE
from ebms.objectives.energy_matching import EnergyMatching, em_flow_weight, em_temperature, energy_matching_sample
from ebms.objectives.feature_crf import FeatureCRFLikelihood
from ebms.objectives.improved_cd import ImprovedCD
from ebms.objectives.inclusive_nrf import InclusiveNRF, LatentGaussianGenerator, inclusive_nrf_revise
from ebms.objectives.jem import JEMObjective
from ebms.objectives.jrf import JRFObjective
from ebms.objectives.nce import NCE, GaussianNoise
from ebms.objectives.pixelcnn import PixelNLL
from ebms.objectives.rbm_cd import RBMContrastiveDivergence
from ebms.objectives.recovery import (
    RecoveryLikelihood,
    RecoveryPairs,
    gao_sigmas,
    gao_step_sizes,
    protocol_options,
    recovery_sample,
)
from ebms.objectives.reservoir import ReservoirBuffer
from ebms.objectives.residual_joint import RESIDUAL_ENERGIES, ResidualJointNCE, residual_energy
from ebms.objectives.residual_nce import ResidualNCE
from ebms.objectives.score_matching import DenoisingScoreMatching, ScoreMatching, SlicedScoreMatching
from ebms.objectives.seq2seq import Seq2SeqNLL
from ebms.objectives.transducer import BeamEarlyUpdate, MonteCarloNLL, TransducerML
from ebms.objectives.trf_augsa import AugSA
from ebms.objectives.trf_nce import TRFNCE, DynamicNCE

__all__ = [
    "AugSA",
    "CorpusRowsObjective",
    "AutoregressiveNLL",
    "BeamEarlyUpdate",
    "CTCObjective",
    "ConditionalML",
    "ConditionalNCE",
    "ContrastiveDivergence",
    "DenoisingScoreMatching",
    "DynamicNCE",
    "FeatureCRFLikelihood",
    "GaussianNoise",
    "LossOutput",
    "NCE",
    "PersistentContrastiveDivergence",
    "RBMContrastiveDivergence",
    "ReplayBuffer",
    "SAGain",
    "ScoreMatching",
    "SlicedScoreMatching",
    "TagBigramNoise",
    "TRFNCE",
    "TransducerML",
    "MonteCarloNLL",
    "ZetaEstimate",
    "nce_logits",
    "nce_loss",
    "scalar_metrics",
    "ClozePLL",
    "ElectricNCE",
    "ResidualNCE",
    "ResidualJointNCE",
    "RESIDUAL_ENERGIES",
    "residual_energy",
    "EARM",
    "EARMTerms",
    "LMAdapter",
    "energy_resample",
    "sequence_energy",
    "JEMObjective",
    "CrossEntropy",
    "BufferInit",
    "ImprovedCD",
    "ReservoirBuffer",
    "RecoveryLikelihood",
    "RecoveryPairs",
    "recovery_sample",
    "gao_sigmas",
    "protocol_options",
    "gao_step_sizes",
    "JRFObjective",
    "PixelNLL",
    "Seq2SeqNLL",
    "EnergyMatching",
    "energy_matching_sample",
    "em_temperature",
    "em_flow_weight",
    "InclusiveNRF",
    "LatentGaussianGenerator",
    "inclusive_nrf_revise",
]
