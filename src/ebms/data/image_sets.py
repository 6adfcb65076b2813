"""Splits of a continuous image set for classifiers and image energies, and out-of-distribution sets.

:func:`load_image_splits` reads a set with :func:`~ebms.data.images.load_continuous_images`
(pixels in ``[-1, 1]``), holds out a seeded validation split of the training images (for
temperature scaling and checks), optionally withholds all labels but ``labels_per_class`` per class
(semi-supervised learning: the label of a withheld row is ``-1``), and keeps the first ``n_test``
test images. :func:`ood_images` builds the sets an in-distribution model is tested against:
another image set of the same size, uniform noise, and the model's own test images flipped
upside-down or turned a quarter turn. The other image set is optional: when its files are not
installed, :func:`ood_images` raises a :class:`FileNotFoundError` whose message says where it
looked and how to install it, and :func:`missing_ood_sets` says so before anything is trained.

Example:
    >>> from ebms.data.image_sets import load_image_splits, ood_images
    >>> s = load_image_splits("digits", labels_per_class=10, seed=0)  # doctest: +SKIP
    >>> int((s.train_targets >= 0).sum()), s.image_shape  # doctest: +SKIP
    (100, (1, 8, 8))
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import dataclass

import torch
from torch import Tensor

from ebms._checks import check_int, check_probability
from ebms.data.images import CONTINUOUS_IMAGE_SETS, flip_images, label_subset, load_continuous_images, noise_images

__all__ = ["INSTALL_HINTS", "OOD_SETS", "ImageSplits", "load_image_splits", "missing_ood_sets", "ood_images"]

#: the out-of-distribution sets :func:`ood_images` builds.
OOD_SETS = ("mnist", "fashion-mnist", "noise", "flip", "rotate")
#: how to install each set that :func:`ood_images` reads from files (the others are built from the data).
INSTALL_HINTS = {
    "mnist": "put the four MNIST idx files in the first of those folders (or set $EBMS_DATA)",
    "fashion-mnist": "install Debian's package dataset-fashion-mnist, or put the four idx files in the first of "
                     "those folders (or set $EBMS_DATA)",
}


@dataclass(frozen=True)
class ImageSplits:
    """Training, validation and test images of one set.

    Attributes:
        name: the set (``"mnist"``, ``"fashion-mnist"``, ``"digits"``).
        train, val, test: ``(N, 1, H, W)`` float32 images in ``[-1, 1]``.
        train_targets: ``(N_train,)`` int64 labels, ``-1`` where the label is withheld.
        val_targets, test_targets: ``(N,)`` int64 labels (always known).
        n_classes: ``K`` (10 for all three sets).
        levels: grey levels of the source (256 or 17).
    """

    name: str
    train: Tensor
    train_targets: Tensor
    val: Tensor
    val_targets: Tensor
    test: Tensor
    test_targets: Tensor
    n_classes: int
    levels: int

    @property
    def image_shape(self) -> tuple[int, int, int]:
        """``(C, H, W)`` of one image."""
        c, h, w = self.train.shape[1:]
        return int(c), int(h), int(w)

    @property
    def n_labelled(self) -> int:
        """Training images whose label is kept."""
        return int((self.train_targets >= 0).sum())


def load_image_splits(name: str, *, root: str | os.PathLike[str] | None = None, limit: int | None = None,
                      val_fraction: float = 0.1, labels_per_class: int | None = None, seed: int = 0,
                      n_test: int | None = None) -> ImageSplits:
    """Load ``name`` and split it (see the module docstring).

    Args:
        name: one of :data:`~ebms.data.images.CONTINUOUS_IMAGE_SETS`.
        root: folder of the MNIST idx files (see :func:`~ebms.data.mnist.load_mnist`).
        limit: keep the first ``limit`` training images before splitting.
        val_fraction: share of the (limited) training images held out, in ``[0, 1)``; at least one
            image stays for training.
        labels_per_class: keep this many labels per class among the training images (drawn
            without replacement); ``None`` keeps every label.
        seed: seeds the validation split and the labelled subset.
        n_test: keep the first ``n_test`` test images (all when ``None``).

    Raises:
        ValueError: a bad argument (named), or a class with fewer than ``labels_per_class`` images.
    """
    check_probability(val_fraction, "val_fraction", open_high=True)
    if n_test is not None:
        check_int(n_test, "n_test", minimum=1)
    check_int(seed, "seed", minimum=0)
    full = load_continuous_images(name, "train", root=root, limit=limit)
    test = load_continuous_images(name, "test", root=root)
    n = len(full)
    n_val = min(int(round(val_fraction * n)), n - 1)
    g = torch.Generator().manual_seed(seed)
    perm = torch.randperm(n, generator=g)
    val_idx, train_idx = perm[:n_val].sort().values, perm[n_val:].sort().values
    targets = full.labels[train_idx].clone()
    if labels_per_class is not None:
        check_int(labels_per_class, "labels_per_class", minimum=1)
        counts = torch.bincount(targets)
        if int(counts.min()) < labels_per_class:
            c = int(counts.argmin())
            raise ValueError(f"labels_per_class: expected at most {int(counts.min())} (class {c} has that many "
                             f"training images); got {labels_per_class}")
        keep = label_subset(targets, labels_per_class, g)
        withheld = torch.ones_like(targets, dtype=torch.bool)
        withheld[keep] = False
        targets[withheld] = -1
    k = n_test if n_test is not None else len(test)
    return ImageSplits(name=name, train=full.images[train_idx], train_targets=targets, val=full.images[val_idx],
                       val_targets=full.labels[val_idx], test=test.images[:k], test_targets=test.labels[:k],
                       n_classes=int(full.labels.max()) + 1, levels=CONTINUOUS_IMAGE_SETS[name])


def ood_images(name: str, splits: ImageSplits, n: int, *, generator: torch.Generator | None = None,
               root: str | os.PathLike[str] | None = None) -> Tensor:
    """``n`` images of the out-of-distribution set ``name`` for a model of ``splits``.

    Args:
        name: ``"mnist"`` / ``"fashion-mnist"`` (the first ``n`` test images of that set; it must
            have the image size of ``splits``), ``"noise"`` (uniform on ``[-1, 1]``, drawn from
            ``generator``), ``"flip"`` (the first ``n`` test images of ``splits`` upside-down) or
            ``"rotate"`` (the same turned a quarter turn counter-clockwise; square images).
        splits: the in-distribution data.
        n: number of images (at most the test images of ``splits`` for flip/rotate).
        generator: the noise draw.
        root: folder of the MNIST idx files.

    Returns:
        ``(n', C, H, W)`` float32 images in ``[-1, 1]``, ``n' = min(n, available)``.

    Raises:
        FileNotFoundError: ``name`` is an image set whose files are not installed (the message says
            where it looked and how to install it).
        ValueError: a bad argument (named).
    """
    check_int(n, "n", minimum=1)
    if name not in OOD_SETS:
        raise ValueError(f"name: expected one of {', '.join(OOD_SETS)}; got {name!r}")
    if name == splits.name:
        raise ValueError(f"name: {name!r} is the in-distribution set itself; expected another of {', '.join(OOD_SETS)}")
    if name == "noise":
        return noise_images(n, splits.image_shape, generator)
    if name in ("flip", "rotate"):
        x = splits.test[:n]
        if name == "flip":
            return flip_images(x, "v")
        if splits.image_shape[1] != splits.image_shape[2]:
            raise ValueError(f"name: 'rotate' needs square images; got {splits.image_shape[1:]}")
        return torch.rot90(x, 1, dims=(-2, -1)).contiguous()
    other = _installed_set(name, n, root)
    if tuple(other.shape[1:]) != splits.image_shape:
        raise ValueError(f"name: {name!r} has images of shape {tuple(other.shape[1:])}; the model's are "
                         f"{splits.image_shape}")
    return other


def _installed_set(name: str, n: int, root: str | os.PathLike[str] | None) -> Tensor:
    """The first ``n`` test images of the image set ``name``; not installed: a one-line note."""
    try:
        return load_continuous_images(name, "test", root=root, limit=n).images
    except FileNotFoundError as e:
        where = str(e).split("; set $EBMS_DATA")[0]  # the loader's advice names its Python arguments
        raise FileNotFoundError(f"{name} is not installed ({where}); {INSTALL_HINTS[name]}") from None


def missing_ood_sets(names: Iterable[str], *, root: str | os.PathLike[str] | None = None) -> dict[str, str]:
    """The sets among ``names`` that :func:`ood_images` cannot read here, each with its one-line note.

    Noise, flips and turns are built from the data and never missing; an image set is missing when
    its test files are not found (each one present is read once: about 0.1 s for MNIST's test split).

    Args:
        names: out-of-distribution set names (:data:`OOD_SETS`).
        root: folder of the idx files, as for :func:`ood_images`.

    Raises:
        ValueError: a name outside :data:`OOD_SETS`.
    """
    out: dict[str, str] = {}
    for name in names:
        if name not in OOD_SETS:
            raise ValueError(f"names: expected names among {', '.join(OOD_SETS)}; got {name!r}")
        if name in INSTALL_HINTS:
            try:
                _installed_set(name, 1, root)
            except FileNotFoundError as e:
                out[name] = str(e)
    return out
