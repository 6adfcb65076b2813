"""Divergence guard: detection, restore + learning-rate reduction, and the final error."""

from __future__ import annotations

import json
import logging
import math
from pathlib import Path

import pytest
from _train_helpers import FailAt, GaussianML, NoisyNCE, events, make_trainer, metric_lines

from ebms.train import Callback, DivergenceGuard, Trainer, TrainingDiverged

NEVER_ENDS = range(1, 10**9)


# ----------------------------------------------------------------------------- verdicts


def test_check_names_the_first_unhealthy_value() -> None:
    g = DivergenceGuard(max_abs_energy=100.0)
    ok = {"e_pos": 1.0, "e_neg": 2.0, "gap": 1.0}
    assert g.check(0.5, ok, 1.0) is None
    assert g.check(math.nan, ok, 1.0) == "loss is nan"
    assert g.check(0.5, {**ok, "gap": math.inf}, 1.0) == "metric 'gap' is inf"
    assert g.check(0.5, ok, math.nan) == "grad_norm is nan"
    assert g.check(0.5, {**ok, "e_neg": -250.0}, 1.0) == "|e_neg| = 250 exceeds max_abs_energy=100"
    assert DivergenceGuard(max_abs_energy=None).check(0.5, {"e_pos": 1e30}, 1.0) is None


def test_guard_validation_messages() -> None:
    with pytest.raises(ValueError, match=r"lr_factor: expected a number in \(0, 1\]; got 0"):
        DivergenceGuard(lr_factor=0)
    with pytest.raises(ValueError, match=r"lr_factor: expected a number in \(0, 1\]; got 1.5"):
        DivergenceGuard(lr_factor=1.5)
    with pytest.raises(ValueError, match=r"max_retries: expected an int >= 0; got -1"):
        DivergenceGuard(max_retries=-1)
    with pytest.raises(ValueError, match=r"max_abs_energy: expected a finite number > 0; got 0"):
        DivergenceGuard(max_abs_energy=0)
    with pytest.raises(ValueError, match=r"snapshot_every: expected an int >= 1; got 0"):
        DivergenceGuard(snapshot_every=0)
    with pytest.raises(TypeError, match=r"energy_keys: expected a tuple of metric names; got \['e_pos'\]"):
        DivergenceGuard(energy_keys=["e_pos"])  # type: ignore[arg-type]


# ----------------------------------------------------------------------------- recovery


class _SetLr(Callback):
    def __init__(self, lr: float) -> None:
        self.lr = lr

    def on_fit_start(self, trainer: Trainer) -> None:
        for g in trainer.optimizer.param_groups:
            g["lr"] = self.lr


def test_nan_loss_restores_last_good_state_and_halves_lr(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    # call 25 = step 25 returns NaN: the trainer goes back to the state after step 20
    # (snapshot confirmed healthy by step 21), halves the learning rate and goes on
    kw = dict(steps=40, checkpoint_every=10, log_every=5)
    with caplog.at_level(logging.WARNING, logger="ebms.train"):
        result = make_trainer(FailAt(NoisyNCE(), {25}), tmp_path / "a", **kw).fit()
    assert result.step == 40 and result.restores == 1 and result.metrics["lr"] == 0.025
    (ev,) = events(tmp_path / "a", "diverged")
    assert {k: ev[k] for k in ("step", "failed_step", "reason", "action", "retry", "lr")} == {
        "step": 20, "failed_step": 25, "reason": "loss is nan", "action": "restore", "retry": 1, "lr": 0.025,
    }
    assert "step 25 diverged (loss is nan): restored step 20, lr -> 0.025 (retry 1/3)" in caplog.text
    lines = metric_lines(tmp_path / "a")
    assert [r["step"] for r in lines] == [5, 10, 15, 20, 25, 30, 35, 40]
    # reference: the same run resumed from its step-20 checkpoint with lr 0.025 set by hand;
    # equality shows the restore brought back weights, optimizer, generator, buffer and data position
    make_trainer(FailAt(NoisyNCE(), set()), tmp_path / "b", **{**kw, "steps": 20}).fit()
    make_trainer(FailAt(NoisyNCE(), set()), tmp_path / "b", callbacks=[_SetLr(0.025)], **kw).fit(resume=True)
    assert lines[4:] == metric_lines(tmp_path / "b")[4:]
    assert lines[:4] == metric_lines(tmp_path / "b")[:4]


def test_runaway_energy_triggers_restore(tmp_path: Path) -> None:
    result = make_trainer(FailAt(GaussianML(), {12}, what="metric"), tmp_path, steps=20).fit()
    (ev,) = events(tmp_path, "diverged")
    assert ev["reason"] == "|e_pos| = 1e+09 exceeds max_abs_energy=1e+06"
    assert ev["step"] == 10 and result.restores == 1


def test_persistent_divergence_stops_with_training_diverged(tmp_path: Path) -> None:
    t = make_trainer(FailAt(GaussianML(), range(15, 10**9)), tmp_path, steps=40, checkpoint_every=10)
    msg = (
        r"training diverged at step 11: loss is nan; gave up after 3 restore\(s\) to step 10 "
        r"\(lr now 0.00625\)\. Try a smaller learning rate, grad_clip"
    )
    with pytest.raises(TrainingDiverged, match=msg):
        t.fit()
    evs = events(tmp_path, "diverged")
    assert [e["action"] for e in evs] == ["restore"] * 3 + ["stop"]
    assert [e["lr"] for e in evs[:3]] == [0.025, 0.0125, 0.00625]
    # no checkpoint of a diverged state: latest is still the healthy step 10
    assert (tmp_path / "checkpoints" / "latest").read_text().strip() == "ckpt-000000010.json"


def test_failure_at_first_step_has_nothing_to_restore(tmp_path: Path) -> None:
    with pytest.raises(TrainingDiverged, match=r"training diverged at step 1: loss is nan; no earlier healthy state"):
        make_trainer(FailAt(GaussianML(), NEVER_ENDS), tmp_path).fit()


def test_retry_count_resets_after_reaching_the_next_snapshot(tmp_path: Path) -> None:
    # failures at calls 15 (step 15) and 40 (step 35 after the replay): each is a
    # first retry because a new snapshot (step 20, 30) was reached in between
    guard = DivergenceGuard(max_retries=1)
    result = make_trainer(FailAt(GaussianML(), {15, 40}), tmp_path, steps=50, guard=guard).fit()
    evs = events(tmp_path, "diverged")
    assert [(e["failed_step"], e["step"], e["retry"], e["lr"]) for e in evs] == [(15, 10, 1, 0.025), (35, 30, 1, 0.0125)]
    assert result.restores == 2 and result.step == 50


def test_snapshot_every_gives_closer_restore_points(tmp_path: Path) -> None:
    guard = DivergenceGuard(snapshot_every=4)
    make_trainer(FailAt(GaussianML(), {11}), tmp_path, steps=12, checkpoint_every=None, guard=guard).fit()
    (ev,) = events(tmp_path, "diverged")
    assert (ev["failed_step"], ev["step"]) == (11, 8)


def test_without_guard_non_finite_values_are_logged_as_strings(tmp_path: Path) -> None:
    make_trainer(FailAt(GaussianML(), {3}), tmp_path, steps=3, log_every=1, guard=None).fit()
    last = json.loads((tmp_path / "metrics.jsonl").read_text().splitlines()[-1])
    assert last["step"] == 3 and last["loss"] == "nan" and last["grad_norm"] == "nan"


def test_restore_removes_the_undone_steps_from_the_log(tmp_path: Path) -> None:
    # snapshot at step 10, line logged at 15, failure at 18: the step-15 line belongs to the
    # undone stretch and must not stay beside the re-run step 15
    make_trainer(FailAt(NoisyNCE(), {18}), tmp_path, steps=30, checkpoint_every=10, log_every=5).fit()
    rows = [json.loads(x) for x in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    steps = [r["step"] for r in rows if "event" not in r]
    assert steps == [5, 10, 15, 20, 25, 30]
    kinds = [r.get("event", "step") for r in rows]
    assert kinds.index("diverged") == 2  # right after the step-10 line it went back to
    assert [r["lr"] for r in rows if r.get("step") == 15 and "event" not in r] == [0.025]
