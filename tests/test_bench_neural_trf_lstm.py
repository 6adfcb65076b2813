"""``benchmarks/neural_trf_lstm.py``: the saved LSTM as another run's proposal — written whole, waited for when
another process is still training it, refused at once when it is missing and no wait is asked for (fast: a
10-word LSTM, no PTB)."""

from __future__ import annotations

import threading
import time
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from _benchmarks import bench

V = 10


def _nt():
    return bench("neural_trf_lstm")


def _save_lstm(nt, folder: Path) -> Path:
    lm = nt.new_lstm(V)
    return nt.save_model(folder, "lstm", lm, {"vocab_size": V, "config": {}, "record": {"steps": 3,
                                                                                      "test_perplexity": 9.5}})


def test_saved_lstm_loads_as_the_proposal_with_its_record_and_leaves_no_partial_file(tmp_path: Path) -> None:
    nt = _nt()
    path = _save_lstm(nt, tmp_path)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["lstm.pt"]
    lm, rec = nt.load_proposal(path, SimpleNamespace(vocab=list(range(V))))
    assert rec["steps"] == 3 and rec["loaded_from"] == str(path)
    ref = nt.new_lstm(V)
    ref.load_state_dict(torch.load(path, weights_only=False)["state_dict"])
    assert all(torch.equal(a, b) for a, b in zip(lm.state_dict().values(), ref.state_dict().values()))


def test_a_missing_proposal_fails_at_once_without_a_wait_and_is_waited_for_with_one(tmp_path: Path) -> None:
    nt = _nt()
    data = SimpleNamespace(vocab=list(range(V)))
    path = tmp_path / "lstm.pt"
    with pytest.raises(SystemExit, match=r"--proposal: .*lstm\.pt does not exist; write it with"):
        nt.load_proposal(path, data)
    writer = threading.Timer(0.3, _save_lstm, args=(nt, tmp_path))
    writer.start()
    t0 = time.monotonic()
    lm, rec = nt.load_proposal(path, data, wait=30.0)
    writer.join()
    assert rec["steps"] == 3 and time.monotonic() - t0 >= 0.25
    with pytest.raises(SystemExit, match=r"waited 0 s"):
        nt.load_proposal(tmp_path / "other.pt", data, wait=0.01)


def test_a_proposal_of_another_vocabulary_is_refused(tmp_path: Path) -> None:
    nt = _nt()
    path = _save_lstm(nt, tmp_path)
    with pytest.raises(SystemExit, match=r"expected an lstm.pt of this benchmark \(vocab_size 11\)"):
        nt.load_proposal(path, SimpleNamespace(vocab=list(range(V + 1))))
