"""FSDP2 (``Trainer(shard="fsdp")``, ``train.shard = "fsdp"``) on two gloo ranks (worker:
``_fsdp_worker.py``): the loss curve of the default gradient averaging up to float rounding, whole
checkpoints that a one-process model loads, an exact resume, clipping and the divergence guard's
restore through the sharded state, and one-line refusals.

``fully_shard`` runs on CPU with gloo in this torch (2.15), so the whole path is tested here; on
CUDA the same code uses nccl (not run by the suite).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from _fsdp_worker import HIDDEN, energy
from _train_helpers import NoisyNCE, make_trainer, metric_lines, run_torchrun

from ebms.nets import MLPEnergy
from ebms.train.checkpoint import CheckpointStore

WORKER = Path(__file__).with_name("_fsdp_worker.py")


@pytest.fixture(scope="module")
def fsdp_out(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("fsdp")
    run_torchrun(WORKER, str(out))
    return out


def _close(a: list[dict], b: list[dict]) -> None:
    assert [r["step"] for r in a] == [r["step"] for r in b]
    for x, y in zip(a, b):
        for key in ("loss", "grad_norm"):
            assert x[key] == pytest.approx(y[key], rel=1e-5, abs=1e-6), (x["step"], key)
        for key in x["metrics"]:
            assert x["metrics"][key] == pytest.approx(y["metrics"][key], rel=1e-5, abs=1e-6), (x["step"], key)


@pytest.mark.slow  # two gloo processes, eight short runs: ~15 s
@pytest.mark.parametrize("run", ["", "_clip", "_nan"])
def test_fsdp_loss_curve_equals_gradient_averaging(fsdp_out: Path, run: str) -> None:
    ddp, fsdp = metric_lines(fsdp_out / f"ddp{run}"), metric_lines(fsdp_out / f"fsdp{run}")
    _close(ddp, fsdp)
    assert len(ddp) == {"": 12, "_clip": 6, "_nan": 8}[run]
    if run == "_nan":  # the guard did restore and retry on both
        for name in ("ddp_nan", "fsdp_nan"):
            events = [json.loads(x) for x in (fsdp_out / name / "metrics.jsonl").read_text().splitlines()]
            assert [e["event"] for e in events if "event" in e].count("diverged") == 1


@pytest.mark.slow  # the fixture
def test_fsdp_checkpoint_is_whole_and_loads_in_one_process(fsdp_out: Path) -> None:
    a = CheckpointStore(fsdp_out / "ddp" / "checkpoints").load()
    b = CheckpointStore(fsdp_out / "fsdp" / "checkpoints").load()
    assert set(a.tensors) == set(b.tensors) and a.step == b.step == 12
    for k in a.tensors:
        assert a.tensors[k].shape == b.tensors[k].shape, k
        torch.testing.assert_close(b.tensors[k], a.tensors[k], rtol=1e-5, atol=1e-6, msg=k)
    assert any(k.startswith("optimizer/") for k in b.tensors)  # Adam's moments, whole
    model = MLPEnergy(2, hidden=HIDDEN)
    model.load_state_dict(b.weights())
    start = energy()
    x = torch.randn(5, 2)
    assert not torch.allclose(model(x), start(x))  # trained weights, loaded into a plain module


@pytest.mark.slow  # the fixture
def test_fsdp_resume_is_exact(fsdp_out: Path) -> None:
    assert metric_lines(fsdp_out / "fsdp") == metric_lines(fsdp_out / "fsdp_split")


@pytest.mark.slow  # the fixture
def test_fsdp_refuses_ema_and_quasi_newton(fsdp_out: Path) -> None:
    got = json.loads((fsdp_out / "refusals.json").read_text())
    assert got["ema"].startswith("shard: 'fsdp' cannot keep a weight average (ema)")
    assert got["lbfgs"].startswith("shard: 'fsdp' does not drive quasi-Newton optimizers")


def test_shard_is_checked_and_fsdp_needs_several_processes(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=r"shard: expected one of \['ddp', 'fsdp'\]; got 'zero'"):
        make_trainer(NoisyNCE(), tmp_path, model=energy(), shard="zero")
    with pytest.raises(ValueError, match="shard: 'fsdp' shards the energy over the ranks of a torchrun job; "
                                         "this is one process"):
        make_trainer(NoisyNCE(), tmp_path, model=energy(), shard="fsdp")
