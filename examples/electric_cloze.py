"""Electric, an energy-based cloze model, trained on sentences from a known bigram (a minute on a CPU).

    python examples/electric_cloze.py
    python examples/electric_cloze.py --steps 600 --mask-rate 0.15

The energy model gives every position an unnormalised conditional ``log p(x_t | x_rest) = -w.h_t``
from one bidirectional pass, trained by noise-contrastive estimation against a two-tower
(left-to-right + right-to-left) cloze model trained at the same time (Clark et al. 2020). Its
one-pass pseudo-log-likelihood then scores sentences: the script counts how often it prefers a
held-out sentence over the same sentence with one token replaced, beside the same count for the
true bigram (the best possible scorer here), and reports how far the model is from
self-normalised (the exact PLL minus the one-pass PLL, averaged per token).
"""

from __future__ import annotations

import argparse

import torch

from ebms.data.text import replace_one_token
from ebms.distributions import NGram
from ebms.models import ElectricCloze
from ebms.nets import TwoTowerCloze
from ebms.objectives import ElectricNCE
from ebms.train import Trainer

V = 8  # id 0 = <s>/</s>, tokens 1..7


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--mask-rate", type=float, default=0.3)
    parser.add_argument("--pairs", type=int, default=300)
    args = parser.parse_args(argv)

    g = torch.Generator().manual_seed(0)
    table = torch.randn(V, V, generator=g, dtype=torch.float64) * 2.0
    table[:, 0] = table[:, 1:].max(1).values - 1.5  # sentences of several tokens
    table[0, 0] = -float("inf")
    source = NGram(V, 2, table.log_softmax(-1))
    train = source.sample(3000, torch.Generator().manual_seed(1), max_length=60)
    test = source.sample(args.pairs, torch.Generator().manual_seed(2), max_length=60)

    torch.manual_seed(0)
    model = ElectricCloze(V, dim=32, layers=2, heads=2, max_length=60,
                          noise=TwoTowerCloze(V, dim=32, layers=1, heads=2))
    fit = Trainer(ElectricNCE(mask_rate=args.mask_rate), model, (train.tokens, train.lengths), steps=args.steps,
                  batch_size=64, run_dir=None, progress=False,
                  optimizer=lambda groups: torch.optim.Adam(groups, lr=2e-3)).fit()
    print(f"after {fit.step} steps: loss_nce {fit.metrics['loss_nce']:.3f}, loss_noise {fit.metrics['loss_noise']:.3f}"
          f" nats, real/replaced accuracy {fit.metrics['accuracy']:.3f}")

    bad = replace_one_token(test, V, generator=g)  # one token of each held-out sentence replaced
    model.eval()
    with torch.no_grad():
        electric = float((model.pseudo_log_likelihood(test) > model.pseudo_log_likelihood(bad)).double().mean())
        truth = float((source.log_prob(test) > source.log_prob(bad)).double().mean())
        gap = (model.exact_pll(test) - model.pseudo_log_likelihood(test).double()).sum() / test.lengths.sum()
    print(f"prefers the true sentence over a one-token corruption: Electric {electric:.3f}, "
          f"the true bigram {truth:.3f} ({test.batch_size} pairs)")
    print(f"exact PLL minus one-pass PLL: {float(gap):.3f} nats per token (0 when self-normalised)")


if __name__ == "__main__":
    main()
