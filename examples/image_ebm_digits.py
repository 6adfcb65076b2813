"""An image EBM from scratch on the 8x8 digits: PCD with a replay buffer, then its chains, the
energies of data, chains and noise, and how well -E tells test digits from noise and flipped digits.

Run:  python examples/image_ebm_digits.py [--out OUT] [--steps 800] [--k 20] [--objective pcd|improved-cd]
      (about three minutes on one busy CPU core; writes OUT/image_ebm_digits_chains.png and
      OUT/image_ebm_digits_energies.png, default runs/examples, which git ignores)

* Data: scikit-learn's digits in [-1, 1] (``ebms.data.load_image_splits``), Gaussian noise 0.01
  on training batches, clipped to the box.
* Energy: ``ConvEnergy(1, 8, channels=(16, 32), groups=8)``; chains: ``SGLD(1.0, 0.01)`` in the box
  ``[-1, 1]`` from a 2,000-slot replay buffer with 5 % restarts; energy penalty 0.1; Adam 1e-4
  with ``betas=(0, 0.999)``. ``--objective improved-cd`` adds the KL term through the last SGLD
  step, the entropy term (0.1) and shifted chain starts, with a reservoir buffer.
* The progress of ``e_pos``, ``e_neg`` and their gap is printed every 100 steps; at the end,
  ``ebms.metrics.evaluate_image_energy`` gives the mean energies and the AUROC of ``-E``.
"""

from __future__ import annotations

import argparse
import time
from functools import partial
from pathlib import Path

import torch

from ebms.data import Augment, load_image_splits, ood_images, random_shift
from ebms.metrics import evaluate_image_energy
from ebms.nets import ConvEnergy
from ebms.objectives import ImprovedCD, PersistentContrastiveDivergence, ReplayBuffer, ReservoirBuffer
from ebms.samplers import SGLD
from ebms.spaces import Box
from ebms.train import Callback, Trainer
from ebms.viz import image_grid, plot_energy_histograms, save_figure


class Progress(Callback):
    """Print the health metrics every ``every`` steps."""

    def __init__(self, every: int) -> None:
        self.every = every

    def on_step_end(self, trainer, step: int, metrics: dict[str, float]) -> None:  # type: ignore[no-untyped-def]
        if step % self.every == 0:
            print(f"step {step:5d}: e_pos {metrics['e_pos']:+.3f}  e_neg {metrics['e_neg']:+.3f}  "
                  f"gap {metrics['gap']:+.3f}  grad_norm {metrics['grad_norm']:.3f}")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", type=Path, default=Path("runs/examples"))
    p.add_argument("--steps", type=int, default=800)
    p.add_argument("--k", type=int, default=20, help="SGLD steps per update")
    p.add_argument("--objective", choices=("pcd", "improved-cd"), default="pcd")
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args()
    data = load_image_splits("digits", seed=args.seed)
    box = Box((1, 8, 8), -1.0, 1.0)
    sampler = SGLD(1.0, 0.01, space=box)
    if args.objective == "pcd":
        objective = PersistentContrastiveDivergence(sampler, ReplayBuffer(2000, box), k=args.k, regularization=0.1)
    else:
        objective = ImprovedCD(sampler, ReservoirBuffer(2000, box), k=args.k, entropy_weight=0.1, regularization=0.1,
                               augment=Augment([partial(random_shift, fill=-1.0)], clamp=(-1.0, 1.0)))

    def batches(n: int, gen: torch.Generator) -> torch.Tensor:
        idx = torch.randint(data.train.shape[0], (n,), generator=gen)
        return (data.train[idx] + 0.01 * torch.randn((n, 1, 8, 8), generator=gen)).clamp(-1, 1)

    torch.manual_seed(args.seed)
    energy = ConvEnergy(1, 8, channels=(16, 32), groups=8)
    t0 = time.perf_counter()
    Trainer(objective, energy, batches, steps=args.steps, batch_size=64, run_dir=None, progress=False, seed=args.seed,
            callbacks=[Progress(max(1, args.steps // 8))],
            optimizer=lambda groups: torch.optim.Adam(groups, lr=1e-4, betas=(0.0, 0.999))).fit()
    print(f"{args.objective}: {args.steps} steps in {time.perf_counter() - t0:.1f} s")
    g = torch.Generator().manual_seed(1)
    ood = {name: ood_images(name, data, 300, generator=g) for name in ("noise", "flip")}
    chains = objective.buffer.data[objective.buffer.filled][:100]
    report = evaluate_image_energy(energy, data.test, chains, ood, n_boot=200, step=args.steps, generator=g)
    for line in report.lines():
        print(line)
    args.out.mkdir(parents=True, exist_ok=True)
    save_figure(image_grid(chains[:64] * 0.5 + 0.5, nrow=8, title=f"{args.objective} chains after {args.steps} steps"),
                args.out / "image_ebm_digits_chains.png")
    with torch.no_grad():
        sets = {"test digits": energy(data.test), "chains": energy(chains), **{k: energy(v) for k, v in ood.items()}}
    save_figure(plot_energy_histograms(sets, title="energies"), args.out / "image_ebm_digits_energies.png")


if __name__ == "__main__":
    main()
