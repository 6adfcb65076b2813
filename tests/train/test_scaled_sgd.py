"""ScaledSGD: the update rule against a float64 reference, torch.optim.SGD as its special case, clipping,
L2, skipped parameters, the trainer (schedule, resume) and its argument checks."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch
from _train_helpers import NoisyNCE, make_trainer, metric_lines

from ebms.objectives import SAGain
from ebms.train import ScaledSGD


def _reference(p, g, v, lr, l2, clip):
    d = (g.double() + l2 * p.double()) / (v.double() + l2)
    return p.double() - (lr * d).clamp(-clip, clip)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("lr, l2, clip", [(0.3, 0.0, math.inf), (0.3, 0.0, 0.7), (1 / 3001, 4e-5, 1.0), (2.0, 0.5, 0.05)])
def test_scaled_sgd_takes_the_scaled_clipped_regularised_step(dtype, lr, l2, clip):
    g = torch.Generator().manual_seed(0)
    p = torch.randn(50, generator=g, dtype=dtype).requires_grad_()
    q = torch.randn(4, 3, generator=g, dtype=dtype).requires_grad_()  # no scale: v = 1
    v = torch.rand(50, generator=g, dtype=torch.float64) * 3 + 1e-3
    p0, q0 = p.detach().clone(), q.detach().clone()
    opt = ScaledSGD([p, q], lr=lr, scales={p: v}, l2=l2, clip=clip)
    for _ in range(3):
        p.grad = torch.randn(50, generator=g, dtype=dtype)
        q.grad = torch.randn(4, 3, generator=g, dtype=dtype)
        want_p = _reference(p0, p.grad, v, lr, l2, clip)
        want_q = _reference(q0, q.grad, torch.ones(4, 3), lr, l2, clip)
        opt.step()
        tol = 1e-12 if dtype == torch.float64 else 1e-5
        torch.testing.assert_close(p.detach().double(), want_p, rtol=tol, atol=tol)
        torch.testing.assert_close(q.detach().double(), want_q, rtol=tol, atol=tol)
        p0, q0 = p.detach().clone(), q.detach().clone()
        assert p.dtype == dtype


def test_scaled_sgd_without_scale_l2_or_clip_is_plain_sgd():
    g = torch.Generator().manual_seed(1)
    a = torch.randn(6, 2, generator=g).requires_grad_()
    b = a.detach().clone().requires_grad_()
    mine, ref = ScaledSGD([a], lr=0.1, clip=math.inf), torch.optim.SGD([b], lr=0.1)
    for _ in range(4):
        grad = torch.randn(6, 2, generator=g)
        a.grad, b.grad = grad.clone(), grad.clone()
        mine.step()
        ref.step()
    assert torch.equal(a, b)


def test_every_coordinate_moves_at_most_clip_with_the_learning_rate_inside_the_clip():
    p = torch.zeros(5, requires_grad=True)
    opt = ScaledSGD([p], lr=0.01, scales={p: torch.full((5,), 1e-15)}, clip=1.0)
    p.grad = torch.tensor([1e-3, -1e-3, 0.0, 5.0, -1e-20])
    opt.step()
    # a zero-variance feature (floored scale) takes the full step c in its gradient's direction: the source's
    # trainer clips lr * g / v (SAtrain::UpdateDir), so the bound is c, not lr * c
    assert p.detach().tolist() == pytest.approx([-1.0, 1.0, 0.0, -1.0, 1e-20 / 1e-15 * 0.01])
    q = torch.zeros(2, requires_grad=True)
    small = ScaledSGD([q], lr=1 / 3001, scales={q: torch.tensor([1.0, 5e-5])}, clip=1.0)
    q.grad = torch.tensor([-0.5, -1e-3])  # a rare feature under-predicted by 1e-3 per sentence
    small.step()
    # the common feature moves by lr * 0.5; the rare one by lr * 1e-3 / 5e-5 = 20 / 3001, unclipped
    assert q.detach().tolist() == pytest.approx([0.5 / 3001, 20 / 3001])


def test_parameters_without_a_gradient_are_skipped_and_groups_keep_their_options():
    a, b = torch.ones(3, requires_grad=True), torch.ones(2, requires_grad=True)
    opt = ScaledSGD([{"params": [a]}, {"params": [b], "lr": 0.5, "clip": 0.1}], lr=1.0, l2=0.0)
    b.grad = torch.tensor([1.0, -0.05])
    opt.step()
    assert torch.equal(a.detach(), torch.ones(3))
    assert b.detach().tolist() == pytest.approx([1 - 0.1, 1 + 0.5 * 0.05])  # 0.5 * 1 clipped to 0.1


def test_trainer_resume_with_scaled_sgd_and_sa_schedule_reproduces_the_uninterrupted_run(tmp_path: Path):
    def opt(groups):
        return ScaledSGD(groups, lr=1.0, l2=0.01, clip=0.5)

    kw = dict(log_every=5, checkpoint_every=10, optimizer=opt, lr_schedule=SAGain(3.0, 0.0, 10))
    one = make_trainer(NoisyNCE(), tmp_path / "one", steps=30, **kw)
    one.fit()
    make_trainer(NoisyNCE(), tmp_path / "two", steps=20, **kw).fit()
    two = make_trainer(NoisyNCE(), tmp_path / "two", steps=30, **kw)
    two.fit(resume=True)
    assert metric_lines(tmp_path / "one") == metric_lines(tmp_path / "two")
    for x, y in zip(one.model.state_dict().values(), two.model.state_dict().values()):
        assert torch.equal(x, y)
    from ebms.nets import GaussianEnergy

    torch.manual_seed(0)
    start = GaussianEnergy(2).state_dict()  # make_trainer's default model starts at GaussianEnergy(2)'s init
    assert any(not torch.equal(x, start[k]) for k, x in one.model.state_dict().items())  # it did train


def test_scaled_sgd_errors_name_the_argument():
    p = torch.zeros(3, requires_grad=True)
    cases = [
        (lambda: ScaledSGD(p), TypeError, "params: expected an iterable"),
        (lambda: ScaledSGD([p], lr=-1.0), ValueError, "lr: expected a finite number >= 0"),
        (lambda: ScaledSGD([p], lr=True), TypeError, "lr: expected a Python number"),
        (lambda: ScaledSGD([p], l2=float("nan")), ValueError, "l2"),
        (lambda: ScaledSGD([p], clip=0.0), ValueError, "clip: expected a finite number > 0"),
        (lambda: ScaledSGD([{"params": [p], "clip": -1.0}]), ValueError, r"params\[0\].clip"),
        (lambda: ScaledSGD([p], scales={torch.zeros(3): torch.ones(3)}), ValueError, "scales: a key is not one"),
        (lambda: ScaledSGD([p], scales={p: torch.ones(4)}), ValueError, r"parameter's shape \(3,\); got \(4,\)"),
        (lambda: ScaledSGD([p], scales={p: torch.tensor([1.0, 0.0, 1.0])}), ValueError, "finite values > 0"),
        (lambda: ScaledSGD([p], scales={p: [1.0, 1.0, 1.0]}), ValueError, "got list"),
    ]
    for call, kind, match in cases:
        with pytest.raises(kind, match=match):
            call()
    p.grad = torch.ones(3).to_sparse()
    with pytest.raises(ValueError, match="sparse gradients"):
        ScaledSGD([p]).step()
