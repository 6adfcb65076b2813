"""benchmarks/inclusive_nrf_toy.py: the --quick mode trains both objectives through the CLI and compares them; PCD's
figures can come from the energy-matching record of the same runs."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
import inclusive_nrf_toy  # noqa: E402


@pytest.mark.slow  # four 20-step runs, each with its grid evaluation
def test_quick_mode_runs_both_methods_and_prints_the_paired_comparison(tmp_path, capsys):
    assert inclusive_nrf_toy.main(["--quick", "--out", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "inclusive_nrf" in out and "pcd" in out and "test NLL (nats)" in out and "generator -log q(x)" in out
    for name in ("pcd-s0", "pcd-s1", "inclusive_nrf-s0", "inclusive_nrf-s1"):
        assert (tmp_path / "quick" / f"eight_gaussians-{name}" / "eval.json").exists()


def test_pcd_rows_are_taken_only_from_a_record_of_the_same_runs():
    rows = inclusive_nrf_toy._pcd_from("energy_matching_toy", 2000, [0, 1])
    assert rows[0]["nll"] == pytest.approx(2.0956, abs=5e-5)  # retrained here: the same figure
    with pytest.raises(SystemExit, match="differ"):
        inclusive_nrf_toy._pcd_from("energy_matching_toy", 1000, [0])
    with pytest.raises(SystemExit, match="no PCD run for seeds"):
        inclusive_nrf_toy._pcd_from("energy_matching_toy", 2000, [99])
