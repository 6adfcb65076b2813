"""Named models: compositions of energies, spaces and conditionals that users ask for by name.

* :class:`IsingModel` — spins ``{-1, +1}`` on a lattice (periodic or free, per-edge couplings) or
  with any symmetric coupling matrix; field; temperature. Closed-form conditionals, block colouring.
* :class:`PottsModel` — the ``K``-state generalisation on one-hot sites.
* :class:`BernoulliRBM`, :class:`GaussianBernoulliRBM`, :class:`CategoricalRBM` — restricted
  Boltzmann machines as free energies of the visible units, with layer conditionals (block
  Gibbs), exact log Z over the smaller layer and the Salakhutdinov–Murray AIS path.
* :class:`RBMEstimator` — a scikit-learn-style RBM (``fit``/``transform``/``score_samples`` with
  real log-likelihoods), trained by fast analytic CD-k / PCD: the objective
  :class:`ebms.objectives.rbm_cd.RBMContrastiveDivergence` with :class:`ebms.train.LeanSGD` in an in-memory
  :class:`ebms.train.Trainer`; :func:`cd_update` is the same update as one call.
* :class:`FeatureCRF` / :func:`fit_feature_crf` — the CRFsuite-style feature CRF tagger, trained by
  L-BFGS / OWL-QN (L1 + L2) or SGD/Adam: the objective
  :class:`ebms.objectives.feature_crf.FeatureCRFLikelihood` in an in-memory trainer.
* :class:`NeuralCRFTagger` — a BiLSTM/CNN encoder with a CRF output layer (BIO-constrained decoding).
* :class:`LSTMLM`, :class:`ClassFactoredLSTMLM` (class-factored softmax), :class:`TransformerLM` — autoregressive sentence LMs over :class:`~ebms.sequences.Sequences`
  (``</s>`` = id 0), normalised models of :mod:`ebms.distributions` with exact ``log_prob``,
  sampling with temperature / top-k / top-p, continuation scores and a stateful forward for
  truncated BPTT; :func:`perplexity` counts ``</s>`` as a token.
* :class:`TRF` (trans-dimensional random field LM: length prior, per-length log normalisers) and
  :class:`GNELM` (one global normaliser), with sentence energies :class:`DiscreteFeatures` (the
  monograph's n-gram, class and skip templates; :class:`WordClasses` by exchange clustering),
  :class:`Hidden2Scalar`, :class:`SumTargetLogit` and their sum :class:`MixedEnergy`; exact log Z
  per length on tiny vocabularies in :func:`ebms.models.trf.exact_log_z`.
* :class:`CRFTransducer` and its locally normalised baseline :class:`AlignedRNNT` — tagging with
  the whole label history (beam search; beam search with early update).
* :class:`JEM` — any classifier ``f: x -> logits (B, K)`` as an energy: ``E(x) = -logsumexp f(x)``,
  ``E(x, y) = -f(x)[y]``, ``p(y | x) = softmax f(x)`` (Grathwohl et al. 2020), trained by
  :class:`~ebms.objectives.JEMObjective`; :class:`ScalarHeadEBM` — ``E(x) = -w^T h(x)`` on a
  classifier's trunk (pre-training for semi-supervised learning).
* :class:`JRF` — a joint random field for sequence labelling: a neural CRF whose conditional is the CRF and
  whose marginal (the CRF's log partition by the forward algorithm) is a TRF language model
  (the monograph's §5.3), trained on unlabelled text by NCE/DNCE (:class:`~ebms.objectives.JRFObjective`);
  :func:`self_train` — the self-training baseline.
"""

from ebms.models.crf_tagger import NeuralCRFTagger
from ebms.models.crf_transducer import CRFTransducer
from ebms.models.electric import ElectricCloze
from ebms.models.feature_crf import FeatureCRF, FitResult, fit_feature_crf
from ebms.models.ising import IsingModel
from ebms.models.jem import JEM, ScalarHeadEBM
from ebms.models.jrf import JRF
from ebms.models.lm import LSTMLM, AutoregressiveLM, ClassFactoredLSTMLM, Perplexity, TransformerLM, perplexity
from ebms.models.pixelcnn import PixelCNNAdapter, PixelCNNModel, PixelNLL
from ebms.models.potts import PottsModel
from ebms.models.rbm import BernoulliRBM, CategoricalRBM, GaussianBernoulliRBM, RBMBase
from ebms.models.rbm_estimator import CDState, RBMEstimator, cd_update
from ebms.models.residual_lm import NGramContinuations, ResidualLM
from ebms.models.rnnt_aligned import AlignedRNNT
from ebms.models.self_training import SelfTrainingResult, SelfTrainingRound, self_train
from ebms.models.seq2seq import Seq2SeqAdapter, Seq2SeqNLL, Seq2SeqTransformer
from ebms.models.trf import GNELM, TRF, DiscreteFeatures, Hidden2Scalar, MixedEnergy, SumTargetLogit, WordClasses

__all__ = [
    "GNELM",
    "TRF",
    "DiscreteFeatures",
    "Hidden2Scalar",
    "MixedEnergy",
    "SumTargetLogit",
    "WordClasses",
    "AutoregressiveLM",
    "LSTMLM",
    "ClassFactoredLSTMLM",
    "Perplexity",
    "TransformerLM",
    "perplexity",
    "AlignedRNNT",
    "BernoulliRBM",
    "CDState",
    "CRFTransducer",
    "CategoricalRBM",
    "FeatureCRF",
    "FitResult",
    "GaussianBernoulliRBM",
    "IsingModel",
    "NeuralCRFTagger",
    "PottsModel",
    "RBMBase",
    "RBMEstimator",
    "cd_update",
    "fit_feature_crf",
    "ElectricCloze",
    "NGramContinuations",
    "PixelCNNAdapter",
    "PixelCNNModel",
    "PixelNLL",
    "ResidualLM",
    "Seq2SeqAdapter",
    "Seq2SeqNLL",
    "Seq2SeqTransformer",
    "JEM",
    "ScalarHeadEBM",
    "JRF",
    "self_train",
    "SelfTrainingResult",
    "SelfTrainingRound",
]
