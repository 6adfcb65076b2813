"""Named models: compositions of energies, spaces and conditionals that users ask for by name.

Models sit below the objectives and the trainer: they import nothing from ``ebms.objectives``,
``ebms.estimators``, ``ebms.train`` or ``ebms.fit``. Their losses are objectives
(:mod:`ebms.objectives`, which take the model) and their training drivers live in :mod:`ebms.fit`.

* :class:`IsingModel` — spins ``{-1, +1}`` on a lattice (periodic or free, per-edge couplings) or
  with any symmetric coupling matrix; field; temperature. Closed-form conditionals, block colouring.
* :class:`PottsModel` — the ``K``-state generalisation on one-hot sites.
* :class:`BernoulliRBM`, :class:`GaussianBernoulliRBM`, :class:`CategoricalRBM` — restricted
  Boltzmann machines as free energies of the visible units, with layer conditionals (block
  Gibbs), exact log Z over the smaller layer and the Salakhutdinov–Murray AIS path.
  (The scikit-learn-style :class:`ebms.fit.RBMEstimator` trains them.)
* :class:`FeatureCRF` — the CRFsuite-style feature CRF tagger (trained by :func:`ebms.fit.fit_feature_crf`).
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
* :class:`ResidualTextClassifier` — a sentence classifier with a scalar energy head, and
  :class:`MaskedCompletionLM`, the masked-completion noise law it is contrasted with by
  :class:`~ebms.objectives.ResidualJointNCE` (calibrated classification, monograph §5.5).
* :class:`JRF` — a joint random field for sequence labelling: a neural CRF whose conditional is the CRF and
  whose marginal (the CRF's log partition by the forward algorithm) is a TRF language model
  (the monograph's §5.3), trained on unlabelled text by NCE/DNCE (:class:`~ebms.objectives.JRFObjective`;
  its noise LM and log normalisers started by :mod:`ebms.fit`).
"""

from ebms.models.crf_tagger import NeuralCRFTagger
from ebms.models.crf_transducer import CRFTransducer
from ebms.models.electric import ElectricCloze
from ebms.models.feature_crf import FeatureCRF
from ebms.models.ising import IsingModel
from ebms.models.jem import JEM, ScalarHeadEBM
from ebms.models.jrf import JRF
from ebms.models.lm import LSTMLM, AutoregressiveLM, ClassFactoredLSTMLM, Perplexity, TransformerLM, perplexity
from ebms.models.pixelcnn import PixelCNNAdapter, PixelCNNModel
from ebms.models.potts import PottsModel
from ebms.models.rbm import BernoulliRBM, CategoricalRBM, GaussianBernoulliRBM, RBMBase
from ebms.models.residual_lm import NGramContinuations, ResidualLM
from ebms.models.residual_text import MaskedCompletionLM, ResidualTextClassifier, mask_positions
from ebms.models.rnnt_aligned import AlignedRNNT
from ebms.models.seq2seq import Seq2SeqAdapter, Seq2SeqTransformer
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
    "CRFTransducer",
    "CategoricalRBM",
    "FeatureCRF",
    "GaussianBernoulliRBM",
    "IsingModel",
    "NeuralCRFTagger",
    "PottsModel",
    "RBMBase",
    "ElectricCloze",
    "MaskedCompletionLM",
    "ResidualTextClassifier",
    "mask_positions",
    "NGramContinuations",
    "PixelCNNAdapter",
    "PixelCNNModel",
    "ResidualLM",
    "Seq2SeqAdapter",
    "Seq2SeqTransformer",
    "JEM",
    "ScalarHeadEBM",
    "JRF",
]
