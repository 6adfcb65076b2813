"""Plots: energies and densities on a grid, samples, image grids, chain traces.

Every function returns a :class:`matplotlib.figure.Figure` (or draws into the
``ax=`` it is given and returns that axes' figure). Figures use the Agg
canvas and never go through ``pyplot``: no display is needed and the global
matplotlib backend is left alone. :func:`save_figure` writes a file
atomically (temporary file, then rename).

* :func:`plot_energy` — ``exp(-E)/Z``, ``-E - log Z`` or ``E`` on a 2-D grid.
* :func:`plot_samples` — scatter of ``(N, 2)`` points; :func:`plot_points` — ``(N, D)`` points in
  one panel (a histogram in 1-D); :func:`plot_energy_and_density` — energy beside density.
* :func:`image_grid` / :func:`tile_images` — ``(N, C, H, W)`` or ``(N, H, W)`` tiled; :func:`level_grid` —
  chains through levels (``(L, N, ...)``), one row per chain.
* :func:`plot_traces` — ``(S, C)`` or ``(S, C, D)`` chains with running means.
* :func:`plot_metrics` — a run's logged metrics against the step (``ebms plot``).
* :func:`plot_reliability` — reliability diagram of a classifier; :func:`plot_roc` — ROC curves of
  out-of-distribution scores; :func:`plot_energy_histograms` — energies of data, samples and noise.
"""

from ebms.viz.calibration import plot_energy_histograms, plot_reliability, plot_roc
from ebms.viz.curves import plot_metrics
from ebms.viz.density import PLOT_KINDS, plot_energy, plot_energy_and_density, plot_points, plot_samples
from ebms.viz.figure import new_figure, save_figure
from ebms.viz.images import image_grid, level_grid, tile_images
from ebms.viz.traces import plot_traces

__all__ = [
    "PLOT_KINDS",
    "image_grid",
    "level_grid",
    "new_figure",
    "plot_energy",
    "plot_energy_and_density",
    "plot_energy_histograms",
    "plot_metrics",
    "plot_points",
    "plot_reliability",
    "plot_roc",
    "plot_samples",
    "plot_traces",
    "save_figure",
    "tile_images",
]
