"""NoiseConditionalEnergy: shapes, per-sample function, level conditioning, validation."""

from __future__ import annotations

import pytest
import torch

from ebms.energy import energy_and_grad
from ebms.nets.noise_conditional import NoiseConditionalEnergy


def _conv(**kw) -> NoiseConditionalEnergy:  # type: ignore[no-untyped-def]
    torch.manual_seed(0)
    return NoiseConditionalEnergy((1, 8, 8), 3, channels=(8, 16), groups=4, **kw)


def _mlp() -> NoiseConditionalEnergy:
    torch.manual_seed(0)
    return NoiseConditionalEnergy(3, 4, trunk="mlp", hidden=(16, 8))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("make,shape", [(_conv, (1, 8, 8)), (_mlp, (3,))])
def test_energy_has_shape_b_and_int_level_equals_tensor_level(make, shape, dtype) -> None:  # type: ignore[no-untyped-def]
    net = make().to(dtype)
    x = torch.randn(5, *shape, dtype=dtype)
    e = net(x, 2)
    assert e.shape == (5,) and e.dtype == dtype
    assert torch.equal(e, net(x, torch.full((5,), 2)))


@pytest.mark.parametrize("make,shape", [(_conv, (1, 8, 8)), (_mlp, (3,))])
def test_energy_of_a_row_does_not_depend_on_the_other_rows(make, shape) -> None:  # type: ignore[no-untyped-def]
    net = make().double()
    x = torch.randn(6, *shape, dtype=torch.float64)
    t = torch.tensor([0, 1, 2, 0, 1, 2])
    full = net(x, t)
    single = torch.cat([net(x[i : i + 1], t[i : i + 1]) for i in range(6)])
    torch.testing.assert_close(full, single, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("make,shape", [(_conv, (1, 8, 8)), (_mlp, (3,))])
def test_levels_start_equal_and_separate_once_the_embedding_moves(make, shape) -> None:  # type: ignore[no-untyped-def]
    net = make()
    x = torch.randn(4, *shape)
    assert torch.equal(net(x, 0), net(x, 1))
    with torch.no_grad():
        net.film.weight[1].normal_()
    assert not torch.allclose(net(x, 0), net(x, 1))
    assert torch.equal(net(x, 0), net(x, 2))


def test_at_gives_a_sampler_energy_with_the_autograd_gradient() -> None:
    net = _conv().double()
    x = torch.randn(3, 1, 8, 8, dtype=torch.float64)
    e, g = energy_and_grad(net.at(1), x)
    xg = x.clone().requires_grad_(True)
    (want,) = torch.autograd.grad(net(xg, 1).sum(), xg)
    torch.testing.assert_close(e, net(x, 1))
    torch.testing.assert_close(g, want)


def test_embedding_receives_gradient_only_for_the_levels_used() -> None:
    net = _mlp()
    net(torch.randn(4, 3), torch.tensor([0, 2, 2, 0])).sum().backward()
    grad = net.film.weight.grad
    assert grad is not None
    assert bool(grad[[1, 3]].eq(0).all()) and bool(grad[[0, 2]].ne(0).any())


def test_bad_arguments_name_themselves() -> None:
    with pytest.raises(ValueError, match="trunk: expected 'conv' or 'mlp'; got 'rnn'"):
        NoiseConditionalEnergy(3, 2, trunk="rnn")
    with pytest.raises(ValueError, match=r"event_shape: expected \(C, H, W\) for trunk='conv'; got 3"):
        NoiseConditionalEnergy(3, 2)
    with pytest.raises(ValueError, match=r"event_shape: expected D or \(D,\) for trunk='mlp'; got \(1, 4, 4\)"):
        NoiseConditionalEnergy((1, 4, 4), 2, trunk="mlp")
    with pytest.raises(ValueError, match=r"event_shape: expected positive ints \(an int or a tuple\); got 0"):
        NoiseConditionalEnergy(0, 2, trunk="mlp")
    with pytest.raises(ValueError, match=r"groups: expected a divisor of every entry of channels \(8, 12\); got 8"):
        NoiseConditionalEnergy((1, 4, 4), 2, channels=(8, 12), groups=8)
    with pytest.raises(ValueError, match=r"channels: expected a non-empty sequence of positive ints; got \(8, 0\)"):
        NoiseConditionalEnergy((1, 4, 4), 2, channels=(8, 0))
    with pytest.raises(ValueError, match="groups: expected an int >= 1; got 0"):
        NoiseConditionalEnergy((1, 4, 4), 2, groups=0)
    with pytest.raises(ValueError, match="n_levels: expected an int >= 1; got 0"):
        NoiseConditionalEnergy(3, 0, trunk="mlp")
    with pytest.raises(ValueError, match="hidden: expected a non-empty sequence of positive ints; got"):
        NoiseConditionalEnergy(3, 2, trunk="mlp", hidden=())
    net = _mlp()
    x = torch.randn(2, 3)
    with pytest.raises(ValueError, match=r"t: expected levels in \[0, 3\]; got min 4, max 4"):
        net(x, 4)
    with pytest.raises(ValueError, match=r"t: expected a LongTensor of shape \(2,\); got torch.int64 \(3,\)"):
        net(x, torch.zeros(3, dtype=torch.long))
    with pytest.raises(ValueError, match=r"t: expected a LongTensor of shape \(2,\); got torch.float32"):
        net(x, torch.zeros(2))
    with pytest.raises(TypeError, match=r"t: expected an int or a LongTensor \(2,\); got bool"):
        net(x, True)
    with pytest.raises(ValueError, match=r"x: expected shape \(B, 3\); got \(2, 4\)"):
        net(torch.randn(2, 4), 0)
    with pytest.raises(TypeError, match="x: expected a floating-point tensor"):
        net(torch.zeros(2, 3, dtype=torch.long), 0)


def test_the_last_group_norm_makes_the_energy_blind_to_scale_and_normalize_false_does_not() -> None:
    # With GroupNorm and no biases, the skip paths grow like c while the normalised branches do not, and the
    # last norm divides the scale out: E(c x) tends to a finite limit as c grows (the energy is bounded).
    # Without it, a relu net without biases is homogeneous, E(c x) = c E(x): the energy can call a wide image
    # worse, which a recovery-likelihood energy must learn.
    for normalize in (True, False):
        torch.manual_seed(0)
        net = NoiseConditionalEnergy((1, 8, 8), 2, channels=(8, 16), groups=4, activation="relu",
                                     normalize=normalize).double()
        with torch.no_grad():
            for m in net.modules():
                if isinstance(m, (torch.nn.Conv2d, torch.nn.Linear)) and m.bias is not None:
                    m.bias.zero_()
        x = torch.randn(3, 1, 8, 8, dtype=torch.float64)
        e1, e10 = net(1e6 * x, 0), net(1e7 * x, 0)
        if normalize:
            torch.testing.assert_close(e10, e1, rtol=1e-3, atol=1e-6)
        else:
            torch.testing.assert_close(e10, 10 * e1, rtol=1e-10, atol=1e-12)
    assert not any(isinstance(m, torch.nn.GroupNorm) for m in net.modules())
    with pytest.raises(TypeError, match="normalize: expected True or False; got 0"):
        NoiseConditionalEnergy((1, 8, 8), 2, normalize=0)  # type: ignore[arg-type]
