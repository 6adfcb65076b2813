"""The fast CPU affine map: gradcheck/gradgradcheck, oneDNN and narrow paths against F.linear, routing rules."""

from __future__ import annotations

import copy

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import ebms.nets._linear as lin
from ebms.nets import MLPEnergy
from ebms.objectives import DenoisingScoreMatching, SlicedScoreMatching

F64 = torch.float64
ONEDNN = lin._ONEDNN_LINEAR is not None
needs_onednn = pytest.mark.skipif(not ONEDNN, reason=f"the oneDNN path is off: {lin._fastpaths.fast_paths()['onednn_linear'].reason}")


def _randn(*shape, seed, dtype=torch.float32, grad=False):
    t = torch.randn(*shape, generator=torch.Generator().manual_seed(seed), dtype=dtype)
    return t.requires_grad_(grad)


def _rel_err(a: torch.Tensor | None, b: torch.Tensor | None) -> float:
    """Largest entry error relative to the largest reference entry (0 when both are absent)."""
    if a is None or b is None:
        assert a is None and b is None  # the same gradients are missing (a head bias under DSM)
        return 0.0
    a, b = a.detach(), b.detach()
    return float((a - b).abs().max() / b.abs().max().clamp_min(1e-30))


# float32 products with sums of up to 1024 terms, computed in different orders by oneDNN and MKL:
# round-off of order sqrt(1024) * 6e-8 ~ 2e-6 of the scale; 2e-5 leaves a factor 10 (observed <= 1e-6).
F32_TOL = 2e-5


@pytest.fixture
def onednn_calls(monkeypatch):
    """Counts oneDNN kernel calls made by the module (the real kernel still runs)."""
    calls: list[tuple[int, ...]] = []
    real = lin._ONEDNN_LINEAR

    def counting(*args):
        calls.append(tuple(args[0].shape))
        return real(*args)

    monkeypatch.setattr(lin, "_ONEDNN_LINEAR", counting)
    return calls


# --- the formula, float64 ------------------------------------------------------------------------
@pytest.mark.parametrize("bias", [True, False])
def test_function_passes_gradcheck_and_gradgradcheck_float64(bias):
    # float64 never uses oneDNN: this checks the backward formula and that it is differentiable
    x, w = _randn(6, 5, seed=0, dtype=F64, grad=True), _randn(4, 5, seed=1, dtype=F64, grad=True)
    args = (x, w, _randn(4, seed=2, dtype=F64, grad=True) if bias else None)
    assert torch.autograd.gradcheck(lin.CPULinear.apply, args)
    assert torch.autograd.gradgradcheck(lin.CPULinear.apply, args)


def test_nested_function_passes_gradgradcheck_with_a_float64_stand_in_kernel(monkeypatch):
    # make every product "pay" and give the kernel a float64 stand-in: the backward then calls
    # CPULinear again (create_graph), so gradgradcheck runs through the nested functions
    calls = []

    def kernel(a, b, bias, *rest):
        calls.append(1)
        return F.linear(a, b, bias)

    monkeypatch.setattr(lin, "_ONEDNN_LINEAR", kernel)
    monkeypatch.setattr(lin, "onednn_pays", lambda onednn, w, batch, *, min_macs=0: min(w.shape) >= 2)
    x = _randn(5, 4, seed=0, dtype=F64, grad=True)
    w = _randn(3, 4, seed=1, dtype=F64, grad=True)
    b = _randn(3, seed=2, dtype=F64, grad=True)
    assert torch.autograd.gradcheck(lin.CPULinear.apply, (x, w, b))
    assert torch.autograd.gradgradcheck(lin.CPULinear.apply, (x, w, b))
    assert calls  # the stand-in really ran
    y = lin.CPULinear.apply(x, w, b)
    (gx,) = torch.autograd.grad(y.sum(), x, create_graph=True)
    assert type(gx.grad_fn).__name__ == "CPULinearBackward"  # the nested function recorded itself


def test_forward_mode_jvp_matches_f_linear():
    import torch.autograd.forward_ad as fwad

    x, w, b = _randn(6, 5, seed=0, dtype=F64), _randn(4, 5, seed=1, dtype=F64), _randn(4, seed=2, dtype=F64)
    tx, tw, tb = _randn(6, 5, seed=3, dtype=F64), _randn(4, 5, seed=4, dtype=F64), _randn(4, seed=5, dtype=F64)
    with fwad.dual_level():
        out = lin.CPULinear.apply(fwad.make_dual(x, tx), fwad.make_dual(w, tw), fwad.make_dual(b, tb))
        y, t = fwad.unpack_dual(out)
        ref = F.linear(fwad.make_dual(x, tx), fwad.make_dual(w, tw), fwad.make_dual(b, tb))
        y_ref, t_ref = fwad.unpack_dual(ref)
    torch.testing.assert_close(y, y_ref, rtol=0, atol=1e-12)
    torch.testing.assert_close(t, t_ref, rtol=0, atol=1e-12)


# --- float32 fast paths against F.linear ------------------------------------------------------------
def _derivatives(fn, x, w, b):
    """Output, first derivatives (create_graph) and second derivatives of a smooth scalar of fn(x, w, b)."""
    u = _randn(x.shape[0], w.shape[0], seed=7)
    y = fn(x, w, b)
    first = torch.autograd.grad((F.silu(y) * u).sum(), (x, w, b), create_graph=True)
    v = [_randn(*g.shape, seed=8 + i) for i, g in enumerate(first)]
    second = torch.autograd.grad(sum((g * g * vi).sum() for g, vi in zip(first, v)), (x, w, b))
    return y, first, second


@needs_onednn
def test_onednn_path_matches_f_linear_to_second_order(onednn_calls):
    x, w, b = _randn(1024, 128, seed=0, grad=True), _randn(128, 128, seed=1, grad=True), _randn(128, seed=2, grad=True)
    y, first, second = _derivatives(lin.linear, x, w, b)
    assert type(y.grad_fn).__name__ == "CPULinearBackward"
    assert len(onednn_calls) >= 1 + 2 + 2  # forward, both first-derivative products, second-order products
    y_ref, first_ref, second_ref = _derivatives(F.linear, x, w, b)
    assert _rel_err(y, y_ref) < F32_TOL
    for got, ref in zip((*first, *second), (*first_ref, *second_ref)):
        assert got.shape == ref.shape
        assert _rel_err(got, ref) < F32_TOL


@needs_onednn
def test_narrow_input_path_matches_f_linear_to_second_order(onednn_calls):
    # a first layer fed 2-d points: its backward products take the layout-aware MKL route
    x, w, b = _randn(1024, 2, seed=0, grad=True), _randn(128, 2, seed=1, grad=True), _randn(128, seed=2, grad=True)
    y, first, second = _derivatives(lin.linear, x, w, b)
    assert type(y.grad_fn).__name__ == "CPULinearBackward"
    assert not onednn_calls  # too narrow for oneDNN
    y_ref, first_ref, second_ref = _derivatives(F.linear, x, w, b)
    for got, ref in zip((y, *first, *second), (y_ref, *first_ref, *second_ref)):
        assert _rel_err(got, ref) < F32_TOL


@needs_onednn
def test_only_the_requested_gradient_is_computed(onednn_calls):
    x, w = _randn(1024, 128, seed=0, grad=True), nn.Parameter(_randn(128, 128, seed=1))
    y = lin.linear(x, w)
    (gx,) = torch.autograd.grad(y.sum(), x)
    assert len(onednn_calls) == 2  # forward and G W; no G^T x for the weight nobody asked for
    torch.testing.assert_close(gx, torch.ones(1024, 128) @ w.detach(), rtol=1e-5, atol=1e-4)
    y = lin.linear(x, w)
    (gw,) = torch.autograd.grad(y.sum(), w)
    assert len(onednn_calls) == 4  # forward and G^T x only
    torch.testing.assert_close(gw, torch.ones(128, 1024) @ x.detach(), rtol=1e-5, atol=1e-3)


@needs_onednn
def test_backward_with_inputs_fills_only_those_gradients(onednn_calls):
    x = _randn(1024, 128, seed=0, grad=True)
    w, b = nn.Parameter(_randn(128, 128, seed=1)), nn.Parameter(_randn(128, seed=2))
    lin.linear(x, w, b).pow(2).sum().backward(inputs=[w])
    assert x.grad is None and b.grad is None
    assert len(onednn_calls) == 2  # forward and G^T x
    xr, wr, br = (t.detach().clone().requires_grad_(True) for t in (x, w, b))
    F.linear(xr, wr, br).pow(2).sum().backward()
    assert _rel_err(w.grad, wr.grad) < F32_TOL


# --- when the fast route is (not) taken --------------------------------------------------------------
@needs_onednn
def test_no_grad_call_uses_the_kernel_without_an_autograd_node(onednn_calls):
    x, w, b = _randn(1024, 128, seed=0), nn.Parameter(_randn(128, 128, seed=1)), _randn(128, seed=2)
    with torch.no_grad():
        y = lin.linear(x, w, b)
    assert y.grad_fn is None and len(onednn_calls) == 1
    assert _rel_err(y, F.linear(x, w.detach(), b)) < F32_TOL


@needs_onednn
@pytest.mark.parametrize(
    "case",
    ["float64", "small", "mkldnn_disabled", "three_dims", "autocast", "torch_func"],
)
def test_fallback_cases_use_f_linear(onednn_calls, monkeypatch, case):
    dtype = F64 if case == "float64" else torch.float32
    batch = 8 if case == "small" else 1024
    x = _randn(batch, 128, seed=0, dtype=dtype, grad=True)
    w, b = _randn(128, 128, seed=1, dtype=dtype, grad=True), _randn(128, seed=2, dtype=dtype, grad=True)
    if case == "mkldnn_disabled":
        monkeypatch.setattr(torch.backends.mkldnn, "enabled", False)
    if case == "three_dims":
        x = x.detach().reshape(4, 256, 128).requires_grad_(True)
    if case == "autocast":
        with torch.autocast("cpu", dtype=torch.bfloat16):
            y, ref = lin.linear(x, w, b), F.linear(x, w, b)
        assert y.dtype == ref.dtype == torch.bfloat16
    elif case == "torch_func":
        y = torch.func.vmap(lambda r: lin.linear(r[None], w, b)[0])(x)
        ref = F.linear(x, w, b)
    else:
        y, ref = lin.linear(x, w, b), F.linear(x, w, b)
    assert not onednn_calls
    assert type(y.grad_fn).__name__ != "CPULinearBackward"
    torch.testing.assert_close(y, ref)


def test_bad_shapes_are_reported_by_f_linear():
    with pytest.raises(RuntimeError, match="shapes cannot be multiplied"):
        lin.linear(torch.randn(1024, 128), torch.randn(128, 64))


# --- MLPEnergy ----------------------------------------------------------------------------------------
def _sequential(net: MLPEnergy) -> nn.Sequential:
    mods: list[nn.Module] = []
    for layer in net.layers:
        copy_ = nn.Linear(layer.in_features, layer.out_features)
        copy_.load_state_dict(layer.state_dict())
        mods += [copy_, nn.SiLU()]
    head = nn.Linear(net.head.in_features, 1)
    head.load_state_dict(net.head.state_dict())
    return nn.Sequential(*mods, head)


def _dsm_grads(energy, x, eps):
    """Energies, input gradient and parameter gradients of a DSM-type loss (second derivatives)."""
    xg = x.clone().requires_grad_(True)
    e = energy(xg).reshape(-1)
    (g,) = torch.autograd.grad(e.sum(), xg, create_graph=True)
    loss = 0.5 * (g - eps / 0.1).pow(2).sum(1).mean()
    return e, g, torch.autograd.grad(loss, list(energy.parameters()), allow_unused=True)


@pytest.mark.parametrize(("d", "batch"), [(2, 1024), (784, 256)])
def test_mlp_forward_and_second_derivatives_match_a_sequential_of_nn_linear(onednn_calls, d, batch):
    torch.manual_seed(0)
    net = MLPEnergy(d, (128, 128), activation="silu")
    ref = _sequential(net)
    x, eps = _randn(batch, d, seed=1), _randn(batch, d, seed=2)
    e, g, grads = _dsm_grads(net, x, eps)
    e_ref, g_ref, grads_ref = _dsm_grads(ref, x, eps)
    if ONEDNN:
        assert onednn_calls  # the benchmark workloads do take the oneDNN route
    for got, want in zip((e, g, *grads), (e_ref, g_ref, *grads_ref)):
        assert got is None or got.shape == want.shape
        assert _rel_err(got, want) < F32_TOL


@needs_onednn
def test_mlp_with_spectral_norm_matches_the_plain_path(monkeypatch):
    torch.manual_seed(0)
    net = MLPEnergy(2, (128, 128), spectral_norm=True)
    plain = copy.deepcopy(net)  # same weights and power-iteration vectors
    x, eps = _randn(1024, 2, seed=1), _randn(1024, 2, seed=2)
    e, g, grads = _dsm_grads(net, x, eps)
    monkeypatch.setattr(torch.backends.mkldnn, "enabled", False)
    e_ref, g_ref, grads_ref = _dsm_grads(plain, x, eps)
    for got, want in zip((e, g, *grads), (e_ref, g_ref, *grads_ref)):
        assert _rel_err(got, want) < F32_TOL


def test_mlp_state_dict_keys_are_those_of_nn_linear_layers():
    net = MLPEnergy(3, (16, 8))
    assert list(net.state_dict()) == [
        "layers.0.weight", "layers.0.bias", "layers.1.weight", "layers.1.bias", "head.weight", "head.bias",
    ]


def test_mlp_layer_hooks_still_run():
    net = MLPEnergy(2, (128, 128))
    seen = []
    handle = net.layers[1].register_forward_hook(lambda m, args, out: seen.append(tuple(out.shape)))
    x = _randn(1024, 2, seed=0, grad=True)
    e = net(x)
    handle.remove()
    assert seen == [(1024, 128)]
    torch.testing.assert_close(e, net(x))


@needs_onednn
@pytest.mark.parametrize("objective", [DenoisingScoreMatching(0.1), SlicedScoreMatching(1)])
def test_score_matching_parameter_gradients_match_the_plain_path(monkeypatch, objective):
    torch.manual_seed(0)
    net = MLPEnergy(784, (128, 128))
    plain = copy.deepcopy(net)
    x = torch.rand(256, 784, generator=torch.Generator().manual_seed(1))
    objective(net, x, generator=torch.Generator().manual_seed(2)).loss.backward()
    monkeypatch.setattr(torch.backends.mkldnn, "enabled", False)
    objective(plain, x, generator=torch.Generator().manual_seed(2)).loss.backward()
    for p, q in zip(net.parameters(), plain.parameters()):
        assert _rel_err(p.grad, q.grad) < F32_TOL
    assert net.layers[0].weight.grad is not None


def test_mlp_calls_a_layer_whose_class_overrides_forward():
    class Doubled(nn.Linear):
        def forward(self, x):
            return 2 * super().forward(x)

    torch.manual_seed(0)
    net = MLPEnergy(2, (128, 128))
    ref = _sequential(net)
    for container, index in ((net.layers, 0), (ref, 0)):
        layer = Doubled(2, 128)
        layer.load_state_dict(net.layers[0].state_dict())
        container[index] = layer
    x = _randn(1024, 2, seed=0, grad=True)
    assert _rel_err(net(x), ref(x).squeeze(-1)) < F32_TOL
    torch.manual_seed(0)
    undoubled = MLPEnergy(2, (128, 128))  # same initial weights, plain first layer
    assert _rel_err(net(x), undoubled(x)) > 1e-3  # so the override really changed the energy
