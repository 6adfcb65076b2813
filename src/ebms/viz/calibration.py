"""Pictures of classifier calibration and OOD detection: reliability diagrams, ROC curves, energy histograms.

* :func:`plot_reliability` — accuracy against confidence per bin (Guo et al. 2017, Fig. 1 style) with the
  gap to the diagonal shaded and the ECE in the legend.
* :func:`plot_roc` — one ROC curve per OOD set against the same in-distribution scores, AUROC in the legend.
* :func:`plot_energy_histograms` — energies of several sets (data, model samples, noise) on shared bins,
  the usual health check of an EBM: data and samples should overlap, noise sit at higher energy.

Agg canvas only, through :mod:`ebms.viz.figure` (no pyplot); each function returns the figure.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import torch
from matplotlib.axes import Axes
from matplotlib.figure import Figure

from ebms._checks import check_int
from ebms.metrics.calibration import CalibrationBins, calibration_bins
from ebms.metrics.ood import auroc, roc_curve
from ebms.viz.figure import as_float64, axes_or_new

__all__ = ["plot_energy_histograms", "plot_reliability", "plot_roc"]


def _pooled(bins: CalibrationBins) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(counts, confidence, accuracy)`` per bin; class-wise bins are pooled over classes."""
    counts = bins.counts.double()
    conf_sum, hit_sum = counts * bins.confidence, counts * bins.accuracy
    if counts.dim() == 2:
        counts, conf_sum, hit_sum = counts.sum(0), conf_sum.sum(0), hit_sum.sum(0)
    denom = counts.clamp(min=1)
    return counts.numpy(), (conf_sum / denom).numpy(), (hit_sum / denom).numpy()


def plot_reliability(
    bins: CalibrationBins | Any,
    labels: Any = None,
    *,
    n_bins: int = 20,
    kind: str = "top_label",
    ax: Axes | None = None,
    title: str | None = None,
) -> Figure:
    """Reliability diagram: per-bin accuracy as bars, the gap to the mean confidence shaded.

    Args:
        bins: a :class:`~ebms.metrics.calibration.CalibrationBins`, or probabilities ``(N, K)`` binned
            here with ``labels``, ``n_bins`` and ``kind``. Class-wise bins are pooled over the classes
            (each (row, class) pair is one prediction), which is the diagram Eq. 5.19 averages over.
        labels: ``(N,)`` integer labels when ``bins`` holds probabilities; ``None`` with ready bins.
        n_bins, kind: as :func:`~ebms.metrics.calibration.calibration_bins` (only with probabilities).
        ax: draw into this axes; a new figure otherwise.
        title: axes title.

    Returns:
        The figure holding the axes.
    """
    if isinstance(bins, CalibrationBins):
        if labels is not None:
            raise ValueError("labels: expected None when bins is a CalibrationBins (they are already binned)")
        b = bins
    else:
        if labels is None:
            raise ValueError("labels: expected (N,) integer labels with probabilities; got None")
        check_int(n_bins, "n_bins", minimum=1)
        b = calibration_bins(bins, labels, n_bins=n_bins, kind=kind)
    counts, conf, acc = _pooled(b)
    edges = b.edges.numpy()
    width = np.diff(edges)
    filled = counts > 0
    fig, ax = axes_or_new(ax, (4.5, 4.5))
    ax.bar(edges[:-1][filled], acc[filled], width=width[filled], align="edge", color="tab:blue",
           edgecolor="black", linewidth=0.5, label="accuracy")
    low, high = np.minimum(acc, conf)[filled], np.maximum(acc, conf)[filled]
    ax.bar(edges[:-1][filled], high - low, bottom=low, width=width[filled], align="edge", color="tab:red",
           alpha=0.35, edgecolor="tab:red", hatch="//", linewidth=0.5, label="gap to confidence")
    ax.plot([0, 1], [0, 1], linestyle="--", color="gray", linewidth=1.0)
    ax.plot([], [], " ", label=f"ECE ({b.kind.replace('_', '-')}) = {b.ece():.4f}")
    ax.set_xlim(0, 1)
    ax.set_ylim(0, 1)
    ax.set_aspect("equal")
    ax.set_xlabel("confidence")
    ax.set_ylabel("accuracy")
    ax.legend(loc="upper left", fontsize="small")
    if title is not None:
        ax.set_title(title)
    return fig


def _scores(x: Any, name: str) -> torch.Tensor:
    arr = as_float64(x, name, "of shape (N,)")
    if arr.ndim != 1 or arr.shape[0] == 0:
        raise ValueError(f"{name}: expected a non-empty 1-D array of scores (N,); got shape {arr.shape}")
    return torch.from_numpy(np.ascontiguousarray(arr))


def plot_roc(
    scores_in: Any,
    scores_out_by_name: Mapping[str, Any],
    *,
    ax: Axes | None = None,
    title: str | None = None,
) -> Figure:
    """ROC curves of one in-distribution score set against each named OOD set (higher = more "in").

    Args:
        scores_in: ``(N_in,)`` scores (tensor or array).
        scores_out_by_name: ``{name: (N_out,) scores}``, at least one entry; the legend shows each AUROC.
        ax: draw into this axes; a new figure otherwise.
        title: axes title.

    Returns:
        The figure holding the axes.
    """
    if not isinstance(scores_out_by_name, Mapping) or len(scores_out_by_name) == 0:
        raise ValueError(f"scores_out_by_name: expected a non-empty dict name -> scores; got {scores_out_by_name!r}")
    s_in = _scores(scores_in, "scores_in")
    fig, ax = axes_or_new(ax, (4.5, 4.5))
    for name, out in scores_out_by_name.items():
        s_out = _scores(out, f"scores_out_by_name[{name!r}]")
        fpr, tpr = roc_curve(s_in, s_out)
        ax.plot(fpr.numpy(), tpr.numpy(), drawstyle="default", linewidth=1.5,
                label=f"{name} (AUROC {auroc(s_in, s_out):.3f})")
    ax.plot([0, 1], [0, 1], linestyle="--", color="gray", linewidth=1.0)
    ax.set_xlim(0, 1)
    ax.set_ylim(0, 1.01)
    ax.set_xlabel("false-positive rate (OOD kept)")
    ax.set_ylabel("true-positive rate (in-distribution kept)")
    ax.legend(loc="lower right", fontsize="small")
    if title is not None:
        ax.set_title(title)
    return fig


def plot_energy_histograms(
    energies: Mapping[str, Any],
    *,
    bins: int = 50,
    density: bool = True,
    ax: Axes | None = None,
    title: str | None = None,
) -> Figure:
    """Overlaid step histograms of energies (e.g. ``{"data": ..., "samples": ..., "noise": ...}``).

    All sets share ``bins`` equal-width bins over their joint range, so the heights compare directly.

    Args:
        energies: ``{name: (N,) energies}`` (tensors or arrays, finite, ``N >= 1``), at least one entry.
        bins: number of shared bins.
        density: normalise each histogram to unit area (sets of different sizes compare).
        ax: draw into this axes; a new figure otherwise.
        title: axes title.

    Returns:
        The figure holding the axes.
    """
    if not isinstance(energies, Mapping) or len(energies) == 0:
        raise ValueError(f"energies: expected a non-empty dict name -> (N,) energies; got {energies!r}")
    check_int(bins, "bins", minimum=1)
    arrays = {}
    for name, e in energies.items():
        arr = as_float64(e, f"energies[{name!r}]", "of shape (N,)")
        if arr.ndim != 1 or arr.shape[0] == 0:
            raise ValueError(f"energies[{name!r}]: expected a non-empty 1-D array (N,); got shape {arr.shape}")
        if not np.isfinite(arr).all():
            raise ValueError(f"energies[{name!r}]: expected finite energies; got {int((~np.isfinite(arr)).sum())} "
                             "NaN/Inf entries")
        arrays[name] = arr
    lo = min(float(a.min()) for a in arrays.values())
    hi = max(float(a.max()) for a in arrays.values())
    if hi <= lo:
        lo, hi = lo - 0.5, hi + 0.5
    edges = np.linspace(lo, hi, bins + 1)
    fig, ax = axes_or_new(ax, (5.5, 3.8))
    for name, arr in arrays.items():
        ax.hist(arr, bins=edges.tolist(), density=density, histtype="step", linewidth=1.5,
                label=f"{name} (n={arr.shape[0]}, mean {arr.mean():.3g})")
    ax.set_xlabel("energy E(x)")
    ax.set_ylabel("density" if density else "count")
    ax.legend(fontsize="small")
    if title is not None:
        ax.set_title(title)
    return fig
