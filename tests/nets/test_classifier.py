"""ConvClassifier / MLPClassifier: shapes, trunk + head composition, per-sample logits, spectral norm, validation."""

from __future__ import annotations

import pytest
import torch
from torch import nn
from torch.nn.utils import parametrize

from ebms.nets.classifier import ConvClassifier, MLPClassifier

DTYPES = [torch.float32, torch.float64]


def _conv(**kw) -> ConvClassifier:
    torch.manual_seed(0)
    return ConvClassifier(1, 8, 10, channels=(8, 16), groups=4, **kw)


def _mlp(**kw) -> MLPClassifier:
    torch.manual_seed(0)
    return MLPClassifier((1, 8, 8), 10, hidden=(32, 16), **kw)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("make", [_conv, _mlp], ids=["conv", "mlp"])
def test_logits_are_head_of_trunk_with_shape_b_by_k(make, dtype):
    net = make().to(dtype)
    x = torch.randn(5, 1, 8, 8, dtype=dtype, generator=torch.Generator().manual_seed(1))
    out = net(x)
    assert out.shape == (5, 10) and out.dtype == dtype
    h = net.trunk(x)
    assert h.shape == (5, net.features)
    assert torch.equal(out, net.head(h))
    assert net.event_shape == (1, 8, 8) and net.n_classes == 10


@pytest.mark.parametrize("make", [_conv, _mlp], ids=["conv", "mlp"])
def test_each_rows_logits_do_not_depend_on_the_other_rows(make):
    # GroupNorm normalises within a sample: a chain's energy must not see the other chains
    net = make().double()
    g = torch.Generator().manual_seed(2)
    x = torch.randn(6, 1, 8, 8, dtype=torch.float64, generator=g)
    y = x.clone()
    y[1:] = 10 * torch.randn(5, 1, 8, 8, dtype=torch.float64, generator=g)
    torch.testing.assert_close(net(x)[0], net(y)[0], rtol=0, atol=1e-12)
    torch.testing.assert_close(net(x[:1])[0], net(x)[0], rtol=0, atol=1e-12)


def test_no_batchnorm_anywhere():
    for net in (_conv(), _mlp(), _conv(spectral_norm=True)):
        assert not any(isinstance(m, nn.modules.batchnorm._BatchNorm) for m in net.modules())
    assert any(isinstance(m, nn.GroupNorm) for m in _conv().modules())


@pytest.mark.parametrize("make", [_conv, _mlp], ids=["conv", "mlp"])
def test_spectral_norm_wraps_every_weight_layer_and_the_head(make):
    net = make(spectral_norm=True)
    layers = [m for m in net.modules() if isinstance(m, (nn.Conv2d, nn.Linear))]
    assert layers and all(parametrize.is_parametrized(m, "weight") for m in layers)
    assert not any(parametrize.is_parametrized(m) for m in make().modules() if isinstance(m, (nn.Conv2d, nn.Linear)))
    # after enough power iterations in training mode the head's largest singular value is 1
    x = torch.randn(4, 1, 8, 8)
    for _ in range(30):
        net(x)
    net.eval()
    sigma = torch.linalg.matrix_norm(net.head.weight.detach(), ord=2)
    assert abs(float(sigma) - 1.0) < 1e-3


def test_mlp_takes_flat_vectors_and_conv_rectangular_images():
    net = MLPClassifier(3, 2, hidden=(4,))
    assert net(torch.randn(7, 3)).shape == (7, 2)
    conv = ConvClassifier(3, (8, 6), 4, channels=(8,), groups=2, residual=False, activation="elu")
    assert conv(torch.randn(2, 3, 8, 6)).shape == (2, 4)


def test_input_gradient_matches_finite_differences():
    net = _mlp(activation="tanh").double()
    x = torch.randn(2, 1, 8, 8, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda z: net(z)[:, 3], (x,))


# ----------------------------------------------------------------------------- validation


@pytest.mark.parametrize(
    "kwargs, exc, msg",
    [
        (dict(n_classes=1), ValueError, r"n_classes: expected an int >= 2; got 1"),
        (dict(groups=3), ValueError, r"groups: expected a divisor of every entry of channels \(8, 16\); got 3"),
        (dict(channels=()), ValueError, r"channels: expected a non-empty sequence of positive ints; got \(\)"),
        (dict(image_size=(8,)), ValueError, r"image_size: expected 2 positive ints; got \(8,\)"),
        (dict(in_channels=0), ValueError, r"in_channels: expected an int >= 1; got 0"),
        (dict(spectral_norm=1), TypeError, r"spectral_norm: expected a bool; got 1"),
        (dict(residual="yes"), TypeError, r"residual: expected a bool; got 'yes'"),
        (dict(activation="nope"), ValueError, r"activation"),
    ],
)
def test_conv_classifier_validation_messages(kwargs, exc, msg):
    args = dict(in_channels=1, image_size=8, n_classes=10, channels=(8, 16), groups=4)
    args.update(kwargs)
    with pytest.raises(exc, match=msg):
        ConvClassifier(args.pop("in_channels"), args.pop("image_size"), args.pop("n_classes"), **args)


@pytest.mark.parametrize(
    "kwargs, exc, msg",
    [
        (dict(dim=0), ValueError, r"dim: expected a positive int or a tuple of positive ints \(event shape\); got 0"),
        (dict(n_classes=1), ValueError, r"n_classes: expected an int >= 2; got 1"),
        (dict(hidden=()), ValueError, r"hidden: expected a non-empty sequence of positive ints; got \(\)"),
        (dict(spectral_norm=None), TypeError, r"spectral_norm: expected a bool; got None"),
    ],
)
def test_mlp_classifier_validation_messages(kwargs, exc, msg):
    args = dict(dim=4, n_classes=3, hidden=(8,))
    args.update(kwargs)
    with pytest.raises(exc, match=msg):
        MLPClassifier(args.pop("dim"), args.pop("n_classes"), **args)


@pytest.mark.parametrize("make", [_conv, _mlp], ids=["conv", "mlp"])
def test_bad_inputs_name_x(make):
    net = make()
    with pytest.raises(ValueError, match=r"x: expected shape \(B, 1, 8, 8\); got \(2, 1, 8, 7\)"):
        net(torch.randn(2, 1, 8, 7))
    with pytest.raises(TypeError, match=r"x: expected a floating-point tensor; got dtype torch.int64"):
        net(torch.zeros(2, 1, 8, 8, dtype=torch.long))
    with pytest.raises(TypeError, match=r"x: expected a torch.Tensor; got list"):
        net([1.0])
