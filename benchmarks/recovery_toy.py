"""Diffusion recovery likelihood on a 2-D toy whose noise-level energies are exact: is it the sampler or the learning?

Workload (Gao, Song, Poole, Wu & Kingma 2021, *Learning energy-based models by diffusion recovery likelihood*, on
the 2-D toy where every conditional is known):
    data        ``eight_gaussians`` with mode standard deviation 0.1 (modes on the circle of radius 2): 99 % of
                the data lie within 0.3 of a mode, the figure every sampler here is judged by.
    exact       the marginal of ``y_t = sqrt(1 - sigma_{t+1}^2) x_t`` is again a mixture of eight Gaussians (means
                and variance in closed form), so ``E*(y, t) = -log p(y_t)`` is the energy a perfect model would
                learn; ``recovery_sample`` with ``E*`` measures the progressive sampler alone.
    learned     ``NoiseConditionalEnergy(2, T, trunk="mlp", hidden=(128, 128))`` trained by ``RecoveryLikelihood``
                (batch 256, Adam 1e-3, k = 30, b = 0.1 unless the row says otherwise) for ``--steps``.
    schedules   ``flat``: six levels of sigma 0.83 (sqrt(abar_T) = 0.03); ``recipe``: the ``recovery-mnist``
                recipe's 0.2 .. 0.7 (sqrt(abar_T) = 0.43: far from the N(0, I) the sampler starts from);
                ``increasing``: 0.1, 0.2, 0.35, 0.5, 0.7, 0.9, 0.99 (small steps near the data, near pure noise
                at the top: sqrt(abar_T) = 0.05), the shape of the paper's schedule.
    figures     the share of 2,000 samples of ``recovery_sample`` (from N(0, I)) within 0.3 of a mode; for the
                learned models also the share when the chain starts from the true noisy data ``x_t`` at each
                level ``t`` (which level first fails).
    seeds       ``--seeds`` (default 0 1 2) for the learned models: initialisation, data stream, draws.

Run: ``python benchmarks/recovery_toy.py [--steps 10000] [--seeds 0 1 2] [--record NAME] [--quick]``.
"""

from __future__ import annotations

import argparse
import math
import statistics
import time
from typing import Any

import _common as C
import torch
from _record import Recorder
from torch import Tensor, nn

from ebms.data.toy import get_toy
from ebms.nets.noise_conditional import NoiseConditionalEnergy
from ebms.objectives.recovery import RecoveryLikelihood, recovery_sample
from ebms.train import Trainer

NOISE = 0.1
RADIUS = 0.3
SCHEDULES = {"flat": [0.83] * 6, "recipe": [0.2, 0.3, 0.4, 0.5, 0.6, 0.7],
             "increasing": [0.1, 0.2, 0.35, 0.5, 0.7, 0.9, 0.99]}
SAMPLERS = [(30, 0.1), (100, 0.01)]  # (k, b) rows for the exact energies


def mode_means() -> Tensor:
    angles = torch.arange(8, dtype=torch.float64) * (math.pi / 4)
    return 2.0 * torch.stack([angles.cos(), angles.sin()], 1)


def near(x: Tensor) -> float:
    """Share of rows within RADIUS of a mode."""
    return float((torch.cdist(x.double(), mode_means()).min(1).values < RADIUS).double().mean())


class ExactLevelEnergy(nn.Module):
    r""":math:`E^*(y, t) = -\log p(y_t = y)` for the eight-Gaussian data diffused to level ``t`` and scaled by
    :math:`\sqrt{1 - \sigma_{t+1}^2}`: a mixture with means :math:`c_t \sqrt{\bar\alpha_t}\, m_k` and variance
    :math:`c_t^2 (\bar\alpha_t s^2 + 1 - \bar\alpha_t)` per coordinate."""

    def __init__(self, sigmas: list[float]) -> None:
        super().__init__()
        s = torch.tensor(sigmas, dtype=torch.float64)
        self.register_buffer("c2", 1 - s**2)
        self.register_buffer("abar", torch.cat([s.new_ones(1), torch.cumprod(1 - s**2, 0)[:-1]]))
        self.event_shape = (2,)

    def forward(self, y: Tensor, t: Tensor) -> Tensor:
        c2, ab = self.c2[t], self.abar[t]
        mu = (c2 * ab).sqrt()[:, None, None] * mode_means()  # (B, 8, 2)
        var = c2 * (ab * NOISE**2 + 1 - ab)  # (B,)
        d2 = (y.double().unsqueeze(1) - mu).pow(2).sum(-1)
        log_p = torch.logsumexp(-d2 / (2 * var[:, None]), 1) - math.log(8) - torch.log(2 * math.pi * var)
        return (-log_p).to(y.dtype)


def train(sigmas: list[float], seed: int, steps: int, k: int = 30, b: float = 0.1) -> tuple[nn.Module, float]:
    torch.manual_seed(seed)
    net = NoiseConditionalEnergy(2, len(sigmas), trunk="mlp", hidden=(128, 128))
    data = get_toy("eight_gaussians", noise=NOISE).sample(20000, generator=torch.Generator().manual_seed(100 + seed))
    t0 = time.perf_counter()
    Trainer(RecoveryLikelihood(sigmas, k, b=b), net, data, steps=steps, batch_size=256, run_dir=None, seed=seed,
            progress=False, guard=None, optimizer=lambda g: torch.optim.Adam(g, lr=1e-3), log_every=steps).fit()
    return net.eval(), time.perf_counter() - t0


def from_level(model: nn.Module, sigmas: list[float], start: int, seed: int, k: int = 30, b: float = 0.1) -> float:
    """Share near a mode when the progressive chain starts from the true noisy data at level ``start``."""
    obj = RecoveryLikelihood(sigmas, k, b=b)
    g = torch.Generator().manual_seed(1000 + seed)
    x0 = get_toy("eight_gaussians", noise=NOISE).sample(2000, generator=torch.Generator().manual_seed(9))
    ab = float(torch.prod(1 - torch.tensor(sigmas[:start], dtype=torch.float64) ** 2))
    x = math.sqrt(ab) * x0 + math.sqrt(1 - ab) * torch.randn(x0.shape, generator=g)
    for level in range(start - 1, -1, -1):
        t = torch.full((x.shape[0],), level, dtype=torch.long)
        y, _, _ = obj.sample_conditional(model, x, t, generator=g)
        x = y / math.sqrt(1 - sigmas[level] ** 2)
    return near(x)


def sample_share(model: nn.Module, sigmas: list[float], seed: int, k: int = 30, b: float = 0.1) -> float:
    return near(recovery_sample(model, sigmas, 2000, k=k, b=b, event_shape=(2,),
                                generator=torch.Generator().manual_seed(2000 + seed)))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--steps", type=int, default=10000)
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    p.add_argument("--schedules", nargs="+", choices=sorted(SCHEDULES), default=list(SCHEDULES))
    p.add_argument("--record", default=None)
    p.add_argument("--quick", action="store_true", help="200 steps, one seed")
    p.add_argument("--threads", type=int, default=1)
    args = p.parse_args(argv)
    if args.quick:
        args.steps, args.seeds = 200, args.seeds[:1]
    torch.set_num_threads(args.threads)
    rec = Recorder(args.record, seeds=args.seeds, settings={"steps": args.steps, "schedules": {
        n: SCHEDULES[n] for n in args.schedules}, "noise": NOISE, "radius": RADIUS, "batch": 256, "lr": 1e-3,
        "train_k": 30, "train_b": 0.1, "hidden": [128, 128]}) if args.record else None
    x0 = get_toy("eight_gaussians", noise=NOISE).sample(2000, generator=torch.Generator().manual_seed(9))
    fig: dict[str, Any] = {"data_share": near(x0), "exact": {}, "learned": {}}
    rows = [["data", "-", f"{fig['data_share']:.3f}", ""]]
    for name in args.schedules:
        sig = SCHEDULES[name]
        for k, b in SAMPLERS:
            share = sample_share(ExactLevelEnergy(sig), sig, 0, k=k, b=b)
            fig["exact"][f"{name}_k{k}_b{b:g}"] = share
            rows.append([f"{name}: exact energies", f"k={k}, b={b:g}", f"{share:.3f}", ""])
        per_seed = []
        for seed in args.seeds:
            net, wall = train(sig, seed, args.steps)
            levels = {str(t): from_level(net, sig, t, seed) for t in range(len(sig), 0, -1)}
            per_seed.append({"seed": seed, "share": sample_share(net, sig, seed), "from_true_level": levels,
                             "train_s": wall})
        shares = [r["share"] for r in per_seed]
        fig["learned"][name] = {"per_seed": per_seed, "mean": statistics.mean(shares),
                                "min": min(shares), "max": max(shares)}
        top = len(sig)
        rows.append([f"{name}: learned, {args.steps} steps", "k=30, b=0.1",
                     " / ".join(f"{v:.3f}" for v in shares),
                     "from true x_t, t = " + f"{top}..1: " + " ".join(
                         f"{statistics.mean(r['from_true_level'][str(t)] for r in per_seed):.2f}"
                         for t in range(top, 0, -1))])
    print(C.format_table(["model", "sampler", f"share within {RADIUS} of a mode (per seed)", "diagnostic"], rows))
    if rec is not None:
        rec.write(figures=fig, notes="share of recovery_sample draws (from N(0, I)) within 0.3 of a mode of "
                                     "eight_gaussians(noise=0.1); exact = the closed-form noise-level energies; "
                                     "learned = NoiseConditionalEnergy trained by RecoveryLikelihood.")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
