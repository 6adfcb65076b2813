"""The run files a task keeps beside its checkpoints (``ebms.train.run_files``, issue 23)."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest
import torch

from ebms.errors import CheckpointError, DataError
from ebms.train.run_files import (
    changed_data,
    dump_json,
    file_identity,
    fingerprint,
    read_run_files,
    stored_json,
    stored_strings,
    stored_word_vocabulary,
    write_run_files,
)


def test_written_files_read_back_with_the_identity_that_records_them(tmp_path: Path) -> None:
    files = {"vocab.json": dump_json({"format": "f", "version": 1, "tokens": ["</s>", "é"]}), "base.json": b"{}\n"}
    assert [p.name for p in write_run_files(tmp_path, files)] == ["base.json", "vocab.json"]
    identity = {"model.kind": "lstm", **file_identity(files)}
    assert identity["file.vocab.json"] == hashlib.sha256(files["vocab.json"]).hexdigest()
    assert read_run_files(tmp_path, identity) == files
    assert read_run_files(tmp_path, {"model.kind": "lstm"}) == {}  # a checkpoint that records none
    assert not list(tmp_path.glob(".*.tmp"))


def test_a_missing_or_altered_file_is_one_line_naming_it(tmp_path: Path) -> None:
    files = {"vocab.json": b'{"a": 1}\n'}
    write_run_files(tmp_path, files)
    identity = file_identity(files)
    (tmp_path / "vocab.json").write_bytes(b'{"a": 2}\n')
    with pytest.raises(CheckpointError, match=rf"^{tmp_path}/vocab.json: altered since the run was trained \(sha256 "):
        read_run_files(tmp_path, identity)
    (tmp_path / "vocab.json").unlink()
    with pytest.raises(CheckpointError, match=rf"^{tmp_path}/vocab.json: missing; the run's checkpoints were trained"):
        read_run_files(tmp_path, identity)
    with pytest.raises(ValueError, match="files: expected plain file names"):
        write_run_files(tmp_path, {"../x": b""})


def test_json_is_canonical_and_checked_on_reading() -> None:
    a, b = dump_json({"b": [1, 2], "a": "é"}), dump_json({"a": "é", "b": [1, 2]})
    assert a == b == '{"a":"é","b":[1,2]}\n'.encode()
    files = {"v.json": dump_json({"format": "x", "version": 1, "k": ["a", "b"]}), "bad.json": b"{not json"}
    payload = stored_json(files, "v.json", "x")
    assert stored_strings(payload, "k", "v.json") == ["a", "b"]
    for name, fmt, match in (("v.json", "y", "expected format 'y' version 1; got \\('x', 1\\)"),
                             ("bad.json", "x", "not a JSON run file"), ("absent.json", "x", "record no such file")):
        with pytest.raises(CheckpointError, match=match):
            stored_json(files, name, fmt)
    with pytest.raises(CheckpointError, match="expected a list of strings under 'n'"):
        stored_strings({"n": [1]}, "n", "v.json")


def test_the_fingerprint_sees_values_shapes_and_dtypes() -> None:
    x = torch.tensor([[1, 2], [3, 0]])
    prints = {fingerprint(x), fingerprint(x.reshape(4)), fingerprint(x.int()), fingerprint(x + (x == 0).long()),
              fingerprint(x, x)}
    assert len(prints) == 5 and fingerprint(x) == fingerprint(x.clone())


def test_a_stored_word_vocabulary_encodes_like_the_fitted_one() -> None:
    from ebms.data.conll import Sentence
    from ebms.data.vocab import WordVocabulary

    sents = [Sentence(tuple((w, "X", "O") for w in ws)) for ws in (["a", "b", "a", "1"], ["b", "7"])]
    fitted = WordVocabulary(sents, min_count=1)
    payload = json.loads(dump_json({"words": fitted.words, "chars": fitted.chars}))
    stored = stored_word_vocabulary(payload, "vocab.json", chars=True)
    for a, b in zip(fitted.encode(sents, chars=True), stored.encode(sents, chars=True)):
        assert torch.equal(a, b)
    assert isinstance(changed_data("data.root", "the x sentences", "vocab.json"), DataError)
