"""The weight average (``WeightAverage``, ``Trainer(ema=...)``): its recursion against a closed form, and that it
is saved, resumed and restored with the rest of the state."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from _train_helpers import GaussianML, NoisyNCE, make_trainer, metric_lines
from torch import nn

from ebms.errors import CheckpointError
from ebms.train import CheckpointStore, WeightAverage


class Tied(nn.Module):
    """A parameter, a tied copy of it, a float buffer and an integer buffer."""

    def __init__(self) -> None:
        super().__init__()
        self.a = nn.Linear(2, 2, bias=False)
        self.b = nn.Linear(2, 2, bias=False)
        self.b.weight = self.a.weight
        self.register_buffer("running", torch.zeros(2))
        self.register_buffer("count", torch.zeros((), dtype=torch.long))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_the_average_is_the_closed_form_of_its_recursion(dtype):
    """After weights w_1..w_n the average is d^n w_0 + (1 - d) sum_i d^(n-i) w_i; buffers are the last ones."""
    torch.manual_seed(0)
    m = Tied().to(dtype)
    d = 0.9
    w0 = m.a.weight.detach().clone().double()
    avg = WeightAverage(m, d)
    ws = []
    for i in range(1, 6):
        with torch.no_grad():
            m.a.weight.copy_(torch.randn(2, 2, dtype=dtype))
        m.running.fill_(float(i))
        m.count.fill_(i)
        ws.append(m.a.weight.detach().clone().double())
        avg.update(m)
    n = len(ws)
    want = d**n * w0 + (1 - d) * sum(d ** (n - i) * w for i, w in enumerate(ws, start=1))
    got = avg.state_dict()
    tol = 1e-12 if dtype == torch.float64 else 1e-6
    assert torch.allclose(got["a.weight"].double(), want, atol=tol)
    assert torch.equal(got["a.weight"], got["b.weight"])  # tied entries stay equal
    assert got["a.weight"].dtype == dtype
    assert torch.equal(got["running"], torch.full((2,), 5.0, dtype=dtype)) and int(got["count"]) == 5
    assert avg.averaged_keys == ("a.weight", "b.weight")
    fresh = avg.copy_to(Tied().to(dtype))
    assert torch.equal(fresh.a.weight, got["a.weight"])


def test_the_average_does_not_touch_the_trained_weights_or_their_gradients():
    m = nn.Linear(3, 1)
    before = {k: v.clone() for k, v in m.state_dict().items()}
    avg = WeightAverage(m, 0.5)
    m(torch.ones(1, 3)).sum().backward()
    avg.update(m)
    assert all(torch.equal(before[k], v) for k, v in m.state_dict().items())
    assert m.weight.grad is not None and avg.state_dict()["weight"].grad is None
    assert avg.state_dict()["weight"].data_ptr() != m.weight.data_ptr()


@pytest.mark.parametrize("decay", [0, 1, -0.5, 1.5, float("nan"), True])
def test_a_decay_outside_the_open_unit_interval_is_refused(decay):
    with pytest.raises((ValueError, TypeError), match=r"^decay: expected a number in \(0, 1\)"):
        WeightAverage(nn.Linear(1, 1), decay)


def test_loading_an_average_of_another_model_names_the_keys():
    avg = WeightAverage(nn.Linear(2, 2), 0.9)
    with pytest.raises(CheckpointError, match=r"missing keys \['bias'\]"):
        avg.load_state_dict({"weight": torch.zeros(2, 2)}, "ckpt.json")
    with pytest.raises(CheckpointError, match=r"^ckpt.json: averaged weights: weight: shape \(3, 2\)"):
        avg.load_state_dict({"weight": torch.zeros(3, 2), "bias": torch.zeros(2)}, "ckpt.json")


def test_the_trainer_averages_after_every_step_and_checkpoints_it(tmp_path: Path) -> None:
    t = make_trainer(GaussianML(), tmp_path, steps=10, ema=0.8)
    seen = []

    class Watch:
        def on_fit_start(self, trainer): pass
        def on_fit_end(self, trainer): pass
        def state_dict(self): return None
        def on_step_end(self, trainer, step, metrics):
            seen.append({k: v.detach().clone() for k, v in trainer.model.state_dict().items()})

    start = {k: v.detach().clone() for k, v in t.model.state_dict().items()}
    t.callbacks = [Watch()]
    t.fit()
    want = dict(start)
    for w in seen:
        want = {k: 0.8 * want[k] + 0.2 * w[k] if k in t.ema.averaged_keys else w[k] for k in w}
    for k, v in t.ema.state_dict().items():
        assert torch.allclose(v, want[k], atol=1e-6)
    ckpt = CheckpointStore(tmp_path / "checkpoints").load()
    assert ckpt.identity["trainer.ema"] == 0.8
    assert all(torch.equal(ckpt.state("ema")[k], v) for k, v in t.ema.state_dict().items())
    assert not torch.equal(ckpt.state("ema")["mean"], ckpt.state()["mean"])  # the average lags the weights
    assert all(torch.equal(v, ckpt.state("ema")[k]) for k, v in ckpt.weights(average=True).items())
    assert all(torch.equal(v, ckpt.state()[k]) for k, v in ckpt.weights().items())


def test_a_resumed_run_with_an_average_is_the_uninterrupted_one(tmp_path: Path) -> None:
    full = make_trainer(NoisyNCE(), tmp_path / "full", ema=0.9)
    full.fit()
    part = make_trainer(NoisyNCE(), tmp_path / "part", ema=0.9, steps=20)
    part.fit()
    rest = make_trainer(NoisyNCE(), tmp_path / "part", ema=0.9)
    rest.fit(resume=True)
    assert metric_lines(tmp_path / "full") == metric_lines(tmp_path / "part")
    for k, v in full.ema.state_dict().items():
        assert torch.equal(v, rest.ema.state_dict()[k])


def test_resuming_with_another_decay_or_none_is_refused(tmp_path: Path) -> None:
    make_trainer(NoisyNCE(), tmp_path, ema=0.9, steps=10).fit()
    with pytest.raises(CheckpointError, match="trainer.ema"):
        make_trainer(NoisyNCE(), tmp_path, ema=0.99).fit(resume=True)
    with pytest.raises(CheckpointError, match=r"state holds a weight average \(trained with ema\); resume with"):
        make_trainer(NoisyNCE(), tmp_path).fit(resume=True)
    make_trainer(NoisyNCE(), tmp_path / "plain", steps=10).fit()
    with pytest.raises(CheckpointError, match=r"state holds no weight average \(trained without ema\)"):
        make_trainer(NoisyNCE(), tmp_path / "plain", identity={}, ema=0.9).fit(resume=True)


def test_a_trainer_without_an_average_writes_none(tmp_path: Path) -> None:
    t = make_trainer(NoisyNCE(), tmp_path, steps=10)
    t.fit()
    assert t.ema is None
    record = json.loads((tmp_path / "checkpoints" / "ckpt-000000010.json").read_text())
    assert not any(k.startswith("ema/") for k in record["weights"]["keys"])
    assert "trainer.ema" not in record["identity"]
    with pytest.raises(CheckpointError, match=r"the checkpoint holds no weight average \(trained without ema\)"):
        CheckpointStore(tmp_path / "checkpoints").load().weights(average=True)


@pytest.mark.parametrize("ema", [1.5, 0, "x"])
def test_a_trainer_refuses_a_bad_decay_in_one_line(tmp_path: Path, ema) -> None:
    with pytest.raises((ValueError, TypeError), match=r"^decay: expected a number in"):
        make_trainer(NoisyNCE(), tmp_path, ema=ema)
