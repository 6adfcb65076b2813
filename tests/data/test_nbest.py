"""N-best container and file forms: round trips, Kaldi/TSV layouts, and one-line errors for malformed input."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import torch

from ebms.data.nbest import (
    TSV_HEADER,
    NBest,
    read_kaldi_nbest,
    read_nbest_tsv,
    read_references,
    write_kaldi_nbest,
    write_nbest_tsv,
    write_references,
)
from ebms.errors import DataError


def _example() -> NBest:
    return NBest.from_lists(
        ["utt-a", "b"],
        [[["the", "cat"], ["a", "cat"], []], [["x"]]],
        acoustic=[[-1.5, -2.0, -1e-17], [0.1 + 0.2]],
        lm=[[-3.25, -4.0, -7.0], [-0.0]],
    )


def _write(path: Path, text: str) -> Path:
    path.write_text(text, encoding="utf-8")
    return path


def test_container_views_are_consistent() -> None:
    nb = _example()
    assert len(nb) == 4 and nb.num_utterances == 2
    assert nb.sizes().tolist() == [3, 1]
    assert nb.word_counts().tolist() == [2, 2, 0, 1]
    assert nb.first().tolist() == [0, 3]
    assert nb.padded(torch.arange(4.0), -1.0).tolist() == [[0.0, 1.0, 2.0], [3.0, -1.0, -1.0]]
    sub = nb.subset(["b"])
    assert sub.utt_ids == ("b",) and sub.hypotheses == (("x",),) and sub.utterance.tolist() == [0]


def test_kaldi_round_trip_is_exact(tmp_path: Path) -> None:
    nb = _example()
    paths = write_kaldi_nbest(nb, tmp_path / "kaldi")
    back = read_kaldi_nbest(paths["text"], ac_cost=paths["ac_cost"], lm_cost=paths["lm_cost"])
    assert back.equal(nb)
    lines = paths["text"].read_text().splitlines()
    assert lines == ["utt-a-1 the cat", "utt-a-2 a cat", "utt-a-3", "b-1 x"]
    # costs are negated log-likelihoods
    assert paths["ac_cost"].read_text().splitlines()[0] == "utt-a-1 1.5"


def test_tsv_round_trip_is_exact(tmp_path: Path) -> None:
    nb = _example()
    path = write_nbest_tsv(nb, tmp_path / "n.tsv")
    assert path.read_text().splitlines()[0] == TSV_HEADER
    assert path.read_text().splitlines()[1] == "utt-a\t1\t-1.5\t-3.25\tthe cat"
    assert read_nbest_tsv(path).equal(nb)


def test_references_round_trip(tmp_path: Path) -> None:
    refs = {"u1": ["a", "b"], "u-2": []}
    assert read_references(write_references(refs, tmp_path / "ref.txt")) == refs


def test_readers_sort_by_rank_and_keep_utterance_order(tmp_path: Path) -> None:
    text = _write(tmp_path / "text", "z-2 b\n\nz-1 a\ny-1 c\n")
    nb = read_kaldi_nbest(text)
    assert nb.utt_ids == ("z", "y") and nb.hypotheses == (("a",), ("b",), ("c",))
    assert nb.rank.tolist() == [1, 2, 1] and nb.acoustic.tolist() == [0.0, 0.0, 0.0]
    tsv = _write(tmp_path / "n.tsv", "q\t3\t-1\t-2\tw v\nq\t1\t0\t0\t\n")  # no header; empty hypothesis
    nb = read_nbest_tsv(tsv)
    assert nb.rank.tolist() == [1, 3] and nb.hypotheses == ((), ("w", "v"))


# --- malformed input: one line naming the file and line --------------------------------------------
@pytest.mark.parametrize(("text", "line", "what"), [
    ("utt1 a b\n", 1, "expected a key <utt>-<n> with n >= 1; got 'utt1'"),
    ("u-1 a\nu-x a\n", 2, "got 'u-x'"),
    ("u-0 a\n", 1, "n >= 1; got 'u-0'"),
    ("-1 a\n", 1, "got '-1'"),
    ("u-1 a\nu-1 b\n", 2, "expected each key once; got 'u-1' again"),
])
def test_kaldi_text_errors_name_file_and_line(tmp_path: Path, text: str, line: int, what: str) -> None:
    path = _write(tmp_path / "text", text)
    with pytest.raises(DataError) as err:
        read_kaldi_nbest(path)
    msg = str(err.value)
    assert msg.startswith(f"{path}:{line}: ") and what in msg and "\n" not in msg


@pytest.mark.parametrize(("costs", "line", "what"), [
    ("u-1 1.0 2.0\n", 1, "expected '<utt>-<n> <cost>'"),
    ("u-1\n", 1, "expected '<utt>-<n> <cost>'"),
    ("u-1 abc\n", 1, "expected a number; got 'abc'"),
    ("u-1 inf\n", 1, "expected a finite number; got 'inf'"),
    ("u-1 nan\n", 1, "expected a finite number; got 'nan'"),
    ("u-1 1\nu-1 2\n", 2, "expected each key once"),
    ("u-1 1\nv-1 2\n", 2, "expected a key of the text file; got 'v-1'"),
])
def test_kaldi_cost_errors_name_file_and_line(tmp_path: Path, costs: str, line: int, what: str) -> None:
    text = _write(tmp_path / "text", "u-1 a\n")
    path = _write(tmp_path / "ac_cost", costs)
    with pytest.raises(DataError) as err:
        read_kaldi_nbest(text, ac_cost=path)
    msg = str(err.value)
    assert msg.startswith(f"{path}:{line}: ") and what in msg and "\n" not in msg


def test_kaldi_cost_file_missing_a_key_is_named(tmp_path: Path) -> None:
    text = _write(tmp_path / "text", "u-1 a\nu-2 b\n")
    path = _write(tmp_path / "lm_cost", "u-1 3\n")
    with pytest.raises(DataError, match=r"lm_cost: expected a cost for every key of the text file; got none for "
                                        r"'u-2' \(1 missing\)$"):
        read_kaldi_nbest(text, lm_cost=path)


def test_empty_files_are_refused(tmp_path: Path) -> None:
    with pytest.raises(DataError, match="text: expected at least one hypothesis line; got an empty file"):
        read_kaldi_nbest(_write(tmp_path / "text", "\n\n"))
    with pytest.raises(DataError, match="expected at least one hypothesis line; got none"):
        read_nbest_tsv(_write(tmp_path / "n.tsv", TSV_HEADER + "\n"))


@pytest.mark.parametrize(("row", "what"), [
    ("u\t1\t0\t0", "expected 5 tab-separated fields (utt_id, rank, acoustic_score, lm_score, hypothesis); got 4"),
    ("u\t1\t0\t0\ta\tb", "got 6"),
    ("u v\t1\t0\t0\ta", "expected an utterance id without spaces; got 'u v'"),
    ("\t1\t0\t0\ta", "expected an utterance id without spaces; got ''"),
    ("u\t0\t0\t0\ta", "expected a rank >= 1; got '0'"),
    ("u\tone\t0\t0\ta", "expected a rank >= 1; got 'one'"),
    ("u\t1\tx\t0\ta", "expected a number; got 'x'"),
    ("u\t1\t0\t-inf\ta", "expected a finite number; got '-inf'"),
    ("u\t1\t0\t0\ta\nu\t1\t0\t0\tb", "expected each (utt_id, rank) once; got ('u', 1) again"),
])
def test_tsv_errors_name_file_and_line(tmp_path: Path, row: str, what: str) -> None:
    path = _write(tmp_path / "n.tsv", TSV_HEADER + "\n" + row + "\n")
    line = 1 + row.count("\n") + 1
    with pytest.raises(DataError) as err:
        read_nbest_tsv(path)
    msg = str(err.value)
    assert msg.startswith(f"{path}:{line}: ") and what in msg and "\n" not in msg


def test_reference_duplicate_is_named(tmp_path: Path) -> None:
    path = _write(tmp_path / "ref", "u a b\nv c\nu d\n")
    with pytest.raises(DataError, match=r"ref:3: expected each utterance once; got 'u' again$"):
        read_references(path)


# --- container validation ---------------------------------------------------------------------------
def _args(**over: object) -> dict[str, object]:
    base: dict[str, object] = dict(utt_ids=["a", "b"], hypotheses=[["x"], ["y"], []],
                                   utterance=torch.tensor([0, 0, 1]), rank=torch.tensor([1, 2, 1]),
                                   acoustic=torch.zeros(3, dtype=torch.float64))
    base.update(over)
    return base


@pytest.mark.parametrize(("over", "exc", "what"), [
    (dict(utt_ids=["a", "a"]), ValueError, "utt_ids: expected distinct ids"),
    (dict(utt_ids=["a", "b c"]), ValueError, "utt_ids: expected non-empty ids without whitespace; got 'b c' at 1"),
    (dict(hypotheses=[["x y"], ["y"], []]), ValueError, "hypotheses: expected words without whitespace"),
    (dict(utterance=torch.tensor([0, 1, 0])), ValueError, "utterance: expected non-decreasing indices"),
    (dict(utterance=torch.tensor([0, 0, 0])), ValueError, "covering 0..1"),
    (dict(rank=torch.tensor([2, 2, 1])), ValueError, "rank: expected ranks >= 1, strictly increasing"),
    (dict(rank=torch.tensor([0, 1, 1])), ValueError, "rank: expected ranks >= 1"),
    (dict(rank=torch.tensor([1.0, 2.0, 1.0])), TypeError, "rank: expected an integer tensor"),
    (dict(acoustic=torch.zeros(2)), ValueError, "acoustic: expected shape (3,) (one per hypothesis); got (2,)"),
    (dict(acoustic=torch.tensor([0.0, float("nan"), 0.0])), ValueError, "acoustic: expected a finite tensor"),
    (dict(acoustic=torch.zeros(3, dtype=torch.long)), TypeError, "acoustic: expected a floating-point tensor"),
    (dict(utt_ids=[], hypotheses=[], utterance=torch.zeros(0, dtype=torch.long),
          rank=torch.zeros(0, dtype=torch.long), acoustic=torch.zeros(0)), ValueError, "expected at least one"),
])
def test_container_validation_messages(over: dict[str, object], exc: type, what: str) -> None:
    with pytest.raises(exc) as err:
        NBest(**_args(**over))  # type: ignore[arg-type]
    assert what in str(err.value)


def test_from_lists_checks_lengths() -> None:
    with pytest.raises(ValueError, match=r"hypotheses\[0\]: expected >= 1 hypotheses with one acoustic"):
        NBest.from_lists(["a"], [[["x"], ["y"]]], acoustic=[[0.0]])
    with pytest.raises(ValueError, match="expected one list per utterance"):
        NBest.from_lists(["a", "b"], [[["x"]]], acoustic=[[0.0]])


def test_subset_refuses_unknown_ids() -> None:
    with pytest.raises(ValueError, match=r"utt_ids: expected ids of this n-best set; got unknown \['zz'\]"):
        _example().subset(["zz"])


def test_non_utf8_and_nul_lines_are_data_errors_naming_file_and_line(tmp_path: Path) -> None:
    path = tmp_path / "text"
    path.write_bytes("utt1-1 a b\nutt1-2 caf\u00e9\n".encode("latin-1"))
    with pytest.raises(DataError, match=rf"^{re.escape(str(path))}:2: not UTF-8 text \(byte 0xe9 at column 11: "
                                        r"invalid continuation byte\); convert the file to UTF-8$"):
        read_kaldi_nbest(path)
    path.write_bytes(b"utt1-1 a b\nutt1-2 c\x00d\n")
    with pytest.raises(DataError, match=rf"^{re.escape(str(path))}:2: a NUL character at column 9: not a text file$"):
        read_kaldi_nbest(path)
    tsv = tmp_path / "n.tsv"
    tsv.write_bytes(b"u\t1\t0.5\t-1.0\tcaf\xe9\n")
    with pytest.raises(DataError, match=r"n\.tsv:1: not UTF-8 text"):
        read_nbest_tsv(tsv)
    path.write_bytes("\ufeffutt1-1 a b\n".encode())  # a byte-order mark is not part of the first key
    assert list(read_kaldi_nbest(path).utt_ids) == ["utt1"]
