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


def _load(monkeypatch: pytest.MonkeyPatch, name: str):
    monkeypatch.syspath_prepend(str(BENCH_DIR))  # the benchmark imports its siblings ``_common``, ``_record``
    spec = importlib.util.spec_from_file_location(name, BENCH_DIR / "jem_mnist.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.slow  # reads MNIST twice and evaluates both runs (~40 s)
def test_jem_mnist_main_compares_both_recipes(monkeypatch: pytest.MonkeyPatch, capsys, tmp_path: Path) -> None:
    from ebms.data.images import load_continuous_images

    try:
        load_continuous_images("mnist", "test", limit=1)
    except (FileNotFoundError, OSError):
        pytest.skip("MNIST is not in $EBMS_DATA")
    module = _load(monkeypatch, "_bench_jem_mnist")
    import _common
    import _record

    monkeypatch.setattr(_record, "RECORDS_DIR", tmp_path / "records")  # never the committed records
    monkeypatch.setattr(_common, "RESULTS_DIR", tmp_path / "results")
    threads = torch.get_num_threads()
    small = ["vision.limit=300", "train.steps=3", "vision.ood_size=40", "data.n_test=80", "eval.n_samples=4",
             "eval.sample_steps=2", "objective.k=2", "objective.buffer_size=128", "vision.channels=[8,16]"]
    argv = ["jem_mnist.py", "--record", "jem_tiny", "--seeds", "3", "--out", str(tmp_path),
            *[a for o in small for a in ("--override", o)]]
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
    record = json.loads((tmp_path / "records" / "jem_tiny.json").read_text())
    assert record["seeds"] == [3] and "run.seed=3" not in record["settings"]["overrides"]
    clf = json.loads((tmp_path / "classifier-mnist" / "eval.json").read_text())
    assert record["figures"]["per_seed"]["seed3"]["classifier"]["accuracy"] == clf["accuracy"]
    assert record["figures"]["comparisons"]["accuracy"]["words"] == "one seed, no interval"


def test_jem_is_compared_with_the_classifier_paired_by_seed(monkeypatch: pytest.MonkeyPatch) -> None:
    module = _load(monkeypatch, "_bench_jem_mnist_cmp")

    def figures(acc: float, ece: float, logp: float, soft: float) -> dict:
        return {"accuracy": acc, "nll": 0.1, "ece_classwise": ece, "ece_top_label": ece, "temperature": 1.0,
                "ece_classwise_scaled": None, "ece_top_label_scaled": None, "seconds": 1.0,
                "auroc": {"fashion-mnist/logp": [logp, logp - 0.01, logp + 0.01],
                          "fashion-mnist/max_softmax": [soft, soft - 0.01, soft + 0.01]}}

    per_seed = {s: {"classifier": figures(0.98 + d, 0.003, 0.92, 0.91), "jem": figures(0.99 + d, 0.006 + d / 10, 0.99, 0.97)}
                for s, d in ((0, 0.0), (1, 0.001), (2, -0.002))}
    cmp = module.compare(per_seed, "fashion-mnist")
    assert cmp["accuracy"]["diffs"] == pytest.approx([0.01, 0.01, 0.01]) and cmp["accuracy"]["seeds"] == [0, 1, 2]
    assert cmp["accuracy"]["words"] == "JEM better"  # a constant positive difference: a zero-width interval above 0
    assert cmp["ece_classwise"]["higher_is_better"] is False and cmp["ece_classwise"]["words"] == "JEM worse"
    assert "ece_classwise_scaled" not in cmp  # not measured (no held-out images): no comparison
    claim = cmp["auroc JEM logp vs classifier max_softmax"]
    assert claim["values_a"] == [0.99] * 3 and claim["values_b"] == [0.91] * 3
    mean = module.means(per_seed)
    assert mean["jem"]["accuracy"] == pytest.approx(0.99 - 0.001 / 3)


def test_fashion_mnist_comparison_without_the_data_is_one_line(monkeypatch: pytest.MonkeyPatch, capsys) -> None:
    module = _load(monkeypatch, "_bench_jem_mnist_fm")
    monkeypatch.setattr(module, "_has_fashion", lambda: False)
    monkeypatch.setattr(module, "_train", lambda *a, **k: pytest.fail("nothing may train without the data"))
    monkeypatch.setattr(sys, "argv", ["jem_mnist.py", "--no-save", "--data", "fashion-mnist"])
    module.main()
    captured = capsys.readouterr()
    summary = json.loads(captured.out.strip().splitlines()[-1])
    assert summary == {"bench": "jem_mnist", "data": "fashion-mnist", "skipped": "Fashion-MNIST not found"}
    assert "--data fashion-mnist needs Fashion-MNIST" in captured.err + captured.out


def test_a_finished_run_of_the_same_overrides_is_read_back_not_trained(monkeypatch: pytest.MonkeyPatch,
                                                                        tmp_path: Path) -> None:
    module = _load(monkeypatch, "_bench_jem_mnist_reuse")
    calls = []

    def fake_main(argv):
        calls.append(argv)
        folder = tmp_path / "jem-mnist"
        folder.mkdir(exist_ok=True)
        (folder / "eval.json").write_text(json.dumps({"accuracy": 0.5 + len(calls)}))
        return 0

    monkeypatch.setattr(module, "ebms_main", fake_main)
    first, _ = module._train("jem-mnist", tmp_path, ["run.seed=4"])
    again, seconds = module._train("jem-mnist", tmp_path, ["run.seed=4"])
    assert len(calls) == 1 and again == first and seconds >= 0  # read back: same overrides
    other, _ = module._train("jem-mnist", tmp_path, ["run.seed=4", "train.steps=5"])
    assert len(calls) == 2 and other["accuracy"] == 2.5  # other overrides: trained again


def test_a_stopped_run_is_resumed_and_its_earlier_segments_counted(monkeypatch: pytest.MonkeyPatch,
                                                                    tmp_path: Path) -> None:
    module = _load(monkeypatch, "_bench_jem_mnist_resume")
    import _common
    run = tmp_path / "jem-mnist"
    (run / "checkpoints").mkdir(parents=True)
    (run / "checkpoints" / "latest").write_text("ckpt-000000504\n")
    # two earlier segments: elapsed_s restarts at each resume; lines without a time are skipped
    lines = [{"step": 50, "time": {"elapsed_s": 10.0}}, {"step": 100, "time": {"elapsed_s": 30.0}},
             {"event": "resume"}, {"step": 150, "time": {"elapsed_s": 5.0}}, {"step": 200, "time": {"elapsed_s": 12.5}}]
    (run / "metrics.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
    assert _common.logged_seconds(run / "metrics.jsonl") == 42.5
    assert _common.logged_seconds(tmp_path / "missing.jsonl") == 0.0
    assert _common.logged_seconds(run / "metrics.jsonl", until=100) == 30.0  # the first segment only
    assert _common.logged_seconds(run / "metrics.jsonl", until=150) == 35.0
    calls = []

    def fake_main(argv):
        calls.append(argv[-1])
        if argv[-1] == "--resume" and "train.steps=5" in argv:
            return 2  # other settings: ebms refuses to resume
        (run / "eval.json").write_text(json.dumps({"accuracy": 0.5}))
        return 0

    monkeypatch.setattr(module, "ebms_main", fake_main)
    _, seconds = module._train("jem-mnist", tmp_path, ["run.seed=4"])
    assert calls == ["--resume"] and seconds >= 42.5
    (run / "bench.json").unlink()
    calls.clear()
    _, seconds = module._train("jem-mnist", tmp_path, ["run.seed=4", "train.steps=5"])
    assert calls == ["--resume", "--overwrite"] and seconds < 42.5  # trained afresh: the old segments not counted
