"""``benchmarks/trf_speed.py``: its quick mode runs and ends with its JSON line (slow, needs PTB), its
profile's attribution partitions the wall time exactly, and a missing C++ binary is one line, not a crash."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from _benchmarks import bench

from ebms.data.paths import data_root

ROOT = Path(__file__).resolve().parents[1]


def _bench():
    return bench("trf_speed")


@pytest.mark.slow
def test_trf_speed_quick_mode_ends_with_rates_and_a_profile_that_sums_to_one() -> None:
    if not (data_root() / "ptb").is_dir():
        pytest.skip("PTB is not under the data root ($EBMS_DATA)")
    out = subprocess.run([sys.executable, "trf_speed.py", "--quick", "--no-save", "--profile"],
                         cwd=ROOT / "benchmarks", capture_output=True, text=True, timeout=600, check=True)
    line = json.loads(out.stdout.strip().splitlines()[-1])
    assert line["bench"] == "trf_speed" and line["quick"] is True
    assert line["iterations_per_s"] > 0 and line["cpu_s_per_iteration"] > 0 and line["positions_per_s"] > 0
    assert sum(line["profile"].values()) == pytest.approx(1.0, abs=5e-3)  # shares rounded to 1e-4 each
    if line["implementation"] == "new":  # both implementations ran side by side
        # the old one scores padded class blocks in one process, the new one flat lists in chain blocks on
        # worker processes: different random streams, so the trajectories are not compared here (the flat
        # route's exactness is tested by enumeration in tests/samplers)
        assert line["old_over_new_cpu"] > 0 and isinstance(line["identical_trajectories"], bool)


def test_attribution_gives_self_time_to_the_enclosing_contexts_and_partitions_the_total() -> None:
    ts = _bench()
    prof = ts.Attribution()
    t0 = time.perf_counter()
    with prof.region("augsa"), prof.region("sampler"):
        prof._enter("op", "lookup")  # substitution scoring's lookup
        time.sleep(0.02)
        prof._exit()
        prof._enter("op", "subst_keys")
        time.sleep(0.01)
        prof._exit()
        with prof.region("energy"):  # a whole-sentence energy the sampler asked for
            prof._enter("op", "lookup")
            time.sleep(0.01)
            prof._exit()
    with prof.region("backward"):
        time.sleep(0.01)
    total = time.perf_counter() - t0
    got = prof.shares(total)
    assert set(got["partition"]) == set(ts.PARTS)
    for key in ("partition", "by_purpose"):
        assert sum(got[key].values()) == pytest.approx(1.0, abs=1e-3)
    part, purpose = got["partition"], got["by_purpose"]
    assert part["lookup"] > part["window_keys"] > 0 and part["backward"] > 0
    assert got["lookup_by_context"].keys() == {"augsa/sampler", "augsa/sampler/energy"}
    assert purpose["sentence_energies"] == got["self_by_context"]["augsa/sampler/energy"]  # its lookup included
    assert purpose["sentence_energies"] >= got["lookup_by_context"]["augsa/sampler/energy"] > 0
    assert purpose["substitution_scoring"] == pytest.approx(got["lookup_by_context"]["augsa/sampler"]
                                                            + part["window_keys"], abs=1e-3)


def test_missing_cpp_binary_is_one_line_and_no_figure(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    ts = _bench()
    args = SimpleNamespace(cpp_binary=str(tmp_path / "trf-train"), cpp_args="", cpp_iters=10)
    assert ts.run_cpp(args) is None
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "no executable file there" in err[0] and "8.9" in err[0]


def test_a_missing_state_file_is_one_line_before_any_work(tmp_path: Path) -> None:
    out = subprocess.run([sys.executable, "trf_speed.py", "--quick", "--no-save", "--state", str(tmp_path / "no.safetensors")],
                         cwd=ROOT / "benchmarks", capture_output=True, text=True, timeout=120)
    assert out.returncode != 0 and out.stdout == ""
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("--state: no file") and "no.safetensors" in lines[0]


@pytest.mark.slow
def test_state_loads_a_runs_weights_chains_and_step_exactly_and_refuses_other_features() -> None:
    if not (data_root() / "ptb").is_dir():
        pytest.skip("PTB is not under the data root ($EBMS_DATA)")
    ts = _bench()
    s = ts.build(True, lambda _msg: None)
    a = ts.Run(s, chains=10, batch=10, seed=0)
    for _ in range(3):
        a.step()
    state = {f"model/{k}": v for k, v in a.trf.state_dict().items()}
    state.update({f"objective/{k}": v for k, v in a.objective.state_dict().items()})
    b = ts.Run(s, chains=10, batch=10, seed=0)
    b.load(state)
    assert b.t == int(a.objective.step) == 3
    assert torch.equal(b.feats.weight, a.feats.weight) and torch.equal(b.trf.log_z, a.trf.log_z)
    assert torch.equal(b.objective.chain_tokens, a.objective.chain_tokens)
    assert torch.equal(b.objective.chain_lengths, a.objective.chain_lengths)
    assert b.feats.weight.abs().sum() > 0  # three steps moved the weights: the copy is not of zeros
    state["model/field.keys"] = state["model/field.keys"][:-1]
    with pytest.raises(SystemExit, match="its features are not this benchmark's"):
        b.load(state)
