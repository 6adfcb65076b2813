"""End-to-end: a connected-digit run keeps its training data's fingerprint, and refuses keys CTC ignores (issue 23).

A tiny synthetic FSDD-like folder (tones written with ``wave``) under ``data.root``: a run writes
``data.json``; once the recordings give other training utterances, ``eval`` is refused with one
line naming ``data.root`` (the global CMVN and the denominator n-gram were fitted to the old ones).
"""

from __future__ import annotations

import math
import wave
from pathlib import Path

import numpy as np
import pytest

from ebms.cli.main import main

RECIPES = Path(__file__).resolve().parents[2] / "src" / "ebms" / "recipes"
TINY = ["run.progress=false", "speech.n_train=8", "data.n_test=4", "speech.max_digits=3", "speech.channels=4",
        "speech.hidden=8", "train.steps=2", "train.batch_size=4", 'speech.test_speakers=["cy"]', "--no-eval"]


def _tone(path: Path, digit: int, speaker: int, extra: int = 0) -> None:
    t = np.arange(1200 + 80 * digit + extra) / 8000
    x = (6000 * np.sin(2 * math.pi * (300 + 150 * digit + 20 * speaker) * t)).astype("<i2")
    with wave.open(str(path), "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(8000)
        w.writeframes(x.tobytes())


@pytest.fixture()
def root(tmp_path: Path) -> Path:
    rec = tmp_path / "data" / "fsdd" / "recordings"
    rec.mkdir(parents=True)
    for s_i, spk in enumerate(("ann", "bob", "cy")):
        for d in range(10):
            for k in range(4, 7):
                _tone(rec / f"{d}_{spk}_{k}.wav", d, s_i)
    return tmp_path / "data"


def test_eval_refuses_recordings_that_give_other_training_utterances(root: Path, tmp_path: Path,
                                                                     capsys: pytest.CaptureFixture[str],
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    assert main(["train", str(RECIPES / "ctc-digits.toml"), f"run.out_dir={tmp_path}", f"data.root={root}",
                 *TINY]) == 0, capsys.readouterr().err
    run = tmp_path / "ctc-digits"
    assert main(["eval", str(run)]) == 0
    for d in range(10):  # every training take of ann grows by 400 samples: other frame counts
        for k in range(4, 7):
            _tone(root / "fsdd" / "recordings" / f"{d}_ann_{k}.wav", d, 0, extra=400)
    monkeypatch.setattr("ebms.data.fsdd._RECORDINGS", {})  # what a new `ebms eval` process starts from:
    monkeypatch.setattr("ebms.data.fsdd._TASKS", {})  # nothing read yet
    capsys.readouterr()
    assert main(["eval", str(run)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("ebms eval: error: data.root: the fsdd-digits training utterances (transcripts and frame "
                          "counts) are not the ones this run was trained on") and err.count("\n") == 1, err


@pytest.mark.parametrize("key", ["speech.ctc_weight=0.5", "speech.lm_order=3"])
def test_ctc_crf_keys_are_refused_with_ctc(key: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["train", str(RECIPES / "ctc-digits.toml"), f"run.out_dir={tmp_path}", key, "--no-eval"]) == 2
    err = capsys.readouterr().err
    name = key.split("=")[0]
    assert err.startswith(f"ebms train: error: {name}: objective.kind='ctc' does not read it") and \
        "it is read with objective.kind = 'ctc-crf': drop it" in err, err
