"""JEM against the same network trained as a plain classifier, on the 8x8 digits: accuracy,
calibration and out-of-distribution detection side by side, a reliability diagram and JEM's chains.

Run:  python examples/jem_digits.py [--out OUT] [--steps 600] [--k 10] [--seed 0]
      (about 20 seconds on one CPU core; writes OUT/jem_digits_reliability.png and
      OUT/jem_digits_chains.png, default runs/examples, which git ignores)

* Data: scikit-learn's digits in [-1, 1] (``ebms.data.load_image_splits``), 10 % of the training
  images held out for temperature scaling, Gaussian noise 0.03 on training batches.
* Both models: ``JEM(MLPClassifier((1, 8, 8), 10, hidden=(128, 128)))`` from the same seed, Adam
  1e-3, batch 64, ``--steps`` steps. The classifier trains by ``CrossEntropy``; JEM by
  ``JEMObjective``: cross-entropy plus 0.3 x PCD on ``E(x) = -logsumexp f(x)`` (SGLD, ``--k``
  steps, a replay buffer restarted from class-conditional Gaussians, energy penalty 0.1).
* Figures: ``ebms.metrics.evaluate_image_classifier`` (accuracy, class-wise and top-label ECE, the
  same after temperature scaling, AUROC of ``logp``/``max_softmax`` against noise, upside-down and
  turned digits).
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import torch

from ebms.data import load_image_splits, ood_images
from ebms.distributions import ClassConditionalGaussian
from ebms.metrics import evaluate_image_classifier
from ebms.models import JEM
from ebms.nets import MLPClassifier
from ebms.objectives import CrossEntropy, JEMObjective, ReplayBuffer
from ebms.samplers import SGLD
from ebms.spaces import Box
from ebms.train import Trainer
from ebms.viz import image_grid, plot_reliability, save_figure


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", type=Path, default=Path("runs/examples"))
    p.add_argument("--steps", type=int, default=600)
    p.add_argument("--k", type=int, default=10, help="SGLD steps per JEM update")
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args()
    data = load_image_splits("digits", seed=args.seed)
    g = torch.Generator().manual_seed(args.seed)

    def batches(n: int, gen: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
        idx = torch.randint(data.train.shape[0], (n,), generator=gen)
        x = (data.train[idx] + 0.03 * torch.randn((n, 1, 8, 8), generator=gen)).clamp(-1, 1)
        return x, data.train_targets[idx]

    box = Box((1, 8, 8), -1.0, 1.0)
    start = ClassConditionalGaussian.fit(data.train, data.train_targets)
    objectives = {
        "classifier": CrossEntropy(),
        "JEM": JEMObjective(SGLD(1.0, 0.01, space=box), ReplayBuffer(2000, box, init=start.sample), k=args.k,
                            generative_weight=0.3, warmup_steps=args.steps // 6, regularization=0.1),
    }
    ood = {name: ood_images(name, data, 300, generator=g) for name in ("noise", "flip", "rotate")}
    reports, models = {}, {}
    for name, objective in objectives.items():
        torch.manual_seed(args.seed)
        model = JEM(MLPClassifier((1, 8, 8), 10, hidden=(128, 128)), 10)
        t0 = time.perf_counter()
        Trainer(objective, model, batches, steps=args.steps, batch_size=64, run_dir=None, progress=False,
                seed=args.seed, optimizer=lambda groups: torch.optim.Adam(groups, lr=1e-3)).fit()
        model.eval()
        reports[name] = evaluate_image_classifier(model.logits, data.test, data.test_targets, data.val,
                                                  data.val_targets, ood, n_ood=300, scores=("logp", "max_softmax"),
                                                  n_boot=200, step=args.steps, generator=torch.Generator().manual_seed(1))
        models[name] = model
        print(f"{name}: trained {args.steps} steps in {time.perf_counter() - t0:.1f} s")
        for line in reports[name].lines():
            print("  " + line)
    args.out.mkdir(parents=True, exist_ok=True)
    fig = plot_reliability(torch.softmax(models["JEM"].logits(data.test).detach(), -1), data.test_targets,
                           n_bins=10, title="JEM on the digits (test)")
    save_figure(fig, args.out / "jem_digits_reliability.png")
    buffer = objectives["JEM"].buffer
    chains = buffer.data[buffer.filled][:64]
    save_figure(image_grid(chains * 0.5 + 0.5, nrow=8, title="JEM's persistent chains"),
                args.out / "jem_digits_chains.png")
    c, j = reports["classifier"], reports["JEM"]
    print(f"accuracy {c.accuracy:.4f} vs {j.accuracy:.4f}; class-wise ECE {c.ece_classwise:.4f} vs "
          f"{j.ece_classwise:.4f}; AUROC noise (logp) {c.auroc('noise', 'logp'):.3f} vs {j.auroc('noise', 'logp'):.3f}")


if __name__ == "__main__":
    main()
