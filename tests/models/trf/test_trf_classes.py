"""Exchange clustering: the class-bigram log-likelihood against a direct product of probabilities, every
exchange non-decreasing in it, determinism, a planted two-class structure recovered, errors."""

from __future__ import annotations

import math
from collections import Counter

import pytest
import torch

from ebms.models.trf import WordClasses
from ebms.sequences import Sequences


def random_corpus(seed: int = 0, n: int = 60, V: int = 9) -> Sequences:
    g = torch.Generator().manual_seed(seed)
    lengths = torch.randint(1, 7, (n,), generator=g)
    # skewed unigram so that counts differ
    probs = torch.arange(V - 1, 0, -1, dtype=torch.float64)
    tokens = torch.multinomial(probs, n * 6, replacement=True, generator=g).view(n, 6) + 1
    return Sequences(tokens, lengths)


def direct_log_likelihood(corpus: Sequences, classes: torch.Tensor) -> float:
    """sum over bigrams of log p(w | v), p(w | v) = M[c_v, c_w] / L[c_v] * N(w) / R[c_w] (boundary: own class)."""
    pairs = Counter()
    for s in corpus.tolist():
        y = [0, *s, 0]
        pairs.update(zip(y[:-1], y[1:]))
    cls = {w: ("B" if w == 0 else int(classes[w])) for pair in pairs for w in pair}
    M, L, R, N = Counter(), Counter(), Counter(), Counter()
    for (v, w), n in pairs.items():
        M[cls[v], cls[w]] += n
        L[cls[v]] += n
        R[cls[w]] += n
        N[w] += n
    return sum(n * math.log(M[cls[v], cls[w]] / L[cls[v]] * N[w] / R[cls[w]]) for (v, w), n in pairs.items())


def test_log_likelihood_matches_the_direct_product_of_class_bigram_probabilities():
    corpus = random_corpus()
    g = torch.Generator().manual_seed(1)
    for C in (1, 3, 5):
        classes = torch.randint(0, C, (9,), generator=g)
        classes[0] = 0
        got = WordClasses(classes, C).log_likelihood(corpus)
        assert got == pytest.approx(direct_log_likelihood(corpus, classes), rel=1e-12, abs=1e-9)


@pytest.mark.parametrize("generator", [None, 7])
def test_every_exchange_never_lowers_the_log_likelihood(generator):
    corpus = random_corpus(seed=2)
    trace: list[float] = []
    first = WordClasses.fit(corpus, 9, 3, passes=0)
    trace.append(direct_log_likelihood(corpus, first.classes))

    def record(word, old, new, classes):
        assert old != new and int(classes[word]) == new
        trace.append(direct_log_likelihood(corpus, classes))

    gen = None if generator is None else torch.Generator().manual_seed(generator)
    wc = WordClasses.fit(corpus, 9, 3, passes=20, generator=gen, callback=record)
    assert len(trace) > 2  # some words moved
    for before, after in zip(trace, trace[1:]):
        assert after >= before - 1e-9 * abs(before)
    assert wc.log_likelihood(corpus) == pytest.approx(trace[-1], rel=1e-12)
    # converged: one more pass moves nothing
    moves = []
    WordClasses.fit(corpus, 9, 3, passes=21, generator=None if generator is None else
                    torch.Generator().manual_seed(generator), callback=lambda *a: moves.append(a))
    assert len(moves) == len(trace) - 1


def test_same_generator_same_classes_and_the_boundary_entry_is_zero():
    corpus = random_corpus(seed=3)
    a = WordClasses.fit(corpus, 9, 4, generator=torch.Generator().manual_seed(5))
    b = WordClasses.fit(corpus, 9, 4, generator=torch.Generator().manual_seed(5))
    assert torch.equal(a.classes, b.classes) and int(a.classes[0]) == 0
    assert int(a.classes.max()) < 4 and a.vocab_size == 9
    assert sorted(torch.cat([a.members(c) for c in range(4)]).tolist()) == list(range(1, 9))


def test_planted_two_class_structure_is_recovered():
    """Words 1-3 and 4-6 alternate (a -> b -> a ...): C = 2 must split them so."""
    g = torch.Generator().manual_seed(4)
    sents = []
    for _ in range(200):
        start = int(torch.randint(0, 2, (1,), generator=g))
        sents.append([int(torch.randint(1, 4, (1,), generator=g)) + 3 * ((start + t) % 2) for t in range(6)])
    wc = WordClasses.fit(Sequences.from_lists(sents), 7, 2)
    c = wc.classes.tolist()
    assert len({c[1], c[2], c[3]}) == 1 and len({c[4], c[5], c[6]}) == 1 and c[1] != c[4]


def test_errors_name_the_argument():
    with pytest.raises(ValueError, match="corpus: token id 0 is the sentence boundary"):
        WordClasses.fit(Sequences.from_lists([[1, 0, 2]]), 3, 2)
    with pytest.raises(ValueError, match="num_classes"):
        WordClasses.fit(Sequences.from_lists([[1, 2]]), 3, 0)
    with pytest.raises(ValueError, match="corpus: token ids must be below the vocabulary size 3; got 4"):
        WordClasses.fit(Sequences.from_lists([[1, 4]]), 3, 2)
    with pytest.raises(ValueError, match=r"classes: expected values in \[0, 2\); got min 0, max 2"):
        WordClasses(torch.tensor([0, 1, 2]), 2)
    with pytest.raises(TypeError, match="classes: expected a LongTensor"):
        WordClasses(torch.zeros(3), 2)
