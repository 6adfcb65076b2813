r"""Pictures of 2-D energies and of 2-D samples.

:func:`plot_energy` tabulates the energy on a grid with
:func:`ebms.estimators.grid.grid_energy` and shows the density
:math:`\exp(-E)/Z` (``Z`` by the midpoint rule over the shown box), the
log-density, or the raw energy. :func:`plot_samples` is a scatter plot with the
same axes conventions, so the two overlay on one ``ax``. :func:`plot_points` shows points of
any dimension in one panel (a histogram in 1-D, the first two coordinates otherwise), and
:func:`plot_energy_and_density` puts a 2-D energy beside its normalised density.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from matplotlib.axes import Axes
from matplotlib.figure import Figure

from ebms.energy import EnergyLike
from ebms.estimators.grid import as_bounds, grid_energy
from ebms.viz.figure import as_float64, axes_or_new, new_figure

__all__ = ["PLOT_KINDS", "plot_energy", "plot_energy_and_density", "plot_points", "plot_samples"]

#: Valid ``kind`` values for :func:`plot_energy`.
PLOT_KINDS = ("density", "energy", "log_density")


def plot_energy(
    energy: EnergyLike,
    bounds: Any,
    *,
    resolution: int = 200,
    ax: Axes | None = None,
    kind: str = "density",
    cmap: str = "viridis",
    colorbar: bool = True,
    title: str | None = None,
    chunk: int = 16384,
) -> Figure:
    r"""Image of a 2-D energy on a ``resolution x resolution`` grid.

    Args:
        energy: ``(B, 2) -> (B,)``.
        bounds: the box shown (``L``, ``(lo, hi)`` or ``((x0, x1), (y0, y1))``).
        resolution: cells per axis (cost: ``resolution^2`` energy evaluations).
        ax: draw into this axes; a new figure otherwise.
        kind: ``"density"`` (:math:`e^{-E}/Z`, ``Z`` over the box),
            ``"log_density"`` (:math:`-E - \log Z`) or ``"energy"`` (``E``;
            ``+inf`` cells are left blank).
        cmap, colorbar, title: presentation.
        chunk: points per energy call.

    Returns:
        The figure holding the axes.
    """
    if kind not in PLOT_KINDS:
        raise ValueError(f"kind: expected one of {', '.join(PLOT_KINDS)}; got {kind!r}")
    b = as_bounds(bounds)
    grid = grid_energy(energy, b, resolution=resolution, chunk=chunk)
    if kind == "energy":
        values = grid.energy
    else:
        values = grid.log_density()
        if kind == "density":
            values = values.exp()
    img = np.ma.masked_invalid(values.numpy())
    fig, ax = axes_or_new(ax, (5.0, 4.2 if colorbar else 4.0))
    im = ax.imshow(
        img, origin="lower", extent=(b[0][0], b[0][1], b[1][0], b[1][1]), cmap=cmap, interpolation="nearest"
    )
    ax.set_aspect("equal")
    ax.set_xlim(*b[0])
    ax.set_ylim(*b[1])
    if colorbar:
        fig.colorbar(im, ax=ax, shrink=0.85, label=kind.replace("_", " "))
    if title is not None:
        ax.set_title(title)
    return fig


def _as_points(x: Any, name: str) -> np.ndarray:
    arr = as_float64(x, name, "of shape (N, 2)")
    if arr.ndim != 2 or arr.shape[1] != 2 or arr.shape[0] < 1:
        raise ValueError(f"{name}: expected shape (N, 2) with N >= 1; got {tuple(arr.shape)}")
    bad = ~np.isfinite(arr).all(axis=1)
    if bad.any():
        raise ValueError(
            f"{name}: expected finite points; got {int(bad.sum())} of {arr.shape[0]} rows with NaN/Inf "
            "(a diverged sampler?)"
        )
    return arr


def plot_samples(
    x: Any,
    *,
    ax: Axes | None = None,
    bounds: Any = None,
    size: float = 2.0,
    alpha: float = 0.5,
    color: str = "C0",
    title: str | None = None,
) -> Figure:
    """Scatter plot of 2-D points.

    Args:
        x: ``(N, 2)`` tensor or array, finite (non-finite rows are an error,
            not silently dropped).
        ax: draw into this axes; a new figure otherwise.
        bounds: fix the axis limits to this box (see
            :func:`ebms.estimators.grid.as_bounds`); data limits otherwise.
        size, alpha, color, title: presentation.

    Returns:
        The figure holding the axes.
    """
    pts = _as_points(x, "x")
    fig, ax = axes_or_new(ax, (4.0, 4.0))
    ax.scatter(pts[:, 0], pts[:, 1], s=size, alpha=alpha, color=color, linewidths=0)
    if bounds is not None:
        b = as_bounds(bounds)
        ax.set_xlim(*b[0])
        ax.set_ylim(*b[1])
    ax.set_aspect("equal")
    if title is not None:
        ax.set_title(title)
    return fig


def plot_energy_and_density(energy: EnergyLike, bounds: Any, *, resolution: int = 200) -> Figure:
    r"""Two panels side by side: the energy :math:`E(x)` and the density :math:`e^{-E}/Z` on a 2-D grid.

    Args:
        energy: ``(B, 2) -> (B,)``.
        bounds: the box shown (see :func:`plot_energy`); ``Z`` is taken over it.
        resolution: cells per axis of each panel (cost: ``2 resolution^2`` energy evaluations).

    Returns:
        A new 9 x 4.5 inch figure (``plot_energy(kind="energy")`` left, ``kind="density"`` right).
    """
    fig = new_figure(figsize=(9, 4.5))
    ax_e, ax_p = fig.subplots(1, 2)
    plot_energy(energy, bounds, resolution=resolution, ax=ax_e, kind="energy", title="energy E(x)")
    plot_energy(energy, bounds, resolution=resolution, ax=ax_p, kind="density", title="density exp(-E)/Z")
    return fig


def plot_points(x: Any, bounds: Any, *, ax: Axes | None = None, title: str = "", bins: int = 60) -> Figure:
    """Points of any dimension ``D >= 1`` in one panel.

    ``D = 1``: a density histogram of ``bins`` bins over ``bounds[0]`` (values outside it, NaN
    included, are not drawn). ``D >= 2``: a scatter of the first two coordinates
    (:func:`plot_samples` with ``bounds[:2]``; non-finite rows are an error); for ``D > 2`` the
    title says ``(first 2 coordinates)``.

    Args:
        x: ``(N, D)`` tensor or array.
        bounds: the per-coordinate ranges ``((low, high), ...)``, at least ``min(D, 2)`` of them
            (e.g. a data set's ``bounds``).
        ax: draw into this axes; a new figure otherwise.
        title: the panel's title.
        bins: histogram bins in 1-D.

    Returns:
        The figure holding the axes.
    """
    if not isinstance(x, (torch.Tensor, np.ndarray)):
        raise TypeError(f"x: expected a torch.Tensor or numpy array of shape (N, D); got {type(x).__name__}")
    if x.ndim != 2 or x.shape[1] < 1:
        raise ValueError(f"x: expected shape (N, D) with D >= 1; got {tuple(x.shape)}")
    if len(bounds) < min(x.shape[1], 2):
        raise ValueError(f"bounds: expected a (low, high) range for each of the first {min(x.shape[1], 2)} "
                         f"coordinates; got {len(bounds)}")
    if x.shape[1] == 1:
        fig, ax = axes_or_new(ax, (5.0, 4.0))
        first = x[:, 0].detach().cpu().numpy() if isinstance(x, torch.Tensor) else x[:, 0]
        ax.hist(first, bins=bins, range=bounds[0], density=True)
        ax.set_title(title)
        return fig
    suffix = " (first 2 coordinates)" if x.shape[1] > 2 else ""
    return plot_samples(x[:, :2], ax=ax, bounds=bounds[:2], title=title + suffix)
