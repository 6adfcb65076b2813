r"""Classifier networks returning logits: the :math:`f_\theta` of a JEM.

Both classifiers are a *trunk* :math:`h = \phi_\theta(x) \in \mathbb R^H` followed by a linear
*head*, :math:`f_\theta(x) = W h + b \in \mathbb R^K`. Read as an energy-based model
(Grathwohl et al., 2020, "Your classifier is secretly an energy based model and you should
treat it like one", ICLR), the logits define

.. math::  E(x, y) = -f_\theta(x)[y], \qquad E(x) = -\log\sum_y \exp f_\theta(x)[y],

so :class:`ebms.models.jem.JEM` wraps any module returning ``(B, K)`` logits. The trunk is a
separate sub-module (``.trunk``, output width ``.features``) so it can be shared: pre-train it
inside a scalar EBM (:class:`ebms.models.jem.ScalarHeadEBM`) and fine-tune the classifier that
holds the same trunk object.

* :class:`ConvClassifier` uses the trunk of :class:`ebms.nets.conv.ConvEnergy` (pre-activation
  residual blocks, GroupNorm, global average pooling). GroupNorm and never BatchNorm: the
  sampler moves many chains in one batch, and BatchNorm would make each chain's energy depend
  on the others (see :mod:`ebms.nets.conv`).
* :class:`MLPClassifier` flattens the input and stacks linear layers.

``spectral_norm=True`` wraps every convolution and linear layer, the head included (Miyato et
al., 2018), a common guard against energies that run away during contrastive training.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from torch import Tensor, nn
from torch.nn.utils.parametrizations import spectral_norm as _spectral_norm

from ebms._checks import check_bool, check_int
from ebms.nets._activations import Activation, resolve_activation
from ebms.nets.conv import _Block, _no_wrap, _positive_ints, receptive_field
from ebms.nets.mlp import _event_shape, _hidden

__all__ = ["ConvClassifier", "MLPClassifier"]

Wrap = Callable[[nn.Module], nn.Module]


def _wrap(spectral_norm: bool) -> Wrap:
    check_bool(spectral_norm, "spectral_norm")
    return _spectral_norm if spectral_norm else _no_wrap


def _check_input(x: object, event_shape: tuple[int, ...]) -> Tensor:
    if not isinstance(x, Tensor):
        raise TypeError(f"x: expected a torch.Tensor; got {type(x).__name__}")
    if x.dim() != len(event_shape) + 1 or tuple(x.shape[1:]) != event_shape:
        shown = ", ".join(map(str, event_shape))
        raise ValueError(f"x: expected shape (B, {shown}); got {tuple(x.shape)}")
    if not x.is_floating_point():
        raise TypeError(f"x: expected a floating-point tensor; got dtype {x.dtype}")
    return x


class _ConvTrunk(nn.Module):
    """``(B, C, H, W) -> (B, channels[-1])``: stem conv, residual stages, GroupNorm, activation, mean pool."""

    def __init__(self, in_channels: int, image_size: tuple[int, int], channels: tuple[int, ...], groups: int,
                 act: Activation, residual: bool, wrap: Wrap) -> None:
        super().__init__()
        self.event_shape = (in_channels, *image_size)
        self.act = act
        self.stem = wrap(nn.Conv2d(in_channels, channels[0], 3, padding=1))
        blocks, c_prev = [], channels[0]
        for k, c in enumerate(channels):
            blocks.append(_Block(c_prev, c, 1 if k == 0 else 2, groups, act, residual, wrap))
            c_prev = c
        self.stages = nn.Sequential(*blocks)
        self.norm = nn.GroupNorm(groups, c_prev)

    def forward(self, x: Tensor) -> Tensor:
        _check_input(x, self.event_shape)
        return self.act.fn(self.norm(self.stages(self.stem(x)))).mean(dim=(2, 3))


class _MLPTrunk(nn.Module):
    """``(B, *event) -> (B, hidden[-1])``: flatten, then ``f(W_l h + b_l)`` per layer."""

    def __init__(self, event_shape: tuple[int, ...], hidden: tuple[int, ...], act: Activation, wrap: Wrap) -> None:
        super().__init__()
        self.event_shape = event_shape
        self.act = act
        dim = 1
        for s in event_shape:
            dim *= s
        widths = (dim, *hidden)
        self.layers = nn.ModuleList([wrap(nn.Linear(a, b)) for a, b in zip(widths[:-1], widths[1:])])

    def forward(self, x: Tensor) -> Tensor:
        h = _check_input(x, self.event_shape).flatten(1)
        for layer in self.layers:
            h = self.act.fn(layer(h))
        return h


class ConvClassifier(nn.Module):
    r"""Residual conv classifier ``(B, C, H, W) -> (B, K)`` logits (GroupNorm, global pooling).

    .. math::  f(x) = W\,\operatorname{mean}_{h,w} a(\mathrm{GN}(R_S \circ\cdots\circ R_1(\mathrm{conv}(x)))) + b

    with the pre-activation residual blocks :math:`R_s` of :class:`ebms.nets.conv.ConvEnergy`
    (stage ``s > 1`` halves the spatial size).

    Args:
        in_channels: ``C``.
        image_size: ``H`` (square) or ``(H, W)``; inputs must match.
        n_classes: ``K >= 2``.
        channels: width of each stage.
        groups: GroupNorm groups; must divide every entry of ``channels``.
        spectral_norm: spectral normalisation on every conv and on the head.
        residual: skip connections in every block.
        activation: an :class:`~ebms.nets._activations.Activation` or its name.

    Attributes:
        trunk: ``(B, C, H, W) -> (B, features)`` pooled features; ``head``: ``nn.Linear(features, K)``;
        ``features = channels[-1]``; ``event_shape = (C, H, W)``; ``channels``; ``receptive_field``.

    Cost: that of :class:`~ebms.nets.conv.ConvEnergy` plus a ``features x K`` product.

    Example:
        >>> import torch
        >>> net = ConvClassifier(1, 8, 10, channels=(16, 32), groups=4)
        >>> net(torch.randn(3, 1, 8, 8)).shape
        torch.Size([3, 10])
    """

    def __init__(
        self,
        in_channels: int,
        image_size: int | Sequence[int],
        n_classes: int,
        *,
        channels: Sequence[int] = (32, 64, 128),
        groups: int = 8,
        spectral_norm: bool = False,
        residual: bool = True,
        activation: str | Activation = "silu",
    ) -> None:
        super().__init__()
        check_int(in_channels, "in_channels", minimum=1)
        self.n_classes = check_int(n_classes, "n_classes", minimum=2)
        size = (image_size, image_size) if isinstance(image_size, int) else image_size
        hw = _positive_ints(size, "image_size", length=2)
        chans = _positive_ints(channels, "channels")
        check_int(groups, "groups", minimum=1)
        if any(c % groups for c in chans):
            raise ValueError(f"groups: expected a divisor of every entry of channels {chans}; got {groups}")
        check_bool(residual, "residual")
        wrap = _wrap(spectral_norm)
        act = resolve_activation(activation)
        self.trunk = _ConvTrunk(in_channels, (hw[0], hw[1]), chans, groups, act, residual, wrap)
        self.channels = chans
        self.features = chans[-1]
        self.event_shape = self.trunk.event_shape
        self.head = wrap(nn.Linear(self.features, self.n_classes))

    def forward(self, x: Tensor) -> Tensor:
        """Logits ``(B, K)`` of images ``x: (B, C, H, W)``."""
        return self.head(self.trunk(x))

    @property
    def receptive_field(self) -> int:
        """Side of the input window one pooled location sees (:func:`~ebms.nets.conv.receptive_field`):
        ``channels=(16, 32, 64)`` of the MNIST recipes gives 25 on 28x28 digits."""
        return receptive_field(self.channels)

    def extra_repr(self) -> str:
        return f"event_shape={self.event_shape}, n_classes={self.n_classes}, features={self.features}"


class MLPClassifier(nn.Module):
    r"""Fully connected classifier ``(B, *event) -> (B, K)`` logits.

    .. math::  h_0 = \operatorname{flat}(x), \quad h_l = a(W_l h_{l-1} + b_l)\ (l = 1..L), \qquad
               f(x) = W h_L + b .

    Args:
        dim: ``D`` or the event shape of one input (flattened, so ``(1, 8, 8)`` takes images).
        n_classes: ``K >= 2``.
        hidden: widths ``(H_1, ..., H_L)``, at least one layer.
        activation: an :class:`~ebms.nets._activations.Activation` or its name.
        spectral_norm: spectral normalisation on every linear layer, the head included.

    Attributes:
        trunk: ``(B, *event) -> (B, features)``; ``head``: ``nn.Linear(features, K)``;
        ``features = hidden[-1]``; ``event_shape``.

    Cost: ``2B(D H_1 + sum H_{l-1} H_l + H_L K)`` FLOPs per forward.

    Example:
        >>> import torch
        >>> net = MLPClassifier(64, 10, hidden=(32,))
        >>> net(torch.randn(5, 64)).shape
        torch.Size([5, 10])
    """

    def __init__(
        self,
        dim: int | Sequence[int],
        n_classes: int,
        hidden: Sequence[int] = (128, 128),
        *,
        activation: str | Activation = "silu",
        spectral_norm: bool = False,
    ) -> None:
        super().__init__()
        try:
            shape = _event_shape(dim)
        except ValueError:
            raise ValueError(
                f"dim: expected a positive int or a tuple of positive ints (event shape); got {dim!r}"
            ) from None
        self.n_classes = check_int(n_classes, "n_classes", minimum=2)
        widths = _hidden(hidden)
        wrap = _wrap(spectral_norm)
        self.trunk = _MLPTrunk(shape, widths, resolve_activation(activation), wrap)
        self.features = widths[-1]
        self.event_shape = shape
        self.head = wrap(nn.Linear(self.features, self.n_classes))

    def forward(self, x: Tensor) -> Tensor:
        """Logits ``(B, K)`` of ``x: (B, *event_shape)``."""
        return self.head(self.trunk(x))

    def extra_repr(self) -> str:
        return f"event_shape={self.event_shape}, n_classes={self.n_classes}, features={self.features}"
