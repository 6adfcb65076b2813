"""CD-k and PCD: worked example, closed-form gradients, detached negatives, persistent chains."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from ebms.nets import GaussianEnergy
from ebms.objectives import ContrastiveDivergence, PersistentContrastiveDivergence, ReplayBuffer
from ebms.samplers import SGLD, ULA
from ebms.spaces import Box, Reals

DTYPE = torch.float64


class ThetaX2(nn.Module):
    """E_theta(x) = theta * ||x||^2 (the course notes' example energy)."""

    def __init__(self, theta: float = 1.0) -> None:
        super().__init__()
        self.theta = nn.Parameter(torch.tensor(theta, dtype=DTYPE))

    def forward(self, x):
        return self.theta * (x**2).sum(-1)


class Toy(nn.Module):
    """E(x) = a/2 ||x||^2 + b x_0: dE/da = ||x||^2 / 2, dE/db = x_0."""

    def __init__(self) -> None:
        super().__init__()
        self.a = nn.Parameter(torch.tensor(1.3, dtype=DTYPE))
        self.b = nn.Parameter(torch.tensor(-0.4, dtype=DTYPE))

    def forward(self, x):
        return 0.5 * self.a * (x**2).sum(-1) + self.b * x[:, 0]


def _x(n=12, seed=0):
    return torch.randn(n, 2, generator=torch.Generator().manual_seed(seed), dtype=DTYPE)


def test_cd1_gradient_matches_worked_example():
    # Course notes, "Example 2: CD-1 Update": E = theta x^2, x_data = 1, ULA step eps = 0.1 with the
    # noise off, i.e. x' = x - 0.05 dE/dx = 0.9 (SGLD(step_size=0.05, noise_scale=0) is that update).
    energy = ThetaX2(1.0)
    cd = ContrastiveDivergence(SGLD(step_size=0.05, noise_scale=0.0), k=1)
    out = cd(energy, torch.tensor([[1.0]], dtype=DTYPE))
    torch.testing.assert_close(out.negatives, torch.tensor([[0.9]], dtype=DTYPE))
    out.loss.backward()
    assert float(energy.theta.grad) == pytest.approx(0.19, abs=1e-12)


@pytest.mark.parametrize("alpha", [0.0, 0.25])
def test_cd_gradient_matches_closed_form(alpha):
    energy = Toy()
    x = _x()
    cd = ContrastiveDivergence(ULA(step_size=0.05), k=3, regularization=alpha)
    out = cd(energy, x, generator=torch.Generator().manual_seed(1))
    assert energy.a.grad is None and energy.b.grad is None  # sampling left parameter grads alone
    out.loss.backward()
    xn = out.negatives
    with torch.no_grad():
        ep, en = energy(x), energy(xn)
        da_p, da_n = 0.5 * (x**2).sum(-1), 0.5 * (xn**2).sum(-1)
        db_p, db_n = x[:, 0], xn[:, 0]
        ga = da_p.mean() - da_n.mean() + alpha * (2 * ep * da_p).mean() + alpha * (2 * en * da_n).mean()
        gb = db_p.mean() - db_n.mean() + alpha * (2 * ep * db_p).mean() + alpha * (2 * en * db_n).mean()
    torch.testing.assert_close(energy.a.grad, ga)
    torch.testing.assert_close(energy.b.grad, gb)


def test_negatives_are_detached_and_metrics_consistent():
    energy = Toy()
    x = _x()
    out = ContrastiveDivergence(ULA(step_size=0.05), k=2)(energy, x, generator=torch.Generator().manual_seed(0))
    assert not out.negatives.requires_grad and out.negatives.grad_fn is None
    assert out.negatives.shape == x.shape
    m = out.metrics
    assert set(m) == {"loss", "e_pos", "e_neg", "gap", "accept", "nonfinite"}
    assert all(isinstance(v, float) for v in m.values())
    with torch.no_grad():
        assert m["e_pos"] == pytest.approx(float(energy(x).mean()))
        assert m["e_neg"] == pytest.approx(float(energy(out.negatives).mean()))
    assert m["gap"] == pytest.approx(m["e_neg"] - m["e_pos"])
    assert m["loss"] == pytest.approx(m["e_pos"] - m["e_neg"])
    assert m["accept"] == 1.0 and m["nonfinite"] == 0.0


def test_same_generator_gives_same_negatives():
    cd = ContrastiveDivergence(ULA(step_size=0.05), k=4)
    a = cd(Toy(), _x(), generator=torch.Generator().manual_seed(7))
    b = cd(Toy(), _x(), generator=torch.Generator().manual_seed(7))
    assert torch.equal(a.negatives, b.negatives) and a.metrics == b.metrics


def test_init_space_starts_chains_from_random_draw():
    space = Box(2, -1.0, 1.0)
    cd = ContrastiveDivergence(SGLD(step_size=1e-9, noise_scale=0.0), k=1, init=space)
    x = _x() + 10.0  # far outside the box: negatives must not start here
    out = cd(Toy().float(), x.float(), generator=torch.Generator().manual_seed(3))
    expected = space.random(12, generator=torch.Generator().manual_seed(3))
    torch.testing.assert_close(out.negatives, expected, atol=1e-6, rtol=0)


def test_pcd_chains_persist_across_calls():
    energy = GaussianEnergy(2).double()
    buf = ReplayBuffer(16, Reals(2), reinit_prob=0.0, dtype=DTYPE)
    pcd = PersistentContrastiveDivergence(SGLD(step_size=0.1, noise_scale=0.0), buf, k=2)
    g = torch.Generator().manual_seed(0)
    x = _x(16, seed=1)
    out1 = pcd(energy, x, generator=g)
    assert bool(buf.filled.all())
    after1 = buf.data.clone()
    torch.testing.assert_close(after1.norm(dim=1).sort().values, out1.negatives.norm(dim=1).sort().values)
    # second call continues every chain: deterministic gradient steps contract towards the mean 0,
    # k = 2 steps of x <- x - 0.1 x give exactly 0.81 x
    out2 = pcd(energy, x, generator=g)
    after2 = buf.data.clone()
    torch.testing.assert_close(after2, 0.81 * after1)
    assert not torch.equal(out1.negatives, out2.negatives)
    # the chains live in the objective's state_dict
    sd = pcd.state_dict()
    assert torch.equal(sd["buffer.data"], after2)
    fresh = PersistentContrastiveDivergence(
        SGLD(step_size=0.1, noise_scale=0.0), ReplayBuffer(16, Reals(2), reinit_prob=0.0, dtype=DTYPE), k=2
    )
    fresh.load_state_dict(sd)
    assert torch.equal(fresh.buffer.data, after2)


def test_pcd_resume_is_bit_exact():
    def run(split: bool):
        buf = ReplayBuffer(32, Reals(2), reinit_prob=0.2, dtype=DTYPE)
        pcd = PersistentContrastiveDivergence(ULA(step_size=0.05), buf, k=3)
        g = torch.Generator().manual_seed(11)
        outs = []
        for step in range(4):
            if split and step == 2:  # "checkpoint and restart" with a fresh objective
                sd, rng = pcd.state_dict(), g.get_state()
                pcd = PersistentContrastiveDivergence(
                    ULA(step_size=0.05), ReplayBuffer(32, Reals(2), reinit_prob=0.2, dtype=DTYPE), k=3
                )
                pcd.load_state_dict(sd)
                g = torch.Generator()
                g.set_state(rng)
            outs.append(pcd(Toy(), _x(8, seed=step), generator=g).metrics)
        return outs

    assert run(False) == run(True)


# -- validation ---------------------------------------------------------------------------
def test_nan_batch_is_rejected_with_count():
    x = _x(4)
    x[2, 1] = float("nan")
    with pytest.raises(ValueError, match="batch: expected a finite tensor; got 1 NaN and 0 Inf entries in shape"):
        ContrastiveDivergence(ULA())(Toy(), x)


def test_batch_shape_must_match_buffer_shape():
    pcd = PersistentContrastiveDivergence(ULA(), ReplayBuffer(8, 2))
    msg = r"batch: expected shape \(B, 2\) to match the chains' event shape; got \(4, 3\)"
    with pytest.raises(ValueError, match=msg):
        pcd(GaussianEnergy(3), torch.zeros(4, 3))


def test_batch_larger_than_buffer_is_rejected():
    pcd = PersistentContrastiveDivergence(ULA(), ReplayBuffer(4, 2))
    with pytest.raises(ValueError, match=r"n: expected at most capacity=4 \(sampling without replacement\); got 6"):
        pcd(GaussianEnergy(2), torch.zeros(6, 2))


def test_batch_outside_sampler_space_is_rejected():
    cd = ContrastiveDivergence(ULA(space=Box(2, -1.0, 1.0)))
    with pytest.raises(ValueError, match=r"batch: expected values in \[-1.0, 1.0\]; got min"):
        cd(GaussianEnergy(2), torch.full((3, 2), 2.0))


def test_bad_settings_are_rejected():
    with pytest.raises(TypeError, match="sampler: expected an ebms.samplers.Sampler; got str"):
        ContrastiveDivergence("ula")
    with pytest.raises(ValueError, match="k: expected an int >= 1; got 0"):
        ContrastiveDivergence(ULA(), k=0)
    with pytest.raises(ValueError, match="regularization: expected a finite number >= 0; got -0.1"):
        ContrastiveDivergence(ULA(), regularization=-0.1)
    with pytest.raises(TypeError, match="init: expected an ebms.spaces.Space or None; got Tensor"):
        ContrastiveDivergence(ULA(), init=torch.zeros(2))
    with pytest.raises(TypeError, match="buffer: expected an ebms.objectives.ReplayBuffer; got Tensor"):
        PersistentContrastiveDivergence(ULA(), torch.zeros(4, 2))
