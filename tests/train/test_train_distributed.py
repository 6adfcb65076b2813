"""Data-parallel training: two gloo ranks under torchrun equal one process with the global batch."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import safetensors.torch
import torch
from _train_helpers import GaussianML, events, make_trainer, metric_lines, run_torchrun

from ebms.train import DistributedContext

WORKER = Path(__file__).with_name("_ddp_worker.py")



@pytest.fixture(scope="module")
def ddp_out(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Run the two-rank worker once (CPU, gloo, torchrun --standalone picks a free port)."""
    out = tmp_path_factory.mktemp("ddp")
    run_torchrun(WORKER, str(out))
    return out


@pytest.mark.slow  # two gloo processes: ~8 s of set-up
def test_two_gloo_ranks_match_one_process_with_double_batch(ddp_out: Path, tmp_path: Path) -> None:
    # Rank r of 2 takes rows [8r, 8r+8) of each permuted global batch of 16, so with
    # gradients averaged the run equals one process with batch 16, up to float32
    # summation order (observed max difference 4e-8 after 30 Adam steps).
    from _ddp_worker import SETTINGS

    t = make_trainer(GaussianML(), tmp_path, **{**SETTINGS, "batch_size": 2 * SETTINGS["batch_size"]})
    t.fit()
    got = safetensors.torch.load_file(ddp_out / "det.safetensors")
    want = {f"model.{k}": v for k, v in t.model.state_dict().items()}
    want.update({f"objective.{k}": v for k, v in t.objective.state_dict().items()})
    assert set(got) == set(want)
    for k in want:
        torch.testing.assert_close(got[k], want[k], rtol=1e-5, atol=1e-6, msg=k)
    assert metric_lines(ddp_out / "det")[-1]["step"] == SETTINGS["steps"]
    # the run moved away from the start, and the shard layout matters: one process
    # with the per-rank batch (8) ends somewhere else (negative control)
    assert float(want["model.mean"].abs().max()) > 0.5
    other = make_trainer(GaussianML(), tmp_path / "b8", **SETTINGS)
    other.fit()
    assert float((other.model.mean.detach() - got["model.mean"]).abs().max()) > 1e-3


@pytest.mark.slow  # the two-rank torchrun fixture: ~13 s of set-up
def test_distributed_resume_is_exact(ddp_out: Path) -> None:
    full, split = metric_lines(ddp_out / "full"), metric_lines(ddp_out / "split")
    assert [r["step"] for r in full] == list(range(2, 13, 2))
    assert full == split


@pytest.mark.slow  # the two-rank torchrun fixture: ~13 s of set-up
def test_distributed_checkpoint_holds_every_ranks_rng_and_buffers(ddp_out: Path) -> None:
    record = json.loads((ddp_out / "split" / "checkpoints" / "ckpt-000000012.json").read_text())
    assert record["config"]["world_size"] == 2
    assert len(record["rng"]) == 2 and record["rng"][0]["generator"] != record["rng"][1]["generator"]
    assert record["rank_buffers"] == ["memory"]
    assert "objective@1/memory" in record["weights"]["keys"]


@pytest.mark.slow  # the two-rank torchrun fixture: ~13 s of set-up
def test_ranks_agree_on_stopping_and_eval_values(ddp_out: Path) -> None:
    assert [e["values"] for e in events(ddp_out / "stop", "eval")] == [{"rank": 0.5}, {"rank": 0.5}]
    (stop,) = events(ddp_out / "stop", "stop")
    assert stop["step"] == 5 and stop["reason"] == "stop requested on another rank"
    assert (ddp_out / "stop" / "checkpoints" / "latest").read_text().strip() == "ckpt-000000005.json"


def test_context_from_env_reads_torchrun_variables() -> None:
    ctx = DistributedContext.from_env({"RANK": "1", "WORLD_SIZE": "4", "LOCAL_RANK": "1"})
    assert (ctx.rank, ctx.world_size, ctx.local_rank, ctx.enabled, ctx.is_main) == (1, 4, 1, True, False)
    single = DistributedContext.from_env({})
    assert (single.rank, single.world_size, single.enabled, single.is_main) == (0, 1, False, True)


def test_context_rejects_bad_environment_with_message() -> None:
    with pytest.raises(ValueError, match=r"WORLD_SIZE: expected an integer environment variable; got 'two'"):
        DistributedContext.from_env({"WORLD_SIZE": "two"})
    with pytest.raises(ValueError, match=r"0 <= rank < world_size.*got rank=2, world_size=2"):
        DistributedContext(rank=2, world_size=2)


def test_single_process_collectives_are_identities() -> None:
    ctx = DistributedContext()
    p = torch.nn.Parameter(torch.ones(3))
    p.grad = torch.full((3,), 2.0)
    ctx.average_gradients([p])
    assert torch.equal(p.grad, torch.full((3,), 2.0))
    assert ctx.gather_bytes(b"abc", torch.device("cpu")) == [b"abc"]
    v = torch.arange(3.0)
    assert ctx.mean(v) is v
    assert ctx.default_device().type in ("cpu", "cuda")
