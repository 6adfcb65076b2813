r"""Continuous grey-scale images in ``[-1, 1]`` for image EBMs, JEM and OOD tests.

:func:`load_continuous_images` maps the integer grey levels :math:`v \in \{0, \dots, L-1\}` of
MNIST / Fashion-MNIST (:func:`ebms.data.mnist.load_mnist`, :math:`L = 256`) or scikit-learn's 8x8
digits (:func:`ebms.data.digits.load_digits_images`, :math:`L = 17`) linearly onto
:math:`x = 2v/(L-1) - 1`, shaped ``(N, 1, H, W)`` float32. The digits ship without a split; here
every fifth image (index ``i % 5 == 0``, 360 images) is ``"test"`` and the other 1,437 are ``"train"``.

:func:`dequantize` turns the grid into a continuous density's support (uniform dequantization, Theis,
van den Oord & Bethge 2016): :math:`x' = 2(v + u)/L - 1`, :math:`u \sim U[0, 1)`, so each level fills its
own interval of width :math:`2/L` and :math:`x' \in [-1, 1]` (the top end only by float rounding).

OOD stand-ins built from in-distribution data: :func:`flip_images` (mirror), :func:`rotate_images`
(quarter turns) and :func:`noise_images` (uniform or clipped Gaussian noise) — the "flipped/rotated/noise"
test sets of Grathwohl et al. (2020, Table 3). :func:`label_subset` picks a balanced labelled subset for
semi-supervised learning (e.g. 10 labels per class, the protocol of the monograph's Table 5.2).

References:
    Theis, van den Oord & Bethge (2016), "A note on the evaluation of generative models", ICLR.
    Grathwohl et al. (2020), "Your classifier is secretly an energy based model and you should treat it like
    one", ICLR.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import torch
from torch import Tensor

from ebms._checks import check_finite, check_int, check_positive, check_tensor
from ebms.data.digits import load_digits_images
from ebms.data.mnist import load_mnist

__all__ = ["CONTINUOUS_IMAGE_SETS", "ContinuousImages", "dequantize", "flip_images", "label_subset",
           "load_continuous_images", "noise_images", "rotate_images"]

#: Data set names of :func:`load_continuous_images` and their number of grey levels.
CONTINUOUS_IMAGE_SETS = {"digits": 17, "fashion-mnist": 256, "mnist": 256}


@dataclass(frozen=True)
class ContinuousImages:
    """Images scaled to ``[-1, 1]`` with their labels.

    Attributes:
        images: ``(N, 1, H, W)`` float32 on the grid ``2v/(levels-1) - 1``.
        labels: ``(N,)`` int64 class indices.
        name: ``"mnist"``, ``"fashion-mnist"`` or ``"digits"``.
        split: ``"train"`` or ``"test"``.
        levels: grey levels ``L`` of the source (256 or 17), the ``levels`` of :func:`dequantize`.
    """

    images: Tensor
    labels: Tensor
    name: str
    split: str
    levels: int

    def __len__(self) -> int:
        return int(self.labels.shape[0])


def load_continuous_images(name: str, split: str = "train", *, root: str | os.PathLike[str] | None = None,
                           limit: int | None = None) -> ContinuousImages:
    """Load a grey-scale image set as ``(N, 1, H, W)`` float32 in ``[-1, 1]``.

    Args:
        name: ``"mnist"``, ``"fashion-mnist"`` (28x28, read by :func:`~ebms.data.mnist.load_mnist`) or
            ``"digits"`` (8x8, scikit-learn).
        split: ``"train"`` or ``"test"``.
        root: folder of the idx files (MNIST sets only; see :func:`~ebms.data.mnist.load_mnist`).
        limit: keep the first ``limit`` images of the split (all when ``None``).

    Raises:
        ValueError: unknown ``name``/``split``, ``root`` given for the digits, bad ``limit``.
        FileNotFoundError: the MNIST files are not found (the message says where it looked).
        ImportError: scikit-learn is missing (digits).
    """
    if name not in CONTINUOUS_IMAGE_SETS:
        raise ValueError(f"name: expected one of {', '.join(map(repr, sorted(CONTINUOUS_IMAGE_SETS)))}; got {name!r}")
    if split not in ("train", "test"):
        raise ValueError(f"split: expected 'train' or 'test'; got {split!r}")
    if limit is not None:
        check_int(limit, "limit", minimum=1)
    levels = CONTINUOUS_IMAGE_SETS[name]
    if name == "digits":
        if root is not None:
            raise ValueError(f"root: the digits ship inside scikit-learn and take no root; got {root!r}")
        raw, labels = load_digits_images()
        keep = (torch.arange(labels.shape[0]) % 5 == 0) == (split == "test")
        raw, labels = raw[keep], labels[keep]
    else:
        ds = load_mnist(split, root=root, dataset=name)
        raw, labels = ds.images, ds.labels
    if limit is not None:
        raw, labels = raw[:limit], labels[:limit]
    # 2v - (L - 1) is an exact integer, so the ends land exactly on -1 and 1
    images = ((raw.to(torch.float32) * 2 - (levels - 1)) / (levels - 1)).unsqueeze(1)
    return ContinuousImages(images.contiguous(), labels.to(torch.int64).contiguous(), name, split, levels)


def _images(x: object, name: str = "x") -> Tensor:
    t = check_tensor(x, name, floating=True)
    if t.dim() != 4 or t.shape[0] == 0:
        raise ValueError(f"{name}: expected images (N, C, H, W) with N >= 1; got shape {tuple(t.shape)}")
    return check_finite(t, name)


def dequantize(x: Tensor, generator: torch.Generator | None = None, *, levels: int = 256) -> Tensor:
    """Uniform dequantization of images on the ``levels``-level grid of ``[-1, 1]``.

    ``v = (x + 1)(levels - 1)/2`` must be an integer (within ``1e-3``: float32 rounding); the result is
    ``2(v + u)/levels - 1`` with ``u ~ U[0, 1)`` per pixel, in ``[-1, 1]``.

    Args:
        x: ``(N, C, H, W)`` floating images on the grid (e.g. :attr:`ContinuousImages.images`).
        generator: the noise source (global RNG when ``None``).
        levels: grey levels ``L >= 2`` (256 for MNIST, 17 for the digits).

    Returns:
        Same shape, dtype and device as ``x``.

    Raises:
        ValueError: ``x`` is off the grid (already dequantized, or the wrong ``levels``).
    """
    _images(x)
    check_int(levels, "levels", minimum=2)
    v = (x.detach() + 1) * ((levels - 1) / 2)
    vr = v.round()
    off = (v - vr).abs().amax()
    if bool(off > 1e-3) or bool(vr.amin() < 0) or bool(vr.amax() > levels - 1):
        raise ValueError(f"x: expected values on the {levels}-level grid of [-1, 1] (2v/{levels - 1} - 1 for "
                         f"integer v); got values {float(off):.3g} levels off the grid in "
                         f"[{float(x.amin()):.4g}, {float(x.amax()):.4g}] (already dequantized, or another levels?)")
    u = torch.rand(x.shape, generator=generator, dtype=x.dtype, device=x.device)
    return (vr + u) * (2.0 / levels) - 1.0


def flip_images(x: Tensor, dim: str = "h") -> Tensor:
    """Mirror images: ``"h"`` flips left-right (the width axis), ``"v"`` upside-down (the height axis).

    Args:
        x: ``(N, C, H, W)`` floating images. Returns a new tensor of the same shape.
    """
    if dim not in ("h", "v"):
        raise ValueError(f"dim: expected 'h' (left-right) or 'v' (upside-down); got {dim!r}")
    return torch.flip(_images(x), dims=(-1,) if dim == "h" else (-2,))


def rotate_images(x: Tensor, k: int = 1) -> Tensor:
    """Rotate images by ``k`` quarter turns counter-clockwise (``torch.rot90`` over ``(H, W)``).

    Args:
        x: ``(N, C, H, W)`` floating images; an odd ``k`` returns ``(N, C, W, H)``.
        k: quarter turns (any int; negative turns clockwise).
    """
    check_int(k, "k")
    return torch.rot90(_images(x), k, dims=(-2, -1))


def noise_images(n: int, shape: tuple[int, ...], generator: torch.Generator | None = None, *,
                 kind: str = "uniform", std: float = 0.5, dtype: torch.dtype = torch.float32) -> Tensor:
    """Noise images in ``[-1, 1]``: ``"uniform"`` on ``[-1, 1)``, or ``"gaussian"`` ``N(0, std^2)`` clipped.

    Args:
        n: number of images (>= 1).
        shape: ``(C, H, W)`` of one image.
        generator: the noise source (global RNG when ``None``).
        kind: ``"uniform"`` or ``"gaussian"``.
        std: standard deviation of the Gaussian before clipping.
        dtype: floating dtype of the result.

    Returns:
        ``(n, C, H, W)`` tensor.
    """
    check_int(n, "n", minimum=1)
    if not isinstance(shape, (tuple, list)) or len(shape) != 3 or any(
            isinstance(s, bool) or not isinstance(s, int) or s < 1 for s in shape):
        raise ValueError(f"shape: expected (C, H, W) of positive ints; got {shape!r}")
    if kind not in ("uniform", "gaussian"):
        raise ValueError(f"kind: expected 'uniform' or 'gaussian'; got {kind!r}")
    if not isinstance(dtype, torch.dtype) or not dtype.is_floating_point:
        raise TypeError(f"dtype: expected a floating torch.dtype; got {dtype!r}")
    size = (n, *shape)
    if kind == "uniform":
        return torch.rand(size, generator=generator, dtype=dtype) * 2 - 1
    s = check_positive(std, "std")
    return (torch.randn(size, generator=generator, dtype=dtype) * s).clamp_(-1.0, 1.0)


def label_subset(labels: Tensor, n_per_class: int, generator: torch.Generator | None = None) -> Tensor:
    """Indices of a balanced labelled subset: ``n_per_class`` rows drawn without replacement per class.

    Args:
        labels: ``(N,)`` integer class indices ``>= 0`` (every class present is sampled).
        n_per_class: rows per class (>= 1).
        generator: the draw (global RNG when ``None``).

    Returns:
        ``(C * n_per_class,)`` int64 indices into ``labels``, sorted ascending, ``C`` the classes present.

    Raises:
        ValueError: a class has fewer than ``n_per_class`` rows (the message names it), bad labels.
    """
    t = check_tensor(labels, "labels")
    if t.dtype.is_floating_point or t.dtype.is_complex or t.dtype == torch.bool:
        raise TypeError(f"labels: expected an integer tensor of class indices; got dtype {t.dtype}")
    if t.dim() != 1 or t.shape[0] == 0:
        raise ValueError(f"labels: expected a non-empty 1-D tensor (N,); got shape {tuple(t.shape)}")
    check_int(n_per_class, "n_per_class", minimum=1)
    y = t.detach().to("cpu", torch.int64)
    if bool((y < 0).any()):
        raise ValueError(f"labels: expected class indices >= 0; got minimum {int(y.min())} (drop unlabelled rows first)")
    classes, counts = torch.unique(y, return_counts=True)
    short = counts < n_per_class
    if bool(short.any()):
        c = int(classes[short][0])
        raise ValueError(f"n_per_class: class {c} has only {int(counts[short][0])} rows; got n_per_class={n_per_class}")
    picks = []
    for c in classes.tolist():
        rows = (y == c).nonzero()[:, 0]
        picks.append(rows[torch.randperm(rows.shape[0], generator=generator)[:n_per_class]])
    return torch.cat(picks).sort().values
