"""MNIST and Fashion-MNIST from idx files, with checksum checks and an optional download.

The idx format (LeCun et al., 1998) is a 4-byte magic number ``00 00 <dtype>
<ndim>``, then ``ndim`` big-endian uint32 sizes, then the values in row-major
order, big-endian. :func:`read_idx` reads gzip-compressed or raw files (told
apart by the gzip magic bytes ``1f 8b``, never by the file name) and checks the
magic, the dtype code, the header and the exact byte count.

Resources: a file is streamed (hashing and gunzipping in 1 MiB blocks); the size its idx header
claims is checked against ``max_bytes`` (default :data:`MAX_IDX_BYTES`, 256 MiB) before any data
are read, and at most one byte past the claimed size is ever decompressed, so a gzip bomb (1 MB
that inflates to GBs) stops at the claim or the limit: :class:`~ebms.errors.LimitExceeded` or
:class:`~ebms.errors.DataError`, naming the file.

Where :func:`load_mnist` looks (the first folder holding the split's two
files wins; ``name`` is ``mnist`` or ``fashion-mnist``):

1. ``root`` when given: a user's own copy; nothing else is searched;
2. ``data_root() / name`` (``$EBMS_DATA``, else ``../shared/data``, else
   ``./data``; see :mod:`ebms.data.paths`);
3. Fashion-MNIST only: the files of Debian's ``dataset-fashion-mnist`` package
   (:data:`DEBIAN_DIRS`);
4. with ``download=True``: the canonical mirrors (:data:`MIRRORS`), into
   ``root`` or ``data_root() / name``; every download is checked against the
   published SHA-256 before it is kept.

Each file may be gzipped (``train-images-idx3-ubyte.gz``) or raw
(``train-images-idx3-ubyte``). With ``verify=True`` a file passes when the
SHA-256 of its bytes equals the published value of the canonical ``.gz``, or
when the SHA-256 of its idx payload equals that of the canonical payload; the
second form accepts re-compressed copies (Debian's package rewrites the gzip
headers) and decompressed ones. Use ``verify=False`` for a modified copy.

Example:
    >>> from ebms.data.mnist import load_mnist
    >>> ds = load_mnist("test")                      # doctest: +SKIP
    >>> ds.images.shape, ds.images.dtype, ds.labels[:3].tolist()  # doctest: +SKIP
    (torch.Size([10000, 28, 28]), torch.uint8, [7, 2, 1])
"""

from __future__ import annotations

import gzip
import hashlib
import math
import os
import tempfile
import urllib.request
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

import numpy as np
import torch
from torch import Tensor

from ebms._checks import check_choice
from ebms.data._limits import BLOCK, check_max_bytes, check_size, file_size, read_at_most
from ebms.data.paths import data_root
from ebms.errors import DataError

__all__ = [
    "DATASETS",
    "DEBIAN_DIRS",
    "MAX_IDX_BYTES",
    "MIRRORS",
    "SHA256",
    "ChecksumError",
    "ImageDataset",
    "load_mnist",
    "read_idx",
]

#: Data set names :func:`load_mnist` accepts (also the folder name under the data root).
DATASETS = ("fashion-mnist", "mnist")

_FILES = {
    "train": ("train-images-idx3-ubyte", "train-labels-idx1-ubyte"),
    "test": ("t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte"),
}

#: Published SHA-256 per data set and file: ``(sha256 of the .gz file, sha256 of the idx payload)``.
#: MNIST: the ``.gz`` values are the widely published ones quoted in ``shared/data/README.md``
#: (and in torchvision's ``prototype/datasets/_builtin/mnist.py``); the payload values were
#: computed from those verified files. Fashion-MNIST: the ``.gz`` values are those in
#: torchvision's ``prototype/datasets/_builtin/mnist.py`` (pytorch/vision), files whose md5s
#: equal the ones zalandoresearch/fashion-mnist's README publishes; the payload values were
#: computed from Debian's ``dataset-fashion-mnist`` 0.0~git20200523.55506a9-1 files and agree
#: with the payload md5s torchvision listed (``f4a8712d...`` for train images).
SHA256: dict[str, dict[str, tuple[str, str]]] = {
    "mnist": {
        "train-images-idx3-ubyte": (
            "440fcabf73cc546fa21475e81ea370265605f56be210a4024d2ca8f203523609",
            "ba891046e6505d7aadcbbe25680a0738ad16aec93bde7f9b65e87a2fc25776db",
        ),
        "train-labels-idx1-ubyte": (
            "3552534a0a558bbed6aed32b30c495cca23d567ec52cac8be1a0730e8010255c",
            "65a50cbbf4e906d70832878ad85ccda5333a97f0f4c3dd2ef09a8a9eef7101c5",
        ),
        "t10k-images-idx3-ubyte": (
            "8d422c7b0a1c1c79245a5bcf07fe86e33eeafee792b84584aec276f5a2dbc4e6",
            "0fa7898d509279e482958e8ce81c8e77db3f2f8254e26661ceb7762c4d494ce7",
        ),
        "t10k-labels-idx1-ubyte": (
            "f7ae60f92e00ec6debd23a6088c31dbd2371eca3ffa0defaefb259924204aec6",
            "ff7bcfd416de33731a308c3f266cc351222c34898ecbeaf847f06e48f7ec33f2",
        ),
    },
    "fashion-mnist": {
        "train-images-idx3-ubyte": (
            "3aede38d61863908ad78613f6a32ed271626dd12800ba2636569512369268a84",
            "c59f468a2f672dc815687fe0f83887768d799fd8a3f3276145d20f83aa44d888",
        ),
        "train-labels-idx1-ubyte": (
            "a04f17134ac03560a47e3764e11b92fc97de4d1bfaf8ba1a3aa29af54cc90845",
            "bad3541b69d912435c50bb6ba87bec294ff4f6a2e1246121d8633921760443d9",
        ),
        "t10k-images-idx3-ubyte": (
            "346e55b948d973a97e58d2351dde16a484bd415d4595297633bb08f03db6a073",
            "5b4141f0afbad91edebe8549f8fcffe087ea10ca49f1dbef5c9a5cd8815ce37b",
        ),
        "t10k-labels-idx1-ubyte": (
            "67da17c76eaffca5446c3361aaab5c3cd6d1c2608764d35dfb1850b086bf8dd5",
            "0402a96d92fd2663957122ceb108a494c5af83dab82d92729df917d7dec38c34",
        ),
    },
}

#: Where Debian's ``dataset-fashion-mnist`` package (bookworm: 0.0~git20200523.55506a9-1, found
#: with ``dpkg -c``) installs the four ``.gz`` files. Its gzip headers were rewritten at build
#: time (no file name, new mtime), so only the payload checksums match; MNIST has no such package.
DEBIAN_DIRS: dict[str, tuple[Path, ...]] = {
    "mnist": (),
    "fashion-mnist": (Path("/usr/share/datasets/fashion-mnist"),),
}

#: Download base URLs, tried in order (a file's URL is base + name + ``.gz``).
MIRRORS: dict[str, tuple[str, ...]] = {
    "mnist": (
        "https://ossci-datasets.s3.amazonaws.com/mnist/",
        "http://yann.lecun.com/exdb/mnist/",
    ),
    "fashion-mnist": (
        "http://fashion-mnist.s3-website.eu-central-1.amazonaws.com/",
        "https://raw.githubusercontent.com/zalandoresearch/fashion-mnist/master/data/fashion/",
    ),
}

#: Default ``max_bytes`` of :func:`read_idx` / :func:`load_mnist`: 256 MiB, five times the largest
#: MNIST file's idx data (47 MB); raise it with ``max_bytes=`` (``data.max_mb`` on the command line).
MAX_IDX_BYTES = 256 << 20
_READER = "read_idx/load_mnist/binarized_mnist"

# idx dtype code -> numpy big-endian dtype
_IDX_DTYPES = {
    0x08: ">u1",
    0x09: ">i1",
    0x0B: ">i2",
    0x0C: ">i4",
    0x0D: ">f4",
    0x0E: ">f8",
}


class ChecksumError(DataError):
    """A file's checksum (SHA-256, or md5 for the NLTK CoNLL zips) is not the published one."""


@dataclass(frozen=True)
class ImageDataset:
    """One split of MNIST or Fashion-MNIST.

    Attributes:
        images: ``(n, 28, 28)`` uint8, values 0..255.
        labels: ``(n,)`` int64, values 0..9.
        name: ``"mnist"`` or ``"fashion-mnist"``.
        split: ``"train"`` or ``"test"``.
        source: the folder the files were read from.
    """

    images: Tensor
    labels: Tensor
    name: str
    split: str
    source: str

    def __len__(self) -> int:
        return int(self.labels.shape[0])


def _idx_header(path: Path, stream: BinaryIO, max_bytes: int, on_block: Callable[[bytes], None]
                ) -> tuple[tuple[int, ...], np.dtype, int]:
    """Read and check the idx header: ``(dims, dtype, payload bytes it claims)``."""
    head = read_at_most(stream, 4, path, "the idx stream", on_block)
    if len(head) < 4:
        raise DataError(f"path: {path}: truncated idx file ({len(head)} bytes, no 4-byte magic number)")
    zero, code, ndim = head[:2], head[2], head[3]
    if zero != b"\x00\x00":
        raise DataError(f"path: {path}: bad magic number 0x{head.hex()} (an idx file starts with 00 00)")
    if code not in _IDX_DTYPES:
        known = ", ".join(f"0x{c:02X}" for c in _IDX_DTYPES)
        raise DataError(f"path: {path}: unknown idx dtype code 0x{code:02X} (expected one of {known})")
    if ndim == 0:
        raise DataError(f"path: {path}: idx header declares 0 dimensions")
    raw_dims = read_at_most(stream, 4 * ndim, path, "the idx stream", on_block)
    if len(raw_dims) < 4 * ndim:
        raise DataError(f"path: {path}: truncated idx header ({4 + len(raw_dims)} bytes, {ndim} dims need "
                        f"{4 + 4 * ndim})")
    dims = tuple(int(d) for d in np.frombuffer(raw_dims, dtype=">u4"))
    dtype = np.dtype(_IDX_DTYPES[code])
    claimed = math.prod(dims) * dtype.itemsize  # exact (Python ints): no overflow
    check_size(path, claimed, max_bytes, f"the idx data its header claims, {dims} x {dtype.itemsize} byte(s),",
               _READER)
    return dims, dtype, claimed


def _read_idx_file(path: Path, max_bytes: int) -> tuple[Tensor, str, str]:
    """``(tensor, sha256 of the file's bytes, sha256 of the idx payload)``, read in bounded memory.

    The file is streamed (gunzipped when it starts with ``1f 8b``); the header's claimed size is
    checked against ``max_bytes`` before the data are read, and at most one byte beyond the
    claimed size is ever decompressed, so a decompression bomb stops there.
    """
    size = file_size(path, max_bytes, _READER)
    file_sha, payload_sha = hashlib.sha256(), hashlib.sha256()
    with open(path, "rb") as raw:
        while block := raw.read(BLOCK):
            file_sha.update(block)
        raw.seek(0)
        gzipped = raw.read(2) == b"\x1f\x8b"
        raw.seek(0)
        stream: BinaryIO = gzip.GzipFile(fileobj=raw, mode="rb") if gzipped else raw  # type: ignore[assignment]
        dims, dtype, claimed = _idx_header(path, stream, max_bytes, payload_sha.update)
        header = 4 + 4 * len(dims)
        if not gzipped and size != header + claimed:
            what = "truncated" if size < header + claimed else "trailing bytes in"
            raise DataError(f"path: {path}: {what} idx file: header {dims} x {dtype.itemsize} byte(s) needs "
                            f"{header + claimed} bytes; got {size}")
        data = read_at_most(stream, claimed + 1, path, "the gzip stream", payload_sha.update)
    if len(data) != claimed:
        what = "truncated" if len(data) < claimed else "trailing bytes in"
        got = f"{header + len(data)}" if len(data) <= claimed else "more"
        raise DataError(f"path: {path}: {what} idx file: header {dims} x {dtype.itemsize} byte(s) needs "
                        f"{header + claimed} bytes; got {got}")
    arr = np.frombuffer(data, dtype=dtype).reshape(dims)
    tensor = torch.from_numpy(arr.astype(dtype.newbyteorder("="), copy=True))
    return tensor, file_sha.hexdigest(), payload_sha.hexdigest()


def read_idx(path: str | os.PathLike[str], *, max_bytes: int = MAX_IDX_BYTES) -> Tensor:
    """Read one idx file (gzip or raw) into a tensor of the stored dtype and shape.

    Args:
        path: the file.
        max_bytes: the largest file, and the largest idx data a header may claim, read
            (default :data:`MAX_IDX_BYTES`, 256 MiB; MNIST's largest file holds 47 MB).

    Returns:
        A tensor of shape ``dims`` from the header, e.g. ``(60000, 28, 28)``
        uint8 for ``idx3-ubyte``; multi-byte types are converted to native order.

    Raises:
        ebms.errors.LimitExceeded: the file, or the size its header claims, is above ``max_bytes``.
        ebms.errors.DataError: truncated or corrupt gzip data, bad magic number, unknown
            dtype code, or a byte count that does not match the header (the message names the path).
    """
    check_max_bytes(max_bytes)
    return _read_idx_file(Path(path), max_bytes)[0]


def _find(folder: Path, stem: str) -> Path | None:
    for candidate in (folder / f"{stem}.gz", folder / stem):
        if candidate.is_file():
            return candidate
    return None


def _read_checked(path: Path, stem: str, dataset: str, verify: bool, max_bytes: int) -> Tensor:
    tensor, file_sha, payload_sha = _read_idx_file(path, max_bytes)
    if verify:
        want_file, want_payload = SHA256[dataset][stem]
        if file_sha != want_file and payload_sha != want_payload:
            raise ChecksumError(
                f"path: {path}: SHA-256 of the idx payload is {payload_sha}; the published {dataset} "
                f"{stem} has {want_payload} (file {want_file} gzipped). The file is damaged or "
                "modified; pass verify=False to read a modified copy on purpose"
            )
    return tensor


def _download(dataset: str, stem: str, folder: Path) -> Path:
    """Fetch ``stem.gz`` from the mirrors into ``folder``; keep it only when its SHA-256 matches."""
    target = folder / f"{stem}.gz"
    urls = [f"{base}{stem}.gz" for base in MIRRORS[dataset]]
    download_verified(urls, target, SHA256[dataset][stem][0], f"{dataset} {stem}.gz")
    return target


def download_verified(urls: Sequence[str], target: Path, sha256: str, what: str) -> None:
    """Fetch ``target`` from the first of ``urls`` that serves it whole; keep it only when its SHA-256 matches.

    Each download goes to a temporary file beside ``target`` (removed on any failure) and replaces
    ``target`` only once its hex digest equals ``sha256``.

    Raises:
        OSError: ``target``'s folder cannot be created, or every URL failed to download; one line
            naming ``what``, the folder and each URL's failure.
        ChecksumError: as the ``OSError``, when a download arrived but did not match ``sha256``.
    """
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise OSError(f"cannot create {target.parent} for the download ({e}); pass root= a writable folder") from None
    failures: list[str] = []
    mismatch = False
    for url in urls:
        fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".part", dir=target.parent)
        try:
            digest = hashlib.sha256()
            with os.fdopen(fd, "wb") as out, urllib.request.urlopen(url, timeout=60) as resp:
                while chunk := resp.read(1 << 20):
                    digest.update(chunk)
                    out.write(chunk)
            if digest.hexdigest() != sha256:
                mismatch = True
                failures.append(f"{url}: SHA-256 {digest.hexdigest()}, expected {sha256}")
                continue
            os.replace(tmp, target)
            return
        except OSError as e:
            failures.append(f"{url}: {e}")
        finally:
            if os.path.exists(tmp):
                os.unlink(tmp)
    err = ChecksumError if mismatch else OSError
    raise err(f"could not download {what} into {target.parent} (nothing kept): " + "; ".join(failures))


def load_mnist(
    split: str = "train",
    *,
    root: str | os.PathLike[str] | None = None,
    dataset: str = "mnist",
    download: bool = False,
    verify: bool = True,
    max_bytes: int = MAX_IDX_BYTES,
) -> ImageDataset:
    """Load one split of MNIST or Fashion-MNIST (see the module docstring for where it looks).

    Args:
        split: ``"train"`` (60,000 images) or ``"test"`` (10,000).
        root: a folder holding the idx files; when given, only it is searched
            (and downloads go there).
        dataset: ``"mnist"`` or ``"fashion-mnist"``.
        download: fetch missing files from :data:`MIRRORS` (SHA-256 checked).
        verify: check each file against :data:`SHA256` (see the module docstring).
        max_bytes: size limit of each file and of the data its idx header claims (see
            :func:`read_idx`).

    Returns:
        An :class:`ImageDataset`: images ``(n, 28, 28)`` uint8, labels ``(n,)`` int64.

    Raises:
        FileNotFoundError: no folder holds both files and ``download`` is off
            (the message lists the folders searched).
        ChecksumError: a file (or a download) does not match the published SHA-256 (a
            :class:`~ebms.errors.DataError`).
        ebms.errors.LimitExceeded: a file, or the size its header claims, is above ``max_bytes``.
        ebms.errors.DataError: idx content that is not an MNIST split, or a damaged file.
        ValueError: a bad ``split``/``dataset``.
    """
    check_max_bytes(max_bytes)
    check_choice(split, "split", tuple(_FILES))
    check_choice(dataset, "dataset", DATASETS)
    stems = _FILES[split]
    if root is not None:
        folders = [Path(root).expanduser()]
    else:
        folders = [data_root() / dataset, *DEBIAN_DIRS[dataset]]
    found: tuple[Path, list[Path]] | None = None
    for folder in folders:
        paths = [_find(folder, s) for s in stems]
        if paths[0] is not None and paths[1] is not None:
            found = (folder, [paths[0], paths[1]])
            break
    if found is None:
        if not download:
            looked = ", ".join(str(f) for f in folders)
            raise FileNotFoundError(
                f"{dataset} {split}: files {stems[0]}[.gz] and {stems[1]}[.gz] not found in: {looked}; "
                f"set $EBMS_DATA, pass root=, or pass download=True"
            )
        found = (folders[0], [_find(folders[0], s) or _download(dataset, s, folders[0]) for s in stems])
    folder, (img_path, lab_path) = found
    images = _read_checked(img_path, stems[0], dataset, verify, max_bytes)
    labels = _read_checked(lab_path, stems[1], dataset, verify, max_bytes)
    if images.dtype != torch.uint8 or images.dim() != 3 or tuple(images.shape[1:]) != (28, 28):
        raise DataError(
            f"path: {img_path}: expected uint8 images (n, 28, 28); got {images.dtype} {tuple(images.shape)}"
        )
    if labels.dtype != torch.uint8 or labels.dim() != 1 or labels.shape[0] != images.shape[0]:
        raise DataError(
            f"path: {lab_path}: expected {images.shape[0]} uint8 labels (one per image); "
            f"got {labels.dtype} {tuple(labels.shape)}"
        )
    if labels.numel() and int(labels.max()) > 9:
        raise DataError(f"path: {lab_path}: expected labels in 0..9; got maximum {int(labels.max())}")
    return ImageDataset(images, labels.long(), dataset, split, str(folder))
