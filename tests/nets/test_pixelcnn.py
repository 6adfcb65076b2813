"""PixelCNN nets: the autoregressive property by autograd at every pixel, the exact dependence
sets (the plain net's blind spot, the gated net's full receptive field), shapes and validation."""

from __future__ import annotations

import pytest
import torch

from ebms.nets.pixelcnn import PixelCNN


def _net(**kwargs) -> PixelCNN:
    torch.manual_seed(0)
    return PixelCNN(**kwargs).double()


def _jacobian(net: PixelCNN, height: int, width: int, seed: int = 1) -> torch.Tensor:
    """``J[k, m] = d logit_k / d x_m`` at a random input, steps in pixel-major raster order
    (pixel ``k // C``, channel ``k % C``). One backward pass: row ``k`` of a batch of ``K``
    copies carries the gradient of output ``k`` (rows never interact, checked below)."""
    c = net.channels
    k = c * height * width
    x0 = torch.randn(1, c, height, width, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)
    x = x0.expand(k, c, height, width).clone().requires_grad_(True)
    out = net(x).permute(0, 2, 3, 1).reshape(k, k)
    out.diagonal().sum().backward()
    assert x.grad is not None
    return x.grad.permute(0, 2, 3, 1).reshape(k, k)


def _pixel_of_step(channels: int, height: int, width: int) -> torch.Tensor:
    return torch.arange(channels * height * width) // channels


@pytest.mark.parametrize("gated", [False, True])
@pytest.mark.parametrize(("channels", "kernel", "height", "width"), [(1, 3, 7, 6), (1, 5, 6, 6), (2, 3, 5, 4)])
def test_logits_do_not_depend_on_the_current_or_later_pixels(gated, channels, kernel, height, width):
    net = _net(channels=channels, hidden=8, layers=3, kernel=kernel, gated=gated)
    jac = _jacobian(net, height, width)
    pix = _pixel_of_step(channels, height, width)
    later = pix[None, :] >= pix[:, None]  # input pixel at or after the output pixel in raster order
    assert jac[later].abs().max() == 0.0
    assert (jac[~later] != 0).any()


def _plain_cone(n: int, layers: int) -> set[tuple[int, int]]:
    """Offsets (dr, dc) reachable by one mask-A layer then ``layers - 1`` mask-B layers (Minkowski sum)."""
    a = {(dr, dc) for dr in range(-n, 1) for dc in range(-n, n + 1) if dr < 0 or dc < 0}
    b = a | {(0, 0)}
    reach = set(a)
    for _ in range(layers - 1):
        reach = {(r + dr, c + dc) for r, c in reach for dr, dc in b}
    return reach


def _gated_field(n: int, layers: int) -> set[tuple[int, int]]:
    """Rows ``-1 - L n .. -1`` within columns ``+-L n``, and columns ``-L n - 1 .. -1`` of the own row."""
    span = layers * n
    above = {(dr, dc) for dr in range(-1 - span, 0) for dc in range(-span, span + 1)}
    return above | {(0, dc) for dc in range(-span - 1, 0)}


@pytest.mark.parametrize(("gated", "kernel", "layers"), [(False, 3, 3), (False, 5, 2), (True, 3, 3), (True, 5, 2)])
def test_every_pixel_depends_on_exactly_its_predicted_receptive_field(gated, kernel, layers):
    height = width = 9
    net = _net(hidden=16, layers=layers, kernel=kernel, gated=gated)
    jac = _jacobian(net, height, width)
    offsets = (_gated_field if gated else _plain_cone)(kernel // 2, layers)
    for i in range(height):
        for j in range(width):
            seen = {(r - i, c - j) for r in range(height) for c in range(width) if jac[i * width + j, r * width + c] != 0}
            inside = {(dr, dc) for dr, dc in offsets if 0 <= i + dr < height and 0 <= j + dc < width}
            assert seen == inside, (i, j)


def test_the_plain_net_has_a_blind_spot_the_gated_net_does_not():
    # from (4, 3) with kernel 3: the pixel (3, 5) is never reached by stacked masked convolutions,
    # although (1, 5) and (3, 4) are; the gated stacks see it from their first layer on
    n, layers, width = 1, 3, 8
    assert (-1, n + 1) not in _plain_cone(n, layers) and (-3, n + 1) in _plain_cone(n, layers)
    for gated, seen in ((False, False), (True, True)):
        jac = _jacobian(_net(hidden=16, layers=layers, gated=gated), 8, width)
        assert bool(jac[4 * width + 3, 3 * width + 5] != 0) is seen


@pytest.mark.parametrize("gated", [False, True])
def test_rows_of_a_batch_do_not_interact_and_odd_sizes_keep_their_shape(gated):
    net = _net(channels=2, hidden=8, layers=2, gated=gated)
    x = torch.randn(3, 2, 1, 5, dtype=torch.float64)
    out = net(x)
    assert out.shape == (3, 2, 1, 5)
    torch.testing.assert_close(net(x[1:2]), out[1:2], rtol=0, atol=1e-12)


def test_extra_repr_names_the_settings():
    assert "hidden=8, layers=2, kernel=3, gated=True" in repr(PixelCNN(hidden=8, layers=2, gated=True))


@pytest.mark.parametrize(("kwargs", "error", "message"), [
    ({"channels": 0}, ValueError, r"^channels: expected an int >= 1; got 0"),
    ({"hidden": True}, TypeError, r"^hidden: expected an int; got True"),
    ({"layers": 0}, ValueError, r"^layers: expected an int >= 1; got 0"),
    ({"kernel": 1}, ValueError, r"^kernel: expected an int >= 3; got 1"),
    ({"kernel": 4}, ValueError, r"^kernel: expected an odd int >= 3; got 4"),
    ({"gated": 1}, TypeError, r"^gated: expected a bool; got 1"),
])
def test_bad_settings_are_named(kwargs, error, message):
    with pytest.raises(error, match=message):
        PixelCNN(**kwargs)


def test_bad_inputs_are_named():
    net = PixelCNN(hidden=4, layers=1)
    with pytest.raises(TypeError, match=r"^x: expected a torch.Tensor of shape \(B, 1, H, W\); got list"):
        net([0.0])
    with pytest.raises(ValueError, match=r"^x: expected a non-empty shape \(B, 1, H, W\); got \(2, 3, 4, 4\)"):
        net(torch.zeros(2, 3, 4, 4))
    with pytest.raises(ValueError, match=r"^x: expected a non-empty shape \(B, 1, H, W\); got \(2, 16\)"):
        net(torch.zeros(2, 16))
    with pytest.raises(TypeError, match=r"^x: expected a floating-point tensor; got dtype torch.int64"):
        net(torch.zeros(2, 1, 4, 4, dtype=torch.long))
