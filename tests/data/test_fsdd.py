"""Tests for ebms.data.fsdd: FSDD loading and the connected-digit task.

The synthetic tests build a tiny fake FSDD folder with the standard-library ``wave`` module; the
tests on the real recordings skip when ``$EBMS_DATA/fsdd`` is absent.
"""

from __future__ import annotations

import hashlib
import math
import wave

import numpy as np
import pytest
import torch

from ebms.data.audio import frame_count
from ebms.data.fsdd import SPEAKERS, Recording, connected_digits, load_fsdd
from ebms.data.paths import DATA_ENV_VAR, data_root


def _real_root():
    if not (data_root() / "fsdd" / "recordings").is_dir():
        pytest.skip(f"{data_root() / 'fsdd'} absent: set {DATA_ENV_VAR} to the folder holding fsdd/recordings/")
    return data_root()


def _fake_fsdd(tmp_path, speakers=("ann", "bob", "cy"), takes=3):
    rec = tmp_path / "fsdd" / "recordings"
    rec.mkdir(parents=True)
    rows = ["path\tbytes\tmd5"]
    for s_i, spk in enumerate(speakers):
        for d in range(10):
            for k in range(takes):
                n = 800 + 160 * d + 40 * k
                t = np.arange(n) / 8000
                x = (8000 * np.sin(2 * math.pi * (200 + 100 * d + 10 * s_i) * t)).astype("<i2")
                path = rec / f"{d}_{spk}_{k}.wav"
                with wave.open(str(path), "wb") as w:
                    w.setnchannels(1)
                    w.setsampwidth(2)
                    w.setframerate(8000)
                    w.writeframes(x.tobytes())
                data = path.read_bytes()
                rows.append(f"fsdd/recordings/{path.name}\t{len(data)}\t{hashlib.md5(data).hexdigest()}")
    (tmp_path / "fsdd" / "recordings.tsv").write_text("\n".join(rows) + "\n")
    return tmp_path


def test_load_fsdd_reads_and_verifies_a_folder(tmp_path):
    root = _fake_fsdd(tmp_path)
    recs = load_fsdd(root, verify=True)
    assert len(recs) == 90 and all(isinstance(r, Recording) for r in recs)
    assert recs[0].speaker == "ann" and recs[0].digit == 0 and recs[0].index == 0
    assert recs[0].waveform.shape == (800,)
    path = root / "fsdd" / "recordings" / "3_bob_1.wav"
    path.write_bytes(path.read_bytes()[:-2] + b"\x00\x01")
    with pytest.raises(ValueError, match="verify: md5 of .*3_bob_1.wav"):
        load_fsdd(root / "fsdd", verify=True)


def test_load_fsdd_bad_table_truncated_take_and_wrong_rate_are_data_errors(tmp_path):
    from ebms.errors import DataError

    root = _fake_fsdd(tmp_path)
    table = root / "fsdd" / "recordings.tsv"
    table.write_text(table.read_text() + "fsdd/recordings/x.wav 12\n")
    with pytest.raises(DataError, match=r"recordings.tsv' line 92: expected 3 tab-separated fields"):
        load_fsdd(root, verify=True)
    path = root / "fsdd" / "recordings" / "4_ann_0.wav"
    path.write_bytes(path.read_bytes()[:-100])  # the header still claims the full length
    with pytest.raises(DataError, match=r"4_ann_0.wav': header claims 2880 bytes of samples \(1440 frames\); the file holds 2780"):
        load_fsdd(root)
    with wave.open(str(path), "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(16000)
        w.writeframes(b"\x00\x00" * 10)
    with pytest.raises(DataError, match=r"4_ann_0.wav' is sampled at 16000 Hz; FSDD is 8000 Hz"):
        load_fsdd(root)


def test_load_fsdd_missing_folder_names_the_variable(tmp_path):
    with pytest.raises(FileNotFoundError, match=f"root: no FSDD recordings.*{DATA_ENV_VAR}"):
        load_fsdd(tmp_path)


def test_connected_digits_is_speaker_disjoint_deterministic_and_consistent(tmp_path):
    recs = load_fsdd(_fake_fsdd(tmp_path))
    kw = dict(n_train=12, n_test=5, max_digits=4, seed=3, test_speakers=("cy",), train_indices=(1, 2))
    task = connected_digits(recs, **kw)
    again = connected_digits(recs, **kw)
    assert torch.equal(task.train.features, again.train.features) and torch.equal(task.test.targets, again.test.targets)
    assert set(task.train.speakers) <= {"ann", "bob"} and set(task.test.speakers) == {"cy"}
    for split, n in ((task.train, 12), (task.test, 5)):
        assert len(split) == n and split.features.shape[2] == 40
        tl = split.target_lengths
        assert 1 <= int(tl.min()) and int(tl.max()) <= 4
        for row, k in zip(split.targets, tl.tolist()):
            assert 1 <= int(row[:k].min()) and int(row[:k].max()) <= 10 and int(row[k:].abs().sum()) == 0
        for feats, t in zip(split.features, split.lengths.tolist()):
            assert float(feats[t:].abs().sum()) == 0.0
    # global CMVN from the training utterances: zero mean, unit variance over the valid frames
    valid = torch.cat([f[:t] for f, t in zip(task.train.features, task.train.lengths.tolist())])
    assert torch.allclose(valid.mean(0), torch.zeros(40), atol=1e-4)
    assert torch.allclose(valid.var(0, unbiased=False), torch.ones(40), atol=1e-3)
    # the frame count is the one of the concatenated waveform: at least the digits' own audio
    lengths = {(r.speaker, r.digit, r.index): r.waveform.numel() for r in recs}
    shortest = min(lengths.values())
    assert int(task.train.lengths.min()) >= frame_count(shortest, 8000)
    other = connected_digits(recs, **{**kw, "seed": 4})
    assert not torch.equal(other.train.targets, task.train.targets)


def test_connected_digits_test_set_does_not_depend_on_the_training_size(tmp_path):
    recs = load_fsdd(_fake_fsdd(tmp_path))
    kw = dict(n_test=5, max_digits=4, seed=3, test_speakers=("cy",), train_indices=(1, 2))
    small, large = connected_digits(recs, n_train=12, **kw), connected_digits(recs, n_train=13, **kw)
    assert torch.equal(small.test.targets, large.test.targets)
    assert torch.equal(small.test.lengths, large.test.lengths)
    assert torch.equal(small.train.targets, large.train.targets[:12])  # the first 12 are the same utterances


def test_connected_digits_bad_arguments_name_the_argument(tmp_path):
    recs = load_fsdd(_fake_fsdd(tmp_path))
    with pytest.raises(ValueError, match="test_speakers: expected a non-empty proper subset"):
        connected_digits(recs, n_train=2, n_test=2, test_speakers=("zed",))
    with pytest.raises(ValueError, match="test_speakers: expected a non-empty proper subset"):
        connected_digits(recs, n_train=2, n_test=2, test_speakers=("ann", "bob", "cy"))
    with pytest.raises(ValueError, match="n_train: expected an int >= 1"):
        connected_digits(recs, n_train=0, n_test=2, test_speakers=("cy",))
    with pytest.raises(ValueError, match="recordings: speaker 'ann' has no usable take"):
        connected_digits(recs, n_train=2, n_test=2, test_speakers=("cy",), train_indices=(5, 49))


# --- the real recordings -------------------------------------------------------------------------


def test_real_fsdd_has_3000_verified_takes_of_six_speakers():
    recs = load_fsdd(_real_root(), verify=True)
    assert len(recs) == 3000
    assert tuple(sorted({r.speaker for r in recs})) == SPEAKERS
    assert {r.index for r in recs} == set(range(50))
    assert all(r.waveform.abs().max() <= 1.0 for r in recs[::97])


def test_real_connected_digits_small_task():
    task = connected_digits(n_train=20, n_test=6, seed=0, root=_real_root())
    assert task.test_speakers == ("theo",)
    assert set(task.test.speakers) == {"theo"} and "theo" not in task.train.speakers
    assert task.train.features.shape[0] == 20 and int(task.train.target_lengths.max()) <= 7
    assert connected_digits(n_train=20, n_test=6, seed=0, root=_real_root()) is task  # cached
