r"""Dtype-aware elementwise numerics shared across the package (private).

:func:`softplus` and :func:`softplus_threshold` fix one float64 defect of
``torch.nn.functional.softplus``: above its default ``threshold=20`` it
returns ``x`` itself, dropping :math:`\log(1 + e^{-x}) \approx e^{-20}`,
harmless in float32 but about ``10^7`` ulps in float64. Every module that
needs a softplus, or its derivative :math:`\sigma(x)`, takes the cut-off from
here so that values and gradients agree to rounding in every dtype.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor

__all__ = ["softplus", "softplus_threshold"]


def softplus_threshold(dtype: torch.dtype) -> float:
    r"""Where ``softplus`` may return ``x`` (and its derivative 1) in ``dtype`` without error.

    The cut is ``t = max(20, ceil(-log eps))`` with ``eps`` the machine epsilon of ``dtype``:
    20 for float32 and narrower types (torch's default, so their results are unchanged) and 37
    for float64. Above ``t`` the dropped term :math:`\log(1 + e^{-x}) < e^{-t}` is below the unit
    round-off relative to ``x``, and so is :math:`1 - \sigma(x) < e^{-t}` for the derivative.

    Args:
        dtype: a floating dtype.

    Returns:
        The threshold as a Python float.
    """
    return max(20.0, float(math.ceil(-math.log(torch.finfo(dtype).eps))))


def softplus(x: Tensor) -> Tensor:
    r""":math:`\log(1 + e^x)` to the working precision of ``x``'s dtype, elementwise (differentiable).

    ``torch.nn.functional.softplus`` returns ``x`` itself above ``threshold=20``, dropping
    :math:`\log(1 + e^{-x}) \approx e^{-20} \approx 2\cdot 10^{-9}`: below half an ulp of ``x`` in
    float32, but about ``10^7`` ulps in float64, which biased float64 free energies, NCE losses and
    ``log Z`` by that much per term. The cut here is :func:`softplus_threshold` (``t = 37`` in
    float64), where :math:`e^{-t}` is below the unit round-off, so returning ``x`` is exact to
    rounding; below it, ``log1p(exp(x))`` is accurate (no overflow since ``t < 88``). Autograd
    uses the same cut, so the gradient :math:`\sigma(x)` is exact to rounding too. One fused
    kernel, as torch's (same speed); float32 results are bit-identical to torch's default.

    Args:
        x: any shape; integer tensors go to torch's default unchanged.

    Returns:
        Tensor of ``x``'s shape and dtype.
    """
    return F.softplus(x, threshold=softplus_threshold(x.dtype)) if x.is_floating_point() else F.softplus(x)
