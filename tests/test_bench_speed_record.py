"""The committed record of a side-by-side benchmark (``benchmarks/_speed_record.py``): summaries only,
the run's settings and machine, and no record from a ``--quick`` or ``--no-save`` run."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
import _speed_record as SR  # noqa: E402


def _run_record() -> dict:
    return {"bench": "toy", "quick": False, "machine": {"peers": {"ebmkit": "0.16.0"}},
            "workload": {"steps": 200, "dims": [2, 784]},
            "results": [{"dim": 2, "rows": {"ebms": {"median_s": 0.12, "all_s": [0.11, 0.12, 0.13],
                                                      "speedup_of_ebms": 1.0}}}]}


def test_summarise_drops_every_per_repeat_list_and_keeps_the_summaries() -> None:
    got = SR.summarise(_run_record())
    assert got["results"][0]["rows"]["ebms"] == {"median_s": 0.12, "speedup_of_ebms": 1.0}
    assert got["workload"] == {"steps": 200, "dims": [2, 784]}


def test_a_full_run_writes_settings_and_figures_without_the_repeats(tmp_path: Path) -> None:
    args = argparse.Namespace(quick=False, no_save=False, repeats=None)
    rec = SR.start("toy", args, seeds=(0,))
    path = SR.finish(rec, args, _run_record(), notes="toy", directory=tmp_path)
    assert path == tmp_path / "toy.json"
    data = json.loads(path.read_text())
    assert data["settings"]["workload"] == {"steps": 200, "dims": [2, 784]}
    assert data["settings"]["peers"] == {"ebmkit": "0.16.0"}
    assert set(data["figures"]) == {"results"}  # bench, quick, machine, workload are header/settings
    assert "all_s" not in json.dumps(data["figures"])
    for key in ("command", "commit", "cpu", "threads", "torch", "wall_s", "peak_rss_mb", "load_avg_1min_at_start"):
        assert key in data


@pytest.mark.parametrize("flag", ["quick", "no_save"])
def test_quick_and_no_save_runs_write_no_record(tmp_path: Path, flag: str) -> None:
    args = argparse.Namespace(quick=flag == "quick", no_save=flag == "no_save", repeats=None)
    rec = SR.start("toy", args)
    assert SR.finish(rec, args, _run_record(), directory=tmp_path) is None
    assert list(tmp_path.iterdir()) == []
