"""Inclusive-NRF: the generator's log-density and gradients against closed forms, the revision's stationary law on a
Gaussian energy with a linear-Gaussian generator (exact, by the discrete Lyapunov equation), and the loss and its
gradients against a row-by-row reference."""

from __future__ import annotations

import math

import pytest
import torch
from torch import Tensor, nn

from ebms.nets import GaussianEnergy, MLPEnergy
from ebms.objectives import InclusiveNRF, LatentGaussianGenerator, inclusive_nrf_revise

DTYPES = (torch.float32, torch.float64)
D, H = 2, 2
A = torch.tensor([[0.8, -0.3], [0.4, 0.9]], dtype=torch.float64)
BIAS = torch.tensor([0.5, -0.2], dtype=torch.float64)
MEAN = torch.tensor([1.0, -0.5], dtype=torch.float64)
PREC = torch.tensor([[1.5, 0.4], [0.4, 1.0]], dtype=torch.float64)


def _linear_generator(sigma: float, dtype: torch.dtype = torch.float64) -> LatentGaussianGenerator:
    """``g(h) = A h + b``: every density in sight is Gaussian."""
    net = nn.Linear(H, D).to(dtype)
    with torch.no_grad():
        net.weight.copy_(A)
        net.bias.copy_(BIAS)
    return LatentGaussianGenerator(net, H, D, sigma)


def _mlp_generator(dtype: torch.dtype, sigma: float = 0.4) -> LatentGaussianGenerator:
    torch.manual_seed(3)
    return LatentGaussianGenerator.mlp(D, latent_dim=3, hidden=(5,), activation="tanh", sigma=sigma).to(dtype)


@pytest.mark.parametrize("dtype", DTYPES)
def test_log_prob_equals_the_product_of_torch_normals(dtype):
    q = _mlp_generator(dtype)
    g = torch.Generator().manual_seed(0)
    h, x = torch.randn(6, 3, generator=g, dtype=dtype), torch.randn(6, D, generator=g, dtype=dtype)
    ref = (torch.distributions.Normal(0.0, 1.0).log_prob(h.double()).sum(1)
           + torch.distributions.Normal(q.double().mean(h.double()), q.sigma).log_prob(x.double()).sum(1))
    q = q.to(dtype)
    got = q.log_prob(h, x)
    assert got.shape == (6,) and got.dtype == dtype
    torch.testing.assert_close(got.double(), ref, rtol=1e-5 if dtype == torch.float32 else 1e-12, atol=1e-5)


def test_latent_gradient_matches_the_closed_form_and_finite_differences():
    q = _linear_generator(0.7)
    g = torch.Generator().manual_seed(1)
    h, x = torch.randn(5, H, generator=g, dtype=torch.float64), torch.randn(5, D, generator=g, dtype=torch.float64)
    mu, gh = q.grad_h(h, x)
    torch.testing.assert_close(mu, h @ A.T + BIAS)
    torch.testing.assert_close(gh, -h + (x - h @ A.T - BIAS) @ A / 0.49, rtol=1e-12, atol=1e-12)
    qm = _mlp_generator(torch.float64)
    h3 = torch.randn(5, 3, generator=g, dtype=torch.float64)
    _, gh3 = qm.grad_h(h3, x)
    eps = 1e-6
    for j in range(3):
        e = torch.zeros(3, dtype=torch.float64)
        e[j] = eps
        fd = (qm.log_prob(h3 + e, x) - qm.log_prob(h3 - e, x)).detach() / (2 * eps)
        torch.testing.assert_close(gh3[:, j], fd, rtol=1e-7, atol=1e-8)


def test_the_generator_loss_gradient_is_minus_the_log_density_gradient():
    q = _mlp_generator(torch.float64)
    g = torch.Generator().manual_seed(2)
    h, x = torch.randn(7, 3, generator=g, dtype=torch.float64), torch.randn(7, D, generator=g, dtype=torch.float64)
    params = list(q.parameters())
    a = torch.autograd.grad(q.regression_loss(h, x), params)
    b = torch.autograd.grad(-q.log_prob(h, x).mean(), params)
    for u, v in zip(a, b):
        torch.testing.assert_close(u, v, rtol=1e-12, atol=1e-14)


def _drift(delta_star: float, s2: float) -> tuple[Tensor, Tensor, Tensor]:
    """The revision's drift Delta(z) = F z + f + G eta* for z = (x, h) (l > 1), written out by hand."""
    kx, kh, kc = A.T / s2, -(torch.eye(H, dtype=torch.float64) + A.T @ A / s2), -A.T @ BIAS / s2  # d_h log q
    F = torch.zeros(D + H, D + H, dtype=torch.float64)
    F[:D, :D] = -PREC - delta_star * A @ kx / s2
    F[:D, D:] = -delta_star * A @ kh / s2
    F[D:, :D], F[D:, D:] = kx, kh
    f = torch.cat([PREC @ MEAN - delta_star * A @ kc / s2, kc])
    G = torch.zeros(D + H, H, dtype=torch.float64)
    G[:D] = -math.sqrt(2 * delta_star) * A / s2
    return F, f, G


def _stationary(delta: float, s2: float, revision: str, alpha: float = 0.3) -> tuple[Tensor, Tensor, Tensor]:
    """The exact stationary mean and covariance of the linear chain w' = M w + c + N xi; and M."""
    F, f, G = _drift(delta, s2)
    n = D + H
    eye = torch.eye(n, dtype=torch.float64)
    if revision == "sgld":
        M, c = eye + delta * F, delta * f
        N = torch.cat([delta * G, math.sqrt(2 * delta) * eye], 1)
    else:  # w = (z, v): v' = (1 - a) v + delta Delta + sqrt(2 a delta) eta, z' = z + v'
        M = torch.cat([torch.cat([eye + delta * F, (1 - alpha) * eye], 1), torch.cat([delta * F, (1 - alpha) * eye], 1)])
        c = torch.cat([delta * f, delta * f])
        row = torch.cat([delta * G, math.sqrt(2 * alpha * delta) * eye], 1)
        N = torch.cat([row, row])
    m = M.shape[0]
    mean = torch.linalg.solve(torch.eye(m, dtype=torch.float64) - M, c)
    vec = torch.linalg.solve(torch.eye(m * m, dtype=torch.float64) - torch.kron(M, M), (N @ N.T).reshape(-1))
    return mean, vec.reshape(m, m), M


def _target(s2: float) -> tuple[Tensor, Tensor]:
    """Mean and covariance of p(x) q(h | x): x ~ N(MEAN, PREC^-1), then h | x of the linear-Gaussian generator."""
    cov_x = torch.linalg.inv(PREC)
    cq = A @ A.T + s2 * torch.eye(D, dtype=torch.float64)
    K = A.T @ torch.linalg.inv(cq)  # E[h | x] = K (x - b), Cov[h | x] = I - K A
    mean = torch.cat([MEAN, K @ (MEAN - BIAS)])
    cov = torch.zeros(D + H, D + H, dtype=torch.float64)
    cov[:D, :D], cov[:D, D:] = cov_x, cov_x @ K.T
    cov[D:, :D], cov[D:, D:] = K @ cov_x, K @ cov_x @ K.T + torch.eye(H, dtype=torch.float64) - K @ A
    return mean, cov


@pytest.mark.parametrize("revision", ["sgld", "sghmc"])
def test_the_exact_stationary_x_marginal_approaches_p_theta_as_the_step_shrinks_but_h_given_x_does_not(revision):
    """Algorithm 8's x-marginal is the model's (up to the step's bias); its h given x is not q(h | x): the one-step
    h* sits next to h, so the correction cancels d_x log q(h, x) instead of adding d_x log q(h | x), and the latent
    lags behind x at every step size (the "biased tractable gradient" of Eq. 2.39)."""
    mean_t, cov_t = _target(0.5)
    errs, h_errs = [], []
    for delta in (1e-2, 1e-3):
        mean, cov, _ = _stationary(delta, 0.5, revision)
        errs.append(float((cov[:D, :D] - cov_t[:D, :D]).abs().max() + (mean[:D] - mean_t[:D]).abs().max()))
        h_errs.append(float((cov[:D + H, :D + H] - cov_t).abs().max()))
    assert errs[1] < 0.2 * errs[0] and errs[1] < 2e-3, errs
    assert min(h_errs) > 0.1, h_errs  # the joint stays away from p(x) q(h | x)


@pytest.mark.slow  # 20,000 chains x 400 steps, ~15 s on one thread
@pytest.mark.parametrize("revision", ["sgld", "sghmc"])
def test_the_revision_samples_its_exact_stationary_law(revision):
    """20,000 independent chains of Algorithm 8 against the closed form of the chain's own stationary law."""
    delta, s2, alpha, n = 0.05, 0.5, 0.3, 20000
    mean, cov, M = _stationary(delta, s2, revision, alpha)
    steps = 400
    assert float(torch.linalg.eigvals(M).abs().max()) ** steps < 1e-6  # the start is forgotten
    energy = GaussianEnergy(D, mean=MEAN, precision=PREC, learnable=False)
    q = _linear_generator(math.sqrt(s2))
    g = torch.Generator().manual_seed(0)
    h0, x0 = q.sample(n, generator=g, dtype=torch.float64)
    x, h, bad = inclusive_nrf_revise(energy, q, x0, h0, steps=steps, step_size=delta, revision=revision,
                                     friction=alpha, generator=g)
    assert float(bad) == 0.0
    z = torch.cat([x, h], 1)
    mean, cov = mean[:D + H], cov[:D + H, :D + H]
    sd = cov.diagonal().sqrt()
    assert ((z.mean(0) - mean).abs() < 5 * sd / math.sqrt(n)).all(), (z.mean(0), mean)
    emp = torch.cov(z.T)
    se = ((torch.outer(cov.diagonal(), cov.diagonal()) + cov.pow(2)) / n).sqrt()
    assert ((emp - cov).abs() < 5 * se).all(), (emp, cov)


def _reference(obj: InclusiveNRF, energy: nn.Module, pos: Tensor, seed: int) -> Tensor:
    """The objective's loss written out row by row, from the same draws in the same order."""
    q, B, dt = obj.q, pos.shape[0], pos.dtype
    g = torch.Generator().manual_seed(seed)
    h_all = torch.randn(B, q.latent_dim, generator=g, dtype=dt)
    with torch.no_grad():
        mu0 = q.mean(h_all)
    x_all = mu0 + q.sigma * torch.randn(mu0.shape, generator=g, dtype=dt)
    noise = []
    for step in range(obj.steps):
        star = torch.randn(B, q.latent_dim, generator=g, dtype=dt) if step else None
        noise.append((star, torch.randn(B, D, generator=g, dtype=dt), torch.randn(B, q.latent_dim, generator=g, dtype=dt)))
    d, s2 = obj.step_size, q.sigma**2
    xs, hs = [], []
    for i in range(B):
        x, h = x_all[i].clone(), h_all[i].clone()
        for star, ex, eh in noise:
            xg = x.clone().requires_grad_(True)
            (ge,) = torch.autograd.grad(energy(xg[None]).sum(), xg)
            jac = torch.autograd.functional.jacobian(lambda v: q.mean(v[None])[0], h)  # (D, d_h)
            mu = q.mean(h[None])[0].detach()
            gh = -h + jac.T @ (x - mu) / s2
            hstar = h if star is None else h + d * gh + math.sqrt(2 * d) * star[i]
            shift = (mu - q.mean(hstar[None])[0].detach()) / s2
            x, h = x + d * (-ge + shift) + math.sqrt(2 * d) * ex[i], h + d * gh + math.sqrt(2 * d) * eh[i]
        xs.append(x.detach())
        hs.append(h.detach())
    e_pos = sum(energy(pos[i][None])[0] for i in range(B)) / B
    e_neg = sum(energy(xs[i][None])[0] for i in range(B)) / B
    reg = sum((xs[i] - q.mean(hs[i][None])[0]).pow(2).sum() / (2 * s2) for i in range(B)) / B
    return e_pos - e_neg + obj.generator_weight * reg


@pytest.mark.parametrize("dtype", DTYPES)
def test_loss_and_gradients_match_the_row_by_row_reference(dtype):
    torch.manual_seed(0)
    energy = MLPEnergy(D, (6,), activation="tanh").to(dtype)
    obj = InclusiveNRF(_mlp_generator(dtype), steps=3, step_size=0.02, generator_weight=0.7)
    pos = torch.randn(5, D, generator=torch.Generator().manual_seed(9), dtype=dtype)
    out = obj(energy, pos, generator=torch.Generator().manual_seed(4))
    params = [*energy.parameters(), *obj.parameters()]
    got = torch.autograd.grad(out.loss, params)
    ref_loss = _reference(obj, energy, pos, 4)
    ref = torch.autograd.grad(ref_loss, params)
    tol = {"rtol": 2e-4, "atol": 2e-5} if dtype == torch.float32 else {"rtol": 1e-10, "atol": 1e-12}
    torch.testing.assert_close(out.loss.detach(), ref_loss.detach(), **tol)
    for a, b in zip(got, ref):
        torch.testing.assert_close(a, b, **tol)
    assert out.negatives is not None and out.negatives.dtype == dtype
    assert out.metrics["gap"] == pytest.approx(out.metrics["e_neg"] - out.metrics["e_pos"], abs=1e-5)


def test_only_the_generator_term_reaches_the_generator_and_only_the_contrast_the_energy():
    torch.manual_seed(0)
    energy = MLPEnergy(D, (6,))
    obj = InclusiveNRF(_mlp_generator(torch.float32), steps=2, step_size=0.01)
    pos = torch.randn(8, D)
    out = obj(energy, pos, generator=torch.Generator().manual_seed(1))
    out.loss.backward()
    gen_grads = [p.grad.clone() for p in obj.parameters()]
    x, e_grads = out.negatives, [p.grad.clone() for p in energy.parameters()]
    energy.zero_grad()
    (energy(pos).mean() - energy(x).mean()).backward()
    for a, p in zip(e_grads, energy.parameters()):
        torch.testing.assert_close(a, p.grad)
    assert all(bool(gg.abs().sum() > 0) for gg in gen_grads)


def test_sgld_and_sghmc_differ_and_each_repeats_from_the_generator():
    energy = GaussianEnergy(D, mean=MEAN, precision=PREC, learnable=False)
    q = _linear_generator(0.7)
    h0, x0 = q.sample(4, generator=torch.Generator().manual_seed(0))
    runs = {r: [inclusive_nrf_revise(energy, q, x0, h0, steps=3, step_size=0.1, revision=r,
                                     generator=torch.Generator().manual_seed(5))[0] for _ in range(2)]
            for r in ("sgld", "sghmc")}
    assert torch.equal(*runs["sgld"]) and torch.equal(*runs["sghmc"])
    assert not torch.allclose(runs["sgld"][0], runs["sghmc"][0])


def test_a_row_whose_move_is_not_finite_stays_and_is_counted():
    class Cliff(nn.Module):  # finite energy, infinite gradient on the first row's side
        def forward(self, x: Tensor) -> Tensor:
            return torch.where(x[:, 0] > 50, x[:, 0] * 1e308 * 10, 0.5 * x.pow(2).sum(1))

    q = _linear_generator(0.7)
    x0 = torch.tensor([[100.0, 0.0], [0.0, 0.0]], dtype=torch.float64)
    h0 = torch.zeros(2, H, dtype=torch.float64)
    x, _, bad = inclusive_nrf_revise(Cliff(), q, x0, h0, steps=2, step_size=0.1, generator=torch.Generator().manual_seed(0))
    assert torch.equal(x[0], x0[0]) and not torch.equal(x[1], x0[1]) and float(bad) == pytest.approx(0.5)


@pytest.mark.parametrize(("call", "match"), [
    (lambda: LatentGaussianGenerator(nn.Linear(2, 2), 0, 2, 0.1), r"^latent_dim\b"),
    (lambda: LatentGaussianGenerator(nn.Linear(2, 2), 2, 2, 0.0), r"^sigma\b"),
    (lambda: LatentGaussianGenerator("net", 2, 2, 0.1), r"^net\b"),  # type: ignore[arg-type]
    (lambda: LatentGaussianGenerator(nn.Linear(2, 2), 2, (0,), 0.1), r"^event_shape\b"),
    (lambda: InclusiveNRF(_linear_generator(0.5), steps=0), r"^steps\b"),
    (lambda: InclusiveNRF(_linear_generator(0.5), step_size=-1.0), r"^step_size\b"),
    (lambda: InclusiveNRF(_linear_generator(0.5), revision="hmc"), r"^revision\b"),
    (lambda: InclusiveNRF(_linear_generator(0.5), friction=0.0), r"^friction\b"),
    (lambda: InclusiveNRF(_linear_generator(0.5), generator_weight=0.0), r"^generator_weight\b"),
    (lambda: InclusiveNRF(nn.Linear(2, 2)), r"^generator_net\b"),  # type: ignore[arg-type]
    (lambda: InclusiveNRF(_linear_generator(0.5))(GaussianEnergy(3), torch.zeros(4, 3, dtype=torch.float64)),
     r"^batch: expected shape \(B, 2\)"),
    (lambda: inclusive_nrf_revise(GaussianEnergy(2), _linear_generator(0.5), torch.zeros(4, 2), torch.zeros(4, 3),
                                  steps=1, step_size=0.1), r"^h: expected shape \(4, 2\)"),
    (lambda: LatentGaussianGenerator(nn.Linear(2, 3), 2, 2, 0.1).mean(torch.zeros(4, 2)), r"^net: expected an output"),
])
def test_bad_arguments_are_refused_naming_them(call, match):
    with pytest.raises((ValueError, TypeError), match=match):
        call()
