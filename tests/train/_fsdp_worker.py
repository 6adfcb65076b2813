"""Worker for test_fsdp.py, launched as ``torchrun --standalone --nproc_per_node 2 _fsdp_worker.py OUT``.

An MLP energy trained by :class:`~_train_helpers.NoisyNCE` (two energy calls per step, a learned
log Z, a per-rank buffer of negatives), 12 Adam steps on two gloo ranks, once per layout:

* ``ddp`` / ``fsdp``: the default gradient averaging, and ``shard="fsdp"`` (FSDP2);
* ``fsdp_split``: ``fsdp`` for 6 steps, then a new trainer resumes it to 12;
* ``ddp_clip`` / ``fsdp_clip``: with ``grad_clip=0.1`` (the norm of sharded gradients);
* ``ddp_nan`` / ``fsdp_nan``: the loss of call 5 is NaN, so the divergence guard restores its
  snapshot (the state-dict round trip of the sharded weights and optimizer) and retries.

Rank 0 writes ``OUT/refusals.json``: the messages of the combinations ``shard="fsdp"`` refuses.
"""

from __future__ import annotations

import faulthandler
import json
import sys
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).parent))
from _train_helpers import FailAt, NoisyNCE, make_data  # noqa: E402

from ebms.nets import MLPEnergy  # noqa: E402
from ebms.train import Trainer  # noqa: E402

SETTINGS: dict[str, Any] = dict(batch_size=8, seed=3, log_every=1, checkpoint_every=4)
HIDDEN = (16, 16)


def energy() -> MLPEnergy:
    torch.manual_seed(0)
    return MLPEnergy(2, hidden=HIDDEN)


def trainer(shard: str, run_dir: Path | None, steps: int, objective: Any = None, **kw: Any) -> Trainer:
    return Trainer(objective or NoisyNCE(), energy(), make_data(), optimizer=kw.pop("optimizer", None) or (
        lambda g: torch.optim.Adam(g, lr=0.05)), steps=steps, run_dir=run_dir, progress=False, device="cpu",
        shard=shard, **{**SETTINGS, **kw})


def main() -> None:
    torch.set_num_threads(1)
    faulthandler.dump_traceback_later(200, exit=True)  # a hang fails the test instead of blocking it
    out = Path(sys.argv[1])
    for shard in ("ddp", "fsdp"):
        trainer(shard, out / shard, 12).fit()
        trainer(shard, out / f"{shard}_clip", 6, grad_clip=0.1).fit()
        trainer(shard, out / f"{shard}_nan", 8, FailAt(NoisyNCE(), {5})).fit()
    trainer("fsdp", out / "fsdp_split", 6).fit()
    t = trainer("fsdp", out / "fsdp_split", 12)
    t.fit(resume=True)
    refusals = {}
    for name, kw in (("ema", {"ema": 0.9}), ("lbfgs", {"batch_size": 32, "optimizer": lambda g: torch.optim.LBFGS(
            [p for group in g for p in group["params"]])})):
        try:
            trainer("fsdp", None, 2, **kw)
        except ValueError as err:
            refusals[name] = str(err)
    if t.is_main:
        (out / "refusals.json").write_text(json.dumps(refusals))


if __name__ == "__main__":
    main()
