r"""Fixed-seed binarisation of grey-level images, and binarised MNIST with its settings.

Two schemes, for intensities :math:`p \in [0, 1]` (uint8 images are read as
:math:`p = v / 255`):

* ``"stochastic"`` — :math:`x \sim \mathrm{Bernoulli}(p)` independently per
  pixel, computed as ``u < p`` with ``u ~ U[0, 1)`` from a CPU
  ``torch.Generator`` seeded with ``seed``; the draws do not depend on the
  device the images live on, so a seed names one data set on every machine
  (for a given torch version). This is the scheme of Salakhutdinov & Murray
  (2008), "On the quantitative analysis of deep belief networks".
* ``"threshold"`` — :math:`x = [p \ge \text{threshold}]` (no randomness).

:func:`binarized_mnist` also returns the settings that name the data exactly;
store them in the run's config. Each (dataset, split, seed) gets its own
random stream (seed derived from a SHA-256 of the three), so train and test
images never share their uniforms.

Example:
    >>> import torch
    >>> from ebms.data.binarize import binarize
    >>> img = torch.tensor([[0, 128, 255]], dtype=torch.uint8)
    >>> binarize(img, method="threshold").tolist()
    [[0.0, 1.0, 1.0]]
    >>> torch.equal(binarize(img, seed=3), binarize(img, seed=3))
    True
"""

from __future__ import annotations

import hashlib
import os
from typing import Any

import torch
from torch import Tensor

from ebms._checks import check_choice, check_int, check_probability, check_tensor
from ebms.data.mnist import MAX_IDX_BYTES, load_mnist

__all__ = ["BINARIZE_METHODS", "binarize", "binarized_mnist", "split_seed"]

#: Binarisation schemes :func:`binarize` accepts.
BINARIZE_METHODS = ("stochastic", "threshold")


def _intensity(images: Tensor) -> Tensor:
    check_tensor(images, "images")
    if images.dtype == torch.uint8:
        return images.to(torch.float32) / 255.0
    if not images.is_floating_point():
        raise TypeError(f"images: expected uint8 (0..255) or floating point in [0, 1]; got dtype {images.dtype}")
    if images.numel() and (not bool(torch.isfinite(images).all()) or images.min() < 0 or images.max() > 1):
        lo, hi = float(images.min()), float(images.max())
        raise ValueError(f"images: expected floating-point intensities in [0, 1]; got range [{lo}, {hi}]")
    return images.to(torch.float32)


def binarize(
    images: Tensor,
    *,
    method: str = "stochastic",
    seed: int = 0,
    threshold: float = 0.5,
) -> Tensor:
    """Binarise images to float32 values in {0, 1} (same shape and device as ``images``).

    Args:
        images: uint8 (read as ``v / 255``) or floating-point intensities in [0, 1], any shape.
        method: ``"stochastic"`` (Bernoulli per pixel) or ``"threshold"``.
        seed: seeds the CPU generator of the stochastic scheme (ignored by ``"threshold"``).
        threshold: pixels with intensity ``>= threshold`` become 1 (``"threshold"`` only), in (0, 1].

    Returns:
        Float32 tensor in {0, 1}, shaped like ``images``. Cost: one uniform draw per pixel.
    """
    check_choice(method, "method", BINARIZE_METHODS)
    check_int(seed, "seed", minimum=0)
    t = check_probability(threshold, "threshold", open_low=True)
    p = _intensity(images)
    if method == "threshold":
        return (p >= t).to(torch.float32)
    gen = torch.Generator(device="cpu").manual_seed(seed)
    u = torch.rand(p.shape, generator=gen, dtype=torch.float32)
    return (u < p.cpu()).to(torch.float32).to(images.device)


def split_seed(seed: int, dataset: str, split: str) -> int:
    """The generator seed for one (dataset, split, seed): 63 bits of SHA-256 of ``"dataset:split:seed"``."""
    digest = hashlib.sha256(f"{dataset}:{split}:{seed}".encode()).digest()
    return int.from_bytes(digest[:8], "big") >> 1


def binarized_mnist(
    split: str = "train",
    *,
    seed: int = 0,
    method: str = "stochastic",
    threshold: float = 0.5,
    flatten: bool = True,
    root: str | os.PathLike[str] | None = None,
    dataset: str = "mnist",
    download: bool = False,
    verify: bool = True,
    max_bytes: int = MAX_IDX_BYTES,
) -> tuple[Tensor, Tensor, dict[str, Any]]:
    """Binarised MNIST or Fashion-MNIST, plus the settings that reproduce it.

    Args:
        split: ``"train"`` or ``"test"``.
        seed: names the stochastic binarisation (see the module docstring).
        method: ``"stochastic"`` or ``"threshold"``.
        threshold: cut for ``"threshold"`` (on ``v / 255``).
        flatten: return ``(n, 784)``; else ``(n, 28, 28)``.
        root, dataset, download, verify, max_bytes: as in :func:`ebms.data.mnist.load_mnist`.

    Returns:
        ``(x, labels, settings)``: ``x`` float32 in {0, 1}, ``labels`` ``(n,)``
        int64, and ``settings`` e.g. ``{"dataset": "mnist", "split": "train",
        "binarize": "stochastic", "seed": 0}`` (``"threshold"`` replaces
        ``"seed"`` for the threshold scheme).
    """
    check_int(seed, "seed", minimum=0)
    ds = load_mnist(split, root=root, dataset=dataset, download=download, verify=verify, max_bytes=max_bytes)
    x = binarize(ds.images, method=method, seed=split_seed(seed, dataset, split), threshold=threshold)
    if flatten:
        x = x.reshape(len(ds), -1)
    settings: dict[str, Any] = {"dataset": dataset, "split": split, "binarize": method}
    if method == "stochastic":
        settings["seed"] = seed
    else:
        settings["threshold"] = float(threshold)
    return x, ds.labels, settings
