r"""A conditional objective over sentence ids of an unpadded attribute corpus.

Feature CRFs (:class:`ebms.models.FeatureCRF`) read attribute vectors ``ids, values (B, T, F)``.
Padding a whole training corpus to its longest sentence and its busiest token costs
``16 N T F`` bytes (4 GB on CoNLL-2002 Spanish); an
:class:`~ebms.structured.features.EncodedCorpus` keeps the same attributes without padding
(``16 M`` bytes for ``M`` attribute values). :class:`CorpusRowsObjective` lets any conditional
objective of :mod:`ebms.objectives.conditional` train on such a corpus: the trainer's data are
the row ids ``(N,)``, the padded tags ``(N, T)`` and the lengths ``(N,)``; at each call the
objective pads only the batch's sentences, to the batch's own longest sentence and busiest token,
and hands ``(ids, values, tags, lengths)`` to the wrapped objective. The loss, its gradient and
its metrics are the wrapped objective's on those padded rows, unchanged.

Cost per call: the padding, ``O(B T F)`` memory and time, then the wrapped objective's.
For full-batch conditional maximum likelihood of a feature CRF,
:class:`ebms.objectives.FeatureCRFLikelihood` is faster (one cached sparse design matrix);
this wrapper serves the other objectives (conditional NCE, minibatch ML).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor, nn

from ebms._checks import check_tensor
from ebms.objectives._base import LossOutput
from ebms.structured.features import EncodedCorpus

__all__ = ["CorpusRowsObjective"]


class CorpusRowsObjective(nn.Module):
    """``objective(model, (rows, tags, lengths))``: pad the rows of a corpus, call ``inner``.

    Args:
        corpus: the training sentences' attributes (:meth:`AttributeVocabulary.encode_flat
            <ebms.structured.features.AttributeVocabulary.encode_flat>`), ``N`` sentences.
        inner: a conditional objective called as ``inner(model, (ids, values, tags, lengths),
            generator=g)`` with padded ``ids, values (B, t, F)``, ``tags (B, t)`` and ``lengths
            (B,)``, ``t`` the batch's longest sentence (e.g. :class:`~ebms.objectives.ConditionalML`,
            :class:`~ebms.objectives.ConditionalNCE`). An ``nn.Module`` is registered as the
            submodule ``inner``, so its state is in this objective's ``state_dict``.

    Call: ``objective(model, batch, *, generator=None) -> LossOutput`` with ``batch = (rows (B,)
    long sentence ids in [0, N), tags (B, >= t) integer, lengths (B,))``; ``lengths`` must equal
    the corpus's lengths of ``rows`` (a check that the rows and the tags belong together). The
    padded rows are moved to the device of ``tags``. Randomness: only the wrapped objective's,
    from ``generator``.

    Raises (at the call):
        TypeError: ``batch`` is not a tuple of three tensors.
        ValueError: ``rows`` not a non-empty 1-d long tensor of ids in ``[0, N)``; ``tags`` or
            ``lengths`` not of ``B`` rows; ``lengths`` differing from the corpus; ``tags``
            shorter than the longest sentence.
    """

    def __init__(self, corpus: EncodedCorpus, inner: Callable[..., LossOutput]) -> None:
        super().__init__()
        if not isinstance(corpus, EncodedCorpus):
            raise TypeError(f"corpus: expected an ebms.structured.features.EncodedCorpus; "
                            f"got {type(corpus).__name__}")
        if not callable(inner):
            raise TypeError(f"inner: expected an objective, callable as inner(model, batch, generator=g); "
                            f"got {type(inner).__name__}")
        self.corpus = corpus
        self.inner = inner

    def padded_batch(self, batch: Any) -> tuple[Tensor, Tensor, Tensor, Tensor]:
        """The wrapped objective's batch ``(ids (B, t, F), values (B, t, F), tags (B, t), lengths (B,))``."""
        if not isinstance(batch, (tuple, list)) or len(batch) != 3:
            got = f"a {type(batch).__name__} of {len(batch)}" if isinstance(batch, (tuple, list)) else type(batch).__name__
            raise TypeError(f"batch: expected a tuple (rows, tags, lengths); got {got}")
        rows, tags, lengths = batch
        n = len(self.corpus)
        check_tensor(rows, "rows")
        if rows.dtype != torch.long or rows.dim() != 1 or rows.numel() == 0:
            raise ValueError(f"rows: expected sentence ids, a non-empty 1-d long tensor; got {rows.dtype} "
                             f"of shape {tuple(rows.shape)}")
        home = rows.to(self.corpus.lengths.device)
        low, high = int(home.min()), int(home.max())
        if low < 0 or high >= n:
            raise ValueError(f"rows: expected sentence ids in [0, {n - 1}] (the corpus has {n}); "
                             f"got ids from {low} to {high}")
        b = rows.shape[0]
        check_tensor(tags, "tags")
        if tags.dim() != 2 or tags.shape[0] != b or tags.is_floating_point():
            raise ValueError(f"tags: expected a ({b}, T) integer tensor (one row per id); "
                             f"got {tuple(tags.shape)} {tags.dtype}")
        check_tensor(lengths, "lengths")
        if lengths.dim() != 1 or lengths.shape[0] != b:
            raise ValueError(f"lengths: expected shape ({b},) (one per id); got {tuple(lengths.shape)}")
        ids, values, ln = self.corpus.padded(home)
        if not torch.equal(ln, lengths.to(ln.device, torch.long)):
            bad = int((ln != lengths.to(ln.device, torch.long)).nonzero()[0, 0])
            raise ValueError(f"lengths: expected the corpus's sentence lengths of rows; row {bad} (id "
                             f"{int(home[bad])}) has {int(ln[bad])} tokens in the corpus; got {int(lengths[bad])}")
        t = ids.shape[1]
        if tags.shape[1] < t:
            raise ValueError(f"tags: expected at least {t} columns (the batch's longest sentence); "
                             f"got {tags.shape[1]}")
        dev = tags.device
        return ids.to(dev), values.to(dev), tags[:, :t], ln.to(dev)

    def forward(self, model: nn.Module, batch: Any, *, generator: torch.Generator | None = None) -> LossOutput:
        return self.inner(model, self.padded_batch(batch), generator=generator)

    def extra_repr(self) -> str:
        return f"n={len(self.corpus)}"
