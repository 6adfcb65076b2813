"""Structured tasks on the command line: routing by data.name, the shared trainer, eval.json."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from torch import nn

from ebms.cli import tasks
from ebms.cli.config import load_config
from ebms.cli.main import main
from ebms.objectives._base import LossOutput


class ToyRegression(tasks.StructuredTask):
    """y = 2x on fixed points; the figure is the learned slope."""

    data_names = ("toy-regression",)

    def load(self, cfg):
        x = torch.linspace(-1, 1, 32).unsqueeze(-1)
        return tasks.TaskData(train=(x, 2 * x), test=None, info={"dim": 1}, name=cfg.data.name)

    def build_model(self, cfg, data):
        return nn.Linear(data.info["dim"], 1, bias=False)

    def build_objective(self, cfg, data):
        def objective(model, batch, *, generator):
            x, y = batch
            return LossOutput(((model(x) - y) ** 2).mean(), {})

        return objective

    def evaluate(self, cfg, model, data):
        return {"slope": float(model.weight)}


@pytest.fixture(autouse=True)
def toy_task(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setitem(tasks.TASKS, "toy-regression", ToyRegression())


def _args(out: Path, *extra: str) -> list[str]:
    return ["train", f"run.out_dir={out}", "run.name=toy", "data.name=toy-regression", "run.progress=false",
            "train.batch_size=32", "train.log_every=5", "train.checkpoint_every=10", *extra]


def test_task_trains_with_lbfgs_and_reports_its_figure(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(_args(tmp_path, "train.optimizer=lbfgs", "train.steps=5")) == 0
    report = json.loads((tmp_path / "toy" / "eval.json").read_text())
    assert report["figures"]["slope"] == pytest.approx(2.0, abs=1e-4)  # least squares on noiseless data
    assert "toy-regression test, step 5: slope 2" in capsys.readouterr().out
    assert not (tmp_path / "toy" / "samples.png").exists()  # a conditional task draws no samples


def test_task_resume_continues_and_eval_reloads_the_checkpoint(tmp_path: Path) -> None:
    assert main(_args(tmp_path, "train.steps=10", "train.lr=0.05", "--no-eval")) == 0
    assert main([*_args(tmp_path, "train.steps=20", "train.lr=0.05", "--no-eval"), "--resume"]) == 0
    lines = (tmp_path / "toy" / "metrics.jsonl").read_text().splitlines()
    steps = [json.loads(line)["step"] for line in lines if '"step"' in line and '"loss"' in line]
    assert steps[-1] == 20
    assert main(["eval", "--run", str(tmp_path / "toy")]) == 0
    assert json.loads((tmp_path / "toy" / "eval.json").read_text())["step"] == 20


def test_task_batch_larger_than_the_data_is_a_config_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main([*_args(tmp_path, "train.steps=2"), "train.batch_size=33"]) == 2
    assert "train.batch_size: expected at most the 32 training examples of toy-regression; got 33" in capsys.readouterr().err


def test_sample_refuses_a_conditional_task(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(_args(tmp_path, "train.steps=2", "--no-eval")) == 0
    assert main(["sample", "--run", str(tmp_path / "toy")]) == 2
    assert "is a conditional task" in capsys.readouterr().err


def test_register_refuses_a_name_served_by_another_task() -> None:
    class Other(ToyRegression):
        pass

    with pytest.raises(ValueError, match="data.name 'toy-regression' is already served by ToyRegression"):
        tasks.register(Other())
    assert tasks.task_for(load_config(None, ["data.name=toy-regression"])) is tasks.TASKS["toy-regression"]


def test_lbfgs_on_minibatches_is_a_config_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main([*_args(tmp_path, "train.optimizer=lbfgs", "train.steps=2"), "train.batch_size=16"]) == 2
    err = capsys.readouterr().err
    assert "train.batch_size: a quasi-Newton optimizer (OWLQN) steps on the whole training set" in err
    assert "expected batch_size = 32 with tensor data; got 16" in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "toy" / "config.toml").exists()  # nothing written before the configuration built


def test_every_task_that_lists_an_apply_command_builds_its_applier() -> None:
    """``Task.applier`` raises for a task that lists commands in ``applies`` but does not override it (a bug in the
    task): no registered task is such a task, and every listed command is one the command line has."""
    from ebms.cli.applied import APPLY_COMMANDS
    from ebms.cli.tasks import Task, registered

    for task in registered():
        assert set(task.applies) <= set(APPLY_COMMANDS), type(task).__name__
        if task.applies:
            assert type(task).applier is not Task.applier, f"{type(task).__name__} lists {task.applies} but builds no applier"
