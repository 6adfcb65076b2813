"""Tests for ebms.metrics.chunking: conlleval's chunk precision/recall/F1 (percent)."""

from __future__ import annotations

import random

import pytest

from ebms.data.conll import iob_to_iobes, iobes_to_iob
from ebms.metrics import ChunkScores, TypeScores, conlleval


def _counts(r: ChunkScores) -> tuple[int, int, int]:
    return r.n_correct, r.n_pred, r.n_true


def test_perfect_prediction_scores_100():
    gold = [["B-NP", "I-NP", "O", "B-VP"], ["O", "I-PP"]]
    r = conlleval(gold, gold)
    assert (r.precision, r.recall, r.f1, r.accuracy) == (100.0, 100.0, 100.0, 100.0)
    assert _counts(r) == (3, 3, 3)


def test_hand_computed_example_with_per_type_scores_and_report():
    # gold chunks: PER(0,2) LOC(3,4) | ORG(0,1); predicted: PER(0,2) ORG(3,4) | ORG(0,2); only PER matches.
    gold = [["B-PER", "I-PER", "O", "B-LOC"], ["B-ORG", "O"]]
    pred = [["B-PER", "I-PER", "O", "B-ORG"], ["B-ORG", "I-ORG"]]
    r = conlleval(gold, pred)
    assert _counts(r) == (1, 3, 3)
    assert r.precision == pytest.approx(100 / 3) and r.recall == pytest.approx(100 / 3)
    assert r.f1 == pytest.approx(100 / 3)
    assert (r.n_tokens, r.n_correct_tags) == (6, 4) and r.accuracy == pytest.approx(400 / 6)
    assert list(r.per_type) == ["LOC", "ORG", "PER"]
    assert r.per_type["LOC"] == TypeScores(0.0, 0.0, 0.0, 0, 0, 1)
    assert r.per_type["ORG"] == TypeScores(0.0, 0.0, 0.0, 0, 2, 1)
    assert r.per_type["PER"] == TypeScores(100.0, 100.0, 100.0, 1, 1, 1)
    assert r.report() == (
        "processed 6 tokens with 3 phrases; found: 3 phrases; correct: 1.\n"
        "accuracy:  66.67%; precision:  33.33%; recall:  33.33%; FB1:  33.33\n"
        "              LOC: precision:   0.00%; recall:   0.00%; FB1:   0.00  0\n"
        "              ORG: precision:   0.00%; recall:   0.00%; FB1:   0.00  2\n"
        "              PER: precision: 100.00%; recall: 100.00%; FB1: 100.00  1\n"
    )


def test_missed_chunk_lowers_recall_only():
    r = conlleval([["B-NP", "I-NP", "O", "B-VP"]], [["B-NP", "I-NP", "O", "O"]])
    assert _counts(r) == (1, 1, 2)
    assert (r.precision, r.recall) == (100.0, 50.0) and r.f1 == pytest.approx(200 / 3)


def test_a_chunk_counts_only_when_both_boundaries_and_type_match():
    assert _counts(conlleval([["B-NP", "I-NP"]], [["B-NP", "O"]])) == (0, 1, 1)  # end differs
    assert _counts(conlleval([["B-NP", "I-NP"]], [["O", "B-NP"]])) == (0, 1, 1)  # start differs
    assert _counts(conlleval([["B-NP", "I-NP"]], [["B-VP", "I-VP"]])) == (0, 1, 1)  # type differs
    assert _counts(conlleval([["B-NP", "I-NP"]], [["B-NP", "B-NP"]])) == (0, 2, 1)  # split in two


def test_i_after_o_and_type_change_start_chunks_as_in_conlleval():
    # "O I-NP I-NP" is the chunk NP(1,3), the same as "O B-NP I-NP"
    r = conlleval([["O", "B-NP", "I-NP"]], [["O", "I-NP", "I-NP"]])
    assert _counts(r) == (1, 1, 1) and r.accuracy == pytest.approx(200 / 3)
    # "B-NP I-VP" is NP(0,1) + VP(1,2)
    assert _counts(conlleval([["B-NP", "B-VP"]], [["B-NP", "I-VP"]])) == (2, 2, 2)


def test_chunks_do_not_cross_sentence_breaks():
    r = conlleval([["B-NP"], ["I-NP"]], [["B-NP"], ["B-NP"]])
    assert _counts(r) == (2, 2, 2)


def test_iobes_equivalence_leaves_every_count_unchanged():
    rng = random.Random(0)
    tags = ["O", "B-A", "I-A", "B-B", "I-B"]
    gold, pred = [], []
    for _ in range(200):
        g = [rng.choice(tags) for _ in range(rng.randint(1, 9))]
        gold.append(g)
        pred.append([rng.choice(tags) if rng.random() < 0.4 else t for t in g])
    base = conlleval(gold, pred)
    assert 0 < base.f1 < 100
    iobes = conlleval([iob_to_iobes(s) for s in gold], [iob_to_iobes(s) for s in pred])
    mixed = conlleval(gold, [iob_to_iobes(s) for s in pred])
    back = conlleval([iobes_to_iob(iob_to_iobes(s)) for s in gold], pred)
    for other in (iobes, mixed, back):
        assert _counts(other) == _counts(base) and other.f1 == base.f1
        assert other.per_type == base.per_type


def test_empty_input_scores_zero_without_nan():
    r = conlleval([], [])
    assert (r.precision, r.recall, r.f1, r.accuracy, r.n_tokens) == (0.0, 0.0, 0.0, 0.0, 0)
    assert r.report() == "processed 0 tokens with 0 phrases; found: 0 phrases; correct: 0.\n"
    r = conlleval([["O"]], [["B-NP"]])
    assert (r.precision, r.recall, r.f1) == (0.0, 0.0, 0.0)


def test_bad_input_raises_naming_the_argument():
    with pytest.raises(ValueError, match=r"pred_tags: expected 2 sentences like true_tags; got 1"):
        conlleval([["O"], ["O"]], [["O"]])
    with pytest.raises(ValueError, match=r"pred_tags: sentence 1 has 1 tags; true_tags has 2"):
        conlleval([["O"], ["O", "O"]], [["O"], ["O"]])
    with pytest.raises(ValueError, match=r"true_tags: sentence 0: tag: expected .*got 'NP'"):
        conlleval([["NP"]], [["O"]])
    with pytest.raises(ValueError, match=r"pred_tags: sentence 0: tag: expected .*got 'BNP'"):
        conlleval([["O"]], [["BNP"]])
    with pytest.raises(TypeError, match=r"true_tags: expected a list of sentences .*got str"):
        conlleval("B-NP", ["B-NP"])
    with pytest.raises(TypeError, match=r"pred_tags: .*sentence 0 is str 'O'"):
        conlleval([["O"]], ["O"])
