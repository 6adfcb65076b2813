"""Continuous data from a user's file: a point cloud ``(N, D)`` split into train and test.

Formats (chosen by suffix; none of them unpickles anything):

* ``.npy`` — one numeric array, read with ``allow_pickle=False``;
* ``.safetensors`` — the tensor under ``key``, or the file's only tensor;
* ``.csv`` / ``.txt`` — numbers separated by commas (``.csv``) or white
  space (``.txt``); one header line of column names is skipped.

In a text table every line is one point and every column one dimension, so a single line
``0,1,...,49`` is one 50-D point (and an error, as one point cannot be split into train and
test). A 1-D ``.npy``/``.safetensors`` array is read as ``N`` points in one dimension. Values
must be finite (after conversion to float32).

Resources: a file larger than ``max_bytes`` (default :data:`MAX_POINT_BYTES`, 1 GiB) is refused
before reading (:class:`~ebms.errors.LimitExceeded`, naming the limit and how to raise it);
binary headers (``.npy``, ``.safetensors``) are checked against the file's size before anything
is allocated; text is parsed in blocks of lines straight into float32, so the peak memory is
about the decoded array (``4 N D`` bytes) plus one block. Any other bad file is a
:class:`~ebms.errors.DataError` naming the file and what is wrong.
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

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from torch import Tensor

from ebms._checks import check_probability
from ebms.data._limits import check_max_bytes, check_size, file_size
from ebms.errors import DataError

__all__ = ["MAX_POINT_BYTES", "POINT_SUFFIXES", "PointCloud", "load_points", "read_points"]

#: File suffixes :func:`read_points` understands.
POINT_SUFFIXES = (".csv", ".npy", ".safetensors", ".txt")
_INT_DTYPES = (torch.int8, torch.int16, torch.int32, torch.int64, torch.uint8)


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


#: Default of ``max_bytes``: the largest point file (and decoded array) read, 1 GiB.
MAX_POINT_BYTES = 1 << 30
#: Longest line of a ``.csv``/``.txt`` file, in bytes (a file without newlines stops here).
MAX_LINE_BYTES = 16 << 20
#: Lines parsed per block of a ``.csv``/``.txt`` file.
_LINES_PER_BLOCK = 65536
_READER = "read_points/load_points"
_ST_DTYPES = {"F64": torch.float64, "F32": torch.float32, "F16": torch.float16, "BF16": torch.bfloat16,
              "I64": torch.int64, "I32": torch.int32, "I16": torch.int16, "I8": torch.int8,
              "U8": torch.uint8, "BOOL": torch.bool}
_ST_MAX_HEADER = 100 << 20  # the safetensors format's own bound on the JSON header


def _read_npy(path: Path, size: int, max_bytes: int) -> np.ndarray:
    """A ``.npy`` array after checking its header against the file size (no pickles)."""
    fmt = np.lib.format
    with open(path, "rb") as f:
        try:
            version = fmt.read_magic(f)
            read_header = fmt.read_array_header_1_0 if version == (1, 0) else fmt.read_array_header_2_0
            shape, fortran, dtype = read_header(f)
        except (ValueError, EOFError, OSError, SyntaxError) as e:
            raise DataError(f"{path}: not a .npy file (bad header: {e})") from None
        if dtype.hasobject or dtype.kind not in "biuf":
            raise DataError(f"{path}: not a plain numeric .npy array (dtype {dtype}); save numbers, "
                            "not Python objects")
        count = int(np.prod(shape, dtype=np.int64))
        claimed = count * dtype.itemsize
        check_size(path, claimed, max_bytes, f"the array its header claims, shape {shape} {dtype}", _READER)
        have = size - f.tell()
        if have != claimed:
            what = "truncated" if have < claimed else "trailing bytes after the array"
            raise DataError(f"{path}: {what}: header claims shape {shape} {dtype} = {claimed} bytes of "
                            f"data; the file holds {have}")
        if count == 0:
            raise DataError(f"{path}: holds no points (shape {shape}); expected at least 2 points")
        arr = np.fromfile(f, dtype=dtype, count=count)
    return arr.reshape(shape, order="F" if fortran else "C")


def _read_safetensors(path: Path, size: int, key: str | None, max_bytes: int) -> Tensor:
    """One tensor of a ``.safetensors`` file after checking its header against the file size."""
    with open(path, "rb") as f:
        head = f.read(8)
        if len(head) < 8:
            raise DataError(f"{path}: not a .safetensors file ({size} bytes; no 8-byte header length)")
        n = int.from_bytes(head, "little")
        if not 2 <= n <= min(size - 8, _ST_MAX_HEADER):
            raise DataError(f"{path}: not a .safetensors file (header length {n} does not fit a file "
                            f"of {size} bytes)")
        try:
            header = json.loads(f.read(n))
        except (UnicodeDecodeError, json.JSONDecodeError) as e:
            raise DataError(f"{path}: not a .safetensors file (header is not JSON: {e})") from None
        if not isinstance(header, dict):
            raise DataError(f"{path}: not a .safetensors file (header is not a JSON object)")
        names = sorted(k for k in header if k != "__metadata__")
        if key is None:
            if len(names) != 1:
                raise DataError(f"{path} holds tensors {names}; name one with key (data.key=...)")
            key = names[0]
        elif key not in names:
            raise DataError(f"key: {key!r} not in {path}; it holds {names}")
        entry = header[key]
        try:
            dtype = _ST_DTYPES[entry["dtype"]]
            shape = tuple(int(d) for d in entry["shape"])
            begin, end = (int(o) for o in entry["data_offsets"])
        except (KeyError, TypeError, ValueError):
            raise DataError(f"{path}: tensor {key!r}: expected a numeric dtype ({', '.join(_ST_DTYPES)}), "
                            f"a shape and data_offsets; got {entry!r:.200}") from None
        count = int(np.prod(shape, dtype=np.int64)) if all(d >= 0 for d in shape) else -1
        claimed = count * dtype.itemsize
        check_size(path, claimed, max_bytes, f"tensor {key!r}, shape {shape} {dtype}", _READER)
        data_len = size - 8 - n
        if count < 0 or not 0 <= begin <= end <= data_len or end - begin != claimed:
            raise DataError(f"{path}: tensor {key!r}: header claims shape {shape} {entry['dtype']} at bytes "
                            f"[{begin}, {end}); the file holds {data_len} bytes of data")
        if count == 0:
            raise DataError(f"{path}: tensor {key!r} holds no points (shape {shape})")
        f.seek(8 + n + begin)
        buf = bytearray(f.read(claimed))
    return torch.frombuffer(buf, dtype=dtype).reshape(shape)


def _parse_block(path: Path, lines: list[str], first: int, delimiter: str | None,
                 width: int | None) -> np.ndarray:
    """Rows ``(len(lines), D)`` of one block of text lines (numbered from ``first``)."""
    try:
        block = np.loadtxt(lines, delimiter=delimiter, ndmin=2, dtype=np.float64)
        if block.shape[0] == len(lines) and (width is None or block.shape[1] == width):
            return block
    except ValueError:
        pass
    for i, line in enumerate(lines):  # locate the first bad line, for the message
        try:
            row = np.loadtxt([line], delimiter=delimiter, ndmin=2, dtype=np.float64)
        except ValueError as e:
            raise DataError(f"{path}: line {first + i}: not a row of numbers ({e}): {line[:80]!r}") from None
        width = row.shape[1] if width is None else width
        if row.shape[1] != width:
            raise DataError(f"{path}: line {first + i}: expected {width} numbers (as the lines before); "
                            f"got {row.shape[1]}")
    raise DataError(f"{path}: lines {first}-{first + len(lines) - 1}: not a table of numbers")


def _read_table(path: Path, delimiter: str | None, max_bytes: int) -> np.ndarray:
    """A text table streamed in blocks of lines into float32 rows (memory ~ the decoded array)."""
    blocks: list[np.ndarray] = []
    pending: list[str] = []
    width: int | None = None
    decoded = 0
    number, first = 0, 1

    def flush() -> None:
        nonlocal width, decoded, first
        if pending:
            with np.errstate(over="ignore"):  # beyond float32 becomes inf: reported as non-finite
                block = _parse_block(path, pending, first, delimiter, width).astype(np.float32)
            width = block.shape[1]
            decoded += block.nbytes
            check_size(path, decoded, max_bytes, "the decoded table (float32) so far", _READER)
            blocks.append(block)
            pending.clear()
        first = number + 1

    with open(path, "rb") as f:
        while raw := f.readline(MAX_LINE_BYTES + 1):
            number += 1
            if len(raw) > MAX_LINE_BYTES:
                raise DataError(f"{path}: line {number} is longer than {MAX_LINE_BYTES} bytes; "
                                "not a table of numbers (one point per line)")
            if b"\x00" in raw:
                raise DataError(f"{path}: line {number} holds NUL bytes; binary data, not a text table")
            try:
                line = raw.decode("utf-8").strip()
            except UnicodeDecodeError:
                raise DataError(f"{path}: line {number} is not UTF-8 text; not a table of numbers") from None
            if not line or line.startswith("#"):
                if not pending:
                    first = number + 1
                continue
            if number == 1 and not _is_numeric_row(line, delimiter):
                first = 2
                continue  # one header line of column names
            pending.append(line)
            if len(pending) >= _LINES_PER_BLOCK:
                flush()
        flush()
    if not blocks:
        raise DataError(f"{path}: holds no rows of numbers")
    return np.concatenate(blocks) if len(blocks) > 1 else blocks[0]


def _is_numeric_row(line: str, delimiter: str | None) -> bool:
    try:
        np.loadtxt([line], delimiter=delimiter, ndmin=2, dtype=np.float64)
    except ValueError:
        return False
    return True


def read_points(path: str | Path, *, key: str | None = None, max_bytes: int = MAX_POINT_BYTES) -> Tensor:
    """The points in ``path`` as a float32 tensor ``(N, D)`` (see the module docstring).

    Args:
        path: a ``.npy``, ``.safetensors``, ``.csv`` or ``.txt`` file.
        key: tensor name inside a ``.safetensors`` file with several.
        max_bytes: the largest file, and the largest decoded array, read (default
            :data:`MAX_POINT_BYTES`, 1 GiB); raise it for larger genuine files.

    Raises:
        FileNotFoundError: no such file.
        ebms.errors.LimitExceeded: the file or the array it claims is larger than ``max_bytes``.
        ebms.errors.DataError: the file is not what its suffix says, is truncated, holds
            non-numbers, non-finite values, or fewer than 2 points (the message names the file).
    """
    check_max_bytes(max_bytes)
    p = Path(path).expanduser()
    if not p.is_file():
        raise FileNotFoundError(f"path: file {str(p)!r} not found")
    suffix = p.suffix.lower()
    if suffix not in POINT_SUFFIXES:
        raise DataError(f"path: {p}: unknown suffix {suffix!r}; expected one of {', '.join(POINT_SUFFIXES)}")
    size = file_size(p, max_bytes, _READER)
    if suffix == ".npy":
        x = torch.from_numpy(_read_npy(p, size, max_bytes))
    elif suffix == ".safetensors":
        x = _read_safetensors(p, size, key, max_bytes)
    else:
        x = torch.from_numpy(_read_table(p, "," if suffix == ".csv" else None, max_bytes))
    if x.dim() == 1 and suffix in (".npy", ".safetensors"):
        x = x[:, None]
    if x.dim() != 2 or x.shape[0] < 2 or x.shape[1] < 1:
        rows = f"; a single row is one point of dimension {x.shape[1]}" if x.dim() == 2 and x.shape[0] == 1 else ""
        raise DataError(f"path: {p}: expected points of shape (N, D) with N >= 2 (one point per row, "
                        f"to split into train and test); got shape {tuple(x.shape)}{rows}")
    if x.dtype == torch.bool or not (x.is_floating_point() or x.dtype in _INT_DTYPES):
        raise DataError(f"path: {p}: expected numbers; got dtype {x.dtype}")
    x = x.to(torch.float32).contiguous()
    bad = ~torch.isfinite(x)
    if bool(bad.any()):
        row = int(bad.any(1).nonzero()[0])
        raise DataError(f"path: {p}: expected finite numbers; got {int(bad.sum())} non-finite "
                        f"(NaN, inf, or beyond float32's range), first in point {row}")
    return x


def load_points(
    path: str | Path, *, test_fraction: float = 0.1, seed: int = 0, key: str | None = None,
    max_bytes: int = MAX_POINT_BYTES,
) -> PointCloud:
    """Read ``path`` and split it with a seeded permutation into train and test.

    Args:
        path: a ``.npy``, ``.safetensors``, ``.csv`` or ``.txt`` file of points.
        test_fraction: share of the points held out, in ``(0, 1)``; at least
            one point goes to each side.
        seed: seed of the split.
        key: tensor name inside a ``.safetensors`` file with several.
        max_bytes: size limit of the file and of the decoded array (see :func:`read_points`).

    Raises:
        ebms.errors.DataError: see :func:`read_points` (``LimitExceeded`` for a file above the limit).
    """
    frac = check_probability(test_fraction, "test_fraction", open_low=True, open_high=True)
    x = read_points(path, key=key, max_bytes=max_bytes)
    n = x.shape[0]
    n_test = min(max(1, round(frac * n)), n - 1)
    perm = torch.randperm(n, generator=torch.Generator().manual_seed(seed))
    lo, hi = x.min(0).values, x.max(0).values
    pad = 0.1 * (hi - lo).clamp(min=1e-3)
    bounds = tuple((float(a), float(b)) for a, b in zip((lo - pad).tolist(), (hi + pad).tolist()))
    return PointCloud(Path(path).stem, x[perm[n_test:]], x[perm[:n_test]], bounds)
