r"""Affine map :math:`y = x W^\top + b` with faster CPU products, differentiable to any order.

``nn.Linear`` on the CPU computes its forward and both backward products with
MKL (``addmm``/``mm``). Two things leave speed on the table there (one thread
of the AMD Zen 5 CPU this package is tuned on, float32):

* MKL runs its AVX2 kernels (~105 GFLOP/s) while oneDNN's AVX-512 kernels,
  reached through ``torch.ops.mkldnn._linear_pointwise``, run at
  ~230 GFLOP/s: a ``1024 x 128 x 128`` product takes ~150 µs, not ~330 µs.
* Products whose output is only a few columns wide (the backward products
  of a first layer fed 2-d points) take a slow MKL path unless the operands
  are laid out for it: ``(1024, 128) @ (128, 2)`` takes ~95 µs with a
  row-major right factor and ~22 µs with a column-major copy, and the weight
  gradient ``(128, 1024) @ (1024, 2)`` ~110 µs, or ~14 µs computed as the
  transpose of ``(2, 1024) @ (1024, 128)``.

:func:`linear` is a drop-in for :func:`torch.nn.functional.linear` that uses
both, and :class:`CPULinear` gives the result derivatives. For
``x: (B, K)``, ``W: (N, K)``, ``b: (N,)`` and ``G = dL/dy: (B, N)``:

.. math::  \frac{\partial L}{\partial x} = G W, \qquad
           \frac{\partial L}{\partial W} = G^\top x, \qquad
           \frac{\partial L}{\partial b} = \textstyle\sum_b G_b .

Both products are again affine maps without bias
(:math:`G W = G\,(W^\top)^\top`, :math:`G^\top x = G^\top (x^\top)^\top`), computed
by :func:`_product`, which is itself differentiable (it calls
:class:`CPULinear` for oneDNN products and plain torch ops otherwise): with
``create_graph=True`` the backward products are recorded like any other, so
second derivatives (score matching, gradient penalties) use the same fast
products. Gradients the running backward pass does not need (the weight's
under ``torch.autograd.grad(E, x)``) are not computed.

When: eager mode, 2-d float32 CPU tensors, ``torch.backends.mkldnn.enabled``,
no CPU autocast and no ``torch.func`` transform running. Then oneDNN is used
for products with both weight sides at least ``_MIN_WIDTH`` wide and at
least ``_MIN_MACS`` multiply-adds (no gradient needed) or
``_GRAD_MIN_MACS`` (gradient needed: the Python autograd function costs
~15 µs forward and ~30 µs backward, measured crossover 4-5M), and the
layout-aware MKL backward for inputs at most ``_NARROW`` wide feeding at
least ``_NARROW_MIN_ELEMS`` outputs (``B x N``). Everything else goes to
:func:`torch.nn.functional.linear` unchanged. Forward-mode derivatives
(``torch.autograd.forward_ad``) are supported by :meth:`CPULinear.jvp`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor

__all__ = ["CPULinear", "linear", "onednn_pays", "onednn_usable"]

_MIN_WIDTH = 8  # oneDNN only when both sides of the weight are at least this wide ...
_MIN_MACS = 1 << 21  # ... and the product has at least this many multiply-adds (~2M) ...
_GRAD_MIN_MACS = 5 << 20  # ... or this many (~5M) when autograd has to record it
_NARROW = 8  # inputs at most this wide get the layout-aware MKL backward products ...
_NARROW_MIN_ELEMS = 1 << 17  # ... when the layer has at least this many outputs (B x N)

_ONEDNN_LINEAR: Callable[..., Tensor] | None
try:  # present when PyTorch is built with oneDNN (``torch.backends.mkldnn``)
    _ONEDNN_LINEAR = torch.ops.mkldnn._linear_pointwise if torch.backends.mkldnn.is_available() else None
except (AttributeError, RuntimeError):
    _ONEDNN_LINEAR = None


def _functorch_active() -> bool:
    """Whether a ``torch.func`` transform (grad, vmap, jacrev, ...) is running."""
    try:
        return torch._C._functorch.peek_interpreter_stack() is not None
    except AttributeError:  # pragma: no cover - a PyTorch without the hook: stay on the plain path
        return True


def onednn_usable(x: Tensor) -> bool:
    """Whether products on ``x`` may leave MKL: eager float32 CPU, oneDNN on, no autocast or ``torch.func``."""
    return bool(
        _ONEDNN_LINEAR is not None
        and x.dtype == torch.float32
        and x.device.type == "cpu"
        and torch.backends.mkldnn.enabled
        and not torch.compiler.is_compiling()
        and not torch.is_autocast_enabled("cpu")
        and not _functorch_active()
    )


def onednn_pays(onednn: bool, w: Tensor, batch: int, *, min_macs: int = _MIN_MACS) -> bool:
    """``onednn`` and the product with ``w: (N, K)`` over ``batch`` rows is big enough for oneDNN."""
    n, k = w.shape
    return (
        onednn
        and w.dtype == torch.float32
        and w.device.type == "cpu"
        and min(n, k) >= _MIN_WIDTH
        and batch * n * k >= min_macs
    )


def _needs_grad(*ts: Tensor | None) -> bool:
    return torch.is_grad_enabled() and any(t is not None and t.requires_grad for t in ts)


def _as_edge(t: Tensor) -> Tensor:
    """A leaf that requires grad as a view of itself: a graph node :func:`_will_run` can ask about."""
    return t.view_as(t) if t.requires_grad and t.is_leaf else t


def _apply(x: Tensor, w: Tensor, b: Tensor | None) -> Tensor:
    return CPULinear.apply(_as_edge(x), _as_edge(w), None if b is None else _as_edge(b))


def _onednn(a: Tensor, b: Tensor, bias: Tensor | None) -> Tensor:
    """The oneDNN kernel (no autograd); it runs faster on a row-major ``a``."""
    assert _ONEDNN_LINEAR is not None
    return _ONEDNN_LINEAR(a.contiguous(), b, bias, "none", [], "")


def _product(a: Tensor, b: Tensor, bias: Tensor | None = None) -> Tensor:
    """``a @ b.T (+ bias)`` for float32 CPU ``a: (M, K)``, ``b: (N, K)``; differentiable.

    oneDNN when it pays (through :class:`CPULinear` when autograd records),
    else MKL with operand layouts that avoid its slow narrow-output path.
    """
    m = a.shape[0]
    n, k = b.shape
    grad = _needs_grad(a, b, bias)
    if _ONEDNN_LINEAR is not None and onednn_pays(True, b, m, min_macs=_GRAD_MIN_MACS if grad else _MIN_MACS):
        return _apply(a, b, bias) if grad else _onednn(a, b, bias)
    if n <= _NARROW and a.stride(1) != 1:
        # narrow output, column-major ``a`` (a weight gradient G^T x): the transposed problem
        # (N, K) @ (K, M) takes MKL's fast path; the (M, N) result is a transposed view
        out = torch.mm(b, a.t()).t()
        return out if bias is None else out + bias
    if n <= _NARROW and k > 1:
        b = b.contiguous()  # row-major (N, K), so b.T is column-major: MKL's fast narrow path
    return torch.mm(a, b.t()) if bias is None else torch.addmm(bias, a, b.t())


def _will_run(node: Any) -> bool:
    """Whether the running backward pass needs the gradient that flows into ``node``.

    ``needs_input_grad`` only says that an input requires grad; under
    ``torch.autograd.grad(E, x)`` the weight's gradient is not wanted, and
    computing it would cost a full product (and, with ``create_graph=True``,
    graph). The engine can tell, except for leaf tensors under
    ``autograd.grad``, which is why leaves come in as views (:func:`_as_edge`).
    """
    if node is None:
        return False
    try:
        return bool(torch._C._will_engine_execute_node(node))
    except (AttributeError, RuntimeError):  # cannot tell: compute it
        return True


class CPULinear(torch.autograd.Function):
    r"""``x W^T + b`` by :func:`_product`, with a backward made of :func:`_product` calls.

    Shapes: ``x: (B, K)``, ``w: (N, K)``, ``b: (N,)`` or ``None`` -> ``(B, N)``;
    float32 CPU tensors (:func:`linear` decides when to use it).

    Backward: ``grad_x = G W``, ``grad_w = G^T x``, ``grad_b = sum_b G``,
    each differentiable again (double backward, and so on).
    """

    @staticmethod
    def forward(x: Tensor, w: Tensor, b: Tensor | None) -> Tensor:  # type: ignore[override]
        return _product(x, w, b)  # autograd is off in here: a plain kernel call

    @staticmethod
    def setup_context(ctx: Any, inputs: tuple[Tensor, Tensor, Tensor | None], output: Tensor) -> None:
        x, w, b = inputs
        ctx.save_for_backward(x, w)
        ctx.save_for_forward(x, w)
        ctx.has_bias = b is not None

    @staticmethod
    def backward(ctx: Any, grad: Tensor) -> tuple[Tensor | None, Tensor | None, Tensor | None]:  # type: ignore[override]
        x, w = ctx.saved_tensors
        edges = [e for e, _ in ctx.next_functions] + [None]  # a ``None`` bias has no edge
        need_x, need_w, need_b = (n and _will_run(e) for n, e in zip(ctx.needs_input_grad, edges))
        grad_x = _product(grad, w.t()) if need_x else None  # G W: (B, N) @ (N, K)
        grad_w = _product(grad.t(), x.t()) if need_w else None  # G^T x: (N, B) @ (B, K)
        grad_b = grad.sum(0) if ctx.has_bias and need_b else None
        return grad_x, grad_w, grad_b

    @staticmethod
    def jvp(ctx: Any, dx: Tensor | None, dw: Tensor | None, db: Tensor | None) -> Tensor:  # type: ignore[override]
        x, w = ctx.saved_tensors
        out = F.linear(dx, w) if dx is not None else x.new_zeros(x.shape[0], w.shape[0])
        if dw is not None:
            out = out + F.linear(x, dw)
        if db is not None:
            out = out + db
        return out


def linear(x: Tensor, w: Tensor, b: Tensor | None = None) -> Tensor:
    r"""``x W^T + b`` like :func:`torch.nn.functional.linear`, with faster CPU products where they pay.

    Args:
        x: ``(B, K)`` inputs (other shapes go to ``F.linear``).
        w: ``(N, K)`` weight.
        b: ``(N,)`` bias or ``None``.

    Returns:
        ``(B, N)``, differentiable in all three arguments to any order; equal
        to ``F.linear(x, w, b)`` up to float32 summation order.
    """
    eligible = (
        x.dim() == 2
        and w.dim() == 2
        and x.shape[1] == w.shape[1]
        and w.dtype == torch.float32
        and w.device.type == "cpu"
        and (b is None or (b.dtype == torch.float32 and b.device.type == "cpu" and b.shape == w.shape[:1]))
        and onednn_usable(x)
    )
    if not eligible:
        return F.linear(x, w, b)  # which also reports bad shapes and dtypes
    grad = _needs_grad(x, w, b)
    m = x.shape[0]
    n, k = w.shape
    if onednn_pays(True, w, m, min_macs=_GRAD_MIN_MACS if grad else _MIN_MACS):
        return _apply(x, w, b) if grad else _onednn(x, w, b)
    if grad and k <= _NARROW < n and m * n >= _NARROW_MIN_ELEMS:
        return _apply(x, w, b)  # a narrow input: its backward products have narrow outputs
    return F.linear(x, w, b)
