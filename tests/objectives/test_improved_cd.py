"""ImprovedCD: KL gradient through the last Langevin step (finite differences), PCD limit, entropy."""

from __future__ import annotations

import functools

import pytest
import torch
from torch import Tensor, nn

from ebms.data.augment import Augment, random_flip, random_shift
from ebms.nets.conv import ConvEnergy
from ebms.objectives.buffer import ReplayBuffer
from ebms.objectives.cd import PersistentContrastiveDivergence
from ebms.objectives.improved_cd import ImprovedCD
from ebms.objectives.reservoir import ReservoirBuffer
from ebms.samplers.langevin import SGLD, ULA
from ebms.samplers.mala import MALA
from ebms.spaces import Box


class Quadratic(nn.Module):
    """``E(x) = 1/2 sum_d w_d x_d^2 + sum_d c_d x_d``."""

    def __init__(self, w: list[float], c: list[float], dtype: torch.dtype = torch.float64) -> None:
        super().__init__()
        self.w = nn.Parameter(torch.tensor(w, dtype=dtype))
        self.c = nn.Parameter(torch.tensor(c, dtype=dtype))

    def forward(self, x: Tensor) -> Tensor:
        return quad(x, self.w, self.c)


def quad(x: Tensor, w: Tensor, c: Tensor) -> Tensor:
    return 0.5 * (w * x * x).sum(-1) + (c * x).sum(-1)


def _filled_buffer(dtype: torch.dtype = torch.float64) -> tuple[ReplayBuffer, Tensor]:
    buf = ReplayBuffer(8, 2, reinit_prob=0.0, dtype=dtype)
    data = torch.randn(8, 2, generator=torch.Generator().manual_seed(99), dtype=dtype)
    buf.update(torch.arange(8), data)
    return buf, data


def test_loss_gradient_matches_finite_differences_of_the_explicit_surrogate() -> None:
    a, s, k, kl_w, ent_w, reg = 0.1, 0.3, 3, 0.7, 0.4, 0.1
    sampler = SGLD(step_size=a, noise_scale=s)
    model = Quadratic([1.3, 0.6], [0.2, -0.4])
    buf, data = _filled_buffer()
    snapshot = {key: v.clone() for key, v in buf.state_dict().items()}
    obj = ImprovedCD(sampler, buf, k=k, kl_weight=kl_w, entropy_weight=ent_w, regularization=reg, n_entropy=5)
    pos = torch.randn(4, 2, generator=torch.Generator().manual_seed(1), dtype=torch.float64)

    # the same draws, in the documented order: buffer slots and coins, k - 1 steps, last noise, references
    twin = ReplayBuffer(8, 2, reinit_prob=0.0, dtype=torch.float64)
    twin.load_state_dict(snapshot)
    g = torch.Generator().manual_seed(42)
    x0, _ = twin.sample(4, g)
    x_prev = sampler.sample(model, x0, k - 1, generator=g)
    xi = torch.randn(4, 2, generator=g, dtype=torch.float64)
    ref = data[torch.randperm(8, generator=g)[:5]]
    w0, c0 = model.w.detach().clone(), model.c.detach().clone()
    neg0 = x_prev - a * (w0 * x_prev + c0) + s * xi

    def surrogate(theta: Tensor) -> Tensor:
        """The value whose gradient ImprovedCD's loss has, written out (theta = [w, c])."""
        w, c = theta[:2], theta[2:]
        e_pos, e_neg = quad(pos, w, c), quad(neg0, w, c)  # CD: negatives held at theta_0
        cd = e_pos.mean() - e_neg.mean() + reg * (e_pos.pow(2).mean() + e_neg.pow(2).mean())
        x_k = x_prev - a * (w * x_prev + c) + s * xi  # last step, a function of theta
        frozen = quad(x_k, w0, c0).mean()  # energy with parameters fixed at theta_0
        entropy = torch.cdist(x_k, ref).min(dim=1).values.log().mean()
        return cd + kl_w * (frozen - ent_w * entropy)

    out = obj(model, pos, generator=torch.Generator().manual_seed(42))
    out.loss.backward()
    assert out.negatives is not None
    torch.testing.assert_close(out.negatives, neg0, rtol=1e-12, atol=1e-12)
    theta0 = torch.cat([w0, c0])
    torch.testing.assert_close(out.loss.detach(), surrogate(theta0), rtol=1e-12, atol=1e-12)
    h = 1e-6
    fd = torch.stack(
        [(surrogate(theta0 + h * e) - surrogate(theta0 - h * e)) / (2 * h) for e in torch.eye(4, dtype=torch.float64)]
    )
    assert model.w.grad is not None and model.c.grad is not None
    torch.testing.assert_close(torch.cat([model.w.grad, model.c.grad]), fd, rtol=1e-7, atol=1e-9)


def test_kl_gradient_reaches_parameters_only_through_the_chain() -> None:
    model = Quadratic([1.0, 2.0], [0.5, 0.0])
    obj = ImprovedCD(SGLD(0.1, 0.0), _filled_buffer()[0], k=1)
    x = torch.tensor([[1.0, -1.0], [0.5, 2.0]], dtype=torch.float64)
    obj.frozen_energy(model, x.clone().requires_grad_(True)).sum().backward()
    assert model.w.grad is None and model.c.grad is None
    x_k, bad = obj.last_step(model, x)
    assert not bool(bad.any())
    obj.frozen_energy(model, x_k).mean().backward()
    # d/dw_d mean_i E_0(x_i - 0.1 (w x_i + c)) = mean_i dE_0/dx_id * (-0.1 x_id)
    grad_e0 = model.w.detach() * x_k.detach() + model.c.detach()
    want_w = (grad_e0 * (-0.1 * x)).mean(0)
    assert model.w.grad is not None
    torch.testing.assert_close(model.w.grad, want_w)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("sampler", [SGLD(0.05, 0.01), ULA(0.02)])
def test_zero_kl_weight_reduces_to_pcd_with_the_same_draws(sampler, dtype: torch.dtype) -> None:  # type: ignore[no-untyped-def]
    model = Quadratic([1.0, 0.5], [0.1, 0.2], dtype=dtype)
    buf_a, buf_b = _filled_buffer(dtype)[0], _filled_buffer(dtype)[0]
    pos = torch.randn(5, 2, generator=torch.Generator().manual_seed(0), dtype=dtype)
    icd = ImprovedCD(sampler, buf_a, k=4, kl_weight=0.0)
    pcd = PersistentContrastiveDivergence(sampler, buf_b, k=4)
    out_i = icd(model, pos, generator=torch.Generator().manual_seed(3))
    out_p = pcd(model, pos, generator=torch.Generator().manual_seed(3))
    assert out_i.negatives is not None and out_p.negatives is not None
    torch.testing.assert_close(out_i.negatives, out_p.negatives)
    torch.testing.assert_close(out_i.loss, out_p.loss)
    assert out_i.loss.dtype == dtype
    torch.testing.assert_close(buf_a.data, buf_b.data)


def test_entropy_is_the_mean_log_nearest_neighbour_distance_and_zero_on_an_empty_buffer() -> None:
    model = Quadratic([1.0, 1.0], [0.0, 0.0])
    empty = ReplayBuffer(8, 2, dtype=torch.float64)
    obj = ImprovedCD(SGLD(0.1, 0.1), empty, k=2)
    out = obj(model, torch.zeros(3, 2, dtype=torch.float64), generator=torch.Generator().manual_seed(0))
    assert out.metrics["entropy"] == 0.0
    assert sorted(out.metrics) == ["accept", "e_neg", "e_pos", "entropy", "gap", "kl", "loss", "nonfinite"]
    buf, data = _filled_buffer()
    obj = ImprovedCD(SGLD(0.1, 0.1), buf, k=2, n_entropy=100)
    x = torch.tensor([[0.0, 0.0], [3.0, 3.0]], dtype=torch.float64)
    got = obj.entropy(x, generator=torch.Generator().manual_seed(0))
    want = torch.stack([(data - row).norm(dim=1).min().log() for row in x]).mean()
    assert got is not None
    torch.testing.assert_close(got, want)


def test_augmented_starts_are_projected_into_the_sampler_space() -> None:
    model = Quadratic([0.0, 0.0], [0.0, 0.0])
    buf, _ = _filled_buffer()
    obj = ImprovedCD(SGLD(0.1, 0.0, space=Box(2, -1.0, 1.0)), buf, k=2, augment=lambda x, g: x * 0 + 3.0)
    out = obj(model, torch.zeros(3, 2, dtype=torch.float64), generator=torch.Generator().manual_seed(0))
    assert out.negatives is not None
    assert torch.equal(out.negatives, torch.ones(3, 2, dtype=torch.float64))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_trains_a_spectral_norm_conv_energy_with_reservoir_and_augmentation(dtype: torch.dtype) -> None:
    torch.manual_seed(0)
    net = ConvEnergy(1, 8, channels=(8, 16), groups=4, spectral_norm=True).to(dtype)
    space = Box((1, 8, 8), -1.0, 1.0)
    buf = ReservoirBuffer(32, space, dtype=dtype)
    aug = Augment([functools.partial(random_shift, max_shift=1, fill=-1.0), random_flip], clamp=(-1.0, 1.0))
    obj = ImprovedCD(SGLD(1.0, 0.01, space=space), buf, k=3, augment=aug, regularization=0.1)
    opt = torch.optim.Adam(net.parameters(), lr=1e-3)
    g = torch.Generator().manual_seed(1)
    for _ in range(3):
        batch = torch.rand(6, 1, 8, 8, generator=g, dtype=dtype) * 2 - 1
        opt.zero_grad()
        out = obj(net, batch, generator=g)
        out.loss.backward()
        assert all(p.grad is None or bool(torch.isfinite(p.grad).all()) for p in net.parameters())
        opt.step()
    assert out.loss.dtype == dtype
    assert int(buf.seen) == 18 and out.metrics["entropy"] != 0.0


def test_bad_arguments_name_themselves() -> None:
    buf, _ = _filled_buffer()
    sgld = SGLD(0.1, 0.01)
    with pytest.raises(TypeError, match="sampler: expected ebms.samplers.ULA or SGLD .* got MALA"):
        ImprovedCD(MALA(0.1), buf)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="buffer: expected an ebms.objectives.ReplayBuffer; got Tensor"):
        ImprovedCD(sgld, torch.zeros(3))  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="augment: expected a callable"):
        ImprovedCD(sgld, buf, augment=3)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="k: expected an int >= 1; got 0"):
        ImprovedCD(sgld, buf, k=0)
    with pytest.raises(ValueError, match="kl_weight: expected a finite number >= 0; got -1"):
        ImprovedCD(sgld, buf, kl_weight=-1)
    with pytest.raises(ValueError, match="entropy_weight: expected a finite number >= 0; got nan"):
        ImprovedCD(sgld, buf, entropy_weight=float("nan"))
    with pytest.raises(ValueError, match="regularization: expected a finite number >= 0; got -0.5"):
        ImprovedCD(sgld, buf, regularization=-0.5)
    with pytest.raises(ValueError, match="n_entropy: expected an int >= 1; got 0"):
        ImprovedCD(sgld, buf, n_entropy=0)
    obj = ImprovedCD(sgld, buf, k=2)
    with pytest.raises(TypeError, match="energy: expected an nn.Module .* got function"):
        obj(lambda x: x.sum(-1), torch.zeros(2, 2, dtype=torch.float64))  # type: ignore[arg-type]
    model = Quadratic([1.0, 1.0], [0.0, 0.0])
    with pytest.raises(
        ValueError, match=r"batch: expected shape \(B, 2\) to match the buffer's event shape; got \(2, 3\)"
    ):
        obj(model, torch.zeros(2, 3, dtype=torch.float64))
    with pytest.raises(ValueError, match="batch: expected a finite tensor"):
        obj(model, torch.full((2, 2), float("inf"), dtype=torch.float64))
    boxed = ImprovedCD(SGLD(0.1, 0.01, space=Box(2, -1.0, 1.0)), buf, k=2)
    with pytest.raises(ValueError, match="batch"):
        boxed(model, torch.full((2, 2), 2.0, dtype=torch.float64))
