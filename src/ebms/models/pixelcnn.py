r"""A PixelCNN as a normalised model over binary images and its E-ARM adapter.

:class:`PixelCNNModel` wraps a network ``f`` (e.g. :class:`ebms.nets.pixelcnn.PixelCNN`) that
maps images ``(B, C, H, W)`` to Bernoulli logits ``(B, C, H, W)`` where the logit of pixel
``i`` depends on the pixels before ``i`` in raster order only. Then

.. math::  \log p(x) = \sum_{i=1}^{HW}\sum_{c=1}^{C}
           x_{c,i}\log\sigma(\ell_{c,i}) + (1 - x_{c,i})\log\sigma(-\ell_{c,i}),
           \qquad \ell = f(x),

exact and normalised (a product of conditionals), from one pass of ``f``;
``bits/dim = -log p(x) / (C H W ln 2)`` (the unit of van den Oord et al., 2016). Sampling
is ancestral in raster order: ``H W`` passes of ``f`` on the partly drawn batch.

:class:`PixelCNNAdapter` gives the E-ARM objective (:mod:`ebms.objectives.earm`; Wang et al.,
2022, "Your Autoregressive Generative Model Can be Better If You Treat It as an Energy-Based
One") its two views: teacher-forced next-step logits and model draws.

Its maximum-likelihood objective is :class:`ebms.objectives.PixelNLL`.
"""

from __future__ import annotations

import math
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ebms._checks import check_choice, check_int
from ebms.capabilities import HasChannels
from ebms.distributions import Distribution
from ebms.nets.pixelcnn import PixelCNN
from ebms.spaces import Binary

__all__ = ["PixelCNNAdapter", "PixelCNNModel"]

_PAIRS = ("zero", "symmetric")


class PixelCNNModel(Distribution):
    r"""Normalised law over binary images ``{0, 1}^(C, H, W)`` from an autoregressive logit net.

    Args:
        net: an ``nn.Module`` mapping ``(B, C, H, W)`` floats to logits of the same shape,
            the logit of pixel ``i`` depending on pixels ``< i`` in raster order only (not
            checked here: :class:`~ebms.nets.pixelcnn.PixelCNN` guarantees it, its tests check it
            by gradient). ``C`` is read from ``net.channels`` (1 when absent).
        height: ``H``.
        width: ``W``.

    Images are passed as ``(B, C, H, W)`` or flattened ``(B, C H W)`` (row-major), float
    values in {0, 1}.

    Cost: :meth:`log_prob` one pass of ``net``; :meth:`sample` ``H W`` passes on ``n`` rows
    (64 for 8x8 digits, 784 for MNIST), no gradient.

    Example:
        >>> import torch
        >>> from ebms.nets.pixelcnn import PixelCNN
        >>> model = PixelCNNModel(PixelCNN(hidden=8, layers=2), 4, 4)
        >>> x = model.sample(3, generator=torch.Generator().manual_seed(0))
        >>> x.shape, model.log_prob(x).shape
        (torch.Size([3, 1, 4, 4]), torch.Size([3]))
    """

    space: Binary

    def __init__(self, net: nn.Module, height: int, width: int) -> None:
        super().__init__()
        if not isinstance(net, nn.Module):
            raise TypeError(f"net: expected a torch.nn.Module mapping (B, C, H, W) to logits; got {type(net).__name__}")
        self.net = net
        self.channels = check_int(net.channels if isinstance(net, HasChannels) else 1, "net.channels", minimum=1)
        self.height = check_int(height, "height", minimum=1)
        self.width = check_int(width, "width", minimum=1)
        self.event_shape = (self.channels, self.height, self.width)
        self.dims = self.channels * self.height * self.width
        self.space = Binary(self.event_shape)

    def images(self, x: Any, name: str = "x") -> Tensor:
        """``x`` as validated images ``(B, C, H, W)`` in the net's dtype (accepts the flattened
        ``(B, C H W)``; one host sync to check the values)."""
        if not isinstance(x, Tensor):
            raise TypeError(f"{name}: expected a torch.Tensor of binary images; got {type(x).__name__}")
        c, h, w = self.event_shape
        flat = x.dim() == 2 and x.shape[1] == self.dims
        if not flat and (x.dim() != 4 or tuple(x.shape[1:]) != self.event_shape):
            raise ValueError(f"{name}: expected shape (B, {c}, {h}, {w}) or (B, {self.dims}); got {tuple(x.shape)}")
        if x.shape[0] == 0:
            raise ValueError(f"{name}: expected at least one image; got shape {tuple(x.shape)}")
        x = self.space.validate(x.reshape(x.shape[0], c, h, w), name)
        ref = next(iter(self.net.parameters()), None)
        return x if ref is None else x.to(ref.dtype)  # 0 and 1 are exact in every float dtype

    def _net_logits(self, x: Tensor) -> Tensor:
        out = self.net(x)
        if not isinstance(out, Tensor) or out.shape != x.shape:
            got = tuple(out.shape) if isinstance(out, Tensor) else type(out).__name__
            raise ValueError(f"net: expected logits of the input's shape {tuple(x.shape)}; got {got}")
        return out

    def logits(self, x: Tensor) -> Tensor:
        r"""Logits ``(B, C, H, W)`` of :math:`p(x_{c,i} = 1 \mid x_{<i})` at every pixel (teacher forcing)."""
        return self._net_logits(self.images(x))

    def log_prob(self, x: Tensor) -> Tensor:
        """``log p(x)`` in nats, ``(B,)``, for images ``(B, C, H, W)`` or ``(B, C H W)`` in {0, 1}."""
        images = self.images(x)
        nll = F.binary_cross_entropy_with_logits(self._net_logits(images), images, reduction="none")
        return -nll.flatten(1).sum(1)

    def bits_per_dim(self, x: Tensor) -> Tensor:
        """``-log p(x) / (C H W ln 2)``, ``(B,)``: negative log-likelihood in bits per pixel."""
        return -self.log_prob(x) / (self.dims * math.log(2.0))

    @torch.no_grad()
    def sample(self, n: int, generator: torch.Generator | None = None) -> Tensor:
        """``n`` independent images ``(n, C, H, W)`` in {0, 1}, drawn pixel by pixel in raster order.

        Pixel ``i`` of every row is set to ``[u_i < sigma(l_i)]`` with ``l = net(x)`` computed on
        the rows drawn so far (later pixels still 0, which the logits of pixel ``i`` ignore); all
        uniforms ``u`` come from ``generator`` (on the parameters' device) in one draw. Cost:
        ``H W`` passes of ``net`` on ``n`` rows. For a :class:`~ebms.nets.pixelcnn.PixelCNN` of ``L``
        layers and kernel ``k`` the pass for pixel ``(i, j)`` runs on its receptive window only, rows
        ``i - r .. i`` and columns ``j - r .. j + r`` with ``r = L (k // 2)`` (plus one for the gated
        net, whose vertical stack reaches the horizontal one a row down; cut at the image's edges):
        each masked layer reaches ``k // 2`` pixels up, left and right, so the zero padding at a cut
        edge changes outputs at most ``r - 1`` pixels inside it, never pixel ``(i, j)``. Same
        logits up to floating-point summation order, ``(r + 1)(2 r + 1)`` positions per pass instead of
        ``H W``.
        """
        check_int(n, "n", minimum=1)
        ref = next(iter(self.net.parameters()), None)
        dtype = ref.dtype if ref is not None else torch.get_default_dtype()
        device = ref.device if ref is not None else torch.device("cpu")
        u = torch.rand((n, *self.event_shape), generator=generator, dtype=dtype, device=device)
        x = torch.zeros_like(u)
        reach = None
        if isinstance(self.net, PixelCNN):  # a gated layer's link from its vertical stack adds one row
            reach = self.net.layers * (self.net.kernel // 2) + int(self.net.gated)
        for i in range(self.height):
            for j in range(self.width):
                if reach is None:
                    logits = self._net_logits(x)[:, :, i, j]
                else:  # the receptive window of pixel (i, j)
                    top, left = max(0, i - reach), max(0, j - reach)
                    window = x[:, :, top: i + 1, left: min(self.width, j + reach + 1)]
                    logits = self._net_logits(window)[:, :, i - top, j - left]
                x[:, :, i, j] = (u[:, :, i, j] < torch.sigmoid(logits)).to(dtype)
        return x

    def extra_repr(self) -> str:
        return f"channels={self.channels}, height={self.height}, width={self.width}"


class PixelCNNAdapter(nn.Module):
    r"""A :class:`PixelCNNModel` seen through the ``EARMModel`` protocol of :mod:`ebms.objectives.earm`.

    Steps are the ``K = C H W`` pixel values in raster order (pixel-major, the ``C`` channels
    of one pixel in a row; for ``C = 1`` the row-major flattening). Each step has ``V = 2``
    outcomes (0, 1) whose softmax logits are built from the Bernoulli logit ``l``:

    * ``pair="zero"`` (default): ``[0, l]``, the off value as reference category (as
      :meth:`ebms.distributions.IndependentBernoulli.site_logits`); E-ARM's per-step energy
      normaliser is then ``LSE = softplus(l)``;
    * ``pair="symmetric"``: ``[-l/2, l/2]``, ``LSE = softplus(l) - l/2``.

    Both give the same conditionals ``softmax = [1 - sigma(l), sigma(l)]``; they differ only in
    the softmax's free constant, which a Bernoulli net does not learn, so E-ARM's importance
    weights ``w ∝ exp(LSE)`` depend on this convention.

    Args:
        model: the :class:`PixelCNNModel` (a submodule: the trainer optimises its parameters).
        pair: ``"zero"`` or ``"symmetric"`` (above).

    Batches are image tensors ``(B, C, H, W)`` or ``(B, C H W)`` in {0, 1}.
    """

    def __init__(self, model: PixelCNNModel, *, pair: str = "zero") -> None:
        super().__init__()
        if not isinstance(model, PixelCNNModel):
            raise TypeError(f"model: expected a PixelCNNModel; got {type(model).__name__}")
        self.model, self.pair = model, check_choice(pair, "pair", _PAIRS)

    def forward(self, batch: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """Same as :meth:`teacher_forced`."""
        return self.teacher_forced(batch)

    def teacher_forced(self, batch: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """``(logits (B, K, 2), targets (B, K) long, mask (B, K) bool all True)`` in one net pass."""
        images = self.model.images(batch, "batch")
        lg = self.model._net_logits(images).permute(0, 2, 3, 1).reshape(images.shape[0], -1)
        pair = (torch.zeros_like(lg), lg) if self.pair == "zero" else (-0.5 * lg, 0.5 * lg)
        logits = torch.stack(pair, dim=-1)
        targets = images.permute(0, 2, 3, 1).reshape(images.shape[0], -1).long()
        return logits, targets, torch.ones_like(targets, dtype=torch.bool)

    def draw(self, batch: Tensor, generator: torch.Generator | None = None) -> Tensor:
        """One model image per row of ``batch``, shaped, typed and placed like ``batch`` (no grad,
        drawn in evaluation mode; ``H W`` net passes on ``B`` rows)."""
        images = self.model.images(batch, "batch")
        was_training = self.model.training
        self.model.eval()  # the model's law (a net with dropout would otherwise sample another one)
        try:
            out = self.model.sample(images.shape[0], generator=generator)
        finally:
            self.model.train(was_training)
        return out.reshape(batch.shape).to(dtype=batch.dtype, device=batch.device)

    def log_prob(self, x: Tensor) -> Tensor:
        """The wrapped model's ``log p(x)``, ``(B,)``."""
        return self.model.log_prob(x)

    def bits_per_dim(self, x: Tensor) -> Tensor:
        """The wrapped model's bits per pixel, ``(B,)``."""
        return self.model.bits_per_dim(x)

    def extra_repr(self) -> str:
        return f"pair={self.pair!r}"
