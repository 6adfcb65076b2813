"""scikit-learn's bundled 8x8 handwritten digits, binarised: 1,797 images, 64 binary pixels.

The images (``sklearn.datasets.load_digits``, UCI "Optical Recognition of
Handwritten Digits", Alpaydin & Kaynak, 1998) hold counts 0..16; they are read
as intensities ``v / 16`` and binarised by :func:`ebms.data.binarize.binarize`:
``"threshold"`` (default, 0.5, i.e. ``v >= 8``) or ``"stochastic"`` with a seed.
The data ship inside scikit-learn, so nothing is downloaded, and 64 pixels
make image-like experiments cheap enough for tests.

scikit-learn is an optional dependency, imported on first use
(``pip install scikit-learn``).

Example:
    >>> from ebms.data.digits import binarized_digits
    >>> x, y, settings = binarized_digits()          # doctest: +SKIP
    >>> x.shape, settings                            # doctest: +SKIP
    (torch.Size([1797, 64]), {'dataset': 'sklearn-digits', 'binarize': 'threshold', 'threshold': 0.5})
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from ebms._checks import check_int
from ebms.data.binarize import binarize

__all__ = ["binarized_digits", "load_digits_images"]


def load_digits_images() -> tuple[Tensor, Tensor]:
    """The raw digits: images ``(1797, 8, 8)`` float32 with values 0..16, labels ``(1797,)`` int64.

    Raises:
        ImportError: scikit-learn is not installed (the message says how to install it).
    """
    try:
        from sklearn.datasets import load_digits
    except ImportError as e:
        raise ImportError(
            f"the 8x8 digits data set comes with scikit-learn, which is not installed: pip install scikit-learn ({e})"
        ) from e
    bunch = load_digits()
    images = torch.as_tensor(bunch.images, dtype=torch.float32)
    labels = torch.as_tensor(bunch.target, dtype=torch.int64)
    return images, labels


def binarized_digits(
    *,
    method: str = "threshold",
    seed: int = 0,
    threshold: float = 0.5,
    flatten: bool = True,
) -> tuple[Tensor, Tensor, dict[str, Any]]:
    """Binarised 8x8 digits, plus the settings that reproduce them.

    Args:
        method: ``"threshold"`` (pixel is 1 where ``v / 16 >= threshold``) or
            ``"stochastic"`` (Bernoulli(``v / 16``) per pixel, seeded).
        seed: seed of the stochastic scheme.
        threshold: cut of the threshold scheme, in (0, 1]; 0.5 means ``v >= 8``.
        flatten: return ``(1797, 64)``; else ``(1797, 8, 8)``.

    Returns:
        ``(x, labels, settings)``: ``x`` float32 in {0, 1}, labels int64 0..9,
        ``settings`` for the run's config.
    """
    check_int(seed, "seed", minimum=0)
    images, labels = load_digits_images()
    x = binarize(images / 16.0, method=method, seed=seed, threshold=threshold)
    if flatten:
        x = x.reshape(x.shape[0], -1)
    settings: dict[str, Any] = {"dataset": "sklearn-digits", "binarize": method}
    if method == "stochastic":
        settings["seed"] = seed
    else:
        settings["threshold"] = float(threshold)
    return x, labels, settings
