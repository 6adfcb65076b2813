r"""Annealed importance sampling at fixed sentence lengths, all lengths of a batch at once.

Path at length :math:`l`: :math:`\log f_\beta(x) = (1-\beta)\log q(x \mid l) - \beta E(x)`, so
:math:`Z_0 = 1` (``q`` normalised at each length) and :math:`Z_1 = Z_l`. Chains of every length
share each temperature's kernel call (a kernel over :class:`~ebms.sequences.Sequences` keeps each
chain's length), and their log weights are summarised length by length. The loops follow
:func:`ebms.estimators.ais` and :func:`ebms.estimators.reverse_ais` (same schedule convention, same
weight statistics), which take tensors rather than ``Sequences``.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from ebms._progress import progress_bar
from ebms.estimators._seq_common import AnnealedSentenceEnergy
from ebms.sequences import Sequences


def _transition(kernel: Any, target: AnnealedSentenceEnergy, x: Sequences, beta: float, steps: int,
                generator: torch.Generator | None) -> Sequences:
    """``steps`` kernel steps on :math:`f_\\beta` from ``x`` (a fresh state: the cached energy changes with beta)."""
    target.beta = beta
    state = kernel.init(target, x)
    for _ in range(steps):
        state, _ = kernel.step(target, state, generator=generator)
    y = kernel.target(state)
    if not isinstance(y, Sequences) or not torch.equal(y.lengths, x.lengths):
        raise ValueError(f"kernel: expected a kernel that keeps each chain's length (e.g. "
                         f"TransDimensional(jump=False), Gibbs, MetropolisHastings); {kernel!r} changed them")
    return y


def _log_ratio(target: AnnealedSentenceEnergy, x: Sequences) -> Tensor:
    r""":math:`-E(x) - \log q(x \mid l)`, the slope of :math:`\log f_\beta` in :math:`\beta`."""
    e, lq = target.parts(x)
    return -e - lq


def annealed_weights(target: AnnealedSentenceEnergy, kernel: Any, x: Sequences, betas: tuple[float, ...],
                     steps: int, generator: torch.Generator | None, progress: bool = False, *,
                     reverse: bool = False) -> Tensor:
    r"""AIS log weights, float64 ``(B,)``: forward from base draws ``x`` (of :math:`Z_l / 1`), or with
    ``reverse`` from target draws ``x`` down the same schedule (of :math:`1 / Z_l`)."""
    log_w = torch.zeros(x.batch_size, dtype=torch.float64, device=x.device)
    K = len(betas) - 1
    with torch.no_grad():
        slope = _log_ratio(target, x)
        for k in _loop(range(K, 0, -1) if reverse else range(1, K + 1), progress, "reverse AIS" if reverse else "AIS"):
            if betas[k] != betas[k - 1]:
                log_w += (betas[k - 1] - betas[k] if reverse else betas[k] - betas[k - 1]) * slope
            if (k > 1) if reverse else (k < K):  # the next temperature's kernel moves the chains there
                x = _transition(kernel, target, x, betas[k - 1] if reverse else betas[k], steps, generator)
                slope = _log_ratio(target, x)
    return log_w


def _loop(indices: range, progress: bool, desc: str) -> Any:
    return progress_bar(indices, desc=desc, enabled=progress, leave=False) if progress else indices
