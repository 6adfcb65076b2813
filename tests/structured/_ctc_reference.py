"""An independent CTC reference for the tests: Graves et al.'s (2006) forward-backward in log space.

One sequence at a time, float64, written from the paper's equations (Eq. 6-16) without any
ebms or torch CTC code: ``alpha``/``beta`` over the extended label, ``log p = logaddexp`` of the
last two ``alpha`` states, and the occupancies ``gamma_t(k) = sum_{s: y'_s = k}
exp(alpha_t(s) + beta_t(s) - lp_t(y'_s) - log p)``, the exact ``d log p / d lp_t(k)``.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

NEG_INF = -math.inf


def _lse(*xs: Tensor) -> Tensor:
    stacked = torch.stack(xs)
    top = stacked.max(0).values
    safe = torch.where(torch.isneginf(top), 0.0, top)
    return torch.where(torch.isneginf(top), NEG_INF, safe + (stacked - safe).exp().sum(0).log())


def reference_ctc(lp: Tensor, target: list[int], blank: int = 0) -> tuple[float, Tensor]:
    """``(log p(y | x), d log p / d lp)`` for one sequence ``lp (T, V)`` (used frames only)."""
    lp = lp.detach().double()
    t_len, v = lp.shape
    ext = [blank]
    for k in target:
        ext += [k, blank]
    n = len(ext)
    grad = torch.zeros(t_len, v, dtype=torch.float64)
    if t_len == 0:
        return (0.0 if not target else NEG_INF), grad
    idx = torch.tensor(ext)
    skip = torch.tensor([s >= 2 and ext[s] != blank and ext[s] != ext[s - 2] for s in range(n)])
    ninf = torch.full((2,), NEG_INF, dtype=torch.float64)
    alpha = torch.full((t_len, n), NEG_INF, dtype=torch.float64)
    alpha[0, 0] = lp[0, blank]
    if n > 1:
        alpha[0, 1] = lp[0, ext[1]]
    for t in range(1, t_len):
        prev = alpha[t - 1]
        one = torch.cat([ninf[:1], prev[:-1]])
        two = torch.where(skip, torch.cat([ninf, prev[:-2]]), NEG_INF)
        alpha[t] = _lse(prev, one, two) + lp[t, idx]
    ll = float(_lse(alpha[-1, -1], alpha[-1, -2] if n > 1 else torch.tensor(NEG_INF, dtype=torch.float64)))
    if ll == NEG_INF:
        return ll, grad
    skip_next = torch.cat([skip[2:], torch.zeros(2, dtype=torch.bool)])  # skip_{s+2}
    beta = torch.full((t_len, n), NEG_INF, dtype=torch.float64)
    beta[-1, -1] = lp[-1, ext[-1]]
    if n > 1:
        beta[-1, -2] = lp[-1, ext[-2]]
    for t in range(t_len - 2, -1, -1):
        nxt = beta[t + 1]
        one = torch.cat([nxt[1:], ninf[:1]])
        two = torch.where(skip_next, torch.cat([nxt[2:], ninf]), NEG_INF)
        beta[t] = _lse(nxt, one, two) + lp[t, idx]
    expo = alpha + beta - lp[:, idx] - ll
    gamma = torch.where(torch.isneginf(expo) | torch.isnan(expo), 0.0, expo.exp())
    grad.index_add_(1, idx, gamma)
    return ll, grad


def reference_batch(lp: Tensor, targets: list[list[int]], input_lengths: list[int],
                    blank: int = 0) -> tuple[Tensor, Tensor]:
    """``(log p (B,), gradient (T, B, V))`` for ``lp (T, B, V)``, sequence by sequence."""
    lls, grad = [], torch.zeros(lp.shape, dtype=torch.float64)
    for b, (y, n) in enumerate(zip(targets, input_lengths)):
        ll, g = reference_ctc(lp[:n, b], y, blank)
        lls.append(ll)
        grad[:n, b] = g
    return torch.tensor(lls, dtype=torch.float64), grad
