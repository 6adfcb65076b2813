"""feature_moments: means and within-length variances of discrete features against a per-sentence
loop in float64, chunking invariance, the zero-variance floor, and its errors."""

from __future__ import annotations

import pytest
import torch

from ebms.models.trf import DiscreteFeatures, WordClasses, feature_moments, feature_templates
from ebms.sequences import Sequences


def _corpus(seed: int, n: int = 60, V: int = 7, max_len: int = 6) -> Sequences:
    g = torch.Generator().manual_seed(seed)
    lengths = torch.randint(1, max_len + 1, (n,), generator=g)
    return Sequences.from_lists([torch.randint(1, V, (int(m),), generator=g).tolist() for m in lengths])


def _loop(feats: DiscreteFeatures, corpus: Sequences) -> tuple[torch.Tensor, torch.Tensor]:
    """m and v from one counts() call per sentence: (1/N) sum f^2 - sum_l pi_l mean_l(f)^2."""
    rows = torch.stack([feats.counts(corpus[i:i + 1]) for i in range(corpus.batch_size)])  # (N, F)
    N = corpus.batch_size
    var = torch.zeros(feats.num_features, dtype=torch.float64)
    for length in corpus.lengths.unique():
        sel = rows[corpus.lengths == length]
        var += sel.shape[0] / N * sel.var(0, unbiased=False)
    return rows.mean(0), var


@pytest.mark.parametrize("groups, classes", [(("w",), 0), (("w", "c", "ws", "cs"), 3)])
def test_feature_moments_match_a_per_sentence_loop(groups, classes):
    corpus, V = _corpus(0), 7
    cls = WordClasses.fit(corpus, V, classes).classes if classes else None
    feats = DiscreteFeatures.fit(corpus, V, feature_templates(groups, 3), classes=cls)
    mean, var = feature_moments(feats, corpus, floor=1e-300)
    m_ref, v_ref = _loop(feats, corpus)
    torch.testing.assert_close(mean, m_ref, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(var, v_ref.clamp(min=1e-300), rtol=1e-9, atol=1e-12)
    assert mean.dtype == var.dtype == torch.float64 and mean.shape == (feats.num_features,)
    # the means are the observed counts over N (fit's own tally)
    torch.testing.assert_close(mean, feats.observed_counts / corpus.batch_size)


def test_feature_moments_do_not_depend_on_the_chunk_size():
    corpus = _corpus(1, n=45)
    feats = DiscreteFeatures.fit(corpus, 7, feature_templates(("w",), 2))
    a = feature_moments(feats, corpus, chunk_size=1)
    b = feature_moments(feats, corpus, chunk_size=7)
    c = feature_moments(feats, corpus, chunk_size=1000)
    for x, y in ((a, b), (a, c)):
        torch.testing.assert_close(x[0], y[0], rtol=1e-12, atol=0)
        torch.testing.assert_close(x[1], y[1], rtol=1e-9, atol=1e-15)


def test_a_feature_constant_within_its_lengths_gets_the_floor():
    # "1 2" twice (length 2) and "3" once: every unigram/bigram count is constant within its length
    corpus = Sequences.from_lists([[1, 2], [1, 2], [3]])
    feats = DiscreteFeatures.fit(corpus, 4, feature_templates(("w",), 2))
    mean, var = feature_moments(feats, corpus, floor=1e-7)
    assert torch.all(var == 1e-7)
    # but across lengths the counts differ: the plain variance of "w0 = 1" is not 0
    i = [k for k, (name, vals) in enumerate(feats.decode(torch.arange(feats.num_features))) if name == "w0" and vals == (1,)]
    assert mean[i].item() == pytest.approx(2 / 3)


def test_a_feature_that_varies_within_a_length_has_its_variance():
    # length 2: "1 1" has w0=1 twice, "1 2" once: Var = ((2-1.5)^2 + (1-1.5)^2) / 2 = 0.25, pi_2 = 1
    corpus = Sequences.from_lists([[1, 1], [1, 2]])
    feats = DiscreteFeatures.fit(corpus, 3, feature_templates(("w",), 1))
    _, var = feature_moments(feats, corpus)
    names = feats.decode(torch.arange(feats.num_features))
    got = {vals: float(var[k]) for k, (_, vals) in enumerate(names)}
    assert got[(1,)] == pytest.approx(0.25) and got[(2,)] == pytest.approx(0.25)


@pytest.mark.parametrize("call, match", [
    (lambda f, c: feature_moments("f", c), "features: expected an ebms.models.trf.DiscreteFeatures"),
    (lambda f, c: feature_moments(f, [[1]]), "corpus: expected an ebms.sequences.Sequences"),
    (lambda f, c: feature_moments(f, c[:0]), "corpus: expected at least one sentence"),
    (lambda f, c: feature_moments(f, c, floor=0.0), "floor"),
    (lambda f, c: feature_moments(f, c, chunk_size=0), "chunk_size"),
    (lambda f, c: feature_moments(f, Sequences.from_lists([[9]])), "vocab"),
])
def test_feature_moments_errors_name_the_argument(call, match):
    corpus = Sequences.from_lists([[1, 2], [2]])
    feats = DiscreteFeatures.fit(corpus, 3, feature_templates(("w",), 2))
    with pytest.raises((TypeError, ValueError), match=match):
        call(feats, corpus)
