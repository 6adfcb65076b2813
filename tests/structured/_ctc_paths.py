"""Shared by the CTC, CTC-CRF and denominator-graph tests: the CTC collapse map of a frame path."""

from __future__ import annotations

from collections.abc import Iterable


def collapse(path: Iterable[int], blank: int = 0) -> tuple[int, ...]:
    """``B(pi)``: merge repeated frame labels, then drop blanks (Graves et al. 2006)."""
    out, prev = [], None
    for p in path:
        if p != prev and p != blank:
            out.append(p)
        prev = p
    return tuple(out)
