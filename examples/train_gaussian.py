"""Train a 2-D Gaussian energy with NCE through the Trainer (a few seconds on a CPU).

    python examples/train_gaussian.py                 # writes runs/train_gaussian/
    python examples/train_gaussian.py                 # again: resumes; it had stopped, so it stays stopped
    torchrun --standalone --nproc_per_node 2 examples/train_gaussian.py   # same script, 2 ranks

The model's normaliser is known in closed form, so the run can be checked against
the maximum-likelihood answer (sample mean and covariance) and the learned log Z
against the true one.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import torch

from ebms.nets import GaussianEnergy
from ebms.objectives import NCE, GaussianNoise
from ebms.train import EarlyStopping, PeriodicEval, Trainer


def make_data(n: int, seed: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    mean = torch.tensor([1.0, -0.5])
    chol = torch.linalg.cholesky(torch.tensor([[1.5, 0.5], [0.5, 1.0]]))
    return mean + torch.randn(n, 2, generator=g) @ chol.T


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--run-dir", default="runs/train_gaussian")
    parser.add_argument("--steps", type=int, default=1500)
    args = parser.parse_args()

    train, held_out = make_data(4096, seed=0), make_data(1024, seed=1)
    model = GaussianEnergy(2)
    objective = NCE(GaussianNoise([0.0, 0.0], 4.0))  # learns log Z as a parameter

    def held_out_nll(trainer: Trainer) -> dict[str, float]:
        with torch.no_grad():
            x = held_out.to(trainer.device)
            return {"nll": float(-trainer.model.log_prob(x).mean())}

    trainer = Trainer(
        objective,
        model,
        train,
        optimizer=lambda groups: torch.optim.Adam(groups, lr=0.02),  # model + objective (log Z) groups
        steps=args.steps,
        batch_size=256,
        run_dir=Path(args.run_dir),
        seed=0,
        log_every=50,
        checkpoint_every=500,
        grad_clip=10.0,
        callbacks=[PeriodicEval(held_out_nll, every=100), EarlyStopping("eval/nll", patience=5, min_delta=1e-4)],
        config={"example": "train_gaussian", "noise_scale": 4.0},
    )
    result = trainer.fit(resume="auto")
    if not trainer.is_main:
        return
    mu = train.mean(0)
    cov = torch.cov(train.T, correction=0)
    print(f"stopped at step {result.step}: {result.stop_reason or 'done'}")
    print(f"last metrics     {({k: round(v, 4) for k, v in result.metrics.items()})}")
    print(f"mean   learned {model.mean.detach().tolist()}  MLE {mu.tolist()}")
    print(f"cov    learned {model.covariance.detach().flatten().tolist()}  MLE {cov.flatten().tolist()}")
    print(f"log Z  learned {objective.log_z.item():.4f}  exact {model.log_partition().item():.4f}")
    print(f"checkpoint {result.checkpoint}")


if __name__ == "__main__":
    main()
