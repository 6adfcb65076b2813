"""Augmentations of image batches: exact properties and reproducible draws."""

from __future__ import annotations

import functools

import pytest
import torch

from ebms.data.augment import Augment, color_jitter, gaussian_noise, random_flip, random_shift, shift_images

DTYPES = [torch.float32, torch.float64]


def _images(dtype: torch.dtype = torch.float32, B: int = 5) -> torch.Tensor:
    g = torch.Generator().manual_seed(1)
    return torch.rand(B, 2, 6, 7, generator=g, dtype=dtype) * 2 - 1


@pytest.mark.parametrize("dtype", DTYPES)
def test_shift_by_zero_is_identity(dtype: torch.dtype) -> None:
    x = _images(dtype)
    zero = torch.zeros(5, dtype=torch.long)
    assert torch.equal(shift_images(x, zero, zero), x)
    g = torch.Generator().manual_seed(0)
    assert torch.equal(random_shift(x, g, max_shift=0), x)


def test_shift_moves_pixels_and_fills_the_border() -> None:
    x = _images()
    dy = torch.tensor([1, 0, -2, 0, 1])
    dx = torch.tensor([0, 1, 0, -3, 2])
    out = shift_images(x, dy, dx, fill=-1.0)
    H, W = x.shape[2:]
    for b in range(5):
        for i in range(H):
            for j in range(W):
                si, sj = i - int(dy[b]), j - int(dx[b])
                want = x[b, :, si, sj] if (0 <= si < H and 0 <= sj < W) else torch.full((2,), -1.0)
                assert torch.equal(out[b, :, i, j], want)


def test_shift_then_inverse_restores_the_interior() -> None:
    x = _images()
    dy, dx = torch.full((5,), 1), torch.full((5,), -1)
    back = shift_images(shift_images(x, dy, dx), -dy, -dx)
    assert torch.equal(back[:, :, :-1, 1:], x[:, :, :-1, 1:])


@pytest.mark.parametrize("dtype", DTYPES)
def test_full_flip_is_an_involution_and_zero_flip_the_identity(dtype: torch.dtype) -> None:
    x = _images(dtype)
    g = torch.Generator().manual_seed(0)
    once = random_flip(x, g, p=1.0)
    assert torch.equal(once, x.flip(-1))
    assert torch.equal(random_flip(once, g, p=1.0), x)
    assert torch.equal(random_flip(x, g, p=0.0), x)


def test_random_flip_flips_exactly_the_rows_whose_coin_fell() -> None:
    x = _images(B=64)
    out = random_flip(x, torch.Generator().manual_seed(3), p=0.5)
    coin = torch.rand(64, generator=torch.Generator().manual_seed(3)) < 0.5
    assert torch.equal(out[coin], x[coin].flip(-1))
    assert torch.equal(out[~coin], x[~coin])
    assert 0 < int(coin.sum()) < 64


@pytest.mark.parametrize(
    "fn",
    [
        functools.partial(random_shift, max_shift=2),
        random_flip,
        functools.partial(gaussian_noise, std=0.1),
        functools.partial(color_jitter, brightness=0.2, contrast=0.3),
    ],
)
def test_draws_are_reproducible_from_a_seed(fn) -> None:  # type: ignore[no-untyped-def]
    x = _images(B=32)
    a = fn(x, torch.Generator().manual_seed(7))
    b = fn(x, torch.Generator().manual_seed(7))
    c = fn(x, torch.Generator().manual_seed(8))
    assert torch.equal(a, b)
    assert not torch.equal(a, c)
    assert a.shape == x.shape and a.dtype == x.dtype


@pytest.mark.parametrize("dtype", DTYPES)
def test_gaussian_noise_adds_scaled_standard_normal(dtype: torch.dtype) -> None:
    x = _images(dtype)
    out = gaussian_noise(x, torch.Generator().manual_seed(2), std=0.5)
    want = x + 0.5 * torch.randn(x.shape, generator=torch.Generator().manual_seed(2), dtype=dtype)
    assert torch.equal(out, want)
    assert torch.equal(gaussian_noise(x, None, std=0.0), x)


@pytest.mark.parametrize("dtype", DTYPES)
def test_contrast_jitter_keeps_each_image_mean(dtype: torch.dtype) -> None:
    x = _images(dtype)
    out = color_jitter(x, torch.Generator().manual_seed(0), brightness=0.0, contrast=0.5)
    tol = 1e-6 if dtype == torch.float32 else 1e-12
    torch.testing.assert_close(out.mean(dim=(1, 2, 3)), x.mean(dim=(1, 2, 3)), atol=tol, rtol=0)
    assert torch.equal(color_jitter(x, None, brightness=0.0, contrast=0.0), x)


def test_brightness_shift_is_constant_per_image_and_bounded() -> None:
    x = _images(B=16)
    out = color_jitter(x, torch.Generator().manual_seed(0), brightness=0.3, contrast=0.0)
    d = (out - x).flatten(1)
    torch.testing.assert_close(d, d[:, :1].expand_as(d))
    assert bool((d.abs() <= 0.3).all())


def test_augment_applies_transforms_in_order_then_clamps() -> None:
    x = _images(B=8)
    shift = functools.partial(random_shift, max_shift=1, fill=-1.0)
    noise = functools.partial(gaussian_noise, std=1.0)
    out = Augment([shift, random_flip, noise], clamp=(-1.0, 1.0))(x, torch.Generator().manual_seed(4))
    g = torch.Generator().manual_seed(4)
    want = noise(random_flip(shift(x, g), g), g).clamp(-1.0, 1.0)
    assert torch.equal(out, want)
    assert torch.equal(Augment([])(x, None), x)


def test_bad_arguments_name_themselves() -> None:
    x = _images()
    z = torch.zeros(5, dtype=torch.long)
    with pytest.raises(ValueError, match=r"x: expected images of shape \(B, C, H, W\); got \(5, 2\)"):
        random_flip(x[:, :, 0, 0])
    with pytest.raises(TypeError, match="x: expected a floating-point tensor; got dtype torch.int64"):
        random_flip(x.long())
    with pytest.raises(ValueError, match=r"max_shift: expected less than min\(H, W\) = 6; got 6"):
        random_shift(x, max_shift=6)
    with pytest.raises(ValueError, match="max_shift: expected an int >= 0; got -1"):
        random_shift(x, max_shift=-1)
    with pytest.raises(ValueError, match=r"dy: expected a LongTensor of shape \(5,\)"):
        shift_images(x, z[:3], z)
    with pytest.raises(ValueError, match=r"dx: expected offsets with \|dx\| < 7; got max \|dx\| 7"):
        shift_images(x, z, torch.full((5,), 7))
    with pytest.raises(ValueError, match=r"p: expected a number in \[0, 1\]; got 1.5"):
        random_flip(x, p=1.5)
    with pytest.raises(ValueError, match="std: expected a finite number >= 0; got -0.1"):
        gaussian_noise(x, std=-0.1)
    with pytest.raises(ValueError, match="brightness: expected a finite number >= 0; got -1"):
        color_jitter(x, brightness=-1)
    with pytest.raises(ValueError, match=r"contrast: expected a number in \[0, 1\]; got 2"):
        color_jitter(x, contrast=2)
    with pytest.raises(TypeError, match=r"transforms\[1\]: expected a callable"):
        Augment([random_flip, 3])  # type: ignore[list-item]
    with pytest.raises(ValueError, match=r"clamp: expected low < high; got \(1.0, -1.0\)"):
        Augment([], clamp=(1.0, -1.0))
    with pytest.raises(TypeError, match="clamp: expected a pair"):
        Augment([], clamp=3)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="expected an output of shape"):
        Augment([lambda x, g: x[:1]])(x, None)
