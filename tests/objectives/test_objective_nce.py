"""NCE: the worked decision boundary, loss formula, Gaussian recovery of mean, precision and log Z.

The Gaussian noise model's own tests moved to tests/distributions/test_dist_gaussian.py.
"""

from __future__ import annotations

import itertools
import math

import pytest
import torch
import torch.nn.functional as F
from _objective_fit import (
    DTYPE,
    TRUE_COV,
    TRUE_MEAN,
    check_fit,
    fit,
    gaussian_data,
    new_energy,
    precision_theta,
    theta_of,
    unpack,
)

from ebms.distributions import Gaussian
from ebms.energy import from_fn
from ebms.nets import GaussianEnergy, GaussianMixtureEnergy
from ebms.objectives import NCE


def _bisect(f, lo: float, hi: float, iters: int = 60) -> float:
    flo = f(lo)
    for _ in range(iters):
        mid = 0.5 * (lo + hi)
        fm = f(mid)
        if (fm > 0) == (flo > 0):
            lo, flo = mid, fm
        else:
            hi = mid
    return 0.5 * (lo + hi)


def test_decision_boundary_matches_worked_example():
    # Course notes, "Example 3: NCE Logit": E = x^2/2, q = N(0, 4), nu = 1, zeta = 0 -> roots at +-2.073.
    nce = NCE(Gaussian([0.0], 4.0).double(), nu=1.0, log_z_init=0.0)
    energy = from_fn(lambda x: 0.5 * (x**2).sum(-1))

    def G(t: float) -> float:
        with torch.no_grad():
            return float(nce.logit(energy, torch.tensor([[t]], dtype=DTYPE)))

    closed = math.sqrt(8.0 / 3.0 * math.log(2 * math.sqrt(2 * math.pi)))
    assert closed == pytest.approx(2.073, abs=1e-3)
    assert G(0.0) > 0 and G(5.0) < 0  # data-like centre, noise-like tails
    assert _bisect(G, 0.0, 5.0) == pytest.approx(closed, abs=1e-6)
    assert _bisect(G, -5.0, 0.0) == pytest.approx(-closed, abs=1e-6)


def test_loss_and_metrics_match_formula():
    noise = Gaussian([0.0, 0.0], 2.0)
    nce = NCE(noise, nu=2.0, log_z_init=0.3)
    energy = GaussianEnergy(2, mean=[0.5, 0.0])
    x = torch.randn(10, 2, generator=torch.Generator().manual_seed(0))
    out = nce(energy, x, generator=torch.Generator().manual_seed(1))
    y = noise.sample(20, generator=torch.Generator().manual_seed(1))
    torch.testing.assert_close(out.negatives, y)

    def logit(z):
        return -energy(z) - 0.3 - noise.log_prob(z) - math.log(2.0)

    gx, gy = logit(x), logit(y)
    expected = F.softplus(-gx).mean() + 2.0 * F.softplus(gy).mean()
    torch.testing.assert_close(out.loss, expected)
    acc = ((gx > 0).sum() + (gy <= 0).sum()).item() / 30
    m = out.metrics
    assert m["accuracy"] == pytest.approx(acc)
    assert m["log_z"] == pytest.approx(0.3)
    assert m["e_pos"] == pytest.approx(energy(x).mean().item(), rel=1e-6)
    assert m["e_neg"] == pytest.approx(energy(y).mean().item(), rel=1e-6)
    assert m["gap"] == pytest.approx(m["e_neg"] - m["e_pos"], abs=1e-6)


def test_log_z_is_a_parameter_in_state_dict_and_gets_gradient():
    nce = NCE(Gaussian([0.0, 0.0], 2.0), log_z_init=1.5)
    assert [n for n, _ in nce.named_parameters()] == ["log_z"]
    assert float(nce.state_dict()["log_z"]) == 1.5
    out = nce(GaussianEnergy(2), torch.randn(8, 2), generator=torch.Generator().manual_seed(0))
    out.loss.backward()
    assert nce.log_z.grad is not None and torch.isfinite(nce.log_z.grad)


def test_same_generator_gives_same_loss():
    nce = NCE(GaussianMixtureEnergy([[0.0, 0.0], [2.0, 2.0]], 1.0))  # any object with sample(n, generator=)
    x = torch.randn(8, 2, generator=torch.Generator().manual_seed(0))
    a = nce(GaussianEnergy(2), x, generator=torch.Generator().manual_seed(5))
    b = nce(GaussianEnergy(2), x, generator=torch.Generator().manual_seed(5))
    assert torch.equal(a.loss, b.loss) and torch.equal(a.negatives, b.negatives)


def test_nce_recovers_gaussian_and_log_partition():
    nu = 1.0
    x = gaussian_data(seed=20)
    noise = Gaussian(torch.tensor([0.5, 0.0], dtype=DTYPE), torch.tensor([[4.0, 0.0], [0.0, 3.0]], dtype=DTYPE))
    nce = NCE(noise, nu=nu).double()
    energy = new_energy()
    out = fit(nce, energy, x, seed=4, extra=[nce.log_z])
    y = out.negatives
    log_q_x, log_q_y = noise.log_prob(x), noise.log_prob(y)

    def logit(th, z, log_q):
        m, P = unpack(th[:5])
        d = z - m
        return -0.5 * ((d @ P) * d).sum(-1) - th[5] - log_q - math.log(nu)

    terms = [
        (lambda th: F.softplus(-logit(th, x, log_q_x)), 1.0),
        (lambda th: F.softplus(logit(th, y, log_q_y)), nu),
    ]
    log_z_true = math.log(2 * math.pi) + 0.5 * math.log(float(torch.linalg.det(TRUE_COV)))
    target = precision_theta(TRUE_MEAN, TRUE_COV, log_z_true)
    check_fit(theta_of(energy, nce.log_z), target, terms)
    assert out.metrics["log_z"] == pytest.approx(float(nce.log_z.detach()))


# -- validation ---------------------------------------------------------------------------
@pytest.mark.parametrize("nu", [0.0, -1.0, float("inf")])
def test_bad_nu_message_names_argument_and_value(nu):
    with pytest.raises(ValueError, match=rf"nu: expected a finite number > 0; got {nu!r}"):
        NCE(Gaussian([0.0], 1.0), nu=nu)


def test_torch_distribution_noise_is_wrapped_and_scored_like_the_same_gaussian():
    # a torch law has no generator keyword: NCE wraps it (draws seeded from the generator) and its
    # log q is torch's, so the loss equals the one computed by hand on the same noise draws
    torch_q = torch.distributions.Normal(torch.zeros(2, dtype=DTYPE), 1.5)
    nce = NCE(torch_q, nu=1.0)
    energy = GaussianEnergy(2).double()
    x = torch.randn(6, 2, dtype=DTYPE, generator=torch.Generator().manual_seed(0))
    a = nce(energy, x, generator=torch.Generator().manual_seed(1))
    b = nce(energy, x, generator=torch.Generator().manual_seed(1))
    assert torch.equal(a.negatives, b.negatives)
    same = Gaussian(torch.zeros(2, dtype=DTYPE), std=1.5)

    def logit(z):
        return -energy(z) - same.log_prob(z)

    expected = F.softplus(-logit(x)).mean() + F.softplus(logit(a.negatives)).mean()
    torch.testing.assert_close(a.loss, expected)


def test_noise_without_log_prob_is_rejected():
    class OnlySample:
        def sample(self, n, *, generator=None):
            return torch.zeros(n, 1)

    with pytest.raises(TypeError, match=r"noise: expected a normalised model with sample\(n, \*, generator\) and "
                                        r"log_prob\(x\) .*; got OnlySample"):
        NCE(OnlySample())


def test_bad_log_z_init_is_rejected():
    with pytest.raises(ValueError, match="log_z_init: expected a finite number; got nan"):
        NCE(Gaussian([0.0], 1.0), log_z_init=float("nan"))


def test_nan_batch_and_mismatched_noise_shape_are_rejected():
    nce = NCE(Gaussian([0.0, 0.0], 1.0))
    x = torch.zeros(4, 2)
    x[0, 0] = float("inf")
    with pytest.raises(ValueError, match="batch: expected a finite tensor; got 0 NaN and 1 Inf"):
        nce(GaussianEnergy(2), x)
    with pytest.raises(ValueError, match=r"noise.sample\(n\): expected shape \(4, 3\); got \(4, 2\)"):
        nce(GaussianEnergy(3), torch.zeros(4, 3))


def test_noise_dtype_mismatch_is_rejected():
    nce = NCE(Gaussian([0.0, 0.0], 1.0))  # float32 noise
    with pytest.raises(TypeError, match=r"noise.sample\(n\): expected dtype torch.float64"):
        nce(GaussianEnergy(2).double(), torch.zeros(4, 2, dtype=DTYPE))


def _exact_softplus(t: float) -> float:
    """log(1 + e^t) in the closed form max(t, 0) + log1p(exp(-|t|)) (no cut-off)."""
    return max(t, 0.0) + math.log1p(math.exp(-abs(t)))


@pytest.mark.parametrize("level", [25.0, -25.0])
def test_float64_loss_and_log_z_gradient_are_exact_when_logits_pass_20(level):
    # E = level puts every logit G near -level - log q: |G| in (20, 30), where torch's softplus
    # cut-off (identity above 20) dropped up to 2e-9 from the float64 loss and its gradient.
    noise = Gaussian([0.0], 1.0).double()
    nce = NCE(noise, nu=2.0).double()
    energy = from_fn(lambda x: torch.full((x.shape[0],), level, dtype=x.dtype))
    x = torch.linspace(-1.0, 1.0, 8, dtype=torch.float64).reshape(8, 1)
    out = nce(energy, x, generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        gx = nce.logit(energy, x).tolist()
        gy = nce.logit(energy, out.negatives).tolist()
    assert min(abs(g) for g in gx + gy) > 20
    exact = sum(_exact_softplus(-g) for g in gx) / 8 + 2.0 * sum(_exact_softplus(g) for g in gy) / 16
    assert float(out.loss.detach()) == pytest.approx(exact, rel=1e-14)
    (grad,) = torch.autograd.grad(out.loss, nce.log_z)
    # dL/dzeta = mean sigmoid(-G_data) - nu mean sigmoid(G_noise)
    exact_grad = (sum(1 / (1 + math.exp(g)) for g in gx) / 8
                  - 2.0 * sum(1 / (1 + math.exp(-g)) for g in gy) / 16)
    assert float(grad) == pytest.approx(exact_grad, rel=1e-13, abs=1e-13)


@pytest.mark.parametrize("learn_energy", [True, False])
@pytest.mark.parametrize("learn_log_z", [True, False])
def test_loss_gradient_reaches_every_parameter_that_requires_it(learn_energy, learn_log_z):
    # each requires-grad combination of (energy parameters, log_z): the gradient of every trainable
    # one matches central finite differences (float64), and a fully frozen loss has no graph
    noise = Gaussian([0.0, 0.0], 2.0).double()
    nce = NCE(noise, nu=1.5, log_z_init=0.4).double()
    energy = GaussianEnergy(2, mean=[0.3, -0.2]).double()
    for p in energy.parameters():
        p.requires_grad_(learn_energy)
    nce.log_z.requires_grad_(learn_log_z)
    x = torch.randn(6, 2, generator=torch.Generator().manual_seed(0), dtype=torch.float64)

    def loss() -> torch.Tensor:
        return nce(energy, x, generator=torch.Generator().manual_seed(1)).loss

    out = loss()
    params = [p for p in [*energy.parameters(), nce.log_z] if p.requires_grad]
    assert out.requires_grad == bool(params)
    if not params:
        return
    grads = torch.autograd.grad(out, params)
    h = 1e-6
    for p, g in zip(params, grads):
        for i in itertools.product(*map(range, p.shape)):
            with torch.no_grad():
                p[i] += h
                up = float(loss())
                p[i] -= 2 * h
                down = float(loss())
                p[i] += h
            assert float(g[i]) == pytest.approx((up - down) / (2 * h), abs=1e-7)
