"""scikit-learn's 8x8 digits, binarised by threshold (v >= 8) or seeded Bernoulli."""

from __future__ import annotations

import sys

import pytest
import torch

from ebms.data import digits
from ebms.data.binarize import binarize
from ebms.data.digits import binarized_digits, load_digits_images

try:
    import sklearn  # noqa: F401

    HAS_SKLEARN = True
except ImportError:
    HAS_SKLEARN = False

needs_sklearn = pytest.mark.skipif(not HAS_SKLEARN, reason="scikit-learn not installed (pip install scikit-learn)")


@needs_sklearn
def test_raw_digits_shapes_and_ranges() -> None:
    images, labels = load_digits_images()
    assert images.shape == (1797, 8, 8) and images.dtype == torch.float32
    assert labels.shape == (1797,) and labels.dtype == torch.int64
    assert float(images.min()) == 0.0 and float(images.max()) == 16.0
    assert torch.equal(images, images.round())
    assert labels.unique().tolist() == list(range(10))


@needs_sklearn
def test_threshold_digits_are_pixels_at_least_eight() -> None:
    images, labels = load_digits_images()
    x, y, settings = binarized_digits()
    assert x.shape == (1797, 64) and x.dtype == torch.float32
    assert torch.equal(x, (images >= 8).float().reshape(1797, 64))
    assert torch.equal(y, labels)
    assert settings == {"dataset": "sklearn-digits", "binarize": "threshold", "threshold": 0.5}


@needs_sklearn
def test_stochastic_digits_are_seeded_and_unflattened_on_request() -> None:
    images, _ = load_digits_images()
    x, _, settings = binarized_digits(method="stochastic", seed=4, flatten=False)
    assert x.shape == (1797, 8, 8) and set(x.unique().tolist()) <= {0.0, 1.0}
    assert torch.equal(x, binarize(images / 16, seed=4))
    assert torch.equal(x, binarized_digits(method="stochastic", seed=4, flatten=False)[0])
    assert settings == {"dataset": "sklearn-digits", "binarize": "stochastic", "seed": 4}


def test_missing_sklearn_says_how_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "sklearn.datasets", None)  # makes the import fail
    with pytest.raises(ImportError, match=r"comes with scikit-learn, which is not installed: pip install scikit-learn"):
        digits.load_digits_images()


def test_bad_seed_is_named() -> None:
    with pytest.raises(ValueError, match=r"seed: expected an int >= 0; got -2"):
        binarized_digits(seed=-2)
