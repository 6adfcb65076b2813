"""Smoke test of ``benchmarks/jem_ssl.py``: its ``main`` runs in-process on tiny settings and ends with its JSON line.

Tiny settings (one label draw, a 16-unit network, a few steps of every stage) run the same code path
as the benchmark (supervised, PCD pre-training + both fine-tunings, JEM) in a few seconds; the figures
themselves are meaningless at this size, so only the record's shape and ranges are checked.
"""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pytest
import torch

BENCH_DIR = Path(__file__).resolve().parents[1] / "benchmarks"
METHODS = ("supervised", "pretrain_frozen", "pretrain_finetune", "joint")


@pytest.fixture
def bench(monkeypatch: pytest.MonkeyPatch):
    pytest.importorskip("sklearn")  # the digits ship inside scikit-learn
    monkeypatch.syspath_prepend(str(BENCH_DIR))  # the benchmark imports its sibling ``_common``
    spec = importlib.util.spec_from_file_location("_bench_jem_ssl", BENCH_DIR / "jem_ssl.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    threads = torch.get_num_threads()
    yield module
    torch.set_num_threads(threads)  # the benchmark's parser sets the thread count


def test_jem_ssl_main_ends_with_one_json_line_holding_every_method(bench, monkeypatch, capsys) -> None:
    argv = ["jem_ssl.py", "--seeds", "0", "--eval", "val", "--hidden", "16", "--sup-steps", "3", "--gen-steps", "4",
            "--warmup", "2", "--k", "2", "--capacity", "64", "--batch-labelled", "8", "--batch-unlabelled", "8",
            "--no-save"]
    monkeypatch.setattr(sys, "argv", argv)
    bench.main()
    lines = capsys.readouterr().out.strip().splitlines()
    summary = json.loads(lines[-1])
    assert summary["bench"] == "jem_ssl" and summary["eval"] == "val" and summary["seeds"] == 1
    for m in METHODS:
        assert 0.0 <= summary[f"{m}_error"] <= 100.0
        assert summary[f"{m}_error_std"] == 0.0  # one label draw
        assert 0.0 <= summary[f"{m}_ece"] <= 100.0
    for m in METHODS[1:]:  # paired by label draw against the supervised baseline
        assert -100.0 <= summary[f"{m}_minus_supervised"] <= 100.0
    assert isinstance(summary["ordering_joint_lt_pretrain_lt_supervised"], bool)
    table = "\n".join(lines[:-1])
    assert "Table 5.2" in table and "CIFAR-10" in table  # the anchor is labelled as another data set
    assert all(bench.LABELS[m] in table for m in METHODS)


def test_jem_ssl_record_compares_the_methods_paired_by_label_draw(bench, monkeypatch, tmp_path) -> None:
    import _common
    import _record

    monkeypatch.setattr(_record, "RECORDS_DIR", tmp_path / "records")  # never the committed records
    monkeypatch.setattr(_common, "RESULTS_DIR", tmp_path / "results")
    argv = ["jem_ssl.py", "--seeds", "0", "1", "--eval", "val", "--hidden", "16", "--sup-steps", "3", "--gen-steps",
            "4", "--warmup", "2", "--k", "2", "--capacity", "64", "--batch-labelled", "8", "--batch-unlabelled", "8",
            "--record", "ssl_tiny"]
    monkeypatch.setattr(sys, "argv", argv)
    bench.main()
    record = json.loads((tmp_path / "records" / "ssl_tiny.json").read_text())
    assert record["seeds"] == [0, 1] and record["settings"]["gen_steps"] == 4
    per_seed, cmp = record["figures"]["per_seed"], record["figures"]["comparisons"]
    assert set(cmp) == {"joint_vs_supervised", "pretrain_finetune_vs_supervised", "joint_vs_pretrain_finetune",
                        "pretrain_frozen_vs_supervised"}
    c = cmp["joint_vs_supervised"]
    assert c["seeds"] == [0, 1] and c["higher_is_better"] is False
    assert c["diffs"] == pytest.approx([per_seed[f"seed{s}"]["joint"]["error"] - per_seed[f"seed{s}"]["supervised"]["error"]
                                        for s in (0, 1)])
    assert c["words"] in ("not significant", "joint (JEM, SSL) better", "joint (JEM, SSL) worse")


def test_joint_batches_put_labelled_rows_first_and_mark_the_rest_unlabelled(bench) -> None:
    g = torch.Generator().manual_seed(0)
    x_l, y_l = torch.zeros(5, 1, 8, 8), torch.arange(5)
    x_all = torch.ones(20, 1, 8, 8)
    x, y = bench.joint_stream(x_l, y_l, x_all, 3, 4, 0.5)(None, g)
    assert x.shape == (7, 1, 8, 8) and y.dtype == torch.long
    assert bool((y[:3] >= 0).all()) and y[3:].tolist() == [-1] * 4
    assert float(x.min()) >= -1.0 and float(x.max()) <= 1.0  # noisy inputs stay in the sampler's box
