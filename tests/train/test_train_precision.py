"""``Trainer(precision="bf16")`` and ``Trainer(compile=True)``: parameters and gradients stay float32, the steps
follow float32's within bfloat16's rounding, a resume is bit-exact, and the setting is part of the identity."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from _train_helpers import NoisyNCE, make_trainer, metric_lines

from ebms.errors import CheckpointError
from ebms.nets import MLPEnergy
from ebms.train import Callback


def _mlp() -> MLPEnergy:
    torch.manual_seed(3)
    return MLPEnergy(2, (32, 32))


class Watch(Callback):
    """A callback that records the dtypes of the model's parameters and gradients after each step."""

    def __init__(self) -> None:
        super().__init__()
        self.dtypes: set[torch.dtype] = set()

    def on_step_end(self, trainer, step, metrics) -> None:
        for p in trainer.model.parameters():
            self.dtypes.add(p.dtype)
            if p.grad is not None:
                self.dtypes.add(p.grad.dtype)


def test_bf16_keeps_float32_state_and_follows_the_float32_run(tmp_path: Path) -> None:
    watch = Watch()
    t16 = make_trainer(NoisyNCE(), tmp_path / "bf16", model=_mlp(), precision="bf16", callbacks=[watch])
    t16.fit()
    t32 = make_trainer(NoisyNCE(), tmp_path / "fp32", model=_mlp())
    t32.fit()
    assert watch.dtypes == {torch.float32}
    a, b = metric_lines(tmp_path / "bf16"), metric_lines(tmp_path / "fp32")
    assert [r["step"] for r in a] == [r["step"] for r in b]
    assert a != b  # bfloat16 products did run
    for ra, rb in zip(a, b):  # 40 Adam steps of lr 0.05 from the same start: close, not equal
        assert abs(ra["loss"] - rb["loss"]) <= 0.05 * (1 + abs(rb["loss"])), (ra, rb)
    assert t16.identity["trainer.precision"] == "bf16" and t32.identity["trainer.precision"] == "fp32"


def test_a_resumed_bf16_run_is_the_uninterrupted_one(tmp_path: Path) -> None:
    make_trainer(NoisyNCE(), tmp_path / "full", model=_mlp(), precision="bf16").fit()
    make_trainer(NoisyNCE(), tmp_path / "part", model=_mlp(), precision="bf16", steps=20).fit()
    make_trainer(NoisyNCE(), tmp_path / "part", model=_mlp(), precision="bf16").fit(resume=True)
    assert metric_lines(tmp_path / "full") == metric_lines(tmp_path / "part")


def test_resuming_in_another_precision_is_refused(tmp_path: Path) -> None:
    make_trainer(NoisyNCE(), tmp_path, model=_mlp(), precision="bf16", steps=10).fit()
    with pytest.raises(CheckpointError, match="trainer.precision"):
        make_trainer(NoisyNCE(), tmp_path, model=_mlp()).fit(resume=True)


@pytest.mark.parametrize("kw, match", [({"precision": "fp16"}, "^precision: expected one of"),
                                       ({"compile": "yes"}, "^compile: expected")])
def test_bad_settings_name_the_argument(tmp_path: Path, kw, match) -> None:
    with pytest.raises((TypeError, ValueError), match=match):
        make_trainer(NoisyNCE(), tmp_path, model=_mlp(), **kw)


def test_compile_is_refused_for_an_objective_differentiated_twice(tmp_path: Path) -> None:
    from ebms.objectives import DenoisingScoreMatching, SlicedScoreMatching
    from ebms.train.protocols import differentiates_twice

    assert differentiates_twice(DenoisingScoreMatching(sigma=0.1)) and not differentiates_twice(NoisyNCE())
    with pytest.raises(ValueError, match="^compile: SlicedScoreMatching differentiates the energy twice"):
        make_trainer(SlicedScoreMatching(), tmp_path, model=_mlp(), compile=True)


@pytest.mark.slow
def test_a_compiled_model_trains_as_the_eager_one_and_keeps_its_keys(tmp_path: Path) -> None:
    tc = make_trainer(NoisyNCE(), tmp_path / "compiled", model=_mlp(), compile=True, steps=10)
    tc.fit()
    make_trainer(NoisyNCE(), tmp_path / "eager", model=_mlp(), steps=10).fit()
    a, b = metric_lines(tmp_path / "compiled"), metric_lines(tmp_path / "eager")
    for ra, rb in zip(a, b, strict=True):
        assert ra["loss"] == pytest.approx(rb["loss"], rel=1e-4, abs=1e-5)
    assert set(tc.model.state_dict()) == set(_mlp().state_dict())
    assert tc.identity["trainer.compile"] is True
