r"""Training drivers: library calls that train a model and hand it back.

The layer above :mod:`ebms.train`: each driver composes a model (:mod:`ebms.models`), an objective
(:mod:`ebms.objectives`) and, where it needs one, an in-memory :class:`~ebms.train.Trainer`
(``run_dir=None``: no files, no divergence guard), so that a model never imports its own training.

* :class:`RBMEstimator` — a scikit-learn-style RBM (``fit``/``transform``/``score_samples`` with
  real log-likelihoods), trained by fast analytic CD-k / PCD: the objective
  :class:`ebms.objectives.RBMContrastiveDivergence` with :class:`ebms.train.LeanSGD` in an in-memory
  trainer. :func:`cd_update` is the same update as one call (with :class:`CDState` carried between
  calls), :func:`rbm_products` the fastest block products for a model and batch, and
  :func:`sklearn_expected_failed_checks` the scikit-learn checks that do not apply.
* :func:`fit_feature_crf` — the CRFsuite-style feature CRF (:class:`ebms.models.FeatureCRF`) by
  L-BFGS / OWL-QN (L1 + L2) or SGD/Adam on :class:`ebms.objectives.FeatureCRFLikelihood`;
  returns a :class:`FitResult`.
* :func:`self_train` — the self-training baseline of semi-supervised tagging (rounds of
  pseudo-labels, :class:`SelfTrainingResult`).
* :func:`pretrain_noise_lm` and :func:`init_log_z` — the starts of a JRF's noise-contrastive
  training: the noise LM fitted by likelihood, then :math:`\zeta` fitted to it.
* :func:`start_from_ngram` — a discrete TRF started at a backoff n-gram LM (weights and
  importance-sampled log normalisers).

Randomness comes from each call's ``generator`` / ``random_state``; every driver changes the model
in place.
"""

from ebms.fit._rbm_cd import CDState, cd_update, rbm_products
from ebms.fit.feature_crf import FitResult, fit_feature_crf
from ebms.fit.jrf import init_log_z, pretrain_noise_lm
from ebms.fit.rbm_estimator import RBMEstimator, sklearn_expected_failed_checks
from ebms.fit.self_training import SelfTrainingResult, SelfTrainingRound, self_train
from ebms.fit.trf import start_from_ngram

__all__ = [
    "CDState",
    "FitResult",
    "RBMEstimator",
    "SelfTrainingResult",
    "SelfTrainingRound",
    "cd_update",
    "fit_feature_crf",
    "init_log_z",
    "pretrain_noise_lm",
    "rbm_products",
    "self_train",
    "sklearn_expected_failed_checks",
    "start_from_ngram",
]
