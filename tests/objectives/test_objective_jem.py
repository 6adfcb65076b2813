"""JEMObjective: equals PCD + CE exactly, semi-supervised masking, warm-up, per-class buffers, guard, resume."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from ebms.distributions.class_gaussian import ClassConditionalGaussian
from ebms.models.jem import JEM
from ebms.nets.classifier import MLPClassifier
from ebms.objectives.buffer import ReplayBuffer
from ebms.objectives.cd import PersistentContrastiveDivergence
from ebms.objectives.jem import JEMObjective
from ebms.samplers import SGLD
from ebms.spaces import Box
from ebms.train import DistributedContext, DivergenceGuard, Trainer

DTYPES = [torch.float32, torch.float64]
METRICS = {"loss", "ce", "acc", "labelled", "e_pos", "e_neg", "gap", "accept", "nonfinite", "gen_weight"}


def _model(dtype=torch.float64, seed=0) -> JEM:
    torch.manual_seed(seed)
    return JEM(MLPClassifier(2, 3, hidden=(16, 16)).to(dtype), 3)


def _data(n=12, dtype=torch.float64, seed=1):
    g = torch.Generator().manual_seed(seed)
    x = (torch.rand(n, 2, generator=g, dtype=dtype) * 2 - 1) * 0.9
    y = (x[:, 0] > 0).long() + (x[:, 1] > 0).long()
    return x, y


def _objective(dtype=torch.float64, *, n_classes=None, capacity=60, **kw) -> JEMObjective:
    buf = ReplayBuffer(capacity, Box(2), reinit_prob=0.05, n_classes=n_classes, dtype=dtype)
    return JEMObjective(SGLD(0.1, 0.01, space=Box(2)), buf, kw.pop("k", 4), **kw)


def _grads(model: nn.Module) -> list[torch.Tensor]:
    return [p.grad.clone() for p in model.parameters()]


@pytest.mark.parametrize("dtype", DTYPES)
def test_generative_term_is_persistent_cd_on_the_marginal_energy_bit_for_bit(dtype):
    x, _ = _data(dtype=dtype)
    jem, ref = _model(dtype), _model(dtype)
    obj = _objective(dtype, ce_weight=0.0, regularization=0.1)
    pcd = PersistentContrastiveDivergence(obj.sampler, ReplayBuffer(60, Box(2), reinit_prob=0.05, dtype=dtype), 4,
                                          regularization=0.1)
    ga, gb = torch.Generator().manual_seed(3), torch.Generator().manual_seed(3)
    for _ in range(3):
        out, want = obj(jem, x, generator=ga), pcd(ref, x, generator=gb)
        assert torch.equal(out.loss, want.loss) and torch.equal(out.negatives, want.negatives)
        out.loss.backward()
        want.loss.backward()
    assert torch.equal(obj.buffer.data, pcd.buffer.data)
    assert all(torch.equal(a, b) for a, b in zip(_grads(jem), _grads(ref)))
    assert set(out.metrics) == METRICS
    assert {k: out.metrics[k] for k in ("e_pos", "e_neg", "gap")} == {k: want.metrics[k] for k in ("e_pos", "e_neg", "gap")}
    assert out.metrics["ce"] == 0.0 and out.metrics["acc"] == 0.0 and out.metrics["labelled"] == 0.0


@pytest.mark.parametrize("dtype", DTYPES)
def test_cross_entropy_counts_labelled_rows_only(dtype):
    # generative weight 0: the loss and its gradient are the classifier's CE on the labelled rows alone
    x, y = _data(dtype=dtype)
    y_semi = y.clone()
    y_semi[::3] = -1
    lab = y_semi >= 0
    jem, ref = _model(dtype), _model(dtype)
    out = _objective(dtype, generative_weight=0.0)(jem, (x, y_semi), generator=torch.Generator().manual_seed(0))
    want = F.cross_entropy(ref.classifier(x[lab]), y[lab])
    tol = 1e-12 if dtype == torch.float64 else 1e-6
    torch.testing.assert_close(out.loss, want, rtol=0, atol=tol)
    out.loss.backward()
    want.backward()
    for a, b in zip(_grads(jem), _grads(ref)):
        torch.testing.assert_close(a, b, rtol=0, atol=tol)
    acc = (ref.classifier(x[lab]).argmax(-1) == y[lab]).double().mean()
    assert out.metrics["acc"] == pytest.approx(float(acc), abs=1e-6)
    assert out.metrics["labelled"] == pytest.approx(8 / 12, abs=1e-6)


def test_unlabelled_rows_get_no_ce_gradient_whatever_their_values():
    # moving the unlabelled rows anywhere (even to huge values) leaves the CE gradient unchanged
    x, y = _data()
    y[::2] = -1
    grads = []
    for scale in (1.0, 1e3):
        x2 = x.clone()
        x2[y < 0] *= scale
        jem = _model()
        obj = JEMObjective(SGLD(0.1, 0.01), ReplayBuffer(60, 2, dtype=torch.float64), 2, generative_weight=0.0)
        obj(jem, (x2, y), generator=torch.Generator().manual_seed(0)).loss.backward()
        grads.append(_grads(jem))
    for a, b in zip(*grads):
        torch.testing.assert_close(a, b, rtol=0, atol=1e-12)


def test_total_loss_is_ce_plus_weighted_generative_term():
    x, y = _data()
    parts = {}
    for name, kw in {"ce": dict(generative_weight=0.0), "gen": dict(ce_weight=0.0),
                     "both": dict(ce_weight=0.7, generative_weight=2.5)}.items():
        parts[name] = _objective(**kw)(_model(), (x, y), generator=torch.Generator().manual_seed(5)).loss
    torch.testing.assert_close(parts["both"], 0.7 * parts["ce"] + 2.5 * parts["gen"], rtol=0, atol=1e-12)


def test_warmup_ramp_is_exact_and_resumes_from_the_state_dict():
    x, y = _data()
    obj = _objective(generative_weight=2.0, warmup_steps=4)
    jem, g = _model(), torch.Generator().manual_seed(0)
    want = [0.0, 0.5, 1.0, 1.5, 2.0, 2.0, 2.0]
    assert [obj.weight_at(t) for t in range(7)] == want
    seen = [obj(jem, (x, y), generator=g).metrics["gen_weight"] for _ in range(4)]
    state = obj.state_dict()
    assert int(state["step"]) == 4
    fresh = _objective(generative_weight=2.0, warmup_steps=4)
    fresh.load_state_dict(state)
    seen += [fresh(jem, (x, y), generator=g).metrics["gen_weight"] for _ in range(3)]
    assert seen == want  # each value is exact in float32, so the logged metric is exact too
    fresh.eval()  # evaluation calls do not advance the ramp
    fresh(jem, (x, y), generator=g)
    assert int(fresh.step) == 7
    assert [_objective(generative_weight=3.0).weight_at(t) for t in (0, 10)] == [3.0, 3.0]


def test_warmup_weight_scales_the_generative_gradient():
    # at t = 0 the generative term has weight 0: the gradient is the CE gradient exactly
    x, y = _data()
    a, b = _model(), _model()
    _objective(warmup_steps=10)(a, (x, y), generator=torch.Generator().manual_seed(0)).loss.backward()
    _objective(generative_weight=0.0)(b, (x, y), generator=torch.Generator().manual_seed(0)).loss.backward()
    assert all(torch.equal(p, q) for p, q in zip(_grads(a), _grads(b)))


class _Wells(nn.Module):
    """Logits f(x)[c] = -8 ||x - mu_c||^2 with the four means at (+-0.6, +-0.6): separable classes."""

    def __init__(self) -> None:
        super().__init__()
        self.mu = nn.Parameter(torch.tensor([[-0.6, -0.6], [-0.6, 0.6], [0.6, -0.6], [0.6, 0.6]]))

    def forward(self, x):
        return -8.0 * ((x[:, None, :] - self.mu) ** 2).sum(-1)


def test_per_class_buffers_only_ever_hold_chains_of_their_class():
    # chains follow -f(x)[y]: SGLD with step 0.05 contracts to mu_y by 0.2 per step, so each written chain sits
    # in its class's well, and any slot written by a chain of another class would sit in that other well
    jem = JEM(_Wells(), 4)
    writes = []

    class Tracking(ReplayBuffer):
        def sample(self, n, generator=None, labels=None):
            x0, idx = super().sample(n, generator, labels)
            writes.append((idx.clone(), labels.clone()))
            return x0, idx

    buf = Tracking(40, Box(2), reinit_prob=0.2, n_classes=4)
    obj = JEMObjective(SGLD(0.05, 0.01, space=Box(2)), buf, k=8, conditional=True)
    x, _ = _data(8, dtype=torch.float32)
    g = torch.Generator().manual_seed(0)
    for _ in range(40):
        obj(jem, x, generator=g)
    for idx, labels in writes:
        assert torch.equal(idx // buf.slots_per_class, labels)
    assert bool(buf.filled.all())
    with torch.no_grad():
        nearest = jem.logits(buf.data).argmax(-1)
    assert torch.equal(nearest, buf.slot_labels())


def test_conditional_chains_use_the_class_energy_of_their_label():
    # deterministic chains (noise 0): each negative equals k steps of gradient descent on -f(x)[y_b]
    jem = JEM(_Wells(), 4)
    buf = ReplayBuffer(40, Box(2), reinit_prob=0.0, n_classes=4)
    sampler = SGLD(0.05, 0.0, space=Box(2))
    obj = JEMObjective(sampler, buf, k=3, conditional=True)
    x, _ = _data(6, dtype=torch.float32)
    g = torch.Generator().manual_seed(0)
    out = obj(jem, x, generator=g)
    g = torch.Generator().manual_seed(0)
    y_neg = torch.randint(0, 4, (6,), generator=g)  # documented order: classes, then the buffer's draws
    x0, idx = ReplayBuffer(40, Box(2), reinit_prob=0.0, n_classes=4).sample(6, g, labels=y_neg)
    want = sampler.sample(jem.class_energy(y_neg), x0, steps=3, generator=g)
    assert torch.equal(out.negatives, want) and torch.equal(buf.data[idx], want)


def test_informative_init_and_data_noise_follow_the_documented_draw_order():
    x, y = _data(40)
    q = ClassConditionalGaussian.fit(x, y, shrinkage=0.1)
    buf = ReplayBuffer(60, Box(2), n_classes=3, init=q.sample, dtype=torch.float64)
    obj = JEMObjective(SGLD(0.1, 0.01, space=Box(2)), buf, 2, data_noise=0.05, ce_weight=0.0)
    jem = _model()
    out = obj(jem, x[:9], generator=torch.Generator().manual_seed(0))
    g = torch.Generator().manual_seed(0)
    pos = x[:9] + 0.05 * torch.randn(9, 2, generator=g, dtype=torch.float64)
    x0, _ = ReplayBuffer(60, Box(2), n_classes=3, init=q.sample, dtype=torch.float64).sample(9, g)
    neg = obj.sampler.sample(jem, x0, steps=2, generator=g)
    assert torch.equal(out.negatives, neg)
    e = jem(torch.cat([pos, neg]))
    torch.testing.assert_close(out.loss, e[:9].mean() - e[9:].mean(), rtol=0, atol=1e-12)


def test_conv_classifier_on_images_trains_end_to_end():
    from ebms.nets.classifier import ConvClassifier

    torch.manual_seed(0)
    jem = JEM(ConvClassifier(1, 8, 4, channels=(8, 16), groups=4, spectral_norm=True), 4)
    box = Box((1, 8, 8))
    obj = JEMObjective(SGLD(1.0, 0.01, space=box), ReplayBuffer(40, box, n_classes=4), 3, conditional=True,
                       data_noise=0.03)
    g = torch.Generator().manual_seed(0)
    x = torch.rand(8, 1, 8, 8, generator=g) * 2 - 1
    y = torch.tensor([0, 1, 2, 3, -1, -1, 0, 1])
    out = obj(jem, (x, y), generator=g)
    out.loss.backward()
    assert out.negatives.shape == (8, 1, 8, 8) and out.negatives.abs().max() <= 1.0
    assert all(p.grad is not None and bool(torch.isfinite(p.grad).all()) for p in jem.parameters())
    assert set(out.metrics) == METRICS and out.metrics["labelled"] == 0.75


# ----------------------------------------------------------------------------- trainer: guard and resume


def _trainer(run_dir, *, lr=0.05, steps=8, guard=None, conditional=False, **kw):
    x, y = _data(64, dtype=torch.float32)
    y[::4] = -1
    q = ClassConditionalGaussian.fit(x, y.clamp(min=0), shrinkage=0.1)
    buf = ReplayBuffer(60, Box(2), reinit_prob=0.05, n_classes=3 if conditional else None, init=q.sample)
    obj = JEMObjective(SGLD(0.1, 0.01, space=Box(2)), buf, 3, conditional=conditional, warmup_steps=5,
                       data_noise=0.03, regularization=0.01)
    torch.manual_seed(0)
    model = JEM(MLPClassifier(2, 3, hidden=(16,)), 3)
    return Trainer(obj, model, (x, y), optimizer=lambda groups: torch.optim.SGD(groups, lr=lr), steps=steps,
                   batch_size=16, run_dir=run_dir, seed=0, log_every=1, checkpoint_every=4, progress=False,
                   device="cpu", distributed=DistributedContext(), guard=guard or DivergenceGuard(), **kw)


def _lines(run_dir) -> list[dict]:
    rows = [json.loads(s) for s in (Path(run_dir) / "metrics.jsonl").read_text().splitlines()]
    return [{k: v for k, v in r.items() if k != "time"} for r in rows]


def test_exploding_energies_are_caught_rolled_back_and_training_continues(tmp_path):
    # SGD with lr 1e4: after one update the energies run past max_abs_energy (1e6); the trainer restores
    # the healthy start, lowers lr by lr_factor and finishes with finite, small energies
    result = _trainer(tmp_path, lr=1e4, steps=10, guard=DivergenceGuard(lr_factor=1e-5)).fit()
    events = [r for r in _lines(tmp_path) if "event" in r]
    assert events and events[0]["event"] == "diverged" and events[0]["action"] == "restore"
    assert events[0]["step"] == 0 and events[0]["failed_step"] == 2
    assert "|e_neg|" in events[0]["reason"] or "|e_pos|" in events[0]["reason"] or "|loss|" in events[0]["reason"]
    assert result.step == 10 and result.restores >= 1
    last = [r for r in _lines(tmp_path) if "event" not in r][-1]
    assert last["step"] == 10 and all(math.isfinite(last["metrics"][k]) for k in METRICS)
    assert abs(last["metrics"]["e_pos"]) < 100 and last["lr"] == pytest.approx(0.1)


@pytest.mark.parametrize("conditional", [False, True], ids=["marginal", "conditional"])
def test_resume_reproduces_the_uninterrupted_run_bit_for_bit(tmp_path, conditional):
    _trainer(tmp_path / "full", conditional=conditional).fit()
    _trainer(tmp_path / "cut", conditional=conditional, steps=4).fit()
    again = _trainer(tmp_path / "cut", conditional=conditional)
    again.fit(resume=True)
    full = [r for r in _lines(tmp_path / "full") if "event" not in r]
    cut = [r for r in _lines(tmp_path / "cut") if "event" not in r]
    assert [r["step"] for r in full] == list(range(1, 9)) and cut == full
    assert full[0]["metrics"]["gen_weight"] == 0.0 and full[-1]["metrics"]["gen_weight"] == 1.0
    assert int(again.objective.step) == 8


# ----------------------------------------------------------------------------- validation


def test_validation_messages():
    buf = ReplayBuffer(60, Box(2))
    s = SGLD(0.1, 0.01)
    with pytest.raises(TypeError, match=r"sampler: expected an ebms.samplers.Sampler; got str"):
        JEMObjective("sgld", buf)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"buffer: expected an ebms.objectives.ReplayBuffer; got int"):
        JEMObjective(s, 60)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"k: expected an int >= 1; got 0"):
        JEMObjective(s, buf, 0)
    with pytest.raises(ValueError, match=r"buffer: conditional=True samples x \| y from per-class blocks; expected a "
                                         r"ReplayBuffer with n_classes=K; got n_classes=None"):
        JEMObjective(s, buf, conditional=True)
    with pytest.raises(TypeError, match=r"conditional: expected a bool; got 1"):
        JEMObjective(s, buf, conditional=1)  # type: ignore[arg-type]
    for name in ("generative_weight", "data_noise", "regularization", "ce_weight"):
        with pytest.raises(ValueError, match=rf"{name}: expected a finite number >= 0; got -1"):
            JEMObjective(s, buf, **{name: -1})
    with pytest.raises(ValueError, match=r"warmup_steps: expected an int >= 0; got -2"):
        JEMObjective(s, buf, warmup_steps=-2)
    obj, jem = JEMObjective(s, buf, 2), _model(torch.float32)
    x, y = _data(dtype=torch.float32)
    with pytest.raises(TypeError, match=r"model: expected a joint energy model with n_classes, logits\(x\) and "
                                        r"class_energy\(y\) \(e.g. ebms.models.jem.JEM\); got MLPClassifier"):
        obj(jem.classifier, x)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"batch: expected a tensor x or a pair \(x, y\); got dict"):
        obj(jem, {"x": x})  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"batch: expected a tensor x or a pair \(x, y\); got a sequence of 3 items"):
        obj(jem, (x, y, y))  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"y: expected values in \[-1, 2\] \(-1 marks an unlabelled row\); got min -2"):
        obj(jem, (x, y - 2))
    with pytest.raises(TypeError, match=r"y: expected a LongTensor of class indices; got dtype torch.float32"):
        obj(jem, (x, y.float()))
    with pytest.raises(ValueError, match=r"y: expected shape \(12,\); got \(11,\)"):
        obj(jem, (x, y[:11]))
    with pytest.raises(ValueError, match=r"batch: expected shape \(B, 2\) to match the chains' event shape; got \(12, 3\)"):
        obj(jem, torch.zeros(12, 3))
    with pytest.raises(ValueError, match=r"batch: expected a finite tensor; got 1 NaN"):
        obj(jem, torch.where(x == x[0, 0], math.nan, x))
    with pytest.raises(ValueError, match=r"batch: expected values in \[-1.0, 1.0\]; got min"):
        JEMObjective(SGLD(0.1, 0.01, space=Box(2)), buf)(jem, x * 5)
    cond = JEMObjective(s, ReplayBuffer(60, Box(2), n_classes=4), conditional=True)
    with pytest.raises(ValueError, match=r"buffer: expected n_classes=3 blocks to match the model's classes; got n_classes=4"):
        cond(jem, x)


def test_noisy_data_are_clipped_into_the_samplers_box() -> None:
    """Data noise first (the first draw of the generator), then the Box's clip: the positives'
    mean energy is that of ``clamp(x + sigma * eps, -1, 1)``, not of the unclipped points."""
    torch.manual_seed(0)
    model = JEM(MLPClassifier(3, 2, hidden=(8,)), 2).double()
    box = Box(3, -1.0, 1.0)
    obj = JEMObjective(SGLD(0.1, 0.01, space=box), ReplayBuffer(16, box, dtype=torch.float64), k=1, data_noise=0.5)
    x = torch.ones(6, 3, dtype=torch.float64)  # on the box's edge: half the noise points outward
    out = obj(model, (x, torch.zeros(6, dtype=torch.long)), generator=torch.Generator().manual_seed(3))
    eps = torch.randn(x.shape, generator=torch.Generator().manual_seed(3), dtype=torch.float64)
    with torch.no_grad():
        clipped, raw = model((x + 0.5 * eps).clamp(-1, 1)).mean(), model(x + 0.5 * eps).mean()
    assert out.metrics["e_pos"] == pytest.approx(float(clipped), abs=1e-6)  # metrics are gathered in float32
    assert abs(float(clipped) - float(raw)) > 1e-3  # the clip changed something
