r"""PixelCNN networks for binary images: masked convolutions, plain or gated.

A PixelCNN orders the pixels of an ``H x W`` image in raster order (row by row, left to
right) and gives, at every pixel ``i``, the Bernoulli logit of that pixel given the pixels
before it:

.. math::  p(x) = \prod_{i=1}^{HW} \prod_{c=1}^{C} \sigma(\ell_{c,i})^{x_{c,i}}
           \bigl(1 - \sigma(\ell_{c,i})\bigr)^{1 - x_{c,i}},
           \qquad \ell_{\cdot,i} = f_\theta(x_{<i}),

so one network pass on the whole image yields all ``H W`` conditionals at once (teacher
forcing); sampling needs ``H W`` passes. The ``C`` channels of one pixel are conditionally
independent given the earlier pixels (no within-pixel channel masks: for binarised MNIST
``C = 1``).

**Plain** (``gated=False``; van den Oord, Kalchbrenner & Kavukcuoglu, 2016, "Pixel
Recurrent Neural Networks", section 3.5): a ``k x k`` convolution with mask A (taps strictly
before the centre in raster order), then ``layers - 1`` residual blocks
``h <- h + conv_B(relu(h))`` with mask B (mask A plus the centre), then
``relu -> 1x1 -> relu -> 1x1`` to ``C`` logits. Stacked masked convolutions have a *blind
spot*: with ``n = k // 2`` the pixel ``(i - 1, j + n + 1)`` is never seen from ``(i, j)``,
however deep the stack (each layer reaches at most ``n`` columns right per row up).

**Gated** (``gated=True``; van den Oord, Kalchbrenner, Vinyals, Espeholt, Graves &
Kavukcuoglu, 2016, "Conditional Image Generation with PixelCNN Decoders"): a vertical stack
``v`` sees a ``(n + 1) x k`` window of the rows at and above its own (zero padding on top
only), a horizontal stack ``h`` sees ``1 x (n + 1)`` of its own row up to its own column
(the first layer strictly left of it), and the vertical features enter the horizontal stack
shifted down one row, so ``h`` at row ``i`` only hears rows ``< i`` through ``v``. Each layer

.. math::  v' = \tanh(a_v) \odot \sigma(b_v), \quad [a_v, b_v] = W_v * v, \qquad
           h' = h + W_o\bigl(\tanh(a_h) \odot \sigma(b_h)\bigr),
           \quad [a_h, b_h] = W_h * h + W_{vh}\,\mathrm{down}(W_v * v),

(no residual in the first layer: it would pass the current pixel through). After ``L``
layers the logit at ``(i, j)`` depends on exactly the rows ``i - 1 - L n .. i - 1`` within
columns ``j - L n .. j + L n`` and on the pixels ``j - L n - 1 .. j - 1`` of row ``i``: a
full rectangle, no blind spot.

No normalisation layer: BatchNorm and GroupNorm average over the spatial positions, which
would let a pixel's logit see later pixels and break the factorisation (and BatchNorm
also mixes the batch rows).

Shapes: ``x: (B, C, H, W)`` floating (values in {0, 1} for a model, any values for the net)
``-> logits (B, C, H, W)``. Cost per pass: ``O(B H W hidden (k^2 + hidden) L)``.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ebms._checks import check_bool, check_int

__all__ = ["PixelCNN"]


class _MaskedConv2d(nn.Conv2d):
    """A ``k x k`` convolution whose taps at and after the centre (mask A) or after it (mask B)
    in raster order are zero, over every input and output channel."""

    mask: Tensor

    def __init__(self, c_in: int, c_out: int, kernel: int, mask_type: str) -> None:
        super().__init__(c_in, c_out, kernel, padding=kernel // 2)
        n = kernel // 2
        mask = torch.zeros(kernel, kernel)
        mask[:n] = 1.0
        mask[n, : n + (mask_type == "B")] = 1.0
        self.register_buffer("mask", mask.expand(c_out, c_in, kernel, kernel).clone())

    def forward(self, x: Tensor) -> Tensor:
        return F.conv2d(x, self.weight * self.mask, self.bias, padding=self.padding)


class _GatedLayer(nn.Module):
    """One gated layer: vertical ``(n+1) x k`` stack, horizontal ``1 x (n+1)`` stack, down-shifted link."""

    def __init__(self, c_in: int, hidden: int, kernel: int, first: bool) -> None:
        super().__init__()
        self.n, self.first = kernel // 2, first
        self.v_conv = nn.Conv2d(c_in, 2 * hidden, (self.n + 1, kernel))
        self.h_conv = nn.Conv2d(c_in, 2 * hidden, (1, self.n + 1))
        self.v_to_h = nn.Conv2d(2 * hidden, 2 * hidden, 1)
        self.h_out = nn.Conv2d(hidden, hidden, 1)

    def forward(self, v: Tensor, h: Tensor) -> tuple[Tensor, Tensor]:
        n, height, width = self.n, h.shape[2], h.shape[3]
        v_pre = self.v_conv(F.pad(v, (n, n, n, 0)))  # rows r - n .. r, columns c - n .. c + n
        down = F.pad(v_pre, (0, 0, 1, 0))[:, :, :height]  # row i hears rows < i only
        if self.first:  # strictly left: columns j - n - 1 .. j - 1
            h_pre = self.h_conv(F.pad(h, (n + 1, 0, 0, 0)))[:, :, :, :width]
        else:  # columns j - n .. j (the features at j already exclude pixel j)
            h_pre = self.h_conv(F.pad(h, (n, 0, 0, 0)))
        h_pre = h_pre + self.v_to_h(down)
        v_new = _gate(v_pre)
        h_new = self.h_out(_gate(h_pre))
        return v_new, h_new if self.first else h + h_new


def _gate(u: Tensor) -> Tensor:
    a, b = u.chunk(2, dim=1)
    return torch.tanh(a) * torch.sigmoid(b)


class PixelCNN(nn.Module):
    r"""Masked-convolution network giving the Bernoulli logits of every pixel (module docstring).

    Args:
        channels: ``C``, binary channels per pixel (1 for binarised MNIST).
        hidden: feature maps per layer.
        layers: masked spatial layers ``L >= 1`` (plain: the mask-A layer plus ``L - 1``
            mask-B residual blocks; gated: ``L`` gated layers).
        kernel: odd spatial size ``k >= 3`` of the masked convolutions.
        gated: the gated PixelCNN (vertical and horizontal stacks, no blind spot) instead of
            the plain one.

    Shapes: ``forward(x: (B, C, H, W)) -> (B, C, H, W)`` logits of ``x_{c,i} = 1`` given the
    pixels before ``i`` in raster order; any ``H, W >= 1``. Rows of the batch never interact.

    Example:
        >>> import torch
        >>> net = PixelCNN(hidden=8, layers=2, gated=True)
        >>> net(torch.zeros(3, 1, 8, 8)).shape
        torch.Size([3, 1, 8, 8])
    """

    def __init__(self, channels: int = 1, *, hidden: int = 64, layers: int = 5, kernel: int = 3,
                 gated: bool = False) -> None:
        super().__init__()
        self.channels = check_int(channels, "channels", minimum=1)
        self.hidden = check_int(hidden, "hidden", minimum=1)
        self.layers = check_int(layers, "layers", minimum=1)
        self.kernel = check_int(kernel, "kernel", minimum=3)
        if kernel % 2 == 0:
            raise ValueError(f"kernel: expected an odd int >= 3; got {kernel}")
        self.gated = check_bool(gated, "gated")
        if gated:
            self.stack = nn.ModuleList(
                _GatedLayer(channels if i == 0 else hidden, hidden, kernel, i == 0) for i in range(layers)
            )
        else:
            self.first = _MaskedConv2d(channels, hidden, kernel, "A")
            self.blocks = nn.ModuleList(_MaskedConv2d(hidden, hidden, kernel, "B") for _ in range(layers - 1))
        self.head = nn.Sequential(nn.ReLU(), nn.Conv2d(hidden, hidden, 1), nn.ReLU(), nn.Conv2d(hidden, channels, 1))

    def forward(self, x: Tensor) -> Tensor:
        """Logits ``(B, C, H, W)`` of images ``x: (B, C, H, W)``."""
        if not isinstance(x, Tensor):
            raise TypeError(f"x: expected a torch.Tensor of shape (B, {self.channels}, H, W); got {type(x).__name__}")
        if x.dim() != 4 or x.shape[1] != self.channels or x.shape[0] == 0 or x.shape[2] == 0 or x.shape[3] == 0:
            raise ValueError(f"x: expected a non-empty shape (B, {self.channels}, H, W); got {tuple(x.shape)}")
        if not x.is_floating_point():
            raise TypeError(f"x: expected a floating-point tensor; got dtype {x.dtype}")
        if self.gated:
            v = h = x
            for layer in self.stack:
                v, h = layer(v, h)
        else:
            h = self.first(x)
            for block in self.blocks:
                h = h + block(F.relu(h))
        return self.head(h)

    def extra_repr(self) -> str:
        return (f"channels={self.channels}, hidden={self.hidden}, layers={self.layers}, kernel={self.kernel}, "
                f"gated={self.gated}")
