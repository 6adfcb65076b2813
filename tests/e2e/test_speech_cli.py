"""End-to-end: ``ebms train`` on the connected-digit task (CTC and CTC-CRF) writes an LER.

The runs use a tiny synthetic FSDD-like folder (tones written with ``wave``) through ``data.root``,
so they need neither the real recordings nor much time; one more run uses the real recordings
when ``$EBMS_DATA/fsdd`` is present.
"""

from __future__ import annotations

import json
import math
import wave
from pathlib import Path

import numpy as np
import pytest

from ebms.cli.main import main
from ebms.data.paths import DATA_ENV_VAR, data_root

RECIPES = Path(__file__).resolve().parents[2] / "src" / "ebms" / "recipes"
TINY = [
    "run.progress=false",
    "speech.n_train=8",
    "data.n_test=4",
    "speech.max_digits=3",
    "speech.channels=4",
    "speech.hidden=8",
    "train.steps=4",
    "train.batch_size=4",
    "train.log_every=2",
    "train.checkpoint_every=4",
]


@pytest.fixture(scope="module")
def fake_root(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("data")
    rec = root / "fsdd" / "recordings"
    rec.mkdir(parents=True)
    for s_i, spk in enumerate(("ann", "bob", "cy")):
        for d in range(10):
            for k in range(4, 7):  # takes 5 and 6 are training takes; all of cy's are test takes
                t = np.arange(1200 + 80 * d) / 8000
                x = (6000 * np.sin(2 * math.pi * (300 + 150 * d + 20 * s_i) * t)).astype("<i2")
                with wave.open(str(rec / f"{d}_{spk}_{k}.wav"), "wb") as w:
                    w.setnchannels(1)
                    w.setsampwidth(2)
                    w.setframerate(8000)
                    w.writeframes(x.tobytes())
    return root


@pytest.mark.parametrize("recipe", ["ctc-digits.toml", "ctc-crf-digits.toml"])
def test_train_writes_eval_json_with_a_label_error_rate(recipe, fake_root, tmp_path, capsys):
    args = ["train", str(RECIPES / recipe), f"run.out_dir={tmp_path}", f"data.root={fake_root}",
            'speech.test_speakers=["cy"]', *TINY]
    assert main(args) == 0, capsys.readouterr().err
    run = tmp_path / recipe.removesuffix(".toml")
    report = json.loads((run / "eval.json").read_text())
    figures = report["figures"]
    assert 0.0 <= figures["ler"] and figures["utterances"] == 4
    assert figures["substitutions"] + figures["deletions"] + figures["insertions"] == pytest.approx(
        figures["ler"] * figures["ref_labels"] / 100)
    assert ("ler_lm" in figures) == ("crf" in recipe)
    assert "fsdd-digits test" in capsys.readouterr().out
    assert main(["eval", "--run", str(run)]) == 0  # reloads the data and the checkpoint
    assert json.loads((run / "eval.json").read_text())["figures"] == report["figures"]


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ("objective.kind=ctc_crf", "objective.kind: unknown value 'ctc_crf' for data.name='fsdd-digits' (a structured task); "
                                   "expected one of ctc, ctc-crf; did you mean 'ctc-crf'?"),
        ("model.kind=mlp", "model.kind: unknown value 'mlp' for data.name='fsdd-digits'"),
        ("speech.channels=0", "speech.channels: expected an integer >= 1; got 0"),
        ("model.hidden=[1,2,3]", "model.hidden: the MLP's hidden widths; the acoustic model's sizes are speech.channels "
                                 "and speech.hidden"),
        ("objective.lm_order=3", "objective.lm_order: renamed; use speech.lm_order"),
        ('speech.test_speakers=["zed"]', "speech.test_speakers: test_speakers: expected a non-empty proper subset"),
    ],
)
def test_bad_speech_configuration_is_a_one_line_error(override, message, fake_root, tmp_path, capsys):
    args = ["train", str(RECIPES / "ctc-digits.toml"), f"run.out_dir={tmp_path}", f"data.root={fake_root}",
            'speech.test_speakers=["cy"]', *TINY, override]
    assert main(args) == 2
    err = capsys.readouterr().err.strip()
    assert message in err and len(err.splitlines()) == 1


def test_missing_recordings_name_the_data_root(tmp_path, capsys):
    assert main(["train", str(RECIPES / "ctc-digits.toml"), f"run.out_dir={tmp_path}",
                 f"data.root={tmp_path}", *TINY]) == 2
    assert f"data.root: root: no FSDD recordings under {str(tmp_path)!r}" in capsys.readouterr().err


def test_real_recordings_train_and_evaluate(tmp_path, capsys):
    if not (data_root() / "fsdd" / "recordings").is_dir():
        pytest.skip(f"{data_root() / 'fsdd'} absent: set {DATA_ENV_VAR} to the folder holding fsdd/recordings/")
    assert main(["train", str(RECIPES / "ctc-crf-digits.toml"), f"run.out_dir={tmp_path}", *TINY]) == 0
    report = json.loads((tmp_path / "ctc-crf-digits" / "eval.json").read_text())
    assert report["figures"]["utterances"] == 4
