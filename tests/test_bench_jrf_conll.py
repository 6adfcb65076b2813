"""Smoke test of ``benchmarks/jrf_conll.py``: its ``main`` runs in-process on tiny settings and ends with its JSON line.

Tiny settings (150 CoNLL-2000 training sentences, an 8-unit network, a few steps of every stage) run the
same code path as the benchmark (supervised CRF, self-training with one round, JRF with a pre-trained
noise LM and zeta initialised from data); the figures are meaningless at this size, so only the record's
shape and ranges are checked. The helpers' properties (disjoint seeded label draw, batch layout, the
zeta initialisation) are checked exactly.
"""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pytest
import torch

from ebms.data.paths import data_root

BENCH_DIR = Path(__file__).resolve().parents[1] / "benchmarks"
METHODS = ("supervised", "self_training", "jrf")
TINY = ["--limit-train", "150", "--limit-test", "40", "--dev", "20", "--steps", "4", "--eval-every", "2",
        "--noise-steps", "3", "--embed", "8", "--hidden", "8", "--noise-hidden", "8", "--batch", "8"]


@pytest.fixture
def bench(monkeypatch: pytest.MonkeyPatch):
    if not (data_root() / "conll2000").exists():
        pytest.skip("CoNLL-2000 is not under the data root ($EBMS_DATA)")
    monkeypatch.syspath_prepend(str(BENCH_DIR))  # the benchmark imports its sibling ``_common``
    spec = importlib.util.spec_from_file_location("_bench_jrf_conll", BENCH_DIR / "jrf_conll.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    threads = torch.get_num_threads()
    yield module
    torch.set_num_threads(threads)  # the benchmark's parser sets the thread count


def test_jrf_conll_main_ends_with_one_json_line_holding_every_method(bench, monkeypatch, capsys) -> None:
    argv = ["jrf_conll.py", *TINY, "--fractions", "0.1", "--seeds", "0", "--thresholds", "0.0", "--rounds", "1",
            "--alphas", "1.0", "--no-save"]
    monkeypatch.setattr(sys, "argv", argv)
    bench.main()
    lines = capsys.readouterr().out.strip().splitlines()
    summary = json.loads(lines[-1])
    assert summary["bench"] == "jrf_conll" and summary["quick"] is False
    s = summary["10%"]
    assert s["seeds"] == 1
    for m in METHODS:
        assert 0.0 <= s[f"{m}_f1"] <= 100.0
        assert s[f"{m}_seconds"] > 0.0
    assert "jrf_rel_gain_pct" in s and "jrf_rel_error_reduction_pct" in s
    table = "\n".join(lines[:-1])
    assert "Table 5.3" in table and all(m in table for m in METHODS)


def test_jrf_conll_writes_a_record_with_a_paired_comparison_per_fraction(bench, monkeypatch, tmp_path) -> None:
    import _common
    import _record

    monkeypatch.setattr(_record, "RECORDS_DIR", tmp_path / "records")  # never the committed records
    monkeypatch.setattr(_common, "RESULTS_DIR", tmp_path / "results")
    argv = ["jrf_conll.py", *TINY, "--fractions", "0.1", "--seeds", "0,1", "--thresholds", "0.0", "--rounds", "1",
            "--alphas", "1.0", "--record", "jrf_tiny"]
    monkeypatch.setattr(sys, "argv", argv)
    bench.main()
    record = json.loads((tmp_path / "records" / "jrf_tiny.json").read_text())
    assert record["name"] == "jrf_tiny" and record["seeds"] == [0, 1] and record["settings"]["steps"] == 4
    runs = record["figures"]["runs"]
    assert set(runs) == {"10%/seed0", "10%/seed1"}
    cmp = record["figures"]["comparisons"]["10%"]["jrf_vs_supervised"]
    assert cmp["seeds"] == [0, 1] and cmp["higher_is_better"] is True
    assert cmp["values_a"] == [runs[k]["jrf"]["test_f1"] for k in ("10%/seed0", "10%/seed1")]
    assert cmp["values_b"] == [runs[k]["supervised"]["test_f1"] for k in ("10%/seed0", "10%/seed1")]
    assert cmp["words"] in ("not significant", "JRF better", "JRF worse")
    assert "self_training_vs_supervised" in record["figures"]["comparisons"]["10%"]
    assert runs["10%/seed0"]["self_training"]["best_run"] in (0, 1)  # 0: the supervised tagger was kept


def test_label_draw_is_seeded_and_disjoint_and_batches_put_labelled_rows_first(bench) -> None:
    from ebms.data.conll import load_conll2000

    data = bench.prepare(load_conll2000("train")[:120], load_conll2000("test")[:10], dev=20)
    il, iu = bench.split_labels(data, 0.1, 3)
    il2, iu2 = bench.split_labels(data, 0.1, 3)
    assert torch.equal(il, il2) and torch.equal(iu, iu2)
    assert il.numel() == 12 and il.numel() + iu.numel() == 100  # 10 % of 120; the 20 held out are in neither
    assert not set(il.tolist()) & set(iu.tolist())
    w, y, n = data["pool"]
    draw = bench.mixed_stream((w[il], y[il], n[il]), (w[iu], n[iu]), 4)
    words, tags, lengths = draw(torch.Generator().manual_seed(0))
    assert words.shape == tags.shape and words.shape[1] == int(lengths.max())
    assert bool((tags[:4] >= 0).all()) and bool((tags[4:] == -1).all())


def test_zeta_initialisation_matches_the_noise_on_average_per_length(bench) -> None:
    from ebms.models.lm import LSTMLM
    from ebms.sequences import Sequences

    torch.manual_seed(0)
    n = torch.tensor([1, 2, 2, 3, 3, 3])  # no sentence of length 4: that zeta comes from the line fit
    words = torch.randint(1, 7, (6, 4)).masked_fill(torch.arange(4) >= n[:, None], 0)
    data = {"vocab_size": 7, "names": ["O", "B-NP"], "max_length": 4}
    args = type("A", (), {"embed": 4, "hidden": 3})()
    model = bench.make_jrf(data, n, args, seed=0).double()
    lm = LSTMLM(7, embedding_dim=4, hidden_size=4, num_layers=1).double()
    bench.init_zeta(model, lm, (words, n), seed=0)
    with torch.no_grad():
        x = Sequences(words[:, :3], n)
        gap = model.log_prob(x) - lm.log_prob(x)  # float64 throughout: the mean per length is 0 up to rounding
    for length in (1, 2, 3):
        assert abs(float(gap[n == length].mean())) < 1e-9  # exact up to float64 rounding
    assert torch.isfinite(model.log_z).all()
