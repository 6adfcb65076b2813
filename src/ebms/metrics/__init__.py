"""Evaluation metrics.

* :func:`conlleval` / :class:`ChunkScores` — chunk-level precision, recall and F1 (percent) with
  the definition of the CoNLL ``conlleval`` script, per type and overall, plus token accuracy.
* :func:`token_f1`, :func:`token_accuracy` — token-level scores over flattened tag sequences
  (scikit-learn's ``f1_score`` definitions; the sklearn-crfsuite tutorial's figure).
* :func:`edit_distance`, :func:`error_rate` / :class:`ErrorRate` — Levenshtein alignment counts
  and label/word error rates (substitutions, deletions, insertions, sentence errors).
"""

from ebms.metrics.chunking import ChunkScores, TypeScores, conlleval
from ebms.metrics.error_rate import ErrorRate, edit_distance, error_rate
from ebms.metrics.tagging import token_accuracy, token_f1

__all__ = ["ChunkScores", "ErrorRate", "TypeScores", "conlleval", "edit_distance", "error_rate", "token_accuracy",
           "token_f1"]
