"""Pieces shared by :class:`~ebms.models.trf.TRF` and :class:`~ebms.models.trf.GNELM`."""

from __future__ import annotations

import math

import torch
from torch import Tensor

from ebms._checks import check_energy_output
from ebms.capabilities import SupportsTokenLogits, supports
from ebms.sequences import Sequences
from ebms.spaces import TokenSequences


def field_energy(energy: object, x: Sequences) -> Tensor:
    """``energy(x)`` checked to be ``(B,)``, ``+inf`` for sentences holding the boundary id 0."""
    if not isinstance(x, Sequences):
        raise TypeError(f"x: expected an ebms.sequences.Sequences (tokens (B, T), lengths (B,)); got {type(x).__name__}")
    e = check_energy_output(energy(x), x.batch_size)  # type: ignore[operator]
    boundary = (x.mask() & (x.tokens == 0)).any(1)
    return e.masked_fill(boundary, math.inf)


def token_scores(energy: object, x: Sequences, position: Tensor, candidates: Tensor) -> Tensor:
    """``-E`` of each substitution ``(B, K)`` up to a per-row constant; ``-inf`` for the boundary id
    (``-1`` entries of ``candidates`` are absent: 0 there)."""
    if supports(energy, SupportsTokenLogits):
        s = energy.token_logits(x, position, candidates)
    else:
        s = variant_scores(energy, x, position, candidates)
    return s.masked_fill(candidates == 0, -math.inf).masked_fill(candidates < 0, 0.0)


def variant_scores(energy: object, x: Sequences, position: Tensor, candidates: Tensor) -> Tensor:
    """``-E`` of ``x`` with ``position`` set to each candidate, by evaluating the ``B K`` sentences
    (absent ``-1`` candidates are not evaluated: 0 there)."""
    B, K = candidates.shape
    row, k = (candidates >= 0).nonzero(as_tuple=True)
    tok = x.tokens[row].clone()
    tok.scatter_(1, position[row, None], candidates[row, k][:, None])
    e = check_energy_output(energy(Sequences(tok, x.lengths[row], validate=False)), row.numel())  # type: ignore[operator]
    out = torch.zeros(B, K, dtype=e.dtype, device=e.device)
    out[row, k] = -e
    return out


def check_sentences(x: Sequences, space: TokenSequences, name: str = "x") -> Sequences:
    """Lengths in ``[1, max_length]``, ids in ``[1, V)`` (:meth:`TokenSequences.validate_sentences`)."""
    return space.validate_sentences(x, name)


def single_token_log_z(energy: object, vocab_size: int, device: torch.device) -> Tensor:
    """``log Z_1`` exactly: log-sum-exp of ``-E`` over the ``V - 1`` one-token sentences."""
    ones = Sequences(torch.arange(1, vocab_size, device=device)[:, None], validate=False)
    return torch.logsumexp(-check_energy_output(energy(ones), vocab_size - 1), 0)  # type: ignore[operator]
