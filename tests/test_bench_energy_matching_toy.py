"""benchmarks/energy_matching_toy.py: the --quick mode trains both objectives through the CLI and compares them."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
import energy_matching_toy  # noqa: E402


@pytest.mark.slow  # four 20-step runs, each with its grid evaluation
def test_quick_mode_runs_both_methods_and_prints_the_paired_comparison(tmp_path, capsys):
    assert energy_matching_toy.main(["--quick", "--out", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "energy_matching" in out and "pcd" in out and "test NLL (nats)" in out
    for name in ("pcd-s0", "pcd-s1", "energy_matching-s0", "energy_matching-s1"):
        assert (tmp_path / "quick" / name / "eval.json").exists()
