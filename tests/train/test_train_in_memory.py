"""The trainer as a library driver: in-memory runs, a caller's generator, streams that pick their
batch sizes, declared protocols (callbacks, closure optimizers, objectives that set gradients), and
host numbers only on the steps that need them."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from _train_helpers import GaussianML, NoisyNCE, make_data, make_trainer, metric_lines
from torch import Tensor, nn

from ebms.objectives._base import LossOutput, scalar_metrics
from ebms.train import Callback, ClosureOptimizer, GradientObjective, ReportsStep, SampleSnapshot, Trainer
from ebms.train.protocols import needs_closure, sets_gradients


def _params(t: Trainer) -> dict[str, Tensor]:
    return {**{f"m.{k}": v.clone() for k, v in t.model.state_dict().items()},
            **{f"o.{k}": v.clone() for k, v in t.objective.state_dict().items()}}


# ----------------------------------------------------------------------------- in memory


def test_an_in_memory_run_trains_exactly_as_a_run_with_a_folder_and_writes_nothing(tmp_path: Path,
                                                                                  monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    torch.manual_seed(123)  # a run folder reseeds the global RNG; an in-memory run leaves it alone
    disk = make_trainer(NoisyNCE(), tmp_path / "run", steps=12)
    on_disk = disk.fit()
    before = torch.random.get_rng_state()
    memory = make_trainer(NoisyNCE(), None, steps=12)
    result = memory.fit()
    assert torch.equal(torch.random.get_rng_state(), before)
    a, b = _params(disk), _params(memory)
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    assert result.step == 12 and result.checkpoint is None and memory.store is None
    assert result.metrics == on_disk.metrics and metric_lines(tmp_path / "run")[-1]["step"] == 10
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run"]  # nothing written for the in-memory run


def test_an_in_memory_run_refuses_resume_overwrite_and_checkpoints() -> None:
    t = make_trainer(GaussianML(), None, steps=2)
    with pytest.raises(ValueError, match=r"resume=True: an in-memory run \(run_dir=None\) keeps nothing"):
        t.fit(resume=True)
    with pytest.raises(ValueError, match=r"resume='auto': an in-memory run"):
        t.fit(resume="auto")
    with pytest.raises(ValueError, match=r"overwrite=True: an in-memory run"):
        t.fit(overwrite=True)
    with pytest.raises(ValueError, match=r"save_checkpoint: an in-memory run \(run_dir=None\) writes no checkpoints"):
        t.save_checkpoint()
    with pytest.raises(ValueError, match=r"restore: an in-memory run \(run_dir=None\) has no checkpoints"):
        t.restore()
    snapshots = SampleSnapshot(lambda tr, step, path: None, every=1)
    with pytest.raises(ValueError, match=r"SampleSnapshot: expected a trainer with a run_dir"):
        make_trainer(GaussianML(), None, steps=2, callbacks=[snapshots]).fit()


def test_the_divergence_guard_restores_in_memory() -> None:
    from _train_helpers import FailAt

    t = make_trainer(FailAt(GaussianML(), {7}), None, steps=12, checkpoint_every=5)
    result = t.fit()
    assert result.step == 12 and result.restores == 1


# ----------------------------------------------------------------------------- generator, streams


def test_a_given_generator_is_used_in_its_current_state_and_continues() -> None:
    mine = torch.Generator().manual_seed(5)
    torch.randn(3, generator=mine)  # advanced: the trainer must not reseed it
    state = mine.get_state()
    draws = []

    def stream(n: int, g: torch.Generator) -> Tensor:
        assert g is mine
        draws.append(torch.randn(n, 2, generator=g))
        return draws[-1]

    make_trainer(GaussianML(), None, data=stream, steps=3, batch_size=4, generator=mine).fit()
    ref = torch.Generator()
    ref.set_state(state)
    assert all(torch.equal(d, torch.randn(4, 2, generator=ref)) for d in draws)
    with pytest.raises(TypeError, match=r"generator: expected a torch.Generator on cpu or None; got int"):
        make_trainer(GaussianML(), None, generator=3)


def test_a_stream_with_batch_size_none_picks_each_batch_size() -> None:
    sizes = iter([3, 5, 2, 7])
    seen = []

    def stream(n, g):
        assert n is None
        seen.append(next(sizes))
        return make_data()[: seen[-1]]

    make_trainer(GaussianML(), None, data=stream, steps=4, batch_size=None).fit()
    assert seen == [3, 5, 2, 7]
    with pytest.raises(ValueError, match=r"batch_size: expected an int >= 1 with tensor data"):
        make_trainer(GaussianML(), None, batch_size=None)
    with pytest.raises(ValueError, match=r"data\(batch_size, generator\): expected at least one row; got 0"):
        make_trainer(GaussianML(), None, data=lambda n, g: torch.zeros(0, 2), batch_size=None).fit()


# ----------------------------------------------------------------------------- declared protocols


def test_callbacks_are_callback_subclasses_with_no_op_hooks_and_optional_state() -> None:
    class Duck:  # has the hook, but declares nothing
        def on_step_end(self, trainer, step, metrics):
            pass

    with pytest.raises(TypeError, match=r"callbacks\[0\]: expected an object with on_step_end/on_fit_start/"
                                        r"on_fit_end: an ebms.train.Callback \(subclass it"):
        make_trainer(GaussianML(), None, callbacks=[Duck()])
    plain = Callback()
    plain.on_fit_start(None)  # type: ignore[arg-type]
    plain.on_step_end(None, 1, {})  # type: ignore[arg-type]
    plain.on_fit_end(None)  # type: ignore[arg-type]
    assert plain.state_dict() is None

    class Forgetful(Callback):
        def state_dict(self):
            return {"n": 1}

    with pytest.raises(TypeError, match=r"Forgetful: state_dict\(\) returned state but load_state_dict\(\) is not"):
        Forgetful().load_state_dict({"n": 1})


def test_optimizer_and_objective_protocols_are_declared_attributes() -> None:
    p = [nn.Parameter(torch.zeros(2))]

    class Declared(torch.optim.SGD):
        needs_closure = False
        info = {"loss": 1.0}

    assert isinstance(Declared(p, lr=0.1), ClosureOptimizer) and not needs_closure(Declared(p, lr=0.1))
    assert isinstance(Declared(p, lr=0.1), ReportsStep) and not isinstance(torch.optim.SGD(p, lr=0.1), ReportsStep)

    class Sets(nn.Module):
        sets_gradients = True

    class Off(nn.Module):
        sets_gradients = False

    assert isinstance(Sets(), GradientObjective) and sets_gradients(Sets())
    assert not sets_gradients(Off()) and not sets_gradients(GaussianML()) and not sets_gradients(lambda m, b: None)


class _AnalyticML(nn.Module):
    """``GaussianML`` without its offset, its gradient written to ``.grad`` by hand (no graph)."""

    sets_gradients = True

    def forward(self, energy: nn.Module, x: Tensor, *, generator=None) -> LossOutput:
        with torch.enable_grad():
            loss = energy(x).mean() + energy.log_partition()
            grads = torch.autograd.grad(loss, list(energy.parameters()))
        for p, g in zip(energy.parameters(), grads):
            p.grad = g if p.grad is None else p.grad + g
        return LossOutput(loss.detach(), scalar_metrics(e_pos=loss.detach()))


class _AutogradML(nn.Module):
    def forward(self, energy: nn.Module, x: Tensor, *, generator=None) -> LossOutput:
        loss = energy(x).mean() + energy.log_partition()
        return LossOutput(loss, scalar_metrics(e_pos=loss.detach()))


def test_an_objective_that_sets_gradients_gets_no_backward_and_trains_the_same() -> None:
    runs = []
    for objective in (_AnalyticML(), _AutogradML()):
        t = make_trainer(objective, None, steps=10)
        runs.append((t.fit().metrics, dict(t.model.state_dict())))
    (m_a, s_a), (m_b, s_b) = runs
    assert m_a == m_b and all(torch.equal(s_a[k], s_b[k]) for k in s_a)


# ----------------------------------------------------------------------------- host numbers


def test_without_guard_or_callbacks_host_numbers_are_made_only_on_log_checkpoint_and_last_steps(
        tmp_path: Path) -> None:
    made = []
    orig = Trainer._health

    def spy(self, loss, raw, norm):
        made.append(self.step + 1)
        return orig(self, loss, raw, norm)

    Trainer._health = spy  # type: ignore[method-assign]
    try:
        make_trainer(GaussianML(), tmp_path / "a", steps=23, log_every=5, checkpoint_every=10, guard=None).fit()
        assert made == [5, 10, 15, 20, 23]
        made.clear()
        make_trainer(GaussianML(), None, steps=7, log_every=5, guard=None).fit()
        assert made == [5, 7]
        made.clear()
        make_trainer(GaussianML(), None, steps=3, log_every=5).fit()  # the guard judges every step
        assert made == [1, 2, 3]
    finally:
        Trainer._health = orig  # type: ignore[method-assign]
    lines = [json.loads(x) for x in (tmp_path / "a" / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in lines] == [5, 10, 15, 20]


def test_a_metric_tensor_is_read_before_the_optimizer_step() -> None:
    class ParamMetric(nn.Module):  # reports a parameter itself, which the step then changes
        def __init__(self) -> None:
            super().__init__()
            self.shift = nn.Parameter(torch.zeros(()))

        def forward(self, energy, x, *, generator=None):
            loss = energy(x).mean() + energy.log_partition() + (self.shift - 1.0) ** 2
            return LossOutput(loss, {"shift": self.shift})

    seen = []

    class Record(Callback):
        def on_step_end(self, trainer, step, metrics):
            seen.append((metrics["shift"], float(trainer.objective.shift.detach())))

    make_trainer(ParamMetric(), None, steps=3, optimizer=lambda g: torch.optim.SGD(g, lr=0.1),
                 callbacks=[Record()]).fit()
    assert seen[0][0] == 0.0 and seen[0][1] != 0.0 and seen[1][0] == seen[0][1]
