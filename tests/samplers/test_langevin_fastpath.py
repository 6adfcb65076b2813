"""Langevin CPU fast paths pinned to plain references.

``ULA.step`` decides "nothing to reject" from one scalar (``all_finite_on_cpu``),
turns a shared CPU step size into Python-float coefficients, and
``MLPEnergy.energy_and_grad`` sends large float32 products to oneDNN. None of
that may change what a step means: these tests compare the finite checks with
``isfinite(e) & isfinite(g).flatten(1).all(1)`` and whole chains with a
straightforward loop written from the update rule.
"""

from __future__ import annotations

import math

import pytest
import torch
from torch import Tensor

from ebms.energy import Energy, energy_and_grad, from_fn
from ebms.nets import MLPEnergy
from ebms.nets import mlp as mlp_module
from ebms.nets._fastpaths import fast_paths
from ebms.samplers import SGLD, ULA
from ebms.samplers import langevin as langevin_module
from ebms.samplers._base import all_finite_on_cpu

F32_MAX = torch.finfo(torch.float32).max
SPECIALS = [math.nan, math.inf, -math.inf, F32_MAX, -F32_MAX, -0.0, 1e-45]  # 1e-45: a float32 subnormal
ONEDNN = mlp_module._ONEDNN_LINEAR is not None
ONEDNN_OFF = f"the oneDNN path is off: {fast_paths()['onednn_linear'].reason}"


def _reference_mask(e: Tensor, g: Tensor) -> Tensor:
    return torch.isfinite(e) & torch.isfinite(g).flatten(1).all(1)


def _planted(seed: int, g_shape: tuple[int, ...], n_bad: int) -> tuple[Tensor, Tensor]:
    """``e: (B,)``, ``g: g_shape`` standard normal with ``n_bad`` special values planted in each."""
    gen = torch.Generator().manual_seed(seed)
    e = torch.randn(g_shape[0], generator=gen)
    g = torch.randn(g_shape, generator=gen)
    for flat in (e.view(-1), g.view(-1)):
        where = torch.randint(flat.numel(), (n_bad,), generator=gen)
        which = torch.randint(len(SPECIALS), (n_bad,), generator=gen)
        flat[where] = torch.tensor(SPECIALS)[which]
    return e, g


@pytest.mark.parametrize("g_shape", [(64, 1), (64, 3), (64, 2, 3), (1, 5)])
@pytest.mark.parametrize("seed", range(8))
def test_finite_rows_equals_isfinite_reference_with_nan_inf_and_huge_values(g_shape, seed):
    e, g = _planted(seed, g_shape, n_bad=4)
    got = langevin_module.finite_rows(e, g)
    assert got.dtype == torch.bool and got.shape == (g_shape[0],)
    assert torch.equal(got, _reference_mask(e, g))


@pytest.mark.parametrize("seed", range(16))
def test_all_finite_on_cpu_never_passes_a_nonfinite_entry(seed):
    e, g = _planted(seed, (32, 3), n_bad=int(seed % 4))
    if all_finite_on_cpu(e, g):
        assert bool(_reference_mask(e, g).all())


def test_all_finite_on_cpu_answers_exactly_without_overflow():
    e, g = torch.randn(32), torch.randn(32, 3)
    assert all_finite_on_cpu(e, g)
    for bad in (math.nan, math.inf, -math.inf):
        g_bad = g.clone()
        g_bad[7, 1] = bad
        assert not all_finite_on_cpu(e, g_bad)
        e_bad = e.clone()
        e_bad[3] = bad
        assert not all_finite_on_cpu(e_bad, g)
    # +Inf and -Inf together sum to NaN, still non-finite
    g_pm = g.clone()
    g_pm[0, 0], g_pm[1, 0] = math.inf, -math.inf
    assert not all_finite_on_cpu(e, g_pm)
    # huge but finite values whose sum overflows: the scalar test is inconclusive and says
    # False, so the caller falls back to the exact per-row mask (see the ULA test below)
    assert not all_finite_on_cpu(torch.full((4,), F32_MAX), torch.zeros(4, 2))
    assert all_finite_on_cpu(torch.empty(0), torch.empty(0, 2))


class _PoisonEnergy(Energy):
    """Quadratic energy; rows with ``x[:, 0] > 1`` get ``fill`` in the energy or in the gradient."""

    def __init__(self, fill: float, where: str) -> None:
        super().__init__()
        self.fill, self.where = fill, where

    def forward(self, x: Tensor) -> Tensor:
        return self.energy_and_grad(x)[0]

    def energy_and_grad(self, x: Tensor) -> tuple[Tensor, Tensor]:
        e, g = 0.5 * (x * x).sum(-1), x.clone()
        bad = x[:, 0] > 1.0
        if self.where == "energy":
            e = torch.where(bad, torch.full_like(e, self.fill), e)
        else:
            g[bad, -1] = self.fill
        return e, g


@pytest.mark.parametrize("where", ["energy", "grad"])
@pytest.mark.parametrize("fill", [math.nan, math.inf, -math.inf, F32_MAX])
def test_ula_step_rejects_exactly_the_rows_the_isfinite_reference_rejects(fill, where):
    energy = _PoisonEnergy(fill, where)
    sampler = ULA(step_size=0.5)
    x0 = torch.linspace(-0.5, 1.5, 400).unsqueeze(1).repeat(1, 2)
    state = sampler.init(energy, torch.where(x0 > 1.0, 0.9, x0))
    new, info = sampler.step(energy, state, generator=torch.Generator().manual_seed(0))

    # the same proposal, checked the plain way
    noise = torch.randn(state.x.shape, generator=torch.Generator().manual_seed(0))
    prop = state.x - 0.25 * state.grad + math.sqrt(0.5) * noise
    e_prop, g_prop = energy.energy_and_grad(prop)
    ok = _reference_mask(e_prop, g_prop)
    if math.isfinite(fill):  # huge but finite: the scalar test overflows, the exact mask keeps every row
        assert bool(ok.all())
    else:
        assert 0 < int(ok.sum()) < len(ok)  # some rows of each kind
    assert torch.equal(info.accepted, ok)
    assert torch.equal(info.nonfinite, ~ok)
    assert torch.equal(info.accept_prob, ok.float())
    torch.testing.assert_close(new.x, torch.where(ok[:, None], prop, state.x))
    torch.testing.assert_close(new.energy, torch.where(ok, e_prop, state.energy))
    torch.testing.assert_close(info.energy, new.energy)
    torch.testing.assert_close(new.grad, torch.where(ok[:, None], g_prop, state.grad))


def test_ula_accepts_huge_finite_energies_whose_sum_overflows():
    # every row's energy is finite (3e38) but their sum is not: the fast path is skipped
    # and the exact mask must accept every row
    energy = from_fn(lambda x: torch.full((x.shape[0],), 3e38) + 0 * x[:, 0], grad_fn=lambda x: x.clone())
    sampler = ULA(step_size=0.1)
    state = sampler.init(energy, torch.zeros(16, 2))
    new, info = sampler.step(energy, state, generator=torch.Generator().manual_seed(0))
    assert bool(info.accepted.all()) and not bool(info.nonfinite.any())
    noise = torch.randn(16, 2, generator=torch.Generator().manual_seed(0))
    torch.testing.assert_close(new.x, math.sqrt(0.1) * noise)


def test_all_finite_step_skips_the_per_row_mask_and_reports_constant_info(monkeypatch):
    calls = []
    real = langevin_module.finite_rows
    monkeypatch.setattr(langevin_module, "finite_rows", lambda e, g: calls.append(1) or real(e, g))
    energy = _PoisonEnergy(math.nan, "energy")
    sampler = ULA(step_size=0.01)
    state = sampler.init(energy, torch.zeros(32, 3))
    new, info = sampler.step(energy, state, generator=torch.Generator().manual_seed(1))
    assert calls == []  # all finite: decided by one scalar, no mask built
    assert info.accepted.dtype == torch.bool and bool(info.accepted.all())
    assert info.nonfinite.dtype == torch.bool and not bool(info.nonfinite.any())
    assert info.accept_prob.dtype == torch.float32 and torch.equal(info.accept_prob, torch.ones(32))
    assert info.energy is new.energy and new.t == 1
    # a non-finite proposal takes the exact path
    state = sampler.init(energy, torch.full((32, 3), 0.99))
    sampler.step(energy, state, generator=torch.Generator().manual_seed(1))
    assert calls == [1]


# --- whole chains against a loop written from the update rule -----------------------------
def _reference_chain(energy, x0, steps, seed, *, alpha, sigma, schedule=None) -> tuple[Tensor, Tensor]:
    """``x <- x - alpha_t grad E(x) + sigma_t xi``, non-finite proposals rejected per row."""
    gen = torch.Generator().manual_seed(seed)
    x = x0.clone()
    e, g = energy_and_grad(energy, x)
    for t in range(steps):
        m = 1.0 if schedule is None else schedule(t)
        a, s = alpha(m), sigma(m)
        prop = x - a * g + s * torch.randn(x.shape, generator=gen, dtype=x.dtype)
        e_p, g_p = energy_and_grad(energy, prop)
        ok = _reference_mask(e_p, g_p)
        x = torch.where(ok[:, None], prop, x)
        e = torch.where(ok, e_p, e)
        g = torch.where(ok[:, None], g_p, g)
    return x, e


def _run(sampler, energy, x0, steps, seed, *, per_chain_eps=None) -> tuple[Tensor, Tensor]:
    gen = torch.Generator().manual_seed(seed)
    state = sampler.init(energy, x0)
    if per_chain_eps is not None:
        state = state.replace(step_size=per_chain_eps)
    for _ in range(steps):
        state, _ = sampler.step(energy, state, generator=gen)
    return state.x, state.energy


def _mlp64(d: int) -> MLPEnergy:
    torch.manual_seed(0)
    return MLPEnergy(d, (16, 16)).double()


SQ = math.sqrt
CASES = {
    "ula": (lambda: ULA(step_size=0.05), dict(alpha=lambda m: 0.025, sigma=lambda m: SQ(0.05))),
    "ula-schedule": (
        lambda: ULA(step_size=0.05, schedule=lambda t: 1.0 / (1 + t)),
        dict(alpha=lambda m: 0.025 * m, sigma=lambda m: SQ(0.05 * m), schedule=lambda t: 1.0 / (1 + t)),
    ),
    "sgld-default-noise": (lambda: SGLD(step_size=0.02, noise_scale=None),
                           dict(alpha=lambda m: 0.02, sigma=lambda m: SQ(0.04))),
    "sgld-fixed-noise": (lambda: SGLD(step_size=0.02, noise_scale=0.05),
                         dict(alpha=lambda m: 0.02, sigma=lambda m: 0.05)),
    "sgld-no-noise": (lambda: SGLD(step_size=0.02, noise_scale=0.0), dict(alpha=lambda m: 0.02, sigma=lambda m: 0.0)),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_langevin_chain_equals_reference_loop_in_float64(case):
    make, coef = CASES[case]
    energy = _mlp64(3)
    x0 = torch.randn(40, 3, generator=torch.Generator().manual_seed(2), dtype=torch.float64)
    x, e = _run(make(), energy, x0, 10, seed=3)
    x_ref, e_ref = _reference_chain(energy, x0, 10, 3, **coef)
    # float64, same operations up to association/FMA: agreement to ~1e-15 relative
    torch.testing.assert_close(x, x_ref, rtol=0, atol=1e-12)
    torch.testing.assert_close(e, e_ref, rtol=0, atol=1e-12)


def test_ula_with_per_chain_step_sizes_equals_reference_loop():
    energy = _mlp64(2)
    x0 = torch.randn(30, 2, generator=torch.Generator().manual_seed(2), dtype=torch.float64)
    eps = torch.linspace(0.01, 0.3, 30, dtype=torch.float64)
    x, _ = _run(ULA(step_size=0.1), energy, x0, 8, seed=4, per_chain_eps=eps)
    x_ref, _ = _reference_chain(energy, x0, 8, 4, alpha=lambda m: 0.5 * eps[:, None], sigma=lambda m: eps[:, None].sqrt())
    torch.testing.assert_close(x, x_ref, rtol=0, atol=1e-12)


@pytest.mark.parametrize(("d", "batch"), [(2, 1024), (784, 64)])
def test_ula_float32_chain_matches_autograd_reference_after_five_steps(d, batch, fast_paths):
    """The benchmark's workload: analytic gradient (oneDNN products on CPU) vs autograd through nn.Linear."""
    torch.manual_seed(0)
    net = MLPEnergy(d, (128, 128))
    x0 = torch.randn(batch, d, generator=torch.Generator().manual_seed(1))
    x, _ = _run(ULA(step_size=0.01), net, x0, 5, seed=123)
    x_ref, _ = _reference_chain(from_fn(net.forward), x0, 5, 123, alpha=lambda m: 0.005, sigma=lambda m: 0.1)
    # float32, different summation orders and FMA use: each step adds a few ulps of |x| ~ 4
    # (ulp 4.8e-7); observed <= 1e-6 after 5 steps
    torch.testing.assert_close(x, x_ref, rtol=0, atol=5e-6)


@pytest.mark.skipif(not ONEDNN, reason=ONEDNN_OFF)
@pytest.mark.parametrize(("d", "batch", "expected_calls"), [(2, 1024, 2), (784, 64, 2), (2, 16, 0), (12, 2048, 4)])
def test_mlp_onednn_products_match_blas_products(monkeypatch, d, batch, expected_calls):
    calls = []
    real = mlp_module._ONEDNN_LINEAR
    monkeypatch.setattr(mlp_module, "_ONEDNN_LINEAR", lambda *a: calls.append(1) or real(*a))
    torch.manual_seed(0)
    net = MLPEnergy(d, (128, 128))
    x = torch.randn(batch, d, generator=torch.Generator().manual_seed(1))
    e, g = net.energy_and_grad(x)
    assert len(calls) == expected_calls  # which products are big enough to route (see _onednn_pays)
    monkeypatch.setattr(torch.backends.mkldnn, "enabled", False)
    e_ref, g_ref = net.energy_and_grad(x)
    assert len(calls) == expected_calls  # switched off: BLAS only
    torch.testing.assert_close(e, e_ref, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(g, g_ref, rtol=1e-5, atol=1e-6)
    assert not e.requires_grad and not g.requires_grad
    assert all(p.grad is None for p in net.parameters())


def test_ula_on_a_large_mlp_leaks_no_requires_grad_and_uses_only_the_generator():
    torch.manual_seed(0)
    net = MLPEnergy(2, (128, 128))
    x0 = torch.randn(1024, 2, generator=torch.Generator().manual_seed(1))
    torch.manual_seed(10)
    a = ULA(step_size=0.01).sample(net, x0, 3, generator=torch.Generator().manual_seed(5))
    torch.manual_seed(11)  # a different global RNG state changes nothing
    b = ULA(step_size=0.01).sample(net, x0, 3, generator=torch.Generator().manual_seed(5))
    assert torch.equal(a, b)
    assert not a.requires_grad
    assert all(p.requires_grad and p.grad is None for p in net.parameters())
