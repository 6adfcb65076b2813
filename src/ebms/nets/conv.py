r"""Residual convolutional energy for images.

.. math::  E(x) = w^\top \operatorname{mean}_{h,w}\, f(\mathrm{GN}(R_K \circ \cdots \circ R_1(\mathrm{conv}(x)))) + c,

with pre-activation residual blocks (He et al., 2016, "Identity Mappings in
Deep Residual Networks")

.. math::  R(u) = S(u) + \mathrm{conv}_2\, f(\mathrm{GN}(\mathrm{conv}_1\, f(\mathrm{GN}(u)))),

where ``S`` is the identity or a strided 1x1 convolution when the shape
changes. Stage ``k > 1`` halves the spatial size (stride-2 ``conv_1``).

Why GroupNorm and never BatchNorm: in training mode BatchNorm normalises each
sample with the mean and variance *of the batch*, so ``E(x)[i]`` depends on
the other rows. A sampler moving chain ``j`` would change the energy (and the
gradient) seen by chain ``i``, the chains are no longer independent draws
from one fixed density, and positives and negatives in a contrastive loss
would be scored by different functions depending on how batches are mixed.
In eval mode BatchNorm uses running statistics that were collected on data,
not on the samples the sampler visits. GroupNorm (Wu & He, 2018, "Group
Normalization") normalises within one sample, so ``E`` is a per-sample
function in both modes.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from torch import Tensor, nn
from torch.nn.utils.parametrizations import spectral_norm as _spectral_norm

from ebms._checks import check_bool, check_int
from ebms.energy import Energy
from ebms.nets._activations import Activation, resolve_activation

__all__ = ["ConvEnergy", "receptive_field"]


def receptive_field(channels: Sequence[int]) -> int:
    """Side in pixels of the square window of the input that one location of the last feature map sees,
    for the residual trunk of :class:`ConvEnergy` and :class:`~ebms.nets.NoiseConditionalEnergy`
    (a 3x3 stem, then per stage two 3x3 convolutions, the first of stage ``k > 1`` with stride 2).

    A 3x3 convolution at input stride ``j`` widens the window by ``2 j``; a stride-2 one doubles ``j``
    for the layers after it (1x1 skips widen nothing). Both energies mean-pool that map, so ``E`` is a
    sum of energies of windows of this side: with a window smaller than the image it is mostly a model of
    local patches (a texture), which can ask a sample to be one whole digit only through the windows that
    touch the zero padding at the border. ``channels=(16, 32)``
    gives 13 (on 28x28 images), ``(16, 32, 64, 64)`` gives 49. This is the convolutions' window: with
    GroupNorm, whose statistics span the whole feature map, every location also depends on the rest of the
    image, but only through each group's mean and variance.
    """
    n = len(tuple(channels))
    if n < 1:
        raise ValueError(f"channels: expected a non-empty sequence of positive ints; got {channels!r}")
    side, jump = 3, 1  # the stem
    for k in range(n):
        side += 2 * jump  # conv1, stride 2 from the second stage on
        if k:
            jump *= 2
        side += 2 * jump  # conv2
    return side


def _positive_ints(value: object, name: str, length: int | None = None) -> tuple[int, ...]:
    try:
        out: tuple = tuple(value)  # type: ignore[arg-type]
    except TypeError:
        out = ()
    ok = bool(out) and all(isinstance(v, int) and not isinstance(v, bool) and v >= 1 for v in out)
    if not ok or (length is not None and len(out) != length):
        what = f"{length} positive ints" if length is not None else "a non-empty sequence of positive ints"
        raise ValueError(f"{name}: expected {what}; got {value!r}")
    return out


def _no_wrap(m: nn.Module) -> nn.Module:
    """The layer as it is (the ``wrap`` of a network without spectral normalisation)."""
    return m


class _Block(nn.Module):
    """Pre-activation residual block ``S(u) + conv2 f(GN(conv1 f(GN(u))))`` (the trunk of :class:`ConvEnergy`,
    :class:`~ebms.nets.NoiseConditionalEnergy` and :class:`~ebms.nets.ConvClassifier`)."""

    def __init__(
        self,
        c_in: int,
        c_out: int,
        stride: int,
        groups: int,
        act: Activation,
        residual: bool = True,
        wrap: Callable[[nn.Module], nn.Module] = _no_wrap,
        normalize: bool = True,
    ) -> None:
        super().__init__()
        self.act = act
        self.residual = residual
        self.norm1 = nn.GroupNorm(groups, c_in) if normalize else nn.Identity()
        self.conv1 = wrap(nn.Conv2d(c_in, c_out, 3, stride=stride, padding=1))
        self.norm2 = nn.GroupNorm(groups, c_out) if normalize else nn.Identity()
        self.conv2 = wrap(nn.Conv2d(c_out, c_out, 3, padding=1))
        needs_proj = residual and (c_in != c_out or stride != 1)
        self.skip = wrap(nn.Conv2d(c_in, c_out, 1, stride=stride)) if needs_proj else None

    def forward(self, u: Tensor) -> Tensor:
        f = self.act.fn
        h = self.conv2(f(self.norm2(self.conv1(f(self.norm1(u))))))
        if not self.residual:
            return h
        return (u if self.skip is None else self.skip(u)) + h


class ConvEnergy(Energy):
    r"""Residual conv energy ``(B, C, H, W) -> (B,)`` with GroupNorm and global pooling.

    Args:
        in_channels: ``C``.
        image_size: ``H`` (square images) or ``(H, W)``; inputs must match.
        channels: width of each stage; stage ``k > 1`` halves ``H`` and ``W``.
        residual: add the skip connection in every block (else a plain
            conv stack of the same depth).
        spectral_norm: wrap every conv and the linear head in spectral
            normalisation (Miyato et al., 2018). PyTorch normalises each
            conv kernel reshaped to ``(C_out, C_in k k)``, which bounds that
            matrix, not the conv operator; GroupNorm's learned scale is not
            constrained, so this tames but does not bound the Lipschitz constant.
        groups: GroupNorm groups; must divide every entry of ``channels``.
        normalize: GroupNorm in the blocks and before the pooling (default). ``False``: none, so the
            energy is no longer blind to its input's contrast and scale (with it, ``E(c x)`` tends to a
            finite limit as ``c`` grows); the image EBMs of Du & Mordatch (2019) and Nijkamp et al.
            (2019) use no normalisation at all.
        activation: an :class:`~ebms.nets._activations.Activation` or its name.

    Shapes: ``x: (B, C, H, W)`` → ``(B,)``. :meth:`energy_and_grad` uses autograd
    (one forward and one backward pass).

    Example:
        >>> import torch
        >>> from ebms.nets import ConvEnergy
        >>> net = ConvEnergy(1, 28, channels=(16, 32), groups=8)
        >>> net(torch.randn(4, 1, 28, 28)).shape
        torch.Size([4])
    """

    def __init__(
        self,
        in_channels: int,
        image_size: int | Sequence[int],
        *,
        channels: Sequence[int] = (32, 64, 128),
        residual: bool = True,
        spectral_norm: bool = False,
        groups: int = 8,
        activation: str | Activation = "silu",
        normalize: bool = True,
    ) -> None:
        super().__init__()
        self.in_channels = check_int(in_channels, "in_channels", minimum=1)
        size = (image_size, image_size) if isinstance(image_size, int) else image_size
        self.image_size = _positive_ints(size, "image_size", length=2)
        self.channels = _positive_ints(channels, "channels")
        check_int(groups, "groups", minimum=1)
        if any(c % groups for c in self.channels):
            raise ValueError(f"groups: expected a divisor of every entry of channels {self.channels}; got {groups}")
        for flag, name in ((residual, "residual"), (spectral_norm, "spectral_norm"), (normalize, "normalize")):
            check_bool(flag, name)
        self.activation = resolve_activation(activation)
        self.event_shape = (self.in_channels, *self.image_size)
        wrap: Callable[[nn.Module], nn.Module] = _spectral_norm if spectral_norm else _no_wrap

        self.stem = wrap(nn.Conv2d(in_channels, self.channels[0], 3, padding=1))
        blocks = []
        c_prev = self.channels[0]
        for k, c in enumerate(self.channels):
            blocks.append(_Block(c_prev, c, 1 if k == 0 else 2, groups, self.activation, residual, wrap, normalize))
            c_prev = c
        # ``stages``, not ``blocks``: a ``blocks`` attribute would claim the site-partition capability
        # (ebms.capabilities.SupportsBlocks) that block Gibbs reads; checkpoints written under the old
        # name still load (see _load_from_state_dict)
        self.stages = nn.Sequential(*blocks)
        self.norm: nn.Module = nn.GroupNorm(groups, c_prev) if normalize else nn.Identity()
        self.head = wrap(nn.Linear(c_prev, 1))

    def forward(self, x: Tensor) -> Tensor:
        """Energies ``(B,)`` of images ``x: (B, C, H, W)``."""
        if not isinstance(x, Tensor):
            raise TypeError(f"x: expected a torch.Tensor; got {type(x).__name__}")
        if x.dim() != 4 or tuple(x.shape[1:]) != self.event_shape:
            shown = ", ".join(map(str, self.event_shape))
            raise ValueError(f"x: expected shape (B, {shown}); got {tuple(x.shape)}")
        if not x.is_floating_point():
            raise TypeError(f"x: expected a floating-point tensor; got dtype {x.dtype}")
        h = self.activation.fn(self.norm(self.stages(self.stem(x))))
        return self.head(h.mean(dim=(2, 3))).squeeze(-1)

    @property
    def receptive_field(self) -> int:
        """Side of the input window one pooled location sees (:func:`receptive_field`)."""
        return receptive_field(self.channels)

    def _load_from_state_dict(self, state_dict: dict[str, Any], prefix: str, *args: Any, **kwargs: Any) -> None:
        old = prefix + "blocks."
        for key in [k for k in state_dict if k.startswith(old)]:
            state_dict[prefix + "stages." + key[len(old):]] = state_dict.pop(key)
        super()._load_from_state_dict(state_dict, prefix, *args, **kwargs)

    def extra_repr(self) -> str:
        return (
            f"in_channels={self.in_channels}, image_size={self.image_size}, "
            f"activation={self.activation.name!r}"
        )
