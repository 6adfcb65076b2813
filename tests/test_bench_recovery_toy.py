"""benchmarks/recovery_toy.py: the exact noise-level energies are the diffused, scaled data law."""

from __future__ import annotations

import math
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
import recovery_toy  # noqa: E402

from ebms.data.toy import get_toy  # noqa: E402


def test_level_zero_energy_is_the_data_law_after_scaling():
    sig = recovery_toy.SCHEDULES["increasing"]
    c = math.sqrt(1 - sig[0] ** 2)
    x = get_toy("eight_gaussians", noise=recovery_toy.NOISE).sample(50, generator=torch.Generator().manual_seed(0))
    energy = recovery_toy.ExactLevelEnergy(sig)(c * x.double(), torch.zeros(50, dtype=torch.long))
    log_p = get_toy("eight_gaussians", noise=recovery_toy.NOISE).log_prob(x.double())
    assert torch.allclose(-energy, log_p - 2 * math.log(c), atol=1e-9)  # p_y(y) = p_x(y / c) / c^2


def test_every_level_energy_normalises_on_a_grid():
    sig = recovery_toy.SCHEDULES["flat"]
    model = recovery_toy.ExactLevelEnergy(sig)
    h = 0.01
    axis = torch.arange(-3.0, 3.0, h, dtype=torch.float64)
    grid = torch.cartesian_prod(axis, axis)
    for t in range(len(sig)):
        e = model(grid, torch.full((grid.shape[0],), t, dtype=torch.long))
        assert abs(float((-e).exp().sum() * h * h) - 1.0) < 1e-6, t


def test_near_counts_points_within_the_radius_of_a_mode():
    pts = torch.tensor([[2.0, 0.0], [2.29, 0.0], [2.31, 0.0], [0.0, 0.0]], dtype=torch.float64)
    assert recovery_toy.near(pts) == 0.5
