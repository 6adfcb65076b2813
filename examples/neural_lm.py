"""Train an LSTM language model on sentences from a known bigram source (a few seconds on a CPU).

    python examples/neural_lm.py                      # LSTM, sentence mode
    python examples/neural_lm.py --model transformer  # the same with a small Transformer

The source is an n-gram law with exact probabilities, so the trained model's held-out
perplexity can be put beside the source's own (the best any model can reach), and the model's
samples, restricted samples and continuation scores can be checked against it by eye.
"""

from __future__ import annotations

import argparse

import torch

from ebms.distributions import NGram
from ebms.models.lm import LSTMLM, TransformerLM, perplexity
from ebms.objectives import AutoregressiveNLL
from ebms.sequences import Sequences
from ebms.train import Trainer

V = 8  # id 0 = <s>/</s>, tokens 1..7


def bigram_source(seed: int) -> NGram:
    """A peaked bigram over tokens 1..7 (sentences of a few tokens)."""
    g = torch.Generator().manual_seed(seed)
    table = torch.randn(V, V, generator=g, dtype=torch.float64) * 1.5
    table[:, 0] = table[:, 1:].max(1).values - 1.0  # </s> a little below each row's likeliest token
    table[0, 0] = -float("inf")  # no empty sentences
    return NGram(V, 2, table.log_softmax(-1))


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", choices=["lstm", "transformer"], default="lstm")
    parser.add_argument("--steps", type=int, default=150)
    args = parser.parse_args(argv)

    source = bigram_source(0)
    train = source.sample(2000, torch.Generator().manual_seed(1), max_length=100)
    held_out = source.sample(500, torch.Generator().manual_seed(2), max_length=100)
    torch.manual_seed(0)
    if args.model == "lstm":
        lm: LSTMLM | TransformerLM = LSTMLM(V, embedding_dim=16, hidden_size=32, num_layers=1, tie_weights=True)
    else:
        lm = TransformerLM(V, d_model=32, num_heads=2, num_layers=2, dim_feedforward=64, max_length=100)

    before = perplexity(lm, [held_out]).perplexity
    trainer = Trainer(AutoregressiveNLL(), lm, (train.tokens, train.lengths), steps=args.steps, batch_size=64,
                      run_dir=None, optimizer=lambda groups: torch.optim.Adam(groups, lr=0.01), progress=False)
    trainer.fit()
    after = perplexity(lm, [held_out])
    best = perplexity(source, [held_out]).perplexity
    print(f"{args.model}: held-out perplexity {before:.2f} -> {after.perplexity:.2f} after {args.steps} steps "
          f"(source {best:.2f}; {after.tokens} tokens with </s>)")

    lm.eval()
    g = torch.Generator().manual_seed(3)
    for name, law in (("exact", {}), ("top-k 2", {"top_k": 2}), ("top-p 0.8, T 0.7", {"top_p": 0.8, "temperature": 0.7})):
        draws = lm.sample(4, g, max_length=20, truncate=True, **law)
        print(f"{name:>17}: " + " | ".join(" ".join(map(str, s)) or "(empty)" for s in draws.tolist()))
    prefix, continuation = Sequences.from_lists([[1, 2]]), Sequences.from_lists([[3]])
    with torch.no_grad():
        model_lp = float(lm.continuation_log_prob(prefix, continuation))
        source_lp = float(source.log_prob(Sequences.from_lists([[1, 2, 3]]))
                          - source.log_prob(Sequences.from_lists([[1, 2]])) + source.table[2, 0])
    print(f"log p(3 </s> | 1 2): model {model_lp:.3f}, source {source_lp:.3f}")


if __name__ == "__main__":
    main()
