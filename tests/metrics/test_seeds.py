"""compare_over_seeds against scipy's paired t interval; the verdict follows the interval."""

from __future__ import annotations

import math

import pytest

from ebms.metrics import SeedComparison, compare_over_seeds, student_t_quantile

stats = pytest.importorskip("scipy.stats")


@pytest.mark.parametrize("df", [1, 2, 3, 4, 5, 7, 10, 29, 100, 1e4, 0.5, 2.5])
@pytest.mark.parametrize("p", [0.5, 0.6, 0.9, 0.95, 0.975, 0.995, 0.9999, 0.025, 1e-6])
def test_t_quantile_equals_scipy(p, df):
    assert student_t_quantile(p, df) == pytest.approx(float(stats.t.ppf(p, df)), rel=1e-10, abs=1e-12)


@pytest.mark.parametrize("p, df, match", [(0.0, 3, "p:"), (1.0, 3, "p:"), (float("nan"), 3, "p:"), (0.5, 0, "df:"),
                                          (0.5, -1, "df:"), (0.5, float("inf"), "df:")])
def test_t_quantile_refuses_bad_arguments(p, df, match):
    with pytest.raises(ValueError, match=match):
        student_t_quantile(p, df)


@pytest.mark.parametrize("a, b", [
    ([10.2, 10.8, 11.0], [10.0, 10.1, 10.9]),
    ([1.0, 2.0, 3.0, 4.0, 5.0], [0.5, 1.0, 2.9, 3.0, 4.8]),
    ([0.31, 0.29], [0.30, 0.30]),
    ([1e6 + 1, 1e6 + 3, 1e6 + 2.5, 1e6 + 2], [1e6, 1e6 + 1, 1e6 + 1, 1e6 + 1.2]),
])
@pytest.mark.parametrize("confidence", [0.9, 0.95, 0.99])
def test_interval_equals_scipy_paired_t(a, b, confidence):
    c = compare_over_seeds(a, b, confidence=confidence)
    d = [x - y for x, y in zip(a, b)]
    lo, hi = stats.t.interval(confidence, len(d) - 1, loc=sum(d) / len(d), scale=stats.sem(d))
    assert c.ci_low == pytest.approx(lo, rel=1e-9, abs=1e-9)
    assert c.ci_high == pytest.approx(hi, rel=1e-9, abs=1e-9)
    # the verdict is significant exactly when scipy's two-sided paired t-test rejects at 1 - confidence
    p = stats.ttest_rel(a, b).pvalue
    assert c.significant == (p < 1 - confidence)


def test_verdict_words_follow_the_interval_and_the_direction():
    wer_crf, wer_ctc = [8.0, 8.1, 7.9, 8.2], [9.0, 9.3, 8.8, 9.1]
    c = compare_over_seeds(wer_crf, wer_ctc, name_a="CTC-CRF", name_b="CTC", metric="WER (%)",
                           higher_is_better=False)
    assert c.verdict == "a lower" and c.better == "CTC-CRF" and c.words() == "CTC-CRF better"
    assert c.ci_high < 0 and "4 seeds, paired): CTC-CRF better" in c.sentence()
    flipped = compare_over_seeds(wer_crf, wer_ctc, name_a="CTC-CRF", name_b="CTC", higher_is_better=True)
    assert flipped.words() == "CTC-CRF worse"
    nodir = compare_over_seeds(wer_crf, wer_ctc, name_a="x", name_b="y")
    assert nodir.words() == "x lower" and nodir.better is None
    noisy = compare_over_seeds([1.0, 3.0, 2.0], [2.0, 1.0, 2.5], name_a="x", name_b="y", higher_is_better=True)
    assert noisy.words() == "not significant" and noisy.ci_low < 0 < noisy.ci_high and noisy.better is None


def test_equal_methods_are_not_significant_and_one_seed_has_no_interval():
    same = compare_over_seeds([1.0, 2.0], [1.0, 2.0])
    assert same.ci_low == same.ci_high == 0.0 and same.words() == "not significant"
    one = compare_over_seeds([1.0], [0.5], name_a="x", name_b="y")
    assert one.verdict == "one seed" and math.isnan(one.ci_low) and not one.significant
    assert one.sentence().endswith("(one seed, no interval)")
    assert one.to_dict()["ci_low"] is None


def test_record_dict_is_plain_json_with_every_figure():
    import json

    c = compare_over_seeds([3.0, 4.0, 5.0], [1.0, 1.5, 2.0], seeds=[7, 8, 9], name_a="a", name_b="b", metric="m")
    d = json.loads(json.dumps(c.to_dict()))
    assert d["seeds"] == [7, 8, 9] and d["diffs"] == [2.0, 2.5, 3.0] and d["mean_diff"] == pytest.approx(2.5)
    assert d["mean_a"] == pytest.approx(4.0) and d["words"] == "a higher" and isinstance(c, SeedComparison)


@pytest.mark.parametrize("kwargs, match", [
    ({"a": [1.0, 2.0], "b": [1.0]}, "one value per seed"),
    ({"a": [], "b": []}, "at least one seed"),
    ({"a": [1.0, float("nan")], "b": [1.0, 2.0]}, "a: expected finite"),
    ({"a": [1.0, 2.0], "b": [1.0, float("inf")]}, "b: expected finite"),
    ({"a": ["x"], "b": [1.0]}, "a: expected a sequence of numbers"),
    ({"a": [1.0, 2.0], "b": [1.0, 2.0], "seeds": [0]}, "seeds: expected 2 seeds"),
    ({"a": [1.0, 2.0], "b": [1.0, 2.0], "seeds": [0, 0]}, "distinct"),
    ({"a": [1.0, 2.0], "b": [1.0, 2.0], "confidence": 1.0}, "confidence"),
    ({"a": [1.0, 2.0], "b": [1.0, 2.0], "confidence": 95}, "confidence"),
])
def test_bad_inputs_name_the_argument(kwargs, match):
    with pytest.raises((ValueError, TypeError), match=match):
        compare_over_seeds(**kwargs)
