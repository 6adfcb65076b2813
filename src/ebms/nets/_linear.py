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
no CPU autocast, no ``torch.func`` transform running, and a CPU with AVX-512
(on an AVX2-only CPU MKL is the faster route: :func:`_onednn_faster`). Then oneDNN is used
for products with both weight sides at least ``_MIN_WIDTH`` wide and at
least ``_MIN_MACS`` multiply-adds (no gradient needed) or
``_GRAD_MIN_MACS`` (gradient needed: the Python autograd function costs
~15 µs forward and ~30 µs backward, measured crossover 4-5M), and the
layout-aware MKL backward for inputs at most ``_NARROW`` wide feeding at
least ``_NARROW_MIN_ELEMS`` outputs (``B x N``). Everything else goes to
:func:`torch.nn.functional.linear` unchanged. Forward-mode derivatives
(``torch.autograd.forward_ad``) are supported by :meth:`CPULinear.jvp`.

Private APIs and their fallbacks (see :mod:`ebms.nets._fastpaths`): the
oneDNN kernel, the ``torch.func`` probe and the autograd-engine probe are
each looked up once at import and checked on a tiny input against
:func:`torch.nn.functional.linear` and autograd; any that is missing or
disagrees is switched off (``_ONEDNN_LINEAR`` becomes ``None``, the engine
probe answers "compute it"), and ``EBMS_DISABLE_FAST_PATHS=1`` switches all
of them off. Tensors that are not on the CPU never reach them.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor

from ebms.nets import _fastpaths

__all__ = ["CPULinear", "linear", "onednn_linear", "onednn_pays", "onednn_usable"]

_MIN_WIDTH = 8  # oneDNN only when both sides of the weight are at least this wide ...
_MIN_MACS = 1 << 21  # ... and the product has at least this many multiply-adds (~2M) ...
_GRAD_MIN_MACS = 5 << 20  # ... or this many (~5M) when autograd has to record it
_NARROW = 8  # inputs at most this wide get the layout-aware MKL backward products ...
_NARROW_MIN_ELEMS = 1 << 17  # ... when the layer has at least this many outputs (B x N)

# float32 products of up to a few dozen terms in another summation order: round-off ~1e-6
_CHECK_RTOL, _CHECK_ATOL = 1e-4, 1e-5


def _lookup_peek() -> Callable[[], Any]:
    return torch._C._functorch.peek_interpreter_stack


def _lookup_onednn() -> Callable[..., Tensor]:
    if not torch.backends.mkldnn.is_available():
        raise RuntimeError("PyTorch built without oneDNN (torch.backends.mkldnn.is_available() is False)")
    return torch.ops.mkldnn._linear_pointwise


def _lookup_engine() -> Callable[[Any], bool]:
    return torch._C._will_engine_execute_node


def _probe_functorch(lookup: Callable[[], Callable[[], Any]] = _lookup_peek) -> tuple[Callable[[], Any] | None, str]:
    """``peek_interpreter_stack`` if it exists and tells transforms apart, with the reason if not."""
    try:
        peek = lookup()
        outside = peek() is None
        seen: list[bool] = []

        def probe(t: Tensor) -> Tensor:
            seen.append(peek() is not None)
            return t

        # vjp runs f at a grad level as grad and jacrev do; torch.func.grad itself would import
        # torch._dynamo (~140 MB resident with a CUDA build of torch) in every process that imports ebms.nets
        torch.func.vmap(probe)(torch.zeros(2))
        torch.func.vjp(probe, torch.zeros(2))
    except Exception as exc:  # noqa: BLE001 - any failure means: do not rely on it
        return None, f"peek_interpreter_stack unusable: {type(exc).__name__}: {exc}"
    if not (outside and seen and all(seen)):
        return None, "peek_interpreter_stack does not tell torch.func transforms apart"
    return peek, ""


def _probe_onednn(
    functorch_ok: bool, lookup: Callable[[], Callable[..., Tensor]] = _lookup_onednn
) -> tuple[Callable[..., Tensor] | None, str]:
    """The oneDNN linear kernel if present and equal to ``F.linear`` on tiny inputs, with the reason if not."""
    if not functorch_ok:
        return None, "needs the functorch probe (to stay off inside torch.func transforms)"
    try:
        kernel = lookup()
        gen = torch.Generator().manual_seed(0)
        a = torch.randn(5, 6, generator=gen)
        w = torch.randn(8, 6, generator=gen)
        b = torch.randn(8, generator=gen)
        w2 = torch.randn(6, 8, generator=gen)
        cases = (  # (args, reference): the weight as stored, and a transposed (column-major) view
            ((a, w, b), F.linear(a, w, b)),
            ((a, w2.t(), None), a @ w2),
        )
        for args, ref in cases:
            out = kernel(*args, "none", [], "")
            if not (
                isinstance(out, Tensor)
                and out.shape == ref.shape
                and out.dtype == ref.dtype
                and torch.allclose(out, ref, rtol=_CHECK_RTOL, atol=_CHECK_ATOL)
            ):
                return None, "mkldnn._linear_pointwise disagrees with F.linear on a tiny input"
    except Exception as exc:  # noqa: BLE001 - absent op, changed signature, unsupported CPU, ...
        return None, f"mkldnn._linear_pointwise unusable: {type(exc).__name__}: {exc}"
    return kernel, ""


# Decided once. A path switched off by the environment is not even probed; probes run in
# grad mode so that the answer does not depend on the mode this module is imported under.
with torch.inference_mode(False), torch.enable_grad():
    _FUNCTORCH_PEEK, _reason = _fastpaths.decide("functorch_probe", _probe_functorch)
    _fastpaths.record("functorch_probe", _reason)
    _ONEDNN_LINEAR: Callable[..., Tensor] | None
    _ONEDNN_LINEAR, _reason = _fastpaths.decide("onednn_linear", lambda: _probe_onednn(_FUNCTORCH_PEEK is not None))
if not _fastpaths.record("onednn_linear", _reason):
    _ONEDNN_LINEAR = None


def _onednn_faster(capability: str) -> bool:
    """Whether oneDNN's float32 linear beats MKL on a CPU of this ATen ``capability`` (``"AVX512"``, ``"AVX2"``, ...).

    Measured with one thread on two AMD EPYC machines (``benchmarks/langevin.py``'s ``matmul_routes``): with
    AVX-512, oneDNN ran a ``1024^3`` product at ~230 GFLOP/s against MKL's ~105 (MKL keeps to AVX2 on AMD
    CPUs), 2.2x; on an AVX2-only one, 71 against 95 GFLOP/s (0.74x), and ``MLPEnergy``'s energy-and-gradient
    and training products ran 8-20 % faster without it. So the route is taken only where AVX-512 is.
    """
    return capability.upper().startswith("AVX512")


#: oneDNN is worth calling on this CPU (decided once; tests force it on to check the route on any CPU; a torch
#: without ``get_cpu_capability`` keeps the route as before)
_ONEDNN_FASTER = _onednn_faster(getattr(torch.backends.cpu, "get_cpu_capability", lambda: "AVX512")())


def _functorch_active() -> bool:
    """Whether a ``torch.func`` transform (grad, vmap, jacrev, ...) is running (``True`` when unknown)."""
    return _FUNCTORCH_PEEK is None or _fastpaths.switched_off("functorch_probe") or _FUNCTORCH_PEEK() is not None


def onednn_linear() -> Callable[..., Tensor] | None:
    """The oneDNN linear kernel when the probe found it usable at import, else ``None``.

    Its call is ``kernel(x, w, bias, "none", [], "")`` with ``x: (B, K)``, ``w: (N, K)`` float32.
    Check :func:`onednn_usable` and :func:`onednn_pays` before each use.
    """
    return _ONEDNN_LINEAR


def onednn_usable(x: Tensor) -> bool:
    """Whether products on ``x`` may leave MKL: eager float32 CPU, oneDNN on, no autocast or ``torch.func``."""
    return bool(
        _ONEDNN_LINEAR is not None
        and x.device.type == "cpu"
        and x.dtype == torch.float32
        and torch.backends.mkldnn.enabled
        and _fastpaths.enabled("onednn_linear")
        and not torch.compiler.is_compiling()
        and not torch.is_autocast_enabled("cpu")
        and not _functorch_active()
    )


def onednn_pays(onednn: bool, w: Tensor, batch: int, *, min_macs: int = _MIN_MACS) -> bool:
    """``onednn`` and the product with ``w: (N, K)`` over ``batch`` rows is big enough for oneDNN, on a CPU where
    oneDNN is the faster route (:func:`_onednn_faster`)."""
    n, k = w.shape
    return (
        onednn
        and _ONEDNN_FASTER
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
    if _ENGINE_PROBE is None or _fastpaths.switched_off("engine_probe"):
        return True  # cannot tell (or told not to ask): compute it
    try:
        return bool(_ENGINE_PROBE(node))
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


def _probe_engine(lookup: Callable[[], Callable[[Any], bool]] = _lookup_engine) -> tuple[Callable[[Any], bool] | None, str]:
    """``_will_engine_execute_node`` if present and :class:`CPULinear` gives autograd's gradients with it."""
    global _ENGINE_PROBE
    previous = _ENGINE_PROBE  # the self-check runs CPULinear with the candidate; the choice is restored after
    try:
        probe = _ENGINE_PROBE = lookup()
        gen = torch.Generator().manual_seed(1)
        x, w, b, u = (torch.randn(*s, generator=gen, dtype=torch.float64) for s in ((3, 4), (2, 4), (2,), (3, 2)))
        ref = torch.autograd.functional.vjp(lambda *t: F.linear(*t), (x, w, b), u)[1]
        for wanted in ((0,), (1,), (0, 2), (0, 1, 2)):
            leaves = [t.detach().clone().requires_grad_(True) for t in (x, w, b)]
            y = (_apply(*leaves) * u).sum()
            got = torch.autograd.grad(y, [leaves[i] for i in wanted])
            if not all(g is not None and torch.allclose(g, ref[i]) for g, i in zip(got, wanted)):
                return None, "_will_engine_execute_node gave wrong gradients in a self-check"
        leaves = [t.detach().clone().requires_grad_(True) for t in (x, w, b)]
        (_apply(*leaves) * u).sum().backward()
        if not all(t.grad is not None and torch.allclose(t.grad, r) for t, r in zip(leaves, ref)):
            return None, "_will_engine_execute_node gave wrong gradients in a self-check (backward())"
    except Exception as exc:  # noqa: BLE001 - absent hook, changed behaviour: compute every gradient
        return None, f"_will_engine_execute_node unusable: {type(exc).__name__}: {exc}"
    finally:
        _ENGINE_PROBE = previous
    return probe, ""


_ENGINE_PROBE: Callable[[Any], bool] | None = None
with torch.inference_mode(False), torch.enable_grad():
    _probe, _reason = _fastpaths.decide("engine_probe", _probe_engine)
if _fastpaths.record("engine_probe", _reason):
    _ENGINE_PROBE = _probe
del _probe, _reason
