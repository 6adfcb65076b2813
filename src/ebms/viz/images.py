"""Tiled image grids (samples from image EBMs, replay buffers, reconstructions)."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
from matplotlib.axes import Axes
from matplotlib.figure import Figure

from ebms._checks import check_int
from ebms.viz.figure import as_float64, axes_or_new

__all__ = ["image_grid", "level_grid", "tile_images"]


def _as_nchw(images: Any) -> np.ndarray:
    arr = as_float64(images, "images")
    if arr.ndim == 3:
        arr = arr[:, None]
    if arr.ndim != 4 or arr.shape[1] not in (1, 3) or min(arr.shape) < 1:
        raise ValueError(
            f"images: expected shape (N, C, H, W) with C in (1, 3), or (N, H, W); got {tuple(images.shape)}"
        )
    if not np.isfinite(arr).all():
        raise ValueError(f"images: expected finite values; got {int((~np.isfinite(arr)).sum())} NaN/Inf entries")
    return arr


def tile_images(
    images: Any,
    nrow: int = 8,
    *,
    padding: int = 2,
    pad_value: float = 1.0,
    value_range: tuple[float, float] | None = None,
) -> np.ndarray:
    """Tile ``N`` images into one array, ``nrow`` images per row.

    Args:
        images: ``(N, C, H, W)`` with ``C`` 1 or 3, or ``(N, H, W)``; tensor or array.
        nrow: images per row (the last row may be partly empty).
        padding: pixels between images and around the border.
        pad_value: fill of the padding, in the output's ``[0, 1]`` scale.
        value_range: ``(lo, hi)`` mapped to ``[0, 1]`` (values outside are
            clipped); default: the min and max over all images.

    Returns:
        ``(H', W', C)`` float array in ``[0, 1]``, ``H' = rows (H + p) + p``,
        ``W' = nrow (W + p) + p``.
    """
    arr = _as_nchw(images)
    check_int(nrow, "nrow", minimum=1)
    check_int(padding, "padding", minimum=0)
    if value_range is None:
        lo, hi = float(arr.min()), float(arr.max())
    else:
        try:
            lo, hi = (float(v) for v in value_range)
        except (TypeError, ValueError):
            raise TypeError(f"value_range: expected (lo, hi) or None; got {value_range!r}") from None
        if not (math.isfinite(lo) and math.isfinite(hi) and lo < hi):
            raise ValueError(f"value_range: expected finite lo < hi; got {value_range!r}")
    scaled = np.clip((arr - lo) / (hi - lo), 0.0, 1.0) if hi > lo else np.full_like(arr, 0.5)
    n, c, h, w = arr.shape
    rows = math.ceil(n / nrow)
    p = padding
    out = np.full((rows * (h + p) + p, nrow * (w + p) + p, c), float(pad_value))
    for k in range(n):
        r, q = divmod(k, nrow)
        y, x = p + r * (h + p), p + q * (w + p)
        out[y : y + h, x : x + w] = scaled[k].transpose(1, 2, 0)
    return out


def image_grid(
    images: Any,
    nrow: int = 8,
    *,
    padding: int = 2,
    pad_value: float = 1.0,
    value_range: tuple[float, float] | None = None,
    ax: Axes | None = None,
    cmap: str = "gray",
    title: str | None = None,
) -> Figure:
    """Show ``images`` tiled ``nrow`` per row (see :func:`tile_images` for the arguments).

    Grey-scale images use ``cmap``; three-channel images are shown as RGB.

    Returns:
        The figure holding the axes.
    """
    tiled = tile_images(images, nrow, padding=padding, pad_value=pad_value, value_range=value_range)
    height, width = tiled.shape[:2]
    scale = 6.0 / max(height, width)
    fig, ax = axes_or_new(ax, (max(width * scale, 1.0), max(height * scale, 1.0)))
    if tiled.shape[2] == 1:
        ax.imshow(tiled[:, :, 0], cmap=cmap, vmin=0.0, vmax=1.0, interpolation="nearest")
    else:
        ax.imshow(tiled, interpolation="nearest")
    ax.set_axis_off()
    if title is not None:
        ax.set_title(title)
    return fig


def level_grid(levels: Any, *, value_range: tuple[float, float] = (-1.0, 1.0), title: str | None = None,
               ax: Axes | None = None) -> Figure:
    """Chains through levels, one row per chain: ``levels`` is ``(L, N, C, H, W)`` or ``(L, N, H, W)`` (level
    first, e.g. :func:`~ebms.objectives.recovery_sample` with ``keep_levels=True``: the noise left, the samples
    right), shown ``L`` per row, values clipped to ``value_range``."""
    arr = np.asarray(as_float64(levels, "levels"))
    if arr.ndim not in (4, 5) or arr.shape[0] == 0 or arr.shape[1] == 0:
        raise ValueError(f"levels: expected (L, N, C, H, W) or (L, N, H, W) with L, N >= 1; got shape {arr.shape}")
    n_levels, n = arr.shape[:2]
    tiles = np.swapaxes(arr, 0, 1).reshape(n * n_levels, *arr.shape[2:])
    return image_grid(np.clip(tiles, *value_range), n_levels, value_range=value_range, title=title, ax=ax)
