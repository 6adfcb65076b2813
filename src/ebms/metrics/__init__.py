"""Evaluation metrics.

* :func:`conlleval` / :class:`ChunkScores` — chunk-level precision, recall and F1 (percent) with
  the definition of the CoNLL ``conlleval`` script, per type and overall, plus token accuracy.
"""

from ebms.metrics.chunking import ChunkScores, TypeScores, conlleval

__all__ = ["ChunkScores", "TypeScores", "conlleval"]
