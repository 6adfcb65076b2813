"""Batch streams: ``(n, generator) -> batch`` functions the :class:`~ebms.train.Trainer` draws from.

A stream draws ``n`` rows with replacement from the generator it is given (the trainer's, so a
resumed run draws what an uninterrupted one would), and nothing else.

* :func:`nce_batches` — residual-EBM training (Deng et al. 2020): random (prefix, continuation)
  pairs with ``nu`` negatives each from a :class:`~ebms.data.NegativeCache` of base-LM draws.
* :func:`tagged_batches` — tagged sentences, and with unlabelled ones the semi-supervised batches
  of a joint random field (Song et al. 2018): ``n - n // 2`` labelled and ``n // 2`` unlabelled
  rows (tags ``-1``), cut to the batch's longest sentence.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor

from ebms._checks import check_int
from ebms.data.negative_cache import NegativeCache
from ebms.sequences import Sequences

__all__ = ["nce_batches", "tagged_batches"]

#: ``pack(prefix, positive, negatives) -> batch``: how a stream hands its rows to an objective.
Pack = Callable[[Sequences, Sequences, Sequences], Any]


def nce_batches(cache: NegativeCache, prefix: Sequences, continuation: Sequences, nu: int, *,
                pack: Pack | None = None) -> Callable[[int, torch.Generator], Any]:
    """Batches of ``n`` random (prefix, continuation) pairs with ``nu`` cached negatives each.

    Args:
        cache: ``S`` base-LM continuations of every prefix, in the order of ``prefix``.
        prefix: the ``P`` prefixes the cache was built from.
        continuation: their true continuations (the positives), ``P`` rows.
        nu: negatives per pair, drawn uniformly with replacement from the prefix's ``S``
            (:meth:`NegativeCache.draw`).
        pack: turns ``(prefix (n,), positive (n,), negatives (n nu,))`` into the batch, e.g.
            :meth:`ebms.objectives.ResidualNCE.pack` (its six-tensor form, which the trainer's
            streams need); ``None`` returns the three :class:`~ebms.sequences.Sequences`.

    Returns:
        ``batches(n, generator)``: row indices from ``generator``, then the negatives from it.

    Raises:
        ValueError: ``nu`` is not a positive integer; ``prefix`` and ``continuation`` differ in rows.
    """
    check_int(nu, "nu", minimum=1)
    if prefix.batch_size != continuation.batch_size:
        raise ValueError(f"continuation: expected one row per prefix ({prefix.batch_size}); got "
                         f"{continuation.batch_size}")

    def batches(n: int, generator: torch.Generator) -> Any:
        i = torch.randint(prefix.batch_size, (n,), generator=generator)
        rows = (prefix[i], continuation[i], cache.draw(i, nu, generator))
        return rows if pack is None else pack(*rows)

    return batches


def _cut(words: Tensor, tags: Tensor, lengths: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    t = int(lengths.max())
    return words[:, :t], tags[:, :t], lengths


def tagged_batches(words: Tensor, tags: Tensor, lengths: Tensor, *,
                   unlabelled: tuple[Tensor, Tensor] | None = None) -> Callable[[int, torch.Generator], Any]:
    """Batches ``(words (n, T), tags (n, T), lengths (n,))`` of padded sentences, ``T`` the longest drawn.

    Args:
        words: ``(N, T_max)`` token ids of the tagged sentences, padded.
        tags: ``(N, T_max)`` their tag ids.
        lengths: ``(N,)`` their lengths.
        unlabelled: ``(words (M, T_max), lengths (M,))`` of sentences without tags, padded like
            ``words``: each batch then holds ``n - n // 2`` tagged rows and ``n // 2`` unlabelled ones
            (tags ``-1``), drawn in that order (semi-supervised learning); ``None``: tagged rows only.

    Returns:
        ``batches(n, generator)``; rows are drawn uniformly with replacement.

    Raises:
        ValueError: ``words``, ``tags`` and ``lengths`` differ in rows.
    """
    if not (words.shape[0] == tags.shape[0] == lengths.shape[0]):
        raise ValueError(f"tags: expected one row per sentence of words ({words.shape[0]}); got tags "
                         f"{tags.shape[0]} and lengths {lengths.shape[0]}")

    def labelled(n: int, g: torch.Generator) -> tuple[Tensor, Tensor, Tensor]:
        i = torch.randint(words.shape[0], (n,), generator=g)
        return _cut(words[i], tags[i], lengths[i])

    if unlabelled is None:
        return labelled
    u_words, u_lengths = unlabelled

    def mixed(n: int, g: torch.Generator) -> tuple[Tensor, Tensor, Tensor]:
        i = torch.randint(words.shape[0], (n - n // 2,), generator=g)
        j = torch.randint(u_words.shape[0], (n // 2,), generator=g)
        y = torch.cat([tags[i], torch.full((n // 2, tags.shape[1]), -1, dtype=torch.long)])
        return _cut(torch.cat([words[i], u_words[j]]), y, torch.cat([lengths[i], u_lengths[j]]))

    return mixed
