"""Quasi-Newton optimizers in the trainer: one trainer step is one L-BFGS iteration on the batch."""

from __future__ import annotations

from pathlib import Path

import torch
from torch import Tensor, nn

from ebms.objectives._base import LossOutput
from ebms.train import Trainer
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


def test_closure_first_call_reuses_the_steps_evaluation(tmp_path: Path) -> None:
    x, y, _ = _least_squares()
    model = nn.Linear(3, 1, bias=False).double()
    objective = Counting()
    # max_iter=1 and no line search: LBFGS evaluates the closure once per step, which must be the step's own.
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
