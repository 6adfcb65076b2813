"""Memory that cannot be had is one line naming the key that sizes it (issue 23).

Before anything is allocated, the command line estimates what a setting asks for and refuses more
than :func:`ebms.cli.build.available_memory` (:func:`~ebms.cli.build.check_memory`); what the
estimates miss is turned into the same kind of line where it happens
(:func:`~ebms.cli.build.building`), and :func:`ebms.cli.main.user_error` is the net for the rest.
"""

from __future__ import annotations

import subprocess
import sys

import pytest
import torch

import ebms.cli.build as b
from ebms.cli.config import ConfigError, load_config
from ebms.cli.main import user_error

CPU_ALLOC = ("[enforce fail at alloc_cpu.cpp:127] err == 0. DefaultCPUAllocator: can't allocate memory: you tried to "
             "allocate 80000000000 bytes. Error code 12 (Cannot allocate memory)")


@pytest.mark.parametrize("err", [MemoryError(), RuntimeError(CPU_ALLOC), torch.OutOfMemoryError("CUDA out of memory."),
                                 RuntimeError("[enforce fail at alloc_cpu.cpp:117] DefaultCPUAllocator: not enough memory")])
def test_allocation_failures_are_recognised(err: BaseException) -> None:
    assert b.is_allocation_failure(err)


@pytest.mark.parametrize("err", [RuntimeError("a genuine bug"), ValueError("x: expected"), KeyError("memory")])
def test_other_errors_are_not_allocation_failures(err: BaseException) -> None:
    assert not b.is_allocation_failure(err)


def test_available_memory_is_a_positive_byte_count_on_this_machine() -> None:
    free = b.available_memory()
    assert free is not None and 0 < free < 1 << 50


def test_available_memory_respects_an_address_space_limit() -> None:
    # a child process under `ulimit -v` (4 GiB) sees at most the limit
    code = ("import resource; resource.setrlimit(resource.RLIMIT_AS, (4 << 30, resource.RLIM_INFINITY)); "
            "import ebms.cli.build as b; print(b.available_memory())")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    assert 0 <= int(out.stdout) <= 4 << 30


def test_check_memory_refuses_more_than_is_available_naming_the_largest_part(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(b, "available_memory", lambda device="cpu": 1 << 30)
    b.check_memory([("model.hidden", "weights", 1 << 29)], "training")  # fits: nothing happens
    with pytest.raises(ConfigError) as info:
        b.check_memory([("model.hidden", "weights", 1 << 29), ("objective.buffer_size", "the replay buffer", 3 << 30)],
                       "training")
    assert str(info.value) == ("objective.buffer_size: training takes about 3.5 GiB of memory (weights 512.0 MiB "
                               "(model.hidden); the replay buffer 3.0 GiB) and 1.0 GiB is available; lower "
                               "objective.buffer_size")


def test_check_memory_says_nothing_when_the_memory_cannot_be_told(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(b, "available_memory", lambda device="cpu": None)
    b.check_memory([("model.hidden", "weights", 1e30)], "training")


def test_building_turns_an_allocation_failure_into_one_line_naming_the_keys() -> None:
    with pytest.raises(ConfigError) as info, b.building("evaluating on the grid", "eval.resolution", "data.n_test"):
        raise RuntimeError(CPU_ALLOC)
    text = str(info.value)
    assert text.startswith("eval.resolution, data.n_test: out of memory while evaluating on the grid: tried to "
                           "allocate 74.5 GiB")
    assert text.endswith("; lower eval.resolution or data.n_test")
    with pytest.raises(KeyError), b.building("x", "eval.resolution"):  # anything else passes unchanged
        raise KeyError("k")


def test_the_net_turns_any_allocation_failure_into_one_line() -> None:
    line = user_error(RuntimeError(CPU_ALLOC))
    assert line is not None and "\n" not in line and line.startswith("out of memory ([enforce fail")
    assert user_error(MemoryError()) is not None
    assert user_error(RuntimeError("a genuine bug")) is None


def test_the_training_estimate_counts_the_weights_five_times(monkeypatch: pytest.MonkeyPatch) -> None:
    from ebms.cli.continuous import ToyTask

    cfg = load_config(None, ["model.hidden=[1000, 1000]", "objective.kind=cd"])
    data = ToyTask().load(cfg)
    parts = {k: n for k, _, n in ToyTask().training_memory(cfg, data)}
    weights = b.mlp_weights(2, [1000, 1000])
    assert weights == 3 * 1000 + 1001 * 1000 + 1001
    assert parts["model.hidden"] == weights * 4 * 5
    monkeypatch.setattr(b, "available_memory", lambda device="cpu": weights * 4 * 3)
    with pytest.raises(ConfigError, match=r"^model.hidden: training takes about .* \(weights, gradients, Adam's "
                                          r"moments and a snapshot"):
        ToyTask().build_objective(cfg, data)


def test_a_batch_above_the_replay_buffer_or_a_class_share_of_it_is_refused() -> None:
    cfg = load_config(None, ["objective.buffer_size=100", "train.batch_size=16"])
    b.check_replay_buffer(cfg)  # 16 chains of 100 slots
    with pytest.raises(ConfigError, match=r"^train.batch_size: expected at most objective.buffer_size // 10 classes = "
                                          r"10 \(PCD draws each batch's chains from its replay buffer, without "
                                          r"replacement\); got 16"):
        b.check_replay_buffer(cfg, classes=10)
    with pytest.raises(ConfigError, match=r"^train.batch_size: expected at most objective.buffer_size=100 .*; got 101"):
        b.validate_config(load_config(None, ["objective.buffer_size=100", "train.batch_size=101"]))
