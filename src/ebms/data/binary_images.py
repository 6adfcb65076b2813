"""Binary image sets with a train/test split: binarised MNIST, Fashion-MNIST and scikit-learn digits.

:func:`load_binary_images` names a set (one of :data:`IMAGE_SETS`) and how it is binarised
(``binarize = "stochastic"`` draws pixel ~ Bernoulli(intensity) from a fixed seed,
``"threshold"`` keeps intensity >= 0.5); the returned :class:`BinaryImages` records those settings,
so the same bits can be regenerated on any machine. MNIST and Fashion-MNIST come with their own
test split; the 1,797 digits are split by a seeded permutation (``test_fraction``).

Example::

    images = load_binary_images("digits", binarize="threshold", test_fraction=0.2, split_seed=0)
    images.train.shape, images.space          # (1438, 64) floats in {0, 1}, Binary(64)
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch
from torch import Tensor

from ebms.spaces import Binary

__all__ = ["IMAGE_SETS", "BinaryImages", "load_binary_images"]

#: the names :func:`load_binary_images` serves.
IMAGE_SETS = ("mnist", "fashion-mnist", "digits")


@dataclass(frozen=True)
class BinaryImages:
    """A binary image set: ``train (n, D)``, ``test (m, D)`` floats in {0, 1} and how it was made.

    Attributes:
        name: the set's name (one of :data:`IMAGE_SETS`).
        train: training images, flattened, ``(n, D)``.
        test: test images, flattened, ``(m, D)``.
        image_shape: ``(height, width)`` with ``height * width = D``.
        settings: what names the bits exactly (binarisation, seeds, split).
    """

    name: str
    train: Tensor
    test: Tensor
    image_shape: tuple[int, int]
    settings: dict[str, Any] = field(default_factory=dict)

    @property
    def dim(self) -> int:
        """Pixels per image ``D``."""
        return self.train.shape[1]

    @property
    def space(self) -> Binary:
        """The space ``{0, 1}^D`` the images live in."""
        return Binary(self.dim)


def load_binary_images(name: str, *, binarize: str = "stochastic", binarize_seed: int = 0,
                       test_fraction: float = 0.1, split_seed: int = 0, root: str | None = None,
                       download: bool = False, limit: int | None = None,
                       max_bytes: int | None = None) -> BinaryImages:
    """The set ``name``, binarised and split.

    Args:
        name: ``"mnist"``, ``"fashion-mnist"`` or ``"digits"``.
        binarize: ``"stochastic"`` or ``"threshold"`` (see :mod:`ebms.data.binarize`).
        binarize_seed: seed of the stochastic binarisation.
        test_fraction: ``digits`` only: share of the images held out, in (0, 1).
        split_seed: ``digits`` only: seed of the permutation that splits train from test.
        root: MNIST / Fashion-MNIST: a folder with the idx files (default: the data root).
        download: MNIST / Fashion-MNIST: fetch missing files (SHA-256 checked).
        limit: keep only the first ``limit`` training images (quick runs).
        max_bytes: size limit of the idx readers (default: theirs).

    Returns:
        The :class:`BinaryImages`; reading an idx file costs O(file size).

    Raises:
        ValueError: an unknown ``name`` or a ``limit`` below 1.
    """
    if name not in IMAGE_SETS:
        raise ValueError(f"name: expected one of {', '.join(IMAGE_SETS)}; got {name!r}")
    if name == "digits":
        from ebms.data.digits import binarized_digits

        x, _, settings = binarized_digits(method=binarize, seed=binarize_seed)
        perm = torch.randperm(x.shape[0], generator=torch.Generator().manual_seed(split_seed))
        n_test = max(1, round(test_fraction * x.shape[0]))
        train, test = x[perm[n_test:]], x[perm[:n_test]]
        settings = {**settings, "test_fraction": test_fraction, "split_seed": split_seed}
        shape = (8, 8)
    else:
        from ebms.data.binarize import binarized_mnist

        limits: dict[str, Any] = {} if max_bytes is None else {"max_bytes": max_bytes}

        def load(split: str) -> tuple[Tensor, Any, dict[str, Any]]:
            return binarized_mnist(split, seed=binarize_seed, method=binarize, root=root, dataset=name,
                                   download=download, **limits)

        train, _, settings = load("train")
        test, _, _ = load("test")
        settings.pop("split", None)
        shape = (28, 28)
    if limit is not None:
        if limit < 1:
            raise ValueError(f"limit: expected a positive number of training images or none; got {limit}")
        train = train[:limit]
    return BinaryImages(name, train.contiguous(), test.contiguous(), shape, settings)
