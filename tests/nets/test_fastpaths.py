"""Private-PyTorch fast paths: detected once, self-checked, switchable, and equal to the public route.

The public route (``F.linear``/``addmm``, closed-form activation derivatives, every
gradient computed) is the reference: with the fast paths switched off
(:func:`ebms.nets._fastpaths.disabled` or ``EBMS_DISABLE_FAST_PATHS=1``) the
networks must give the same energies, input gradients, parameter gradients and
second derivatives, to float32 round-off.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
import torch
import torch.nn.functional as F

import ebms.nets._activations as acts
import ebms.nets._fastpaths as fp
import ebms.nets._linear as lin
from ebms.nets import MLPEnergy
from ebms.objectives import DenoisingScoreMatching

# float32 products of up to 784 + 128 terms summed in different orders by oneDNN and MKL:
# round-off ~ sqrt(1000) * 6e-8 ~ 2e-6 of the scale; 2e-5 leaves a factor 10.
F32_TOL = 2e-5


def _rel(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a - b).abs().max() / b.abs().max().clamp_min(1e-30))


def _mlp(d: int, seed: int = 0) -> MLPEnergy:
    torch.manual_seed(seed)
    return MLPEnergy(d, (128, 128), activation="silu")


# --- the decision --------------------------------------------------------------------------------
def test_every_path_is_reported_with_a_reason_when_off():
    paths = fp.fast_paths()
    assert tuple(paths) == fp.PATHS
    for p in paths.values():
        assert p.torch_version == torch.__version__
        assert p.available == (p.reason == "")
        if os.environ.get(fp.ENV_VAR):
            assert not p.available and fp.ENV_VAR in p.reason


def test_onednn_kernel_is_none_exactly_when_its_path_is_off():
    assert (lin._ONEDNN_LINEAR is not None) == fp.fast_paths()["onednn_linear"].available
    assert (lin._ENGINE_PROBE is not None) == fp.fast_paths()["engine_probe"].available


def test_disabled_switches_every_path_off_and_back():
    available = {n: p.available for n, p in fp.fast_paths().items()}
    with fp.disabled():
        assert not any(fp.enabled(n) for n in fp.PATHS)
        assert not lin.onednn_usable(torch.zeros(4, 4))
        assert all(fp.switched_off(n) for n in fp.PATHS)
    assert {n: fp.enabled(n) for n in fp.PATHS} == available
    with fp.disabled(["activation_vjps"]):
        assert fp.switched_off("activation_vjps") and not fp.switched_off("onednn_linear")


def test_disabled_rejects_unknown_names():
    with pytest.raises(ValueError, match=r"names: expected a subset of onednn_linear, .*; got \['onednn'\]"):
        with fp.disabled(["onednn"]):
            pass
    with pytest.raises(ValueError, match=r"name: expected one of onednn_linear"):
        fp.record("nope", "")


# --- self-checks: a missing or misbehaving private API is caught --------------------------------
def test_onednn_probe_accepts_a_correct_kernel_and_rejects_wrong_or_missing_ones():
    good = lambda a, w, b, *rest: F.linear(a, w, b)  # noqa: E731
    assert lin._probe_onednn(True, lambda: good) == (good, "")
    wrong = lambda a, w, b, *rest: F.linear(a, w, b) * 1.001  # noqa: E731
    assert lin._probe_onednn(True, lambda: wrong) == (None, "mkldnn._linear_pointwise disagrees with F.linear on a tiny input")
    no_bias = lambda a, w, b, *rest: a @ w.t()  # noqa: E731  (a kernel ignoring an argument)
    assert lin._probe_onednn(True, lambda: no_bias)[0] is None

    def missing():
        raise AttributeError("'_OpNamespace' 'mkldnn' object has no attribute '_linear_pointwise'")

    kernel, reason = lin._probe_onednn(True, missing)
    assert kernel is None and reason.startswith("mkldnn._linear_pointwise unusable: AttributeError")
    changed = lambda a, w, b: F.linear(a, w, b)  # noqa: E731  (a signature without the pointwise args)
    assert lin._probe_onednn(True, lambda: changed)[1].startswith("mkldnn._linear_pointwise unusable: TypeError")
    assert lin._probe_onednn(False, lambda: good)[1].startswith("needs the functorch probe")


def test_functorch_probe_must_see_transforms():
    assert lin._probe_functorch(lambda: (lambda: None))[1] == "peek_interpreter_stack does not tell torch.func transforms apart"
    assert lin._probe_functorch(lambda: (lambda: object()))[1] == "peek_interpreter_stack does not tell torch.func transforms apart"

    def missing():
        raise AttributeError("module 'torch._C' has no attribute '_functorch'")

    assert lin._probe_functorch(missing)[1].startswith("peek_interpreter_stack unusable: AttributeError")


def test_engine_probe_that_skips_needed_gradients_is_rejected_and_a_cautious_one_kept():
    before = lin._ENGINE_PROBE
    probe, reason = lin._probe_engine(lambda: (lambda node: False))
    assert probe is None and "_will_engine_execute_node" in reason
    always = lambda node: True  # noqa: E731  (computes more than needed: still correct)
    assert lin._probe_engine(lambda: always) == (always, "")
    assert lin._ENGINE_PROBE is before  # probing leaves the module's choice alone


def test_activation_kernels_that_disagree_with_autograd_are_rejected():
    assert acts._aten_vjps_agree(acts._ATEN_VJPS) == ""
    wrong = dict(acts._ATEN_VJPS, gelu=lambda g, z, a: g)
    assert acts._aten_vjps_agree(wrong) == "torch.ops.aten backward kernel for 'gelu' disagrees with autograd"

    def gone(g, z, a):
        raise RuntimeError("No such operator aten::silu_backward")

    assert acts._aten_vjps_agree(dict(acts._ATEN_VJPS, silu=gone)).startswith("torch.ops.aten backward kernels unusable")


@pytest.mark.parametrize("name", sorted(set(acts._FNS)))
def test_public_activation_derivatives_match_autograd(name):
    z = torch.linspace(-30, 30, 241, dtype=torch.float64).reshape(1, -1).repeat(3, 1)
    g = torch.randn(3, 241, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    zg = z.clone().requires_grad_(True)
    (ref,) = torch.autograd.grad(acts._FNS[name](zg), zg, g)
    out = acts._PUBLIC_VJPS[name](g, z, acts._FNS[name](z))
    torch.testing.assert_close(out, ref, rtol=1e-12, atol=1e-14)


# --- the public route gives the fast route's numbers ----------------------------------------------
@pytest.mark.parametrize(("d", "batch"), [(2, 1024), (784, 256), (16, 8)])
def test_mlp_energy_and_input_gradient_match_with_fast_paths_off(d, batch):
    mlp = _mlp(d)
    x = torch.randn(batch, d, generator=torch.Generator().manual_seed(1))
    e_fast, g_fast = mlp.energy_and_grad(x)
    calls: list[int] = []
    real = lin._ONEDNN_LINEAR
    with fp.disabled(), pytest.MonkeyPatch.context() as mp:
        if real is not None:
            import ebms.nets.mlp as mlp_module

            mp.setattr(mlp_module, "_ONEDNN_LINEAR", lambda *a: calls.append(1) or real(*a))
        e_pub, g_pub = mlp.energy_and_grad(x)
    assert not calls  # the public route never touches the private kernel
    assert _rel(e_fast, e_pub) < F32_TOL and _rel(g_fast, g_pub) < F32_TOL


@pytest.mark.parametrize(("d", "batch"), [(2, 1024), (784, 256)])
def test_mlp_training_gradients_and_second_derivatives_match_with_fast_paths_off(d, batch):
    """DSM loss (first derivatives of E in x, then parameters) and a gradient-norm penalty (second order)."""
    mlp = _mlp(d, seed=3)
    x = torch.randn(batch, d, generator=torch.Generator().manual_seed(2))

    def derivatives():
        mlp.zero_grad(set_to_none=True)
        loss = DenoisingScoreMatching(sigma=0.1)(mlp, x, generator=torch.Generator().manual_seed(5)).loss
        grads = torch.autograd.grad(loss, list(mlp.parameters()), allow_unused=True)  # DSM ignores the head bias
        xg = x.clone().requires_grad_(True)
        (gx,) = torch.autograd.grad(mlp(xg).sum(), xg, create_graph=True)
        (second,) = torch.autograd.grad((gx * gx).sum(), xg)
        return loss.detach(), grads, second

    loss_f, grads_f, second_f = derivatives()
    with fp.disabled():
        loss_p, grads_p, second_p = derivatives()
    assert _rel(loss_f, loss_p) < F32_TOL
    assert [a is None for a in grads_f] == [b is None for b in grads_p]
    assert all(_rel(a, b) < F32_TOL for a, b in zip(grads_f, grads_p) if a is not None)
    assert _rel(second_f, second_p) < F32_TOL


@pytest.mark.slow  # new processes: ~7 s
def test_env_var_switches_the_paths_off_in_a_new_process_with_the_same_results():
    """``EBMS_DISABLE_FAST_PATHS=1`` (read at import): every path off, and the same numbers as in here."""
    code = (
        "import json, torch\n"
        "from ebms.nets._fastpaths import fast_paths\n"
        "from ebms.nets import MLPEnergy\n"
        "torch.manual_seed(0); m = MLPEnergy(784, (128, 128), activation='silu')\n"
        "x = torch.randn(256, 784, generator=torch.Generator().manual_seed(1))\n"
        "e, g = m.energy_and_grad(x)\n"
        "print(json.dumps({'paths': {n: [p.available, p.reason] for n, p in fast_paths().items()},"
        " 'e': e.tolist(), 'g0': g[0].tolist()}))\n"
    )
    runs = {}
    for value in ("1", "onednn_linear"):
        env = dict(os.environ, **{fp.ENV_VAR: value}, OMP_NUM_THREADS="1")
        out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
        assert out.returncode == 0, out.stderr
        runs[value] = json.loads(out.stdout.strip().splitlines()[-1])
    off = f"switched off by {fp.ENV_VAR}"
    assert all(v == [False, off] for v in runs["1"]["paths"].values())
    assert runs["onednn_linear"]["paths"]["onednn_linear"] == [False, off]
    reason = acts._aten_vjps_agree()  # not named in the variable: probed as usual
    assert runs["onednn_linear"]["paths"]["activation_vjps"] == [reason == "", reason]
    e, g = _mlp(784).energy_and_grad(torch.randn(256, 784, generator=torch.Generator().manual_seed(1)))
    for run in runs.values():
        assert _rel(torch.tensor(run["e"]), e) < F32_TOL
        assert _rel(torch.tensor(run["g0"]), g[0]) < F32_TOL


@pytest.mark.slow  # new processes: ~4 s
def test_the_decision_does_not_depend_on_the_grad_mode_at_import():
    code = (
        "import torch\n"
        "with torch.inference_mode():\n"
        "    from ebms.nets._fastpaths import fast_paths\n"
        "    print([p.available for p in fast_paths().values()])\n"
    )
    env = {k: v for k, v in os.environ.items() if k != fp.ENV_VAR}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    expected = [p.available for p in fp.fast_paths().values()] if not os.environ.get(fp.ENV_VAR) else None
    if expected is not None:
        assert out.stdout.strip().splitlines()[-1] == str(expected)


def test_onednn_is_chosen_for_speed_only_on_avx512_cpus():
    assert lin._onednn_faster("AVX512") and lin._onednn_faster("avx512_vnni")
    assert not lin._onednn_faster("AVX2") and not lin._onednn_faster("DEFAULT") and not lin._onednn_faster("SVE256")
    w = torch.zeros(128, 128)
    assert lin.onednn_pays(True, w, 1024)  # the suite forces the route on (tests/conftest.py)
    try:
        lin._ONEDNN_FASTER = False
        assert not lin.onednn_pays(True, w, 1024)
    finally:
        lin._ONEDNN_FASTER = True
