r"""Energy-based language models over sentences: TRF and GN-ELM (monograph chapter 3).

* :class:`TRF` — :math:`p(l, x) = \pi_l e^{-E(x)} / Z_l`, per-length log normalisers ``log_z``.
* :class:`GNELM` — :math:`p(x) = e^{-E(x)} / Z`, one normaliser, the length inside the energy.
* Energies over :class:`~ebms.sequences.Sequences`: :class:`DiscreteFeatures` (n-gram feature
  templates, :func:`feature_templates`), :class:`Hidden2Scalar` (CNN / BiLSTM encoders),
  :class:`SumTargetLogit` (causal logits), :class:`MixedEnergy` (their sum).
* :class:`WordClasses` — exchange clustering for class features and class-based proposals.
* :func:`feature_moments` — data means and within-length variances of discrete features (the
  per-feature step scales of :class:`~ebms.train.ScaledSGD`).
* :func:`ngram_weights` — word n-gram weights that reproduce a backoff LM (a TRF's start);
  :func:`ebms.fit.start_from_ngram` sets them and :math:`\zeta` in a TRF (the KN-started variant).
* :func:`exact_log_z` — per-length :math:`\log Z_l` by enumeration on tiny vocabularies.

Token id 0 is the sentence boundary: sentences hold ids ``1..V-1``. Sampling over lengths is
:class:`ebms.samplers.trans_dimensional.TransDimensional`, for which both models are targets.
"""

from ebms.models.trf.classes import WordClasses
from ebms.models.trf.exact import exact_log_z
from ebms.models.trf.features import DiscreteFeatures
from ebms.models.trf.gnelm import GNELM
from ebms.models.trf.hidden2scalar import Hidden2Scalar
from ebms.models.trf.mixed import MixedEnergy
from ebms.models.trf.model import TRF
from ebms.models.trf.moments import feature_moments
from ebms.models.trf.ngram_init import ngram_weights
from ebms.models.trf.sum_target_logit import SumTargetLogit
from ebms.models.trf.templates import DEFAULT_GROUPS, TEMPLATE_GROUPS, Template, feature_templates, source_cutoffs

__all__ = [
    "DEFAULT_GROUPS",
    "GNELM",
    "TEMPLATE_GROUPS",
    "TRF",
    "DiscreteFeatures",
    "Hidden2Scalar",
    "MixedEnergy",
    "SumTargetLogit",
    "Template",
    "WordClasses",
    "exact_log_z",
    "feature_moments",
    "feature_templates",
    "ngram_weights",
    "source_cutoffs",
]
