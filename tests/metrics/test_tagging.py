"""Tests for ebms.metrics.tagging: token F1 and accuracy equal scikit-learn's."""

from __future__ import annotations

import random

import pytest

from ebms.metrics.tagging import token_accuracy, token_f1


def _random_tags(seed: int) -> tuple[list[list[str]], list[list[str]]]:
    rng = random.Random(seed)
    tags = ["O", "B-PER", "I-PER", "B-LOC", "I-LOC", "B-MISC"]
    true, pred = [], []
    for _ in range(30):
        n = rng.randint(1, 8)
        t = [rng.choice(tags) for _ in range(n)]
        true.append(t)
        pred.append([x if rng.random() < 0.6 else rng.choice(tags[:-1]) for x in t])
    return true, pred


@pytest.mark.parametrize("average", ["weighted", "micro", "macro"])
@pytest.mark.parametrize("drop_o", [False, True])
def test_token_f1_equals_sklearn_on_flattened_lists(average, drop_o):
    metrics = pytest.importorskip("sklearn.metrics")
    true, pred = _random_tags(0)
    flat_t = [x for s in true for x in s]
    flat_p = [x for s in pred for x in s]
    labels = sorted(set(flat_t) - {"O"}) if drop_o else None
    want = metrics.f1_score(flat_t, flat_p, labels=labels, average=average, zero_division=0)
    assert token_f1(true, pred, labels=labels, average=average) == pytest.approx(want, abs=1e-12)
    assert token_accuracy(true, pred) == pytest.approx(metrics.accuracy_score(flat_t, flat_p))


def test_perfect_prediction_scores_one():
    true, _ = _random_tags(1)
    assert token_f1(true, true) == 1.0 and token_accuracy(true, true) == 1.0


def test_bad_inputs_are_named():
    with pytest.raises(ValueError, match="pred_seqs: expected 1 sequences"):
        token_f1([["O"]], [])
    with pytest.raises(ValueError, match=r"pred_seqs\[0\]: expected 2 tags"):
        token_accuracy([["O", "O"]], [["O"]])
    with pytest.raises(ValueError, match="average: expected"):
        token_f1([["O"]], [["O"]], average="samples")
    with pytest.raises(ValueError, match="true_seqs: expected at least one token"):
        token_f1([[]], [[]])
    with pytest.raises(ValueError, match="labels: expected at least one label"):
        token_f1([["O"]], [["O"]], labels=[])


@pytest.mark.parametrize("fn", [token_accuracy, token_f1])
def test_a_flat_tag_list_is_rejected_not_scored_by_characters(fn):
    # ["B-NP", "O"] read as two sentences of characters gave accuracy 4/5 for ["B-NP", "O"]
    # against ["I-NP", "O"] (1 of 2 tags right): a silent wrong figure.
    with pytest.raises(TypeError, match=r"true_seqs\[0\]: expected a sequence of tags .* got str 'B-NP'"):
        fn(["B-NP", "O"], ["I-NP", "O"])
    with pytest.raises(TypeError, match=r"pred_seqs\[0\]: expected a sequence of tags .* got str 'I-NP'"):
        fn([["B-NP"]], ["I-NP"])
    with pytest.raises(TypeError, match=r"true_seqs: expected a list of tag sequences .* got str"):
        fn("B-NP O", [["B-NP", "O"]])
    assert token_accuracy([["B-NP", "O"]], [["I-NP", "O"]]) == 0.5  # the same tags, wrapped as one sentence
