"""Worker for test_train_distributed.py, launched as ``torchrun --standalone --nproc_per_node 2 _ddp_worker.py OUT``.

The Trainer creates the gloo process group from torchrun's environment. Runs:

1. ``det``: deterministic objective (energy called twice per step, one objective
   parameter), Tensor data, batch 8 per rank, 30 Adam steps; rank 0 saves the
   final model and objective tensors to ``OUT/det.safetensors``.
2. ``full``: stochastic objective (generator noise + per-rank buffer), 12 steps.
3. ``split``: the same, 6 steps, then a fresh Trainer resumes it to 12 steps.
4. ``stop``: rank 1 alone asks to stop at step 5 (all ranks must stop there), and a
   PeriodicEval returns the rank number (logged as the mean over ranks, 0.5).
"""

from __future__ import annotations

import faulthandler
import sys
from pathlib import Path

import safetensors.torch
import torch

sys.path.insert(0, str(Path(__file__).parent))
from _train_helpers import GaussianML, NoisyNCE, make_data  # noqa: E402

from ebms.nets import GaussianEnergy  # noqa: E402
from ebms.train import Callback, PeriodicEval, Trainer  # noqa: E402

SETTINGS = dict(steps=30, batch_size=8, seed=3, log_every=2, checkpoint_every=4)


class StopOnRank1(Callback):
    def on_step_end(self, trainer: Trainer, step: int, metrics: dict[str, float]) -> None:
        if step == 5 and trainer.dist.rank == 1:
            trainer.request_stop("rank 1 says stop")


def trainer(objective: torch.nn.Module, run_dir: Path, steps: int, **kw: object) -> Trainer:
    opts = {**SETTINGS, "steps": steps, **kw}
    return Trainer(
        objective, GaussianEnergy(2), make_data(), optimizer=lambda g: torch.optim.Adam(g, lr=0.05),
        run_dir=run_dir, progress=False, device="cpu", **opts,
    )


def main() -> None:
    torch.set_num_threads(1)
    faulthandler.dump_traceback_later(120, exit=True)  # a hang fails the test instead of blocking it
    out = Path(sys.argv[1])
    t = trainer(GaussianML(), out / "det", SETTINGS["steps"])
    t.fit()
    if t.is_main:
        state = {f"model.{k}": v for k, v in t.model.state_dict().items()}
        state.update({f"objective.{k}": v for k, v in t.objective.state_dict().items()})
        safetensors.torch.save_file({k: v.contiguous() for k, v in state.items()}, out / "det.safetensors")
    trainer(NoisyNCE(), out / "full", 12).fit()
    trainer(NoisyNCE(), out / "split", 6).fit()
    trainer(NoisyNCE(), out / "split", 12).fit(resume=True)
    evaluate = PeriodicEval(lambda t: {"rank": float(t.dist.rank)}, every=2)
    result = trainer(GaussianML(), out / "stop", 12, callbacks=[evaluate, StopOnRank1()]).fit()
    assert result.step == 5, result


if __name__ == "__main__":
    main()
