"""Evaluation metrics.

* :func:`conlleval` / :class:`ChunkScores` — chunk-level precision, recall and F1 (percent) with
  the definition of the CoNLL ``conlleval`` script, per type and overall, plus token accuracy.
* :func:`token_f1`, :func:`token_accuracy` — token-level scores over flattened tag sequences
  (scikit-learn's ``f1_score`` definitions; the sklearn-crfsuite tutorial's figure).
* :func:`edit_distance`, :func:`error_rate` / :class:`ErrorRate` — Levenshtein alignment counts
  and label/word error rates (substitutions, deletions, insertions, sentence errors).
* :func:`decode_tags`, :func:`evaluate_tagger` — a CRF tagger's Viterbi tags over a test set in
  length-sorted chunks, and its chunk and token figures.
* :func:`ctc_transcripts`, :func:`evaluate_ctc` — a CTC acoustic model's best-path (and CTC-CRF
  n-gram) transcripts of a test set, and its label error figures.
* :func:`expected_calibration_error` (class-wise, the monograph's Eq. 5.19, and top-label),
  :class:`TemperatureScaling`, :func:`calibration_report` — calibration of a classifier.
* :func:`auroc`, :func:`aupr`, :func:`detection_report` (bootstrap interval), :func:`ood_scores`
  (``logp``, ``max_softmax``, ``grad_norm``) — out-of-distribution detection.
* :func:`evaluate_image_classifier`, :func:`evaluate_image_energy` — the test figures of image
  classifiers (JEM) and image energies.
* :func:`classifier_scores`, :func:`frechet_distance` — how image samples look to a classifier
  trained on the data (recognised share, class cover, classifier score; feature Fréchet distance).
* :func:`compare_over_seeds` / :class:`SeedComparison` — two methods over the same seeds: the paired
  difference, its Student-t interval, and the verdict it allows ("not significant" where it covers 0).
"""

from ebms.metrics.bleu import LengthBucketBLEU, bleu_by_length, corpus_bleu
from ebms.metrics.calibration import (
    CALIBRATION_KINDS,
    CalibrationBins,
    CalibrationReport,
    TemperatureScaling,
    calibration_bins,
    calibration_report,
    expected_calibration_error,
)
from ebms.metrics.chunking import ChunkScores, TypeScores, conlleval
from ebms.metrics.ctc_eval import ctc_transcripts, evaluate_ctc
from ebms.metrics.error_rate import ErrorRate, edit_distance, error_rate
from ebms.metrics.exposure_bias import ExposureBiasRatio, exposure_bias_ratio
from ebms.metrics.generation import (
    LogProbGap,
    PreferenceTest,
    distinct_n,
    log_prob_gap,
    oracle_preference,
    repetition_rate,
    unique_ngram_fraction,
)
from ebms.metrics.image_eval import (
    ImageClassifierReport,
    ImageEnergyReport,
    evaluate_image_classifier,
    evaluate_image_energy,
)
from ebms.metrics.lm_eval import PerplexityRow, TRFPerplexity, trf_perplexity
from ebms.metrics.ood import (
    OOD_SCORE_KINDS,
    DetectionReport,
    aupr,
    auroc,
    detection_report,
    fpr_at_tpr,
    ood_scores,
    roc_curve,
)
from ebms.metrics.rescoring import (
    BootstrapInterval,
    InterpolationResult,
    PairedBootstrap,
    RescoringResult,
    TuningResult,
    bootstrap_wer,
    cmu_pronunciations,
    combined_scores,
    evaluate_rescoring,
    hypothesis_errors,
    lm_scores,
    paired_bootstrap,
    simulate_nbest,
    tune_weights,
)
from ebms.metrics.sample_quality import ClassifierScores, classifier_scores, frechet_distance
from ebms.metrics.seeds import SeedComparison, compare_over_seeds, student_t_quantile
from ebms.metrics.tagger_eval import decode_tags, evaluate_tagger
from ebms.metrics.tagging import token_accuracy, token_f1

__all__ = [
    "ClassifierScores",
    "classifier_scores",
    "frechet_distance",
    "PerplexityRow",
    "TRFPerplexity",
    "trf_perplexity",
    "BootstrapInterval",
    "ChunkScores",
    "ErrorRate",
    "InterpolationResult",
    "PairedBootstrap",
    "RescoringResult",
    "TuningResult",
    "TypeScores",
    "bootstrap_wer",
    "cmu_pronunciations",
    "combined_scores",
    "conlleval",
    "ctc_transcripts",
    "decode_tags",
    "edit_distance",
    "error_rate",
    "evaluate_ctc",
    "evaluate_rescoring",
    "evaluate_tagger",
    "hypothesis_errors",
    "lm_scores",
    "paired_bootstrap",
    "simulate_nbest",
    "token_accuracy",
    "token_f1",
    "tune_weights",
    "LengthBucketBLEU",
    "LogProbGap",
    "PreferenceTest",
    "bleu_by_length",
    "corpus_bleu",
    "distinct_n",
    "log_prob_gap",
    "oracle_preference",
    "repetition_rate",
    "unique_ngram_fraction",
    "ExposureBiasRatio",
    "exposure_bias_ratio",
    "CALIBRATION_KINDS",
    "CalibrationBins",
    "CalibrationReport",
    "TemperatureScaling",
    "calibration_bins",
    "calibration_report",
    "expected_calibration_error",
    "ImageClassifierReport",
    "ImageEnergyReport",
    "evaluate_image_classifier",
    "evaluate_image_energy",
    "OOD_SCORE_KINDS",
    "DetectionReport",
    "aupr",
    "auroc",
    "detection_report",
    "fpr_at_tpr",
    "ood_scores",
    "roc_curve",
    "SeedComparison",
    "compare_over_seeds",
    "student_t_quantile",
]
