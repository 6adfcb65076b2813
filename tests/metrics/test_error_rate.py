"""Tests for ebms.metrics.error_rate: Levenshtein distance with its S/D/I split, corpus error rates."""

from __future__ import annotations

import functools
import random

import pytest

from ebms.metrics.error_rate import ErrorRate, edit_distance, error_rate


def _brute(ref: tuple, hyp: tuple) -> int:
    """Levenshtein distance by plain recursion over the three edit operations."""

    @functools.cache
    def d(i: int, j: int) -> int:
        if i == 0:
            return j
        if j == 0:
            return i
        return min(d(i - 1, j - 1) + (ref[i - 1] != hyp[j - 1]), d(i - 1, j) + 1, d(i, j - 1) + 1)

    return d(len(ref), len(hyp))


def test_known_examples():
    assert edit_distance(list("kitten"), list("sitting")) == (3, 2, 0, 1)
    assert edit_distance([1, 2, 3], [1, 2, 3]) == (0, 0, 0, 0)
    assert edit_distance([1, 2, 3], []) == (3, 0, 3, 0)
    assert edit_distance([], [4, 5]) == (2, 0, 0, 2)
    assert edit_distance([1, 2, 3, 4], [1, 3, 4]) == (1, 0, 1, 0)
    assert edit_distance([1, 3, 4], [1, 2, 3, 4]) == (1, 0, 0, 1)
    assert edit_distance([1, 2, 3], [1, 5, 3]) == (1, 1, 0, 0)


def test_edit_distance_equals_brute_force_and_the_split_is_consistent():
    rng = random.Random(0)
    for _ in range(400):
        ref = tuple(rng.randrange(3) for _ in range(rng.randrange(7)))
        hyp = tuple(rng.randrange(3) for _ in range(rng.randrange(7)))
        errors, sub, dele, ins = edit_distance(list(ref), list(hyp))
        assert errors == _brute(ref, hyp)
        assert sub + dele + ins == errors
        assert dele - ins == len(ref) - len(hyp)  # ref = match + S + D, hyp = match + S + I
        assert min(sub, dele, ins) >= 0


def test_error_rate_pools_errors_over_the_corpus():
    refs = [[1, 2, 3], [4], [5, 6]]
    hyps = [[1, 3], [4], [5, 7, 8]]
    er = error_rate(refs, hyps)
    # [1,2,3]->[1,3]: one deletion; [5,6]->[5,7,8]: one substitution and one insertion
    assert er == ErrorRate(rate=3 / 6, errors=3, ref_length=6, substitutions=1, deletions=1, insertions=1,
                           sentences=3, sentence_errors=2)
    assert er.percent == pytest.approx(50.0)
    assert er.sentence_error_rate == pytest.approx(2 / 3)


def test_error_rate_works_on_words_and_empty_hypotheses():
    er = error_rate([["the", "cat", "sat"]], [[]])
    assert er.rate == 1.0 and er.deletions == 3


def test_error_rate_bad_input_names_the_argument():
    with pytest.raises(ValueError, match=r"hyps: expected one hypothesis per reference \(2\); got 1"):
        error_rate([[1], [2]], [[1]])
    with pytest.raises(ValueError, match="refs: expected at least one reference; got an empty list"):
        error_rate([], [])
    with pytest.raises(ValueError, match="refs: expected at least one reference label in total"):
        error_rate([[]], [[1]])
    with pytest.raises(TypeError, match=r"refs\[0\]: expected a sequence of labels"):
        error_rate(["abc"], [[1]])
    with pytest.raises(TypeError, match="hyp: expected a sequence of labels"):
        edit_distance([1], 5)
