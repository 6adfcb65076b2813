"""Smoke test of ``benchmarks/calibrated_text.py``: tiny settings on a made-up CSV run every arm and write a record
whose shape is checked, with the one exact property of the figures: temperature scaling never changes accuracy."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from _benchmarks import bench


@pytest.mark.slow
@pytest.mark.filterwarnings("ignore:TemperatureScaling.fit")  # 20 dev rows of a one-epoch model
def test_tiny_run_writes_a_record(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    module = bench("calibrated_text")
    record_module = bench("_record")
    monkeypatch.setattr(record_module, "RECORDS_DIR", tmp_path)
    words = {"positive": "good", "negative": "bad", "neutral": "the"}
    rows = ["sentiment,text"] + [f"{c},{w} day {i} {'it' if i % 2 else w}" for i, (c, w) in
                                 enumerate(list(words.items()) * 40)]
    data = tmp_path / "t.csv"
    data.write_text("\n".join(rows) + "\n")
    threads = torch.get_num_threads()
    try:
        module.main(["--data", str(data), "--seeds", "0", "1", "--train", "60", "--dev", "20", "--test", "30",
                     "--epochs", "1", "--noise-epochs", "1", "--batch", "16", "--hidden", "8", "--embedding", "8",
                     "--noise-dim", "8", "--nu", "2", "--record", "tiny"])
    finally:
        torch.set_num_threads(threads)
    path = tmp_path / "tiny.json"
    assert path.stat().st_size < 64_000
    rec = json.loads(path.read_text())
    fig = rec["figures"]
    assert fig["seeds_done"] == [0, 1] and rec["seeds"] == [0, 1]
    assert set(fig["summary"]) == {"ce", "scalar", "hidden", "sharp_hidden", "ce+ts", "scalar+ts", "hidden+ts",
                                   "sharp_hidden+ts"}
    for arm in ("ce", "scalar", "hidden", "sharp_hidden"):
        assert fig["summary"][f"{arm}+ts"]["accuracy"] == fig["summary"][arm]["accuracy"]
        for s in ("0", "1"):
            assert 0 <= fig["per_seed"][s][arm]["ece"] <= 100
    for name in ("sharp_hidden_vs_ce_ece_classwise", "scalar_vs_ce+ts_accuracy", "ce+ts_vs_ce_ece_classwise"):
        c = fig["comparisons"][name]
        assert c["ci_low"] <= c["mean_diff"] <= c["ci_high"] and c["words"]
