r"""Fully connected energy network with an analytic input gradient.

.. math::  h_0 = \operatorname{flat}(x), \quad z_l = W_l h_{l-1} + b_l, \quad
           h_l = f(z_l)\ (l = 1..L), \qquad E(x) = w^\top h_L + c .

The input gradient is written out instead of asking autograd for it
(:math:`\odot` is the elementwise product):

.. math::  \delta_L = w \odot f'(z_L), \quad
           \delta_{l-1} = (\delta_l W_l) \odot f'(z_{l-1}), \quad
           \nabla_x E = \delta_1 W_1 .

This is the same arithmetic autograd would do, minus the graph bookkeeping and
minus the head's ``(B, 1) x (1, H)`` product (``δ_L`` is a broadcast), and it
lets Langevin-type samplers take a step without building a graph.

Speed notes (CPU, float32; measured with one thread on an AMD EPYC, Zen 5):

* Large products go to oneDNN (``torch.ops.mkldnn._linear_pointwise``, the
  kernel PyTorch's own compiler emits for ``nn.Linear`` on CPU) instead of
  ``addmm``/``mm``, which call MKL. Here MKL ran at ~105 GFLOP/s whatever
  ``MKL_ENABLE_INSTRUCTIONS`` said (its AVX2 rate: it does not use AVX-512 on
  this CPU) while oneDNN's AVX-512 kernels reached ~230 GFLOP/s: a
  ``1024 x 128 x 128`` product took 150 µs instead of 317 µs. Same products,
  same rounding up to the summation order. Small or skinny products stay on
  ``addmm`` (a oneDNN call costs ~10 µs), as does everything off the CPU, in
  float64, under ``torch.compile`` and with ``torch.backends.mkldnn.enabled``
  off. On a CPU without AVX-512 MKL is the faster route (oneDNN ran at 0.74x
  of it on an AVX2-only EPYC), and every product stays on ``addmm``/``mm``.
* The input-gradient product ``(B, H) x (H, D)`` with a tiny ``D`` is handed a
  column-major copy of the weight: MKL's row-major path is 2-4x slower there.
* The differentiable :meth:`MLPEnergy.forward` (training: CD, score
  matching) uses the same two tricks through
  :func:`ebms.nets._linear.linear`, an autograd function whose backward is
  again made of fast products, so second derivatives use them too. Its
  Python overhead (~45 µs per layer and pass) moves the oneDNN crossover to
  ~5M multiply-adds per product. Score-matching training steps (DSM, SSM)
  of the ``D-128-128-1`` benchmark MLP ran ~1.2-1.3x faster than with
  ``nn.Linear`` (``benchmarks/score_matching.py``, CPU time).

The oneDNN kernel and the fused activation derivatives are private PyTorch
APIs: each is self-checked once at import against the public route and
switched off when absent or different, and ``EBMS_DISABLE_FAST_PATHS=1``
switches them off (:mod:`ebms.nets._fastpaths`). Then every product is
``addmm``/``mm`` and every derivative a closed form in public operations.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import cast

import torch
from torch import Tensor, nn
from torch.nn.utils.parametrizations import spectral_norm as _spectral_norm

from ebms._checks import check_bool
from ebms._precision import autocast_dtype
from ebms.energy import Energy
from ebms.nets._activations import Activation, resolve_activation
from ebms.nets._linear import _ONEDNN_LINEAR, linear
from ebms.nets._linear import onednn_pays as _onednn_pays
from ebms.nets._linear import onednn_usable as _onednn_usable

__all__ = ["MLPEnergy"]

_NARROW = 8  # input widths that take the column-major gradient product on CPU (see _times_weight)


def _affine(h: Tensor, w: Tensor, b: Tensor, onednn: bool) -> Tensor:
    """``h @ w.T + b`` for ``h: (B, K)``, ``w: (N, K)``, ``b: (N,)`` -> ``(B, N)``."""
    if _ONEDNN_LINEAR is not None and _onednn_pays(onednn, w, h.shape[0]):
        return _ONEDNN_LINEAR(h, w, b, "none", [], "")
    return torch.addmm(b, h, w.t())


def _times_weight(delta: Tensor, w: Tensor, onednn: bool) -> Tensor:
    """``delta @ w`` for ``delta: (B, N)``, ``w: (N, K)`` -> ``(B, K)`` (a backward product)."""
    if _ONEDNN_LINEAR is not None and _onednn_pays(onednn, w, delta.shape[0]):
        return _ONEDNN_LINEAR(delta, w.t(), None, "none", [], "")
    if 1 < w.shape[1] <= _NARROW and delta.device.type == "cpu":
        # MKL takes a slow path for (B, N) @ (N, K) with a row-major (N, K)
        # operand and tiny K; a column-major copy of the (small) weight is
        # 2-4x faster (measured for K = 2..8).
        w = w.t().contiguous().t()
    return torch.mm(delta, w)


def _plain_linear(layer: nn.Module) -> bool:
    """``layer(h)`` is exactly ``F.linear(h, layer.weight, layer.bias)``: an ``nn.Linear`` forward, no hooks.

    (A spectral-norm layer qualifies: its weight is computed on attribute read.)
    """
    g = nn.modules.module
    return type(layer).forward is nn.Linear.forward and not (
        layer._forward_hooks or layer._forward_pre_hooks or layer._backward_hooks or layer._backward_pre_hooks
        or g._global_forward_hooks or g._global_forward_pre_hooks
        or g._global_backward_hooks or g._global_backward_pre_hooks
    )


def _event_shape(in_dim: int | Sequence[int]) -> tuple[int, ...]:
    shape = (in_dim,) if isinstance(in_dim, int) and not isinstance(in_dim, bool) else in_dim
    try:
        shape = tuple(shape)  # type: ignore[arg-type]
    except TypeError:
        shape = ()
    if not shape or not all(isinstance(s, int) and not isinstance(s, bool) and s >= 1 for s in shape):
        raise ValueError(f"in_dim: expected a positive int or a tuple of positive ints (event shape); got {in_dim!r}")
    return shape


def _hidden(hidden: Sequence[int]) -> tuple[int, ...]:
    try:
        sizes = tuple(hidden)
    except TypeError:
        sizes = ()
    if not sizes or not all(isinstance(h, int) and not isinstance(h, bool) and h >= 1 for h in sizes):
        raise ValueError(f"hidden: expected a non-empty sequence of positive ints; got {hidden!r}")
    return sizes


class MLPEnergy(Energy):
    r"""MLP energy :math:`E(x) = w^\top f(W_L \cdots f(W_1 x + b_1) \cdots + b_L) + c`.

    Inputs of any event shape are flattened, so ``MLPEnergy((1, 28, 28))``
    takes ``(B, 1, 28, 28)`` images.

    Args:
        in_dim: ``D`` or the event shape of one input.
        hidden: widths ``(H_1, ..., H_L)`` of the hidden layers (at least one).
        activation: an :class:`~ebms.nets._activations.Activation` or one of
            its names (``'silu'``/``'swish'``, ``'elu'``, ``'gelu'``,
            ``'leaky_relu'``, ``'relu'``, ``'sigmoid'``, ``'softplus'``, ``'tanh'``).
            Smooth ones suit gradient samplers.
        spectral_norm: wrap every linear layer in spectral normalisation
            (Miyato et al., 2018, "Spectral Normalization for Generative
            Adversarial Networks"), which keeps each weight's largest singular
            value near 1 and so bounds the Lipschitz constant of ``E`` by
            that of ``f`` to the power ``L`` — a common guard against energies
            that blow up during contrastive training.

    Shapes: ``x: (B, *event_shape)`` → ``(B,)``.

    Cost per :meth:`energy_and_grad`: ``2B(D H_1 + Σ H_{l-1} H_l + H_L)``
    FLOPs forward plus ``2B(D H_1 + Σ H_{l-1} H_l)`` backward (the head's
    gradient is a broadcast, not a product), one fused elementwise pass per
    layer each way; no autograd graph.

    Example:
        >>> import torch
        >>> from ebms.nets import MLPEnergy
        >>> net = MLPEnergy(2, hidden=(64, 64), activation="silu")
        >>> e, g = net.energy_and_grad(torch.randn(5, 2))
        >>> e.shape, g.shape
        (torch.Size([5]), torch.Size([5, 2]))
    """

    def __init__(
        self,
        in_dim: int | Sequence[int],
        hidden: Sequence[int] = (128, 128),
        *,
        activation: str | Activation = "silu",
        spectral_norm: bool = False,
    ) -> None:
        super().__init__()
        self.event_shape = _event_shape(in_dim)
        self.hidden = _hidden(hidden)
        self.activation = resolve_activation(activation)
        check_bool(spectral_norm, "spectral_norm")
        dim = 1
        for s in self.event_shape:
            dim *= s
        self.in_features = dim
        widths = (dim, *self.hidden)
        wrap = _spectral_norm if spectral_norm else (lambda m: m)
        self.layers = nn.ModuleList([wrap(nn.Linear(a, b)) for a, b in zip(widths[:-1], widths[1:])])
        self.head = wrap(nn.Linear(widths[-1], 1))

    def _flatten(self, x: Tensor) -> Tensor:
        if not isinstance(x, Tensor):
            raise TypeError(f"x: expected a torch.Tensor; got {type(x).__name__}")
        if not x.is_floating_point():
            raise TypeError(f"x: expected a floating-point tensor; got dtype {x.dtype}")
        if x.shape[1:] != self.event_shape or x.dim() != len(self.event_shape) + 1:
            shown = ", ".join(map(str, self.event_shape))
            raise ValueError(f"x: expected shape (B, {shown}); got {tuple(x.shape)}")
        if len(self.event_shape) == 1:  # already (B, D): skip a no-op reshape (one dispatch less)
            return x
        return x.reshape(x.shape[0], self.in_features)

    def forward(self, x: Tensor) -> Tensor:
        """Energies ``(B,)`` of ``x: (B, *event_shape)``, differentiable to any order.

        The hidden layers go through :func:`ebms.nets._linear.linear` (oneDNN
        and layout-aware products on CPU, with their own double backward);
        a layer carrying module hooks, or whose class overrides
        ``nn.Linear.forward``, is called as a module instead.
        """
        h = self._flatten(x)
        f = self.activation.fn
        for layer in self.layers:
            if _plain_linear(layer):  # the same affine map as layer(h), with faster CPU products
                h = f(linear(h, cast(Tensor, layer.weight), cast(Tensor, layer.bias)))
            else:
                h = f(layer(h))
        return self.head(h).squeeze(-1)

    def energy_and_grad(self, x: Tensor) -> tuple[Tensor, Tensor]:
        """Energy ``(B,)`` and analytic :math:`\\nabla_x E` ``(B, *event_shape)``, both detached.

        One forward pass keeps the pre-activations; the backward pass applies
        the activation's closed-form derivative layer by layer. Runs under
        ``torch.no_grad()`` and never touches parameter ``.grad`` fields.

        Under ``torch.autocast`` (e.g. :func:`ebms.energy.mixed_precision`) the
        hidden layers' products and activations and the whole backward pass run
        in the autocast dtype (bfloat16), as autograd under autocast would run
        them; the head's dot product is taken in ``x``'s dtype, and the energy
        and gradient are returned in it.
        """
        low = autocast_dtype(x.device.type)
        if low is not None and x.is_floating_point() and low != x.dtype:
            return self._energy_and_grad_in(x, low)
        h = self._flatten(x)
        vjp, f = self.activation.vjp_now(), self.activation.fn
        onednn = _onednn_usable(h)
        with torch.no_grad():
            weights: list[Tensor] = []
            saved: list[tuple[Tensor, Tensor]] = []
            for layer in self.layers:
                w = cast(Tensor, layer.weight)  # read once: a spectral-norm weight is recomputed per read
                z = _affine(h, w, cast(Tensor, layer.bias), onednn)
                h = f(z)
                weights.append(w)
                saved.append((z, h))
            w_out = cast(Tensor, self.head.weight)  # (1, H_L)
            e = torch.addmv(cast(Tensor, self.head.bias), h, w_out[0])
            delta = w_out.expand_as(h)  # dE/dh_L, the same row for every sample
            for w, (z, a) in zip(reversed(weights[1:]), reversed(saved[1:])):
                delta = _times_weight(vjp(delta, z, a), w, onednn)
            delta = vjp(delta, *saved[0])  # (B, H_1)
            grad = _times_weight(delta, weights[0], onednn)  # (B, D)
        return e, grad if len(self.event_shape) == 1 else grad.view(x.shape)

    def _energy_and_grad_in(self, x: Tensor, dtype: torch.dtype) -> tuple[Tensor, Tensor]:
        """:meth:`energy_and_grad` with every product and activation in ``dtype`` (parameters cast once per
        call, autocast off inside), returned in ``x``'s dtype."""
        h = self._flatten(x)
        vjp, f = self.activation.vjp_now(), self.activation.fn
        with torch.no_grad(), torch.autocast(x.device.type, enabled=False):
            h = h.to(dtype)
            weights: list[Tensor] = []
            saved: list[tuple[Tensor, Tensor]] = []
            for layer in self.layers:
                w = cast(Tensor, layer.weight).to(dtype)
                z = torch.addmm(cast(Tensor, layer.bias).to(dtype), h, w.t())
                h = f(z)
                weights.append(w)
                saved.append((z, h))
            w_head = cast(Tensor, self.head.weight)
            # the head (one dot product per sample) in x's dtype: energies as exact as h allows
            e = torch.addmv(cast(Tensor, self.head.bias).to(x.dtype), h.to(x.dtype), w_head[0].to(x.dtype))
            delta = w_head.to(dtype).expand_as(h)
            for w, (z, a) in zip(reversed(weights[1:]), reversed(saved[1:])):
                delta = torch.mm(vjp(delta, z, a), w)
            grad = torch.mm(vjp(delta, *saved[0]), weights[0])
        grad = grad.to(x.dtype)
        return e, grad if len(self.event_shape) == 1 else grad.view(x.shape)

    def extra_repr(self) -> str:
        return f"event_shape={self.event_shape}, hidden={self.hidden}, activation={self.activation.name!r}"
