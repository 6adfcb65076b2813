"""Continuous images in [-1, 1]: exact level mapping from the loaders, uniform dequantization, OOD
transforms, balanced labelled subsets, and every validation message. Real MNIST / Fashion-MNIST tests
skip with the reason when the files are not under the data root ($EBMS_DATA)."""

from __future__ import annotations

import math

import pytest
import torch

from ebms.data.images import (
    ContinuousImages,
    dequantize,
    flip_images,
    label_subset,
    load_continuous_images,
    noise_images,
    rotate_images,
)
from ebms.data.paths import DATA_ENV_VAR, data_root

try:
    import sklearn  # noqa: F401

    HAS_SKLEARN = True
except ImportError:
    HAS_SKLEARN = False

needs_sklearn = pytest.mark.skipif(not HAS_SKLEARN, reason="scikit-learn not installed (pip install scikit-learn)")
STEMS = ("t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte")


def _needs(name: str) -> None:
    folder = data_root() / name
    if not all((folder / f"{s}.gz").is_file() or (folder / s).is_file() for s in STEMS):
        pytest.skip(f"{name} test idx files not in {folder} (set {DATA_ENV_VAR} to the folder holding {name}/)")


@needs_sklearn
def test_digits_map_levels_exactly_and_split_every_fifth() -> None:
    from ebms.data.digits import load_digits_images

    raw, labels = load_digits_images()
    train = load_continuous_images("digits", "train")
    test = load_continuous_images("digits", "test")
    assert isinstance(train, ContinuousImages) and (train.name, train.split, train.levels) == ("digits", "train", 17)
    assert train.images.shape == (1437, 1, 8, 8) and test.images.shape == (360, 1, 8, 8) and len(test) == 360
    assert train.images.dtype == torch.float32 and train.labels.dtype == torch.int64
    is_test = torch.arange(1797) % 5 == 0
    assert torch.equal(test.labels, labels[is_test]) and torch.equal(train.labels, labels[~is_test])
    assert torch.equal(test.images[:, 0], raw[is_test] / 8 - 1)  # 2v/16 - 1, exact in float32
    assert float(train.images.min()) == -1.0 and float(train.images.max()) == 1.0
    assert load_continuous_images("digits", "test", limit=7).images.shape == (7, 1, 8, 8)


@pytest.mark.parametrize("name", ["mnist", "fashion-mnist"])
def test_real_mnist_sets_map_levels_exactly(name: str) -> None:
    _needs(name)
    from ebms.data.mnist import load_mnist

    ds = load_continuous_images(name, "test", limit=500)
    raw = load_mnist("test", dataset=name)
    assert ds.images.shape == (500, 1, 28, 28) and ds.levels == 256 and ds.split == "test"
    v = raw.images[:500].to(torch.float64)
    torch.testing.assert_close(ds.images[:, 0].double(), 2 * v / 255 - 1, rtol=0, atol=1e-7)
    assert torch.equal(ds.labels, raw.labels[:500])
    assert float(ds.images.min()) == -1.0 and float(ds.images.max()) == 1.0
    # on the 256-level grid: dequantize accepts it and recovers the levels exactly
    x = dequantize(ds.images[:50], torch.Generator().manual_seed(0))
    assert torch.equal(torch.floor((x + 1) * 128).clamp(max=255), raw.images[:50, None].to(torch.float32))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_dequantize_fills_each_level_interval_uniformly(dtype: torch.dtype) -> None:
    g = torch.Generator().manual_seed(3)
    v = torch.randint(0, 17, (40, 1, 8, 8), generator=g)
    x = (v.to(dtype) * 2 - 16) / 16
    out = dequantize(x, torch.Generator().manual_seed(4), levels=17)
    assert out.shape == x.shape and out.dtype == dtype
    frac = (out + 1) * 17 / 2 - v.to(dtype)  # u in [0, 1)
    assert float(frac.min()) >= -1e-5 and float(frac.max()) <= 1 + 1e-5
    # u ~ U[0, 1): mean 1/2, sd 1/sqrt(12 n); z = 4
    n = frac.numel()
    assert abs(float(frac.double().mean()) - 0.5) < 4 / math.sqrt(12 * n)
    assert torch.equal(out, dequantize(x, torch.Generator().manual_seed(4), levels=17))


def test_dequantize_refuses_values_off_the_grid() -> None:
    x = torch.full((1, 1, 2, 2), -1.0)
    once = dequantize(x, torch.Generator().manual_seed(0))
    with pytest.raises(ValueError, match=r"x: expected values on the 256-level grid .*already dequantized"):
        dequantize(once + 1e-3)
    with pytest.raises(ValueError, match="x: expected values on the 256-level grid"):
        dequantize(torch.full((1, 1, 2, 2), 3.0))
    with pytest.raises(ValueError, match="levels: expected an int >= 2"):
        dequantize(x, levels=1)
    with pytest.raises(ValueError, match=r"x: expected images \(N, C, H, W\) with N >= 1; got shape \(2, 2\)"):
        dequantize(torch.zeros(2, 2))


def test_flips_and_rotations_move_pixels_as_named() -> None:
    x = torch.arange(6, dtype=torch.float32).reshape(1, 1, 2, 3)  # [[0, 1, 2], [3, 4, 5]]
    assert flip_images(x, "h")[0, 0].tolist() == [[2, 1, 0], [5, 4, 3]]
    assert flip_images(x, "v")[0, 0].tolist() == [[3, 4, 5], [0, 1, 2]]
    assert rotate_images(x, 1)[0, 0].tolist() == [[2, 5], [1, 4], [0, 3]]  # counter-clockwise
    assert torch.equal(rotate_images(x, 4), x) and torch.equal(rotate_images(x, -1), rotate_images(x, 3))
    assert torch.equal(flip_images(flip_images(x)), x)


def test_noise_images_shapes_ranges_and_kinds() -> None:
    u = noise_images(500, (1, 4, 4), torch.Generator().manual_seed(0))
    assert u.shape == (500, 1, 4, 4) and u.dtype == torch.float32
    assert float(u.min()) >= -1 and float(u.max()) < 1
    # uniform on [-1, 1): mean 0, sd 1/sqrt(3 n); z = 4
    assert abs(float(u.double().mean())) < 4 / math.sqrt(3 * u.numel())
    gauss = noise_images(3, (2, 3, 3), torch.Generator().manual_seed(0), kind="gaussian", std=5.0, dtype=torch.float64)
    assert gauss.dtype == torch.float64 and float(gauss.abs().max()) == 1.0  # sd 5: most values clipped
    same = noise_images(3, (2, 3, 3), torch.Generator().manual_seed(0), kind="gaussian", std=5.0, dtype=torch.float64)
    assert torch.equal(gauss, same)


def test_label_subset_is_balanced_and_reproducible() -> None:
    labels = torch.tensor([0, 1, 2] * 20 + [2] * 5)
    idx = label_subset(labels, 4, torch.Generator().manual_seed(0))
    assert idx.dtype == torch.int64 and idx.shape == (12,)
    assert torch.equal(idx, idx.sort().values) and idx.unique().numel() == 12
    assert torch.bincount(labels[idx]).tolist() == [4, 4, 4]
    assert torch.equal(idx, label_subset(labels, 4, torch.Generator().manual_seed(0)))
    assert label_subset(torch.tensor([5]), 1).tolist() == [0]


@pytest.mark.parametrize(
    ("call", "err", "match"),
    [
        (lambda: load_continuous_images("cifar10"), ValueError,
         "name: expected one of 'digits', 'fashion-mnist', 'mnist'; got 'cifar10'"),
        (lambda: load_continuous_images("digits", "valid"), ValueError, "split: expected 'train' or 'test'; got 'valid'"),
        (lambda: load_continuous_images("digits", limit=0), ValueError, "limit: expected an int >= 1"),
        (lambda: load_continuous_images("digits", root="/tmp"), ValueError, "root: the digits ship inside scikit-learn"),
        (lambda: load_continuous_images("mnist", root="/nonexistent-ebms"), FileNotFoundError, "mnist train: files"),
        (lambda: flip_images(torch.zeros(1, 1, 2, 2), "x"), ValueError, "dim: expected 'h'"),
        (lambda: flip_images(torch.zeros(1, 1, 2, 2, dtype=torch.uint8)), TypeError, "x: expected a floating-point"),
        (lambda: rotate_images(torch.zeros(1, 1, 2, 2), 1.0), TypeError, "k: expected an int"),
        (lambda: rotate_images(torch.zeros(0, 1, 2, 2)), ValueError, r"x: expected images .* got shape \(0, 1, 2, 2\)"),
        (lambda: flip_images(torch.full((1, 1, 2, 2), float("nan"))), ValueError, "x: expected a finite tensor"),
        (lambda: noise_images(0, (1, 2, 2)), ValueError, "n: expected an int >= 1"),
        (lambda: noise_images(1, (2, 2)), ValueError, r"shape: expected \(C, H, W\) of positive ints; got \(2, 2\)"),
        (lambda: noise_images(1, (1, 0, 2)), ValueError, "shape: expected"),
        (lambda: noise_images(1, (1, 2, 2), kind="salt"), ValueError, "kind: expected 'uniform' or 'gaussian'"),
        (lambda: noise_images(1, (1, 2, 2), kind="gaussian", std=0.0), ValueError, "std: expected a finite number > 0"),
        (lambda: noise_images(1, (1, 2, 2), dtype=torch.int64), TypeError, "dtype: expected a floating torch.dtype"),
        (lambda: label_subset(torch.tensor([0, 0, 1]), 2), ValueError, "n_per_class: class 1 has only 1 rows"),
        (lambda: label_subset(torch.tensor([0, -1]), 1), ValueError, "labels: expected class indices >= 0; got minimum -1"),
        (lambda: label_subset(torch.tensor([0.0, 1.0]), 1), TypeError, "labels: expected an integer tensor"),
        (lambda: label_subset(torch.zeros(2, 2, dtype=torch.long), 1), ValueError, "labels: expected a non-empty 1-D"),
        (lambda: label_subset(torch.zeros(0, dtype=torch.long), 1), ValueError, "labels: expected a non-empty 1-D"),
        (lambda: label_subset(torch.tensor([0, 1]), 0), ValueError, "n_per_class: expected an int >= 1"),
        (lambda: label_subset([0, 1], 1), TypeError, "labels: expected a torch.Tensor; got list"),
    ],
)
def test_bad_inputs_name_the_argument(call, err, match) -> None:
    with pytest.raises(err, match=match):
        call()
