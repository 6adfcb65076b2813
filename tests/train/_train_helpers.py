"""Tiny objectives for the trainer tests (kept here so the tests do not depend on ebms.objectives)."""

from __future__ import annotations

import math
import os
import subprocess
import sys
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ebms.objectives._base import LossOutput, scalar_metrics


def make_data(n: int = 64, seed: int = 0) -> Tensor:
    """Fixed correlated 2-D Gaussian sample ``(n, 2)``."""
    g = torch.Generator().manual_seed(seed)
    z = torch.randn(n, 2, generator=g)
    return z @ torch.tensor([[1.0, 0.0], [0.6, 0.5]]) + torch.tensor([1.0, -2.0])


class GaussianML(nn.Module):
    r"""Exact maximum likelihood for :class:`ebms.nets.GaussianEnergy` (deterministic).

    ``loss = mean E(x) + log Z``, with the energy evaluated in two calls (two
    halves of the batch) to exercise gradient averaging of repeated calls, plus
    an objective parameter ``offset`` pulled towards the (detached) mean data
    energy, so objective parameters are trained too without moving the optimum.
    """

    def __init__(self) -> None:
        super().__init__()
        self.offset = nn.Parameter(torch.zeros(()))

    def forward(self, energy: nn.Module, x: Tensor, *, generator: torch.Generator) -> LossOutput:
        h = x.shape[0] // 2
        e_pos = 0.5 * (energy(x[:h]).mean() + energy(x[h:]).mean())
        loss = e_pos + energy.log_partition() + (self.offset - e_pos.detach()) ** 2
        return LossOutput(loss, scalar_metrics(e_pos=e_pos, offset=self.offset))


class NoisyNCE(nn.Module):
    """Noise-contrastive estimation with a learned log Z, noise from ``generator`` and a buffer.

    Negatives are fresh ``N(0, 2^2 I)`` draws plus the four kept from the
    previous call (``memory``, an empty placeholder buffer until first use), so
    a resume is exact only if the generator state *and* the buffer are restored.
    """

    def __init__(self, scale: float = 2.0) -> None:
        super().__init__()
        self.log_z = nn.Parameter(torch.zeros(()))
        self.scale = scale
        self.register_buffer("memory", torch.zeros(0))

    def log_noise(self, z: Tensor) -> Tensor:
        d = z.shape[1]
        return -0.5 * (z / self.scale).pow(2).sum(-1) - d * math.log(self.scale) - 0.5 * d * math.log(2 * math.pi)

    def forward(self, energy: nn.Module, x: Tensor, *, generator: torch.Generator) -> LossOutput:
        y = self.scale * torch.randn(x.shape, generator=generator, device=x.device)
        if self.memory.numel():
            y = torch.cat([y, self.memory])
        ex, ey = energy(x), energy(y)
        loss = -F.logsigmoid(-ex - self.log_z - self.log_noise(x)).mean() - F.logsigmoid(
            self.log_noise(y) + ey + self.log_z
        ).mean()
        self.memory = y[:4].detach().clone()
        e_pos, e_neg = ex.mean(), ey.mean()
        return LossOutput(loss, scalar_metrics(e_pos=e_pos, e_neg=e_neg, gap=e_neg - e_pos), y.detach())


class FailAt(nn.Module):
    """Wraps an objective; on the listed call numbers (1-based) the loss is NaN (``what="loss"``),
    ``e_pos`` huge (``"metric"``) or the loss 10^4 times larger (``"scale"``).

    Calls are counted across guard restores (a replayed step is a new call), so
    ``calls={25}`` fails once and the replay succeeds.
    """

    def __init__(self, inner: nn.Module, calls, *, what: str = "loss") -> None:
        super().__init__()
        self.inner, self.bad, self.what = inner, calls, what
        self.calls = 0

    def forward(self, energy: nn.Module, x: Tensor, *, generator: torch.Generator) -> LossOutput:
        self.calls += 1
        out = self.inner(energy, x, generator=generator)
        if self.calls not in self.bad:
            return out
        if self.what == "loss":
            return LossOutput(out.loss * float("nan"), out.metrics, out.negatives)
        if self.what == "scale":  # finite, but 10^4 times the usual loss
            return LossOutput(out.loss * 1e4, out.metrics, out.negatives)
        return LossOutput(out.loss, {**out.metrics, "e_pos": 1e9}, out.negatives)


def make_trainer(objective: nn.Module, run_dir, data=None, **kw):
    """A small CPU trainer on :func:`make_data` with Adam(lr=0.05); keywords override."""
    from ebms.nets import GaussianEnergy
    from ebms.train import DistributedContext, Trainer

    opts = dict(
        optimizer=lambda groups: torch.optim.Adam(groups, lr=0.05), steps=40, batch_size=16, run_dir=run_dir,
        seed=0, log_every=5, checkpoint_every=10, progress=False, device="cpu", distributed=DistributedContext(),
    )
    opts.update(kw)
    model = opts.pop("model", None) or GaussianEnergy(2)
    return Trainer(objective, model, make_data() if data is None else data, **opts)


def metric_lines(run_dir) -> list[dict]:
    """Step lines of ``metrics.jsonl`` without wall-clock values (events dropped)."""
    import json
    from pathlib import Path

    out = []
    for line in (Path(run_dir) / "metrics.jsonl").read_text().splitlines():
        rec = json.loads(line)
        if "event" not in rec:
            rec.pop("time")
            out.append(rec)
    return out


def events(run_dir, kind: str | None = None) -> list[dict]:
    import json
    from pathlib import Path

    recs = [json.loads(line) for line in (Path(run_dir) / "metrics.jsonl").read_text().splitlines()]
    return [r for r in recs if "event" in r and (kind is None or r["event"] == kind)]


#: messages of a lost port race between torchrun and other processes on the machine
PORT_RACE = ("EADDRINUSE", "Address already in use", "address already in use")


def run_torchrun(worker: Path, *args: str, nproc: int = 2) -> None:
    """Run ``worker args`` on ``nproc`` gloo ranks (CPU; torchrun --standalone picks a free port).

    One retry, only for a lost port race; a failure asserts with the end of the log.
    """
    drop = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT")
    env = {k: v for k, v in os.environ.items() if k not in drop}
    env["OMP_NUM_THREADS"] = "1"
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", str(nproc),
           str(worker), *args]
    for attempt in range(2):
        proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=240)
        log = proc.stdout[-4000:] + proc.stderr[-4000:]
        if proc.returncode == 0 or attempt == 1 or not any(m in log for m in PORT_RACE):
            break
    assert proc.returncode == 0, log
