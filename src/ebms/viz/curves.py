"""Training curves: the metrics a run logged, one panel each, against the step."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from matplotlib.figure import Figure

from ebms.viz.figure import new_figure

if TYPE_CHECKING:  # the plots import no training code
    from ebms.train.logs import MetricsTable

__all__ = ["MAX_CURVES", "plot_metrics"]

#: panels drawn when ``columns`` is not given (the first ones of the table, ``elapsed_s`` left out).
MAX_CURVES = 12


def plot_metrics(table: MetricsTable, columns: Sequence[str] | None = None, *, title: str | None = None,
                 ncols: int = 3) -> Figure:
    """One panel per metric of a run's log (:func:`ebms.train.read_metrics`) against the step.

    Non-finite values are left out of a curve (and counted in its panel's title); a metric logged at
    one step only is drawn as a point. Evaluation metrics (``eval/<name>``) are drawn with markers.

    Args:
        table: the run's logged steps.
        columns: the metrics to draw, in order (default: the table's columns but ``elapsed_s``, at most
            :data:`MAX_CURVES`).
        title: the figure's title.
        ncols: panels per row.

    Raises:
        KeyError: a name in ``columns`` is not a logged metric (the message lists those that are).
        ValueError: nothing to draw (no logged step, or ``columns`` empty), or ``ncols`` < 1.
    """
    if ncols < 1:
        raise ValueError(f"ncols: expected an integer >= 1; got {ncols}")
    names = [c for c in table.columns if c != "elapsed_s"][:MAX_CURVES] if columns is None else list(columns)
    if not names or not table.rows:
        raise ValueError("plot_metrics: nothing to draw (the log has no step with a metric)" if not table.rows
                         else "columns: expected at least one metric name")
    series = [table.column(name) for name in names]  # KeyError names an unknown one
    cols = min(ncols, len(names))
    rows = math.ceil(len(names) / cols)
    fig = new_figure((3.6 * cols, 2.6 * rows))
    for i, (name, (steps, values)) in enumerate(zip(names, series)):
        ax = fig.add_subplot(rows, cols, i + 1)
        kept = [(s, v) for s, v in zip(steps, values) if math.isfinite(v)]
        style: dict[str, Any] = {"marker": "o", "markersize": 3} if name.startswith("eval/") or len(kept) == 1 else {}
        ax.plot([s for s, _ in kept], [v for _, v in kept], linewidth=1.0, **style)
        dropped = len(values) - len(kept)
        ax.set_title(name + (f" ({dropped} non-finite left out)" if dropped else ""), fontsize=9)
        ax.set_xlabel("step", fontsize=8)
        ax.tick_params(labelsize=7)
        ax.grid(alpha=0.3)
    if title:
        fig.suptitle(title, fontsize=10)
    return fig
