"""Argument handling for the linear-chain CRF: potential and length checks, and tag constraints.

Potentials are ``emissions (B, T, C)``, ``transitions (C, C)`` and optional ``start`` / ``end``
``(C,)``, all finite floats of one dtype on one device; ``lengths`` is ``(B,)`` integers in
``[0, T]`` on that device. A disallowed transition or first / last tag is expressed by a boolean
mask and becomes the log-potential ``-inf`` (:func:`mask_potential`); a sequence with no allowed
tagging is an error (:func:`no_allowed`). Failures are one-line ``ValueError`` / ``TypeError``
naming the argument, the expectation and the value received. :func:`bio_allowed_transitions`
builds the masks of the BIO tagging scheme; it is re-exported by
:mod:`ebms.structured.linear_chain`.
"""

from __future__ import annotations

import torch
from torch import Tensor

from ebms._checks import check_finite, check_shape, check_tensor

__all__ = ["bio_allowed_transitions", "check_lengths", "check_potentials", "mask_potential", "no_allowed"]

NEG_INF = float("-inf")


def check_lengths(lengths: Tensor | None, batch: int, steps: int,
                  device: torch.device) -> tuple[Tensor, int, int]:
    """Checked ``(B,)`` long lengths and their min and max (0 for an empty batch)."""
    if lengths is None:
        full = steps if batch else 0
        return torch.full((batch,), steps, dtype=torch.long, device=device), full, full
    check_tensor(lengths, "lengths")
    if lengths.is_floating_point() or lengths.is_complex() or lengths.dtype == torch.bool:
        raise TypeError(f"lengths: expected an integer tensor; got dtype {lengths.dtype}")
    check_shape(lengths, (batch,), "lengths")
    if lengths.device != device:
        raise ValueError(f"lengths: expected device {device}; got {lengths.device}")
    lo, hi = (int(lengths.min()), int(lengths.max())) if batch else (0, 0)
    if lo < 0 or hi > steps:
        raise ValueError(f"lengths: expected values in [0, {steps}] (T = emissions.shape[1]); "
                         f"got min {lo}, max {hi}")
    return lengths.long(), lo, hi


def check_potentials(emissions: Tensor, transitions: Tensor, start: Tensor | None,
                     end: Tensor | None) -> None:
    check_tensor(emissions, "emissions", floating=True)
    if emissions.dim() != 3:
        raise ValueError(f"emissions: expected shape (B, T, C); got {tuple(emissions.shape)}")
    b, t, c = emissions.shape
    if c == 0:
        raise ValueError(f"emissions: expected at least one tag (C = shape[2] >= 1); got shape {(b, t, c)}")
    check_finite(emissions, "emissions")
    for name, x, shape in (("transitions", transitions, (c, c)), ("start", start, (c,)),
                           ("end", end, (c,))):
        if x is None:
            continue
        check_tensor(x, name, floating=True)
        check_shape(x, shape, f"{name} (C = emissions.shape[2] = {c})")
        if x.dtype != emissions.dtype or x.device != emissions.device:
            raise TypeError(f"{name}: expected dtype {emissions.dtype} on {emissions.device} "
                            f"(as emissions); got {x.dtype} on {x.device}")
        check_finite(x, name)


def bio_allowed_transitions(tags: list[str]) -> tuple[Tensor, Tensor]:
    """BIO constraints: ``I-X`` may only follow ``B-X`` or ``I-X``, and may not start a sequence.

    Args:
        tags: tag names, each ``"O"``, ``"B-<type>"`` or ``"I-<type>"``.

    Returns:
        ``(allowed (C, C), allowed_start (C,))`` boolean masks for
        :class:`~ebms.structured.linear_chain.LinearChainCRF`.
    """
    if not isinstance(tags, (list, tuple)) or len(tags) == 0:
        raise ValueError(f"tags: expected a non-empty list of tag names; got {tags!r}")
    kinds = []
    for tag in tags:
        if tag == "O":
            kinds.append(("O", ""))
        elif isinstance(tag, str) and len(tag) > 2 and tag[:2] in ("B-", "I-"):
            kinds.append((tag[0], tag[2:]))
        else:
            raise ValueError(f"tags: expected 'O', 'B-<type>' or 'I-<type>'; got {tag!r}")
    c = len(tags)
    allowed = torch.ones(c, c, dtype=torch.bool)
    allowed_start = torch.ones(c, dtype=torch.bool)
    for k, (kind, typ) in enumerate(kinds):
        if kind == "I":
            allowed_start[k] = False
            for j, (pk, pt) in enumerate(kinds):
                allowed[j, k] = pk in ("B", "I") and pt == typ
    return allowed, allowed_start


def mask_potential(x: Tensor | None, mask: Tensor | None, c: int, like: Tensor) -> Tensor | None:
    if mask is None:
        return x
    base = like.new_zeros(c) if x is None else x
    return base.masked_fill(~mask.to(like.device), NEG_INF)


def no_allowed(log_z: Tensor) -> None:
    bad = torch.isneginf(log_z)
    if bool(bad.any()):
        raise ValueError(f"allowed: no tag sequence is allowed for batch elements "
                         f"{bad.nonzero().flatten().tolist()}")
