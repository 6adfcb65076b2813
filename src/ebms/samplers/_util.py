"""Small per-chain helpers shared by the gradient kernels (ULA/SGLD, MALA, HMC)."""

from __future__ import annotations

import torch
from torch import Tensor

from ebms.samplers._base import ChainState
from ebms.spaces import Space

__all__ = ["check_grad_state", "finite_rows", "in_space", "sq_norm"]


def sq_norm(v: Tensor) -> Tensor:
    """Squared Euclidean norm per chain, ``(B, *event) -> (B,)``."""
    return (v * v).flatten(1).sum(1)


def in_space(space: Space | None, x: Tensor) -> Tensor | None:
    """Per-chain flag: ``x`` already lies in ``space`` (``project`` is the identity there)."""
    if space is None:
        return None
    return (space.project(x) == x).flatten(1).all(1)


def check_grad_state(state: ChainState, name: str = "state") -> Tensor:
    """Shape checks on a state handed to a gradient kernel (no host sync); returns the cached grad."""
    if state.grad is None:
        raise ValueError(
            f"{name}.grad: expected the cached gradient (B, *event); got None "
            "(start the chain with this sampler's init)"
        )
    b = state.x.shape[0]
    eps = state.step_size
    if not (eps.dim() == 0 or tuple(eps.shape) == (b,)):
        raise ValueError(f"{name}.step_size: expected shape () or ({b},); got {tuple(eps.shape)}")
    return state.grad


def finite_rows(e: Tensor, g: Tensor) -> Tensor:
    """``(B,)`` bool: ``e[i]`` and row ``i`` of ``g`` are free of NaN/Inf.

    Same result as ``isfinite(e) & isfinite(g).flatten(1).all(1)``, cheaper:
    ``amax``/``amin`` propagate NaN and expose ``±Inf``, and ``v * 0`` is 0
    for finite ``v`` and NaN otherwise, so each row sum below is exactly 0
    iff its three entries are finite. Two allocation-free reductions over
    ``g`` and four ``(B,)``-sized kernels, instead of a bool copy of ``g``.
    """
    rows = g.reshape(g.shape[0], -1)
    probe = torch.stack((e, rows.amax(1), rows.amin(1)), dim=1)  # (B, 3)
    return probe.mul_(0).sum(1) == 0
