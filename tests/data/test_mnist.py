"""MNIST / Fashion-MNIST idx reading, search order, checksums and download (no network)."""

from __future__ import annotations

import gzip
import hashlib
import shutil
import struct
from pathlib import Path

import numpy as np
import pytest
import torch
from _peak_memory import peak_mb

from ebms.data import mnist
from ebms.data.mnist import ChecksumError, ImageDataset, load_mnist, read_idx
from ebms.data.paths import DATA_ENV_VAR, data_root
from ebms.errors import DataError, LimitExceeded

STEMS = {
    "train": ("train-images-idx3-ubyte", "train-labels-idx1-ubyte"),
    "test": ("t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte"),
}
# Per-class counts stated in shared/data/README.md (MNIST section).
TRAIN_COUNTS = [5923, 6742, 5958, 6131, 5842, 5421, 5918, 6265, 5851, 5949]
TEST_COUNTS = [980, 1135, 1032, 1010, 982, 892, 958, 1028, 974, 1009]


def idx_bytes(arr: np.ndarray, code: int = 0x08) -> bytes:
    """An idx file's bytes: magic 00 00 code ndim, big-endian uint32 dims, big-endian values."""
    dt = {0x08: ">u1", 0x09: ">i1", 0x0B: ">i2", 0x0C: ">i4", 0x0D: ">f4", 0x0E: ">f8"}[code]
    head = bytes([0, 0, code, arr.ndim]) + struct.pack(f">{arr.ndim}I", *arr.shape)
    return head + arr.astype(dt).tobytes()


def write_split(folder: Path, split: str, n: int = 5, *, gz: bool = True, side: int = 28, seed: int = 0) -> None:
    """A fake split: n random images and labels 0..9, as (gzipped) idx files."""
    rng = np.random.default_rng(seed)
    folder.mkdir(parents=True, exist_ok=True)
    img = rng.integers(0, 256, size=(n, side, side), dtype=np.uint8)
    lab = (np.arange(n) % 10).astype(np.uint8)
    for stem, arr in zip(STEMS[split], (img, lab)):
        data = idx_bytes(arr)
        if gz:
            (folder / f"{stem}.gz").write_bytes(gzip.compress(data))
        else:
            (folder / stem).write_bytes(data)


@pytest.fixture(scope="module")
def real_mnist_dir() -> Path:
    folder = data_root() / "mnist"
    if not all((folder / f"{s}.gz").is_file() for pair in STEMS.values() for s in pair):
        pytest.skip(f"real MNIST idx files not in {folder} (set {DATA_ENV_VAR} to the folder holding mnist/)")
    return folder


@pytest.fixture(scope="module")
def real_train(real_mnist_dir: Path) -> ImageDataset:
    return load_mnist("train", root=real_mnist_dir)


@pytest.fixture(scope="module")
def real_test(real_mnist_dir: Path) -> ImageDataset:
    return load_mnist("test", root=real_mnist_dir)


# ---------------------------------------------------------------- real files


def test_real_mnist_train_has_published_shape_labels_and_counts(real_train: ImageDataset) -> None:
    ds = real_train
    assert ds.images.shape == (60000, 28, 28) and ds.images.dtype == torch.uint8
    assert ds.labels.shape == (60000,) and ds.labels.dtype == torch.int64
    assert int(ds.labels[0]) == 5
    assert torch.bincount(ds.labels, minlength=10).tolist() == TRAIN_COUNTS
    assert int(ds.images.min()) == 0 and int(ds.images.max()) == 255
    # README: mean train pixel 33.318 (sum is an exact integer, so this is a tight check)
    assert abs(float(ds.images.double().mean()) - 33.318) < 5e-4
    assert (ds.name, ds.split, len(ds)) == ("mnist", "train", 60000)


def test_real_mnist_test_has_published_shape_labels_and_counts(real_test: ImageDataset) -> None:
    ds = real_test
    assert ds.images.shape == (10000, 28, 28) and ds.labels.shape == (10000,)
    assert ds.labels[:3].tolist() == [7, 2, 1]
    assert torch.bincount(ds.labels, minlength=10).tolist() == TEST_COUNTS
    assert int(ds.images.min()) == 0 and int(ds.images.max()) == 255


def test_default_search_finds_the_data_root_copy(real_mnist_dir: Path, real_test: ImageDataset) -> None:
    ds = load_mnist("test")  # data_root()/mnist, verified against the published SHA-256
    assert Path(ds.source) == real_mnist_dir
    assert torch.equal(ds.labels, real_test.labels)


def test_tampered_copy_fails_verification_and_reads_with_verify_false(
    real_mnist_dir: Path, real_test: ImageDataset, tmp_path: Path
) -> None:
    shutil.copy(real_mnist_dir / "t10k-images-idx3-ubyte.gz", tmp_path)
    labels = real_test.labels.numpy().astype(np.uint8)
    labels[0] = 3  # one label changed
    (tmp_path / "t10k-labels-idx1-ubyte.gz").write_bytes(gzip.compress(idx_bytes(labels)))
    with pytest.raises(ChecksumError, match=r"t10k-labels-idx1-ubyte\.gz: SHA-256 of the idx payload .*verify=False"):
        load_mnist("test", root=tmp_path)
    ds = load_mnist("test", root=tmp_path, verify=False)
    assert int(ds.labels[0]) == 3 and torch.equal(ds.labels[1:], real_test.labels[1:])


def test_recompressed_and_decompressed_copies_pass_verification(
    real_mnist_dir: Path, real_test: ImageDataset, tmp_path: Path
) -> None:
    # Debian-style: same payload, different gzip header (mtime 0, level 9) -> payload check passes
    payload = gzip.decompress((real_mnist_dir / "t10k-images-idx3-ubyte.gz").read_bytes())
    (tmp_path / "t10k-images-idx3-ubyte.gz").write_bytes(gzip.compress(payload, compresslevel=9, mtime=0))
    # a user who gunzipped the labels
    raw = gzip.decompress((real_mnist_dir / "t10k-labels-idx1-ubyte.gz").read_bytes())
    (tmp_path / "t10k-labels-idx1-ubyte").write_bytes(raw)
    ds = load_mnist("test", root=tmp_path)
    assert torch.equal(ds.images, real_test.images) and torch.equal(ds.labels, real_test.labels)


# ---------------------------------------------------------------- idx reader


@pytest.mark.parametrize("gz", [True, False], ids=["gzip", "raw"])
def test_read_idx_round_trips_labels_and_images(tmp_path: Path, gz: bool) -> None:
    rng = np.random.default_rng(1)
    img = rng.integers(0, 256, size=(4, 3, 2), dtype=np.uint8)
    lab = np.array([9, 0, 4, 7], dtype=np.uint8)
    for name, arr in (("img", img), ("lab", lab)):
        data = idx_bytes(arr)
        (tmp_path / name).write_bytes(gzip.compress(data) if gz else data)  # no suffix: magic bytes decide
        out = read_idx(tmp_path / name)
        assert out.dtype == torch.uint8 and out.shape == arr.shape
        assert np.array_equal(out.numpy(), arr)


def test_read_idx_converts_big_endian_multibyte_types(tmp_path: Path) -> None:
    arr = np.array([[1, -2, 70000], [2**31 - 1, -(2**31), 0]], dtype=np.int32)
    (tmp_path / "a.gz").write_bytes(idx_bytes(arr, code=0x0C))  # raw bytes despite the .gz name
    out = read_idx(tmp_path / "a.gz")
    assert out.dtype == torch.int32 and out.tolist() == arr.tolist()
    f = np.array([0.5, -1.25, 3e38], dtype=np.float32)
    (tmp_path / "f").write_bytes(gzip.compress(idx_bytes(f, code=0x0D)))
    assert read_idx(tmp_path / "f").tolist() == f.tolist()


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (b"\x00\x00", r"truncated idx file \(2 bytes, no 4-byte magic number\)"),
        (b"\x01\x02\x08\x01" + struct.pack(">I", 1) + b"\x05", r"bad magic number 0x01020801"),
        (b"\x00\x00\x07\x01" + struct.pack(">I", 1) + b"\x05", r"unknown idx dtype code 0x07"),
        (b"\x00\x00\x08\x00", r"idx header declares 0 dimensions"),
        (b"\x00\x00\x08\x03" + struct.pack(">I", 60000), r"truncated idx header \(8 bytes, 3 dims need 16\)"),
        (b"\x00\x00\x08\x01" + struct.pack(">I", 5) + b"\x01\x02", r"truncated idx file: header \(5,\) .*got 10"),
        (b"\x00\x00\x08\x01" + struct.pack(">I", 1) + b"\x01\x02", r"trailing bytes in idx file"),
    ],
    ids=["no-magic", "bad-magic", "bad-dtype", "zero-dims", "short-header", "truncated", "trailing"],
)
def test_read_idx_rejects_malformed_files_naming_the_path(tmp_path: Path, data: bytes, message: str) -> None:
    path = tmp_path / "bad-idx1-ubyte"
    path.write_bytes(data)
    with pytest.raises(ValueError, match=f"path: .*bad-idx1-ubyte: {message}"):
        read_idx(path)


def test_read_idx_reports_a_truncated_gzip_stream(tmp_path: Path) -> None:
    full = gzip.compress(idx_bytes(np.arange(200, dtype=np.uint8)))
    path = tmp_path / "cut.gz"
    path.write_bytes(full[: len(full) // 2])
    with pytest.raises(DataError, match=r"cut\.gz: the gzip stream ends early \(truncated compressed stream\)"):
        read_idx(path)
    path.write_bytes(full[:10] + b"\xff" * 20)
    with pytest.raises(DataError, match=r"cut\.gz: the idx stream (is corrupt|ends early)"):
        read_idx(path)


# ---------------------------------------------------------------- search order and content checks


def test_user_folder_is_used_and_checked(tmp_path: Path) -> None:
    write_split(tmp_path / "mine", "train", n=7)
    ds = load_mnist("train", root=tmp_path / "mine", verify=False)
    assert ds.images.shape == (7, 28, 28) and ds.labels.tolist() == list(range(7))
    assert ds.source == str(tmp_path / "mine")
    with pytest.raises(ChecksumError, match=r"train-images-idx3-ubyte\.gz: SHA-256 .*published mnist"):
        load_mnist("train", root=tmp_path / "mine")


def test_explicit_root_is_the_only_place_searched(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match=f"not found in: {tmp_path}; .*download=True"):
        load_mnist("test", root=tmp_path)


def test_data_root_then_debian_folder(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv(DATA_ENV_VAR, str(tmp_path / "root"))
    debian = tmp_path / "usr-share-datasets-fashion-mnist"
    monkeypatch.setitem(mnist.DEBIAN_DIRS, "fashion-mnist", (debian,))
    with pytest.raises(FileNotFoundError, match=f"fashion-mnist.*{tmp_path / 'root' / 'fashion-mnist'}, {debian}"):
        load_mnist("test", dataset="fashion-mnist")
    write_split(debian, "test", n=3, seed=1)
    assert load_mnist("test", dataset="fashion-mnist", verify=False).source == str(debian)
    write_split(tmp_path / "root" / "fashion-mnist", "test", n=4, gz=False)
    ds = load_mnist("test", dataset="fashion-mnist", verify=False)
    assert ds.source == str(tmp_path / "root" / "fashion-mnist") and len(ds) == 4


def test_debian_fashion_mnist_files_load_when_installed() -> None:
    folder = mnist.DEBIAN_DIRS["fashion-mnist"][0]
    if not (folder / "t10k-labels-idx1-ubyte.gz").is_file():
        pytest.skip(f"Debian's dataset-fashion-mnist is not installed ({folder} absent)")
    ds = load_mnist("test", root=folder, dataset="fashion-mnist")  # payload checksums must match
    assert ds.images.shape == (10000, 28, 28) and int(ds.labels[0]) == 9


def test_content_that_is_not_an_mnist_split_is_refused(tmp_path: Path) -> None:
    write_split(tmp_path / "a", "test", n=3, side=27)
    with pytest.raises(ValueError, match=r"expected uint8 images \(n, 28, 28\); got torch.uint8 \(3, 27, 27\)"):
        load_mnist("test", root=tmp_path / "a", verify=False)
    write_split(tmp_path / "b", "test", n=3)
    (tmp_path / "b" / "t10k-labels-idx1-ubyte.gz").write_bytes(gzip.compress(idx_bytes(np.array([1, 2], np.uint8))))
    with pytest.raises(ValueError, match=r"expected 3 uint8 labels \(one per image\); got torch.uint8 \(2,\)"):
        load_mnist("test", root=tmp_path / "b", verify=False)
    (tmp_path / "b" / "t10k-labels-idx1-ubyte.gz").write_bytes(gzip.compress(idx_bytes(np.array([1, 2, 12], np.uint8))))
    with pytest.raises(ValueError, match=r"expected labels in 0\.\.9; got maximum 12"):
        load_mnist("test", root=tmp_path / "b", verify=False)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"split": "valid"}, r"split: expected one of 'train', 'test'; got 'valid'"),
        ({"dataset": "kmnist"}, r"dataset: expected one of 'fashion-mnist', 'mnist'; got 'kmnist'"),
    ],
)
def test_bad_split_or_dataset_names_the_argument(kwargs: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        load_mnist(**kwargs)


# ---------------------------------------------------------------- download (file:// mirrors, no network)


def _fake_mirror(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, *, patch_sums: bool) -> Path:
    served = tmp_path / "served"
    write_split(served, "test", n=6, seed=2)
    missing = tmp_path / "no-such-mirror"
    monkeypatch.setitem(mnist.MIRRORS, "mnist", (missing.as_uri() + "/", served.as_uri() + "/"))
    if patch_sums:
        for stem in STEMS["test"]:
            data = (served / f"{stem}.gz").read_bytes()
            sums = (hashlib.sha256(data).hexdigest(), hashlib.sha256(gzip.decompress(data)).hexdigest())
            monkeypatch.setitem(mnist.SHA256["mnist"], stem, sums)
    return served


def test_download_fetches_from_the_next_mirror_and_keeps_verified_files(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _fake_mirror(tmp_path, monkeypatch, patch_sums=True)
    target = tmp_path / "target"
    ds = load_mnist("test", root=target, download=True)
    assert len(ds) == 6 and ds.source == str(target)
    assert sorted(p.name for p in target.iterdir()) == sorted(f"{s}.gz" for s in STEMS["test"])
    assert load_mnist("test", root=target).labels.tolist() == ds.labels.tolist()  # now found locally


def test_download_with_wrong_checksum_raises_and_leaves_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _fake_mirror(tmp_path, monkeypatch, patch_sums=False)  # real MNIST sums, fake served files
    target = tmp_path / "target"
    with pytest.raises(
        ChecksumError,
        match=r"could not download mnist t10k-images-idx3-ubyte\.gz .*nothing kept.*"
        r"served/t10k-images-idx3-ubyte\.gz: SHA-256 [0-9a-f]{64}, expected 8d422c7b",
    ):
        load_mnist("test", root=target, download=True)
    assert list(target.iterdir()) == []  # no partial or unverified file left behind


def test_download_failure_on_every_mirror_is_an_os_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(mnist.MIRRORS, "mnist", ((tmp_path / "nowhere").as_uri() + "/",))
    with pytest.raises(OSError, match=r"could not download mnist t10k-images-idx3-ubyte\.gz .*nowhere"):
        load_mnist("test", root=tmp_path / "target", download=True)
    assert list((tmp_path / "target").iterdir()) == []


def test_download_into_an_unwritable_place_says_so(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("not a folder")
    with pytest.raises(OSError, match=r"cannot create .*file/mnist for the download .*pass root= a writable folder"):
        load_mnist("test", root=tmp_path / "file" / "mnist", download=True)


def _gzip_bomb(path: Path, header: bytes, gib: float) -> Path:
    """``header`` followed by ``gib`` GiB of zeros, as a multi-member gzip of a few MB."""
    block = gzip.compress(b"\x00" * (1 << 20), compresslevel=9)  # 1 MiB -> about 1 kB
    with open(path, "wb") as f:
        f.write(gzip.compress(header))
        for _ in range(int(gib * 1024)):
            f.write(block)
    return path




def test_gzip_bomb_behind_a_small_header_stops_one_byte_past_the_claim(tmp_path: Path) -> None:
    header = bytes([0, 0, 8, 3]) + struct.pack(">3I", 1000, 28, 28)  # claims 784,000 bytes
    path = _gzip_bomb(tmp_path / "bomb.gz", header, 2.4)
    assert path.stat().st_size < 4 << 20
    peak, err = peak_mb(lambda: read_idx(path))
    assert isinstance(err, DataError) and "bomb.gz: trailing bytes in idx file" in str(err), err
    assert peak < 16, peak  # the claim (0.75 MiB) and a few 1 MiB blocks, never the 2.4 GiB


def test_idx_header_claiming_gigabytes_is_refused_before_reading_the_data(tmp_path: Path) -> None:
    header = bytes([0, 0, 8, 3]) + struct.pack(">3I", 3_000_000, 28, 28)  # claims 2.35 GB
    path = _gzip_bomb(tmp_path / "claims.gz", header, 0.01)
    peak, err = peak_mb(lambda: read_idx(path))
    assert isinstance(err, LimitExceeded), err
    msg = str(err)
    assert "claims.gz: the idx data its header claims, (3000000, 28, 28)" in msg
    assert f"max_bytes={mnist.MAX_IDX_BYTES}" in msg and "pass max_bytes=2352000000 to read_idx" in msg
    assert peak < 4, peak
    folder = tmp_path / "m"  # the same file through load_mnist
    folder.mkdir()
    shutil.copy(path, folder / "t10k-images-idx3-ubyte.gz")
    shutil.copy(path, folder / "t10k-labels-idx1-ubyte.gz")
    with pytest.raises(LimitExceeded, match=r"t10k-images-idx3-ubyte.gz: the idx data its header claims"):
        load_mnist("test", root=folder)


def test_raw_idx_header_claiming_more_than_the_file_is_refused_without_reading(tmp_path: Path) -> None:
    path = tmp_path / "raw-idx3-ubyte"
    path.write_bytes(bytes([0, 0, 8, 3]) + struct.pack(">3I", 100_000, 28, 28) + b"\x01" * 100)
    peak, err = peak_mb(lambda: read_idx(path))
    assert isinstance(err, DataError) and "raw-idx3-ubyte: truncated idx file" in str(err), err
    assert peak < 4, peak  # one 1 MiB read buffer, never the 78 MB claimed


def test_sparse_idx_file_above_the_limit_is_refused_by_its_size(tmp_path: Path) -> None:
    path = tmp_path / "big-idx3-ubyte"
    with open(path, "wb") as f:
        f.truncate(2 << 30)
    with pytest.raises(LimitExceeded, match=r"big-idx3-ubyte: the file is 2.0 GiB .* pass max_bytes=2147483648"):
        read_idx(path)
