"""Label n-gram language model of CTC-CRF (moved).

The dense n-gram now lives in :mod:`ebms.distributions` as :class:`~ebms.distributions.NGram`; the
CTC-CRF denominator LM is its ``boundary=0``, ``end=True`` case over a CTC vocabulary of size ``V``
(blank included): labels ``1 .. V-1``, and the blank id 0 standing for ``<s>``/``</s>``. The old
name still imports from here, with the same constructor (``LabelNGram(V, order, table)``),
``fit(transcripts, V, order, smoothing=..., k=...)`` and ``zeros(V, order)``; scores are
``lm.log_prob(Sequences(targets, target_lengths))``.
"""

from __future__ import annotations

from ebms.distributions import NGram

__all__ = ["LabelNGram"]

#: Moved to :class:`ebms.distributions.NGram` (``vocab_size`` is the old ``n_labels``).
LabelNGram = NGram
