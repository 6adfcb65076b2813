"""Trainer loop: exact resume, metrics log, optimizer construction, data handling, callbacks."""

from __future__ import annotations

import json
import logging
import os
import signal
from pathlib import Path

import pytest
import torch
from _train_helpers import GaussianML, NoisyNCE, events, make_data, make_trainer, metric_lines
from torch import Tensor, nn

from ebms.errors import CheckpointError, RunFolderError
from ebms.nets import GaussianEnergy
from ebms.objectives._base import LossOutput
from ebms.train import Callback, CheckpointStore, EarlyStopping, PeriodicEval, ReleaseMemory, SampleSnapshot, Trainer


@pytest.fixture(autouse=True)
def _python_sigint_handler():
    """Python's own SIGINT handler for each test, as in a terminal: a test runner started as a
    background job inherits SIGINT ignored, and the trainer then (rightly) leaves SIGINT alone."""
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, previous)


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
            if isinstance(self.exc, _Sigint):
                os.kill(os.getpid(), signal.SIGINT)
                return
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


class _SigintAtCall(nn.Module):
    """Wraps an objective and sends this process SIGINT during call ``at`` (inside the update)."""

    def __init__(self, inner: nn.Module, at: int, times: int = 1) -> None:
        super().__init__()
        self.inner, self.at, self.times, self.calls = inner, at, times, 0

    def forward(self, energy, x, *, generator):
        self.calls += 1
        if self.calls == self.at:
            for _ in range(self.times):
                os.kill(os.getpid(), signal.SIGINT)
        return self.inner(energy, x, generator=generator)


@pytest.mark.parametrize("where", ["callback", "update"])
def test_ctrl_c_completes_the_step_checkpoints_and_resume_is_exact(tmp_path: Path, where: str) -> None:
    # SIGINT during step 27 (in a callback, or inside the objective before the optimizer step):
    # step 27 is finished, logged and checkpointed, then KeyboardInterrupt; the resumed log has
    # every line once and equals the uninterrupted run
    kw = dict(steps=50, checkpoint_every=None, log_every=1)
    one = make_trainer(_SigintAtCall(NoisyNCE(), 0), tmp_path / "one", **kw)
    one.fit()
    if where == "callback":
        trainer = make_trainer(_SigintAtCall(NoisyNCE(), 0), tmp_path / "two",
                               callbacks=[_RaiseAt(27, _Sigint())], **kw)
    else:
        trainer = make_trainer(_SigintAtCall(NoisyNCE(), 27), tmp_path / "two", **kw)
    with pytest.raises(KeyboardInterrupt):
        trainer.fit()
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler  # handler given back
    assert CheckpointStore(tmp_path / "two/checkpoints").load().step == 27
    assert metric_lines(tmp_path / "two")[-1]["step"] == 27
    assert events(tmp_path / "two", "stop")[-1] == {**events(tmp_path / "two", "stop")[-1], "reason": "interrupted", "step": 27}
    two = make_trainer(_SigintAtCall(NoisyNCE(), 0), tmp_path / "two", **kw)
    two.fit(resume="auto")
    assert metric_lines(tmp_path / "one") == metric_lines(tmp_path / "two")
    _assert_same_state(one, two)


class _Sigint(BaseException):
    """Placeholder exception type for _RaiseAt: the callback below sends SIGINT instead of raising."""


def test_second_ctrl_c_stops_at_once_without_saving(tmp_path: Path) -> None:
    # two SIGINTs inside step 27: the second raises KeyboardInterrupt mid-update; nothing is saved
    # for that step, the step-20 checkpoint stands, and a resume from it is still exact
    kw = dict(steps=40, checkpoint_every=10, log_every=1)
    one = make_trainer(_SigintAtCall(NoisyNCE(), 0), tmp_path / "one", **kw)
    one.fit()
    with pytest.raises(KeyboardInterrupt):
        make_trainer(_SigintAtCall(NoisyNCE(), 27, times=2), tmp_path / "two", **kw).fit()
    assert CheckpointStore(tmp_path / "two/checkpoints").load().step == 20
    assert events(tmp_path / "two", "stop")[-1]["reason"] == "interrupted during a step (not saved)"
    two = make_trainer(_SigintAtCall(NoisyNCE(), 0), tmp_path / "two", **kw)
    two.fit(resume=True)
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
    with pytest.raises(CheckpointError, match=r"checkpoints: no checkpoint \(no 'latest' pointer and no ckpt-\*.json record\)"):
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
    with pytest.raises(TypeError, match=r"optimizer factory: expected a torch.optim.Optimizer or an object with "
                                        r"param_groups, step, zero_grad, state_dict and load_state_dict.*got str"):
        make_trainer(GaussianML(), tmp_path, optimizer=lambda g: "adam")
    with pytest.raises(TypeError, match=r"optimizer: expected an optimizer \(a torch.optim.Optimizer or an "
                                        r"ebms.train.protocols.OptimizerLike\) or a factory.*got int"):
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


def test_fresh_fit_refuses_a_run_dir_holding_a_run(tmp_path):
    make_trainer(NoisyNCE(), tmp_path, steps=10).fit()
    before = (tmp_path / "metrics.jsonl").read_bytes()
    msg = (r"run_dir: .* already holds a run \(checkpoints\); continue it with resume=True \(`ebms train --resume`\), "
           r"delete it with overwrite=True \(`--overwrite`\), or use another run_dir \(`run.name`\)$")
    with pytest.raises(RunFolderError, match=msg):
        make_trainer(NoisyNCE(), tmp_path, steps=10).fit()
    assert (tmp_path / "metrics.jsonl").read_bytes() == before and len(CheckpointStore(tmp_path / "checkpoints").checkpoints()) == 1
    make_trainer(NoisyNCE(), tmp_path, steps=20).fit(resume=True)  # continuing is fine


def test_fresh_fit_refuses_a_folder_with_only_a_metrics_log(tmp_path):
    # a run stopped before its first checkpoint: nothing to resume, and its log is not thrown away silently
    (tmp_path / "metrics.jsonl").write_text('{"step": 5}\n')
    for resume in (False, "auto"):
        with pytest.raises(RunFolderError, match=r"already holds a run \(a metrics log but no checkpoint yet\)"):
            make_trainer(NoisyNCE(), tmp_path, steps=10).fit(resume=resume)
    assert (tmp_path / "metrics.jsonl").read_text() == '{"step": 5}\n'


def test_overwrite_deletes_the_old_run_and_starts_again(tmp_path):
    make_trainer(NoisyNCE(), tmp_path / "old", steps=30).fit()
    (tmp_path / "old/checkpoints/notes.txt").write_text("kept")
    make_trainer(NoisyNCE(), tmp_path / "new", steps=10).fit()
    result = make_trainer(NoisyNCE(), tmp_path / "old", steps=10).fit(overwrite=True)
    assert result.step == 10
    assert metric_lines(tmp_path / "old") == metric_lines(tmp_path / "new")
    assert [p.name for p in CheckpointStore(tmp_path / "old/checkpoints").checkpoints()] == ["ckpt-000000010.json"]
    assert (tmp_path / "old/checkpoints/notes.txt").read_text() == "kept"
    with pytest.raises(ValueError, match=r"overwrite: deletes the run to start again; it cannot be combined with resume=True"):
        make_trainer(NoisyNCE(), tmp_path / "old", steps=10).fit(resume=True, overwrite=True)


@pytest.mark.parametrize("damage", ["pointer_missing", "pointer_garbage", "newest_truncated"])
def test_resume_recovers_from_the_newest_valid_checkpoint(tmp_path: Path, damage: str,
                                                          caplog: pytest.LogCaptureFixture) -> None:
    kw = dict(steps=40, checkpoint_every=10, keep_checkpoints=None)
    one = make_trainer(NoisyNCE(), tmp_path / "one", **kw)
    one.fit()
    make_trainer(NoisyNCE(), tmp_path / "two", **{**kw, "steps": 30}).fit()
    ck = tmp_path / "two/checkpoints"
    if damage == "pointer_missing":
        (ck / "latest").unlink()
    elif damage == "pointer_garbage":
        (ck / "latest").write_bytes(b"\xff\xfe")
    else:
        w = ck / json.loads((ck / "ckpt-000000030.json").read_text())["weights"]["file"]
        w.write_bytes(w.read_bytes()[:100])
    two = make_trainer(NoisyNCE(), tmp_path / "two", **kw)
    with caplog.at_level(logging.WARNING, logger="ebms.train"):
        two.fit(resume=True)
    assert metric_lines(tmp_path / "one") == metric_lines(tmp_path / "two")
    _assert_same_state(one, two)
    resumed = events(tmp_path / "two", "resume")[-1]
    assert resumed["step"] == (20 if damage == "newest_truncated" else 30)
    assert caplog.text  # the skipped pointer or record was reported


def test_resume_refuses_a_checkpoint_of_another_run(tmp_path: Path) -> None:
    make_trainer(NoisyNCE(), tmp_path, steps=10, identity={"data.name": "two_moons", "model.hidden": [8]}).fit()
    before = (tmp_path / "metrics.jsonl").read_bytes()
    msg = (r"ckpt-000000010.json: checkpoint of another run: trained with data.name='two_moons' "
           r"\(here 'eight_gaussians'\); use the run folder it belongs to")
    with pytest.raises(CheckpointError, match=msg):
        make_trainer(NoisyNCE(), tmp_path, steps=20, identity={"data.name": "eight_gaussians", "model.hidden": [8]}).fit(resume=True)
    assert (tmp_path / "metrics.jsonl").read_bytes() == before
    assert CheckpointStore(tmp_path / "checkpoints").load().step == 10


def _sgd_with_lr(groups, lr: float) -> torch.optim.Optimizer:
    opt = torch.optim.SGD(groups, lr=0.1)  # torch refuses lr < 0 here but not inf/nan, nor a later edit
    opt.param_groups[-1]["lr"] = lr
    return opt


@pytest.mark.parametrize("lr", [float("inf"), float("nan"), -1.0])
def test_non_finite_or_negative_learning_rate_is_refused_up_front(tmp_path: Path, lr: float) -> None:
    msg = rf"optimizer: parameter group 1 has lr={lr!r}; expected a finite number >= 0 \(`ebms train`: train.lr\)"
    with pytest.raises(ValueError, match=msg):
        make_trainer(NoisyNCE(), tmp_path, optimizer=lambda g: _sgd_with_lr(g, lr))


class _DropoutEnergy(nn.Module):
    """A small MLP energy with dropout: its training draws from torch's global RNG."""

    def __init__(self) -> None:
        super().__init__()
        self.net = nn.Sequential(nn.Linear(2, 16), nn.Tanh(), nn.Dropout(0.5), nn.Linear(16, 1))

    def forward(self, x: Tensor) -> Tensor:
        return self.net(x).squeeze(-1)


class _DropoutNCE(nn.Module):
    """NCE whose energy calls go through dropout (global RNG) and whose noise uses the generator."""

    def __init__(self) -> None:
        super().__init__()
        self.inner = NoisyNCE()

    def forward(self, energy: nn.Module, x: Tensor, *, generator: torch.Generator) -> LossOutput:
        return self.inner(energy, x, generator=generator)


def test_a_fresh_fit_repeats_with_dropout_whatever_the_global_rng_was(tmp_path: Path) -> None:
    """Dropout draws from torch's global RNG; a fresh fit seeds it from ``seed``, so two fits agree."""
    finals = []
    for i, noise_seed in enumerate((123, 456)):
        torch.manual_seed(0)
        model = _DropoutEnergy()
        torch.manual_seed(noise_seed)  # a different global RNG state before each fit
        make_trainer(_DropoutNCE(), tmp_path / f"r{i}", model=model, steps=20).fit()
        finals.append(torch.cat([p.detach().flatten() for p in model.parameters()]))
    assert torch.equal(finals[0], finals[1])


def test_release_memory_calls_on_its_period_and_changes_no_number(tmp_path: Path) -> None:
    release = ReleaseMemory(every=3)
    with_cb = make_trainer(GaussianML(), tmp_path / "a", steps=10, callbacks=[release]).fit()
    without = make_trainer(GaussianML(), tmp_path / "b", steps=10).fit()
    assert release.calls == 3  # steps 3, 6, 9
    assert with_cb.metrics == without.metrics
    with pytest.raises(ValueError, match="every"):
        ReleaseMemory(every=0)


def test_release_memory_also_trims_when_training_starts(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # once before the first step (what building and resuming left free, before a sampler forks), then per period
    import ebms.train.callbacks as callbacks

    seen: list[int] = []
    trainer = make_trainer(GaussianML(), tmp_path, steps=7, callbacks=[ReleaseMemory(every=3)])
    monkeypatch.setattr(callbacks, "release_free_memory", lambda: seen.append(trainer.step))
    trainer.fit()
    assert seen == [0, 3, 6]
