"""Trainer loop: exact resume, metrics log, optimizer construction, data handling, callbacks."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from _train_helpers import GaussianML, NoisyNCE, events, make_data, make_trainer, metric_lines
from torch import nn

from ebms.nets import GaussianEnergy
from ebms.objectives._base import LossOutput
from ebms.train import Callback, EarlyStopping, PeriodicEval, SampleSnapshot, Trainer


def _state(t: Trainer) -> dict[str, torch.Tensor]:
    return {**{f"m.{k}": v for k, v in t.model.state_dict().items()}, **{f"o.{k}": v for k, v in t.objective.state_dict().items()}}


def _assert_same_state(a: Trainer, b: Trainer) -> None:
    sa, sb = _state(a), _state(b)
    assert sa.keys() == sb.keys()
    for k in sa:
        assert torch.equal(sa[k], sb[k]), k


class _RaiseAt(Callback):
    def __init__(self, step: int, exc: BaseException) -> None:
        self.step, self.exc = step, exc

    def on_step_end(self, trainer: Trainer, step: int, metrics: dict[str, float]) -> None:
        if step == self.step:
            raise self.exc


# ----------------------------------------------------------------------------- resume


def test_resume_reproduces_uninterrupted_run_exactly(tmp_path: Path) -> None:
    # stochastic objective (generator noise + a buffer + a learned log Z), Tensor
    # data reshuffled every 4 steps, Adam: 200 steps == 100 + resume + 100, bit for bit
    kw = dict(log_every=10, checkpoint_every=50)
    one = make_trainer(NoisyNCE(), tmp_path / "one", steps=200, **kw)
    one.fit()
    make_trainer(NoisyNCE(), tmp_path / "two", steps=100, **kw).fit()
    two = make_trainer(NoisyNCE(), tmp_path / "two", steps=200, **kw)
    result = two.fit(resume=True)
    assert result.step == 200
    lines = metric_lines(tmp_path / "one")
    assert [r["step"] for r in lines] == list(range(10, 201, 10))
    assert lines == metric_lines(tmp_path / "two")
    _assert_same_state(one, two)
    assert [e["step"] for e in events(tmp_path / "two", "resume")] == [100]


def test_resume_after_crash_drops_log_lines_past_the_checkpoint(tmp_path: Path) -> None:
    kw = dict(steps=60, log_every=5, checkpoint_every=20)
    make_trainer(NoisyNCE(), tmp_path / "one", **kw).fit()
    with pytest.raises(RuntimeError, match="boom"):
        make_trainer(NoisyNCE(), tmp_path / "two", callbacks=[_RaiseAt(33, RuntimeError("boom"))], **kw).fit()
    assert metric_lines(tmp_path / "two")[-1]["step"] == 30  # logged after the step-20 checkpoint
    t = make_trainer(NoisyNCE(), tmp_path / "two", **kw)
    t.restore(20)  # same as fit(resume=True) here
    t.fit()
    assert metric_lines(tmp_path / "one") == metric_lines(tmp_path / "two")


def test_keyboard_interrupt_checkpoints_and_resume_is_exact(tmp_path: Path) -> None:
    kw = dict(steps=50, checkpoint_every=None)
    one = make_trainer(NoisyNCE(), tmp_path / "one", **kw)
    one.fit()
    with pytest.raises(KeyboardInterrupt):
        make_trainer(NoisyNCE(), tmp_path / "two", callbacks=[_RaiseAt(27, KeyboardInterrupt())], **kw).fit()
    assert json.loads((tmp_path / "two/checkpoints/ckpt-000000027.json").read_text())["step"] == 27
    two = make_trainer(NoisyNCE(), tmp_path / "two", **kw)
    two.fit(resume="auto")
    assert metric_lines(tmp_path / "one") == metric_lines(tmp_path / "two")
    _assert_same_state(one, two)


def test_stream_data_resume_is_exact(tmp_path: Path) -> None:
    def stream(n: int, generator: torch.Generator) -> torch.Tensor:
        return torch.randn(n, 2, generator=generator) * 0.5 + 1.0

    one = make_trainer(NoisyNCE(), tmp_path / "one", data=stream, steps=40)
    one.fit()
    make_trainer(NoisyNCE(), tmp_path / "two", data=stream, steps=25).fit()
    two = make_trainer(NoisyNCE(), tmp_path / "two", data=stream, steps=40)
    two.fit(resume=True)
    assert metric_lines(tmp_path / "one") == metric_lines(tmp_path / "two")
    _assert_same_state(one, two)


def test_resume_auto_starts_fresh_without_checkpoint(tmp_path: Path) -> None:
    result = make_trainer(GaussianML(), tmp_path, steps=10).fit(resume="auto")
    assert result.step == 10 and events(tmp_path, "resume") == []


def test_resume_requires_same_batch_size_and_seed(tmp_path: Path) -> None:
    make_trainer(GaussianML(), tmp_path, steps=10).fit()
    with pytest.raises(ValueError, match=r"ckpt-000000010.json: checkpoint has batch_size=16 but this trainer has batch_size=8"):
        make_trainer(GaussianML(), tmp_path, steps=20, batch_size=8).fit(resume=True)
    with pytest.raises(ValueError, match=r"checkpoint has seed=0 but this trainer has seed=1"):
        make_trainer(GaussianML(), tmp_path, steps=20, seed=1).fit(resume=True)


def test_resume_true_without_checkpoint_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=r"checkpoints: no checkpoint \('latest' pointer not found\)"):
        make_trainer(GaussianML(), tmp_path).fit(resume=True)
    with pytest.raises(ValueError, match=r"resume: expected False, True, 'auto' or a checkpoint path; got 3"):
        make_trainer(GaussianML(), tmp_path).fit(resume=3)


# ----------------------------------------------------------------------------- log and results


def test_metrics_lines_are_strict_json_with_health_keys(tmp_path: Path) -> None:
    def no_constants(name: str) -> None:
        raise AssertionError(f"non-standard JSON constant {name}")

    make_trainer(NoisyNCE(), tmp_path, steps=20, log_every=4).fit()
    lines = (tmp_path / "metrics.jsonl").read_text().splitlines()
    records = [json.loads(line, parse_constant=no_constants) for line in lines]
    steps = [r for r in records if "event" not in r]
    assert [r["step"] for r in steps] == [4, 8, 12, 16, 20]
    for r in steps:
        assert {"step", "loss", "grad_norm", "lr", "metrics", "time"} <= set(r)
        assert {"e_pos", "e_neg", "gap"} <= set(r["metrics"])
        assert set(r["time"]) == {"wall", "elapsed_s"}
        assert r["lr"] == 0.05 and r["lr_groups"] == [0.05, 0.05]


def test_gaussian_ml_reaches_sample_mean_and_covariance(tmp_path: Path) -> None:
    # full-batch gradient descent on the exact likelihood converges to the MLE
    # (sample mean, biased sample covariance); tolerance is optimisation error,
    # observed ~3e-6 after 300 steps
    x = make_data()
    t = make_trainer(
        GaussianML(), tmp_path, optimizer=lambda g: torch.optim.SGD(g, lr=0.2), steps=300, batch_size=64,
        checkpoint_every=None, log_every=50,
    )
    result = t.fit()
    mu = x.mean(0)
    cov = (x - mu).T @ (x - mu) / x.shape[0]
    torch.testing.assert_close(t.model.mean.detach(), mu, atol=1e-4, rtol=0)
    torch.testing.assert_close(t.model.covariance.detach(), cov, atol=1e-4, rtol=0)
    # the objective's own parameter was trained too (pulled to the mean data energy)
    assert abs(t.objective.offset.item() - result.metrics["e_pos"]) < 1e-3
    assert result.checkpoint is not None and result.checkpoint.name == "ckpt-000000300.json"


def test_progress_bar_shows_health_metrics(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    make_trainer(NoisyNCE(), tmp_path, steps=10, progress=True).fit()
    err = capsys.readouterr().err
    for key in ("loss=", "e_pos=", "e_neg=", "gap=", "grad_norm="):
        assert key in err


# ----------------------------------------------------------------------------- optimizer


def test_optimizer_factory_gets_model_then_objective_groups(tmp_path: Path) -> None:
    seen = []

    def factory(groups):
        seen.append([len(g["params"]) for g in groups])
        return torch.optim.SGD(groups, lr=0.1)

    make_trainer(NoisyNCE(), tmp_path / "a", optimizer=factory)
    make_trainer(NoisyNCE(), tmp_path / "b", optimizer=factory, model=GaussianEnergy(2, learnable=False))
    assert seen == [[2, 1], [1]]


def test_default_optimizer_is_adam_over_model_and_objective(tmp_path: Path) -> None:
    t = make_trainer(NoisyNCE(), tmp_path, optimizer=None)
    assert isinstance(t.optimizer, torch.optim.Adam)
    assert sum(len(g["params"]) for g in t.optimizer.param_groups) == 3


def test_optimizer_instance_must_cover_objective_parameters(tmp_path: Path) -> None:
    model = GaussianEnergy(2)
    opt = torch.optim.Adam(model.parameters())
    with pytest.raises(ValueError, match=r"optimizer: expected exactly the trainable parameters.*missing \['objective.log_z'\]"):
        make_trainer(NoisyNCE(), tmp_path, model=model, optimizer=opt)


def test_optimizer_validation_messages(tmp_path: Path) -> None:
    with pytest.raises(TypeError, match=r"optimizer factory: expected a torch.optim.Optimizer; got str"):
        make_trainer(GaussianML(), tmp_path, optimizer=lambda g: "adam")
    with pytest.raises(TypeError, match=r"optimizer: expected an Optimizer or a factory.*got int"):
        make_trainer(GaussianML(), tmp_path, optimizer=3)
    with pytest.raises(ValueError, match=r"no trainable parameters"):
        make_trainer(lambda e, x, generator: None, tmp_path, model=GaussianEnergy(2, learnable=False))


# ----------------------------------------------------------------------------- arguments and data


def test_argument_validation_messages(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=r"steps: expected an int >= 1; got 0"):
        make_trainer(GaussianML(), tmp_path, steps=0)
    with pytest.raises(TypeError, match=r"batch_size: expected an int; got 2.5"):
        make_trainer(GaussianML(), tmp_path, batch_size=2.5)
    with pytest.raises(ValueError, match=r"grad_clip: expected a finite number > 0; got -1"):
        make_trainer(GaussianML(), tmp_path, grad_clip=-1)
    with pytest.raises(TypeError, match=r"model: expected a torch.nn.Module; got function"):
        Trainer(GaussianML(), lambda x: x, make_data(), steps=1, batch_size=1, run_dir=tmp_path)
    with pytest.raises(TypeError, match=r"guard: expected a DivergenceGuard or None; got dict"):
        make_trainer(GaussianML(), tmp_path, guard={})
    with pytest.raises(ValueError, match=r"config: expected a JSON-serialisable mapping"):
        make_trainer(GaussianML(), tmp_path, config={"x": object()})
    with pytest.raises(TypeError, match=r"callbacks\[0\]: expected an object with on_step_end"):
        make_trainer(GaussianML(), tmp_path, callbacks=[object()])


def test_data_validation_messages(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=r"data: expected at least batch_size \* world_size = 16 rows; got 10"):
        make_trainer(GaussianML(), tmp_path, data=torch.zeros(10, 2))
    with pytest.raises(TypeError, match=r"data: expected a Tensor, a tuple of Tensors or a callable"):
        make_trainer(GaussianML(), tmp_path, data=[1, 2, 3])
    with pytest.raises(ValueError, match=r"data: expected tensors with the same first dimension; got shapes \[\(64, 2\), \(63,\)\]"):
        make_trainer(GaussianML(), tmp_path, data=(make_data(), torch.zeros(63)))
    with pytest.raises(ValueError, match=r"data\(batch_size, generator\): expected 16 rows; got 3"):
        make_trainer(GaussianML(), tmp_path, data=lambda n, g: torch.zeros(3, 2)).fit()


def test_tuple_data_is_batched_row_aligned(tmp_path: Path) -> None:
    x = make_data()
    idx = torch.arange(64)
    seen = []

    class Pairs(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.ml = GaussianML()

        def forward(self, energy, batch, *, generator):
            xb, ib = batch
            seen.append(ib)
            assert torch.equal(xb, x[ib])
            return self.ml(energy, xb, generator=generator)

    t = make_trainer(Pairs(), tmp_path, data=(x, idx), steps=8, optimizer=lambda g: torch.optim.SGD(g, lr=0.01))
    t.fit()
    epoch = torch.cat(seen[:4])  # 64 rows / batch 16: one epoch = 4 steps, a permutation
    assert torch.equal(epoch.sort().values, idx)
    assert not torch.equal(epoch, idx)


def test_objective_output_validation_messages(tmp_path: Path) -> None:
    w = nn.Parameter(torch.ones(()))

    class Bad(nn.Module):
        def __init__(self, kind: str) -> None:
            super().__init__()
            self.kind, self.w = kind, w

        def forward(self, energy, x, *, generator):
            if self.kind == "type":
                return 1.0
            if self.kind == "shape":
                return LossOutput(energy(x) * self.w, {})
            if self.kind == "nograd":
                return LossOutput(energy(x).mean().detach(), {})
            return LossOutput(energy(x).mean(), {"e_pos": "high"})

    cases = {
        "type": (TypeError, r"objective: expected a LossOutput\(loss, metrics, negatives\); got float"),
        "shape": (ValueError, r"objective: expected LossOutput.loss to be a 0-d tensor; got shape \(16,\)"),
        "nograd": (ValueError, r"LossOutput.loss does not require grad"),
        "metric": (TypeError, r"objective: metric 'e_pos' must be a number; got 'high'"),
    }
    for kind, (exc, msg) in cases.items():
        with pytest.raises(exc, match=msg):
            make_trainer(Bad(kind), tmp_path / kind, steps=2).fit()


# ----------------------------------------------------------------------------- callbacks


def test_periodic_eval_and_early_stopping(tmp_path: Path) -> None:
    calls = []

    def evaluate(trainer: Trainer) -> dict[str, float]:
        calls.append(trainer.step)
        return {"score": 1.0}  # never improves after the first check

    cbs = [PeriodicEval(evaluate, every=5), EarlyStopping("eval/score", patience=2)]
    result = make_trainer(GaussianML(), tmp_path, steps=100, callbacks=cbs).fit()
    assert calls == [5, 10, 15]
    assert result.step == 15
    assert result.stop_reason is not None and "eval/score did not improve on 1.0 for 2 checks" in result.stop_reason
    assert [e["values"] for e in events(tmp_path, "eval")] == [{"score": 1.0}] * 3
    assert events(tmp_path, "stop")[0]["reason"] == result.stop_reason
    assert result.checkpoint is not None and result.checkpoint.name == "ckpt-000000015.json"


def test_early_stopped_run_stays_stopped_on_resume(tmp_path: Path) -> None:
    cbs = lambda: [PeriodicEval(lambda t: {"score": 1.0}, every=5), EarlyStopping("eval/score", patience=2)]  # noqa: E731
    first = make_trainer(GaussianML(), tmp_path, steps=100, callbacks=cbs()).fit()
    again = make_trainer(GaussianML(), tmp_path, steps=100, callbacks=cbs()).fit(resume=True)
    assert (again.step, again.stop_reason, again.metrics) == (first.step, first.stop_reason, first.metrics)
    assert len(events(tmp_path, "stop")) == 1


def test_early_stopping_state_survives_resume(tmp_path: Path) -> None:
    stop = EarlyStopping("loss", patience=50)
    make_trainer(GaussianML(), tmp_path, steps=10, callbacks=[stop]).fit()
    fresh = EarlyStopping("loss", patience=50)
    make_trainer(GaussianML(), tmp_path, steps=10, callbacks=[fresh]).restore()
    assert (fresh.best, fresh.bad_checks) == (stop.best, stop.bad_checks)
    assert fresh.best is not None


def test_sample_snapshot_calls_user_function_with_path(tmp_path: Path) -> None:
    def draw(trainer: Trainer, step: int, path: Path) -> Path:
        path.write_text(f"step {step}")
        return path

    make_trainer(GaussianML(), tmp_path, steps=10, callbacks=[SampleSnapshot(draw, every=4)]).fit()
    assert sorted(p.name for p in (tmp_path / "samples").iterdir()) == ["step_000000004.png", "step_000000008.png"]
    assert [Path(e["path"]).name for e in events(tmp_path, "sample")] == ["step_000000004.png", "step_000000008.png"]


def test_callback_validation_messages() -> None:
    with pytest.raises(ValueError, match=r"every: expected an int >= 1; got 0"):
        PeriodicEval(lambda t: {}, every=0)
    with pytest.raises(TypeError, match=r"fn: expected a callable"):
        SampleSnapshot(None, every=1)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"mode: expected 'min' or 'max'; got 'up'"):
        EarlyStopping("loss", mode="up")
    with pytest.raises(ValueError, match=r"min_delta: expected a finite number >= 0; got -1"):
        EarlyStopping("loss", min_delta=-1)


def test_periodic_eval_rejects_non_numbers(tmp_path: Path) -> None:
    cb = PeriodicEval(lambda t: {"acc": "good"}, every=1)
    with pytest.raises(TypeError, match=r"PeriodicEval fn: value 'acc' is not a number; got 'good'"):
        make_trainer(GaussianML(), tmp_path, steps=2, callbacks=[cb]).fit()


def test_fresh_fit_refuses_a_run_dir_holding_another_runs_checkpoints(tmp_path):
    make_trainer(NoisyNCE(), tmp_path, steps=10).fit()
    with pytest.raises(ValueError, match=r"run_dir: .* already holds checkpoints of another run; pass resume=True"):
        make_trainer(NoisyNCE(), tmp_path, steps=10).fit()
    make_trainer(NoisyNCE(), tmp_path, steps=20).fit(resume=True)  # continuing is fine
