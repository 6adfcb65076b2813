"""LSTMLM.sample as DNCE's noise draws it (``max_length=L+1, truncate=True``): every step's logits
equal the teacher-forced logits of the same prefix, each step feeds only the new token of the
running rows (the state is carried, the prefix never re-run), and the cut draws follow the exact
law of their first ``L + 1`` tokens.

The statistical check uses a fixed generator and Pearson's statistic against its chi-square
quantile ``1 - 1e-4`` (z = 3.7 one-sided): a correct sampler fails with probability 1e-4 at its seed.
"""

from __future__ import annotations

import itertools

import pytest
import scipy.stats
import torch

import ebms.models.lm._base as lm_base
from ebms.models.lm import LSTMLM
from ebms.sequences import Sequences

V = 5


def tiny(seed: int = 0, layers: int = 1) -> LSTMLM:
    torch.manual_seed(seed)
    lm = LSTMLM(V, embedding_dim=4, hidden_size=6, num_layers=layers)
    with torch.no_grad():  # a law far from uniform, with short sentences
        lm.decoder.weight.mul_(15.0)
        lm.decoder.bias.copy_(torch.randn(V, generator=torch.Generator().manual_seed(seed)))
        lm.decoder.bias[0] = 0.5
    return lm.double().eval().requires_grad_(False)


@pytest.mark.parametrize("layers", [1, 2])
def test_every_step_draws_from_the_teacher_forced_logits_of_its_prefix(monkeypatch, layers):
    lm = tiny(1, layers)
    steps: list[tuple[torch.Tensor, torch.Tensor]] = []
    real = lm_base.sample_categorical

    def recorded(logits, generator):
        w = real(logits, generator)
        steps.append((logits.clone(), w.clone()))
        return w

    monkeypatch.setattr(lm_base, "sample_categorical", recorded)
    n, cap = 40, 3
    draws = lm.sample(n, torch.Generator().manual_seed(2), max_length=cap, truncate=True)
    alive, prefixes = list(range(n)), [[] for _ in range(n)]
    for logits, w in steps:  # the running rows, in order; rows that drew </s> leave
        assert logits.shape == (len(alive), V)
        tf = lm.logits(Sequences.from_lists([prefixes[r] for r in alive]))  # (A, T + 1, V)
        want = tf[torch.arange(len(alive)), torch.tensor([len(prefixes[r]) for r in alive])]
        torch.testing.assert_close(logits, want, rtol=1e-10, atol=1e-10)
        for r, tok in zip(list(alive), w.tolist()):
            if tok == 0:
                alive.remove(r)
            else:
                prefixes[r].append(tok)
    assert draws.tolist() == prefixes and max(map(len, prefixes)) <= cap


def test_each_step_feeds_only_the_new_token_of_the_running_rows(monkeypatch):
    lm = tiny(3)
    widths: list[tuple[int, int]] = []
    real = LSTMLM.forward

    def spy(self, inputs, state=None):
        widths.append(tuple(inputs.shape))
        return real(self, inputs, state)

    monkeypatch.setattr(LSTMLM, "forward", spy)
    draws = lm.sample(64, torch.Generator().manual_seed(4), max_length=6, truncate=True)
    lengths = draws.lengths
    # step t (t >= 1) runs the rows whose draw has at least t tokens and has not been cut at the cap
    want = [(int(((lengths >= t) & (t < 6)).sum()), 1) for t in range(1, int(lengths.max()) + 1)]
    assert widths == [w for w in want if w[0] > 0]


def test_cut_draws_follow_the_exact_law_of_their_first_tokens():
    lm, cap, n = tiny(5), 3, 20_000
    draws = lm.sample(n, torch.Generator().manual_seed(6), max_length=cap, truncate=True)
    ended = [list(s) for m in range(cap) for s in itertools.product(range(1, V), repeat=m)]
    cut = [list(s) for s in itertools.product(range(1, V), repeat=cap)]
    p_end = lm.log_prob(Sequences.from_lists(ended)).exp()
    empty = Sequences.from_lists([[]] * len(cut))
    p_cut = lm.continuation_log_prob(empty, Sequences.from_lists(cut), end=False).exp()  # ends at cap or runs on
    p = torch.cat([p_end, p_cut])
    torch.testing.assert_close(p.sum(), torch.tensor(1.0, dtype=torch.float64))
    index = {tuple(c): i for i, c in enumerate(ended + cut)}
    counts = torch.bincount(torch.tensor([index[tuple(s)] for s in draws.tolist()]), minlength=p.numel()).double()
    expected, observed = n * p, counts
    assert float(expected.min()) >= 5  # every cell large enough for the chi-square approximation
    stat = float(((observed - expected) ** 2 / expected).sum())
    assert stat < scipy.stats.chi2.ppf(1 - 1e-4, df=expected.numel() - 1), stat


def test_init_unigram_makes_a_zero_weight_lstm_the_unigram_law_and_refuses_other_vectors():
    from ebms.models.lm import LSTMLM

    lm = LSTMLM(5, embedding_dim=4, hidden_size=4, num_layers=1)
    p = torch.tensor([0.1, 0.2, 0.3, 0.15, 0.25], dtype=torch.float64)
    lm.init_unigram(p)
    torch.nn.init.zeros_(lm.decoder.weight)
    logits, _ = lm(torch.tensor([[0, 3, 1]]))
    torch.testing.assert_close(logits.double().log_softmax(-1), p.log().expand(1, 3, 5), rtol=0, atol=1e-6)
    for bad, match in ((p[:4], r"probs: expected positive probabilities \(5,\) summing to 1 .*got \(4,\)$"),
                       (2 * p, r"got \(5,\) summing to 2$"), (torch.zeros(5), r"got \(5,\)$"), ([0.2] * 5, "got list$")):
        with pytest.raises(ValueError, match=match):
            lm.init_unigram(bad)


def test_unigram_noise_is_the_seeded_lstm_with_the_corpus_unigram_bias_and_leaves_the_global_generator():
    from ebms.data.text import unigram_probs

    corpus = Sequences.from_lists([[1, 2, 2], [3], [4, 1]])
    before = torch.get_rng_state()
    lm = LSTMLM.unigram_noise(corpus, 5, 6, seed=11)
    assert torch.equal(torch.get_rng_state(), before)
    torch.manual_seed(11)
    want = LSTMLM(5, embedding_dim=6, hidden_size=6, num_layers=1)
    want.init_unigram(unigram_probs(corpus, 5, end=True))
    got = lm.state_dict()
    assert got.keys() == want.state_dict().keys()
    assert all(torch.equal(got[k], v) for k, v in want.state_dict().items())
    with pytest.raises(TypeError, match="seed: expected an int"):
        LSTMLM.unigram_noise(corpus, 5, 6, seed=1.5)
