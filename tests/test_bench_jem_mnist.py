"""Smoke test of ``benchmarks/jem_mnist.py``: both recipes train a few steps on a few MNIST images,
in-process, and the script ends with its JSON line (the figures mean nothing at this size)."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pytest
import torch

BENCH_DIR = Path(__file__).resolve().parents[1] / "benchmarks"


@pytest.mark.slow  # reads MNIST twice and evaluates both runs (~40 s)
def test_jem_mnist_main_compares_both_recipes(monkeypatch: pytest.MonkeyPatch, capsys, tmp_path: Path) -> None:
    from ebms.data.images import load_continuous_images

    try:
        load_continuous_images("mnist", "test", limit=1)
    except (FileNotFoundError, OSError):
        pytest.skip("MNIST is not in $EBMS_DATA")
    monkeypatch.syspath_prepend(str(BENCH_DIR))
    spec = importlib.util.spec_from_file_location("_bench_jem_mnist", BENCH_DIR / "jem_mnist.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    threads = torch.get_num_threads()
    small = ["vision.limit=300", "train.steps=3", "vision.ood_size=40", "data.n_test=80", "eval.n_samples=4",
             "eval.sample_steps=2", "objective.k=2", "objective.buffer_size=128", "vision.channels=[8,16]"]
    argv = ["jem_mnist.py", "--no-save", "--out", str(tmp_path), *[a for o in small for a in ("--override", o)]]
    monkeypatch.setattr(sys, "argv", argv)
    try:
        module.main()
    finally:
        torch.set_num_threads(threads)
    out = capsys.readouterr().out.strip().splitlines()
    summary = json.loads(out[-1])
    assert summary["bench"] == "jem_mnist" and 0 <= summary["jem_accuracy"] <= 1
    assert set(summary["claims"]) == {"accuracy_within_1_point", "lower_classwise_ece", "logp_auroc_above_max_softmax"}
    assert any(line.startswith("accuracy") for line in out)
    for recipe in ("classifier-mnist", "jem-mnist"):
        assert (tmp_path / recipe / "eval.json").is_file()


def test_fashion_mnist_comparison_without_the_data_is_one_line(monkeypatch: pytest.MonkeyPatch, capsys) -> None:
    monkeypatch.syspath_prepend(str(BENCH_DIR))
    spec = importlib.util.spec_from_file_location("_bench_jem_mnist_fm", BENCH_DIR / "jem_mnist.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    monkeypatch.setattr(module, "_has_fashion", lambda: False)
    monkeypatch.setattr(module, "_train", lambda *a, **k: pytest.fail("nothing may train without the data"))
    monkeypatch.setattr(sys, "argv", ["jem_mnist.py", "--no-save", "--data", "fashion-mnist"])
    module.main()
    captured = capsys.readouterr()
    summary = json.loads(captured.out.strip().splitlines()[-1])
    assert summary == {"bench": "jem_mnist", "data": "fashion-mnist", "skipped": "Fashion-MNIST not found"}
    assert "--data fashion-mnist needs Fashion-MNIST" in captured.err + captured.out
