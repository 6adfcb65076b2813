"""ConvEnergy: shapes, per-sample energies (GroupNorm, with a BatchNorm negative control), gradients, checks."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from ebms.nets import ACTIVATIONS, ConvEnergy

F64 = torch.float64


def _imgs(*shape, seed=1, dtype=torch.float32) -> torch.Tensor:
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed), dtype=dtype)


@pytest.mark.parametrize(
    "kwargs, shape",
    [
        (dict(in_channels=1, image_size=8, channels=(8, 16)), (3, 1, 8, 8)),
        (dict(in_channels=3, image_size=(6, 10), channels=(8, 8, 16), residual=False), (2, 3, 6, 10)),
        (dict(in_channels=2, image_size=5, channels=(4,), groups=2, activation="tanh"), (4, 2, 5, 5)),
        (dict(in_channels=1, image_size=7, channels=(8, 16), spectral_norm=True), (2, 1, 7, 7)),
        (dict(in_channels=1, image_size=7, channels=(8, 16), normalize=False), (2, 1, 7, 7)),
    ],
)
def test_energy_and_grad_shapes(kwargs, shape):
    torch.manual_seed(0)
    net = ConvEnergy(**kwargs)
    x = _imgs(*shape)
    e = net(x)
    assert e.shape == (shape[0],)
    e2, g = net.energy_and_grad(x)
    assert e2.shape == (shape[0],) and g.shape == x.shape
    assert not g.requires_grad and all(p.grad is None for p in net.parameters())


@pytest.mark.parametrize("mode", ["train", "eval"])
def test_energy_of_a_row_does_not_depend_on_other_rows(mode):
    torch.manual_seed(0)
    net = ConvEnergy(1, 8, channels=(8, 16)).to(F64).train(mode == "train")
    x = _imgs(5, 1, 8, 8, dtype=F64)
    y = x.clone()
    y[1:] = 3.0 * _imgs(4, 1, 8, 8, seed=7, dtype=F64) + 1.0  # very different batch statistics
    e_x, g_x = net.energy_and_grad(x)
    e_y, g_y = net.energy_and_grad(y)
    with torch.no_grad():
        e_alone = net(x[:1])
    torch.testing.assert_close(e_x[0], e_y[0], rtol=0, atol=1e-12)
    torch.testing.assert_close(g_x[0], g_y[0], rtol=0, atol=1e-12)
    torch.testing.assert_close(e_x[:1], e_alone, rtol=0, atol=1e-12)


def test_batchnorm_negative_control_couples_the_rows():
    # what ConvEnergy avoids: with BatchNorm, E(x)[0] moves when the other rows move
    torch.manual_seed(0)
    bn_net = nn.Sequential(
        nn.Conv2d(1, 4, 3, padding=1), nn.BatchNorm2d(4), nn.SiLU(), nn.Flatten(), nn.Linear(4 * 64, 1)
    )
    x = _imgs(5, 1, 8, 8)
    y = x.clone()
    y[1:] = 3.0 * _imgs(4, 1, 8, 8, seed=7) + 1.0
    with torch.no_grad():
        gap = (bn_net(x)[0] - bn_net(y)[0]).abs()
    assert float(gap) > 1e-3


def test_input_gradient_passes_gradcheck():
    torch.manual_seed(0)
    net = ConvEnergy(1, 6, channels=(4, 8), groups=2, activation="softplus").to(F64)
    x = _imgs(2, 1, 6, 6, dtype=F64).requires_grad_(True)
    assert torch.autograd.gradcheck(lambda v: net(v), (x,), eps=1e-6, atol=1e-6)
    _, g = net.energy_and_grad(x.detach())
    h = 1e-5
    i = (0, 0, 2, 3)
    bump = torch.zeros_like(x)
    bump[i] = h
    with torch.no_grad():
        fd = (net(x + bump) - net(x - bump))[0] / (2 * h)
    torch.testing.assert_close(g[i], fd, rtol=0, atol=1e-7)


def test_spectral_norm_bounds_each_reshaped_kernel():
    torch.manual_seed(0)
    net = ConvEnergy(1, 6, channels=(8, 16), spectral_norm=True)
    x = _imgs(2, 1, 6, 6)
    for _ in range(60):  # one power iteration per weight read in train mode
        net(x)
    net.eval()
    layers = [m for m in net.modules() if isinstance(m, (nn.Conv2d, nn.Linear))]
    assert len(layers) == 1 + 2 * 2 + 1 + 1  # stem, 2 convs per block, 1 projection, head
    for m in layers:
        w = m.weight.detach().reshape(m.weight.shape[0], -1)
        assert abs(float(torch.linalg.matrix_norm(w, ord=2)) - 1.0) < 1e-3


def test_residual_flag_changes_the_network():
    torch.manual_seed(0)
    res = ConvEnergy(1, 6, channels=(8, 8))
    torch.manual_seed(0)
    plain = ConvEnergy(1, 6, channels=(8, 8), residual=False)
    # the only extra weights are the strided 1x1 projection of block 2: 8 * 8 + 8
    assert sum(p.numel() for p in res.parameters()) - sum(p.numel() for p in plain.parameters()) == 72
    x = _imgs(3, 1, 6, 6)
    assert not torch.allclose(res(x), plain(x))


def test_activation_object_is_accepted():
    net = ConvEnergy(1, 4, channels=(4,), groups=2, activation=ACTIVATIONS["elu"])
    assert net.activation is ACTIVATIONS["elu"]


def test_group_norm_makes_the_energy_blind_to_scale_and_normalize_false_does_not():
    # With GroupNorm and no biases the normalised branches do not grow with c and the last norm divides the
    # scale out: E(c x) tends to a finite limit. Without it a ReLU net without biases is homogeneous,
    # E(c x) = c E(x), so the energy can tell a faint image from a strong one.
    x = _imgs(3, 1, 8, 8, dtype=F64)
    for normalize in (True, False):
        torch.manual_seed(0)
        net = ConvEnergy(1, 8, channels=(8, 16), groups=4, activation="relu", normalize=normalize).double()
        with torch.no_grad():
            for m in net.modules():
                if isinstance(m, (nn.Conv2d, nn.Linear)) and m.bias is not None:
                    m.bias.zero_()
        e1, e10 = net(1e6 * x), net(1e7 * x)
        if normalize:
            torch.testing.assert_close(e10, e1, rtol=1e-3, atol=1e-6)
        else:
            torch.testing.assert_close(e10, 10 * e1, rtol=1e-10, atol=1e-12)
    assert not any(isinstance(m, nn.GroupNorm) for m in net.modules())


@pytest.mark.parametrize(
    "kwargs, exc, pattern",
    [
        (dict(groups=5), ValueError, r"groups: expected a divisor of every entry of channels \(8, 16\); got 5"),
        (dict(groups=0), ValueError, r"groups: expected an int >= 1; got 0"),
        (dict(channels=()), ValueError, r"channels: expected a non-empty sequence of positive ints; got \(\)"),
        (dict(channels=(8, 0)), ValueError, r"channels: .*; got \(8, 0\)"),
        (dict(image_size=(8,)), ValueError, r"image_size: expected 2 positive ints; got \(8,\)"),
        (dict(image_size=0), ValueError, r"image_size: expected 2 positive ints; got \(0, 0\)"),
        (dict(in_channels=0), ValueError, r"in_channels: expected an int >= 1; got 0"),
        (dict(residual=1), TypeError, r"residual: expected a bool; got 1"),
        (dict(spectral_norm=None), TypeError, r"spectral_norm: expected a bool; got None"),
        (dict(normalize=0), TypeError, r"normalize: expected a bool; got 0"),
        (dict(activation="swoosh"), ValueError, r"activation: expected one of .*; got 'swoosh'"),
    ],
)
def test_bad_constructor_arguments_are_named(kwargs, exc, pattern):
    args = dict(in_channels=1, image_size=8, channels=(8, 16))
    args.update(kwargs)
    with pytest.raises(exc, match=pattern):
        ConvEnergy(**args)


def test_bad_input_messages_name_x():
    net = ConvEnergy(3, (8, 6), channels=(8,))
    with pytest.raises(ValueError, match=r"x: expected shape \(B, 3, 8, 6\); got \(2, 3, 6, 8\)"):
        net(torch.zeros(2, 3, 6, 8))
    with pytest.raises(ValueError, match=r"x: expected shape \(B, 3, 8, 6\); got \(3, 8, 6\)"):
        net(torch.zeros(3, 8, 6))
    with pytest.raises(TypeError, match=r"x: expected a floating-point tensor; got dtype torch.uint8"):
        net(torch.zeros(2, 3, 8, 6, dtype=torch.uint8))
    with pytest.raises(TypeError, match=r"x: expected a torch.Tensor; got tuple"):
        net((1, 2))


def test_conv_energy_does_not_claim_site_blocks_and_loads_old_state_dicts() -> None:
    # a `blocks` attribute would read as ebms.capabilities.SupportsBlocks (a site partition for
    # block Gibbs); the residual stages are called `stages`, and state dicts saved under the old
    # key names still load into them
    from ebms.capabilities import SupportsBlocks, supports

    torch.manual_seed(0)
    net = ConvEnergy(1, 8, channels=(8, 8), groups=4)
    assert not supports(net, SupportsBlocks)
    old = {k.replace("stages.", "blocks.", 1): v.clone() for k, v in net.state_dict().items()}
    assert any(k.startswith("blocks.") for k in old)
    fresh = ConvEnergy(1, 8, channels=(8, 8), groups=4)
    fresh.load_state_dict(old)
    x = torch.randn(3, 1, 8, 8)
    torch.testing.assert_close(fresh(x), net(x), rtol=0, atol=0)


@pytest.mark.parametrize("channels", [(8,), (8, 8), (8, 16, 16), (8, 8, 8, 8)])
def test_receptive_field_is_the_support_of_a_central_feature_s_input_gradient(channels):
    # Brute force: the input pixels a central location of the last feature map depends on are those where
    # its gradient is non-zero (random weights, float64, an image wide enough that no border clips it).
    from ebms.nets import NoiseConditionalEnergy, receptive_field

    torch.manual_seed(0)
    net = ConvEnergy(1, 96, channels=channels, groups=4, normalize=False).double()
    x = _imgs(1, 1, 96, 96, dtype=F64).requires_grad_(True)
    h = net.stages(net.stem(x))
    c = h.shape[-1] // 2
    h[0, :, c, c].sum().backward()
    support = x.grad[0, 0].abs() > 0
    rows, cols = support.any(1).nonzero(), support.any(0).nonzero()
    side = int(rows.max() - rows.min() + 1)
    assert side == int(cols.max() - cols.min() + 1) == receptive_field(channels) == net.receptive_field
    nc = NoiseConditionalEnergy((1, 96, 96), 2, channels=channels, groups=4, normalize=False)
    assert nc.receptive_field == side
    assert NoiseConditionalEnergy(3, 2, trunk="mlp", hidden=(8,)).receptive_field is None
    from ebms.nets import ConvClassifier

    clf = ConvClassifier(1, 96, 3, channels=channels, groups=4).double()
    for block in clf.trunk.stages:  # GroupNorm's statistics span the whole map: the convolutions' window only
        block.norm1, block.norm2 = torch.nn.Identity(), torch.nn.Identity()
    x.grad = None
    h = clf.trunk.stages(clf.trunk.stem(x))
    h[0, :, c, c].sum().backward()
    support = x.grad[0, 0].abs() > 0
    rows = support.any(1).nonzero()
    assert clf.receptive_field == int(rows.max() - rows.min() + 1) == side


def test_receptive_field_of_the_image_recipes_two_stages_is_smaller_than_a_digit():
    from ebms.nets import receptive_field

    assert receptive_field((16, 32)) == 13 and receptive_field((16, 32, 64, 64)) == 49
    assert receptive_field((16, 32, 64)) == 25  # classifier-mnist and jem-mnist
    with pytest.raises(ValueError, match=r"channels: expected a non-empty sequence"):
        receptive_field(())
