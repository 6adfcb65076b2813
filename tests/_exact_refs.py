"""Closed-form float64 references shared by the precision tests (no thresholds, no cut-offs)."""

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
