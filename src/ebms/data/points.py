"""Continuous data from a user's file: a point cloud ``(N, D)`` split into train and test.

Formats (chosen by suffix; none of them unpickles anything):

* ``.npy`` — one numeric array, read with ``allow_pickle=False``;
* ``.safetensors`` — the tensor under ``key``, or the file's only tensor;
* ``.csv`` / ``.txt`` — numbers separated by commas (``.csv``) or white
  space (``.txt``); one header line of column names is skipped.

A 1-D array is read as ``N`` points in one dimension. Values must be finite.
The split is a seeded random permutation, so the same seed always gives the
same test set.

Example:
    >>> import numpy as np, tempfile, os
    >>> from ebms.data import load_points
    >>> path = os.path.join(tempfile.mkdtemp(), "pts.npy")
    >>> np.save(path, np.random.default_rng(0).normal(size=(100, 3)))
    >>> ds = load_points(path, test_fraction=0.2, seed=0)
    >>> ds.train.shape, ds.test.shape, ds.dim
    (torch.Size([80, 3]), torch.Size([20, 3]), 3)
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from torch import Tensor

from ebms._checks import check_finite, check_probability

__all__ = ["POINT_SUFFIXES", "PointCloud", "load_points", "read_points"]

#: File suffixes :func:`read_points` understands.
POINT_SUFFIXES = (".csv", ".npy", ".safetensors", ".txt")


@dataclass(frozen=True)
class PointCloud:
    """A user's continuous data set, split into train and test.

    Attributes:
        name: the file's stem (used in plot titles).
        train: ``(N_train, D)`` float32.
        test: ``(N_test, D)`` float32.
        bounds: per-dimension ``(low, high)``, the data's range widened by 10 %
            on each side (used for chain starts, plots and 2-D grid evaluation).
    """

    name: str
    train: Tensor
    test: Tensor
    bounds: tuple[tuple[float, float], ...]

    has_density = False  # a file has no closed-form density

    @property
    def dim(self) -> int:
        """``D``."""
        return int(self.train.shape[1])


def _read_array(path: Path, key: str | None) -> np.ndarray | Tensor:
    suffix = path.suffix.lower()
    if suffix == ".npy":
        try:
            return np.load(path, allow_pickle=False)
        except ValueError as e:
            raise ValueError(f"path: {path}: not a plain numeric .npy array ({e})") from None
    if suffix == ".safetensors":
        from safetensors.torch import load_file

        tensors = load_file(str(path))
        if key is None:
            if len(tensors) != 1:
                raise ValueError(f"path: {path} holds tensors {sorted(tensors)}; name one with key")
            return next(iter(tensors.values()))
        if key not in tensors:
            raise ValueError(f"key: {key!r} not in {path}; it holds {sorted(tensors)}")
        return tensors[key]
    if suffix in (".csv", ".txt"):
        delimiter = "," if suffix == ".csv" else None
        for skip in (0, 1):
            try:
                return np.loadtxt(path, delimiter=delimiter, skiprows=skip, ndmin=1, dtype=np.float64)
            except ValueError as e:
                err = e
        raise ValueError(f"path: {path}: not a table of numbers ({err})") from None
    raise ValueError(f"path: {path}: unknown suffix {suffix!r}; expected one of {', '.join(POINT_SUFFIXES)}")


def read_points(path: str | Path, *, key: str | None = None) -> Tensor:
    """The points in ``path`` as a float32 tensor ``(N, D)`` (see the module docstring)."""
    p = Path(path).expanduser()
    if not p.is_file():
        raise FileNotFoundError(f"path: file {str(p)!r} not found")
    arr = _read_array(p, key)
    x = torch.as_tensor(np.asarray(arr) if not isinstance(arr, Tensor) else arr)
    if x.dim() == 1:
        x = x[:, None]
    if x.dim() != 2 or x.shape[0] < 2 or x.shape[1] < 1:
        raise ValueError(f"path: {p}: expected points of shape (N, D) with N >= 2; got shape {tuple(x.shape)}")
    if not (x.is_floating_point() or x.dtype in (torch.int32, torch.int64, torch.int16, torch.uint8)):
        raise ValueError(f"path: {p}: expected numbers; got dtype {x.dtype}")
    return check_finite(x.to(torch.float32).contiguous(), f"path: {p}")


def load_points(
    path: str | Path, *, test_fraction: float = 0.1, seed: int = 0, key: str | None = None
) -> PointCloud:
    """Read ``path`` and split it with a seeded permutation into train and test.

    Args:
        path: a ``.npy``, ``.safetensors``, ``.csv`` or ``.txt`` file of points.
        test_fraction: share of the points held out, in ``(0, 1)``; at least
            one point goes to each side.
        seed: seed of the split.
        key: tensor name inside a ``.safetensors`` file with several.
    """
    frac = check_probability(test_fraction, "test_fraction", open_low=True, open_high=True)
    x = read_points(path, key=key)
    n = x.shape[0]
    n_test = min(max(1, round(frac * n)), n - 1)
    perm = torch.randperm(n, generator=torch.Generator().manual_seed(seed))
    lo, hi = x.min(0).values, x.max(0).values
    pad = 0.1 * (hi - lo).clamp(min=1e-3)
    bounds = tuple((float(a), float(b)) for a, b in zip((lo - pad).tolist(), (hi + pad).tolist()))
    return PointCloud(Path(path).stem, x[perm[n_test:]], x[perm[:n_test]], bounds)
