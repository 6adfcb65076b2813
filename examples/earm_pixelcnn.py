"""A PixelCNN on binarised 8x8 digits, trained by cross-entropy and by E-ARM (a minute on a CPU).

    python examples/earm_pixelcnn.py
    python examples/earm_pixelcnn.py --gated --steps 600 --earm-start 400

Both runs start from the same weights and see the same batches. The cross-entropy run trains the
PixelCNN by maximum likelihood for ``--steps`` steps; the E-ARM run does the same until
``--earm-start`` and then adds the E-ARM term (Wang et al. 2022: the network's logits read as an
energy, the negative phase importance-sampled from the model's own raster-order samples). Test
bits/dim are exact for both (a PixelCNN is a normalised model). One seed and a short budget: the
difference between the two runs is within what another seed would change; see
``benchmarks/earm_compare.py`` for seeds and spreads.
"""

from __future__ import annotations

import argparse
import copy

import torch

from ebms.data import binarized_digits
from ebms.models import PixelCNNAdapter, PixelCNNModel
from ebms.nets import PixelCNN
from ebms.objectives import EARM, PixelNLL
from ebms.train import Trainer


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--earm-start", type=int, default=200)
    parser.add_argument("--gated", action="store_true")
    args = parser.parse_args(argv)

    x, _, _ = binarized_digits()
    x = x.view(-1, 1, 8, 8).float()
    perm = torch.randperm(x.shape[0], generator=torch.Generator().manual_seed(0))
    train, test = x[perm[:1500]], x[perm[1500:]]
    independent = train.mean(0).clamp(1e-3, 1 - 1e-3)  # the best factorised model, for reference
    base_bpd = float(-(test * independent.log2() + (1 - test) * (1 - independent).log2()).mean())

    torch.manual_seed(0)
    start = PixelCNNModel(PixelCNN(1, hidden=32, layers=4, gated=args.gated), 8, 8)
    results = {}
    for name in ("cross-entropy", "E-ARM"):
        model = copy.deepcopy(start)
        if name == "cross-entropy":
            objective, target = PixelNLL(), model
        else:  # the E-ARM term on, after a cross-entropy warm start; weight ~ 1 / K (K = 64 pixels)
            objective, target = EARM(weight=1 / 64, start_step=args.earm_start, truncate=2, ema=0.9), \
                PixelCNNAdapter(model)
        Trainer(objective, target, train, steps=args.steps, batch_size=64, run_dir=None, progress=False, seed=0,
                optimizer=lambda groups: torch.optim.Adam(groups, lr=2e-3)).fit()
        model.eval()
        with torch.no_grad():
            results[name] = float(model.bits_per_dim(test).mean())
    print(f"test bits/dim: independent pixels {base_bpd:.4f}, " +
          ", ".join(f"{k} {v:.4f}" for k, v in results.items()) + f" ({args.steps} steps, E-ARM from {args.earm_start})")


if __name__ == "__main__":
    main()
