"""``benchmarks/trf_recipe_curve.py``: the perplexity at each checkpoint is the model's at that step
(checked against ``load_run`` of the newest), segments and memory logs are read as written, bad flags
are one line."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from _benchmarks import bench
from _tiny_trf_run import tiny_trf_run

ROOT = Path(__file__).resolve().parents[1]
SENTS = ["the cat sat", "a dog ran", "the dog sat on a mat", "a cat ran", "the mat"]


def _bench():
    return bench("trf_recipe_curve")


def test_segments_restart_where_elapsed_restarts(tmp_path: Path) -> None:
    rows = [(100, 10.0), (200, 20.0), (300, 31.0), (400, 4.0), (500, 14.5)]  # resumed after step 300
    (tmp_path / "m.jsonl").write_text("".join(json.dumps({"step": s, "time": {"elapsed_s": e}}) + "\n"
                                              for s, e in rows) + json.dumps({"note": "no step"}) + "\n")
    segs = _bench().segments(tmp_path / "m.jsonl")
    assert segs == [{"first_step": 100, "last_step": 300, "elapsed_s": 31.0},
                    {"first_step": 400, "last_step": 500, "elapsed_s": 14.5}]


def test_memory_sums_pss_per_sampling_time_and_keeps_each_process_peak(tmp_path: Path) -> None:
    log = tmp_path / "mem.log"
    log.write_text("10 1 hwm=2048 rss=1024 pss=1024\n10 2 hwm=1024 rss=1024 pss=512\n"
                   "70 1 hwm=4096 rss=2048 pss=2048\n70 2 hwm=1024 rss=1024 pss=1024\nnoise line\n")
    got = _bench().memory(log)
    assert got == {"peak_summed_pss_mib": 3.0, "samples": 2, "peak_rss_mib_per_process": {"1": 4.0, "2": 1.0}}
    second = tmp_path / "mem2.log"  # a resumed segment's log: other times, other processes
    second.write_text("130 3 hwm=8192 rss=4096 pss=4096\n130 4 hwm=1024 rss=1024 pss=1024\n")
    both = _bench().memory([log, second])
    assert both == {"peak_summed_pss_mib": 5.0, "samples": 3,
                    "peak_rss_mib_per_process": {"1": 4.0, "2": 1.0, "3": 8.0, "4": 1.0},
                    "per_log": [{"log": "mem.log", "peak_summed_pss_mib": 3.0, "samples": 2},
                                {"log": "mem2.log", "peak_summed_pss_mib": 5.0, "samples": 1}]}
    log.write_text("nothing useful\n")
    with pytest.raises(SystemExit, match=r"^--memory-log: .*: no lines 'EPOCH PID hwm=KiB rss=KiB pss=KiB'"):
        _bench().memory(log)


@pytest.mark.slow
def test_the_curve_of_a_tiny_run_ends_at_the_newest_models_perplexity(tmp_path: Path) -> None:
    from ebms.data.text import sentence_batches
    from ebms.metrics import trf_perplexity
    from ebms.runs import load_run

    run = tiny_trf_run(tmp_path, SENTS * 3, ["the cat ran", "a mat"])
    out = subprocess.run([sys.executable, "trf_recipe_curve.py", "--run", str(run), "--no-save", "--train-every", "2"],
                         cwd=ROOT / "benchmarks", capture_output=True, text=True, timeout=600, check=True)
    line = json.loads(out.stdout.strip().splitlines()[-1])
    assert line["bench"] == "trf_ptb_recipe" and line["steps"] == [1, 2]
    r = load_run(run)
    want = trf_perplexity(r.model, sentence_batches(r.data.held_out["test"], 256, shuffle=False)).training.perplexity
    assert line["final_test_ppl"] == pytest.approx(want, rel=1e-4)
    bad = subprocess.run([sys.executable, "trf_recipe_curve.py", "--run", str(run), "--no-save", "--steps", "7"],
                         cwd=ROOT / "benchmarks", capture_output=True, text=True, timeout=600)
    assert bad.returncode != 0 and bad.stderr.strip().splitlines()[-1] == (
        f"--steps: no checkpoint at step(s) [7] in {run}; it has [1, 2]")


@pytest.mark.slow
def test_same_as_finds_a_repeated_run_identical_and_another_seed_different(tmp_path: Path) -> None:
    a = tiny_trf_run(tmp_path, SENTS * 3, ["the cat ran", "a mat"])
    b = tiny_trf_run(tmp_path, SENTS * 3, ["the cat ran", "a mat"], name="again")
    c = tiny_trf_run(tmp_path, SENTS * 3, ["the cat ran", "a mat"], name="seed1", overrides=("run.seed=1",))
    same = _bench().same_as(a, b)
    assert same == {"run": str(b), "logged_steps_compared": 2, "logged_steps_differing": 0,
                    "first_logged_difference": None, "checkpoint_steps_compared": [1, 2],
                    "first_checkpoint_difference": None, "identical": True}
    other = _bench().same_as(a, c)
    assert other["identical"] is False and other["logged_steps_differing"] >= 1
    first = other["first_checkpoint_difference"]
    assert first["step"] == 1 and first["count"] >= 1 and any(k.startswith("model/") for k in first["tensors"])


def test_a_folder_without_a_run_is_one_line(tmp_path: Path) -> None:
    out = subprocess.run([sys.executable, "trf_recipe_curve.py", "--run", str(tmp_path), "--no-save"],
                         cwd=ROOT / "benchmarks", capture_output=True, text=True, timeout=120)
    assert out.returncode != 0 and out.stderr.strip().splitlines() == [
        f"--run: {tmp_path}: no metrics.jsonl (is it an `ebms train` run folder?)"]
