"""Trace plots of Markov chains with their running means."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
from matplotlib.axes import Axes
from matplotlib.figure import Figure

from ebms._checks import check_int
from ebms.viz.figure import as_float64, axes_or_new, new_figure

__all__ = ["plot_traces"]

#: Most dimensions drawn (one panel each) unless ``dims`` says which.
MAX_PANELS = 8


def _as_scd(chains: Any) -> np.ndarray:
    arr = as_float64(chains, "chains")
    if arr.ndim == 2:
        arr = arr[:, :, None]
    if arr.ndim != 3 or min(arr.shape) < 1:
        raise ValueError(
            f"chains: expected shape (S, C) or (S, C, D) (steps, chains, dims); got {tuple(chains.shape)}"
        )
    return arr


def plot_traces(
    chains: Any,
    *,
    dims: Sequence[int] | None = None,
    names: Sequence[str] | None = None,
    max_chains: int = 10,
    running_mean: bool = True,
    ax: Axes | None = None,
    title: str | None = None,
) -> Figure:
    r"""Trace of each chain against the step, with each chain's running mean.

    The running mean of chain ``c`` at step ``s`` is
    :math:`\frac{1}{s+1}\sum_{t \le s} x_{t,c}` (dashed, same colour); chains
    that agree on it have mixed in that coordinate. Non-finite values are
    drawn as gaps, and their count is shown in the panel title.

    Args:
        chains: ``(S, C)`` or ``(S, C, D)``: ``S`` steps, ``C`` chains,
            ``D`` dimensions (one panel per dimension).
        dims: which dimensions to draw; default all when ``D <=``
            :data:`MAX_PANELS` (otherwise this must be given).
        names: one panel label per drawn dimension.
        max_chains: draw the first ``max_chains`` chains (the title says so
            when some are left out).
        running_mean: overlay the running means.
        ax: draw into this axes (only when one dimension is drawn).
        title: figure title.

    Returns:
        The figure.
    """
    arr = _as_scd(chains)
    steps, n_chains, d = arr.shape
    check_int(max_chains, "max_chains", minimum=1)
    if dims is None:
        if d > MAX_PANELS:
            raise ValueError(f"dims: expected the dimensions to draw when D > {MAX_PANELS}; got None with D = {d}")
        dims = list(range(d))
    dims = list(dims)
    if not dims or any(isinstance(i, bool) or not isinstance(i, int) or not 0 <= i < d for i in dims):
        raise ValueError(f"dims: expected a non-empty list of ints in [0, {d}); got {dims!r}")
    if names is not None and len(names) != len(dims):
        raise ValueError(f"names: expected {len(dims)} labels (one per drawn dimension); got {len(names)}")
    if ax is not None and len(dims) != 1:
        raise ValueError(f"ax: can only hold one dimension; got {len(dims)} to draw (pass dims=[i] or ax=None)")
    shown = min(n_chains, max_chains)
    if ax is None:
        fig = new_figure((7.0, 1.8 * len(dims) + 0.6))
        axes = list(np.atleast_1d(fig.subplots(len(dims), 1, sharex=True, squeeze=False)[:, 0]))
    else:
        fig, ax = axes_or_new(ax, (7.0, 2.4))
        axes = [ax]
    t = np.arange(steps)
    for panel, (a, i) in enumerate(zip(axes, dims, strict=True)):
        x = arr[:, :shown, i]
        finite = np.isfinite(x)
        for c in range(shown):
            color = f"C{c % 10}"
            a.plot(t, x[:, c], color=color, lw=0.7, alpha=0.6)
            if running_mean:
                csum = np.cumsum(np.where(finite[:, c], x[:, c], 0.0))
                count = np.cumsum(finite[:, c])
                with np.errstate(invalid="ignore", divide="ignore"):
                    a.plot(t, csum / count, color=color, lw=1.4, ls="--")
        label = names[panel] if names is not None else f"x[{i}]"
        n_bad = int((~finite).sum())
        a.set_ylabel(label)
        if n_bad:
            a.set_title(f"{label}: {n_bad} non-finite values not drawn", fontsize="small")
    axes[-1].set_xlabel("step")
    note = f" (first {shown} of {n_chains} chains)" if shown < n_chains else ""
    if title is not None or note:
        if ax is None:
            fig.suptitle((title or "traces") + note)
        else:
            axes[0].set_title((title or "traces") + note)
    return fig
