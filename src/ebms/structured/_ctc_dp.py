"""The CTC recursion in log space over any semiring, differentiated by autograd (ebms's own DP).

On the extended label ``y' = (b, y_1, b, ..., y_L, b)`` (``N = 2L + 1`` states), from
``alpha_{-1} = one`` on state 0,

    alpha_t(s) = [ alpha_{t-1}(s) (+) alpha_{t-1}(s-1) (+) skip_s alpha_{t-1}(s-2) ] (x) lp_t(y'_s)
    total      = alpha_{T_b-1}(2L) (+) alpha_{T_b-1}(2L-1)

(Graves, Fernandez, Gomez & Schmidhuber, 2006, "Connectionist temporal classification"). Every
value stays a log (``logsumexp`` for the log semiring), so no product of probabilities is ever
formed and nothing underflows at any logit scale: the result is exact up to rounding in the
dtype of ``log_probs``. Cost ``O(T B N)`` time in ``T`` sequential vectorised steps and
``O(T B N)`` memory for autograd. This is the path for the max / k-max semirings, for second
derivatives, for dtypes torch's CTC kernel does not take, and ``method="dp"``.
"""

from __future__ import annotations

import torch
from torch import Tensor

from ebms.structured.semiring import Semiring

__all__ = ["dp_total", "extended_labels"]

NEG_INF = float("-inf")


def extended_labels(labels: Tensor, blank: int) -> tuple[Tensor, Tensor]:
    """``ext (B, N)`` (blank, y_1, blank, ..., y_L, blank; padding also blank) and ``skip (B, N)``
    (``y'_s`` not blank and different from ``y'_{s-2}``)."""
    b, s = labels.shape
    ext = labels.new_full((b, 2 * s + 1), blank)
    ext[:, 1::2] = labels
    skip = torch.zeros(b, 2 * s + 1, dtype=torch.bool, device=labels.device)
    skip[:, 2:] = (ext[:, 2:] != blank) & (ext[:, 2:] != ext[:, :-2])
    return ext, skip


def _safe_sum(semiring: Semiring, cand: Tensor) -> Tensor:
    """Semiring sum over the last axis; all-``zero`` cells stay ``zero`` with a zero gradient
    (``logsumexp`` of only ``-inf`` would back-propagate NaN)."""
    dead = torch.isneginf(cand).all(dim=-1).all(dim=0)
    out = semiring.sum(torch.where(dead.unsqueeze(-1), 0.0, cand), dim=-1)
    return torch.where(dead, semiring.zero, out)


def dp_total(log_probs: Tensor, labels: Tensor, input_lengths: Tensor, target_lengths: Tensor,
             blank: int, semiring: Semiring) -> Tensor:
    """Semiring total over the alignments: ``(B,)`` for size-1 semirings, else ``(k, B)``.

    Args:
        log_probs: ``(T, B, V)``.
        labels: ``(B, S)`` long, padding set to ``blank``.
        input_lengths: ``(B,)`` long in ``[0, T]``.
        target_lengths: ``(B,)`` long in ``[0, S]``.
        blank: the blank id.
        semiring: the semiring of the sums.
    """
    t, b, _ = log_probs.shape
    ext, skip = extended_labels(labels, blank)
    n = ext.shape[1]
    emissions = log_probs.gather(2, ext.unsqueeze(0).expand(t, b, n))  # (T, B, N)
    no_skip = (~skip).unsqueeze(0)
    init = emissions.new_full((b, n), NEG_INF)
    init[:, 0] = 0.0
    alpha = semiring.lift(init)  # (size, B, N)
    pad = alpha.new_full((*alpha.shape[:2], 2), NEG_INF)
    for step in range(int(input_lengths.max())):
        shifted = torch.cat([pad, alpha], dim=-1)
        prev2 = shifted[..., :-2].masked_fill(no_skip, NEG_INF)
        cand = torch.stack([alpha, shifted[..., 1:-1], prev2], dim=-1)
        new = semiring.times(_safe_sum(semiring, cand), emissions[step])
        alpha = torch.where((step < input_lengths).view(1, b, 1), new, alpha)
    last = (2 * target_lengths).view(1, b, 1).expand(alpha.shape[0], b, 1)
    end = alpha.gather(2, last).squeeze(-1)
    before = alpha.gather(2, (last - 1).clamp_min(0)).squeeze(-1)
    before = before.masked_fill((target_lengths == 0).view(1, b), NEG_INF)
    total = _safe_sum(semiring, torch.stack([end, before], dim=-1))
    return total.squeeze(0) if semiring.size == 1 else total
