"""ngram_weights: with <s>/</s> windows the energy reproduces the backoff LM's sentence log-probability
up to one constant (seen and unseen n-grams, every order, Kneser-Ney and Witten-Bell); without </s>
windows it does not; other templates stay 0; errors."""

from __future__ import annotations

import pytest
import torch

from ebms.distributions import BackoffNGram
from ebms.models.trf import DiscreteFeatures, WordClasses, feature_templates, ngram_weights
from ebms.sequences import Sequences

V = 200


def _corpus(seed: int, n: int) -> Sequences:
    g = torch.Generator().manual_seed(seed)
    lengths = torch.randint(1, 7, (n,), generator=g)
    # a skewed law so that some n-grams repeat and others are never seen
    p = torch.cat([torch.zeros(1), 1.0 / torch.arange(1, V)])  # Zipf: some n-grams repeat, many are unseen
    return Sequences.from_lists([torch.multinomial(p, int(m), True, generator=g).tolist() for m in lengths])


def _held_out(train: Sequences, seed: int, n: int) -> Sequences:
    """Fresh sentences over the words seen in ``train`` (a word never seen has no unigram feature)."""
    seen = torch.bincount(train.tokens[train.mask()], minlength=V) > 0
    x = _corpus(seed, n)
    return Sequences(torch.where(seen[x.tokens], x.tokens, 1) * x.mask(), x.lengths)


@pytest.mark.parametrize("order, smoothing", [(1, "witten_bell"), (2, "modified_kneser_ney"),
                                              (3, "modified_kneser_ney"), (3, "witten_bell"), (4, "kneser_ney")])
def test_energy_reproduces_the_backoff_lm_up_to_a_constant(order, smoothing):
    train = _corpus(0, 600)
    held = _held_out(train, 1, 200)  # unseen n-grams of seen words: every backoff path is taken
    lm = BackoffNGram.fit(train, V, order, smoothing=smoothing)
    feats = DiscreteFeatures.fit(train, V, feature_templates(("w",), order), eos=True)
    w, n = ngram_weights(feats, lm)
    assert n == feats.num_features  # every observed word n-gram is a listed n-gram
    with torch.no_grad():
        feats.weight.copy_(w)
        d = -feats(held).double() - lm.log_prob(held)
    _, lp, bow = lm.ngrams(1)  # row 0: log P(</s>) and the backoff of <s>, the terms no window holds
    torch.testing.assert_close(d, torch.full_like(d, -float(lp[0] + bow[0])), rtol=0, atol=2e-5)


def test_without_end_windows_the_energy_is_not_the_lm():
    train = _corpus(2, 600)
    held = _held_out(train, 3, 100)
    lm = BackoffNGram.fit(train, V, 3)
    spread = {}
    for eos in (False, True):
        feats = DiscreteFeatures.fit(train, V, feature_templates(("w",), 3), eos=eos)
        with torch.no_grad():
            feats.weight.copy_(ngram_weights(feats, lm)[0])
            spread[eos] = float((-feats(held).double() - lm.log_prob(held)).std())
    assert spread[True] < 1e-5 < 0.1 < spread[False]  # the end-of-sentence terms are what is missing


def test_class_and_skip_weights_stay_zero_and_dtype_follows_the_features():
    train = _corpus(4, 600)
    classes = WordClasses.fit(train, V, 3).classes
    feats = DiscreteFeatures.fit(train, V, feature_templates(("w", "c", "ws"), 3), classes=classes, eos=True)
    w, n = ngram_weights(feats, BackoffNGram.fit(train, V, 2))
    names = feats.decode(torch.arange(feats.num_features))
    word_ngram = torch.tensor([name in ("w0", "w-1 w0") for name, _ in names])
    assert torch.all(w[~word_ngram] == 0) and int((w[word_ngram] != 0).sum()) > 0
    assert n == int(word_ngram.sum()) and w.dtype == feats.weight.dtype


@pytest.mark.parametrize("build, match", [
    (lambda c: (DiscreteFeatures.fit(c, V, feature_templates(("w",), 2)), BackoffNGram.fit(c, V, 3)),
     r"features: expected the word 3-gram template \(w-2 w-1 w0\) for order 3"),
    (lambda c: (DiscreteFeatures.fit(c, V, feature_templates(("w",), 2), bos=False), BackoffNGram.fit(c, V, 2)),
     "features: built with bos=False"),
    (lambda c: (DiscreteFeatures.fit(c, V, feature_templates(("w",), 2)), BackoffNGram.fit(c, V + 1, 2)),
     "lm: expected the features' vocabulary size 200; got 201"),
    (lambda c: ("feats", BackoffNGram.fit(c, V, 2)), "features: expected an ebms.models.trf.DiscreteFeatures"),
    (lambda c: (DiscreteFeatures.fit(c, V, feature_templates(("w",), 2)), "kn"), "lm: expected an ebms.distributions"),
])
def test_ngram_weights_errors_name_the_argument(build, match):
    feats, lm = build(_corpus(5, 600))
    with pytest.raises((TypeError, ValueError), match=match):
        ngram_weights(feats, lm)


def test_start_from_ngram_sets_the_lm_weights_and_zeta_near_the_exact_log_z():
    from ebms.fit import start_from_ngram
    from ebms.models.trf import TRF, exact_log_z

    small = 6  # lengths 1..4 over 5 words: 780 sentences, enumerable
    g = torch.Generator().manual_seed(4)
    lengths = torch.randint(1, 5, (300,), generator=g)
    train = Sequences.from_lists([torch.randint(1, small, (int(m),), generator=g).tolist() for m in lengths])
    lm = BackoffNGram.fit(train, small, 3, smoothing="witten_bell")  # KN's discounts need rarer n-grams
    feats = DiscreteFeatures.fit(train, small, feature_templates(("w", "ws"), 3), eos=True)
    trf = TRF(feats, torch.bincount(train.lengths, minlength=5)[1:].double() + 1.0, small)
    n = start_from_ngram(trf, lm, draws=4000, generator=torch.Generator().manual_seed(0))
    want, n_want = ngram_weights(feats, lm)
    assert n == n_want > 0 and torch.equal(feats.weight.detach(), want)
    exact = exact_log_z(trf, small, 4)
    # the started model is the LM within each length and the proposal is the LM given the length: the
    # importance weights vary little, so 4000 draws land within a few hundredths of the exact log Z_l
    torch.testing.assert_close(trf.log_z.detach().double(), exact.double(), rtol=0, atol=0.02)
    assert not torch.allclose(exact.double(), torch.arange(1, 5).double() * torch.tensor(small - 1.0).log())  # moved


def test_start_from_ngram_refuses_a_trf_without_discrete_features():
    from ebms.fit import start_from_ngram
    from ebms.models.trf import TRF

    trf = TRF(torch.nn.Identity(), torch.ones(3), 5)
    with pytest.raises(TypeError, match=r"^trf: expected an ebms.models.trf.TRF over DiscreteFeatures; got TRF over "
                                        r"Identity$"):
        start_from_ngram(trf, BackoffNGram.fit(Sequences.from_lists([[1, 2]]), 5, 2, smoothing="witten_bell"))
    with pytest.raises(TypeError, match=r"^trf: expected .* got Linear$"):
        start_from_ngram(torch.nn.Linear(2, 2), BackoffNGram.fit(Sequences.from_lists([[1, 2]]), 5, 2, smoothing="witten_bell"))
