"""PixelCNNModel: normalisation by enumeration, sampling law by chi-square, bits/dim, the E-ARM
adapter's views, the NLL objective, training on binarised digits, validation messages."""

from __future__ import annotations

import itertools
import math
import time

import pytest
import torch

from ebms.models.pixelcnn import PixelCNNAdapter, PixelCNNModel
from ebms.nets.pixelcnn import PixelCNN
from ebms.objectives import PixelNLL


def _model(height: int, width: int, *, gated: bool = False, channels: int = 1, scale: float = 0.7) -> PixelCNNModel:
    """A float64 model with spread-out conditionals (weights N(0, scale^2), not the small default init)."""
    g = torch.Generator().manual_seed(3)
    net = PixelCNN(channels, hidden=8, layers=2, gated=gated).double()
    with torch.no_grad():
        for p in net.parameters():
            p.copy_(scale * torch.randn(p.shape, generator=g, dtype=torch.float64))
    return PixelCNNModel(net, height, width)


def _all_images(channels: int, height: int, width: int) -> torch.Tensor:
    d = channels * height * width
    grid = torch.tensor(list(itertools.product([0.0, 1.0], repeat=d)), dtype=torch.float64)
    return grid.reshape(-1, channels, height, width)


@pytest.mark.parametrize("gated", [False, True])
@pytest.mark.parametrize(("channels", "height", "width"), [(1, 2, 2), (1, 3, 3), (2, 2, 3)])
def test_log_prob_sums_to_one_over_every_image(gated, channels, height, width):
    model = _model(height, width, gated=gated, channels=channels)
    with torch.no_grad():
        lp = model.log_prob(_all_images(channels, height, width))
    assert abs(float(torch.logsumexp(lp, 0).exp()) - 1.0) < 1e-6
    assert float(lp.max() - lp.min()) > 1.0  # not the uniform law


class _Opaque(torch.nn.Module):
    """The same net behind a module that is not a PixelCNN: sampling then takes the full-image pass."""

    def __init__(self, net: PixelCNN) -> None:
        super().__init__()
        self.inner = net
        self.channels = net.channels

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.inner(x)


@pytest.mark.parametrize("gated", [False, True])
@pytest.mark.parametrize(("channels", "height", "width", "layers", "kernel"),
                         [(1, 9, 7, 2, 3), (1, 12, 12, 3, 3), (2, 6, 10, 2, 5), (1, 1, 5, 2, 3)])
def test_window_sampling_draws_exactly_the_full_image_passes_images(gated, channels, height, width, layers, kernel):
    g = torch.Generator().manual_seed(4)
    net = PixelCNN(channels, hidden=6, layers=layers, kernel=kernel, gated=gated).double()
    with torch.no_grad():
        for p in net.parameters():
            p.copy_(0.7 * torch.randn(p.shape, generator=g, dtype=torch.float64))
    windowed = PixelCNNModel(net, height, width).sample(16, generator=torch.Generator().manual_seed(9))
    full = PixelCNNModel(_Opaque(net), height, width).sample(16, generator=torch.Generator().manual_seed(9))
    assert torch.equal(windowed, full)
    assert 0 < float(windowed.mean()) < 1  # not a constant image
    with torch.no_grad():  # the window's logits equal the full pass's at the pixel it serves
        r = layers * (kernel // 2) + int(gated)
        i, j = height - 1, width // 2
        top, left = max(0, i - r), max(0, j - r)
        part = net(full[:, :, top:i + 1, left:min(width, j + r + 1)])[:, :, i - top, j - left]
        torch.testing.assert_close(part, net(full)[:, :, i, j], rtol=0, atol=1e-12)


def test_flat_and_image_forms_give_the_same_log_prob_and_bits_per_dim_is_nats_over_pixels():
    model = _model(3, 4)
    x = _all_images(1, 3, 4)[::97]
    lp = model.log_prob(x)
    torch.testing.assert_close(model.log_prob(x.flatten(1)), lp, rtol=0, atol=1e-12)
    torch.testing.assert_close(model.bits_per_dim(x), -lp / (12 * math.log(2.0)), rtol=1e-15, atol=0)
    torch.testing.assert_close(model.logits(x.flatten(1)), model.net(x), rtol=0, atol=0)


@pytest.mark.parametrize("gated", [False, True])
def test_samples_follow_the_law_of_log_prob_on_2x2(gated):
    model = _model(2, 2, gated=gated)
    n = 20_000
    x = model.sample(n, generator=torch.Generator().manual_seed(5))
    assert x.shape == (n, 1, 2, 2) and x.dtype == torch.float64 and not x.requires_grad
    codes = (x.flatten(1) * torch.tensor([8.0, 4.0, 2.0, 1.0], dtype=torch.float64)).sum(1).long()
    counts = torch.bincount(codes, minlength=16).double()
    with torch.no_grad():
        p = model.log_prob(_all_images(1, 2, 2)).exp()  # same enumeration order (first pixel most significant)
    chi2 = float(((counts - n * p) ** 2 / (n * p)).sum())
    assert float(p.min()) * n > 5  # the chi-square approximation holds
    # 15 degrees of freedom: the 0.999 quantile is 37.70 (a false alarm once in 1000 seeds)
    assert chi2 < 37.70, chi2


def test_sampling_is_reproducible_from_the_generator_and_binary():
    model = _model(3, 3, gated=True)
    a = model.sample(7, generator=torch.Generator().manual_seed(1))
    b = model.sample(7, generator=torch.Generator().manual_seed(1))
    assert torch.equal(a, b) and set(a.unique().tolist()) <= {0.0, 1.0}


class _Wrapped(torch.nn.Module):
    """The same logits from a net the model cannot recognise (so it samples on full images)."""

    def __init__(self, net: PixelCNN) -> None:
        super().__init__()
        self.net, self.channels = net, net.channels

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)


@pytest.mark.parametrize("gated", [False, True])
def test_row_cropped_sampling_draws_what_full_image_sampling_draws(gated):
    model = _model(4, 3, gated=gated)
    full = PixelCNNModel(_Wrapped(model.net), 4, 3)
    a = model.sample(50, generator=torch.Generator().manual_seed(4))
    b = full.sample(50, generator=torch.Generator().manual_seed(4))
    assert torch.equal(a, b)


@pytest.mark.parametrize("pair", ["zero", "symmetric"])
def test_adapter_teacher_forced_steps_reproduce_log_prob_in_raster_order(pair):
    model = _model(2, 3, channels=2)
    adapter = PixelCNNAdapter(model, pair=pair)
    x = _all_images(2, 2, 3)[::301]
    logits, targets, mask = adapter.teacher_forced(x)
    b, k = x.shape[0], 12
    assert logits.shape == (b, k, 2) and targets.shape == (b, k) and targets.dtype == torch.long
    assert mask.dtype == torch.bool and bool(mask.all()) and mask.shape == (b, k)
    # step k = pixel-major: pixel k // 2 in raster order, channel k % 2
    assert torch.equal(targets, x.permute(0, 2, 3, 1).reshape(b, k).long())
    step_lp = logits.log_softmax(-1).gather(-1, targets[..., None]).squeeze(-1)
    torch.testing.assert_close(step_lp.sum(1), model.log_prob(x), rtol=0, atol=1e-12)
    lg = model.net(x).permute(0, 2, 3, 1).reshape(b, k)
    if pair == "zero":
        assert torch.equal(logits[..., 0], torch.zeros_like(lg)) and torch.equal(logits[..., 1], lg)
    else:
        torch.testing.assert_close(logits[..., 1] - logits[..., 0], lg, rtol=0, atol=1e-12)
        assert torch.equal(logits.sum(-1), torch.zeros_like(lg))


@pytest.mark.parametrize("flat", [False, True])
def test_adapter_draws_are_model_samples_shaped_like_the_batch(flat):
    model = _model(3, 3)
    adapter = PixelCNNAdapter(model)
    batch = _all_images(1, 3, 3)[:5].float()
    batch = batch.flatten(1) if flat else batch
    drawn = adapter.draw(batch, torch.Generator().manual_seed(2))
    expected = model.sample(5, generator=torch.Generator().manual_seed(2))
    assert drawn.shape == batch.shape and drawn.dtype == torch.float32 and not drawn.requires_grad
    torch.testing.assert_close(drawn, expected.reshape(batch.shape).float(), rtol=0, atol=0)
    torch.testing.assert_close(adapter.bits_per_dim(batch), model.bits_per_dim(batch.double()), rtol=0, atol=0)
    assert adapter.bits_per_dim(batch).dtype == torch.float64  # binary values are cast to the net's dtype


def test_pixel_nll_is_the_mean_nats_per_pixel_for_the_model_and_its_adapter():
    model = _model(3, 3)
    x = _all_images(1, 3, 3)[::50]
    want = -model.log_prob(x).mean() / 9
    for wrapped in (model, PixelCNNAdapter(model)):
        out = PixelNLL()(wrapped, x)
        torch.testing.assert_close(out.loss, want, rtol=0, atol=1e-14)
        assert out.loss.requires_grad
        assert out.metrics["bits_per_dim"] == pytest.approx(float(want.detach()) / math.log(2.0), rel=1e-6)  # logged in float32


def _bernoulli_bits_per_dim(x: torch.Tensor) -> float:
    """Exact NLL (bits/pixel) on ``x`` of the independent Bernoulli with ``x``'s pixel means (its MLE)."""
    p = x.double().mean(0)
    h = -(torch.xlogy(p, p) + torch.xlogy(1 - p, 1 - p))  # 0 log 0 = 0
    return float(h.mean()) / math.log(2.0)


@pytest.mark.parametrize(("gated", "steps"), [(False, 400), pytest.param(True, 200, marks=pytest.mark.slow)])
def test_training_on_binarised_digits_beats_the_independent_bernoulli_baseline(gated, steps):
    pytest.importorskip("sklearn")
    from ebms.data.digits import binarized_digits
    from ebms.train import Trainer

    x, _, _ = binarized_digits()
    torch.manual_seed(0)
    model = PixelCNNModel(PixelCNN(hidden=16, layers=3, gated=gated), 8, 8)
    baseline = _bernoulli_bits_per_dim(x)
    start = time.perf_counter()
    trainer = Trainer(PixelNLL(), model, x, steps=steps, batch_size=64, run_dir=None, progress=False,
                      optimizer=lambda groups: torch.optim.Adam(groups, lr=3e-3))
    trainer.fit()
    with torch.no_grad():
        bits = float(model.bits_per_dim(x).mean())
    # deterministic (seeded init and trainer); measured: plain 0.490, gated 0.474 against 0.566 bits/dim
    assert bits < baseline - 0.05, (bits, baseline, time.perf_counter() - start)


def test_bad_arguments_are_named():
    model = _model(2, 2)
    with pytest.raises(TypeError, match=r"^net: expected a torch.nn.Module mapping \(B, C, H, W\) to logits; got str"):
        PixelCNNModel("net", 2, 2)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"^height: expected an int >= 1; got 0"):
        PixelCNNModel(model.net, 0, 2)
    with pytest.raises(TypeError, match=r"^width: expected an int; got 2.0"):
        PixelCNNModel(model.net, 2, 2.0)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"^x: expected values in \{0, 1\}; got 1 other value\(s\), e.g. 0.5"):
        model.log_prob(torch.tensor([[0.0, 1.0, 0.5, 1.0]], dtype=torch.float64))
    with pytest.raises(ValueError, match=r"^x: expected shape \(B, 1, 2, 2\) or \(B, 4\); got \(3, 5\)"):
        model.log_prob(torch.zeros(3, 5, dtype=torch.float64))
    with pytest.raises(ValueError, match=r"^x: expected at least one image; got shape \(0, 4\)"):
        model.log_prob(torch.zeros(0, 4, dtype=torch.float64))
    with pytest.raises(TypeError, match=r"^x: expected a torch.Tensor of binary images; got list"):
        model.bits_per_dim([[0.0] * 4])  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"^x: expected a floating-point tensor; got dtype torch.int64"):
        model.log_prob(torch.zeros(1, 4, dtype=torch.long))
    with pytest.raises(ValueError, match=r"^n: expected an int >= 1; got 0"):
        model.sample(0)
    squash = PixelCNNModel(torch.nn.Flatten(), 2, 2)
    with pytest.raises(ValueError, match=r"^net: expected logits of the input's shape \(1, 1, 2, 2\); got \(1, 4\)"):
        squash.log_prob(torch.zeros(1, 4))


def test_bad_adapter_and_objective_arguments_are_named():
    model = _model(2, 2)
    with pytest.raises(TypeError, match=r"^model: expected a PixelCNNModel; got PixelCNN"):
        PixelCNNAdapter(model.net)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"^pair: expected one of 'zero', 'symmetric'; got 'half'"):
        PixelCNNAdapter(model, pair="half")
    adapter = PixelCNNAdapter(model)
    with pytest.raises(ValueError, match=r"^batch: expected values in \{0, 1\}; got 4 other value\(s\), e.g. 2"):
        adapter.teacher_forced(torch.full((1, 4), 2.0, dtype=torch.float64))
    with pytest.raises(ValueError, match=r"^batch: expected shape \(B, 1, 2, 2\) or \(B, 4\); got \(1, 1, 4, 1\)"):
        adapter.draw(torch.zeros(1, 1, 4, 1), torch.Generator())
    with pytest.raises(TypeError, match=r"^model: expected a PixelCNNModel or PixelCNNAdapter; got PixelCNN"):
        PixelNLL()(model.net, torch.zeros(1, 4))


def test_the_earm_objective_accepts_the_adapter_and_its_ce_is_the_pixel_nll():
    earm = pytest.importorskip("ebms.objectives.earm")
    model = _model(3, 3)
    adapter = PixelCNNAdapter(model)
    x = _all_images(1, 3, 3)[::40]
    out = earm.EARM(start_step=0)(adapter, x, generator=torch.Generator().manual_seed(0))
    assert out.loss.requires_grad and math.isfinite(float(out.loss.detach()))
    assert out.metrics["ce"] == pytest.approx(float(PixelNLL()(model, x).loss.detach()), rel=1e-6)
    assert out.metrics["active"] == 1.0
