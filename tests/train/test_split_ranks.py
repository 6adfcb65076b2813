"""AIS, TRF log Z re-estimation and n-best LM scoring split over two gloo ranks give exactly what one
process computes (worker and inputs: ``_split_ranks_worker.py``).

Each computation is cut into pieces whose randomness is their own (an AIS block's chains, one
sentence length, one batch of hypotheses: seeded from the user's seed and the piece's number, or
deterministic), so a piece computes the same numbers on whichever rank runs it; gathered in piece
order they are the one-process result, bit for bit. The test compares with ``torch.equal``.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import safetensors.torch
import torch
from _split_ranks_worker import compute
from _train_helpers import run_torchrun

from ebms.estimators import ais_across_ranks, importance_log_z_per_length, linear_betas, log_z_per_length_across_ranks

WORKER = Path(__file__).with_name("_split_ranks_worker.py")


@pytest.mark.slow  # two gloo processes: ~10 s of start-up
def test_split_over_two_ranks_equals_one_process(tmp_path: Path) -> None:
    run_torchrun(WORKER, str(tmp_path))
    two = safetensors.torch.load_file(tmp_path / "split.safetensors")
    one = compute()
    assert set(two) == set(one)
    for key in one:
        assert torch.equal(two[key], one[key]), key
    # the computations are not trivial: the weights vary from chain to chain, every hypothesis is scored
    assert float(one["ais/log_w"].std()) > 1e-3 and float(one["is/log_w"].std()) > 1e-2
    assert one["ais/log_w"].shape == (48,) and one["is/log_w"].shape == (4 * 300,)
    assert len(set(one["rescore/lm"].tolist())) > len(one["rescore/lm"]) // 2


def test_ais_blocks_are_seeded_by_block_not_by_rank() -> None:
    from ebms.models.rbm import BernoulliRBM

    rbm = BernoulliRBM(6, 3, generator=torch.Generator().manual_seed(2))
    path, betas = rbm.ais_path(), linear_betas(5)
    a = ais_across_ranks(path, 12, betas, seed=3, blocks=3)
    b = ais_across_ranks(path, 12, betas, seed=3, blocks=3)
    c = ais_across_ranks(path, 12, betas, seed=3, blocks=2)
    assert torch.equal(a.log_weights, b.log_weights) and not torch.equal(a.log_weights, c.log_weights)
    assert a.estimate.settings["blocks"] == 3 and a.estimate.settings["n_chains"] == 12
    with pytest.raises(ValueError, match="n_chains: expected a multiple of blocks=5 with at least 2 chains"):
        ais_across_ranks(path, 12, betas, seed=3, blocks=5)


def test_log_z_across_ranks_equals_per_length_calls_and_refuses_a_generator() -> None:
    from _ddp_trf_worker import V, corpus, trf

    from ebms.distributions import NGram
    from ebms.estimators._ranks import piece_generator

    model, proposal = trf(), NGram.fit(corpus(), V, order=1, end=False)
    got = log_z_per_length_across_ranks(importance_log_z_per_length, model, proposal, 50, seed=4, lengths=[2, 3])
    for n in (2, 3):
        alone = importance_log_z_per_length(model, proposal, 50, lengths=[n], generator=piece_generator(4, n))
        assert got[n].estimate == alone[n].estimate
    with pytest.raises(TypeError, match="generator: each length draws from its own generator"):
        log_z_per_length_across_ranks(importance_log_z_per_length, model, proposal, 50, seed=4,
                                      generator=torch.Generator())
