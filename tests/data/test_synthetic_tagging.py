"""Tests for ebms.data.synthetic_tagging: determinism, the copy rule, padding, argument checks."""

from __future__ import annotations

import pytest
import torch

from ebms.data.synthetic_tagging import lag_copy_tagging


def test_lag_copy_tagging_is_deterministic_for_a_seed_and_differs_across_seeds():
    a, b, c = (lag_copy_tagging(50, 20, seed=s) for s in (3, 3, 4))
    for x, y in zip(a.train + a.test, b.train + b.test):
        assert torch.equal(x, y)
    assert not torch.equal(a.train[1], c.train[1])
    assert a.first_order_ceiling == b.first_order_ceiling


@pytest.mark.parametrize(("lag", "direction", "copy_tags"),
                         [(1, "past", False), (3, "past", True), (5, "past", False), (3, "future", True),
                          (2, "future", False)])
def test_lag_copy_tagging_labels_follow_the_stated_rule(lag, direction, copy_tags):
    data = lag_copy_tagging(200, 50, n_tags=5, lag=lag, words_per_tag=4, n_ambiguous_words=2,
                            direction=direction, copy_tags=copy_tags, seed=1)
    first_copy = 1 + 5 * 4
    assert data.copy_words == (first_copy, first_copy + 1) and data.vocab_size == first_copy + 2
    assert data.n_tags == (10 if copy_tags else 5)
    n_copies = 0
    for words, tags, lengths in (data.train, data.test):
        for w, y, n in zip(words.tolist(), tags.tolist(), lengths.tolist()):
            assert 6 <= n <= 20
            assert all(v == 0 for v in w[n:]) and all(v == 0 for v in y[n:])
            for i in range(n):
                if w[i] >= first_copy:  # a copy word: the class of the tag lag steps away
                    s = i - lag if direction == "past" else i + lag
                    assert 0 <= s < n and y[i] % 5 == y[s] % 5
                    assert (y[i] >= 5) == copy_tags
                    n_copies += 1
                else:  # a plain word names its tag
                    assert 1 <= w[i] < first_copy and (w[i] - 1) // 4 == y[i]
    assert n_copies > 100


def test_lag_copy_tagging_copy_rate_and_ceiling_match_the_settings():
    data = lag_copy_tagging(2000, 500, p_ambiguous=0.3, lag=3, seed=0)
    words, _, lengths = data.train
    valid = torch.arange(words.shape[1]) < lengths[:, None]
    eligible = valid.clone()
    eligible[:, :3] = False
    n = int(eligible.sum())
    rate = int((words >= data.copy_words[0])[eligible].sum()) / n
    # binomial standard error; z = 4
    assert abs(rate - 0.3) < 4 * (0.3 * 0.7 / n) ** 0.5
    tw, _, tl = data.test
    tv = torch.arange(tw.shape[1]) < tl[:, None]
    n_copy = int((tw >= data.copy_words[0])[tv].sum())
    assert data.first_order_ceiling == pytest.approx((int(tl.sum()) - n_copy * 3 / 4) / int(tl.sum()))


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"n_train": 0}, "n_train: expected an int >= 1; got 0"),
        ({"n_tags": 1}, "n_tags: expected an int >= 2; got 1"),
        ({"lag": 0}, "lag: expected an int >= 1; got 0"),
        ({"p_ambiguous": 1.5}, r"p_ambiguous: expected a number in \[0, 1\]; got 1.5"),
        ({"min_length": 8, "max_length": 4}, r"max_length: expected an int >= min_length \(8\); got 4"),
        ({"direction": "left"}, r"direction: expected 'past' or 'future'; got 'left'"),
    ],
)
def test_lag_copy_tagging_bad_arguments_name_the_argument(kwargs, match):
    with pytest.raises(ValueError, match=match):
        lag_copy_tagging(**{"n_train": 10, "n_test": 5, **kwargs})
