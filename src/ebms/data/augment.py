r"""Random image augmentations with an explicit generator, for batches ``(B, C, H, W)``.

Each transform takes ``(x, generator)`` and returns a new tensor of the same
shape and dtype; every random draw comes from ``generator`` (``None`` means
torch's global generator), so a seeded generator reproduces a draw exactly.
They are used to perturb the starts of sampler chains in improved contrastive
divergence (Du, Li, Tenenbaum & Mordatch, 2021, "Improved Contrastive
Divergence Training of Energy-Based Models", ICML), where augmentation moves a
chain between modes that Langevin dynamics alone would rarely cross.

Transforms (per image ``b``):

* :func:`shift_images` / :func:`random_shift`: translate by ``(dy_b, dx_b)``
  pixels, filling uncovered pixels with ``fill`` (pad, then crop):
  :math:`x'_{b,c,i,j} = x_{b,c,i-dy_b,j-dx_b}`, or ``fill`` when outside.
* :func:`random_flip`: mirror along the width with probability ``p``.
* :func:`gaussian_noise`: :math:`x' = x + s\,\xi`, :math:`\xi\sim\mathcal N(0, I)`.
* :func:`color_jitter`: :math:`x' = (x - \bar x_b)\,c_b + \bar x_b + a_b`, with
  :math:`c_b\sim U[1-\text{contrast}, 1+\text{contrast}]`,
  :math:`a_b\sim U[-\text{brightness}, \text{brightness}]` and :math:`\bar x_b` the
  image's mean over ``(C, H, W)``.
* :class:`Augment`: a composition applied in the given order, optionally clamped.

This module belongs to the data layer: it imports neither nets nor samplers.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch
from torch import Tensor

from ebms._checks import check_int, check_positive, check_probability, check_tensor

__all__ = ["Augment", "color_jitter", "gaussian_noise", "random_flip", "random_shift", "shift_images"]

#: A transform ``(x (B, C, H, W), generator) -> x' (B, C, H, W)``.
Transform = Callable[[Tensor, "torch.Generator | None"], Tensor]


def _check_images(x: object, name: str = "x") -> Tensor:
    check_tensor(x, name, floating=True)
    assert isinstance(x, Tensor)
    if x.dim() != 4:
        raise ValueError(f"{name}: expected images of shape (B, C, H, W); got {tuple(x.shape)}")
    return x


def shift_images(x: Tensor, dy: Tensor, dx: Tensor, *, fill: float = 0.0) -> Tensor:
    """Translate image ``b`` by ``dy[b]`` rows (down) and ``dx[b]`` columns (right).

    Args:
        x: images ``(B, C, H, W)``.
        dy: ``LongTensor (B,)`` with ``|dy| < H``.
        dx: ``LongTensor (B,)`` with ``|dx| < W``.
        fill: value of the pixels shifted in from outside.

    Returns:
        ``(B, C, H, W)``; ``dy = dx = 0`` returns ``x`` unchanged (a copy).
    """
    x = _check_images(x)
    B, C, H, W = x.shape
    for v, name, size in ((dy, "dy", H), (dx, "dx", W)):
        check_tensor(v, name)
        if v.dtype != torch.long or tuple(v.shape) != (B,):
            raise ValueError(f"{name}: expected a LongTensor of shape ({B},); got {v.dtype} {tuple(v.shape)}")
        if B and int(v.abs().max()) >= size:
            raise ValueError(f"{name}: expected offsets with |{name}| < {size}; got max |{name}| {int(v.abs().max())}")
    s = max(H, W)
    padded = torch.nn.functional.pad(x, (s, s, s, s), value=float(fill))
    dev = x.device
    rows = torch.arange(H, device=dev) + s - dy.to(dev)[:, None]  # (B, H)
    cols = torch.arange(W, device=dev) + s - dx.to(dev)[:, None]  # (B, W)
    b = torch.arange(B, device=dev)[:, None, None, None]
    c = torch.arange(C, device=dev)[None, :, None, None]
    return padded[b, c, rows[:, None, :, None], cols[:, None, None, :]]


def random_shift(
    x: Tensor, generator: torch.Generator | None = None, *, max_shift: int = 2, fill: float = 0.0
) -> Tensor:
    """Shift each image by offsets drawn uniformly from ``{-max_shift, ..., max_shift}`` (pad + crop).

    Draws, in order: ``dy (B,)`` then ``dx (B,)`` (``torch.randint``).

    Args:
        x: ``(B, C, H, W)``.
        generator: source of randomness.
        max_shift: largest offset ``>= 0`` in pixels, below ``min(H, W)``; 0 is the identity.
        fill: value of uncovered pixels (e.g. ``-1`` for images in ``[-1, 1]`` with a black background).
    """
    x = _check_images(x)
    check_int(max_shift, "max_shift", minimum=0)
    if max_shift >= min(x.shape[2], x.shape[3]):
        raise ValueError(f"max_shift: expected less than min(H, W) = {min(x.shape[2], x.shape[3])}; got {max_shift}")
    B = x.shape[0]
    dy = torch.randint(-max_shift, max_shift + 1, (B,), generator=generator, device=x.device)
    dx = torch.randint(-max_shift, max_shift + 1, (B,), generator=generator, device=x.device)
    return shift_images(x, dy, dx, fill=fill)


def random_flip(x: Tensor, generator: torch.Generator | None = None, *, p: float = 0.5) -> Tensor:
    """Mirror each image along its width with probability ``p`` (one uniform per image).

    With ``p = 1`` the map is an involution (applying it twice gives ``x``); ``p = 0`` is the identity.
    """
    x = _check_images(x)
    p = check_probability(p, "p")
    coin = torch.rand(x.shape[0], generator=generator, device=x.device) < p
    return torch.where(coin[:, None, None, None], x.flip(-1), x)


def gaussian_noise(x: Tensor, generator: torch.Generator | None = None, *, std: float = 0.01) -> Tensor:
    r"""Add :math:`s\,\xi`, :math:`\xi\sim\mathcal N(0, I)` of ``x``'s shape, with ``s = std >= 0``."""
    x = _check_images(x)
    std = check_positive(std, "std", allow_zero=True)
    noise = torch.randn(x.shape, generator=generator, device=x.device, dtype=x.dtype)
    return x + std * noise


def color_jitter(
    x: Tensor, generator: torch.Generator | None = None, *, brightness: float = 0.1, contrast: float = 0.1
) -> Tensor:
    r"""Per-image contrast and brightness: :math:`x' = (x - \bar x)\,c + \bar x + a` (module docstring).

    Draws, in order: ``c (B,)`` then ``a (B,)`` (``torch.rand``, mapped to their ranges).

    Args:
        x: ``(B, C, H, W)``.
        generator: source of randomness.
        brightness: half-width ``>= 0`` of the additive shift ``a``.
        contrast: half-width in ``[0, 1]`` of the factor ``c`` around 1 (``c >= 0``).
    """
    x = _check_images(x)
    brightness = check_positive(brightness, "brightness", allow_zero=True)
    contrast = check_probability(contrast, "contrast")
    B = x.shape[0]
    u_c = torch.rand(B, generator=generator, device=x.device, dtype=x.dtype)
    u_a = torch.rand(B, generator=generator, device=x.device, dtype=x.dtype)
    c_minus_1 = (contrast * (2.0 * u_c - 1.0))[:, None, None, None]
    a = (brightness * (2.0 * u_a - 1.0))[:, None, None, None]
    mean = x.mean(dim=(1, 2, 3), keepdim=True)
    # x + (x - mean)(c - 1) + a: the same map, and exactly x when c = 1 and a = 0
    return x + (x - mean) * c_minus_1 + a


class Augment:
    """A composition of transforms ``(x, generator) -> x'`` applied in order, then an optional clamp.

    Args:
        transforms: callables ``(x (B, C, H, W), generator) -> (B, C, H, W)``, e.g.
            ``functools.partial(random_shift, max_shift=2)``.
        clamp: optional ``(low, high)`` applied at the end (keep images in their box,
            e.g. ``(-1.0, 1.0)``, so a sampler with a ``Box`` space accepts them).

    Example:
        >>> import functools, torch
        >>> aug = Augment([functools.partial(random_shift, max_shift=2), random_flip], clamp=(-1.0, 1.0))
        >>> aug(torch.zeros(4, 1, 8, 8), torch.Generator().manual_seed(0)).shape
        torch.Size([4, 1, 8, 8])
    """

    def __init__(self, transforms: Sequence[Transform], *, clamp: tuple[float, float] | None = None) -> None:
        transforms = list(transforms)
        for i, t in enumerate(transforms):
            if not callable(t):
                raise TypeError(f"transforms[{i}]: expected a callable (x, generator) -> x; got {type(t).__name__}")
        if clamp is not None:
            try:
                lo, hi = (float(v) for v in clamp)
            except (TypeError, ValueError):
                raise TypeError(f"clamp: expected a pair (low, high) of numbers or None; got {clamp!r}") from None
            if not lo < hi:
                raise ValueError(f"clamp: expected low < high; got {clamp!r}")
            clamp = (lo, hi)
        self.transforms = transforms
        self.clamp = clamp

    def __call__(self, x: Tensor, generator: torch.Generator | None = None) -> Tensor:
        """Apply every transform in order to ``x: (B, C, H, W)``; returns ``(B, C, H, W)``."""
        x = _check_images(x)
        for t in self.transforms:
            out = t(x, generator)
            if not isinstance(out, Tensor) or out.shape != x.shape:
                got = tuple(out.shape) if isinstance(out, Tensor) else type(out).__name__
                raise ValueError(f"transform {t!r}: expected an output of shape {tuple(x.shape)}; got {got}")
            x = out
        if self.clamp is not None:
            x = x.clamp(*self.clamp)
        return x

    def __repr__(self) -> str:
        return f"Augment({self.transforms!r}, clamp={self.clamp!r})"
