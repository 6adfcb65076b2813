"""``ebms.data.image_sets``: seeded splits, withheld labels and out-of-distribution sets."""

from __future__ import annotations

import pytest
import torch

from ebms.data.image_sets import load_image_splits, ood_images
from ebms.data.images import load_continuous_images


def test_splits_partition_the_training_images_and_repeat_with_the_seed() -> None:
    s = load_image_splits("digits", val_fraction=0.2, seed=3)
    full = load_continuous_images("digits", "train")
    assert s.train.shape[0] + s.val.shape[0] == len(full) and s.val.shape[0] == round(0.2 * len(full))
    rows = {tuple(r.flatten().tolist()) for r in torch.cat([s.train, s.val])}
    assert len(rows) == len({tuple(r.flatten().tolist()) for r in full.images})  # nothing lost or repeated
    again = load_image_splits("digits", val_fraction=0.2, seed=3)
    assert torch.equal(s.val, again.val) and torch.equal(s.train_targets, again.train_targets)
    assert not torch.equal(s.val, load_image_splits("digits", val_fraction=0.2, seed=4).val)
    assert s.image_shape == (1, 8, 8) and s.n_classes == 10 and s.levels == 17 and s.n_labelled == s.train.shape[0]


def test_withheld_labels_keep_n_per_class() -> None:
    s = load_image_splits("digits", labels_per_class=7, seed=0, n_test=50)
    kept = s.train_targets[s.train_targets >= 0]
    assert torch.equal(torch.bincount(kept), torch.full((10,), 7)) and s.n_labelled == 70
    assert s.test.shape[0] == 50 and bool((s.val_targets >= 0).all())
    with pytest.raises(ValueError, match=r"labels_per_class: expected at most \d+ \(class \d has that many"):
        load_image_splits("digits", labels_per_class=10_000)
    with pytest.raises(ValueError, match="val_fraction"):
        load_image_splits("digits", val_fraction=1.0)


def test_ood_sets() -> None:
    s = load_image_splits("digits", n_test=30)
    g = torch.Generator().manual_seed(0)
    noise = ood_images("noise", s, 12, generator=g)
    assert noise.shape == (12, 1, 8, 8) and float(noise.min()) >= -1 and float(noise.max()) <= 1
    assert torch.equal(ood_images("flip", s, 40), torch.flip(s.test, dims=(-2,)))  # capped at the 30 test images
    assert torch.equal(ood_images("rotate", s, 5), torch.rot90(s.test[:5], 1, dims=(-2, -1)))
    with pytest.raises(ValueError, match="images of shape"):
        ood_images("mnist", s, 5)
    with pytest.raises(ValueError, match="expected one of"):
        ood_images("cifar", s, 5)
    with pytest.raises(ValueError, match="in-distribution set itself"):
        ood_images("digits", s, 5) if False else ood_images("mnist", load_image_splits("mnist", limit=50, n_test=5), 5)
