"""Tests for ebms.data.conll: column reader, CoNLL-2000/2002 loaders, tag-scheme helpers."""

from __future__ import annotations

import hashlib
import random
import zipfile
from pathlib import Path

import pytest
from _peak_memory import peak_mb

from ebms.data.conll import (
    MD5,
    Sentence,
    bio_to_spans,
    iob_to_iobes,
    iobes_to_iob,
    load_conll2000,
    load_conll2002,
    parse_tag,
    read_conll,
    spans_to_tags,
    tag_names,
    to_iob2,
)
from ebms.data.mnist import ChecksumError
from ebms.data.paths import DATA_ENV_VAR, data_root


def _real_zip(name: str) -> Path:
    path = data_root() / name / f"{name}.zip"
    if not path.is_file():
        pytest.skip(f"{path} absent: set {DATA_ENV_VAR} to the folder holding {name}/{name}.zip")
    return path


# --- read_conll -----------------------------------------------------------------------------


def test_read_conll_splits_on_blank_lines_and_skips_docstart():
    lines = ["-DOCSTART- -X- O", "", "a X B-NP", "b Y I-NP", "", "", "c Z O", "-DOCSTART- -X- O", "d Z O\n"]
    sents = read_conll(lines, columns=["word", "pos", "chunk"])
    assert [s.words for s in sents] == [["a", "b"], ["c"], ["d"]]
    assert sents[0].column("chunk") == ["B-NP", "I-NP"] == sents[0].tags
    assert sents[0] == Sentence((("a", "X", "B-NP"), ("b", "Y", "I-NP")), ("word", "pos", "chunk"))
    assert len(sents[1]) == 1


def test_read_conll_keeps_docstart_when_asked_and_honours_sep():
    sents = read_conll(["-DOCSTART-\tO", "New York\tB-LOC"], sep="\t", docstart="keep")
    assert sents[0].tokens == (("-DOCSTART-", "O"), ("New York", "B-LOC"))
    assert sents[0].columns is None


def test_read_conll_reads_a_latin1_file_when_told(tmp_path):
    path = tmp_path / "esp.txt"
    path.write_bytes("Espa\xf1a NC B-LOC\n".encode("latin-1"))
    assert read_conll(path, encoding="latin-1")[0].words == ["España"]
    with pytest.raises(ValueError, match=r"esp\.txt: not valid utf-8.*latin-1"):
        read_conll(path)


def test_read_conll_rejects_ragged_lines_and_bad_arguments():
    with pytest.raises(ValueError, match=r"line 2: expected 3 fields; got 2"):
        read_conll(["a X O", "b O"])
    with pytest.raises(ValueError, match=r"line 1: expected 2 fields; got 3"):
        read_conll(["a X O"], columns=["word", "tag"])
    with pytest.raises(ValueError, match=r"docstart: expected 'skip' or 'keep'; got 'drop'"):
        read_conll([], docstart="drop")
    with pytest.raises(ValueError, match=r"columns: expected a non-empty sequence"):
        read_conll([], columns=[])
    with pytest.raises(TypeError, match=r"path_or_lines: expected lines of str; got bytes at line 1"):
        read_conll([b"a O"])
    with pytest.raises(KeyError, match=r"key: expected one of the column names"):
        read_conll(["a O"])[0].column("tag")


# --- loaders on self-made files (no real data needed) -------------------------------------


def _fake_zip(folder: Path, name: str, member: str, text: str) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{name}.zip"
    with zipfile.ZipFile(path, "w") as zf:
        zf.writestr(f"{name}/{member}", text)
    return path


def test_loader_rejects_a_zip_whose_md5_differs_and_names_the_path(tmp_path, monkeypatch):
    path = _fake_zip(tmp_path / "conll2000", "conll2000", "test.txt", "He PRP B-NP\nran VBD B-VP\n")
    monkeypatch.setenv(DATA_ENV_VAR, str(tmp_path))
    with pytest.raises(ChecksumError, match=rf"{path}: md5 [0-9a-f]{{32}} differs .*{MD5['conll2000.zip']}"):
        load_conll2000("test")
    sents = load_conll2000("test", verify=False)
    assert sents[0].tokens == (("He", "PRP", "B-NP"), ("ran", "VBD", "B-VP"))
    assert sents[0].columns == ("word", "pos", "chunk")


def test_loader_rejects_a_tampered_copy_of_the_real_zip(tmp_path):
    raw = bytearray(_real_zip("conll2000").read_bytes())
    raw[100] ^= 0xFF  # inside the first member's compressed data; the central directory stays valid
    copy = tmp_path / "conll2000.zip"
    copy.write_bytes(bytes(raw))
    assert hashlib.md5(raw).hexdigest() != MD5["conll2000.zip"]
    with pytest.raises(ChecksumError, match=rf"{copy}: md5"):
        load_conll2000("test", root=copy)


def test_loader_reads_an_extracted_folder(tmp_path):
    (tmp_path / "conll2002").mkdir()
    (tmp_path / "conll2002" / "ned.testa").write_text("-DOCSTART- -DOCSTART- O\nDe Art O\nGent N B-LOC\n")
    sents = load_conll2002("ned", "testa", root=tmp_path)
    assert [s.tags for s in sents] == [["O", "B-LOC"]]
    (tmp_path / "train.txt").write_text("a DT B-NP\n\nb NN B-NP\n")
    assert len(load_conll2000("train", root=tmp_path)) == 2


def test_loaders_name_bad_arguments_and_missing_files(tmp_path):
    with pytest.raises(ValueError, match=r"split: expected 'train' or 'test'; got 'dev'"):
        load_conll2000("dev")
    with pytest.raises(ValueError, match=r"lang: expected 'esp' or 'ned'; got 'eng'"):
        load_conll2002("eng")
    with pytest.raises(ValueError, match=r"split: expected 'train', 'testa' or 'testb'; got 'test'"):
        load_conll2002("esp", "test")
    with pytest.raises(FileNotFoundError, match=r"conll2002/esp.train: not found; looked for .*conll2002.zip"):
        load_conll2002("esp", "train", root=tmp_path)


# --- real data: exact counts from shared/data/README.md -------------------------------------


@pytest.mark.parametrize(
    ("split", "n_sent", "n_tok", "n_chunks"), [("train", 8936, 211727, 106978), ("test", 2012, 47377, 23852)]
)
def test_conll2000_counts_match_the_shared_task(split, n_sent, n_tok, n_chunks):
    _real_zip("conll2000")
    sents = load_conll2000(split)
    assert (len(sents), sum(map(len, sents))) == (n_sent, n_tok)
    assert sum(len(bio_to_spans(s.tags)) for s in sents) == n_chunks
    assert all(len(row) == 3 for s in sents for row in s.tokens)


@pytest.mark.parametrize(
    ("lang", "split", "n_sent", "n_tok", "n_ent"),
    [
        ("esp", "train", 8323, 264715, 18797),
        ("esp", "testa", 1915, 52923, 4351),
        ("esp", "testb", 1517, 51533, 3558),
        ("ned", "train", 15806, 202644, 13344),
        ("ned", "testa", 2895, 37687, 2616),
        ("ned", "testb", 5195, 68875, 3941),
    ],
)
def test_conll2002_counts_match_the_readme(lang, split, n_sent, n_tok, n_ent):
    _real_zip("conll2002")
    sents = load_conll2002(lang, split)
    assert (len(sents), sum(map(len, sents))) == (n_sent, n_tok)
    assert sum(t.startswith("B-") for s in sents for t in s.tags) == n_ent
    # each Spanish split has one sentence opening with I- (an entity cut by a sentence break);
    # conlleval reads it as one more chunk
    opening_i = sum(s.tags[0].startswith("I-") for s in sents)
    assert opening_i == (1 if lang == "esp" else 0)
    assert sum(len(bio_to_spans(s.tags)) for s in sents) == n_ent + opening_i
    assert not any(s.words[0] == "-DOCSTART-" for s in sents)


def test_conll2002_spanish_decodes_accents():
    _real_zip("conll2002")
    words = {w for s in load_conll2002("esp", "train")[:5] for w in s.words}
    assert "subrayó" in words


# --- tag schemes ---------------------------------------------------------------------------


def test_parse_tag_splits_prefix_and_type_and_keeps_hyphenated_types():
    assert parse_tag("O") == ("O", "")
    assert parse_tag("B-NP") == ("B", "NP")
    assert parse_tag("S-B-X") == ("S", "B-X")


@pytest.mark.parametrize("bad", ["", "X-NP", "b-NP", "NP", "O-NP", "I- NP", "-NP", "X", "BNP", "O-"])
def test_malformed_tags_raise_naming_the_tag(bad):
    with pytest.raises(ValueError, match=rf"tag: expected 'O', one of B-/I-/E-/S- .*got {bad!r}"):
        bio_to_spans(["O", bad])
    with pytest.raises(TypeError, match=r"tag: expected a str; got int"):
        parse_tag(3)


def test_bio_to_spans_follows_conlleval_boundaries():
    assert bio_to_spans([]) == []
    assert bio_to_spans(["B-NP", "I-NP", "O", "B-VP"]) == [("NP", 0, 2), ("VP", 3, 4)]
    assert bio_to_spans(["O", "I-NP", "I-NP"]) == [("NP", 1, 3)]  # I- after O starts a chunk
    assert bio_to_spans(["B-NP", "I-VP", "I-VP"]) == [("NP", 0, 1), ("VP", 1, 3)]  # type change
    assert bio_to_spans(["B-NP", "B-NP", "I-NP"]) == [("NP", 0, 1), ("NP", 1, 3)]  # single-token B-
    assert bio_to_spans(["I-NP", "I-NP", "B-NP"]) == [("NP", 0, 2), ("NP", 2, 3)]  # IOB1


def test_bio_to_spans_reads_iobes():
    assert bio_to_spans(["S-NP", "S-NP"]) == [("NP", 0, 1), ("NP", 1, 2)]
    assert bio_to_spans(["B-NP", "E-NP", "B-NP", "E-NP"]) == [("NP", 0, 2), ("NP", 2, 4)]
    assert bio_to_spans(["B-NP", "S-NP", "E-NP"]) == [("NP", 0, 1), ("NP", 1, 2), ("NP", 2, 3)]
    assert bio_to_spans(["E-NP", "I-NP", "E-NP"]) == [("NP", 0, 1), ("NP", 1, 3)]


def test_iob_to_iobes_known_example_and_inverse():
    iob = ["B-NP", "I-NP", "O", "B-PP", "B-NP", "I-NP", "I-NP"]
    iobes = ["B-NP", "E-NP", "O", "S-PP", "B-NP", "I-NP", "E-NP"]
    assert iob_to_iobes(iob) == iobes
    assert iobes_to_iob(iobes) == iob
    assert iob_to_iobes(["O", "I-NP"]) == ["O", "S-NP"]  # IOB1 input is normalised


def test_scheme_conversions_keep_the_chunks_and_round_trip_iob2():
    rng = random.Random(0)
    tags = ["O", "B-A", "I-A", "B-B", "I-B"]
    for _ in range(300):
        seq = [rng.choice(tags) for _ in range(rng.randint(0, 9))]
        spans = bio_to_spans(seq)
        iobes = iob_to_iobes(seq)
        assert bio_to_spans(iobes) == spans
        iob2 = iobes_to_iob(iobes)
        assert iob2 == spans_to_tags(spans, len(seq))
        assert iobes_to_iob(iob_to_iobes(iob2)) == iob2


def test_to_iob2_rewrites_iob1_and_iobes_and_keeps_iob2():
    assert to_iob2(["I-NP", "I-NP", "O", "I-VP", "I-NP"]) == ["B-NP", "I-NP", "O", "B-VP", "B-NP"]  # IOB1
    assert to_iob2(["S-PER", "B-LOC", "E-LOC", "O"]) == ["B-PER", "B-LOC", "I-LOC", "O"]  # IOBES
    rng = random.Random(1)
    tags = ["O", "B-A", "I-A", "B-B", "I-B", "E-A", "S-B"]
    for _ in range(300):  # any input: strict IOB2 with the chunks conlleval reads, and a fixed point
        seq = [rng.choice(tags) for _ in range(rng.randint(0, 9))]
        iob2 = to_iob2(seq)
        assert bio_to_spans(iob2) == bio_to_spans(seq) and to_iob2(iob2) == iob2 == iobes_to_iob(seq)
        assert all(not t.startswith("I-") or prev[2:] == t[2:] and prev != "O" for prev, t in zip(["O", *iob2], iob2))


def test_tag_names_lists_distinct_tags_outside_first_then_sorted():
    assert tag_names([["B-NP", "O", "I-NP"], ["B-VP", "B-ADJP"], []]) == ["O", "B-ADJP", "B-NP", "B-VP", "I-NP"]
    assert tag_names(iter([("I-X", "B-X")])) == ["B-X", "I-X"]  # no "O": just sorted; any iterable of sequences
    assert tag_names([]) == []
    with pytest.raises(TypeError, match="tag_seqs\\[1\\]: expected a sequence of tags; got the string 'B-NP'"):
        tag_names([["O"], "B-NP"])


def test_spans_to_tags_rejects_overlaps_and_bad_scheme():
    with pytest.raises(ValueError, match=r"spans: expected disjoint chunks inside \[0, 3\); got \('A', 1, 4\)"):
        spans_to_tags([("A", 1, 4)], 3)
    with pytest.raises(ValueError, match=r"spans: expected disjoint chunks"):
        spans_to_tags([("A", 0, 2), ("B", 1, 2)], 3)
    with pytest.raises(ValueError, match=r"scheme: expected 'iob' or 'iobes'; got 'bilou'"):
        spans_to_tags([], 3, scheme="bilou")


# ---------------------------------------------------------------- resources: zip bombs and big files


def _bomb_zip(path: Path, member: str, mib: int) -> Path:
    """A zip whose ``member`` is ``mib`` MiB of the same line (compresses about 1000:1)."""
    line = b"the DT B-NP\n" * (1 << 16)  # 768 KiB
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_DEFLATED) as zf, zf.open(member, "w") as out:
        for _ in range(mib * (1 << 20) // len(line)):
            out.write(line)
    return path




def test_zip_bomb_with_verify_off_is_refused_by_its_declared_size(tmp_path):
    from ebms.errors import LimitExceeded

    path = _bomb_zip(tmp_path / "conll2000.zip", "conll2000/train.txt", 48)
    assert path.stat().st_size < 1 << 20
    peak, err = peak_mb(lambda: load_conll2000("train", path, verify=False, max_bytes=8 << 20))
    assert isinstance(err, LimitExceeded), err
    msg = str(err)
    assert "conll2000.zip: member conll2000/train.txt (declared uncompressed size) is 48.0 MiB" in msg
    assert "max_bytes=8388608" in msg and "pass max_bytes=50331648 to load_conll2000/load_conll2002" in msg
    assert peak < 2, peak  # nothing was decompressed


def test_zip_member_larger_than_it_declares_stops_at_the_declared_size(tmp_path):
    from ebms.errors import DataError

    path = _bomb_zip(tmp_path / "conll2000.zip", "conll2000/train.txt", 48)
    raw = bytearray(path.read_bytes())
    central = raw.rindex(b"PK\x01\x02")  # the member's central-directory entry
    lie = 1000
    raw[central + 24:central + 28] = lie.to_bytes(4, "little")  # uncompressed size it declares
    path.write_bytes(bytes(raw))
    peak, err = peak_mb(lambda: load_conll2000("train", path, verify=False))
    assert isinstance(err, DataError) and "conll2000.zip: " in str(err), err
    assert peak < 8, peak  # at most the declared 1000 bytes and one block, never 48 MiB


def test_sparse_zip_above_the_limit_is_refused_before_reading(tmp_path):
    from ebms.errors import LimitExceeded

    path = tmp_path / "conll2002.zip"
    with open(path, "wb") as f:
        f.truncate(2 << 30)
    with pytest.raises(LimitExceeded, match=r"conll2002.zip: the file is 2.0 GiB .* above the limit max_bytes="):
        load_conll2002("esp", "train", path, verify=False)
    with pytest.raises(LimitExceeded, match=r"conll2002.zip: the file is 2.0 GiB"):
        read_conll(path)


def test_damaged_zip_and_bad_text_are_data_errors_naming_the_file(tmp_path):
    from ebms.errors import DataError

    good = tmp_path / "good.zip"
    with zipfile.ZipFile(good, "w", compression=zipfile.ZIP_DEFLATED) as zf:
        zf.writestr("conll2000/train.txt", "He PRP B-NP\n" * 200)
    raw = bytearray(good.read_bytes())
    start = raw.index(b"conll2000/train.txt") + len("conll2000/train.txt")
    raw[start + 5:start + 40] = b"\xff" * 35  # scramble the deflate stream
    bad = tmp_path / "bad.zip"
    bad.write_bytes(bytes(raw))
    with pytest.raises(DataError, match=r"bad.zip: (member conll2000/train.txt is corrupt|not a readable zip)"):
        load_conll2000("train", bad, verify=False)
    (tmp_path / "x.txt").write_bytes(b"caf\xe9 NN O\n")
    with pytest.raises(DataError, match=r"x.txt: not valid utf-8 at line 1 .*pass encoding=.*'latin-1'"):
        read_conll(tmp_path / "x.txt")


def test_read_conll_names_the_line_of_bad_bytes_nul_characters_and_unknown_encodings(tmp_path):
    from ebms.errors import DataError

    path = tmp_path / "c.txt"
    path.write_bytes(b"a X O\nb Y O\n\nc\xe9 Z O\n")
    with pytest.raises(DataError, match=r"c\.txt: not valid utf-8 at line 4 \(invalid continuation byte\); pass "
                                        r"encoding= the file's encoding"):
        read_conll(path)
    path.write_bytes(b"a X O\nb\x00 Y O\n")
    with pytest.raises(DataError, match=r"c\.txt: line 2 holds a NUL character: not a text file in this encoding"):
        read_conll(path)
    with pytest.raises(DataError, match=r"<lines>: line 1 holds a NUL character"):
        read_conll(["a\0 X O"])
    with pytest.raises(ValueError, match=r"encoding: unknown text encoding 'utf-9'"):
        read_conll(path, encoding="utf-9")


def test_untyped_tags_are_chunks_of_type_empty_as_conlleval_reads_them():
    # conlleval splits "B" into prefix B and type "": B I O B B I -> chunks [0, 2), [3, 4), [4, 6)
    assert parse_tag("B") == ("B", "") and parse_tag("S") == ("S", "") and parse_tag("I-") == ("I", "")
    assert bio_to_spans(["B", "I", "O", "B", "B", "I"]) == [("", 0, 2), ("", 3, 4), ("", 4, 6)]
    assert bio_to_spans(["I", "I", "O", "I"]) == [("", 0, 2), ("", 3, 4)]  # IOB1: I after O starts a chunk
    assert iob_to_iobes(["B", "I", "O", "B"]) == ["B", "E", "O", "S"]
    assert to_iob2(["I", "I", "O", "I"]) == ["B", "I", "O", "B"]
    assert bio_to_spans(["B", "I-NP"]) == [("", 0, 1), ("NP", 1, 2)]  # a type change ends the chunk
