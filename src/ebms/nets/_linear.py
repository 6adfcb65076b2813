r"""Affine map :math:`y = x W^\top + b` with oneDNN products on CPU, differentiable to any order.

PyTorch's ``nn.Linear`` on CPU calls MKL (``addmm``). On the AMD Zen 5 CPU
this package is tuned on, MKL runs its AVX2 kernels (~105 GFLOP/s on one
thread) while oneDNN's AVX-512 kernels, reached through
``torch.ops.mkldnn._linear_pointwise``, run at ~230 GFLOP/s. That operator
has no autograd formula, so :class:`OneDNNLinear` supplies one.

Derivatives, for ``x: (B, K)``, ``W: (N, K)``, ``b: (N,)`` and an incoming
gradient ``G = dL/dy: (B, N)``:

.. math::  \frac{\partial L}{\partial x} = G W, \qquad
           \frac{\partial L}{\partial W} = G^\top x, \qquad
           \frac{\partial L}{\partial b} = \textstyle\sum_b G_b .

Each of the two products is itself an affine map without bias
(``G W = G (W^\top)^\top`` and ``G^\top x = G^\top (x^\top)^\top``), so the
backward pass calls :func:`linear` again: with ``create_graph=True`` the
products it makes are recorded by autograd like any other, and second
derivatives (score matching, gradient penalties) follow from the same rule.
The bias term is a plain differentiable ``sum``.

When oneDNN is used (:func:`onednn_pays`): eager mode, float32 on the CPU,
``torch.backends.mkldnn.enabled``, no autocast and no ``torch.func``
transform active, a 2-d input, both sides of the weight at least
``_MIN_WIDTH`` wide and at least ``_MIN_MACS`` multiply-adds (below that
oneDNN's per-call cost, ~10 µs, and the autograd-function overhead eat the
gain). Everything else goes to :func:`torch.nn.functional.linear`
unchanged. Forward-mode derivatives (``torch.autograd.forward_ad``) are
supported through :meth:`OneDNNLinear.jvp`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor

__all__ = ["OneDNNLinear", "linear", "onednn_pays", "onednn_usable"]

_MIN_WIDTH = 8  # oneDNN only when both sides of the weight are at least this wide ...
_MIN_MACS = 1 << 21  # ... and the product has at least this many multiply-adds (~2M)

_ONEDNN_LINEAR: Callable[..., Tensor] | None
try:  # present when PyTorch is built with oneDNN (``torch.backends.mkldnn``)
    _ONEDNN_LINEAR = torch.ops.mkldnn._linear_pointwise if torch.backends.mkldnn.is_available() else None
except (AttributeError, RuntimeError):
    _ONEDNN_LINEAR = None


def _functorch_active() -> bool:
    """Whether a ``torch.func`` transform (grad, vmap, jacrev, ...) is running."""
    try:
        return torch._C._functorch.peek_interpreter_stack() is not None
    except AttributeError:  # pragma: no cover - older/newer PyTorch without the hook: stay safe
        return True


def onednn_usable(x: Tensor) -> bool:
    """Whether products on ``x`` may go to oneDNN: eager float32 CPU, oneDNN enabled, no autocast."""
    return bool(
        _ONEDNN_LINEAR is not None
        and x.dtype == torch.float32
        and x.device.type == "cpu"
        and torch.backends.mkldnn.enabled
        and not torch.compiler.is_compiling()
        and not torch.is_autocast_enabled("cpu")
        and not _functorch_active()
    )


def onednn_pays(onednn: bool, w: Tensor, batch: int) -> bool:
    """``onednn`` and the product with ``w: (N, K)`` over ``batch`` rows is big enough for oneDNN."""
    n, k = w.shape
    return (
        onednn
        and w.dtype == torch.float32
        and w.device.type == "cpu"
        and min(n, k) >= _MIN_WIDTH
        and batch * n * k >= _MIN_MACS
    )


def _will_run(node: Any) -> bool:
    """Whether the running backward pass needs the gradient that flows into ``node``.

    ``needs_input_grad`` only says that an input requires grad; under
    ``torch.autograd.grad(E, x)`` the weight's gradient is not wanted, and
    computing it would cost a full product (and, with ``create_graph=True``,
    a piece of graph). The engine can tell, except for leaf tensors under
    ``autograd.grad``: :func:`linear` hands leaves over as views for that reason.
    """
    if node is None:
        return False
    try:
        return bool(torch._C._will_engine_execute_node(node))
    except (AttributeError, RuntimeError):  # cannot tell: compute it
        return True


def _as_edge(t: Tensor) -> Tensor:
    """A leaf that requires grad as a view of itself (a graph node the engine can be asked about)."""
    return t.view_as(t) if t.requires_grad and t.is_leaf else t


def _routes(x: Tensor, w: Tensor, b: Tensor | None) -> bool:
    if x.dim() != 2 or w.dim() != 2 or x.shape[1] != w.shape[1]:
        return False  # F.linear handles (and reports) everything else
    if b is not None and (b.dtype != torch.float32 or b.device.type != "cpu" or b.shape != (w.shape[0],)):
        return False
    return onednn_pays(onednn_usable(x), w, x.shape[0])


class OneDNNLinear(torch.autograd.Function):
    r"""``x W^T + b`` by oneDNN; backward by :func:`linear` (so it is differentiable again).

    Shapes: ``x: (B, K)``, ``w: (N, K)``, ``b: (N,)`` or ``None`` -> ``(B, N)``.
    Call it through :func:`linear`, which checks that oneDNN applies; the
    forward here assumes it (float32 CPU tensors).
    """

    @staticmethod
    def forward(x: Tensor, w: Tensor, b: Tensor | None) -> Tensor:  # type: ignore[override]
        assert _ONEDNN_LINEAR is not None
        return _ONEDNN_LINEAR(x, w, b, "none", [], "")

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
        grad_x = linear(grad, w.t()) if need_x else None  # G W: (B, N) x (N, K)
        # G^T x: (N, B) x (B, K); oneDNN prefers the transposed gradient laid out row by row
        grad_w = linear(grad.t().contiguous(), x.t()) if need_w else None
        grad_b = grad.sum(0) if ctx.has_bias and need_b else None
        return grad_x, grad_w, grad_b

    @staticmethod
    def jvp(ctx: Any, dx: Tensor | None, dw: Tensor | None, db: Tensor | None) -> Tensor:  # type: ignore[override]
        x, w = ctx.saved_tensors
        out = F.linear(dx, w) if dx is not None else torch.zeros(x.shape[0], w.shape[0], dtype=x.dtype)
        if dw is not None:
            out = out + F.linear(x, dw)
        if db is not None:
            out = out + db
        return out


def linear(x: Tensor, w: Tensor, b: Tensor | None = None) -> Tensor:
    r"""``x W^T + b`` like :func:`torch.nn.functional.linear`, through oneDNN when it pays.

    Args:
        x: ``(B, K)`` inputs (any shape is accepted; only 2-d inputs use oneDNN).
        w: ``(N, K)`` weight.
        b: ``(N,)`` bias or ``None``.

    Returns:
        ``(B, N)``, differentiable in all three arguments to any order.
    """
    if not _routes(x, w, b):
        return F.linear(x, w, b)
    if torch.is_grad_enabled() and (x.requires_grad or w.requires_grad or (b is not None and b.requires_grad)):
        return OneDNNLinear.apply(_as_edge(x), _as_edge(w), None if b is None else _as_edge(b))
    assert _ONEDNN_LINEAR is not None
    return _ONEDNN_LINEAR(x, w, b, "none", [], "")
