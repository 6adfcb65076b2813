r"""Temperature, top-k and nucleus (top-p) restriction of next-token logits.

The sampling law at one step is built in this order (the order of most generation libraries):

1. temperature: :math:`\ell / \tau`;
2. top-k: outcomes whose tempered logit is below the ``k``-th largest get :math:`-\infty`
   (outcomes tied with the ``k``-th largest are all kept, so the support may exceed ``k`` on ties);
3. top-p: with :math:`\pi` the softmax of the result sorted in decreasing order, outcome number
   ``i`` of that order is kept when the mass before it, :math:`\sum_{j < i} \pi_j`, is below ``p``
   — the smallest prefix of the order holding at least ``p`` of the mass (the most likely outcome
   always stays).

References: Fan, Lewis & Dauphin 2018, *Hierarchical neural story generation* (top-k);
Holtzman, Buys, Du, Forbes & Choi 2020, *The curious case of neural text degeneration* (top-p).
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from ebms._checks import check_int, check_positive

__all__ = ["check_filter", "filter_logits"]


def check_filter(temperature: float, top_k: int | None, top_p: float | None) -> tuple[float, int | None, float | None]:
    """Validate the three settings once (``temperature > 0`` finite, ``top_k >= 1``, ``0 < top_p <= 1``)."""
    temperature = check_positive(temperature, "temperature")
    if top_k is not None:
        top_k = check_int(top_k, "top_k", minimum=1)
    if top_p is not None:
        try:
            p = float(top_p)
        except (TypeError, ValueError):
            raise TypeError(f"top_p: expected a number in (0, 1] or None; got {top_p!r}") from None
        if not (math.isfinite(p) and 0.0 < p <= 1.0):
            raise ValueError(f"top_p: expected a number in (0, 1] or None; got {top_p!r}")
        top_p = p
    return temperature, top_k, top_p


def filter_logits(logits: Tensor, *, temperature: float = 1.0, top_k: int | None = None,
                  top_p: float | None = None) -> Tensor:
    """The logits of the restricted sampling law over the last axis (see the module docstring).

    Args:
        logits: ``(..., V)`` floating logits (``-inf`` allowed; at least one finite per row).
        temperature: ``tau > 0``.
        top_k: keep the ``k`` largest (``None``: all; ``k >= V`` keeps all).
        top_p: nucleus mass in ``(0, 1]`` (``None`` or ``1``: all).

    Returns:
        ``(..., V)`` logits: the tempered ones with ``-inf`` at excluded outcomes, so that
        ``log_softmax`` of the result is the restricted law's log-probability (``-inf`` off its
        support). Cost ``O(V)`` per row without top-p, one sort ``O(V log V)`` with it.

    Example:
        >>> import torch
        >>> filter_logits(torch.tensor([0.0, 2.0, 1.0]), top_k=2)
        tensor([-inf, 2., 1.])
    """
    temperature, top_k, top_p = check_filter(temperature, top_k, top_p)
    out = logits / temperature if temperature != 1.0 else logits
    if top_k is not None and top_k < out.shape[-1]:
        kth = torch.topk(out, top_k, dim=-1).values[..., -1:]
        out = out.masked_fill(out < kth, -math.inf)
    if top_p is not None and top_p < 1.0:
        sorted_logits, order = torch.sort(out, dim=-1, descending=True)
        probs = torch.softmax(sorted_logits, dim=-1)
        before = probs.cumsum(-1) - probs  # mass strictly before each sorted outcome
        drop_sorted = before >= top_p
        drop_sorted[..., 0] = False
        drop = torch.zeros_like(drop_sorted).scatter(-1, order, drop_sorted)
        out = out.masked_fill(drop, -math.inf)
    return out
