"""Energy Matching: the loss against hand-written references, finite differences, and a closed-form minimiser."""

from __future__ import annotations

import itertools
import math

import pytest
import torch
from torch import Tensor, nn

from ebms.nets import MLPEnergy
from ebms.objectives import EnergyMatching, em_flow_weight, em_temperature, energy_matching_sample
from ebms.objectives.energy_matching import ot_pairing

DTYPES = (torch.float32, torch.float64)


class Quadratic(nn.Module):
    """``E(x) = a/2 ||x - m||^2 + c`` with its gradient ``a (x - m)`` known by hand."""

    def __init__(self, a: float, m: float | list[float], c: float = 0.0, dtype: torch.dtype = torch.float64) -> None:
        super().__init__()
        self.a = nn.Parameter(torch.tensor(a, dtype=dtype))
        self.m = nn.Parameter(torch.as_tensor(m, dtype=dtype))
        self.c = nn.Parameter(torch.tensor(c, dtype=dtype))

    def forward(self, x: Tensor) -> Tensor:
        return 0.5 * self.a * (x - self.m).pow(2).sum(1) + self.c

    def grad(self, x: Tensor) -> Tensor:
        return (self.a * (x - self.m)).detach()


def _flow_reference(q: Quadratic, x1: Tensor, x0: Tensor, t: Tensor, eps: float, w: Tensor | None = None) -> float:
    """The OT term written out row by row: mean_b w_b mean_d (eps a (x_t - m) + x1 - x0)^2."""
    total = 0.0
    for b in range(x1.shape[0]):
        xt = (1 - t[b]) * x0[b] + t[b] * x1[b]
        r = eps * q.grad(xt[None])[0] + x1[b] - x0[b]
        total += (1.0 if w is None else float(w[b])) * float(r.pow(2).mean())
    return total / x1.shape[0]


@pytest.mark.parametrize("dtype", DTYPES)
def test_flow_loss_matches_the_row_by_row_reference(dtype):
    g = torch.Generator().manual_seed(0)
    x1, x0 = torch.randn(7, 3, generator=g, dtype=dtype) + 2, torch.randn(7, 3, generator=g, dtype=dtype)
    t = torch.rand(7, generator=g, dtype=dtype)
    q = Quadratic(0.7, [0.5, -1.0, 2.0], dtype=dtype)
    em = EnergyMatching(epsilon_max=0.3)
    got = em.flow_loss(q, x1, x0, t)
    assert got.dtype == dtype and got.requires_grad
    assert float(got.detach()) == pytest.approx(_flow_reference(q, x1, x0, t, 0.3), rel=1e-5 if dtype == torch.float32 else 1e-12)
    w = em_flow_weight(t, 0.4)
    assert float(em.flow_loss(q, x1, x0, t, w).detach()) == pytest.approx(_flow_reference(q, x1, x0, t, 0.3, w), rel=1e-5)


def test_temperature_and_flow_weight_schedules_by_hand():
    t = torch.tensor([0.0, 0.5, 0.8, 0.9, 1.0, 1.3], dtype=torch.float64)
    torch.testing.assert_close(em_temperature(t, 0.6, 0.5),
                               torch.tensor([0.0, 0.0, 0.25, 0.375, 0.5, 0.5], dtype=torch.float64))
    torch.testing.assert_close(em_flow_weight(t, 0.6), torch.tensor([1.0, 1.0, 0.5, 0.25, 0.0, 0.0], dtype=torch.float64))
    torch.testing.assert_close(em_temperature(t, 1.0, 0.5), torch.tensor([0, 0, 0, 0, 0.5, 0.5], dtype=torch.float64))
    torch.testing.assert_close(em_flow_weight(t, 1.0), torch.tensor([1.0, 1, 1, 1, 0, 0], dtype=torch.float64))


def test_ot_pairing_is_the_cheapest_permutation_by_enumeration():
    g = torch.Generator().manual_seed(3)
    x0, x1 = torch.randn(6, 2, generator=g), torch.randn(6, 2, generator=g) * 2
    perm = ot_pairing(x0, x1)

    def cost(p):
        return float(sum((x1[i] - x0[j]).pow(2).sum() for i, j in enumerate(p)))

    best = min(cost(p) for p in itertools.permutations(range(6)))
    assert sorted(perm.tolist()) == list(range(6)) and cost(perm.tolist()) == pytest.approx(best, rel=1e-9)


@pytest.mark.parametrize("dtype", DTYPES)
def test_phase_one_forward_reproduces_its_draws(dtype):
    """Independent coupling: x0 = sigma0 * randn, then t = rand, from the generator in that order."""
    x1 = torch.randn(9, 2, generator=torch.Generator().manual_seed(1), dtype=dtype) + 3
    q = Quadratic(1.3, [1.0, 2.0], dtype=dtype)
    em = EnergyMatching(epsilon_max=0.5, cd_weight=0.0, coupling="independent", noise_std=2.0)
    out = em(q, x1, generator=torch.Generator().manual_seed(5))
    g = torch.Generator().manual_seed(5)
    x0 = 2.0 * torch.randn(x1.shape, generator=g, dtype=dtype)
    t = torch.rand(9, generator=g, dtype=dtype)
    assert out.loss.dtype == dtype and out.negatives is None and out.metrics["phase"] == 1.0
    assert float(out.loss.detach()) == pytest.approx(_flow_reference(q, x1, x0, t, 0.5), rel=1e-5)
    assert out.metrics["e_neg"] == pytest.approx(float(q(x0).mean().detach()), rel=1e-5)


def test_phase_two_forward_matches_a_hand_written_sampler_and_cd_term():
    dtype, B, steps, dt, tau, eps, lam = torch.float64, 6, 4, 0.05, 0.5, 0.2, 0.7
    x1 = torch.randn(B, 2, generator=torch.Generator().manual_seed(2), dtype=dtype) + 1
    q = Quadratic(2.0, [0.5, 1.5], c=0.3)
    em = EnergyMatching(epsilon_max=eps, tau_star=tau, cd_weight=lam, steps=steps, dt=dt, data_start=0.5,
                        coupling="independent", flow_weighting=True)
    out = em(q, x1, generator=torch.Generator().manual_seed(9))
    g = torch.Generator().manual_seed(9)
    x0 = torch.randn(x1.shape, generator=g, dtype=dtype)
    t = torch.rand(B, generator=g, dtype=dtype)
    w = [1.0 if s < tau else max(0.0, 1 - (s - tau) / (1 - tau)) for s in t.tolist()]
    flow = _flow_reference(q, x1, x0, t, eps, torch.tensor(w, dtype=dtype))
    x = torch.cat([x1[:3], torch.randn(3, 2, generator=g, dtype=dtype)])
    t0 = [1.0, 1.0, 1.0, 0.0, 0.0, 0.0]
    for j in range(1, steps + 1):
        temps = []
        for s0 in t0:
            s = s0 + (1 - s0) * j / steps
            temps.append(0.0 if s < tau else eps * min(1.0, (s - tau) / (1 - tau)))
        noise = torch.randn(x.shape, generator=g, dtype=dtype)
        x = x - dt * eps * q.grad(x) + torch.tensor(temps, dtype=dtype)[:, None].mul(2 * dt).sqrt() * noise
    torch.testing.assert_close(out.negatives, x)
    with torch.no_grad():
        cd = eps * (float(q(x1).mean()) - float(q(x).mean()))
    assert out.metrics["cd"] == pytest.approx(cd, rel=1e-6)  # metrics are float32
    assert float(out.loss.detach()) == pytest.approx(flow + lam * cd, rel=1e-10)


def test_flow_term_parameter_gradient_matches_finite_differences():
    torch.manual_seed(0)
    net = MLPEnergy(2, (4,), activation="softplus").double()
    g = torch.Generator().manual_seed(4)
    x1, x0 = torch.randn(5, 2, generator=g, dtype=torch.float64) + 1, torch.randn(5, 2, generator=g, dtype=torch.float64)
    t = torch.rand(5, generator=g, dtype=torch.float64)
    em = EnergyMatching(epsilon_max=0.7)
    params = list(net.parameters())
    # the head's bias (a constant shift of E) has no score: its gradient is None, read as 0
    grads = torch.autograd.grad(em.flow_loss(net, x1, x0, t), params, allow_unused=True)
    grads = tuple(torch.zeros_like(p) if gp is None else gp for p, gp in zip(params, grads))
    assert grads[-1].abs().max() == 0
    h = 1e-6
    for p, gp in zip(params, grads):
        for i in range(p.numel()):
            with torch.no_grad():
                p.view(-1)[i] += h
                up = float(em.flow_loss(net, x1, x0, t))
                p.view(-1)[i] -= 2 * h
                down = float(em.flow_loss(net, x1, x0, t))
                p.view(-1)[i] += h
            assert float(gp.view(-1)[i]) == pytest.approx((up - down) / (2 * h), rel=1e-5, abs=1e-8)


def test_gaussian_closed_form_minimiser_of_the_flow_term():
    r"""1-D: noise N(0, 1), data N(mu, s^2), independent pairs, t ~ U(0, 1), E = a/2 (x - m)^2, eps = 1.

    The loss is least squares of u = x1 - x0 on (x_t, 1) with slope -a and intercept a m, so
    a* = -Cov(x_t, u) / Var(x_t), m* = (mu - (-a*) mu/2) / a*, and the minimum is
    Var(u) - Cov^2 / Var(x_t), with Cov = (s^2 - 1)/2, Var(x_t) = (1 + mu^2 + s^2)/3 - mu^2/4,
    Var(u) = s^2 + 1. The 8-row product design t = 1/2 +- 1/sqrt(12), x0 = +-1, x1 = mu +- s has the
    population's first and second moments and independence, so the design's minimiser is exact.
    """
    mu, s = 2.0, 0.5
    cov, var_xt, var_u = (s * s - 1) / 2, (1 + mu * mu + s * s) / 3 - mu * mu / 4, s * s + 1
    a_star = -cov / var_xt
    m_star = (mu + a_star * mu / 2) / a_star
    minimum = var_u - cov * cov / var_xt
    rows = list(itertools.product([0.5 - 1 / math.sqrt(12), 0.5 + 1 / math.sqrt(12)], [-1.0, 1.0], [mu - s, mu + s]))
    t, x0, x1 = (torch.tensor(c, dtype=torch.float64) for c in zip(*rows))
    x0, x1 = x0[:, None], x1[:, None]
    em = EnergyMatching(epsilon_max=1.0)
    q = Quadratic(a_star, [m_star])
    loss = em.flow_loss(q, x1, x0, t)
    assert float(loss.detach()) == pytest.approx(minimum, rel=1e-12)
    ga, gm = torch.autograd.grad(loss, [q.a, q.m])
    assert abs(float(ga)) < 1e-12 and float(gm.abs().max()) < 1e-12
    # and a grid over the family finds nothing lower (the minimiser, 5.0, is not the data mean 2.0)
    assert m_star == pytest.approx(5.0) and a_star == pytest.approx(0.5)
    for da, dm in itertools.product([-0.05, 0.0, 0.05], [-0.2, 0.0, 0.2]):
        with torch.no_grad():
            other = float(em.flow_loss(Quadratic(a_star + da, [m_star + dm]), x1, x0, t))
        assert other >= minimum - 1e-12


def test_sampler_from_data_is_ula_at_the_final_temperature():
    """From t = 1 the chain is ULA on E = x^2/2 with step h = dt * eps_max: stationary variance 2/(2 - h)."""
    dt, eps = 0.5, 0.4
    h = dt * eps
    q = Quadratic(1.0, [0.0])
    x = energy_matching_sample(q, torch.zeros(40000, 1, dtype=torch.float64), 1.0, steps=60, dt=dt, tau_star=0.9,
                               epsilon_max=eps, generator=torch.Generator().manual_seed(0))
    # 40,000 chains: the sample variance's sd is about var * sqrt(2/40000) = 0.7 %
    assert float(x.var()) == pytest.approx(2 / (2 - h), rel=0.03)


def test_sampler_before_tau_star_is_deterministic_gradient_flow():
    q = Quadratic(1.0, [0.0])
    x0 = torch.tensor([[1.0]], dtype=torch.float64)
    # tau* = 1: zero temperature until t = 1; steps land on t = 0.5 then t = 1 (eps_max there)
    x = energy_matching_sample(q, x0, 0.0, steps=2, dt=0.1, tau_star=1.0, epsilon_max=0.5,
                               generator=torch.Generator().manual_seed(0))
    g = torch.Generator().manual_seed(0)
    torch.randn(1, 1, generator=g, dtype=torch.float64)  # the first step's noise, multiplied by 0
    want = 0.95 * 0.95 + math.sqrt(2 * 0.5 * 0.1) * float(torch.randn(1, 1, generator=g, dtype=torch.float64))
    assert float(x) == pytest.approx(want, rel=1e-12)


def test_phase_switch_after_warmup_and_its_count_in_the_state_dict():
    em = EnergyMatching(epsilon_max=0.1, cd_weight=0.5, warmup_steps=2, steps=2)
    net = MLPEnergy(2, (8,))
    x = torch.randn(4, 2, generator=torch.Generator().manual_seed(0))
    phases = [em(net, x, generator=torch.Generator().manual_seed(i)).metrics["phase"] for i in range(3)]
    assert phases == [1.0, 1.0, 2.0]
    twin = EnergyMatching(epsilon_max=0.1, cd_weight=0.5, warmup_steps=2, steps=2)
    assert twin.phase == 1
    twin.load_state_dict(em.state_dict())
    assert twin.phase == 2 and int(twin.calls) == 3
    assert EnergyMatching(cd_weight=0.0).phase == 1  # no CD term: phase 1 for ever


@pytest.mark.parametrize(("kwargs", "name"), [
    ({"epsilon_max": 0.0}, "epsilon_max"), ({"epsilon_max": float("nan")}, "epsilon_max"),
    ({"tau_star": 1.5}, "tau_star"), ({"cd_weight": -1.0}, "cd_weight"), ({"warmup_steps": -1}, "warmup_steps"),
    ({"steps": 0}, "steps"), ({"dt": 0.0}, "dt"), ({"data_start": 2.0}, "data_start"),
    ({"coupling": "sinkhorn"}, "coupling"), ({"noise_std": -1.0}, "noise_std"),
])
def test_bad_arguments_are_refused_naming_them(kwargs, name):
    with pytest.raises(ValueError, match=rf"^{name}: "):
        EnergyMatching(**kwargs)


def test_bad_flags_and_batches_are_refused_naming_them():
    with pytest.raises(TypeError, match=r"^flow_weighting: "):
        EnergyMatching(flow_weighting=1)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"^warmup_steps: "):
        EnergyMatching(warmup_steps=1.5)  # type: ignore[arg-type]
    em, net = EnergyMatching(), MLPEnergy(2, (4,))
    with pytest.raises(ValueError, match=r"^batch: expected at least one row"):
        em(net, torch.zeros(0, 2))
    with pytest.raises(TypeError, match=r"^batch: "):
        em(net, torch.zeros(3, 2, dtype=torch.long))
    x = torch.zeros(3, 2)
    with pytest.raises(ValueError, match=r"^x0: "):
        em.flow_loss(net, x, torch.zeros(3, 3), torch.zeros(3))
    with pytest.raises(ValueError, match=r"^t: "):
        em.flow_loss(net, x, x, torch.zeros(2))
    with pytest.raises(ValueError, match=r"^t_start: "):
        energy_matching_sample(net, x, 1.5, steps=1, dt=0.1, tau_star=0.5, epsilon_max=0.1)
