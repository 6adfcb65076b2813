r"""Exact per-length normalisers by enumeration, for tiny vocabularies: the reference every estimator
of :math:`\log Z_l` (AugSA, NCE, AIS, importance sampling) is checked against.

.. math::  \log Z_l = \log \sum_{x \in \{1..V-1\}^l} e^{-E(x)}, \qquad l = 1..L,

summed in float64 over :math:`\sum_l (V-1)^l` sentences (at most ``MAX_EXACT_STATES`` = 2^25), in
blocks of ``chunk_size``. A GN-ELM's :math:`\log Z` is the log-sum-exp of the result.
"""

from __future__ import annotations

import torch
from torch import Tensor

from ebms._checks import check_int
from ebms.capabilities import TransDimensionalTarget, supports
from ebms.sequences import Sequences
from ebms.spaces import TokenSequences

__all__ = ["exact_log_z"]


@torch.no_grad()
def exact_log_z(model: object, vocab_size: int, max_length: int, *, chunk_size: int = 1 << 16) -> Tensor:
    """``log Z_l`` for ``l = 1..max_length``, float64 ``(max_length,)``, by enumerating tokens ``1..V-1``.

    Args:
        model: a :class:`~ebms.models.trf.TRF` / :class:`~ebms.models.trf.GNELM` (its ``energy`` is
            used: no length prior, no :math:`\\zeta`) or any energy ``E(Sequences) -> (B,)``.
        vocab_size: ``V`` (id 0 is the boundary and never enumerated).
        max_length: ``L``.

    Raises:
        ValueError: more than ``MAX_EXACT_STATES`` sentences (from :meth:`TokenSequences.enumerate`).

    Example:
        >>> import torch
        >>> from ebms.sequences import Sequences
        >>> exact_log_z(lambda x: torch.zeros(x.batch_size), vocab_size=3, max_length=2)  # l log 2
        tensor([0.6931, 1.3863], dtype=torch.float64)
    """
    V = check_int(vocab_size, "vocab_size", minimum=2)
    L = check_int(max_length, "max_length", minimum=1)
    energy = model.energy if supports(model, TransDimensionalTarget) else model  # type: ignore[attr-defined]
    if not callable(energy):
        raise TypeError(f"model: expected a TRF/GNELM or an energy callable; got {type(model).__name__}")
    parts: list[list[Tensor]] = [[] for _ in range(L)]
    for block in TokenSequences(V - 1, L).enumerate(chunk_size):
        x = Sequences(block.tokens + 1, block.lengths, validate=False)
        e = energy(x)
        if not isinstance(e, Tensor) or tuple(e.shape) != (x.batch_size,):
            raise ValueError(f"energy(x): expected shape ({x.batch_size},); got {getattr(e, 'shape', type(e))}")
        parts[int(block.lengths[0]) - 1].append(torch.logsumexp(-e.double(), 0)[None])
    return torch.stack([torch.logsumexp(torch.cat(p), 0) for p in parts])
