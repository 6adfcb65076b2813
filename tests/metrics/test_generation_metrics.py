"""Generation figures against hand-computed examples and scipy's exact binomial test."""

from __future__ import annotations

import math

import pytest
import torch

from ebms.metrics.generation import (
    binomial_upper_tail,
    distinct_n,
    log_prob_gap,
    oracle_preference,
    repetition_rate,
    unique_ngram_fraction,
)
from ebms.sequences import Sequences

# two sequences: "a b a b" and "a b c"
ROWS = [[1, 2, 1, 2], [1, 2, 3]]


def test_distinct_n_by_hand():
    # unigrams: 7 occurrences, {1, 2, 3} -> 3/7; bigrams: ab ba ab | ab bc -> 5 occurrences, {ab, ba, bc} -> 3/5
    assert distinct_n(ROWS, 1) == pytest.approx(3 / 7)
    assert distinct_n(ROWS, 2) == pytest.approx(3 / 5)
    # trigrams: aba bab | abc -> 3 distinct of 3; 4-grams: only abab -> 1/1
    assert distinct_n(ROWS, 3) == 1.0 and distinct_n(ROWS, 4) == 1.0


def test_unique_ngram_fraction_by_hand():
    # per sequence then averaged: unigrams (2/4 + 3/3) / 2; bigrams (2/3 + 2/2) / 2; trigrams (2/2 + 1/1) / 2
    assert unique_ngram_fraction(ROWS, 1) == pytest.approx((0.5 + 1.0) / 2)
    assert unique_ngram_fraction(ROWS, 2) == pytest.approx((2 / 3 + 1.0) / 2)
    assert unique_ngram_fraction(ROWS, 3) == 1.0
    assert unique_ngram_fraction(ROWS, 4) == 1.0  # only the first sequence has a 4-gram


def test_repetition_rate_by_hand():
    # "a b a b": positions 2, 3 repeat; "a b c": none -> 2 / 7; within a window of 1 token nothing repeats
    assert repetition_rate(ROWS) == pytest.approx(2 / 7)
    assert repetition_rate(ROWS, window=1) == 0.0
    assert repetition_rate([[5, 5, 5]], window=1) == pytest.approx(2 / 3)


def test_sequences_words_and_lists_agree():
    seqs = Sequences(torch.tensor([[1, 2, 1, 2], [1, 2, 3, 0]]), torch.tensor([4, 3]))
    words = [["a", "b", "a", "b"], ["a", "b", "c"]]
    for f in (distinct_n, unique_ngram_fraction):
        for n in (1, 2, 3, 4):
            assert f(seqs, n) == f(ROWS, n) == f(words, n)
    assert repetition_rate(seqs) == repetition_rate(words)


@pytest.mark.parametrize(("call", "err", "msg"), [
    (lambda: distinct_n([[1, 2]], 3), ValueError, "sequences: distinct-3 needs at least one sequence of 3"),
    (lambda: unique_ngram_fraction([[]], 1), ValueError, "sequences: the unique 1-gram fraction needs"),
    (lambda: repetition_rate([[], []]), ValueError, "sequences: the repetition rate needs at least one token"),
    (lambda: distinct_n(["a b c"], 1), TypeError, "item 0 is str \\(split text into tokens first\\)"),
    (lambda: distinct_n(torch.ones(2, 3), 1), TypeError, "sequences: expected ebms.sequences.Sequences or a list"),
    (lambda: distinct_n(ROWS, 0), ValueError, "n: expected an int >= 1; got 0"),
    (lambda: repetition_rate(ROWS, window=0), ValueError, "window: expected an int >= 1; got 0"),
])
def test_diversity_validation_messages(call, err, msg):
    with pytest.raises(err, match=msg):
        call()


def test_oracle_preference_counts_and_exact_p_value():
    a = [0.0, 1.0, 2.0, 3.0, 4.0, 5.0]
    b = [1.0, 1.0, 3.0, 4.0, 3.0, 6.0]  # wins at 0, 2, 3, 5; tie at 1; loss at 4
    out = oracle_preference(a, b)
    assert (out.wins, out.losses, out.ties, out.n) == (4, 1, 1, 6)
    assert out.rate == pytest.approx(4 / 6) and out.rate_not_worse == pytest.approx(5 / 6)
    # P(X >= 4), X ~ B(6, 1/2) = (15 + 6 + 1) / 64; P(X >= 5) = 7 / 64
    assert out.p_value == pytest.approx(22 / 64) and out.p_value_not_worse == pytest.approx(7 / 64)


def test_binomial_tail_matches_the_papers_table_2():
    # BASE LM < JOINT UNIT: 52.85% of 333 prefixes (176 wins), p = 0.16; BASE LM < BIT-BASE: 187 wins, p = 0.015
    assert binomial_upper_tail(176, 333) == pytest.approx(0.16, abs=0.005)
    assert binomial_upper_tail(187, 333) == pytest.approx(0.015, abs=0.002)
    assert binomial_upper_tail(0, 5) == 1.0 and binomial_upper_tail(6, 5) == 0.0


def test_binomial_p_value_equals_scipy():
    stats = pytest.importorskip("scipy.stats")
    g = torch.Generator().manual_seed(0)
    a, b = torch.randn(301, generator=g), torch.randn(301, generator=g) + 0.1
    out = oracle_preference(a, b)
    ref = stats.binomtest(out.wins, out.n, 0.5, alternative="greater").pvalue
    assert out.p_value == pytest.approx(ref, rel=1e-10)


def test_oracle_preference_rejects_mismatched_or_bad_scores():
    with pytest.raises(ValueError, match=r"scores_b: expected one score per item of scores_a, shape \(3,\); got \(2,\)"):
        oracle_preference([1.0, 2.0, 3.0], [1.0, 2.0])
    with pytest.raises(ValueError, match="scores_a: expected finite scores; got 1 NaN/Inf of 2"):
        oracle_preference([1.0, math.nan], [1.0, 2.0])
    with pytest.raises(ValueError, match=r"scores_a: expected a non-empty 1-D list or tensor of real scores; .*\(2, 1\)"):
        oracle_preference(torch.ones(2, 1), torch.ones(2, 1))


def test_log_prob_gap_by_hand():
    out = log_prob_gap([-10.0, -12.0, -14.0], [-30.0, -34.0])
    assert out.gap == pytest.approx(-12.0 + 32.0)
    # Welch: var 4 / 3 + var 8 / 2
    assert out.stderr == pytest.approx(math.sqrt(4 / 3 + 8 / 2))
    assert (out.n_samples, out.n_data, out.mean_samples, out.mean_data) == (3, 2, -12.0, -32.0)
    with pytest.raises(ValueError, match="data_scores: expected at least 2 scores for a standard error; got 1"):
        log_prob_gap([1.0, 2.0], [1.0])


def test_scores_that_are_not_numbers_are_named():
    from ebms.metrics.generation import log_prob_gap, oracle_preference

    with pytest.raises(TypeError, match=r"^scores_a: expected a non-empty 1-D list or tensor of real scores; got list"):
        oracle_preference(["a", "b"], [1.0, 2.0])
    with pytest.raises(TypeError, match=r"^data_scores: expected a non-empty 1-D list"):
        log_prob_gap([1.0, 2.0], [None, 1.0])
