r"""Aligned RNN-T: a locally normalised tagger with unbounded label history.

For words :math:`x_{1:T}` and tags :math:`y_{1:T}` (monograph eqs. 4.28-4.29; Graves 2012,
*Sequence transduction with recurrent neural networks*, in the aligned setting where every word
emits exactly one tag),

.. math::

    p(y|x) = \prod_{i=1}^T p(y_i | y_{0:i-1}, x), \qquad
    p(y_i = k | y_{0:i-1}, x) = \frac{\exp(f_i^k + g_i^k)}{\sum_{k'} \exp(f_i^{k'} + g_i^{k'})},

with :math:`f_i` from the transcription net and :math:`g_i` from the prediction net over the
label history (:mod:`ebms.nets.transducer`); an allowed-label mask renormalises over the
allowed tags. Trained by maximum likelihood with teacher forcing (exact, one pass: the objective
:class:`ebms.objectives.TransducerML`, which takes the model, or its ``compute(model, words, lengths,
tags)`` on unpacked arguments); decoded by beam search on :math:`\log p`. It is the locally
normalised counterpart of the CRF transducer (:mod:`ebms.models.crf_transducer`) and suffers from
label and exposure bias (monograph 4.1.2). Cost: one encoder pass and one LSTM pass over the tags per batch.
"""

from __future__ import annotations

from torch import Tensor

from ebms.nets.transducer import AlignedTransducer

__all__ = ["AlignedRNNT"]


class AlignedRNNT(AlignedTransducer):
    """Aligned RNN-T tagger (see the module docstring).

    Args:
        vocab_size: word ids (``0`` is conventionally padding).
        n_tags: tags ``K``.
        **kwargs: network sizes and allowed-label masks of
            :class:`~ebms.nets.transducer.AlignedTransducer`.

    Example:
        >>> import torch
        >>> model = AlignedRNNT(vocab_size=20, n_tags=3, hidden=8)
        >>> words = torch.randint(1, 20, (2, 5)); lengths = torch.tensor([5, 3])
        >>> model.log_prob(words, lengths, torch.zeros(2, 5, dtype=torch.long)).shape
        torch.Size([2])
    """

    def __init__(self, vocab_size: int, n_tags: int, **kwargs: object) -> None:
        super().__init__(vocab_size, n_tags, **kwargs)  # type: ignore[arg-type]

    def local(self, f: Tensor, g: Tensor, prev: Tensor) -> Tensor:
        """``log p(y_i = k | y_{<i}, x)`` for every tag ``k``, ``(..., K)``."""
        return (f + g + self.label_bias[prev]).log_softmax(-1)

    def log_prob(self, words: Tensor, lengths: Tensor, tags: Tensor, *, chars: Tensor | None = None) -> Tensor:
        """``log p(y | x)`` by teacher forcing, ``(B,)``."""
        return self.local_scores(words, lengths, tags, chars=chars).sum(1)
