"""Recovery likelihood on MNIST with and without GroupNorm in the energy: the scale defect, measured.

Workload (issue 26, item 3): ``NoiseConditionalEnergy((1, 28, 28), 6, channels=(16, 32), groups=8)`` with
``normalize=True`` (GroupNorm before the pooling, the former default) and ``normalize=False``, each trained by
``RecoveryLikelihood`` at the authors' protocol (``gao_sigmas(6)``, ``protocol_options("gao", ..., 2e-4)``,
``k = 30``) for ``--steps`` steps (batch 32, Adam ``2e-4``, same seed, same batches). Then, per arm:

* ``progressive_std[t]``: the pixel standard deviation of 64 chains of ``recovery_sample(keep_levels=True)``
  after level ``t`` (from ``N(0, I)`` at the top down to ``t = 0``), beside ``data_std[t]``, that of the
  test images diffused to level ``t`` (``sqrt(abar_t) x_0 + sqrt(1 - abar_t) eps``): a level that cannot
  contract its chain leaves it wider than the data, and the next level's division by ``sqrt(1 - sigma^2)``
  widens it further;
* ``one_level_std[t]``: the same for one conditional draw started at the true noisy ``x_{t+1}``;
* ``energy_vs_scale``: the mean energy at level 0 of 64 test images and of 64 uniform-noise images, each
  scaled by ``c`` in 1, 4, 16 (a scale-aware energy rises with ``c``; a bounded one levels off or falls).

Record ``benchmarks/records/<--record>.json`` (default none). ``--quick``: 20 steps, 16 chains (a smoke test).
Run: ``python benchmarks/recovery_scale.py [--steps 500] [--seed 0] [--record recovery_scale] [--quick]``.
"""

from __future__ import annotations

import argparse
import time
from typing import Any

import _common as C
import torch
from _record import Recorder

from ebms.data.image_sets import load_image_splits
from ebms.nets.noise_conditional import NoiseConditionalEnergy
from ebms.objectives.recovery import RecoveryLikelihood, gao_sigmas, protocol_options, recovery_sample
from ebms.train import Trainer

SCALES = (1.0, 4.0, 16.0)


def measure(net: NoiseConditionalEnergy, sigmas: torch.Tensor, x: torch.Tensor, n: int, seed: int) -> dict[str, Any]:
    options = protocol_options("gao", sigmas, 2e-4, weights=False)
    obj = RecoveryLikelihood(sigmas, 30, **options)
    g = torch.Generator().manual_seed(seed)
    levels = recovery_sample(net, sigmas, n, k=30, **options, event_shape=(1, 28, 28), generator=g, keep_levels=True)
    T, abar = sigmas.numel(), obj.alpha_bar
    x0 = x[:n]
    out: dict[str, Any] = {"progressive_std": {}, "data_std": {}, "one_level_std": {}}
    for t in range(T - 1, -1, -1):
        xt = abar[t].sqrt().float() * x0 + (1 - abar[t]).sqrt().float() * torch.randn(x0.shape, generator=g)
        s = float(sigmas[t])
        noisy = (1 - s**2) ** 0.5 * xt + s * torch.randn(x0.shape, generator=g)
        tt = torch.full((n,), t, dtype=torch.long)
        y, _, _ = obj.sample_conditional(net, noisy, tt, generator=g)
        out["progressive_std"][str(t)] = float(levels[T - t].std())
        out["data_std"][str(t)] = float(xt.std())
        out["one_level_std"][str(t)] = float((y / obj.scales(tt[:1], torch.float64).item()).std())
    noise = torch.rand(x0.shape, generator=g) * 2 - 1
    with torch.no_grad():
        out["energy_vs_scale"] = {f"{name} x{c:g}": float(net(c * v, 0).mean()) for name, v in
                                  (("test", x0), ("noise", noise)) for c in SCALES}
    return out


def _top_down(per_level: dict[str, float]) -> str:
    """Per-level figures, level 5 first, as one table cell."""
    return " ".join(f"{per_level[str(t)]:.2f}" for t in range(5, -1, -1))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--steps", type=int, default=500)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--record", default=None)
    p.add_argument("--quick", action="store_true")
    p.add_argument("--threads", type=int, default=1)
    args = p.parse_args(argv)
    n = 16 if args.quick else 64
    if args.quick:
        args.steps = 20
    torch.set_num_threads(args.threads)
    data = load_image_splits("mnist", limit=2000 if args.quick else None)
    sigmas = gao_sigmas(6)
    rec = Recorder(args.record, seeds=[args.seed], settings={
        "steps": args.steps, "sigmas": sigmas.tolist(), "k": 30, "b": 2e-4, "protocol": "gao", "batch": 32,
        "lr": 2e-4, "channels": [16, 32], "groups": 8, "chains": n}) if args.record else None
    fig: dict[str, Any] = {}
    rows = []
    for normalize in (True, False):
        torch.manual_seed(args.seed)
        net = NoiseConditionalEnergy((1, 28, 28), 6, channels=(16, 32), groups=8, normalize=normalize)
        t0 = time.perf_counter()
        Trainer(RecoveryLikelihood(sigmas, 30, **protocol_options("gao", sigmas, 2e-4)), net, data.train,
                steps=args.steps, batch_size=32, run_dir=None, seed=args.seed, progress=False, guard=None,
                optimizer=lambda g: torch.optim.Adam(g, lr=2e-4), log_every=args.steps).fit()
        name = "groupnorm" if normalize else "no_norm"
        fig[name] = {**measure(net.eval(), sigmas, data.test, n, 1000 + args.seed), "train_s": time.perf_counter() - t0}
        f = fig[name]
        rows.append([name, _top_down(f["progressive_std"]), _top_down(f["one_level_std"]),
                     " ".join(f"{v:.2f}" for v in f["energy_vs_scale"].values())])
    rows.append(["data", _top_down(fig["no_norm"]["data_std"]), "", ""])
    print(C.format_table(["energy", "progressive std, t = 5..0", "one-level std, t = 5..0",
                          "E at level 0: test x1 x4 x16, noise x1 x4 x16"], rows))
    if rec is not None:
        rec.write(figures=fig, notes="Pixel standard deviations of recovery_sample chains after each level (from "
                                     "N(0, I)) and of one conditional draw from the true x_{t+1}, against the "
                                     "data diffused to that level; energies of scaled test and noise images.")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
