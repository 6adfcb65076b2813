r"""Grid evaluation of 2-D energies: log Z and test log-likelihood up to grid error.

For an energy on :math:`\mathbb R^2` and a box
:math:`[x_0, x_1] \times [y_0, y_1]` cut into :math:`n \times n` cells of size
:math:`h_x \times h_y`, the midpoint rule gives

.. math::  \log Z_h = \log(h_x h_y) + \operatorname{logsumexp}_{ij}\, -E(c_{ij}),

with :math:`c_{ij}` the cell centres. Energies are evaluated in chunks of
``chunk`` points (memory ``O(chunk)`` for the energy's activations plus
``O(n^2)`` float64 for the stored grid) and accumulated in float64. Cost:
``1.25 n^2`` energy evaluations for :func:`grid_log_partition` (fine grid plus
the half-resolution grid).

What the number means, and when to distrust it:

* **Discretisation.** The reported ``stderr`` is not a sampling error: it is
  :math:`|\log Z_h - \log Z_{2h}|` (the fine grid against the half-resolution
  grid, Richardson style) plus a floating-point floor. If the rule converges
  at least linearly and monotonically in ``h`` this bounds the error of the
  fine value; for smooth energies the midpoint error is :math:`O(h^2)` and
  the actual error is about a third of it (the Richardson-extrapolated value
  is in ``settings["richardson"]``). Energies with kinks or jumps inside cells
  (ReLU nets, hard walls) converge more slowly; a sharp mode narrower than a
  cell can be missed by both grids, so choose cells well below the smallest
  feature.
* **Truncation.** Mass outside the box is not counted: the estimate is
  :math:`\log \int_{box}`, a lower bound on the full :math:`\log Z` (up to
  grid error). ``settings["edge_mass"]`` is the fraction of the grid mass in
  the outermost ring of cells; when it exceeds ``edge_tol`` a
  ``RuntimeWarning`` says to widen ``bounds``.

Reference: the midpoint rule and Richardson extrapolation as in any numerical
analysis text, e.g. Press, Teukolsky, Vetterling & Flannery (2007),
"Numerical Recipes", 3rd ed., ch. 4.
"""

from __future__ import annotations

import math
import warnings
from typing import TYPE_CHECKING, Any

import torch
from torch import Tensor

from ebms._checks import check_finite, check_int, check_shape, check_tensor
from ebms.capabilities import SupportsLogProb
from ebms.energy import EnergyLike
from ebms.estimators._base import Estimate
from ebms.estimators._grid_table import Bounds, GridEnergy, as_bounds, energies_at, grid_energy, grid_points, placement

if TYPE_CHECKING:
    from ebms.data.toy import ToyDataset

__all__ = [
    "Bounds",
    "GridEnergy",
    "as_bounds",
    "grid_energy",
    "grid_log_likelihood",
    "grid_log_partition",
    "grid_points",
    "true_log_likelihood",
]

#: Safety factor on machine epsilon in the floating-point floor of ``stderr``.
_ROUNDOFF_FACTOR = 8.0


#: default share of the grid mass allowed in the outermost cells before a warning.
EDGE_TOL = 1e-6

def _fmt_bounds(b: Any) -> str:
    """``((-3.4, 3.4), (-3.4, 3.4))`` with short numbers (no float noise in messages)."""
    return "(" + ", ".join(f"({lo:.4g}, {hi:.4g})" for lo, hi in b) + ")"


def grid_log_partition(
    energy: EnergyLike,
    bounds: Any,
    *,
    resolution: int = 512,
    chunk: int = 16384,
    edge_tol: float = EDGE_TOL,
    dtype: torch.dtype | None = None,
    device: torch.device | str | None = None,
) -> Estimate:
    r""":math:`\log Z` of a 2-D energy by the midpoint rule, with a grid-error estimate.

    Args:
        energy: ``(B, 2) -> (B,)``, ``p ∝ exp(-E)``; ``+inf`` marks zero density.
        bounds: the box (see :func:`as_bounds`); it should hold essentially all the mass.
        resolution: even number of cells per axis ``n`` (the check grid has ``n/2``).
        chunk: points per energy call.
        edge_tol: warn when more than this fraction of the mass sits in the
            outermost cells (the box probably truncates the density).
        dtype, device: of the grid points (see :func:`grid_energy`).

    Returns:
        :class:`Estimate` with ``estimate`` the fine-grid value, ``stderr`` the
        discretisation estimate :math:`|\log Z_h - \log Z_{2h}|` plus a
        floating-point floor :math:`8\epsilon (1 + E_p|E|)`, and ``settings``
        holding ``resolution``, ``bounds``, ``log_z_coarse``, ``richardson``,
        ``discretisation_error``, ``roundoff_floor``, ``edge_mass``.
    """
    check_int(resolution, "resolution", minimum=4)
    if resolution % 2:
        raise ValueError(f"resolution: expected an even number (the check grid uses n/2); got {resolution}")
    b = as_bounds(bounds)
    kw: dict[str, Any] = dict(chunk=chunk, dtype=dtype, device=device)
    fine = grid_energy(energy, b, resolution=resolution, **kw)
    coarse = grid_energy(energy, b, resolution=resolution // 2, **kw)
    lz, lz2 = fine.log_partition(), coarse.log_partition()
    p = torch.softmax(-fine.energy.reshape(-1), dim=0).reshape(fine.energy.shape)
    mean_abs_e = float(torch.where(p > 0, p * fine.energy.abs(), torch.zeros_like(p)).sum())
    floor = _ROUNDOFF_FACTOR * fine.eps * (1.0 + mean_abs_e)
    disc = abs(lz - lz2)
    edge = float(p[0].sum() + p[-1].sum() + p[1:-1, 0].sum() + p[1:-1, -1].sum())
    if edge > edge_tol:
        warnings.warn(
            f"bounds: {edge:.2e} of the grid mass lies in the outermost cells of {_fmt_bounds(b)}; the box probably "
            "cuts off part of the density (log Z is then too low). Widen bounds.",
            RuntimeWarning,
            stacklevel=2,
        )
    step = (1.0 - math.exp(min(lz2 - lz, 700.0))) / 3.0  # Z_R / Z_h - 1
    richardson = lz + math.log1p(step) if step > -1.0 else None
    settings = {
        "method": "midpoint",
        "resolution": resolution,
        "bounds": b,
        "cell_area": fine.cell_area,
        "log_z_coarse": lz2,
        "richardson": richardson,
        "discretisation_error": disc,
        "roundoff_floor": floor,
        "edge_mass": edge,
    }
    return Estimate(estimate=lz, stderr=disc + floor, settings=settings)


def _mean_estimate(values: Tensor, settings: dict[str, Any]) -> Estimate:
    n = values.numel()
    mean = float(values.mean())
    stderr = float(values.std(unbiased=True)) / math.sqrt(n)
    return Estimate(estimate=mean, stderr=stderr, ess=float(n), settings={"n": n, **settings})


def _check_points(x: Any, name: str = "x") -> Tensor:
    check_tensor(x, name, floating=True)
    check_shape(x, (None, 2), name)
    if x.shape[0] < 2:
        raise ValueError(f"{name}: expected at least 2 points (for a standard error); got shape {tuple(x.shape)}")
    return check_finite(x, name)


def grid_log_likelihood(
    energy: EnergyLike,
    x: Tensor,
    bounds: Any,
    *,
    resolution: int = 512,
    chunk: int = 16384,
    log_z: Estimate | None = None,
    edge_tol: float = EDGE_TOL,
) -> Estimate:
    r"""Mean test log-likelihood :math:`\frac1N \sum_i -E(x_i) - \log Z` with grid ``log Z``.

    Args:
        energy: ``(B, 2) -> (B,)``.
        x: test points ``(N, 2)``, ``N >= 2``, finite.
        bounds, resolution, chunk, edge_tol: passed to :func:`grid_log_partition`.
        log_z: a precomputed :func:`grid_log_partition` result to reuse
            (then ``bounds`` is only used to count points outside the box).

    Returns:
        :class:`Estimate` with ``stderr = std(log p(x_i)) / sqrt(N)`` (the
        sampling error over test points). The grid error of ``log Z`` shifts
        every term equally; it is *not* in ``stderr`` but reported as
        ``settings["log_z_error"]`` (add it when comparing models evaluated
        with different grids). ``settings["outside_fraction"]`` counts test
        points outside the box, its bounds as ``x``'s dtype holds them (a
        warning is raised when it is not 0: the box truncates the data).
    """
    x = _check_points(x)
    b = as_bounds(bounds)
    if log_z is None:
        log_z = grid_log_partition(energy, b, resolution=resolution, chunk=chunk, edge_tol=edge_tol)
    elif not isinstance(log_z, Estimate):
        raise TypeError(f"log_z: expected an Estimate from grid_log_partition or None; got {type(log_z).__name__}")
    dtype, device = placement(energy)
    e, _ = energies_at(energy, x.to(dtype=dtype, device=device), chunk, "x")
    if bool(torch.isinf(e).any()):
        raise ValueError(
            f"x: the model gives zero density (E = +inf) to {int(torch.isinf(e).sum())} test point(s); "
            "the log-likelihood is -inf"
        )
    # the bounds as x's dtype holds them (rounded to nearest): a float32 point at -3.4 is at the edge of
    # the box [-3.4, 3.4], not outside it, although it lies below -3.4 in float64
    lo = torch.tensor([b[0][0], b[1][0]], dtype=torch.float64).to(x.dtype)
    hi = torch.tensor([b[0][1], b[1][1]], dtype=torch.float64).to(x.dtype)
    xc = x.detach().cpu()
    inside = ((xc >= lo) & (xc <= hi)).all(1)
    outside = 1.0 - float(inside.double().mean())
    if outside > 0:
        warnings.warn(
            f"x: {outside:.2%} of the test points lie outside bounds {b}; log Z misses that region. Widen bounds.",
            RuntimeWarning,
            stacklevel=2,
        )
    settings = {
        "log_z": log_z.estimate,
        "log_z_error": log_z.stderr,
        "outside_fraction": outside,
        "grid": dict(log_z.settings),
    }
    return _mean_estimate(-e.cpu() - log_z.estimate, settings)


def true_log_likelihood(dataset: ToyDataset, x: Tensor) -> Estimate:
    """Mean exact log-density of ``x`` under a toy set with ``has_density`` (float64).

    Returns:
        :class:`Estimate` with ``stderr = std(log p(x_i)) / sqrt(N)``.

    Raises:
        ValueError: the set has no closed-form density, or some ``x`` has
            zero density (log-likelihood ``-inf``).
    """
    x = _check_points(x)
    if not isinstance(dataset, SupportsLogProb):
        raise TypeError(f"dataset: expected a ToyDataset (with log_prob); got {type(dataset).__name__}")
    lp = dataset.log_prob(x.double()).cpu()  # float64: no rounding of the density values
    if bool(torch.isinf(lp).any()):
        raise ValueError(f"x: {int(torch.isinf(lp).sum())} point(s) have zero density under {dataset!r}")
    return _mean_estimate(lp, {"dataset": repr(dataset)})
