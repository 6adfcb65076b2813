"""Figure creation and saving, shared by every plot in :mod:`ebms.viz`.

Figures are plain :class:`matplotlib.figure.Figure` objects with an Agg canvas:
``pyplot`` is never imported, so nothing needs a display, the global backend
is left alone, and figures are freed when dropped (no pyplot registry).
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Any, Literal

import numpy as np
import torch
from matplotlib.axes import Axes
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure, SubFigure

__all__ = ["new_figure", "save_figure"]


def new_figure(
    figsize: tuple[float, float] = (5.0, 5.0),
    *,
    layout: Literal["constrained", "compressed", "tight"] | None = "constrained",
) -> Figure:
    """An Agg-backed figure of ``figsize`` inches (no pyplot, no display)."""
    fig = Figure(figsize=figsize, layout=layout)
    FigureCanvasAgg(fig)
    return fig


def axes_or_new(ax: Axes | None, figsize: tuple[float, float]) -> tuple[Figure, Axes]:
    """``(ax.figure, ax)`` when ``ax`` is given, else a new figure with one axes."""
    if ax is None:
        new = new_figure(figsize)
        return new, new.add_subplot(1, 1, 1)
    if not isinstance(ax, Axes):
        raise TypeError(f"ax: expected a matplotlib Axes or None; got {type(ax).__name__}")
    fig: Any = ax.figure
    if isinstance(fig, SubFigure):
        fig = fig.figure  # a SubFigure's root figure
    if not isinstance(fig, Figure):
        raise ValueError("ax: expected an Axes that belongs to a Figure; got a detached Axes")
    return fig, ax


def _file_mode(path: Path) -> int:
    """The mode an ordinary new file would get (or the existing file's mode)."""
    if path.exists():
        return path.stat().st_mode & 0o777
    umask = os.umask(0)
    os.umask(umask)
    return 0o666 & ~umask


def save_figure(fig: Figure, path: str | os.PathLike[str], *, dpi: float = 120.0) -> Path:
    """Write ``fig`` to ``path`` atomically (temporary file in the same folder, then rename).

    The format comes from the suffix (``.png``, ``.pdf``, ``.svg``, ...);
    missing parent folders are created. A reader never sees a half-written
    file, and a failed save leaves any previous file untouched.

    Returns:
        The path written.
    """
    if not isinstance(fig, Figure):
        raise TypeError(f"fig: expected a matplotlib Figure; got {type(fig).__name__}")
    path = Path(path)
    fmt = path.suffix.lower().lstrip(".")
    supported = sorted(fig.canvas.get_supported_filetypes())
    if fmt not in supported:
        raise ValueError(f"path: expected a suffix in {', '.join('.' + s for s in supported)}; got {str(path)!r}")
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as fh:
            fig.savefig(fh, format=fmt, dpi=dpi)
        os.chmod(tmp, _file_mode(path))  # mkstemp makes 0600 files; keep the usual permissions
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
    return path


def as_float64(x: Any, name: str, expected: str = "") -> np.ndarray:
    """A tensor or array as a float64 numpy array (a copy-free view when possible).

    Raises ``TypeError`` naming ``name`` for anything else; ``expected`` adds a
    shape hint to that message.
    """
    if isinstance(x, torch.Tensor):
        return x.detach().to("cpu", torch.float64).numpy()
    if isinstance(x, np.ndarray):
        return x.astype(np.float64, copy=False)
    hint = f" {expected}" if expected else ""
    raise TypeError(f"{name}: expected a torch.Tensor or numpy array{hint}; got {type(x).__name__}")
