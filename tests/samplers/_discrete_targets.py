"""Small enumerable discrete targets shared by the sampler tests (imported by bare name)."""

from __future__ import annotations

import torch

from ebms.energy import from_fn


def _symmetric(n: int, scale: float, g: torch.Generator, block: int = 1) -> torch.Tensor:
    a = torch.randn(n, n, generator=g) * scale
    j = (a + a.T) / 2**0.5
    same = torch.arange(n) // block
    return j * (same[:, None] != same[None, :])


def ising_parts(scale: float = 1.0):
    """10 spins, E(s) = -s^T J s / 2 - h.s with random symmetric J (zero diagonal) and field h.

    Returns ``(energy, J, h)``."""
    g = torch.Generator().manual_seed(0)
    J, h = _symmetric(10, 0.3 * scale, g), torch.randn(10, generator=g) * 0.2 * scale
    return from_fn(lambda s: -0.5 * ((s @ J) * s).sum(-1) - s @ h), J, h


def ising_energy():
    """The 10-spin energy of :func:`ising_parts` alone."""
    return ising_parts()[0]


def potts_energy():
    """3x3 sites with 3 states (one-hot x: (B, 3, 3, 3)), E = -x^T W x / 2 - b.x, W symmetric, no self-coupling."""
    g = torch.Generator().manual_seed(1)
    W, b = _symmetric(27, 0.5, g, block=3), torch.randn(27, generator=g) * 0.3

    def energy(x):
        f = x.reshape(x.shape[0], 27)
        return -0.5 * ((f @ W) * f).sum(-1) - f @ b

    return from_fn(energy)


def rbm_free_energy():
    """Binary RBM free energy, 10 visible and 4 hidden units: F(v) = -b.v - sum_j softplus(a_j + (vW)_j)."""
    g = torch.Generator().manual_seed(2)
    W, a, b = (
        torch.randn(10, 4, generator=g) * 0.8,
        torch.randn(4, generator=g) * 0.5,
        torch.randn(10, generator=g) * 0.5,
    )
    return from_fn(lambda v: -v @ b - torch.nn.functional.softplus(a + v @ W).sum(-1))
