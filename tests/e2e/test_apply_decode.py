"""End-to-end: ``ebms decode RUN WAV ...`` transcribes wav files with a speech run (issue 27).

A tiny synthetic FSDD-like folder (tones written with ``wave``) through ``data.root``; a tiny CTC and CTC-CRF run
trained on it. The run's own test utterances, written as 32-bit PCM wav files, decode to the transcripts
``ebms eval`` scored, and ``--refs`` prints the label error rate ``eval.json`` holds; a copy of a run whose
``data.root`` names an empty folder decodes the same (``data.json`` is all it reads), and a CTC-CRF run that kept no
transcripts loads its recordings as before. Every bad input is one line on stderr and exit status 2.
"""

from __future__ import annotations

import io
import json
import math
import re
import shutil
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
from _apply_data import tone as _tone
from _apply_data import write_fsdd
from _apply_data import write_wav as _wav

from ebms.apply.speech import DIGIT_WORDS
from ebms.cli.main import main
from ebms.cli.speech import SpeechTask
from ebms.data.fsdd import connected_digits
from ebms.metrics.ctc_eval import ctc_transcripts
from ebms.runs import load_run
from ebms.train.run_files import dump_json

RECIPES = Path(__file__).resolve().parents[2] / "src" / "ebms" / "recipes"
SETTINGS = dict(n_train=8, n_test=5, max_digits=3, test_speakers=("cy",))
TINY = ["run.progress=false", "speech.n_train=8", "data.n_test=5", "speech.max_digits=3", "speech.channels=4",
        "speech.hidden=8", "train.steps=6", "train.batch_size=4", "train.log_every=3", "train.checkpoint_every=6",
        'speech.test_speakers=["cy"]']


@pytest.fixture(scope="module")
def root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_fsdd(tmp_path_factory.mktemp("data"))  # takes 5 and 6 train; all of cy's takes are test takes


@pytest.fixture(scope="module")
def runs(root: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    out = tmp_path_factory.mktemp("runs")
    for name in ("ctc-digits", "ctc-crf-digits"):
        assert main(["train", str(RECIPES / f"{name}.toml"), f"run.out_dir={out}", f"data.root={root}", *TINY]) == 0
    assert main(["train", f"run.out_dir={out}", "run.name=toy", "run.progress=false", "train.steps=2",
                 "--no-eval"]) == 0
    return {"ctc": out / "ctc-digits", "ctc-crf": out / "ctc-crf-digits", "toy": out / "toy"}


@pytest.fixture(scope="module")
def utterances(runs: dict[str, Path], root: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[list[str], Path]:
    """The runs' test utterances as 32-bit PCM wav files (the waveform to 2^-31) and their references."""
    folder = tmp_path_factory.mktemp("wavs")
    test = connected_digits(**SETTINGS, root=root, stats=load_run(runs["ctc"]).data.info["cmvn"], keep_waves=True).test
    paths = []
    for i, w in enumerate(test.waves):
        q = np.clip(np.round(w.double().numpy() * 2**31), -2**31, 2**31 - 1).astype("<i4")
        paths.append(str(_wav(folder / f"utt{i}.wav", q, width=4)))
    refs = folder / "refs.tsv"
    refs.write_text("".join(f"{p}\t{' '.join(DIGIT_WORDS[k - 1] for k in y)}\n"
                            for p, y in zip(paths, test.transcripts())))
    return paths, refs


def _eval_words(run_dir: Path, decoder: str) -> list[str]:
    """The transcripts ``ebms eval`` scores: the run's test features through ``ctc_transcripts``."""
    run = load_run(run_dir)
    test = run.data.test
    greedy, lm = ctc_transcripts(run.model, test.features, test.lengths, den_graph=run.data.info["den_graph"])
    return [" ".join(DIGIT_WORDS[k - 1] for k in y) for y in (lm if decoder == "ngram" else greedy)]


@pytest.mark.parametrize(("kind", "decoder", "figure"), [("ctc", None, "ler"), ("ctc-crf", None, "ler_lm"),
                                                         ("ctc-crf", "best-path", "ler")])
def test_decoding_the_test_utterances_gives_the_eval_transcripts_and_label_error_rate(
        kind, decoder, figure, runs, utterances, tmp_path, capsys) -> None:
    paths, refs = utterances
    out = tmp_path / "out.tsv"
    args = ["decode", str(runs[kind]), *paths, "--refs", str(refs), "-o", str(out)]
    assert main(args + (["--decoder", decoder] if decoder else [])) == 0
    rows = [line.split("\t") for line in out.read_text().splitlines()]
    assert [r[0] for r in rows] == paths
    words = _eval_words(runs[kind], decoder or ("ngram" if kind == "ctc-crf" else "best-path"))
    assert [r[1] for r in rows] == words
    err = capsys.readouterr().err
    figures = json.loads((runs[kind] / "eval.json").read_text())["figures"]
    assert err.startswith(f"ebms decode: {figure} {figures[figure]:.4g}% (") and err.count("\n") == 1, err
    if figure == "ler":
        assert (f"{figures['substitutions']} substitutions, {figures['deletions']} deletions, "
                f"{figures['insertions']} insertions in {figures['ref_labels']} reference labels") in err


def test_a_wav_list_from_stdin_or_a_file_gives_the_same_output(runs, utterances, tmp_path, capsys, monkeypatch) -> None:
    paths, _ = utterances
    assert main(["decode", str(runs["ctc"]), *paths]) == 0
    direct = capsys.readouterr().out
    assert direct.count("\n") == len(paths)
    monkeypatch.setattr("sys.stdin", io.StringIO("\n".join(paths) + "\n\n"))
    assert main(["decode", str(runs["ctc"]), "-"]) == 0
    assert capsys.readouterr().out == direct
    listed = tmp_path / "list.txt"
    listed.write_text("\n".join(paths[1:]) + "\n")
    assert main(["decode", str(runs["ctc"]), paths[0], f"@{listed}"]) == 0
    assert capsys.readouterr().out == direct


def test_out_is_written_whole_or_not_at_all(runs, utterances, tmp_path, capsys) -> None:
    paths, _ = utterances
    out = tmp_path / "out.tsv"
    out.write_text("old\n")
    far = _wav(tmp_path / "far.wav", np.zeros(800, dtype="<i2"), rate=44101)  # a rate the resampler refuses
    assert main(["decode", str(runs["ctc"]), *paths, str(far), "-o", str(out)]) == 2
    assert out.read_text() == "old\n" and sorted(p.name for p in tmp_path.iterdir()) == ["far.wav", "out.tsv"]
    assert main(["decode", str(runs["ctc"]), *paths, "-o", str(out)]) == 0
    assert out.read_text().count("\n") == len(paths) and sorted(p.name for p in tmp_path.iterdir()) == [
        "far.wav", "out.tsv"]
    assert capsys.readouterr().out == ""


def test_stereo_8_bit_and_other_rates_are_read_as_mono_at_the_runs_rate(runs, tmp_path, capsys) -> None:
    x = _tone(3, 2)
    mono = _wav(tmp_path / "mono.wav", x)
    stereo = _wav(tmp_path / "stereo.wav", np.repeat(x, 2), channels=2)  # both channels the same: their mean is x
    low = _wav(tmp_path / "low.wav", ((x.astype(np.int32) >> 8) + 128).astype(np.uint8), width=1)
    t = np.arange(int(len(x) * 16000 / 8000)) / 16000
    fast = _wav(tmp_path / "fast.wav", (6000 * np.sin(2 * math.pi * (300 + 450 + 40) * t)).astype("<i2"), rate=16000)
    assert main(["decode", str(runs["ctc"]), str(mono), str(stereo), str(low), str(fast)]) == 0
    rows = [line.split("\t") for line in capsys.readouterr().out.splitlines()]
    assert [r[0] for r in rows] == [str(mono), str(stereo), str(low), str(fast)]
    assert rows[0][1] == rows[1][1]


def test_a_run_trained_before_the_statistics_were_kept_is_refused_but_still_evaluates(root, tmp_path, capsys,
                                                                                     monkeypatch) -> None:
    def older(self, cfg, data):  # data.json as ebms wrote it before `ebms decode`
        return {"data.json": dump_json({"format": "ebms-speech-data", "version": 1, "n_classes": 11,
                                        "train_sha256": data.info["train_sha256"]})}

    with monkeypatch.context() as m:
        m.setattr(SpeechTask, "run_files", older)
        assert main(["train", str(RECIPES / "ctc-digits.toml"), f"run.out_dir={tmp_path}", f"data.root={root}",
                     *TINY, "--no-eval"]) == 0
    run = tmp_path / "ctc-digits"
    assert "cmvn" not in json.loads((run / "data.json").read_text())
    assert main(["eval", str(run)]) == 0  # refits the statistics, as before
    wav = _wav(tmp_path / "a.wav", _tone(1, 0))
    capsys.readouterr()
    assert main(["decode", str(run), str(wav)]) == 2
    err = capsys.readouterr().err
    assert err == ("ebms decode: error: decode: this run's data.json keeps no CMVN statistics (trained by an older "
                   "ebms, which fitted them again at every load); train the run again (--overwrite)\n")


def _moved(run: Path, dest: Path) -> Path:
    """A copy of ``run`` whose ``data.root`` names an empty folder: its recordings moved away."""
    copy = Path(shutil.copytree(run, dest / run.name))
    (dest / "nodata").mkdir(exist_ok=True)
    cfg = copy / "config.toml"
    cfg.write_text(re.sub(r"(?m)^root = .*$", f'root = "{dest / "nodata"}"', cfg.read_text()))
    return copy


@pytest.mark.parametrize("kind", ["ctc", "ctc-crf"])
def test_a_run_without_its_recordings_decodes_as_with_them(kind, runs, utterances, tmp_path, capsys) -> None:
    paths, refs = utterances
    moved = _moved(runs[kind], tmp_path)
    outputs = []
    for run in (runs[kind], moved):
        capsys.readouterr()
        assert main(["decode", str(run), *paths, "--refs", str(refs)]) == 0
        outputs.append(capsys.readouterr())
    assert outputs[1] == outputs[0] and outputs[0].out.count("\n") == len(paths)
    assert main(["eval", str(moved)]) == 2  # the recordings are gone: eval needs them
    assert "data.root" in capsys.readouterr().err


def test_a_ctc_crf_run_that_kept_no_transcripts_decodes_from_its_recordings(root, runs, utterances, tmp_path, capsys,
                                                                            monkeypatch) -> None:
    keep = SpeechTask.run_files

    def older(self, cfg, data):  # data.json as ebms wrote it before the transcripts were kept
        record = json.loads(keep(self, cfg, data)["data.json"])
        del record["transcripts"]
        return {"data.json": dump_json(record)}

    with monkeypatch.context() as m:
        m.setattr(SpeechTask, "run_files", older)
        assert main(["train", str(RECIPES / "ctc-crf-digits.toml"), f"run.out_dir={tmp_path}", f"data.root={root}",
                     *TINY, "--no-eval"]) == 0
    run = tmp_path / "ctc-crf-digits"
    assert {"cmvn", "transcripts"} & set(json.loads((run / "data.json").read_text())) == {"cmvn"}
    paths, _ = utterances
    capsys.readouterr()
    assert main(["decode", str(runs["ctc-crf"]), *paths]) == 0
    want = capsys.readouterr().out
    assert main(["decode", str(run), *paths]) == 0  # the same training: the same weights and transcripts
    assert capsys.readouterr().out == want
    assert main(["decode", str(_moved(run, tmp_path / "moved")), *paths]) == 2  # its graph needs the recordings
    assert "data.root" in capsys.readouterr().err


def _bad_wavs(d: Path) -> dict[str, Path]:
    (d / "folder.wav").mkdir()
    (d / "text.wav").write_text("not audio\n")
    fmt = (3).to_bytes(2, "little") + (1).to_bytes(2, "little") + (8000).to_bytes(4, "little") + \
        (32000).to_bytes(4, "little") + (4).to_bytes(2, "little") + (32).to_bytes(2, "little")
    body = b"WAVE" + b"fmt " + (16).to_bytes(4, "little") + fmt + b"data" + (8).to_bytes(4, "little") + bytes(8)
    (d / "float.wav").write_bytes(b"RIFF" + len(body).to_bytes(4, "little") + body)
    return {"empty": _wav(d / "empty.wav", np.zeros(0, dtype="<i2")),
            "far": _wav(d / "far.wav", np.zeros(800, dtype="<i2"), rate=44101),
            "good": _wav(d / "good.wav", _tone(2, 1))}


Args = Callable[[dict[str, Path], Path, dict[str, Path]], list[str]]
BAD: list[tuple[str, Args, str]] = [
    ("missing wav", lambda r, d, w: [str(r["ctc"]), str(d / "nope.wav")], "WAV: '{d}/nope.wav' not found"),
    ("folder as wav", lambda r, d, w: [str(r["ctc"]), str(d / "folder.wav")], "'{d}/folder.wav' is a folder"),
    ("not a wav", lambda r, d, w: [str(r["ctc"]), str(d / "text.wav")], "'{d}/text.wav' is not a PCM wav file"),
    ("float wav", lambda r, d, w: [str(r["ctc"]), str(d / "float.wav")], "format tag 0x0003; expected 0x0001"),
    ("empty audio", lambda r, d, w: [str(r["ctc"]), str(w["empty"])], "'{d}/empty.wav' holds no samples"),
    ("impractical rate", lambda r, d, w: [str(r["ctc"]), str(w["far"])],
     "WAV: '{d}/far.wav' is sampled at 44101 Hz; the run needs 8000 Hz"),
    ("refs missing an entry", lambda r, d, w: [str(r["ctc"]), str(w["good"]), "--refs", str(d / "refs.tsv")],
     "no transcript of '{d}/good.wav' (no line names it)"),
    ("refs line without a tab", lambda r, d, w: [str(r["ctc"]), str(w["good"]), "--refs", str(d / "notab.tsv")],
     "line 1: expected FILE<TAB>TRANSCRIPT"),
    ("refs unknown label", lambda r, d, w: [str(r["ctc"]), str(w["good"]), "--refs", str(d / "word.tsv")],
     "line 1: unknown label 'twelve'"),
    ("refs file missing", lambda r, d, w: [str(r["ctc"]), str(w["good"]), "--refs", str(d / "none.tsv")],
     "--refs: '{d}/none.tsv' not found"),
    ("not a speech run", lambda r, d, w: [str(r["toy"]), str(w["good"])],
     "is not one `ebms decode` applies; no apply command serves it"),
    ("run not a folder", lambda r, d, w: [str(d / "norun"), str(w["good"])], "RUN: '{d}/norun' is not a run folder"),
    ("batch size 0", lambda r, d, w: [str(r["ctc"]), str(w["good"]), "--batch-size", "0"],
     "--batch-size: expected an integer >= 1; got 0"),
    ("ngram with ctc", lambda r, d, w: [str(r["ctc"]), str(w["good"]), "--decoder", "ngram"],
     "--decoder: this run decodes with best-path; got 'ngram'"),
    ("rms not positive", lambda r, d, w: [str(r["ctc"]), str(w["good"]), "--rms", "-1"],
     "--rms: expected a positive level"),
    ("empty wav list", lambda r, d, w: [str(r["ctc"]), f"@{d / 'blank.txt'}"], "WAV: '{d}/blank.txt' lists no wav file"),
    ("stdin twice", lambda r, d, w: [str(r["ctc"]), "-", "-"], "WAV: '-' (paths on stdin) given more than once"),
]


@pytest.mark.parametrize(("name", "args", "piece"), BAD, ids=[row[0] for row in BAD])
def test_bad_input_is_one_line_and_exit_2(name: str, args: Args, piece: str, runs, tmp_path, capsys) -> None:
    wavs = _bad_wavs(tmp_path)
    (tmp_path / "refs.tsv").write_text("other.wav\tone\n")
    (tmp_path / "notab.tsv").write_text(f"{wavs['good']} one\n")
    (tmp_path / "word.tsv").write_text(f"{wavs['good']}\ttwelve\n")
    (tmp_path / "blank.txt").write_text("\n\n")
    capsys.readouterr()
    assert main(["decode", *args(runs, tmp_path, wavs)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("ebms decode: error: ") and err.count("\n") == 1, err
    assert piece.format(d=tmp_path) in err, err
