"""Two "nodes" on one machine: two ``torchrun`` launchers of two processes each, meeting at a c10d
rendezvous on ``127.0.0.1`` (the multi-machine launch, with the machines' addresses replaced by
the loopback one), running ``ebms train`` for a continuous and a language task and the library
Trainer (worker: ``_two_node_worker.py``).

What the math says must hold:

* **Two nodes of two = one node of four.** A rank's data, seeds and shard depend on its global
  rank only, and both layouts have global ranks 0..3 over the same gloo collectives, so
  every logged number and every checkpoint tensor are equal.
* **Tensor data: = one process with the global batch** (4 x 8 rows): rank ``r`` takes rows
  ``[8r, 8r + 8)`` of each permuted global batch and gradients are averaged, so the parameters
  equal one process's up to float summation order. (The CLI's tasks draw their batches from
  per-rank generator streams, which equal one process in law only: ``test_train_distributed_trf``.)
* **Resume is exact**: 3 steps, then ``--resume`` to 6, logs the lines of 6 steps in one go.
* **FSDP2** (``train.shard="fsdp"``) gives the loss curve of the default gradient averaging
  up to float rounding, and its checkpoint has the same (whole) tensors.
"""

from __future__ import annotations

import json
import os
import random
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import safetensors.torch
import torch
from _train_helpers import PORT_RACE, GaussianML, make_trainer, metric_lines

from ebms.train.checkpoint import CheckpointStore

WORKER = Path(__file__).with_name("_two_node_worker.py")
WORDS = ["the", "cat", "dog", "sat", "ran", "on", "mat"]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _env() -> dict[str, str]:
    drop = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT", "GROUP_RANK")
    env = {k: v for k, v in os.environ.items() if k not in drop}
    env["OMP_NUM_THREADS"] = "1"
    return env


def launch(commands: list[list[str]], timeout: float = 540) -> tuple[list[int], str]:
    """Start every command at once, wait for all (killing all on a timeout); exit codes and log tails."""
    procs = [subprocess.Popen(c, env=_env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                              start_new_session=True) for c in commands]
    deadline = time.monotonic() + timeout
    logs = []
    for p in procs:
        try:
            logs.append(p.communicate(timeout=max(1.0, deadline - time.monotonic()))[0])
        except subprocess.TimeoutExpired:
            for q in procs:
                q.kill()
            logs.append(p.communicate()[0] + "\n[timed out]")
    for p in procs[len(logs):]:
        logs.append(p.communicate()[0])
    return [p.returncode for p in procs], "\n".join(f"--- launcher {i}\n{log[-3000:]}" for i, log in enumerate(logs))


def torchrun_two_nodes(*args: str) -> float:
    """``args`` on 2 nodes x 2 processes (c10d rendezvous on a free local port); seconds taken. One retry
    for a lost port race."""
    for attempt in range(2):
        port, run_id = _free_port(), f"ebms-{os.getpid()}-{attempt}"
        cmd = [sys.executable, "-m", "torch.distributed.run", "--nnodes", "2", "--nproc_per_node", "2",
               "--rdzv_backend", "c10d", "--rdzv_endpoint", f"127.0.0.1:{port}", "--rdzv_id", run_id,
               "--max_restarts", "0"]
        t0 = time.perf_counter()
        codes, log = launch([[*cmd, *args], [*cmd, *args]])
        if codes == [0, 0] or attempt == 1 or not any(m in log for m in PORT_RACE):
            break
    assert codes == [0, 0], log
    return time.perf_counter() - t0


def torchrun_one_node(*args: str) -> float:
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "4", *args]
    t0 = time.perf_counter()
    codes, log = launch([cmd])
    assert codes == [0], log
    return time.perf_counter() - t0


def _corpus(path: Path, n: int = 120, seed: int = 0) -> None:
    r = random.Random(seed)
    lines = [r.choice(["the cat sat", "the dog ran"]) if r.random() < 0.5
             else " ".join(r.choice(WORDS) for _ in range(r.randint(1, 5))) for _ in range(n)]
    path.write_text("\n".join(lines) + "\n")


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path | float]:
    out = tmp_path_factory.mktemp("two_node")
    _corpus(out / "train.txt")
    nodes = torchrun_two_nodes(str(WORKER), str(out), "nodes")
    one = torchrun_one_node(str(WORKER), str(out), "one")
    print(f"\ntwo nodes x 2 processes: {nodes:.1f} s; one node x 4 processes: {one:.1f} s")
    return {"out": out, "nodes_s": nodes, "one_s": one}


def _weights(run: Path) -> dict[str, torch.Tensor]:
    return dict(CheckpointStore(run / "checkpoints").load().tensors)


@pytest.mark.slow  # two launchers of two processes, then one of four: ~2 min on two busy cores
@pytest.mark.parametrize("task", ["cont", "lang"])
def test_two_nodes_of_two_equal_one_node_of_four(runs: dict, task: str) -> None:
    out = runs["out"]
    two, one = out / task, out / f"{task}_one"
    lines = metric_lines(two)
    assert [r["step"] for r in lines] == list(range(1, 7))
    assert lines == metric_lines(one)
    a, b = _weights(two), _weights(one)
    assert set(a) == set(b) and any(k.startswith("objective@3/") for k in a) == (task == "cont")
    for k in a:
        assert torch.equal(a[k], b[k]), k
    record = json.loads((two / "checkpoints" / "ckpt-000000006.json").read_text())
    assert record["config"]["world_size"] == 4 and len(record["rng"]) == 4
    assert len({json.dumps(r) for r in record["rng"]}) == 4  # four ranks, four streams


@pytest.mark.slow  # the two-node fixture
@pytest.mark.parametrize("task", ["cont", "lang"])
def test_two_node_resume_is_exact(runs: dict, task: str) -> None:
    out = runs["out"]
    whole, split = metric_lines(out / task), metric_lines(out / f"{task}_split")
    assert whole == split
    a, b = _weights(out / task), _weights(out / f"{task}_split")
    for k in a:
        assert torch.equal(a[k], b[k]), k
    assert [e["event"] for e in map(json.loads, (out / f"{task}_split" / "metrics.jsonl").read_text().splitlines())
            if "event" in e].count("resume") == 1


@pytest.mark.slow  # the two-node fixture
def test_two_node_tensor_data_equals_one_process_with_the_global_batch(runs: dict, tmp_path: Path) -> None:
    from _two_node_worker import BATCH, LIB

    got = safetensors.torch.load_file(runs["out"] / "lib.safetensors")
    one = make_trainer(GaussianML(), None, **{**LIB, "batch_size": 4 * BATCH})
    one.fit()
    want = {f"model.{k}": v for k, v in one.model.state_dict().items()}
    assert set(got) == set(want)
    for k in want:
        torch.testing.assert_close(got[k], want[k], rtol=1e-5, atol=1e-6, msg=k)
    # negative control: one process with the per-rank batch ends elsewhere
    other = make_trainer(GaussianML(), None, **LIB)
    other.fit()
    assert float((other.model.mean.detach() - got["model.mean"]).abs().max()) > 1e-3


@pytest.mark.slow  # the two-node fixture
def test_fsdp_run_has_the_loss_curve_and_checkpoint_of_the_default(runs: dict) -> None:
    out = runs["out"]
    ddp, fsdp = metric_lines(out / "cont"), metric_lines(out / "cont_fsdp")
    assert [r["step"] for r in ddp] == [r["step"] for r in fsdp]
    for a, b in zip(ddp, fsdp):
        assert a["loss"] == pytest.approx(b["loss"], rel=1e-5, abs=1e-6), a["step"]
        assert a["grad_norm"] == pytest.approx(b["grad_norm"], rel=1e-4, abs=1e-6), a["step"]
    a, b = _weights(out / "cont"), _weights(out / "cont_fsdp")
    assert set(a) == set(b)
    for k in a:
        torch.testing.assert_close(b[k], a[k], rtol=1e-5, atol=1e-6, msg=k)
