"""Tabulating a 2-D energy on a grid of cell centres (the part shared by the grid estimators and plots).

Points are cell centres of an ``n x n`` grid over a box; energies are
evaluated in chunks without gradients and kept as float64 ``(n, n)`` tables
indexed ``[y, x]``. ``NaN`` and ``-inf`` energies are errors; ``+inf`` means
zero density. See :mod:`ebms.estimators.grid` for what the tables are used for.
"""

from __future__ import annotations

import math
import numbers
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor, nn

from ebms._checks import check_int
from ebms.energy import EnergyLike, evaluate
from ebms.samplers import energy_dtype

__all__ = ["Bounds", "GridEnergy", "as_bounds", "energies_at", "grid_energy", "grid_points", "placement"]

#: ``((x_lo, x_hi), (y_lo, y_hi))``.
Bounds = tuple[tuple[float, float], tuple[float, float]]


def as_bounds(bounds: Any, name: str = "bounds") -> Bounds:
    """Normalise ``L`` (→ ``[-L, L]^2``), ``(lo, hi)`` (both axes) or ``((x0, x1), (y0, y1))``."""
    try:
        if isinstance(bounds, numbers.Real) and not isinstance(bounds, bool):
            pairs = [(-float(bounds), float(bounds))] * 2
        elif len(bounds) == 2 and all(isinstance(b, numbers.Real) for b in bounds):
            pairs = [(float(bounds[0]), float(bounds[1]))] * 2
        elif len(bounds) == 2 and all(len(b) == 2 for b in bounds):
            pairs = [(float(b[0]), float(b[1])) for b in bounds]
        else:
            raise TypeError
    except (TypeError, ValueError):
        raise TypeError(
            f"{name}: expected L, (lo, hi) or ((x_lo, x_hi), (y_lo, y_hi)); got {bounds!r}"
        ) from None
    for lo, hi in pairs:
        if not (math.isfinite(lo) and math.isfinite(hi) and lo < hi):
            raise ValueError(f"{name}: expected finite intervals with lo < hi; got {bounds!r}")
    return (pairs[0], pairs[1])


def grid_points(
    bounds: Any,
    resolution: int,
    *,
    dtype: torch.dtype = torch.float32,
    device: torch.device | str | None = None,
) -> tuple[Tensor, Tensor, Tensor]:
    """Cell centres of an ``n x n`` grid: ``xs (n,)``, ``ys (n,)``, ``points (n*n, 2)``.

    ``points[i * n + j] = (xs[j], ys[i])`` (row ``i`` is one ``y``), so values
    reshape to ``(n, n)`` images indexed ``[y, x]``.
    """
    (x0, x1), (y0, y1) = as_bounds(bounds)
    n = check_int(resolution, "resolution", minimum=1)
    centres = (torch.arange(n, dtype=torch.float64) + 0.5) / n
    xs, ys = x0 + (x1 - x0) * centres, y0 + (y1 - y0) * centres
    gy, gx = torch.meshgrid(ys, xs, indexing="ij")
    points = torch.stack([gx.reshape(-1), gy.reshape(-1)], dim=1)
    return xs.to(device), ys.to(device), points.to(dtype=dtype, device=device)


@dataclass(frozen=True)
class GridEnergy:
    """An energy tabulated at the cell centres of a grid.

    Attributes:
        xs: cell centres along ``x``, ``(n,)`` float64.
        ys: cell centres along ``y``, ``(n,)`` float64.
        energy: ``E`` at ``(xs[j], ys[i])`` stored at ``[i, j]``, ``(n, n)``
            float64; ``+inf`` where the density is zero.
        cell_area: ``h_x h_y``.
        eps: machine epsilon of the energy's output dtype (its rounding level).
    """

    xs: Tensor
    ys: Tensor
    energy: Tensor
    cell_area: float
    eps: float

    def log_partition(self) -> float:
        """Midpoint-rule ``log Z`` over the box (float)."""
        lz = float(torch.logsumexp(-self.energy.reshape(-1), dim=0)) + math.log(self.cell_area)
        if not math.isfinite(lz):
            raise ValueError("energy: expected a finite density somewhere on the grid; got E = +inf at every point")
        return lz

    def log_density(self) -> Tensor:
        """``-E - log Z`` normalised over the box, ``(n, n)`` float64."""
        return -self.energy - self.log_partition()


def placement(energy: EnergyLike) -> tuple[torch.dtype, torch.device]:
    """dtype and device of the energy's first floating parameter or buffer (float32/CPU if none)."""
    if isinstance(energy, nn.Module):
        for t in list(energy.parameters()) + list(energy.buffers()):
            if t.is_floating_point():
                return t.dtype, t.device
    return torch.float32, torch.device("cpu")


def energies_at(energy: EnergyLike, points: Tensor, chunk: int, name: str) -> tuple[Tensor, torch.dtype]:
    """``E`` at ``points`` in chunks as float64 ``(N,)``, and the energy's own dtype.

    NaN and ``-inf`` are errors (``+inf`` is a zero density).
    """
    with torch.no_grad():
        raw = [evaluate(energy, p) for p in points.split(chunk)]
    out = torch.cat([r.to(torch.float64) for r in raw])
    bad = torch.isnan(out) | (out == -math.inf)
    if bool(bad.any()):
        i = int(bad.nonzero()[0])
        raise ValueError(
            f"energy: expected finite values or +inf on {name}; got {int(torch.isnan(out).sum())} NaN and "
            f"{int((out == -math.inf).sum())} -inf (first at x={points[i].tolist()})"
        )
    return out, raw[0].dtype


def grid_energy(
    energy: EnergyLike,
    bounds: Any,
    *,
    resolution: int = 256,
    chunk: int = 16384,
    dtype: torch.dtype | None = None,
    device: torch.device | str | None = None,
) -> GridEnergy:
    """Tabulate ``energy`` on the ``resolution x resolution`` cell centres of ``bounds``.

    Args:
        energy: ``(B, 2) -> (B,)``.
        bounds: see :func:`as_bounds`.
        resolution: cells per axis.
        chunk: points per energy call.
        dtype, device: of the points; default: the energy's first floating
            parameter or buffer, else float32 on CPU. A ``dtype`` other than that of the
            energy's parameters is a ``TypeError`` (the energy could not take the points).
    """
    check_int(resolution, "resolution", minimum=2)
    check_int(chunk, "chunk", minimum=1)
    b = as_bounds(bounds)
    want = energy_dtype(energy)
    if dtype is not None and want is not None and dtype != want:
        raise TypeError(f"dtype: expected None or {want}, the dtype of the energy's parameters; got {dtype} "
                        f"(convert the model with model.to({dtype}) to tabulate it in {dtype})")
    d0, dev0 = placement(energy)
    dtype, device = dtype or d0, device or dev0
    xs, ys, pts = grid_points(b, resolution, dtype=dtype, device=device)
    n = resolution
    area = (b[0][1] - b[0][0]) * (b[1][1] - b[1][0]) / (n * n)
    e, out_dtype = energies_at(energy, pts, chunk, "the grid")
    eps = torch.finfo(out_dtype if out_dtype.is_floating_point else dtype).eps
    return GridEnergy(xs.cpu(), ys.cpu(), e.reshape(n, n).cpu(), area, float(eps))
