"""load_binary_images: a named, seeded binary image set with its train/test split."""

from __future__ import annotations

import pytest
import torch

from ebms.data.binary_images import IMAGE_SETS, BinaryImages, load_binary_images
from ebms.spaces import Binary

pytest.importorskip("sklearn", reason="the digits set comes with scikit-learn")


def test_digits_split_is_a_seeded_partition_of_binary_images() -> None:
    a = load_binary_images("digits", binarize="threshold", test_fraction=0.2, split_seed=0)
    assert isinstance(a, BinaryImages) and a.image_shape == (8, 8) and a.dim == 64
    assert a.train.shape[0] + a.test.shape[0] == 1797 and a.test.shape[0] == round(0.2 * 1797)
    assert set(a.train.unique().tolist()) <= {0.0, 1.0} and a.space.event_shape == Binary(64).event_shape
    assert a.settings["test_fraction"] == 0.2 and a.settings["split_seed"] == 0 and a.settings["binarize"] == "threshold"
    b = load_binary_images("digits", binarize="threshold", test_fraction=0.2, split_seed=0)
    c = load_binary_images("digits", binarize="threshold", test_fraction=0.2, split_seed=1)
    assert torch.equal(a.train, b.train) and torch.equal(a.test, b.test)  # the seed names the split
    assert not torch.equal(a.test, c.test)
    assert load_binary_images("digits", limit=10).train.shape == (10, 64)


def test_bad_arguments_are_named() -> None:
    assert IMAGE_SETS == ("mnist", "fashion-mnist", "digits")
    with pytest.raises(ValueError, match=r"name: expected one of mnist, fashion-mnist, digits; got 'cifar'"):
        load_binary_images("cifar")
    with pytest.raises(ValueError, match=r"limit: expected a positive number of training images or none; got 0"):
        load_binary_images("digits", limit=0)
