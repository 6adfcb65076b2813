"""Quasi-Newton optimizers in the trainer: one trainer step is one L-BFGS iteration on the batch."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from torch import Tensor, nn

from ebms.objectives._base import LossOutput
from ebms.train import Callback, Trainer
from ebms.train.trainer import needs_closure


def _least_squares(n: int = 64) -> tuple[Tensor, Tensor, Tensor]:
    g = torch.Generator().manual_seed(0)
    x = torch.randn(n, 3, generator=g, dtype=torch.float64)
    w = torch.tensor([1.0, -2.0, 0.5], dtype=torch.float64)
    return x, x @ w + 0.1 * torch.randn(n, generator=g, dtype=torch.float64), w


class Counting:
    """Mean squared error, counting its evaluations."""

    calls = 0

    def __call__(self, model: nn.Module, batch: tuple[Tensor, Tensor], *, generator: torch.Generator) -> LossOutput:
        self.calls += 1
        x, y = batch
        return LossOutput(((model(x).squeeze(-1) - y) ** 2).mean(), {})


def test_lbfgs_steps_reach_the_least_squares_solution(tmp_path: Path) -> None:
    x, y, _ = _least_squares()
    model = nn.Linear(3, 1, bias=False).double()
    objective = Counting()
    trainer = Trainer(objective, model, (x, y), steps=4, batch_size=x.shape[0], run_dir=tmp_path, progress=False,
                      optimizer=lambda g: torch.optim.LBFGS(g, lr=1.0, line_search_fn="strong_wolfe",
                                                           tolerance_grad=1e-12, tolerance_change=0.0))
    trainer.fit()
    exact = torch.linalg.lstsq(x, y[:, None]).solution.squeeze(-1)  # the normal-equations optimum
    torch.testing.assert_close(model.weight.detach().squeeze(0), exact, atol=1e-8, rtol=0)


def test_quasi_newton_step_evaluates_the_objective_only_through_the_closure(tmp_path: Path) -> None:
    x, y, _ = _least_squares()
    model = nn.Linear(3, 1, bias=False).double()
    objective = Counting()
    # max_iter=1 and no line search: LBFGS calls the closure once per step, and the trainer adds nothing.
    trainer = Trainer(objective, model, (x, y), steps=3, batch_size=x.shape[0], run_dir=tmp_path, progress=False,
                      optimizer=lambda g: torch.optim.LBFGS(g, lr=0.1, max_iter=1))
    trainer.fit()
    assert objective.calls == 3


def test_needs_closure_recognises_lbfgs_and_flagged_optimizers() -> None:
    p = [nn.Parameter(torch.zeros(2))]

    class Flagged(torch.optim.SGD):
        needs_closure = True

    assert needs_closure(torch.optim.LBFGS(p))
    assert needs_closure(Flagged(p, lr=0.1))
    assert not needs_closure(torch.optim.Adam(p))


def test_owlqn_in_the_trainer_costs_only_its_own_evaluations(tmp_path: Path) -> None:
    from ebms.train.owlqn import OWLQN

    x, y, _ = _least_squares()
    model = nn.Linear(3, 1, bias=False).double()
    objective = Counting()
    opts: list[OWLQN] = []

    def make(groups):
        opts.append(OWLQN(groups))
        return opts[-1]

    evaluations: list[int] = []

    class Count(Callback):
        def on_step_end(self, trainer: Trainer, step: int, metrics: dict[str, float]) -> None:
            evaluations.append(opts[0].info["evaluations"])

    trainer = Trainer(objective, model, (x, y), steps=6, batch_size=x.shape[0], run_dir=tmp_path, progress=False,
                      optimizer=make, log_every=1, callbacks=[Count()])
    result = trainer.fit()
    assert objective.calls == sum(evaluations)
    exact = torch.linalg.lstsq(x, y[:, None]).solution.squeeze(-1)
    torch.testing.assert_close(model.weight.detach().squeeze(0), exact, atol=1e-6, rtol=0)
    assert result.metrics["loss"] == pytest.approx(float(((x @ exact - y) ** 2).mean()), rel=1e-6)


def test_quasi_newton_optimizer_refuses_minibatches(tmp_path: Path) -> None:
    from ebms.train.owlqn import OWLQN

    x, y, _ = _least_squares()
    model = nn.Linear(3, 1, bias=False).double()
    with pytest.raises(ValueError, match=r"batch_size: a quasi-Newton optimizer \(OWLQN\) steps on the whole "
                                         r"training set.*expected batch_size = 64 with tensor data; got 16"):
        Trainer(Counting(), model, (x, y), steps=2, batch_size=16, run_dir=tmp_path, optimizer=lambda g: OWLQN(g))
    with pytest.raises(ValueError, match=r"batch_size: .*got 16 and a data stream"):
        Trainer(Counting(), model, lambda n, g: (x[:n], y[:n]), steps=2, batch_size=16, run_dir=tmp_path,
                optimizer=lambda g: OWLQN(g))


def test_failed_line_search_logs_the_kept_point_and_stops(tmp_path: Path) -> None:
    from ebms.train.owlqn import OWLQN

    x = torch.ones(4, 1, dtype=torch.float64)
    model = nn.Linear(1, 1, bias=False).double()
    with torch.no_grad():
        model.weight.fill_(1.0)

    def objective(m: nn.Module, batch: tuple[Tensor], *, generator: torch.Generator) -> LossOutput:
        return LossOutput((m(batch[0]) ** 2).mean(), {})  # f(w) = w^2

    # lr=10 with a single trial: the step to w = -9 (f = 81) is rejected, w stays at 1 (f = 1)
    trainer = Trainer(objective, model, (x,), steps=5, batch_size=4, run_dir=tmp_path, progress=False, log_every=1,
                      optimizer=lambda g: OWLQN(g, lr=10.0, max_linesearch=1))
    result = trainer.fit()
    assert float(model.weight.detach()) == 1.0
    assert result.step == 1 and result.metrics["loss"] == pytest.approx(1.0)
    assert result.stop_reason is not None and "line search found no decrease at step 1" in result.stop_reason


def test_owlqn_backs_off_from_a_non_finite_trial() -> None:
    from ebms.train.owlqn import OWLQN

    w = nn.Parameter(torch.tensor([0.5], dtype=torch.float64))
    opt = OWLQN([w], lr=4.0)

    def closure() -> Tensor:  # -log(1 - w^2): infinite outside (-1, 1), minimum at 0
        opt.zero_grad()
        loss = -torch.log1p(-(w**2)).sum() if float(w.detach().abs()) < 1 else (w * float("inf")).sum()
        loss.backward()
        return loss.detach()

    for _ in range(20):
        opt.step(closure)
    assert abs(float(w.detach())) < 1e-6 and not opt.info["linesearch_failed"]
