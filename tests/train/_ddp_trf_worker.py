"""Worker for test_train_distributed_trf.py, launched as
``torchrun --standalone --nproc_per_node 2 _ddp_trf_worker.py OUT {det,stat}``; also the shared
configuration.

A TRF language model (unigram + bigram features, vocabulary ids 1..3, lengths 1..4) trained by
:class:`~ebms.objectives.trf_nce.TRFNCE` against a fixed unigram noise LM
(:class:`~ebms.distributions.NGram`). Runs, each rank with ``BATCH`` data sentences per step:

1. ``det``: the noise drawn through :class:`ShardNoise` (rank ``r`` draws shard ``r`` of every
   call); rank 0 saves the final TRF parameters to ``OUT/det.safetensors`` and the metrics log
   goes to ``OUT/det``.
* ``stat``: ``SEEDS`` in-memory runs with the plain noise LM (each rank's draws come from its own
   trainer generator); rank 0 saves each run's final parameters to ``OUT/stat.safetensors``
   (keys ``<seed>/<parameter>``).
"""

from __future__ import annotations

import faulthandler
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import safetensors.torch
import torch
from torch import Tensor

from ebms.distributions import NGram
from ebms.models.trf import TRF, DiscreteFeatures, feature_templates
from ebms.objectives.trf_nce import TRFNCE
from ebms.sequences import Sequences
from ebms.train import Trainer

V, L = 4, 4  # token ids 1..3 (0 is the boundary), lengths 1..4
BATCH = 8  # data sentences per rank per step
SETTINGS: dict[str, Any] = dict(steps=20, seed=5, log_every=2, checkpoint_every=None)
NU = 2.0
LR = 0.1
SEEDS = {"one": range(100, 140), "two": range(200, 240)}  # disjoint seeds: the two groups are independent


def corpus() -> Sequences:
    """64 fixed sentences: lengths cycle through 1..4, tokens skewed towards 1 with a sticky bigram."""
    g = torch.Generator().manual_seed(11)
    n = 64
    lengths = 1 + torch.arange(n) * 3 % L
    tokens = torch.zeros(n, L, dtype=torch.long)
    tokens[:, 0] = torch.multinomial(torch.tensor([0.5, 0.3, 0.2]), n, replacement=True, generator=g) + 1
    for i in range(1, L):
        stay = torch.rand(n, generator=g) < 0.6
        fresh = torch.randint(1, V, (n,), generator=g)
        tokens[:, i] = torch.where(stay, tokens[:, i - 1], fresh)
    tokens = tokens.masked_fill(torch.arange(L) >= lengths[:, None], 0)
    return Sequences(tokens, lengths)


def noise_lm() -> NGram:
    """The fixed noise: the corpus unigram (``</s>`` included), so some draws are longer than ``L``."""
    return NGram.fit(corpus(), V, order=1)


def trf() -> TRF:
    x = corpus()
    feats = DiscreteFeatures.fit(x, V, feature_templates(("w",), order=2), bos=True)
    return TRF.from_corpus(feats, x, vocab_size=V)


class ShardNoise:
    """The noise LM, with draws keyed by ``(call, shard)`` instead of the trainer's generator.

    Call ``t`` (1-based) of :meth:`sample` with ``n`` draws returns, for each shard ``s`` in
    ``shards`` in order, ``n / len(shards)`` draws of ``base`` from a generator seeded by
    ``(seed, t, s)``. One process with ``shards=(0, 1)`` and the global batch thus draws at each
    step exactly the union of what rank 0 (``shards=(0,)``) and rank 1 (``shards=(1,)``) draw.
    ``log_prob`` is the base LM's. (The trainer's generator is not used.)
    """

    def __init__(self, base: NGram, shards: Sequence[int], seed: int = 0) -> None:
        self.base, self.shards, self.seed = base, tuple(shards), seed
        self.calls = 0

    def sample(self, n: int, *, generator: torch.Generator | None = None, **options: Any) -> Sequences:
        self.calls += 1
        per, rest = divmod(n, len(self.shards))
        assert rest == 0, (n, self.shards)
        parts = []
        for s in self.shards:
            g = torch.Generator().manual_seed(self.seed * 1_000_003 + self.calls * 101 + s)
            parts.append(self.base.sample(per, g, **options))
        return Sequences.cat(parts)

    def log_prob(self, x: Sequences) -> Tensor:
        return self.base.log_prob(x)


def trainer(objective: TRFNCE, run_dir: Path | None, *, batch_size: int = BATCH, **kw: Any) -> Trainer:
    x = corpus()
    opts = {**SETTINGS, **kw}
    return Trainer(
        objective, trf(), (x.tokens, x.lengths), optimizer=lambda g: torch.optim.Adam(g, lr=LR),
        batch_size=batch_size, run_dir=run_dir, progress=False, device="cpu", **opts,
    )


def parameters(t: Trainer) -> dict[str, Tensor]:
    return {k: v.detach().clone() for k, v in t.model.named_parameters()}


def main() -> None:
    torch.set_num_threads(1)
    faulthandler.dump_traceback_later(150, exit=True)  # a hang fails the test instead of blocking it
    out, mode = Path(sys.argv[1]), sys.argv[2]
    rank = int(os.environ["RANK"])
    if mode == "det":
        t = trainer(TRFNCE(ShardNoise(noise_lm(), (rank,)), nu=NU), out / "det")  # type: ignore[arg-type]
        t.fit()
        if t.is_main:
            safetensors.torch.save_file(parameters(t), out / "det.safetensors")
        return
    stat: dict[str, Tensor] = {}
    for seed in SEEDS["two"]:
        t = trainer(TRFNCE(noise_lm(), nu=NU), None, seed=seed, guard=None)
        t.fit()
        stat.update({f"{seed}/{k}": v for k, v in parameters(t).items()})
    if t.is_main:
        safetensors.torch.save_file(stat, out / "stat.safetensors")


if __name__ == "__main__":
    main()
