"""Tests for ebms.train.owlqn.OWLQN: closed-form L1 solutions, scipy optimum, monotone descent."""

from __future__ import annotations

import pytest
import torch

from ebms.train.owlqn import OWLQN


def _run(opt: OWLQN, closure, steps: int) -> list[float]:
    return [float(opt.step(closure)) for _ in range(steps)]


def test_separable_l1_quadratic_reaches_the_soft_threshold_solution():
    # F(w) = sum_i h_i/2 (w_i - b_i)^2 + l1 |w|_1  =>  w_i = sign(b_i) max(|b_i| - l1/h_i, 0)
    g = torch.Generator().manual_seed(0)
    h = torch.rand(20, generator=g, dtype=torch.float64) * 4 + 0.5
    b = torch.randn(20, generator=g, dtype=torch.float64)
    l1 = 0.7
    w = torch.zeros(20, dtype=torch.float64, requires_grad=True)
    opt = OWLQN([w], l1=l1)

    def closure():
        opt.zero_grad()
        loss = 0.5 * (h * (w - b) ** 2).sum()
        loss.backward()
        return loss

    _run(opt, closure, 60)
    want = b.sign() * (b.abs() - l1 / h).clamp_min(0)
    torch.testing.assert_close(w.detach(), want, atol=1e-8, rtol=0)
    assert bool((w.detach()[want == 0] == 0).all())  # exact zeros, not merely small


def test_logistic_regression_matches_scipy_lbfgs_optimum_over_two_tensors():
    optimize = pytest.importorskip("scipy.optimize")
    np = pytest.importorskip("numpy")
    g = torch.Generator().manual_seed(1)
    x = torch.randn(200, 5, generator=g, dtype=torch.float64)
    y = (x @ torch.tensor([1.0, -2.0, 0.5, 0.0, 1.5], dtype=torch.float64)
         + torch.randn(200, generator=g, dtype=torch.float64) > 0).double()
    lam = 0.1

    def objective(w: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        z = x @ w + b
        return torch.nn.functional.softplus(z).sum() - (y * z).sum() + lam * (w * w).sum()

    w = torch.zeros(5, dtype=torch.float64, requires_grad=True)
    b = torch.zeros(1, dtype=torch.float64, requires_grad=True)
    opt = OWLQN([w, b])

    def closure():
        opt.zero_grad()
        loss = objective(w, b)
        loss.backward()
        return loss

    _run(opt, closure, 60)

    def f_np(v):
        t = torch.tensor(v, requires_grad=True)
        loss = objective(t[:5], t[5:])
        loss.backward()
        return float(loss.detach()), t.grad.numpy()

    ref = optimize.minimize(f_np, np.zeros(6), jac=True, method="L-BFGS-B",
                            options={"gtol": 1e-12, "ftol": 1e-15, "maxiter": 1000})
    torch.testing.assert_close(torch.cat([w, b]).detach(), torch.tensor(ref.x), atol=1e-6, rtol=0)
    assert float(objective(w, b).detach()) <= ref.fun + 1e-9


@pytest.mark.parametrize("l1", [0.0, 0.5])
def test_objective_never_increases(l1):
    g = torch.Generator().manual_seed(2)
    a = torch.randn(30, 10, generator=g, dtype=torch.float64)
    t = torch.randn(30, generator=g, dtype=torch.float64)
    w = torch.zeros(10, dtype=torch.float64, requires_grad=True)
    opt = OWLQN([w], l1=l1, history=3)

    def closure():
        opt.zero_grad()
        loss = torch.log(torch.cosh(a @ w - t)).sum()  # smooth, convex, not quadratic
        loss.backward()
        return loss

    losses = [float(torch.log(torch.cosh(t)).sum())]  # F(0)
    for _ in range(25):
        loss = float(opt.step(closure))
        assert opt.info["start_loss"] == pytest.approx(losses[-1], abs=1e-9)
        losses.append(loss)
    assert all(b <= a_ for a_, b in zip(losses, losses[1:]))
    assert losses[-1] < losses[0]


def test_bad_arguments_are_named():
    w = torch.zeros(2, requires_grad=True)
    with pytest.raises(ValueError, match="l1: expected a finite number >= 0"):
        OWLQN([w], l1=-1.0)
    with pytest.raises(ValueError, match="history: expected an int >= 1"):
        OWLQN([w], history=0)
    with pytest.raises(ValueError, match=r"ftol: expected a number in \(0, 1\)"):
        OWLQN([w], ftol=1.5)
    with pytest.raises(ValueError, match="params: expected one parameter group"):
        OWLQN([{"params": [w]}, {"params": [torch.zeros(1, requires_grad=True)]}])
    opt = OWLQN([w])
    with pytest.raises(ValueError, match="closure: expected a callable"):
        opt.step(None)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="closure: expected a finite loss"):
        opt.step(lambda: torch.tensor(float("nan")))
