"""Divergence guard: detection, restore + learning-rate reduction, and the final error."""

from __future__ import annotations

import json
import logging
import math
from pathlib import Path

import pytest
import torch
from _train_helpers import FailAt, GaussianML, NoisyNCE, events, make_trainer, metric_lines

from ebms.errors import CheckpointError
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
    with pytest.raises(TypeError, match=r"scale_keys: expected a tuple of metric names; got 'loss'"):
        DivergenceGuard(scale_keys="loss")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"explode_factor: expected a number > 1 or None; got 1.0"):
        DivergenceGuard(explode_factor=1.0)
    with pytest.raises(ValueError, match=r"scale_floor: expected a finite number > 0; got 0"):
        DivergenceGuard(scale_floor=0)
    with pytest.raises(ValueError, match=r"window: expected an int >= 1; got 0"):
        DivergenceGuard(window=0)


# ----------------------------------------------------------------------------- explosion rule on synthetic sequences


def _first_alarm(guard: DivergenceGuard, values, key: str = "loss") -> int | None:
    """Index of the first value the guard rejects (healthy values feed its history), else None."""
    history: dict[str, list[float]] = {}
    for i, v in enumerate(values):
        loss, metrics = (v, {}) if key == "loss" else (1.0, {key: v})
        if guard.check(loss, metrics, 1.0, history) is not None:
            return i
        guard.record(history, loss, metrics)
    return None


def _lognormal(n: int, sigma: float, seed: int) -> list[float]:
    g = torch.Generator().manual_seed(seed)
    z = torch.randn(n, generator=g, dtype=torch.float64)
    sign = torch.where(torch.rand(n, generator=g, dtype=torch.float64) < 0.5, -1.0, 1.0)
    return (sign * torch.exp(sigma * z)).tolist()


def test_explosion_rule_matches_its_definition() -> None:
    g = DivergenceGuard(explode_factor=10.0, scale_floor=0.5, window=3)
    history = {"loss": [2.0, -4.0, 8.0]}  # median |v| = 4 -> threshold 40
    assert g.check(39.9, {}, 1.0, history) is None and g.check(-39.9, {}, 1.0, history) is None
    assert g.check(-40.1, {}, 1.0, history) == (
        "|loss| = 40.1 exploded: more than explode_factor=10 times its recent scale 4 "
        "(median |loss| of the last 3 healthy steps)"
    )
    assert g.check(5.1, {}, 1.0, {"loss": [0.0, 0.01]}) is not None  # floor 0.5 -> threshold 5
    assert g.check(4.9, {}, 1.0, {"loss": [0.0, 0.01]}) is None
    g.record(history, 16.0, {"energy": 3.0})
    assert history == {"loss": [-4.0, 8.0, 16.0], "energy": [3.0]}  # window 3
    assert DivergenceGuard(explode_factor=None).check(1e30, {}, 1.0, {"loss": [1.0]}) is None
    assert g.check(1e6, {}, 1.0, {}) is None  # no history yet: the first step is never judged by this rule


def test_explosion_rule_fires_on_a_jump_a_ramp_and_after_a_dead_stretch() -> None:
    g = DivergenceGuard()
    noisy = [2.0 * abs(v) for v in _lognormal(200, 0.5, seed=1)]
    assert _first_alarm(g, [*noisy, 2e4, 1.0]) == 200
    ramp = [1.0] * 100 + [2.0**k for k in range(1, 40)]  # doubling each step from step 100
    assert _first_alarm(g, ramp) == 100 + 6  # 2^7 = 128 is the first value above 100 * max(median 1, floor 1)
    assert _first_alarm(g, [0.0] * 50 + [6.6e14]) == 50  # a score-matching loss stuck at 0, then 1e14
    e_pos = [float(v) for v in range(1, 60)] + [1e5]
    assert _first_alarm(g, e_pos, key="e_pos") == 59  # energies are watched too


@pytest.mark.parametrize("scale", [1e-3, 1.0, 1e3])
def test_explosion_rule_is_silent_on_noisy_training(scale: float) -> None:
    # heavy-tailed noise of both signs, |v| = scale * exp(0.8 z): an alarm needs |z| > ln(100) / 0.8 = 5.76,
    # probability 8e-9 per step (two-sided normal tail), so about 2e-4 over the 20000 steps here
    assert _first_alarm(DivergenceGuard(), [scale * v for v in _lognormal(20000, 0.8, seed=2)]) is None


def test_explosion_rule_is_silent_on_a_decreasing_or_sign_changing_loss() -> None:
    g = DivergenceGuard()
    noise = _lognormal(3000, 0.3, seed=3)
    decreasing = [1e3 * 0.99**t * abs(n) for t, n in enumerate(noise)]  # 1e3 down to 1e-10
    assert _first_alarm(g, decreasing) is None
    wave = [5.0 * math.sin(t / 20.0) + 0.3 * n for t, n in enumerate(noise)]
    assert _first_alarm(g, wave) is None
    crossing = [50.0 - 0.1 * t for t in range(1000)]  # +50 to -50 through 0
    assert _first_alarm(g, crossing) is None
    log_likelihood_like = [-(200.0 - 150.0 * (1 - 0.995**t)) + n for t, n in enumerate(noise)]
    assert _first_alarm(g, log_likelihood_like) is None


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


class _SnapshotSpy(Callback):
    """Records, after each step, where the guard's last good snapshot keeps its tensors."""

    def __init__(self) -> None:
        self.seen: list[tuple[int, str | None, int]] = []

    def on_step_end(self, trainer: Trainer, step: int, metrics: dict) -> None:
        snap = trainer._snapshot
        assert snap is not None
        self.seen.append((snap.step, None if snap.path is None else snap.path.name, len(snap.tensors)))


@pytest.mark.parametrize("keep", [None, 3])
def test_a_snapshot_at_a_checkpoint_step_reads_the_checkpoint_back_and_restores_the_same_state(tmp_path: Path, keep) -> None:
    # the snapshots taken at checkpoint steps 10 and 20 hold no tensor copies (the checkpoint written at that
    # step has them); the restore after the NaN at step 25 reads step 20 back and continues exactly as a
    # run whose store keeps one checkpoint only, where the snapshot must be a copy in memory
    kw = dict(steps=40, checkpoint_every=10, log_every=5)
    spy, copy_spy = _SnapshotSpy(), _SnapshotSpy()
    make_trainer(FailAt(NoisyNCE(), {25}), tmp_path / "disk", callbacks=[spy], keep_checkpoints=keep, **kw).fit()
    make_trainer(FailAt(NoisyNCE(), {25}), tmp_path / "copy", callbacks=[copy_spy], keep_checkpoints=1, **kw).fit()
    at = {step: (name, n) for step, name, n in spy.seen}
    assert at[0][0] is None and at[0][1] > 0  # the start: no checkpoint yet, a copy
    assert at[10][0].startswith("ckpt-000000010") and at[10][1] == 0
    assert at[20][0].startswith("ckpt-000000020") and at[20][1] == 0
    assert all(name is None and n > 0 for _, name, n in copy_spy.seen)
    assert metric_lines(tmp_path / "disk") == metric_lines(tmp_path / "copy")
    assert [e["step"] for e in events(tmp_path / "disk", "diverged")] == [20]


def test_a_snapshot_whose_checkpoint_is_gone_is_an_error_naming_it(tmp_path: Path) -> None:
    class Remove(Callback):
        def on_step_end(self, trainer: Trainer, step: int, metrics: dict) -> None:
            if step == 22:
                for p in (tmp_path / "a" / "checkpoints").glob("ckpt-000000020*"):
                    p.unlink()

    with pytest.raises(CheckpointError, match=r"ckpt-000000020"):
        make_trainer(FailAt(NoisyNCE(), {25}), tmp_path / "a", callbacks=[Remove()], steps=40, checkpoint_every=10).fit()


def test_exploding_loss_triggers_restore_and_the_history_is_checkpointed(tmp_path: Path) -> None:
    # call 12 returns 10^4 times the loss (finite): the explosion rule restores step 10 and halves lr
    result = make_trainer(FailAt(GaussianML(), {12}, what="scale"), tmp_path / "a", steps=20, checkpoint_every=10).fit()
    (ev,) = events(tmp_path / "a", "diverged")
    assert ev["reason"].startswith("|loss| = ") and "exploded: more than explode_factor=100 times" in ev["reason"]
    assert (ev["step"], ev["failed_step"], result.restores) == (10, 12, 1)
    # the guard's history is part of the checkpoint, so a resumed run judges like the uninterrupted one
    ref = make_trainer(GaussianML(), tmp_path / "b", steps=30, checkpoint_every=10)
    ref.fit()
    record = json.loads((tmp_path / "b/checkpoints/ckpt-000000030.json").read_text())
    assert record["trainer"]["guard_history"] == ref._guard_history
    assert len(ref._guard_history["loss"]) == 30 and set(ref._guard_history) == {"loss", "e_pos"}
    again = make_trainer(GaussianML(), tmp_path / "b", steps=30)
    again.restore()
    assert again._guard_history == ref._guard_history


def test_runaway_energy_triggers_restore(tmp_path: Path) -> None:
    result = make_trainer(FailAt(GaussianML(), {12}, what="metric"), tmp_path, steps=20).fit()
    (ev,) = events(tmp_path, "diverged")
    assert ev["reason"] == "|e_pos| = 1e+09 exceeds max_abs_energy=1e+06"
    assert ev["step"] == 10 and result.restores == 1


class _Unanchored(FailAt):
    """An objective whose energy level is free (energy matching's): the guard leaves ``e_pos`` be."""

    unanchored_metrics = ("e_pos",)


def test_a_metric_the_objective_leaves_unanchored_is_logged_but_not_watched(tmp_path: Path) -> None:
    from ebms.objectives import EnergyMatching
    from ebms.train.protocols import unanchored_metrics

    result = make_trainer(_Unanchored(GaussianML(), {12}, what="metric"), tmp_path, steps=20).fit()
    assert result.restores == 0 and not events(tmp_path, "diverged")
    t = make_trainer(_Unanchored(GaussianML(), set()), tmp_path / "b", steps=3)
    t.fit()
    assert "e_pos" not in t._guard_history and "loss" in t._guard_history
    assert unanchored_metrics(EnergyMatching()) == ("e_pos", "e_neg") and unanchored_metrics(GaussianML()) == ()
    bad = GaussianML()
    bad.unanchored_metrics = "e_pos"  # type: ignore[attr-defined]
    with pytest.raises(TypeError, match=r"objective.unanchored_metrics: expected a tuple of metric names; got 'e_pos'"):
        make_trainer(bad, tmp_path / "c", steps=1)


def test_persistent_divergence_stops_with_training_diverged(tmp_path: Path) -> None:
    t = make_trainer(FailAt(GaussianML(), range(15, 10**9)), tmp_path, steps=40, checkpoint_every=10)
    msg = (
        r"training diverged at step 11: loss is nan; gave up after 3 restore\(s\) to step 10 "
        r"\(lr 0.05 lowered to 0.00625, grad_clip=None\)\. To fix: lower the learning rate \(optimizer lr; "
        r"`ebms train`: train.lr\) or clip the gradient norm \(grad_clip; `ebms train`: train.grad_clip\)"
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


class _RaisesOnNonFiniteWeights(torch.nn.Module):
    """GaussianML whose energy's weights are made non-finite at step ``at`` (once), after which the
    objective raises, as a sampler does when its start energies are not finite."""

    def __init__(self, at: int) -> None:
        super().__init__()
        self.inner, self.at, self.calls = GaussianML(), at, 0

    def forward(self, energy, x, *, generator):
        self.calls += 1
        if self.calls == self.at:
            with torch.no_grad():
                next(energy.parameters()).fill_(math.inf)
        if not all(bool(torch.isfinite(p).all()) for p in energy.parameters()):
            raise ValueError("energy(x0): expected a finite energy for every chain")
        return self.inner(energy, x, generator=generator)


def test_an_objective_failing_on_non_finite_weights_is_a_divergence_not_a_crash(tmp_path: Path) -> None:
    # the weights of the step-11 state are broken; the step-12 objective raises: restore to step 10 and go on
    result = make_trainer(_RaisesOnNonFiniteWeights(at=12), tmp_path, steps=20).fit()
    (ev,) = events(tmp_path, "diverged")
    assert ev["reason"].startswith("the objective failed on non-finite weights (energy(x0): expected a finite")
    assert ev["step"] == 10 and result.restores == 1 and result.step == 20


def test_an_objective_error_on_finite_weights_is_still_raised(tmp_path: Path) -> None:
    class Broken(torch.nn.Module):
        def forward(self, energy, x, *, generator):
            raise ValueError("a bug, not a divergence")

    with pytest.raises(ValueError, match="a bug, not a divergence"):
        make_trainer(Broken(), tmp_path).fit()
