"""Binary image data for the command line: binarised MNIST, Fashion-MNIST and scikit-learn digits.

``data.name`` picks the set; ``data.binarize`` (``stochastic``/``threshold``) and
``data.binarize_seed`` name the binarisation and are written to the run's config, so a run
can always be regenerated; ``data.root`` points at a user's own copy and ``data.download``
allows fetching with checksum checks. ``data.limit`` keeps the first N training images
(quick runs and tests); ``data.max_mb`` raises the readers' size limit for a larger genuine file.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch
from torch import Tensor

from ebms.cli.config import DataConfig
from ebms.spaces import Binary

__all__ = ["IMAGE_SETS", "BinaryImages", "load_binary_images"]

#: data.name values served by this module.
IMAGE_SETS = ("mnist", "fashion-mnist", "digits")


@dataclass(frozen=True)
class BinaryImages:
    """A binary image set: ``train (n, D)``, ``test (m, D)`` floats in {0, 1} and how it was made."""

    name: str
    train: Tensor
    test: Tensor
    image_shape: tuple[int, int]
    settings: dict[str, Any] = field(default_factory=dict)

    @property
    def dim(self) -> int:
        return self.train.shape[1]

    @property
    def space(self) -> Binary:
        return Binary(self.dim)


def load_binary_images(d: DataConfig, seed: int) -> BinaryImages:
    """The set named by ``d.name`` (one of :data:`IMAGE_SETS`), binarised as ``d`` says."""
    if d.name == "digits":
        from ebms.data.digits import binarized_digits

        x, _, settings = binarized_digits(method=d.binarize, seed=d.binarize_seed)
        perm = torch.randperm(x.shape[0], generator=torch.Generator().manual_seed(seed))
        n_test = max(1, round(d.test_fraction * x.shape[0]))
        train, test = x[perm[n_test:]], x[perm[:n_test]]
        settings = {**settings, "test_fraction": d.test_fraction, "split_seed": seed}
        shape = (8, 8)
    else:
        from ebms.data.binarize import binarized_mnist

        def load(split: str) -> tuple[Tensor, Any, dict[str, Any]]:
            limit: dict[str, Any] = {} if d.max_mb is None else {"max_bytes": d.max_mb << 20}
            return binarized_mnist(split, seed=d.binarize_seed, method=d.binarize, root=d.root, dataset=d.name,
                                   download=d.download, **limit)

        train, _, settings = load("train")
        test, _, _ = load("test")
        settings.pop("split", None)
        shape = (28, 28)
    if d.limit is not None:
        if d.limit < 1:
            raise ValueError(f"limit: expected a positive number of training images or none; got {d.limit}")
        train = train[: d.limit]
    return BinaryImages(d.name, train.contiguous(), test.contiguous(), shape, settings)
