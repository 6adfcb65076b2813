"""``benchmarks/recipe_memory.py``: the process-tree PSS sampler counts a child's private memory once
and a page shared with a forked child once, not twice."""

from __future__ import annotations

import mmap
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from _benchmarks import bench

ROOT = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.skipif(not Path("/proc/self/smaps_rollup").exists(), reason="needs Linux /proc smaps_rollup")


def _bench():
    return bench("recipe_memory")


def test_tree_pss_includes_a_childs_private_memory() -> None:
    rm = _bench()
    before = rm.tree_pss_kib(os.getpid())
    assert before is not None and before > 0
    child = subprocess.Popen([sys.executable, "-c", "b = bytearray(300 << 20); import time; time.sleep(30)"])
    try:
        deadline, grown = time.time() + 20, 0
        while time.time() < deadline and grown < 250 << 10:
            grown = (rm.tree_pss_kib(os.getpid()) or 0) - before
            time.sleep(0.1)
        assert grown >= 250 << 10  # the child's 300 MiB, written, counted in KiB
    finally:
        child.kill()
        child.wait()


def test_a_page_shared_with_a_forked_child_counts_once() -> None:
    rm = _bench()
    shared = bytearray(200 << 20)  # touched: resident in this process
    for i in range(0, len(shared), 4096):
        shared[i] = 1
    alone = rm.tree_pss_kib(os.getpid())
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child only waits: its pages stay shared with the parent
        os.close(w)
        os.read(r, 1)
        os._exit(0)
    try:
        time.sleep(0.3)
        both = rm.tree_pss_kib(os.getpid())
        assert alone is not None and both is not None
        # the 200 MiB are split between the two processes, not counted twice (RSS would add ~200 MiB)
        assert both - alone < 100 << 10
    finally:
        os.close(r)
        os.close(w)
        os.waitpid(pid, 0)
    del shared


def test_peak_tracker_keeps_the_largest_sample() -> None:
    rm = _bench()
    watch = rm.PeakTreePss(period=0.05)
    block = mmap.mmap(-1, 150 << 20)  # fresh pages: a heap block could reuse freed pages already resident
    for i in range(0, len(block), 4096):
        block[i] = 1
    time.sleep(0.3)
    block.close()
    peak = watch.stop()
    assert peak is not None and peak >= (rm.tree_pss_kib(os.getpid()) or 0) + (100 << 10)


def test_release_off_rows_are_named_apart() -> None:
    rm = _bench()
    assert rm.row_name({"recipe": None}) == "baseline"
    assert rm.row_name({"recipe": "trf-ptb", "release": True}) == "trf-ptb"
    assert rm.row_name({"recipe": "trf-ptb", "release": False}) == "trf-ptb (release off)"


def test_the_switch_turns_release_off(monkeypatch: pytest.MonkeyPatch) -> None:
    from ebms._memory import release_free_memory

    monkeypatch.setenv("EBMS_RELEASE_MEMORY", "0")
    assert release_free_memory() is False


@pytest.mark.slow  # trains a tiny run, then resumes a copy of it in a child process
def test_resume_measures_a_copy_of_the_newest_checkpoint_and_leaves_the_run_alone(tmp_path: Path) -> None:
    from ebms.cli.main import main

    assert main(["train", "demo", f"run.out_dir={tmp_path}", "run.name=r", "train.steps=4", "train.checkpoint_every=2",
                 "run.progress=false", "--no-eval"]) == 0
    run = tmp_path / "r"
    before = sorted(p.name for p in (run / "checkpoints").iterdir())
    out = subprocess.run([sys.executable, "recipe_memory.py", "--resume", str(run), "--steps", "2", "--no-eval",
                          "--no-save", "--threads", "1"], cwd=ROOT / "benchmarks", capture_output=True, text=True,
                         timeout=600, check=True)
    row = next(line for line in out.stdout.splitlines() if line.startswith("r (resumed from step 4)"))
    assert "steps=     2" in row and " MiB" in row, out.stdout
    assert sorted(p.name for p in (run / "checkpoints").iterdir()) == before  # the run itself only read
    for argv, message in ((["--resume", str(tmp_path)], f"--resume: {tmp_path} is not a run folder (no config.toml)"),
                          (["--resume", str(run), "--only", "demo"], "--resume: measures one run folder; drop --only")):
        bad = subprocess.run([sys.executable, "recipe_memory.py", *argv, "--no-save"], cwd=ROOT / "benchmarks",
                             capture_output=True, text=True, timeout=600)
        assert bad.returncode == 2 and message in bad.stderr.strip().splitlines()[-1], bad.stderr
