"""Structured conditional models: one dynamic program per structure, written over a semiring.

* Semirings (:class:`LogSemiring`, :class:`MaxSemiring`, :class:`KMaxSemiring`) supply ``plus`` /
  ``times``; the same recursion gives log partitions, Viterbi scores and k-best scores.
* :class:`LinearChainCRF`: a distribution over tag sequences with ``log_partition``, ``log_prob``,
  node and pair ``marginals`` (autograd of log Z), ``argmax``, ``kbest``, ``sample``, ``entropy``,
  ragged ``lengths`` and allowed-transition masks (:func:`bio_allowed_transitions`).
* :class:`CRF`: the same chain as an ``nn.Module`` layer owning its transition parameters, with
  pytorch-crf's calling convention (``mask``/``lengths``, ``batch_first``, ``reduction``, ``decode``).
* CTC (:func:`ctc_loss`, :func:`ctc_log_likelihood`, the :class:`CTCLoss` module; torch's calling
  conventions, exact at every logit scale) with
  :func:`best_alignment`, :func:`greedy_decode` and :func:`prefix_beam_search`.
* CTC-CRF (:func:`ctc_crf_loss`, :func:`ctc_crf_log_likelihood`, :func:`ctc_crf_decode`): a label
  n-gram (:class:`LabelNGram`) composed with the CTC topology into a :class:`DenominatorGraph`,
  whose log partition :func:`den_log_partition` is a vectorised forward-backward.
* Feature templates for CRF taggers (:func:`chunking_features`, :func:`ner_features`) and the
  :class:`AttributeVocabulary` that turns them into padded attribute ids and values.
"""

from ebms.structured.crf_layer import CRF
from ebms.structured.ctc import (
    CTCDecoding,
    best_alignment,
    ctc_log_likelihood,
    ctc_loss,
    greedy_decode,
    prefix_beam_search,
)
from ebms.structured.ctc_crf import ctc_crf_decode, ctc_crf_log_likelihood, ctc_crf_loss, den_log_partition
from ebms.structured.ctc_layer import CTCLoss
from ebms.structured.den_graph import DenominatorGraph
from ebms.structured.features import (
    FEATURE_SETS,
    AttributeVocabulary,
    chunking_features,
    ner_features,
    observed_pairs,
    observed_transitions,
    to_attributes,
)
from ebms.structured.linear_chain import LinearChainCRF, bio_allowed_transitions, linear_chain_forward, viterbi_tags
from ebms.structured.ngram import LabelNGram
from ebms.structured.semiring import KMaxSemiring, LogSemiring, MaxSemiring, Semiring

__all__ = [
    "FEATURE_SETS",
    "AttributeVocabulary",
    "CRF",
    "CTCDecoding",
    "CTCLoss",
    "DenominatorGraph",
    "KMaxSemiring",
    "LabelNGram",
    "LinearChainCRF",
    "LogSemiring",
    "MaxSemiring",
    "Semiring",
    "best_alignment",
    "bio_allowed_transitions",
    "chunking_features",
    "ctc_crf_decode",
    "ctc_crf_log_likelihood",
    "ctc_crf_loss",
    "ctc_log_likelihood",
    "ctc_loss",
    "den_log_partition",
    "greedy_decode",
    "linear_chain_forward",
    "viterbi_tags",
    "ner_features",
    "observed_pairs",
    "observed_transitions",
    "prefix_beam_search",
    "to_attributes",
]
