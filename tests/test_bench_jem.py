"""Smoke test of ``benchmarks/jem.py --quick --no-peers``: it runs without the peer libraries and ends with its JSON line."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.slow
def test_jem_bench_quick_without_peers_times_ebms_against_the_hand_loops() -> None:
    cmd = [sys.executable, "jem.py", "--quick", "--no-peers", "--no-save", "--repeats", "1", "--batches", "8"]
    out = subprocess.run(cmd, cwd=ROOT / "benchmarks", capture_output=True, text=True, timeout=600, check=True)
    lines = out.stdout.strip().splitlines()
    summary = json.loads(lines[-1])
    assert summary["bench"] == "jem" and summary["ratio"] == "their_time / ebms_time"
    assert summary["sgld_b8_best_peer"] == "hand-autograd" and summary["jem_step_best_peer"] == "hand-autograd"
    assert summary["sgld_b8_ratio_vs_best_library"] is None  # no peer library ran
    assert summary["sgld_b8_ratio_vs_best_peer"] > 0 and summary["jem_step_ratio_vs_best_peer"] > 0
    assert any(line.startswith("skipped: ebmkit (--no-peers); torchebm (--no-peers)") for line in lines)
