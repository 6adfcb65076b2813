"""``benchmarks/rescoring_jrf.py``: its helpers exactly, and (slow) its ``main`` on tiny settings writing a record.

The helpers: the word ids (by count, digits as ``0``, ``<unk>`` for the rest); the batches (as many tagged as
untagged rows, the untagged ones all ``-1``, trimmed to the longest); the field scorer (``log pi_l - E(x) -
log_z[l - 1]``, the floor outside lengths ``1..L``). The smoke run checks the record's shape: every system of every
seed, and each comparison's values are the per-seed WERs of its two systems.
"""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pytest
import torch

from ebms.data.paths import data_root
from ebms.models.jrf import JRF
from ebms.sequences import Sequences

BENCH_DIR = Path(__file__).resolve().parents[1] / "benchmarks"


@pytest.fixture
def bench(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.syspath_prepend(str(BENCH_DIR))  # the benchmark imports its sibling ``_common``
    spec = importlib.util.spec_from_file_location("_bench_rescoring_jrf", BENCH_DIR / "rescoring_jrf.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    threads = torch.get_num_threads()
    yield module
    torch.set_num_threads(threads)  # the benchmark's parser sets the thread count


def test_word_ids_by_count_with_digits_normalised(bench) -> None:
    sents = [[bench.normalise(w) for w in s] for s in (["The", "cat", "12"], ["the", "dog", "34"], ["the"])]
    vocab = bench.Words(sents, min_count=2)
    assert vocab.words == ["</s>", "<unk>", "the", "00"]
    assert vocab.known(["the", "cat"]) == ["the", "<unk>"]
    x = vocab.ids([["the", "00", "cat"], ["00"]])
    assert x.tokens.tolist() == [[2, 3, 1], [3, 0, 0]] and x.lengths.tolist() == [3, 1]


def test_batches_hold_as_many_untagged_rows_as_tagged_ones(bench) -> None:
    x = Sequences.from_lists([[2, 3], [4], [2, 2, 2], [5, 6]])
    y = torch.tensor([[1, 2, 0], [3, 0, 0], [1, 1, 1], [2, 2, 0]])
    words, tags, lengths = bench.stream(x, y, 3)(torch.Generator().manual_seed(0))
    assert words.shape == tags.shape == (6, int(lengths.max()))
    assert bool((tags[3:] == -1).all())
    rows = [next(i for i in range(4) if int(x.lengths[i]) == int(n) and torch.equal(x.tokens[i, : int(n)], w[: int(n)]))
            for w, n in zip(words[:3], lengths[:3])]
    for r, t, n in zip(rows, tags[:3], lengths[:3]):
        assert torch.equal(t[: int(n)], y[r, : int(n)])


def test_field_scorer_is_log_pi_minus_energy_minus_log_z_and_floors_outside(bench) -> None:
    torch.manual_seed(0)
    m = JRF(6, 2, max_length=3, embed=3, hidden=2).double().eval()
    vocab = bench.Words([["a", "b", "c", "d"]], min_count=1)
    log_z = torch.tensor([0.5, -1.0, 2.0], dtype=torch.float64)
    got = bench.field_scorer(m, vocab, log_z)([["a", "b"], [], ["a", "b", "c", "d"], ["zz"]])
    x = vocab.ids([["a", "b"], ["zz"]])
    with torch.no_grad():
        want = m.log_pi.double()[x.lengths - 1] - m.energy(x) - log_z[x.lengths - 1]
    assert got[1] == got[2] == bench.FLOOR
    torch.testing.assert_close(got[[0, 3]], want, rtol=0, atol=1e-12)


@pytest.mark.slow
def test_main_writes_a_record_with_every_system_and_the_paired_comparisons(bench, monkeypatch, tmp_path) -> None:
    if not (data_root() / "conll2000").exists():
        pytest.skip("CoNLL-2000 is not under the data root ($EBMS_DATA)")
    import _record

    monkeypatch.setattr(_record, "RECORDS_DIR", tmp_path / "records")  # never the committed records
    argv = ["rescoring_jrf.py", "--limit-train", "150", "--sentences", "8", "--n", "4", "--steps", "2",
            "--lstm-steps", "2", "--batch", "4", "--embed", "4", "--hidden", "4", "--logz-samples", "2",
            "--samples", "50", "--seeds", "0,1", "--record", "tiny"]
    monkeypatch.setattr(sys, "argv", argv)
    bench.main()
    record = json.loads((tmp_path / "records" / "tiny.json").read_text())
    fig = record["figures"]
    assert record["seeds"] == [0, 1] and fig["seeds_done"] == [0, 1]
    names = {"kn", "lstm", "trf (training zeta)", "trf (re-estimated)", "jrf (training zeta)", "jrf (re-estimated)"}
    for run in fig["per_seed"]:
        assert set(run["systems"]) == names
        assert all(0.0 <= s["test_wer"] <= 100.0 for s in run["systems"].values())
    for a, b in bench.PAIRS:
        cmp = fig["summary"]["over_seeds"][f"{a} - {b}"]
        assert cmp["values_a"] == [r["systems"][a]["test_wer"] for r in fig["per_seed"]]
        assert cmp["values_b"] == [r["systems"][b]["test_wer"] for r in fig["per_seed"]]
        pooled = fig["summary"]["pooled"][f"{a} - {b}"]
        assert pooled["low"] <= pooled["delta"] <= pooled["high"]
