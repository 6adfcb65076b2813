"""Closed-form float64 references shared by the tests (no thresholds, no cut-offs); torch only, so that the
oldest-torch environment of ``make test-public-paths`` (no scipy) can import them."""

from __future__ import annotations

import torch


def exact_softplus(x: torch.Tensor) -> torch.Tensor:
    """x + log1p(e^-x) for x > 0, log1p(e^x) otherwise: each side well conditioned, no threshold."""
    tail = torch.log1p(torch.exp(-x.abs()))
    return torch.where(x > 0, x + tail, tail)


def exact_sigmoid(x: torch.Tensor) -> torch.Tensor:
    """1 / (1 + e^-x) for x >= 0, e^x / (1 + e^x) otherwise (no overflow on either side)."""
    e = torch.exp(-x.abs())
    return torch.where(x >= 0, 1 / (1 + e), e / (1 + e))


def chi_square_tail(stat: float, dof: int) -> float:
    """``P(chi2_dof > stat)``: the regularised upper incomplete gamma ``Q(dof / 2, stat / 2)`` (scipy's
    ``chi2.sf``)."""
    return float(torch.special.gammaincc(torch.tensor(dof / 2, dtype=torch.float64),
                                         torch.tensor(stat / 2, dtype=torch.float64)))
