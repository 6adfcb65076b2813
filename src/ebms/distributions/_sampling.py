"""Categorical draws from a torch.Generator, shared by the discrete distributions and the samplers."""

from __future__ import annotations

import torch
from torch import Tensor


def sample_categorical(logits: Tensor, generator: torch.Generator | None) -> Tensor:
    """One draw per row of ``softmax(logits)`` over the last axis: ``LongTensor logits.shape[:-1]``.

    Inverse CDF with one uniform per row, scaled by the row's total so that rounding can never pick
    a category of probability zero (its CDF step is flat). Two categories use one comparison,
    category 1 iff ``u < sigmoid(l_1 - l_0)``. ``-inf`` logits are allowed (probability 0). Rows
    with NaN or all-``-inf`` logits give an arbitrary category; the discrete samplers detect them
    (``nonfinite_rows``) and keep those chains where they were. Shared by the discrete
    distributions and every discrete sampler.
    """
    if logits.shape[-1] == 2:
        p1 = torch.sigmoid(logits[..., 1] - logits[..., 0])
        u = torch.rand(p1.shape, generator=generator, device=p1.device, dtype=p1.dtype)
        return (u < p1).long()
    cdf = torch.softmax(logits, -1).cumsum(-1)
    u = torch.rand((*cdf.shape[:-1], 1), generator=generator, device=cdf.device, dtype=cdf.dtype)
    idx = torch.searchsorted(cdf, u * cdf[..., -1:], right=True).squeeze(-1)
    return idx.clamp_(max=logits.shape[-1] - 1)
