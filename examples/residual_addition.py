"""A residual EBM corrects a weak language model on addition strings (a few minutes on a CPU).

    python examples/residual_addition.py                   # 1-digit sums: exact checks everywhere
    python examples/residual_addition.py --digits 2        # harder: the base gets more sums wrong

Strings are ``a+b=0s`` with uniform operands (``ebms.data.AdditionTask``); the prefix is
``a+b=`` and the continuation the sum digits, so the quality of a sample is exact: the sum is
right or wrong. A small Transformer LM is trained briefly (it gets many sums wrong), a
bidirectional residual energy is trained by conditional NCE against the LM's own samples, and
the joint model ``p_LM(x | c) exp(-E(c, x)) / Z(c)`` is compared with the LM: the share of
correct sums from one base draw and from top-k joint sampling (Algorithm 1 of Deng et al. 2020),
and the perplexity of the true sums — exact for both (``log Z`` by enumerating every
continuation) beside the joint model's [lower, upper] estimate from base samples.
"""

from __future__ import annotations

import argparse
import math

import torch

from ebms.data import AdditionTask, NegativeCache
from ebms.estimators import residual_perplexity
from ebms.models import ResidualLM
from ebms.models.lm import TransformerLM
from ebms.models.residual_lm import exact_log_z
from ebms.nets import TextEnergy
from ebms.objectives import AutoregressiveNLL, ResidualNCE
from ebms.samplers import top_k_joint_sample
from ebms.sequences import Sequences
from ebms.train import Trainer


def correct(task: AdditionTask, prefix: Sequences, cont: Sequences) -> float:
    joined = Sequences.from_lists([p + c for p, c in zip(prefix.tolist(), cont.tolist())])
    return float(task.is_correct(joined).double().mean())


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--digits", type=int, default=1)
    parser.add_argument("--base-steps", type=int, default=150)
    parser.add_argument("--energy-steps", type=int, default=400)
    parser.add_argument("--n", type=int, default=50, help="base draws per prefix for joint sampling")
    parser.add_argument("--train", type=int, default=1500, help="training strings")
    parser.add_argument("--test", type=int, default=500, help="held-out strings")
    args = parser.parse_args(argv)

    task = AdditionTask(args.digits)
    g = torch.Generator().manual_seed(0)
    data = task.sample_ids(args.train + args.test, generator=g)
    train, test = data[:args.train], data[args.train:]
    prefix, cont = task.split(train)
    test_prefix, test_cont = task.split(test)
    K = task.continuation_length

    torch.manual_seed(0)
    lm = TransformerLM(task.vocab_size, d_model=32, num_heads=2, num_layers=2, dim_feedforward=64,
                       max_length=task.length + 1)
    Trainer(AutoregressiveNLL(), lm, (train.tokens, train.lengths), steps=args.base_steps, batch_size=64,
            run_dir=None, progress=False, optimizer=lambda groups: torch.optim.Adam(groups, lr=3e-3)).fit()
    lm.eval()

    model = ResidualLM(lm, TextEnergy(task.vocab_size, kind="transformer", dim=32, layers=2, heads=2), horizon=K)
    cache = NegativeCache.build(lm, prefix, 8, horizon=K, generator=g, progress=False)
    nce = ResidualNCE(nu=1)

    def batches(batch_size: int, gen: torch.Generator) -> tuple[torch.Tensor, ...]:
        i = torch.randint(prefix.batch_size, (batch_size,), generator=gen)
        return nce.pack(prefix[i], cont[i], cache.draw(i, 1, gen))

    fit = Trainer(nce, model, batches, steps=args.energy_steps, batch_size=64, run_dir=None, progress=False,
                  grad_clip=1.0, optimizer=lambda groups: torch.optim.Adam(groups, lr=1e-3)).fit()
    model.eval()
    print(f"NCE after {fit.step} steps: accuracy {fit.metrics['accuracy']:.3f}, "
          f"energy gap {fit.metrics['gap']:.3f}")

    with torch.no_grad():
        base_acc = correct(task, test_prefix, model.sample_base(test_prefix, 1, generator=g))
        joint = top_k_joint_sample(model, test_prefix, args.n, generator=g)
        joint_acc = correct(task, test_prefix, joint.continuations)
        log_z = exact_log_z(model, test_prefix)
        base_lp = model.base_log_prob(test_prefix, test_cont).double()
        joint_lp = base_lp - model.energy(test_prefix, test_cont).double() - log_z
        tokens = test_cont.batch_size * K
        bounds = residual_perplexity(model, test_prefix, test_cont, args.n, generator=g)
    print(f"correct sums: base LM {base_acc:.3f}, joint model (n = {args.n}) {joint_acc:.3f} "
          f"(median ESS {float(joint.ess.median()):.1f})")
    print(f"perplexity of the true sums: base LM {math.exp(-float(base_lp.sum()) / tokens):.3f}, "
          f"joint model {math.exp(-float(joint_lp.sum()) / tokens):.3f} exact, "
          f"[{bounds.lower:.3f}, {bounds.upper:.3f}] from {args.n} base draws per prefix")
    print("examples:", task.decode(Sequences.from_lists(
        [p + c for p, c in zip(test_prefix[:4].tolist(), joint.continuations[:4].tolist())])))


if __name__ == "__main__":
    main()
