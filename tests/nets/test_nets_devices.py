"""Networks on the device chosen with ``--device`` (cpu by default, ``pytest --device cuda``).

References: the same module on the CPU in float64 (the networks draw no random
numbers in eval mode, so the device must give the CPU's numbers to round-off),
and autograd on the device for the analytic input gradients. The private CPU
kernels must never see a tensor that is not a CPU float32 one; a run on the
``meta`` device (shapes only, no data) proves the routing without a GPU.
"""

from __future__ import annotations

import copy

import pytest
import torch
from torch import Tensor

import ebms.nets._linear as lin
import ebms.nets.mlp as mlp_module
from ebms.energy import autograd_energy_and_grad
from ebms.nets import ConvBiLSTM, ConvEnergy, GaussianEnergy, GaussianMixtureEnergy, MLPEnergy, SequenceEncoder
from ebms.samplers import ULA
from ebms.samplers._base import ChainState

F64 = torch.float64


def _randn(*shape: int, seed: int, dtype: torch.dtype = F64) -> Tensor:
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed), dtype=dtype)


@pytest.fixture
def cpu_only_kernel(monkeypatch):
    """The private oneDNN kernel, wrapped to fail on anything but CPU float32 tensors (counts its calls)."""
    calls: list[str] = []
    real = lin._ONEDNN_LINEAR

    def guarded(*args):
        for a in args:
            if isinstance(a, Tensor):
                assert a.device.type == "cpu" and a.dtype == torch.float32, f"private kernel got {a.device} {a.dtype}"
        calls.append(str(args[0].device))
        assert real is not None
        return real(*args)

    monkeypatch.setattr(lin, "_ONEDNN_LINEAR", guarded)
    monkeypatch.setattr(mlp_module, "_ONEDNN_LINEAR", guarded)
    return calls


@pytest.mark.parametrize("dtype", [torch.float32, F64])
def test_mlp_energy_and_gradient_on_the_device_match_autograd_and_the_cpu(device, dtype, cpu_only_kernel):
    torch.manual_seed(0)
    cpu = MLPEnergy(784, (128, 128)).to(F64)
    net = copy.deepcopy(cpu).to(device=device, dtype=dtype)
    x = _randn(256, 784, seed=1)
    e, g = net.energy_and_grad(x.to(device, dtype))
    assert e.device.type == g.device.type == device.type and e.dtype == g.dtype == dtype
    e_ag, g_ag = autograd_energy_and_grad(net, x.to(device, dtype))
    tol = {"rtol": 1e-4, "atol": 1e-5} if dtype == torch.float32 else {"rtol": 1e-10, "atol": 1e-12}
    torch.testing.assert_close(e, e_ag, **tol)
    torch.testing.assert_close(g, g_ag, **tol)
    e_cpu, g_cpu = cpu.energy_and_grad(x)
    torch.testing.assert_close(e.cpu().double(), e_cpu, **tol)
    torch.testing.assert_close(g.cpu().double(), g_cpu, **tol)
    if device.type != "cpu" or dtype != torch.float32:
        assert not cpu_only_kernel


def test_mlp_training_gradients_on_the_device_match_the_cpu(device, cpu_only_kernel):
    torch.manual_seed(1)
    cpu = MLPEnergy(64, (256, 256)).to(F64)
    net = copy.deepcopy(cpu).to(device)
    x = _randn(512, 64, seed=2)

    def grads(m, xs):
        xs = xs.clone().requires_grad_(True)
        (gx,) = torch.autograd.grad(m(xs).sum(), xs, create_graph=True)
        return torch.autograd.grad((gx * gx).sum(), [xs, *m.parameters()], allow_unused=True)

    for a, b in zip(grads(net, x.to(device)), grads(cpu, x)):
        assert (a is None) == (b is None)
        if a is not None:
            torch.testing.assert_close(a.cpu(), b, rtol=1e-10, atol=1e-12)


def test_conv_energy_on_the_device_matches_the_cpu(device):
    torch.manual_seed(2)
    cpu = ConvEnergy(1, 8, channels=(8, 16)).to(F64).eval()
    net = copy.deepcopy(cpu).to(device)
    x = _randn(5, 1, 8, 8, seed=3)
    e, g = net.energy_and_grad(x.to(device))
    assert e.device.type == device.type
    e_cpu, g_cpu = cpu.energy_and_grad(x)
    torch.testing.assert_close(e.cpu(), e_cpu, rtol=1e-10, atol=1e-12)
    torch.testing.assert_close(g.cpu(), g_cpu, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("kind", ["bilstm", "cnn"])
def test_sequence_encoder_on_the_device_matches_the_cpu(device, kind):
    torch.manual_seed(3)
    cpu = SequenceEncoder(30, 8, 6, kind=kind, char_vocab_size=12).to(F64).eval()
    net = copy.deepcopy(cpu).to(device)
    gen = torch.Generator().manual_seed(4)
    words, lengths = torch.randint(1, 30, (3, 7), generator=gen), torch.tensor([7, 4, 1])
    chars = torch.randint(1, 12, (3, 7, 5), generator=gen)
    out = net(words.to(device), lengths.to(device), chars.to(device))
    assert out.device.type == device.type
    torch.testing.assert_close(out.cpu(), cpu(words, lengths, chars), rtol=1e-10, atol=1e-12)


def test_acoustic_model_on_the_device_matches_the_cpu(device):
    torch.manual_seed(5)
    cpu = ConvBiLSTM(8, 5, channels=4, hidden=6).to(F64).eval()
    net = copy.deepcopy(cpu).to(device)
    feats, lengths = _randn(2, 9, 8, seed=6), torch.tensor([9, 5])
    lp, n = net(feats.to(device), lengths.to(device))
    lp_cpu, n_cpu = cpu(feats, lengths)
    assert lp.device.type == device.type
    torch.testing.assert_close(lp.cpu(), lp_cpu, rtol=1e-10, atol=1e-12)
    assert torch.equal(n.cpu(), n_cpu)


def test_gaussian_energies_on_the_device(device):
    P = torch.tensor([[2.0, 0.5], [0.5, 1.0]], dtype=F64)
    g = GaussianEnergy(2, mean=[1.0, -1.0], precision=P).to(F64)
    gd = copy.deepcopy(g).to(device)
    x = _randn(6, 2, seed=7)
    e, grad = gd.energy_and_grad(x.to(device))
    torch.testing.assert_close(grad.cpu(), (x - torch.tensor([1.0, -1.0], dtype=F64)) @ P)  # exact: P (x - mu)
    torch.testing.assert_close(e.cpu(), g(x))
    torch.testing.assert_close(gd.log_partition().cpu(), g.log_partition())
    mix = GaussianMixtureEnergy([[-3.0], [3.0]], 0.25, [0.2, 0.8]).to(device)
    draws = mix.sample(1000, generator=torch.Generator(device=device).manual_seed(8))
    assert draws.device.type == device.type and draws.shape == (1000, 1)


# --- without a GPU: the meta device stands in for "not the CPU" ---------------------------------------
def test_non_cpu_tensors_never_reach_the_private_kernels_meta_dry_run(cpu_only_kernel):
    """Shapes-only tensors on ``meta``: every CPU-only branch must be skipped (the kernel would fail)."""
    meta = torch.device("meta")
    net = MLPEnergy(784, (128, 128)).to(meta)
    x = torch.empty(1024, 784, device=meta)
    e, g = net.energy_and_grad(x)
    assert e.shape == (1024,) and g.shape == (1024, 784) and e.device == meta
    xg = x.clone().requires_grad_(True)
    (gx,) = torch.autograd.grad(net(xg).sum(), xg, create_graph=True)
    (second,) = torch.autograd.grad((gx * gx).sum(), xg)
    assert second.shape == x.shape
    assert lin.linear(x, net.layers[0].weight, net.layers[0].bias).shape == (1024, 128)
    assert not lin.onednn_usable(x)
    # one ULA step from a hand-built state (init's finiteness check reads data): no CPU-only branch
    state = ChainState(x=x, energy=e, grad=g, step_size=torch.tensor(0.01, device=meta))
    new, info = ULA(0.01).step(net, state)
    assert new.x.shape == x.shape and new.x.device == meta and info.nonfinite.shape == (1024,)
    assert not cpu_only_kernel  # the kernel never ran on a meta tensor


def test_the_private_kernel_does_run_for_large_cpu_float32_products(cpu_only_kernel):
    path = lin._fastpaths.fast_paths()["onednn_linear"]
    if not path.available:
        pytest.skip(f"the oneDNN path is off here: {path.reason}")
    MLPEnergy(784, (128, 128)).energy_and_grad(torch.randn(1024, 784))
    assert cpu_only_kernel and set(cpu_only_kernel) == {"cpu"}
