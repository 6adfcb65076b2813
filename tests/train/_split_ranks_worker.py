"""Worker for test_split_ranks.py, launched as ``torchrun --standalone --nproc_per_node 2 _split_ranks_worker.py
OUT``; also the computations' shared inputs (the test runs :func:`compute` in one process).

With the default process group up, each computation shares its pieces between the two ranks: AIS
chains in blocks (:func:`~ebms.estimators.ais_across_ranks`), TRF sentence lengths
(:func:`~ebms.estimators.log_z_per_length_across_ranks`, importance sampling and AIS), and
batches of n-best hypotheses (:func:`~ebms.metrics.rescoring.lm_scores` with ``across_ranks``).
Every rank checks that it got the full result; rank 0 saves it to ``OUT/split.safetensors``.
"""

from __future__ import annotations

import faulthandler
import sys
from pathlib import Path

import safetensors.torch
import torch
import torch.distributed as dist
from torch import Tensor

sys.path.insert(0, str(Path(__file__).parent))
from _ddp_trf_worker import V, corpus, trf  # noqa: E402

from ebms.data.text import Vocabulary  # noqa: E402
from ebms.distributions import NGram  # noqa: E402
from ebms.estimators import (  # noqa: E402
    ais_across_ranks,
    ais_log_z_per_length,
    importance_log_z_per_length,
    linear_betas,
    log_z_per_length_across_ranks,
)
from ebms.metrics.rescoring import evaluate_rescoring, lm_scores, simulate_nbest  # noqa: E402
from ebms.models.lm.lstm import LSTMLM  # noqa: E402
from ebms.models.rbm import BernoulliRBM  # noqa: E402

PRON = {"the": ("DH", "AH"), "a": ("AH",), "cat": ("K", "AE", "T"), "cap": ("K", "AE", "P"), "cut": ("K", "AH", "T"),
        "sat": ("S", "AE", "T"), "set": ("S", "EH", "T"), "we": ("W", "IY"), "he": ("HH", "IY"),
        "went": ("W", "EH", "N", "T"), "want": ("W", "AA", "N", "T"), "home": ("HH", "OW", "M")}
SENTS = [["the", "cat", "sat"], ["we", "went", "home"], ["he", "want", "the", "cap"], ["a", "cat", "set"],
         ["we", "set", "the", "cap"], ["he", "went", "home"], ["the", "cut", "cat", "sat"]] * 3


def compute() -> dict[str, Tensor]:
    """Every figure of the three split computations, as tensors (float64 where they are floats)."""
    torch.manual_seed(0)
    rbm = BernoulliRBM(12, 6, generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        for p in rbm.parameters():
            p.mul_(3.0)
    run = ais_across_ranks(rbm.ais_path(), 48, linear_betas(30), seed=7, blocks=6)
    est = run.estimate
    out = {"ais/log_w": run.log_weights, "ais/samples": run.samples.double(),
           "ais/figures": torch.tensor([est.estimate, est.stderr, est.ess], dtype=torch.float64)}
    model = trf()
    proposal = NGram.fit(corpus(), V, order=1, end=False)
    for name, fn, args in (("is", importance_log_z_per_length, (300,)),
                           ("ais_lz", ais_log_z_per_length, (16, linear_betas(8)))):
        lz = log_z_per_length_across_ranks(fn, model, proposal, *args, seed=11)
        assert lz.lengths == (1, 2, 3, 4), lz.lengths
        out[f"{name}/figures"] = torch.tensor([[e.estimate, e.stderr, e.ess] for e in lz.estimates], dtype=torch.float64)
        assert lz.log_weights is not None
        out[f"{name}/log_w"] = torch.cat(lz.log_weights)
    vocab = Vocabulary.build(SENTS)
    lm = LSTMLM(len(vocab), embedding_dim=8, hidden_size=8, num_layers=1).eval()
    nb, refs = simulate_nbest(SENTS, n=6, seed=3, pronunciations=PRON, noise=1.0)
    scores = lm_scores(nb, lm, vocabulary=vocab, batch_size=5, across_ranks=True)
    res = evaluate_rescoring(nb, refs, scores, lm_weight=0.5, samples=10, generator=torch.Generator().manual_seed(0))
    out["rescore/lm"] = scores
    out["rescore/chosen"] = res.chosen
    out["rescore/errors"] = torch.tensor([res.rescored.errors, res.first_pass.errors])
    return out


def main() -> None:
    torch.set_num_threads(1)
    faulthandler.dump_traceback_later(150, exit=True)  # a hang fails the test instead of blocking it
    dist.init_process_group("gloo")
    out = compute()
    if dist.get_rank() == 0:
        safetensors.torch.save_file({k: v.contiguous() for k, v in out.items()}, Path(sys.argv[1]) / "split.safetensors")
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
