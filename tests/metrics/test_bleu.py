"""Corpus BLEU through sacreBLEU: agreement with the package, hand cases, length buckets."""

from __future__ import annotations

import builtins
from typing import Any

import pytest

from ebms.data.text import Vocabulary
from ebms.metrics.bleu import bleu_by_length, corpus_bleu
from ebms.sequences import Sequences

sacrebleu = pytest.importorskip("sacrebleu")

HYPS = ["the cat sat on a mat", "a dog ran", "birds fly over the old house today", "it rains"]
REFS = ["the cat sat on the mat", "the dog ran away", "birds fly over the house", "it is raining now"]


def test_corpus_bleu_equals_sacrebleu_on_the_same_strings() -> None:
    expected = sacrebleu.corpus_bleu(HYPS, [REFS]).score
    assert corpus_bleu(HYPS, REFS) == pytest.approx(expected, rel=1e-12)
    assert 0.0 < expected < 100.0
    none = sacrebleu.corpus_bleu(HYPS, [REFS], tokenize="none").score
    assert corpus_bleu(HYPS, REFS, tokenize="none") == pytest.approx(none, rel=1e-12)


def test_identical_hypotheses_score_100_and_disjoint_ones_0() -> None:
    assert corpus_bleu(REFS, REFS) == pytest.approx(100.0)
    assert corpus_bleu(["x y z w v", "u t s r"], ["a b c d e", "f g h i"]) == 0.0


def test_token_id_sequences_are_read_through_the_vocabulary() -> None:
    vocab = Vocabulary.build([h.split() for h in HYPS + REFS])
    hyps, refs = vocab.encode([h.split() for h in HYPS]), vocab.encode([r.split() for r in REFS])
    assert corpus_bleu(hyps, refs, vocab=vocab) == pytest.approx(corpus_bleu(HYPS, REFS), rel=1e-12)
    assert corpus_bleu(hyps, REFS, vocab=vocab) == pytest.approx(corpus_bleu(HYPS, REFS), rel=1e-12)


def test_buckets_hold_the_sentences_of_their_reference_length() -> None:
    # reference lengths: 6, 4, 5, 4 tokens
    out = bleu_by_length(HYPS, REFS, buckets=((0, 5), (5, 6), (6, 100), (100, None)))
    assert [(b.low, b.high, b.sentences) for b in out] == [(0, 5, 2), (5, 6, 1), (6, 100, 1), (100, None, 0)]
    assert out[0].bleu == pytest.approx(corpus_bleu([HYPS[1], HYPS[3]], [REFS[1], REFS[3]]), rel=1e-12)
    assert out[1].bleu == pytest.approx(corpus_bleu(HYPS[2:3], REFS[2:3]), rel=1e-12)
    assert out[2].bleu == pytest.approx(corpus_bleu(HYPS[:1], REFS[:1]), rel=1e-12)
    assert out[3].bleu is None


def test_buckets_of_sequences_use_their_lengths_and_the_paper_defaults() -> None:
    refs = Sequences.from_lists([[2] * 3, [2] * 30, [2] * 60, [2] * 24])
    hyps = Sequences.from_lists([[2] * 3, [3] * 30, [2] * 60, [2] * 24])
    vocab = Vocabulary(["a", "b"])
    out = bleu_by_length(hyps, refs, vocab=vocab)
    assert [(b.low, b.high, b.sentences) for b in out] == [(0, 25, 2), (25, 50, 1), (50, None, 1)]
    assert out[0].bleu == pytest.approx(100.0) and out[1].bleu == 0.0 and out[2].bleu == pytest.approx(100.0)


def test_inputs_are_checked() -> None:
    with pytest.raises(ValueError, match="references: expected one per hypothesis \\(2\\); got 1"):
        corpus_bleu(["a", "b"], ["a"])
    with pytest.raises(ValueError, match="hypotheses: expected at least one sentence"):
        corpus_bleu([], [])
    with pytest.raises(TypeError, match="vocab: hypotheses are token-id Sequences"):
        corpus_bleu(Sequences.from_lists([[2]]), ["a"])
    with pytest.raises(TypeError, match="hypotheses: expected a list of strings or token-id Sequences; got str"):
        corpus_bleu("a b", ["a b"])
    with pytest.raises(TypeError, match="references: expected strings; got int at index 1"):
        corpus_bleu(["a", "b"], ["a", 3])  # type: ignore[list-item]
    with pytest.raises(ValueError, match=r"buckets\[1\]: expected low < high; got \(5, 5\)"):
        bleu_by_length(HYPS, REFS, buckets=((0, 5), (5, 5)))
    with pytest.raises(ValueError, match=r"buckets\[0\]: expected a pair"):
        bleu_by_length(HYPS, REFS, buckets=[(0, 5, 9)])  # type: ignore[list-item]
    with pytest.raises(ValueError, match=r"buckets\[0\] low: expected an int >= 0; got -1"):
        bleu_by_length(HYPS, REFS, buckets=((-1, 5),))
    with pytest.raises(ValueError, match="buckets: expected a non-empty list"):
        bleu_by_length(HYPS, REFS, buckets=())


def test_missing_sacrebleu_names_the_install_command(monkeypatch: pytest.MonkeyPatch) -> None:
    real_import = builtins.__import__

    def fake_import(name: str, *args: Any, **kwargs: Any) -> Any:
        if name == "sacrebleu":
            raise ImportError("No module named 'sacrebleu'")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", fake_import)
    with pytest.raises(ImportError, match="pip install sacrebleu"):
        corpus_bleu(["a"], ["a"])


@pytest.mark.parametrize("buckets, message", [
    (((0, 10), (5, 20)), r"buckets\[0\] \(0, 10\) and buckets\[1\] \(5, 20\) overlap"),
    (((25, 50), (0, 30)), r"buckets\[1\] \(0, 30\) and buckets\[0\] \(25, 50\) overlap"),
    (((0, 25), (50, None), (60, 70)), r"buckets\[1\] \(50, None\) and buckets\[2\] \(60, 70\) overlap"),
    (((0, 100), (10, 20), (30, 40)), r"buckets\[0\] \(0, 100\) and buckets\[1\] \(10, 20\) overlap"),
    (((3, 9), (3, 4)), r"buckets\[0\] \(3, 9\) and buckets\[1\] \(3, 4\) overlap"),
])
def test_overlapping_buckets_are_refused_naming_both(buckets, message) -> None:
    with pytest.raises(ValueError, match=r"^buckets: " + message + r" \(lengths in both would be counted twice\); "
                                         r"give disjoint \[low, high\) ranges$"):
        bleu_by_length(HYPS, REFS, buckets=buckets)


def test_disjoint_buckets_with_gaps_in_any_order_and_list_pairs_are_accepted() -> None:
    out = bleu_by_length(HYPS, REFS, buckets=[[50, None], (0, 25)])
    assert [(b.low, b.high) for b in out] == [(50, None), (0, 25)]
    assert sum(b.sentences for b in bleu_by_length(HYPS, REFS, buckets=((0, 25), (25, 50), (50, None)))) == len(HYPS)


@pytest.mark.parametrize("call", [lambda t: corpus_bleu(HYPS, REFS, tokenize=t),
                                  lambda t: bleu_by_length(HYPS, REFS, tokenize=t)])
def test_unknown_tokenize_is_one_line_naming_the_argument_and_the_choices(call) -> None:
    with pytest.raises(ValueError, match=r"^tokenize: expected one of sacreBLEU's tokenisers \('none', .*'13a'.*\); "
                                         r"got 'foo'$"):
        call("foo")
    with pytest.raises(TypeError, match=r"^tokenize: expected a sacreBLEU tokeniser name \(a str\); got NoneType$"):
        call(None)
    assert corpus_bleu(HYPS, REFS, tokenize="none") == pytest.approx(
        sacrebleu.corpus_bleu(HYPS, [REFS], tokenize="none").score)
