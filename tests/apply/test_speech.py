"""``ebms.apply.speech``: transcripts of waveforms by a trained CTC / CTC-CRF run.

Checked against something exact: the features the training pipeline computed for the run's own test utterances
(bit for bit, from the same waveforms), the transcripts and label error rates ``ebms eval`` wrote to
``eval.json`` (the same numbers), the CMVN statistics a run stores (the same bits after the JSON round trip), the
run opened without its recordings (``load_run(training_data=False)``: the same transcripts, and a CTC-CRF's
denominator graph rebuilt from ``data.json`` equal to the one fitted on the recordings), and for :func:`resample` a
sine at the new rate (band-limited interpolation of a tone is the tone).
"""

from __future__ import annotations

import dataclasses
import json
import math
import wave
from pathlib import Path

import pytest
import torch
from _apply_data import write_fsdd

from ebms.apply.speech import (
    DIGIT_WORDS,
    MAX_RESAMPLE_TAPS,
    SpeechDecoder,
    applied_info,
    cmvn_record,
    read_audio,
    resample,
    stored_cmvn,
    stored_transcripts,
)
from ebms.cli.main import main
from ebms.data.audio import CMVNStats
from ebms.data.fsdd import connected_digits
from ebms.errors import CheckpointError, DataError
from ebms.metrics.ctc_eval import ctc_transcripts
from ebms.metrics.error_rate import error_rate
from ebms.runs import load_run
from ebms.train.run_files import dump_json

RECIPES = Path(__file__).resolve().parents[2] / "src" / "ebms" / "recipes"
SETTINGS = dict(n_train=8, n_test=6, max_digits=3, test_speakers=("cy",))
TINY = ["run.progress=false", f"speech.n_train={SETTINGS['n_train']}", f"data.n_test={SETTINGS['n_test']}",
        f"speech.max_digits={SETTINGS['max_digits']}", "speech.channels=4", "speech.hidden=8", "train.steps=6",
        "train.batch_size=4", "train.log_every=3", "train.checkpoint_every=6", 'speech.test_speakers=["cy"]']


@pytest.fixture(scope="module")
def root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny FSDD-like folder: tones per (digit, speaker); takes 5-6 train, speaker cy held out."""
    return write_fsdd(tmp_path_factory.mktemp("data"))


@pytest.fixture(scope="module", params=["ctc-digits", "ctc-crf-digits"])
def trained(request: pytest.FixtureRequest, root: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict]:
    """A tiny trained run of each objective and its ``eval.json`` figures."""
    out = tmp_path_factory.mktemp("runs")
    assert main(["train", str(RECIPES / f"{request.param}.toml"), f"run.out_dir={out}", f"data.root={root}", *TINY]) == 0
    run = out / request.param
    return run, json.loads((run / "eval.json").read_text())["figures"]


def test_decoding_the_runs_test_waveforms_gives_the_eval_transcripts_and_label_error_rate(trained, root) -> None:
    path, figures = trained
    run = load_run(path)
    test = connected_digits(**SETTINGS, root=root, stats=run.data.info["cmvn"], keep_waves=True).test
    decoder = run.applier("decode")
    x, lengths = decoder.features(test.waves, 8000)  # the training pipeline's features, bit for bit
    assert torch.equal(lengths, test.lengths) and torch.equal(x, run.data.test.features[:, :x.shape[1]])
    assert torch.equal(run.data.test.features, test.features)  # eval normalises with the stored statistics
    greedy, with_lm = ctc_transcripts(run.model, test.features, test.lengths, den_graph=run.data.info["den_graph"])
    for name, labels in (("best-path", greedy), ("ngram", with_lm)):
        if labels is None:
            assert name not in decoder.decoders
            continue
        out = decoder(test.waves, 8000, decoder=name)
        assert out.labels == labels and out.decoder == name
        assert out.words == [" ".join(DIGIT_WORDS[k - 1] for k in y) for y in labels]
        er = decoder.score(test.transcripts(), out)
        assert er.percent == figures["ler" if name == "best-path" else "ler_lm"]
        if name == "best-path":
            assert (er.substitutions, er.deletions, er.insertions) == (
                figures["substitutions"], figures["deletions"], figures["insertions"])
    assert run.decode(test.waves, 8000).labels == (with_lm if with_lm is not None else greedy)  # Run.decode


def test_batches_of_another_size_give_the_same_transcripts(trained, root) -> None:
    run = load_run(trained[0])
    waves = connected_digits(**SETTINGS, root=root, stats=run.data.info["cmvn"], keep_waves=True).test.waves
    decoder = run.applier("decode")
    assert decoder(waves, 8000, batch_size=1).labels == decoder(waves, 8000).labels


def test_a_wav_of_an_utterance_gives_its_training_features_to_the_files_rounding(trained, root, tmp_path) -> None:
    run = load_run(trained[0])
    test = connected_digits(**SETTINGS, root=root, stats=run.data.info["cmvn"], keep_waves=True).test
    decoder = run.applier("decode")
    for i, w in enumerate(test.waves):
        q = (w.double() * 2**31).round().clamp(-2**31, 2**31 - 1)  # 32-bit PCM: the waveform to 2^-31
        path = tmp_path / f"u{i}.wav"
        with wave.open(str(path), "wb") as f:
            f.setnchannels(1)
            f.setsampwidth(4)
            f.setframerate(8000)
            f.writeframes(q.numpy().astype("<i4").tobytes())
        read, rate = read_audio(path)
        assert rate == 8000 and torch.equal(read, (q / 2**31).float())  # the file's samples, exactly
        x, n = decoder.features([read], rate)
        assert int(n[0]) == int(test.lengths[i])
        # rounding the ~0.002-level gaps to 2^-31 moves the normalised log-mels by < 1e-3 (measured <= 3.2e-4;
        # 16-bit files move the near-silent bands of these pure tones by up to ~0.7)
        assert float((x[0] - test.features[i, :int(n[0])]).abs().max()) < 1e-3


def test_without_its_recordings_a_run_decodes_as_with_them(trained, root, tmp_path) -> None:
    path, _ = trained
    full = load_run(path)
    light = load_run(path, [f"data.root={tmp_path}"], training_data=False)  # an empty folder: no recording read
    assert light.data.test is None and light.sampler is None
    record = json.loads((path / "data.json").read_text())
    graph, rebuilt = full.data.info["den_graph"], light.data.info["den_graph"]
    assert ("transcripts" in record) == (graph is not None)  # kept by a CTC-CRF run only
    if graph is not None:
        _, _, targets, target_lengths = full.data.train
        assert record["transcripts"] == [t[:n].tolist() for t, n in zip(targets, target_lengths.tolist())]
        for f in dataclasses.fields(graph):
            a, b = getattr(graph, f.name), getattr(rebuilt, f.name)
            if f.name == "lm":
                assert torch.equal(a.table, b.table) and (a.order, a.vocab_size) == (b.order, b.vocab_size)
            elif isinstance(a, torch.Tensor):
                assert a.dtype == b.dtype and torch.equal(a, b), f.name
            elif f.name != "_cache":
                assert a == b, f.name
    else:
        assert rebuilt is None
    for key in ("n_features", "n_classes", "sample_rate"):
        assert light.data.info[key] == full.data.info[key]
    assert all(torch.equal(getattr(light.data.info["cmvn"], k), getattr(full.data.info["cmvn"], k))
               for k in ("mean", "std"))
    waves = connected_digits(**SETTINGS, root=root, stats=full.data.info["cmvn"], keep_waves=True).test.waves
    for name in full.applier("decode").decoders:
        assert light.applier("decode")(waves, 8000, decoder=name) == full.applier("decode")(waves, 8000, decoder=name)


def test_stored_transcripts_are_checked_and_an_older_file_asks_for_the_full_load() -> None:
    stats = CMVNStats(torch.zeros(3), torch.ones(3))
    record = {"n_classes": 4, **cmvn_record(stats, 8000, [[1, 2], [3]])}
    assert stored_transcripts(json.loads(dump_json(record)), "data.json", 4) == [[1, 2], [3]]
    info = applied_info(record, "data.json", lm_order=2)
    assert info is not None and info["n_features"] == 3 and info["den_graph"].n_symbols == 4
    assert applied_info({k: v for k, v in record.items() if k != "transcripts"}, "data.json", lm_order=2) is None
    assert applied_info({"n_classes": 4}, "data.json", lm_order=None) is None  # no statistics: as before
    assert applied_info({"n_classes": 4, **cmvn_record(stats, 8000)}, "data.json", lm_order=None)["den_graph"] is None
    for bad in ([[1, 4]], [[0]], [1, 2], [["1"]], None, [[True]]):
        with pytest.raises(CheckpointError, match=r"^data.json: expected 'transcripts', lists of labels 1..3"):
            applied_info({**record, "transcripts": bad}, "data.json", lm_order=2)
    with pytest.raises(CheckpointError, match=r"^data.json: expected integers 'n_classes'"):
        applied_info({**record, "n_classes": 4.0}, "data.json", lm_order=2)


def test_cmvn_statistics_survive_the_run_file_bit_for_bit() -> None:
    g = torch.Generator().manual_seed(0)
    stats = CMVNStats(torch.randn(40, generator=g) * 7, torch.rand(40, generator=g) + 1e-3)
    back = stored_cmvn(json.loads(dump_json(cmvn_record(stats, 8000))), "data.json")
    assert torch.equal(back.mean, stats.mean) and torch.equal(back.std, stats.std)


@pytest.mark.parametrize("cmvn", [None, {"mean": [0.0], "std": [0.0]}, {"mean": [0.0, 1.0], "std": [1.0]},
                                  {"mean": ["a"], "std": [1.0]}, {"mean": [], "std": []}])
def test_malformed_stored_statistics_are_refused_with_one_line(cmvn) -> None:
    with pytest.raises(CheckpointError, match=r"^data.json: expected 'cmvn' with lists 'mean' and 'std'"):
        stored_cmvn({"cmvn": cmvn}, "data.json")


@pytest.mark.parametrize(("orig", "new", "freq"), [(16000, 8000, 1000.0), (22050, 8000, 1234.5),
                                                   (8000, 22050, 700.0), (11025, 8000, 2500.0)])
def test_resampling_a_tone_gives_the_tone_at_the_new_rate(orig: int, new: int, freq: float) -> None:
    x = torch.sin(2 * math.pi * freq * torch.arange(orig, dtype=torch.float64) / orig).float()
    y = resample(x, orig, new)
    want = torch.sin(2 * math.pi * freq * torch.arange(y.numel(), dtype=torch.float64) / new)
    assert y.numel() == math.ceil(orig * new / orig) and y.dtype == torch.float32
    assert float((y.double() - want)[100:-100].abs().max()) < 2e-4  # measured 3e-5 .. 1.4e-4 away from the ends


def test_resampling_removes_what_the_new_rate_cannot_hold() -> None:
    x = torch.sin(2 * math.pi * 6000.0 * torch.arange(16000, dtype=torch.float64) / 16000).float()
    assert float(resample(x, 16000, 8000)[100:-100].abs().max()) < 1e-3  # 6 kHz is above 8 kHz's Nyquist


def test_equal_rates_return_the_wave_and_impractical_ratios_are_refused() -> None:
    x = torch.randn(100)
    assert resample(x, 8000, 8000) is x
    with pytest.raises(ValueError, match=rf"8000 Hz \(8000/44101 in lowest terms\) needs a filter of \d+ coefficients "
                                         rf"\(at most {MAX_RESAMPLE_TAPS}\)"):
        resample(x, 44101, 8000)


def test_references_are_matched_by_name_then_base_name_and_parsed_as_words_or_digits() -> None:
    dec = SpeechDecoder(torch.nn.Identity(), CMVNStats(torch.zeros(2), torch.ones(2)), sample_rate=8000)
    lines = ["a/x.wav\tthree one four", "", "b/y.wav\t3 1 4", "z.wav\t27", "other.wav\tZERO"]
    assert dec.references(lines, ["a/x.wav", "c/y.wav", "z.wav"], "refs") == [[4, 2, 5], [4, 2, 5], [3, 8]]
    with pytest.raises(DataError, match=r"^refs: no transcript of 'q.wav' \(no line names it\)"):
        dec.references(lines, ["q.wav"], "refs")
    with pytest.raises(DataError, match=r"^refs line 1: unknown label 'twelve'; expected the words zero one"):
        dec.references(["x.wav\ttwelve"], ["x.wav"], "refs")
    assert error_rate([[4, 2, 5]], [[4, 5]]).percent == pytest.approx(100 / 3)


def test_rms_levels_a_recording_before_its_features(trained, root) -> None:
    run = load_run(trained[0])
    w = connected_digits(**SETTINGS, root=root, stats=run.data.info["cmvn"], keep_waves=True).test.waves[0]
    decoder = run.applier("decode")
    quiet, _ = decoder.features([w / 16], 8000, rms=0.1)  # powers of two: the levelled waveforms are equal bits
    loud, _ = decoder.features([w * 4], 8000, rms=0.1)
    assert torch.equal(quiet, loud) and not torch.equal(quiet, decoder.features([w], 8000)[0])
    with pytest.raises(ValueError, match=r"^rms: expected a positive level or None; got -1"):
        decoder.features([w], 8000, rms=-1)
