"""Batches of conditional sequence objectives ``p(y | x)``: ``(*inputs, tags, lengths)``.

Shared by :mod:`ebms.objectives.conditional` and :mod:`ebms.objectives.transducer`. A batch is a
tuple of one or more inputs ``(B, T, ...)`` (word ids, character ids, attribute ids and values),
then the tags ``(B, T)`` integer and the lengths ``(B,)`` integer in ``[1, T]``; the last two may
also come as one :class:`~ebms.sequences.Sequences` ``(tags, lengths)``. Tags beyond each length
are padding (any value).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import torch
from torch import Tensor

from ebms._checks import check_int, check_shape, check_tensor
from ebms.sequences import Sequences

__all__ = ["check_chunk", "chunks", "rows", "split_batch"]

FORMS = "(*inputs, tags, lengths) or (*inputs, Sequences(tags, lengths)) with at least one input"


def _parts(batch: Any) -> tuple[list[Any], Tensor, Tensor]:
    if isinstance(batch, (tuple, list)) and len(batch) >= 2 and isinstance(batch[-1], Sequences):
        *inputs, seqs = batch
        return inputs, seqs.tokens, seqs.lengths
    if not isinstance(batch, (tuple, list)) or len(batch) < 3:
        got = f"a {type(batch).__name__} of {len(batch)}" if isinstance(batch, (tuple, list)) else type(batch).__name__
        raise ValueError(f"batch: expected a tuple {FORMS}; got {got}")
    *inputs, tags, lengths = batch
    return inputs, tags, lengths


def split_batch(batch: Any) -> tuple[list[Any], Tensor, Tensor]:
    """``(inputs, tags, lengths)`` checked and cut to the longest sentence.

    Inputs whose second axis has the padded length ``T`` of the tags are cut with them; lengths
    are returned as int64.

    Raises:
        ValueError: not a tuple of one of the two forms, tags not ``(B, T)`` integer, lengths not
            ``(B,)`` integer in ``[1, T]``.
    """
    inputs, tags, lengths = _parts(batch)
    check_tensor(lengths, "lengths")
    if lengths.dim() != 1 or lengths.shape[0] == 0 or lengths.is_floating_point():
        raise ValueError(f"lengths: expected a non-empty (B,) integer tensor; "
                         f"got {tuple(lengths.shape)} {lengths.dtype}")
    check_tensor(tags, "tags")
    if tags.is_floating_point() or tags.dim() != 2:
        raise ValueError(f"tags: expected a (B, T) integer tensor; got {tuple(tags.shape)} {tags.dtype}")
    check_shape(tags, (lengths.shape[0], None), "tags (B = lengths.shape[0])")
    t_max = int(lengths.max())
    if int(lengths.min()) < 1 or t_max > tags.shape[1]:
        raise ValueError(f"lengths: expected values in [1, {tags.shape[1]}] (tags.shape[1]); "
                         f"got min {int(lengths.min())}, max {t_max}")
    kept = [x[:, :t_max] if isinstance(x, Tensor) and x.dim() >= 2 and x.shape[1] == tags.shape[1] else x
            for x in inputs]
    return kept, tags[:, :t_max], lengths.long()


def chunks(lengths: Tensor, chunk_size: int | None) -> Iterator[Tensor | None]:
    """Row indices of length-sorted chunks of ``chunk_size`` sentences; one ``None`` for the whole batch."""
    if chunk_size is None or lengths.shape[0] <= chunk_size:
        yield None
        return
    yield from torch.argsort(lengths, stable=True).split(chunk_size)


def rows(x: Any, idx: Tensor | None, t: int | None) -> Any:
    """Rows ``idx`` of a batch tensor cut to length ``t`` (non-tensors and ``idx=None`` pass through)."""
    if idx is None or not isinstance(x, Tensor):
        return x
    x = x[idx]
    return x[:, :t] if x.dim() >= 2 and t is not None else x


def check_chunk(chunk_size: int | None) -> int | None:
    """``None`` or an integer ``>= 1``."""
    return None if chunk_size is None else check_int(chunk_size, "chunk_size", minimum=1)
