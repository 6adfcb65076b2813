"""Diffusion recovery likelihood: Gaussian conditionals, sampler moments, loss gradient."""

from __future__ import annotations

import math

import pytest
import torch
from torch import Tensor, nn

from ebms.objectives.recovery import RecoveryLikelihood, recovery_sample

SIGMAS = [0.3, 0.5]


class QuadraticLevels(nn.Module):
    """``E(y, t) = a_t / 2 * ||y - mu||^2`` with a learnable precision per level."""

    def __init__(self, a: list[float], mu: list[float], dtype: torch.dtype = torch.float64) -> None:
        super().__init__()
        self.a = nn.Parameter(torch.tensor(a, dtype=dtype))
        self.mu = torch.tensor(mu, dtype=dtype)
        self.event_shape = (len(mu),)

    def forward(self, y: Tensor, t: Tensor) -> Tensor:
        return 0.5 * self.a[t] * (y - self.mu).pow(2).sum(-1)


def _gaussian_conditional(a: float, mu: Tensor, noisy: Tensor, sigma: float) -> tuple[Tensor, float]:
    """Mean and variance of exp(-a/2 |y - mu|^2 - |noisy - y|^2 / (2 sigma^2))."""
    prec = a + 1 / sigma**2
    return (a * mu + noisy / sigma**2) / prec, 1 / prec


def test_conditional_energy_is_the_closed_form_gaussian_up_to_a_constant() -> None:
    model = QuadraticLevels([2.0, 0.5], [0.3, -0.2])
    obj = RecoveryLikelihood(SIGMAS)
    g = torch.Generator().manual_seed(0)
    t = torch.tensor([0, 1, 1, 0])
    noisy = torch.randn(4, 2, generator=g, dtype=torch.float64)
    cond = obj.conditional(model, noisy, t)
    y1, y2 = torch.randn(4, 2, generator=g, dtype=torch.float64), torch.randn(4, 2, generator=g, dtype=torch.float64)
    for i in range(4):
        a, s = float(model.a.detach()[t[i]]), SIGMAS[int(t[i])]
        m, v = _gaussian_conditional(a, model.mu, noisy[i], s)
        want = ((y1[i] - m).pow(2).sum() - (y2[i] - m).pow(2).sum()) / (2 * v)
        got = cond(y1[i : i + 1].expand(4, 2))[i] - cond(y2[i : i + 1].expand(4, 2))[i]
        torch.testing.assert_close(got, want, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_langevin_draws_match_the_conditional_moments(dtype: torch.dtype) -> None:
    model = QuadraticLevels([2.0, 0.5], [0.3, -0.2], dtype=dtype)
    b, n = 0.5, 3000
    obj = RecoveryLikelihood(SIGMAS, k=120, b=b)
    g = torch.Generator().manual_seed(11)
    noisy_by_level = torch.tensor([[0.8, -0.4], [-1.0, 0.6]], dtype=dtype)
    t = torch.arange(2).repeat_interleave(n)
    noisy = noisy_by_level[t]
    y, accept, bad = obj.sample_conditional(model, noisy, t, generator=g)
    assert float(accept) == 1.0 and float(bad) == 0.0
    for level in range(2):
        rows = y[t == level].double()
        s = SIGMAS[level]
        m, v = _gaussian_conditional(
            float(model.a.detach()[level]), model.mu.double(), noisy_by_level[level].double(), s
        )
        # ULA on a Gaussian of variance v with step eps = b s^2 (1 - s^2) is exact in the mean and
        # has stationary variance v / (1 - eps / (4 v)); after k = 120 steps the start is forgotten
        # (contraction (1 - eps / (2 v))^120 < 1e-8).
        eps = b * s**2 * (1 - s**2)
        v_ula = v / (1 - eps / (4 * v))
        # n independent chains; z = 4 two-sided (failure 6e-5 per check, 8 checks)
        mean_z = (rows.mean(0) - m).abs() / math.sqrt(v_ula / n)
        var_z = (rows.var(0) - v_ula).abs() / (v_ula * math.sqrt(2 / (n - 1)))
        assert float(mean_z.max()) < 4, mean_z
        assert float(var_z.max()) < 4, var_z


def test_noisy_pairs_follow_the_variance_preserving_marginals() -> None:
    obj = RecoveryLikelihood(SIGMAS, k=1)
    torch.testing.assert_close(obj.alpha_bar, torch.tensor([1.0, 1 - 0.3**2], dtype=torch.float64))
    model = QuadraticLevels([1.0, 1.0], [0.0])
    n = 4000
    p = obj.pairs(model, torch.zeros(n, 1, dtype=torch.float64), generator=torch.Generator().manual_seed(5))
    for level in range(2):
        sel = p.t == level
        ab, s = float(obj.alpha_bar[level]), SIGMAS[level]
        var_pos = (1 - s**2) * (1 - ab)
        var_noisy = 1 - ab * (1 - s**2)  # = 1 - alpha_bar_{t+1}
        for x, v in ((p.positives[sel], var_pos), (p.noisy[sel], var_noisy)):
            m = int(sel.sum())
            if v == 0:
                assert bool((x == 0).all())
                continue
            # mean 0 and variance v; z = 4 (failure 6e-5 per check)
            assert abs(float(x.mean())) < 4 * math.sqrt(v / m)
            assert abs(float(x.var()) - v) < 4 * v * math.sqrt(2 / (m - 1))


def test_loss_and_gradient_equal_the_hand_computation() -> None:
    model = QuadraticLevels([1.5, 0.7], [0.1, 0.0])
    obj = RecoveryLikelihood(SIGMAS, k=4)
    x = torch.randn(6, 2, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    p = obj.pairs(model, x, generator=torch.Generator().manual_seed(2))
    out = obj(model, x, generator=torch.Generator().manual_seed(2))
    assert out.negatives is not None and torch.equal(out.negatives, p.negatives)
    out.loss.backward()
    sq_pos = (p.positives - model.mu).pow(2).sum(-1)
    sq_neg = (p.negatives - model.mu).pow(2).sum(-1)
    a = model.a.detach()[p.t]
    torch.testing.assert_close(out.loss.detach(), (0.5 * a * (sq_pos - sq_neg)).mean())
    # dL/da_l = (1/B) sum over rows at level l of (|y+ - mu|^2 - |y- - mu|^2) / 2
    want = torch.stack([(0.5 * (sq_pos - sq_neg) * (p.t == lv)).sum() / 6 for lv in range(2)])
    assert model.a.grad is not None
    torch.testing.assert_close(model.a.grad, want)
    assert out.metrics["gap"] == pytest.approx(out.metrics["e_neg"] - out.metrics["e_pos"])
    assert sorted(out.metrics) == ["accept", "e_neg", "e_pos", "gap", "loss", "nonfinite"]


def test_a_step_size_function_replaces_the_b_rule() -> None:
    obj = RecoveryLikelihood(SIGMAS, step_size_fn=lambda s: 0.01 * s)
    torch.testing.assert_close(
        obj.step_sizes(torch.tensor([0, 1]), torch.float64), torch.tensor([0.003, 0.005], dtype=torch.float64)
    )
    default = RecoveryLikelihood(SIGMAS, b=0.2)  # b sigma^2 (1 - sigma^2) = 0.2 * 0.25 * 0.75
    torch.testing.assert_close(default.step_sizes(torch.tensor([1]), torch.float32), torch.tensor([0.0375]))


class UnitGaussianLevels(nn.Module):
    """The exact level energies for data ``N(0, I)``: every ``x_t ~ N(0, I)``, so ``y_t ~ N(0, (1 - s^2) I)``."""

    def __init__(self, sigmas: list[float], dim: int) -> None:
        super().__init__()
        self.var = torch.tensor([1 - s**2 for s in sigmas], dtype=torch.float64)
        self.event_shape = (dim,)

    def forward(self, y: Tensor, t: Tensor) -> Tensor:
        return 0.5 * y.pow(2).sum(-1) / self.var.to(y.dtype)[t]


def test_progressive_sampling_of_the_exact_model_ends_at_the_data_distribution() -> None:
    # Data N(0, I): with the exact level energies the conditional y_t | x_{t+1} is Gaussian with
    # mean (1 - s^2) x_{t+1} and variance v = s^2 (1 - s^2) (s = sigma_{t+1}). k ULA steps of size
    # eps from y = x_{t+1} give, per coordinate, y_k = (1 - s^2 + r^k s^2) x_{t+1} + noise of variance
    # eps (1 - r^(2k)) / (1 - r^2), r = 1 - eps / (2 v); so Var(x_t) = Var(y_k) / (1 - s^2) follows
    # exactly from Var(x_T) = 1. A schedule that ends near pure noise (0.99), as recovery_sample's
    # N(0, I) start needs: with the former step rule b s^2 the top level had r = 1 - b / (2 (1 - s^2))
    # = -11.6 at b = 0.5, and the chains diverged. r = 1 - b / 2 = 0.75 at every level here, so 40
    # steps forget the start (r^40 ~ 1e-5; an unforgotten start is amplified by 1 / sqrt(1 - s^2)).
    sigmas, k, b, n, dim = [0.1, 0.4, 0.8, 0.99], 40, 0.5, 4000, 2
    model = UnitGaussianLevels(sigmas, dim)
    x = recovery_sample(model, sigmas, n, k=k, b=b, generator=torch.Generator().manual_seed(3), dtype=torch.float64)
    var = 1.0
    for s in reversed(sigmas):
        v, eps = s**2 * (1 - s**2), b * s**2 * (1 - s**2)
        r = 1 - eps / (2 * v)
        assert abs(r) < 1
        var = ((1 - s**2 + r**k * s**2) ** 2 * var + eps * (1 - r ** (2 * k)) / (1 - r**2)) / (1 - s**2)
    assert 1.0 < var < 1.3, var  # the ULA bias: a little wider than the data
    # mean 0 and variance var per coordinate, n independent rows; z = 4 (failure 6e-5 per check, 4 checks)
    mean_z = x.mean(0).abs() / math.sqrt(var / n)
    var_z = (x.var(0) - var).abs() / (var * math.sqrt(2 / (n - 1)))
    assert float(mean_z.max()) < 4, mean_z
    assert float(var_z.max()) < 4, (x.var(0), var)


def test_the_default_step_is_stable_on_the_exact_top_level_conditional() -> None:
    # The conditional at sigma = 0.99 for data N(0, I) has variance v = s^2 (1 - s^2) ~ 0.0197; one
    # ULA step contracts by r = 1 - eps / (2 v) = 1 - b / 2 for any sigma (b = 0.1 here), so the
    # draws stay finite and match the conditional (mean (1 - s^2) x, variance v / (1 - b / 4)).
    s, b, n = 0.99, 0.1, 4000
    model = UnitGaussianLevels([s], 1)
    obj = RecoveryLikelihood([s], k=300, b=b)
    noisy = torch.full((n, 1), 1.5, dtype=torch.float64)
    y, _, bad = obj.sample_conditional(model, noisy, torch.zeros(n, dtype=torch.long), generator=torch.Generator().manual_seed(4))
    assert float(bad) == 0.0 and bool(torch.isfinite(y).all())
    m, v_ula = (1 - s**2) * 1.5, s**2 * (1 - s**2) / (1 - b / 4)
    assert abs(float(y.mean()) - m) < 4 * math.sqrt(v_ula / n)
    assert abs(float(y.var()) - v_ula) < 4 * v_ula * math.sqrt(2 / (n - 1))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_recovery_sample_is_reproducible_and_shaped(dtype: torch.dtype) -> None:
    model = QuadraticLevels([1.0, 1.0], [0.0, 0.0], dtype=dtype)
    a = recovery_sample(model, SIGMAS, 7, k=5, generator=torch.Generator().manual_seed(0), dtype=dtype)
    b = recovery_sample(model, SIGMAS, 7, k=5, generator=torch.Generator().manual_seed(0), dtype=dtype)
    assert a.shape == (7, 2) and a.dtype == dtype and torch.equal(a, b)
    assert bool(torch.isfinite(a).all())
    levels = recovery_sample(model, SIGMAS, 7, k=5, generator=torch.Generator().manual_seed(0), dtype=dtype,
                             keep_levels=True)
    assert levels.shape == (3, 7, 2) and torch.equal(levels[-1], a)  # x_T, x_1, x_0: the samples last
    start = torch.randn((7, 2), generator=torch.Generator().manual_seed(0), dtype=dtype)
    assert torch.equal(levels[0], start)  # the noise it started from


def test_bad_arguments_name_themselves() -> None:
    with pytest.raises(ValueError, match=r"sigmas: expected every level in \(0, 1\); got \[0.5, 1.0\]"):
        RecoveryLikelihood([0.5, 1.0])
    with pytest.raises(
        ValueError, match=r"sigmas: expected a non-empty 1-D sequence of noise levels; got shape \(0,\)"
    ):
        RecoveryLikelihood([])
    with pytest.raises(ValueError, match="k: expected an int >= 1; got 0"):
        RecoveryLikelihood(SIGMAS, k=0)
    with pytest.raises(ValueError, match="b: expected a finite number > 0; got 0"):
        RecoveryLikelihood(SIGMAS, b=0)
    with pytest.raises(TypeError, match="step_size_fn: expected a callable"):
        RecoveryLikelihood(SIGMAS, step_size_fn=3)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"step_size_fn: expected finite positive step sizes of shape \(2,\)"):
        RecoveryLikelihood(SIGMAS, step_size_fn=lambda s: -s).step_sizes(torch.tensor([0, 1]), torch.float32)
    obj = RecoveryLikelihood(SIGMAS)
    model = QuadraticLevels([1.0, 1.0], [0.0, 0.0])
    noisy = torch.zeros(2, 2, dtype=torch.float64)
    with pytest.raises(ValueError, match=r"t: expected levels in \[0, 1\]; got min 0, max 2"):
        obj.conditional(model, noisy, torch.tensor([0, 2]))
    with pytest.raises(ValueError, match=r"t: expected a LongTensor of shape \(2,\)"):
        obj.conditional(model, noisy, torch.tensor([0.0, 1.0]))
    with pytest.raises(ValueError, match="event_shape: expected a shape, or a model with an event_shape attribute"):
        recovery_sample(lambda x, t: x.sum(-1), SIGMAS, 2)
    with pytest.raises(ValueError, match=r"n: expected an int >= 1; got 0"):
        recovery_sample(model, SIGMAS, 0)
    with pytest.raises(ValueError, match=r"model\(x, t\): expected energies of shape \(4,\)"):
        obj(lambda y, t: y.sum(-1) if y.shape[0] == 2 else y.sum()[None], noisy)
    with pytest.raises(ValueError, match="batch: expected at least one row"):
        obj(model, torch.zeros(0, 2))



# --- the authors' protocol: scaled energy, unconditional top level, per-level steps and weights ---


def test_gao_levels_and_steps_follow_the_ddpm_schedule_they_are_cut_from() -> None:
    from ebms.objectives.recovery import gao_sigmas, gao_step_sizes

    betas = [1e-4 + (0.02 - 1e-4) * i / 999 for i in range(1000)]
    s = gao_sigmas(6)
    cuts = [0, 100, 200, 300, 400, 500, 999]  # 1000 // (2 * 5) = 100
    for t in range(6):
        keep = math.prod(1 - b for b in betas[cuts[t] + 1: cuts[t + 1] + 1])
        assert float(s[t]) == pytest.approx(math.sqrt(1 - keep), rel=1e-12)
    # all levels together: every DDPM step but the first (the authors' x_0 noise)
    assert float(torch.prod(1 - s**2)) == pytest.approx(math.prod(1 - b for b in betas[1:]), rel=1e-9)
    torch.testing.assert_close(s, torch.tensor([0.3237, 0.5165, 0.6322, 0.7132, 0.7734, 0.9997], dtype=torch.float64),
                               rtol=0, atol=5e-5)
    # eps_t = b s_{t+1}^2 sqrt(1 - (1 - first^2) alpha_bar_t) / first, by hand for two levels
    eps = gao_step_sizes([0.3, 0.5], b=2e-4, first=0.01)
    want = [2e-4 * 0.09 * 0.01 / 0.01, 2e-4 * 0.25 * math.sqrt(1 - (1 - 1e-4) * 0.91) / 0.01]
    torch.testing.assert_close(eps, torch.tensor(want, dtype=torch.float64), rtol=1e-12, atol=0)


def test_the_scaled_conditional_is_the_closed_form_gaussian_of_energy_over_step() -> None:
    model = QuadraticLevels([2.0, 0.5], [0.3, -0.2])
    steps = [0.01, 0.04]
    obj = RecoveryLikelihood(SIGMAS, step_sizes=steps, scaled=True)
    g = torch.Generator().manual_seed(0)
    t = torch.tensor([0, 1, 1, 0])
    noisy = torch.randn(4, 2, generator=g, dtype=torch.float64)
    cond = obj.conditional(model, noisy, t)
    y1, y2 = torch.randn(4, 2, generator=g, dtype=torch.float64), torch.randn(4, 2, generator=g, dtype=torch.float64)
    torch.testing.assert_close(obj.step_sizes(t, torch.float64), torch.tensor([0.01, 0.04, 0.04, 0.01], dtype=torch.float64))
    for i in range(4):
        lv = int(t[i])
        a, s = float(model.a.detach()[lv]) / steps[lv], SIGMAS[lv]  # E / eps: precision a / eps
        m, v = _gaussian_conditional(a, model.mu, noisy[i], s)
        want = ((y1[i] - m).pow(2).sum() - (y2[i] - m).pow(2).sum()) / (2 * v)
        got = cond(y1[i : i + 1].expand(4, 2))[i] - cond(y2[i : i + 1].expand(4, 2))[i]
        torch.testing.assert_close(got, want, rtol=1e-12, atol=1e-12)


def test_an_unconditional_top_level_has_no_pull_no_scaling_and_samples_its_energy() -> None:
    # Top level (t = 1) with marginal_top: the conditional is E(y, 1) / eps alone, the positives are
    # x_1 itself, and the sampler returns y unscaled. For E = a/2 |y - mu|^2 the scaled ULA step is
    # y' = y - (a/2)(y - mu) + sqrt(eps) xi: stationary mean mu, variance eps / (a (1 - a/4)).
    a, mu, eps, n = 0.5, [0.3, -0.2], 0.02, 4000
    model = QuadraticLevels([1.0, a], mu)
    obj = RecoveryLikelihood(SIGMAS, k=200, step_sizes=[0.01, eps], scaled=True, marginal_top=True)
    noisy = torch.full((n, 2), 2.0, dtype=torch.float64)
    t = torch.ones(n, dtype=torch.long)
    y, _, bad = obj.sample_conditional(model, noisy, t, generator=torch.Generator().manual_seed(7))
    assert float(bad) == 0.0
    v = eps / (a * (1 - a / 4))
    assert float(((y.mean(0) - torch.tensor(mu, dtype=torch.float64)).abs() / math.sqrt(v / n)).max()) < 4
    assert float(((y.var(0) - v).abs() / (v * math.sqrt(2 / (n - 1)))).max()) < 4
    torch.testing.assert_close(obj.scales(torch.tensor([0, 1]), torch.float64),
                               torch.tensor([math.sqrt(1 - 0.09), 1.0], dtype=torch.float64))
    x0 = torch.randn(3000, 2, generator=torch.Generator().manual_seed(8), dtype=torch.float64)
    p = obj.pairs(model, x0, generator=torch.Generator().manual_seed(9))
    top = p.t == 1
    # positives at the top level are x_1 = sqrt(1 - 0.09) x_0 + 0.3 e (variance 1), unscaled
    assert abs(float(p.positives[top].var()) - 1.0) < 4 * math.sqrt(2 / (int(top.sum()) - 1))
    x = recovery_sample(model, SIGMAS, 5, k=3, step_sizes=[0.01, eps], scaled=True, marginal_top=True,
                        generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    assert x.shape == (5, 2) and bool(torch.isfinite(x).all())


def test_level_weights_weight_each_rows_loss_and_gradient() -> None:
    model = QuadraticLevels([1.5, 0.7], [0.1, 0.0])
    w = [1.0, 0.25]
    obj = RecoveryLikelihood(SIGMAS, k=4, level_weights=w)
    x = torch.randn(6, 2, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    p = obj.pairs(model, x, generator=torch.Generator().manual_seed(2))
    out = obj(model, x, generator=torch.Generator().manual_seed(2))
    out.loss.backward()
    d = 0.5 * ((p.positives - model.mu).pow(2).sum(-1) - (p.negatives - model.mu).pow(2).sum(-1))
    wt = torch.tensor(w, dtype=torch.float64)[p.t]
    torch.testing.assert_close(out.loss.detach(), (wt * model.a.detach()[p.t] * d).mean())
    want = torch.stack([(wt * d * (p.t == lv)).sum() / 6 for lv in range(2)])
    torch.testing.assert_close(model.a.grad, want)
    assert out.metrics["e_pos"] == pytest.approx(float((0.5 * model.a.detach()[p.t] *
                                                         (p.positives - model.mu).pow(2).sum(-1)).mean()))


def test_the_authors_options_reject_bad_values_by_name() -> None:
    from ebms.objectives.recovery import gao_sigmas, gao_step_sizes

    with pytest.raises(ValueError, match="step_sizes: expected either step_sizes or step_size_fn, not both"):
        RecoveryLikelihood(SIGMAS, step_sizes=[0.1, 0.1], step_size_fn=lambda s: s)
    with pytest.raises(ValueError, match=r"step_sizes: expected 2 finite positive values, one per level; got \[0.1\]"):
        RecoveryLikelihood(SIGMAS, step_sizes=[0.1])
    with pytest.raises(ValueError, match=r"level_weights: expected 2 finite positive values"):
        RecoveryLikelihood(SIGMAS, level_weights=[1.0, 0.0])
    with pytest.raises(TypeError, match="scaled: expected True or False; got 1"):
        RecoveryLikelihood(SIGMAS, scaled=1)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="marginal_top: expected True or False"):
        RecoveryLikelihood(SIGMAS, marginal_top="yes")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="n_levels: expected an int >= 2; got 1"):
        gao_sigmas(1)
    with pytest.raises(ValueError, match="first: expected the noise of x_0 in"):
        gao_step_sizes(SIGMAS, first=1.5)


def test_protocol_options_spell_out_each_protocol() -> None:
    from ebms.objectives.recovery import gao_step_sizes, protocol_options

    assert protocol_options("plain", SIGMAS, 0.1) == {"b": 0.1}
    gao = protocol_options("gao", SIGMAS, 2e-4)
    assert set(gao) == {"step_sizes", "scaled", "marginal_top", "level_weights"} and gao["scaled"] and gao["marginal_top"]
    torch.testing.assert_close(gao["step_sizes"], gao_step_sizes(SIGMAS, b=2e-4))
    torch.testing.assert_close(gao["level_weights"], torch.tensor([1.0, 0.6], dtype=torch.float64))
    assert "level_weights" not in protocol_options("gao", SIGMAS, 2e-4, weights=False)
    RecoveryLikelihood(SIGMAS, **gao)  # what the objective accepts
    with pytest.raises(ValueError, match="name: expected one of plain, gao; got 'paper'"):
        protocol_options("paper", SIGMAS, 0.1)
