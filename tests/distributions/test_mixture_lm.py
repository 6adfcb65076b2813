"""MixtureLM: normalisation by enumeration plus exact tails, the pointwise mixture formula, draws
against log_prob (Pearson chi-square), the one-component edge cases, TRFNCE use, errors."""

from __future__ import annotations

import itertools
import math

import pytest
import scipy.stats
import torch

from ebms.distributions import NGram
from ebms.distributions.backoff import BackoffNGram
from ebms.distributions.mixture_lm import MixtureLM
from ebms.sequences import Sequences

V = 4  # ids: 0 = <s>/</s>, words 1..3
CORPUS = Sequences.from_lists([[2, 3], [2, 2, 3], [3], [2, 1, 3], [1, 1], [3, 3, 2]])


def _bigram() -> BackoffNGram:
    return BackoffNGram.fit(CORPUS, V, order=2, discounts=[0.5, 0.5])


def _unigram() -> BackoffNGram:
    return BackoffNGram.fit(CORPUS, V, order=1, smoothing="add_k")


def _all_sentences(max_len: int) -> Sequences:
    rows = [list(s) for n in range(max_len + 1) for s in itertools.product(range(1, V), repeat=n)]
    return Sequences.from_lists(rows)


def _tail(lm: BackoffNGram, max_len: int) -> float:
    """Exact mass of the sentences longer than ``max_len``: with ``u = p(. | <s>)``, ``M[w, w'] =
    p(w' | w)`` and ``v = p(</s> | w)`` over the words, P(len = l) = u M^(l-1) v for l >= 1, so the
    tail is u M^max_len (I - M)^-1 v (a first-order chain: the model's order is at most 2)."""
    assert lm.order <= 2
    words = list(range(1, V))
    start = lm.next_log_probs(Sequences.from_lists([[]])).exp()[0]
    rows = lm.next_log_probs(Sequences.from_lists([[w] for w in words])).exp()
    u, M, v = start[1:], rows[:, 1:], rows[:, 0]
    eye = torch.eye(len(words), dtype=M.dtype)
    return float(u @ torch.linalg.matrix_power(M, max_len) @ torch.linalg.solve(eye - M, v))


def test_mixture_lm_is_normalised_by_enumeration_and_exact_tails():
    bigram, unigram = _bigram(), _unigram()
    x, max_len, eps = _all_sentences(6), 6, 0.3  # 1,093 sentences of lengths 0..6
    q = MixtureLM([bigram, unigram], [1 - eps, eps])
    for lm in (bigram, unigram):  # the tails are right: each component sums to 1
        assert float(lm.log_prob(x).exp().sum()) + _tail(lm, max_len) == pytest.approx(1.0, abs=1e-12)
    tail = (1 - eps) * _tail(bigram, max_len) + eps * _tail(unigram, max_len)
    assert tail > 1e-3  # the tail matters at this length
    assert float(q.log_prob(x).exp().sum()) + tail == pytest.approx(1.0, abs=1e-12)


def test_mixture_lm_log_prob_is_the_weighted_sum_of_the_components():
    bigram, unigram = _bigram(), _unigram()
    x = _all_sentences(3)
    q = MixtureLM([bigram, unigram, bigram], [0.5, 0.2, 0.3])
    expected = (0.8 * bigram.log_prob(x).exp() + 0.2 * unigram.log_prob(x).exp()).log()
    torch.testing.assert_close(q.log_prob(x), expected, rtol=0, atol=1e-12)
    parts = q.component_log_probs(x)
    assert parts.shape == (x.batch_size, 3) and parts.dtype == torch.float64
    torch.testing.assert_close(parts[:, 1], unigram.log_prob(x) + math.log(0.2), rtol=0, atol=1e-12)


def test_mixture_lm_draws_match_log_prob():
    bigram, unigram = _bigram(), _unigram()
    q = MixtureLM([bigram, unigram], [0.6, 0.4])
    n = 20_000
    y = q.sample(n, generator=torch.Generator().manual_seed(0))
    assert y.batch_size == n and y.tokens.dtype == torch.long
    cells = _all_sentences(2).tolist()  # 13 cells (lengths 0..2) and one for everything longer
    p = q.log_prob(Sequences.from_lists(cells)).exp()
    p = torch.cat([p, (1 - p.sum()).reshape(1)])
    index = {tuple(c): i for i, c in enumerate(cells)}
    counts = torch.zeros(len(cells) + 1, dtype=torch.float64)
    for s in y.tolist():
        counts[index.get(tuple(s), len(cells))] += 1
    expected = n * p
    assert float(expected.min()) > 50  # the chi-square approximation holds
    stat = float(((counts - expected) ** 2 / expected).sum())
    # Pearson's statistic ~ chi2(13) for a correct sampler; reject beyond its 1 - 1e-4 quantile
    # (z = 3.7 one-sided), a false alarm rate of 1e-4 at this fixed seed.
    assert stat < scipy.stats.chi2.ppf(1 - 1e-4, df=len(cells))


def test_mixture_lm_draws_keep_the_component_shares():
    # Disjoint supports: a component that only emits the sentence [1] and one that only emits [2].
    q = MixtureLM([_Point([1]), _Point([2])], [0.25, 0.75])
    y = q.sample(8_000, generator=torch.Generator().manual_seed(1))
    share = sum(s == [1] for s in y.tolist()) / 8_000
    se = math.sqrt(0.25 * 0.75 / 8_000)
    assert abs(share - 0.25) < 4 * se  # z = 4
    torch.testing.assert_close(q.log_prob(Sequences.from_lists([[1], [2], [3]])),
                               torch.tensor([math.log(0.25), math.log(0.75), -math.inf], dtype=torch.float64))


class _Point:
    """A point mass on one sentence (records the keywords its ``sample`` receives)."""

    def __init__(self, sentence: list[int]) -> None:
        self.sentence, self.options = sentence, []

    def sample(self, n: int, *, generator: torch.Generator | None = None, **options) -> Sequences:
        self.options.append(options)
        return Sequences.from_lists([self.sentence] * n)

    def log_prob(self, x: Sequences) -> torch.Tensor:
        hit = torch.tensor([s == self.sentence for s in x.tolist()])
        return torch.where(hit, 0.0, -math.inf).double()


class _Refuses(_Point):
    def log_prob(self, x: Sequences) -> torch.Tensor:
        raise AssertionError("a component of weight 0 was scored")

    def sample(self, n: int, *, generator: torch.Generator | None = None, **options) -> Sequences:
        raise AssertionError("a component of weight 0 was sampled")


@pytest.mark.parametrize("which", [0, 1])
def test_mixture_lm_with_one_positive_weight_is_that_component(which):
    lms = [_bigram(), _unigram()]
    q = MixtureLM(lms, [1.0 - which, float(which)])
    x = _all_sentences(3)
    assert torch.equal(q.log_prob(x), lms[which].log_prob(x))
    a = q.sample(50, generator=torch.Generator().manual_seed(3))
    b = lms[which].sample(50, generator=torch.Generator().manual_seed(3))
    assert a.equal(b)


def test_mixture_lm_never_scores_or_samples_a_component_of_weight_zero():
    point = _Point([2])
    q = MixtureLM([point, _Refuses([1]), _bigram()], [0.5, 0.0, 0.5])
    x = _all_sentences(2)
    assert q.log_prob(x).shape == (x.batch_size,)
    assert q.component_log_probs(x)[:, 1].eq(-math.inf).all()
    q.sample(20, generator=torch.Generator().manual_seed(0), max_length=50)
    assert point.options and all(o == {"max_length": 50} for o in point.options)  # options are passed on


def test_mixture_lm_serves_as_trf_nce_noise():
    from ebms.models.trf import TRF, DiscreteFeatures, feature_templates
    from ebms.objectives.trf_nce import TRFNCE

    corpus = Sequences.from_lists([[1, 2], [2, 1, 1], [1], [2, 2]])
    feats = DiscreteFeatures.fit(corpus, 3, feature_templates(("w",), order=2))
    trf = TRF.from_corpus(feats, corpus, vocab_size=3)
    noise = MixtureLM([BackoffNGram.fit(corpus, 3, order=2, discounts=[0.5, 0.5]),
                       BackoffNGram.fit(corpus, 3, order=1, smoothing="add_k")], [0.9, 0.1])
    out = TRFNCE(noise, nu=4)(trf, corpus, generator=torch.Generator().manual_seed(0))
    out.loss.backward()
    assert math.isfinite(float(out.loss.detach()))


def test_mixture_lm_rejects_bad_arguments():
    b, u = _bigram(), _unigram()
    with pytest.raises(TypeError, match="components: expected a non-empty list"):
        MixtureLM([], [])
    with pytest.raises(TypeError, match="components: expected a non-empty list"):
        MixtureLM(b, [1.0])  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"components\[1\]: expected a normalised LM.*got int"):
        MixtureLM([b, 3], [0.5, 0.5])  # type: ignore[list-item]
    with pytest.raises(ValueError, match=r"components\[0\]: expected an LM over sentences ending in </s>"):
        MixtureLM([NGram.uniform(V, end=False), b], [0.5, 0.5])
    with pytest.raises(ValueError, match=r"components: expected one vocab_size for all; got \[4, 6\]"):
        MixtureLM([b, BackoffNGram.fit(CORPUS, 6, order=1, smoothing="add_k")], [0.5, 0.5])
    with pytest.raises(ValueError, match=r"weights: expected shape \(2,\), one per component; got \(3,\)"):
        MixtureLM([b, u], [0.2, 0.3, 0.5])
    with pytest.raises(ValueError, match=r"weights: expected finite numbers >= 0; got \[1.5, -0.5\]"):
        MixtureLM([b, u], [1.5, -0.5])
    with pytest.raises(ValueError, match=r"weights: expected finite numbers >= 0; got \[nan, 1.0\]"):
        MixtureLM([b, u], [float("nan"), 1.0])
    with pytest.raises(ValueError, match=r"weights: expected a sum of 1 \(within 1e-06\); got 0.9"):
        MixtureLM([b, u], [0.8, 0.1])
    with pytest.raises(TypeError, match="weights: expected 2 numbers; got 'ab'"):
        MixtureLM([b, u], "ab")  # type: ignore[arg-type]
    q = MixtureLM([b, u], [0.5, 0.5])
    with pytest.raises(TypeError, match="n: expected an int"):
        q.sample(2.0)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="n: expected an int >= 1; got 0"):
        q.sample(0)
    with pytest.raises(TypeError, match="x: expected an ebms.sequences.Sequences"):
        q.log_prob(torch.zeros(2, 3, dtype=torch.long))  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="x: expected an ebms.sequences.Sequences"):
        MixtureLM([b, u], [1.0, 0.0]).log_prob([[1, 2]])  # type: ignore[arg-type]


def test_mixture_lm_checks_what_its_components_return():
    class Wrong(_Point):
        def sample(self, n, *, generator=None, **options):
            return Sequences.from_lists([[1]] * (n + 1))

        def log_prob(self, x):
            return torch.zeros(x.batch_size, 1, dtype=torch.float64)

    q = MixtureLM([Wrong([1]), _bigram()], [0.5, 0.5])
    with pytest.raises(TypeError, match=r"components\[0\].sample\(\d+\): expected Sequences of \d+ sentences"):
        q.sample(10, generator=torch.Generator().manual_seed(0))
    with pytest.raises(ValueError, match=r"components\[0\].log_prob\(x\): expected shape \(2,\); got \(2, 1\)"):
        q.log_prob(Sequences.from_lists([[1], [2]]))


def test_a_component_that_is_not_normalised_is_refused():
    from ebms.distributions import NGram

    with pytest.raises(ValueError, match=r"^components\[1\]: expected a normalised LM; got a NGram whose normalised "
                                         r"attribute is False"):
        MixtureLM([NGram.uniform(4, 2), NGram.zeros(4, 2)], [0.5, 0.5])
