"""NGram: hand-counted Witten-Bell and add-k tables, normalisation (every history, every length, all
sequences with the end symbol), log_prob against the chain rule, sampling frequencies, errors.

Moved here from tests/structured/test_ngram.py (LabelNGram) and tests/objectives/test_conditional.py
(TagBigramNoise), which both became NGram.
"""

from __future__ import annotations

import itertools
import math

import pytest
import torch

from ebms.distributions import AddK, NGram, Smoothing, WittenBell
from ebms.objectives.conditional import TagBigramNoise
from ebms.sequences import Sequences

CORPUS = [[1, 2], [1, 1, 2], [2], []]


def _seqs(rows, length=None):
    rows = [list(r) for r in rows]
    return Sequences.from_lists(rows) if length is None else Sequences(torch.tensor(rows), torch.full((len(rows),), length))


def _all(tokens, length):
    """Every sequence of ``length`` tokens, ``(len(tokens) ** length, length)``."""
    rows = list(itertools.product(tokens, repeat=length))
    return torch.tensor(rows, dtype=torch.long).reshape(len(rows), length)


# --- tables -----------------------------------------------------------------------------------


@pytest.mark.parametrize("order", [1, 2, 3])
@pytest.mark.parametrize("smoothing", ["witten_bell", "add_k"])
@pytest.mark.parametrize("end", [True, False])
def test_every_history_distribution_sums_to_one(order, smoothing, end):
    lm = NGram.fit(CORPUS, 4, order, smoothing=smoothing, end=end)
    assert lm.table.shape == (4,) * order and lm.normalised
    sums = lm.table.exp().sum(-1)
    torch.testing.assert_close(sums, torch.ones_like(sums), atol=1e-12, rtol=0)
    if end:
        assert bool(torch.isfinite(lm.table).all())
    else:  # no end symbol: the boundary is never an outcome
        assert bool((lm.table[..., 0] == -math.inf).all()) and bool(torch.isfinite(lm.table[..., 1:]).all())


def test_witten_bell_bigram_and_trigram_match_hand_counts():
    # V = 3: tokens {1, 2}, outcomes {</s>=0, 1, 2}. Events (outcome | history):
    # [1,2]: (1|<s>) (2|1) (</s>|2); [1,1,2]: (1|<s>) (1|1) (2|1) (</s>|2); [2]: (2|<s>) (</s>|2);
    # []: (</s>|<s>). Unigram counts: </s> 4, 1: 3, 2: 3 (N = 10, 3 types).
    lm = NGram.fit(CORPUS, 3, 2)
    uni = [(4 + 3 / 3) / 13, (3 + 3 / 3) / 13, (3 + 3 / 3) / 13]
    # history 1: c(1, 1) = 1, c(1, 2) = 2; total 3, 2 types.
    p1 = [(0 + 2 * uni[0]) / 5, (1 + 2 * uni[1]) / 5, (2 + 2 * uni[2]) / 5]
    torch.testing.assert_close(lm.table[1].exp(), torch.tensor(p1, dtype=torch.float64))
    # history <s>: c(<s>, 1) = 2, c(<s>, 2) = 1, c(<s>, </s>) = 1; total 4, 3 types.
    p0 = [(1 + 3 * uni[0]) / 7, (2 + 3 * uni[1]) / 7, (1 + 3 * uni[2]) / 7]
    torch.testing.assert_close(lm.table[0].exp(), torch.tensor(p0, dtype=torch.float64))
    # trigram history (<s>, 1): outcomes 2 ([1,2]) and 1 ([1,1,2]): total 2, 2 types, backing off to p1.
    tri = NGram.fit(CORPUS, 3, 3, smoothing=WittenBell())
    p01 = [(0 + 2 * p1[0]) / 4, (1 + 2 * p1[1]) / 4, (1 + 2 * p1[2]) / 4]
    torch.testing.assert_close(tri.table[0, 1].exp(), torch.tensor(p01, dtype=torch.float64))


def test_add_k_trigram_matches_hand_counts():
    lm = NGram.fit(CORPUS, 3, 3, smoothing="add_k", k=0.5)
    # history (<s>, 1): outcomes 2 ([1,2]) and 1 ([1,1,2]); total 2.
    expected = [(0 + 0.5) / 3.5, (1 + 0.5) / 3.5, (1 + 0.5) / 3.5]
    torch.testing.assert_close(lm.table[0, 1].exp(), torch.tensor(expected, dtype=torch.float64))
    # unseen history (2, 2): uniform.
    torch.testing.assert_close(lm.table[2, 2].exp(), torch.full((3,), 1 / 3, dtype=torch.float64))
    torch.testing.assert_close(NGram.fit(CORPUS, 3, 3, smoothing=AddK(0.5)).table, lm.table)


def test_add_k_without_end_symbol_matches_hand_counts():
    # boundary 3, tokens {0, 1, 2}; first tokens 0, 1 (lengths 3, 2); pairs 0->1, 1->1, 1->0 (0->2 is padding)
    tags, lengths = torch.tensor([[0, 1, 1], [1, 0, 2]]), torch.tensor([3, 2])
    lm = NGram.fit(Sequences(tags, lengths), 4, 2, smoothing="add_k", k=1.0, boundary=3, end=False)
    torch.testing.assert_close(lm.table[3, :3].exp(), torch.tensor([2.0, 2.0, 1.0], dtype=torch.float64) / 5)
    torch.testing.assert_close(lm.table[1, :3].exp(), torch.tensor([2.0, 2.0, 1.0], dtype=torch.float64) / 5)
    torch.testing.assert_close(lm.table[2, :3].exp(), torch.full((3,), 1 / 3, dtype=torch.float64))


def test_a_smoothing_object_receives_every_order_of_counts():
    seen = {}

    class Uniform(Smoothing):
        def log_table(self, counts, allowed):
            seen["shapes"] = [tuple(c.shape) for c in counts]
            seen["total"] = [float(c.sum()) for c in counts]
            row = allowed.double() / allowed.sum()
            return row.log().expand(counts[-1].shape).clone()

    lm = NGram.fit(CORPUS, 3, 2, smoothing=Uniform())
    assert seen["shapes"] == [(3,), (3, 3)] and seen["total"] == [10.0, 10.0]  # 6 tokens + 4 ends
    torch.testing.assert_close(lm.table, NGram.uniform(3, 2).table)


# --- log_prob ---------------------------------------------------------------------------------


@pytest.mark.parametrize("order", [1, 2, 3])
def test_log_prob_sums_conditionals_including_end(order):
    lm = NGram.fit([[1, 2, 3], [3, 3], [2, 1]], 4, order)
    seqs = [[2, 3, 3, 1], [], [1]]
    tokens = torch.tensor([[2, 3, 3, 1], [0, 0, 0, 0], [1, 2, 2, 2]])  # padding: anything
    got = lm.log_prob(Sequences(tokens, torch.tensor([4, 0, 1])))
    assert got.dtype == torch.float64
    for i, seq in enumerate(seqs):
        hist = [0] * (order - 1)
        total = 0.0
        for w in seq + [0]:
            total += float(lm.table[(*hist[len(hist) - (order - 1):], w)]) if order > 1 else float(lm.table[w])
            hist.append(w)
        assert got[i].item() == pytest.approx(total, abs=1e-12)


@pytest.mark.parametrize("smoothing", ["witten_bell", "add_k"])
def test_log_prob_normalised_over_all_sequences_with_the_end_symbol(smoothing):
    # sum over every sequence of length <= 8 of p(y), plus the exact mass of the longer ones (the
    # probability of still running after 8 tokens, by the forward recursion over histories), is 1.
    lm = NGram.fit([[1], [2, 1], [1, 1]], 3, 2, smoothing=smoothing)
    p = lm.table.exp()
    total, running = 0.0, torch.zeros(3, dtype=torch.float64)
    running[0] = 1.0  # at <s>
    for length in range(0, 9):
        y = _all([1, 2], length)
        total += float(lm.log_prob(Sequences(y, torch.full((len(y),), length))).exp().sum())
        step = running.unsqueeze(1) * p  # (history, outcome)
        running = torch.zeros(3, dtype=torch.float64)
        running[1:] = step[:, 1:].sum(0)  # kept running: a token was emitted
    assert 0.5 < total < 1.0
    assert total + float(running.sum()) == pytest.approx(1.0, abs=1e-12)


def test_length_conditional_law_sums_to_one_for_each_length():
    lm = NGram.fit([[0, 2, 1], [1, 1], [2]], 4, 2, boundary=3, end=False)
    for length in (0, 1, 2, 4):
        y = _all([0, 1, 2], length)
        lp = lm.log_prob(Sequences(y, torch.full((len(y),), length)))
        assert float(torch.logsumexp(lp, 0)) == pytest.approx(0.0, abs=1e-12)


def test_uniform_and_zeros_score_as_stated():
    s = _seqs([[1, 2, 2], [3]])
    torch.testing.assert_close(NGram.uniform(4, 2).log_prob(s), -torch.tensor([4.0, 2.0], dtype=torch.float64)
                               * math.log(4))
    torch.testing.assert_close(NGram.uniform(4, 1, end=False).log_prob(s), -torch.tensor([3.0, 1.0],
                                                                                         dtype=torch.float64)
                               * math.log(3))
    zeros = NGram.zeros(5, 3)
    assert zeros.log_prob(_seqs([[1, 2, 4], [3]])).tolist() == [0.0, 0.0]
    assert not zeros.normalised and NGram.uniform(5, 3).normalised


def test_float32_table_gives_float32_scores():
    lm = NGram.fit(CORPUS, 3, 2)
    lm32 = NGram(3, 2, lm.table.float())
    out = lm32.log_prob(_seqs(CORPUS))
    assert out.dtype == torch.float32
    torch.testing.assert_close(out, lm.log_prob(_seqs(CORPUS)).float())


# --- sampling ---------------------------------------------------------------------------------


def _frequencies_match(draws: Sequences, log_p: dict, n: int, z: float) -> None:
    """Every listed sequence's frequency within ``z`` binomial standard errors of its probability."""
    counts: dict = {}
    for row in draws.tolist():
        counts[tuple(row)] = counts.get(tuple(row), 0) + 1
    for y, lp in log_p.items():
        p = math.exp(lp)
        assert abs(counts.get(y, 0) / n - p) <= z * math.sqrt(p * (1 - p) / n) + 1e-12, (y, counts.get(y, 0) / n, p)


def test_sampling_to_the_end_symbol_matches_the_sequence_probabilities():
    lm = NGram.fit([[1], [2, 1], [1, 1]], 3, 2)
    n = 20000
    draws = lm.sample(n, generator=torch.Generator().manual_seed(0))
    assert isinstance(draws, Sequences) and draws.tokens.dtype == torch.long and draws.batch_size == n
    # the 1 + 2 + 4 + 8 = 15 sequences of length <= 3; z = 4.5 keeps the family-wise false-alarm rate
    # below 15 * 7e-6 = 1e-4.
    log_p = {}
    for length in range(4):
        y = _all([1, 2], length)
        for row, lp in zip(y.tolist(), lm.log_prob(Sequences(y, torch.full((len(y),), length))).tolist()):
            log_p[tuple(row)] = lp
    _frequencies_match(draws, log_p, n, z=4.5)


@pytest.mark.parametrize("end", [True, False])
def test_sampling_given_lengths_matches_the_conditional_law(end):
    lm = NGram.fit([[1, 2, 1], [2], [1, 1]], 3, 2, end=end)
    n = 20000
    lengths = torch.tensor([3, 1]).repeat(n // 2)
    draws = lm.sample(n, generator=torch.Generator().manual_seed(1), lengths=lengths)
    assert draws.lengths.tolist() == lengths.tolist() and draws.tokens.shape == (n, 3)
    for length, rows in ((3, slice(0, None, 2)), (1, slice(1, None, 2))):
        y = _all([1, 2], length)
        lp = lm.log_prob(Sequences(y, torch.full((len(y),), length)))
        lp = lp - torch.logsumexp(lp, 0)  # p(y | L): for end=False already normalised
        # 8 + 2 = 10 cells; z = 4.5 (family-wise false-alarm rate below 1e-4)
        _frequencies_match(draws[rows], dict(zip(map(tuple, y.tolist()), lp.tolist())), n // 2, z=4.5)


@pytest.mark.parametrize("end", [False, True])
def test_unigram_draws_given_lengths_are_the_general_loops_draws_bit_for_bit(end):
    from ebms.distributions import sample_categorical

    g = torch.Generator().manual_seed(0)
    x = Sequences.from_lists([torch.randint(1, 50, (int(n),), generator=g).tolist()
                              for n in torch.randint(1, 10, (500,), generator=g)])
    model = NGram.fit(x, 50, order=1, end=end)
    lengths = torch.randint(0, 12, (300,), generator=g)
    got = model.sample(300, torch.Generator().manual_seed(3), lengths=lengths)
    # the general loop (one (n, V) row per position, the completion mass added), as NGram ran it for
    # every order before order 1 got its one-CDF path
    rows, nxt, start = model._step_tables()
    longest = int(lengths.max())
    gamma = model._completions(rows, nxt, longest) if end else None
    gen = torch.Generator().manual_seed(3)
    want = torch.zeros(300, longest, dtype=torch.long)
    h = torch.full((300,), start)
    for t in range(longest):
        logits = rows[h].double()
        if gamma is not None:
            logits = logits + gamma[(lengths - t - 1).clamp(min=0).unsqueeze(1), nxt[h]]
        logits[:, 0] = -math.inf
        w = sample_categorical(logits, gen)
        want[:, t] = torch.where(t < lengths, w, 0)
        h = torch.where(t < lengths, nxt[h, w], h)
    assert torch.equal(got.tokens, want) and torch.equal(got.lengths, lengths)


def test_tag_bigram_samples_match_its_probabilities():
    g = torch.Generator().manual_seed(1)
    noise = TagBigramNoise(torch.log_softmax(torch.randn(3, generator=g), 0),
                           torch.log_softmax(torch.randn(3, 3, generator=g), 1))
    lengths = torch.tensor([3, 1, 2])
    n = 20000
    draws = noise.sample(3 * n, lengths=lengths.repeat(n), generator=torch.Generator().manual_seed(2))
    tokens = draws.tokens.view(n, 3, 3)
    assert bool((tokens[:, 1, 1:] == 0).all()) and bool((tokens[:, 2, 2:] == 0).all())  # padding 0
    # 27 + 3 + 9 = 39 cells; z = 4.5 keeps the family-wise false-alarm rate below 39 * 7e-6 = 3e-4.
    for b, length in enumerate(lengths.tolist()):
        y = _all(range(3), length)
        lp = noise.log_prob(Sequences(y, torch.full((len(y),), length)))
        _frequencies_match(Sequences(tokens[:, b, :length], torch.full((n,), length)),
                           dict(zip(map(tuple, y.tolist()), lp.tolist())), n, z=4.5)


def test_same_generator_same_draws_and_shapes():
    lm = NGram.fit(CORPUS, 3, 3)
    a = lm.sample(50, generator=torch.Generator().manual_seed(3))
    b = lm.sample(50, generator=torch.Generator().manual_seed(3))
    assert a.equal(b) and a.lengths.dtype == torch.long
    c = lm.sample(4, generator=torch.Generator().manual_seed(3), lengths=0)
    assert c.tokens.shape == (4, 0) and c.lengths.tolist() == [0] * 4


# --- the tag-bigram view (moved from TagBigramNoise's tests) ---------------------------------


def test_random_tag_bigram_sums_to_one_over_sequences_of_each_length():
    g = torch.Generator().manual_seed(0)
    noise = TagBigramNoise(torch.log_softmax(torch.randn(3, generator=g), 0),
                           torch.log_softmax(torch.randn(3, 3, generator=g), 1))
    for length in (1, 2, 4):
        y = _all(range(3), length)
        lp = noise.log_prob(Sequences(y, torch.full((len(y),), length)))
        assert float(torch.logsumexp(lp, 0)) == pytest.approx(0.0, abs=1e-6)


def test_tag_bigram_fit_uses_smoothed_counts():
    tags = torch.tensor([[0, 1, 1], [1, 0, 2]])
    lengths = torch.tensor([3, 2])
    noise = TagBigramNoise.fit(tags, lengths, 3, smoothing=1.0)
    assert noise.conditional_on_length and noise.n_tags == 3 and noise.boundary == 3
    assert torch.allclose(noise.log_start.exp(), torch.tensor([2.0, 2.0, 1.0], dtype=torch.float64) / 5)
    # transitions seen: 0->1, 1->1, 1->0 (the 0->2 pair lies beyond length 2)
    assert torch.allclose(noise.log_trans.exp()[1], torch.tensor([2.0, 2.0, 1.0], dtype=torch.float64) / 5)
    assert torch.allclose(noise.log_trans.exp()[2], torch.full((3,), 1 / 3, dtype=torch.float64))
    assert torch.allclose(TagBigramNoise.uniform(4).log_start.exp(), torch.full((4,), 0.25, dtype=torch.float64))


def test_tag_bigram_log_prob_is_exact_in_float64():
    # The noise law was stored in float32, so log q(y) (and every NCE logit of a float64 model)
    # was rounded by ~1e-7; the fitted law must equal the smoothed count ratios to float64 rounding.
    tags = torch.tensor([[0, 1, 1, 2], [1, 0, 2, 2], [2, 2, 1, 0]])
    lengths = torch.tensor([4, 3, 4])
    noise = TagBigramNoise.fit(tags, lengths, 3, smoothing=0.7)
    start = [1 + 0.7, 1 + 0.7, 1 + 0.7]
    trans = [[0.7] * 3 for _ in range(3)]
    for row, n in zip(tags.tolist(), lengths.tolist()):
        for a, b in zip(row[: n - 1], row[1:n]):
            trans[a][b] += 1
    y = [0, 2, 2, 1]
    exact = math.log(start[0] / sum(start)) + sum(math.log(trans[a][b] / sum(trans[a])) for a, b in zip(y, y[1:]))
    got = noise.log_prob(_seqs([y]))
    assert got.dtype == torch.float64 and float(got) == pytest.approx(exact, rel=1e-15)
    assert float(TagBigramNoise.uniform(7).log_prob(Sequences(torch.zeros(1, 5, dtype=torch.long)))) == \
        pytest.approx(-5 * math.log(7), rel=1e-15)


# --- errors -----------------------------------------------------------------------------------


def test_fit_rejects_boundary_and_out_of_range_tokens():
    with pytest.raises(ValueError, match=r"corpus: expected token ids in \[1, 3\] \(id 0 is the boundary\) within "
                                         r"lengths; sequence 0 has 0 at position 1"):
        NGram.fit([[1, 0]], 4)
    with pytest.raises(ValueError, match="corpus: .* sequence 1 has 4 at position 0"):
        NGram.fit([[1], [4]], 4)
    with pytest.raises(ValueError, match=r"corpus: expected token ids in \[0, 2\] \(id 3 is the boundary\)"):
        NGram.fit([[0, 3]], 4, boundary=3)
    with pytest.raises(ValueError, match=r"corpus: expected token ids in \[0, 3\] other than the boundary id 1"):
        NGram.fit([[-1]], 4, boundary=1)
    with pytest.raises(ValueError, match="corpus: expected at least one sequence"):
        NGram.fit([], 4)
    with pytest.raises(TypeError, match="corpus: expected an ebms.sequences.Sequences or a list"):
        NGram.fit("12", 4)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="smoothing: expected 'witten_bell', 'add_k' or an ebms.distributions"):
        NGram.fit([[1]], 4, smoothing="kneser")
    with pytest.raises(ValueError, match="k: expected a finite number > 0"):
        NGram.fit([[1]], 4, smoothing="add_k", k=0.0)
    with pytest.raises(ValueError, match="order: expected an int >= 1"):
        NGram.fit([[1]], 4, 0)
    with pytest.raises(ValueError, match="vocab_size: expected an int >= 2"):
        NGram.zeros(1, 2)
    with pytest.raises(ValueError, match=r"boundary: expected an id in \[0, 3\]"):
        NGram.zeros(4, 2, boundary=4)
    with pytest.raises(ValueError, match="order: vocab_size \\*\\* order = 1000\\*\\*3 exceeds"):
        NGram.zeros(1000, 3)


def test_constructor_rejects_bad_tables():
    with pytest.raises(ValueError, match=r"table: expected shape \(3, 3\); got \(3,\)"):
        NGram(3, 2, torch.zeros(3))
    with pytest.raises(ValueError, match="table: expected no NaN or \\+inf"):
        NGram(3, 1, torch.tensor([0.0, math.inf, 0.0]))
    with pytest.raises(TypeError, match="table: expected a floating-point tensor"):
        NGram(3, 1, torch.zeros(3, dtype=torch.long))
    with pytest.raises(ValueError, match="log_trans: expected log-probabilities summing to 1"):
        TagBigramNoise(torch.full((2,), -math.log(2)), torch.zeros(2, 2))


def test_log_prob_rejects_bad_tokens_and_non_sequences():
    lm = NGram.zeros(4, 2)
    with pytest.raises(ValueError, match=r"x: expected token ids in \[1, 3\] \(id 0 is the boundary\) within "
                                         r"lengths; sequence 0 has 0 at position 1"):
        lm.log_prob(_seqs([[1, 0]]))
    with pytest.raises(ValueError, match=r"x: expected token ids in \[0, 1\] \(id 2 is the boundary\)"):
        TagBigramNoise.uniform(2).log_prob(_seqs([[0, 2]]))
    with pytest.raises(TypeError, match=r"x: expected an ebms.sequences.Sequences \(tokens \(B, T\), lengths"):
        lm.log_prob(torch.tensor([[1, 2]]))  # type: ignore[arg-type]


def test_sample_rejects_what_it_cannot_draw():
    with pytest.raises(ValueError, match="sample: this table is not normalised"):
        NGram.zeros(4, 2).sample(3)
    with pytest.raises(ValueError, match="lengths: this n-gram is conditional on length"):
        TagBigramNoise.uniform(3).sample(3)
    lm = NGram.fit(CORPUS, 3, 2)
    with pytest.raises(ValueError, match=r"lengths: expected an int or an integer tensor \(3,\)"):
        lm.sample(3, lengths=torch.tensor([1, 2]))
    with pytest.raises(ValueError, match="lengths: expected values >= 0; got min -1"):
        lm.sample(2, lengths=torch.tensor([1, -1]))
    with pytest.raises(ValueError, match="lengths: expected an int >= 0; got -2"):
        lm.sample(2, lengths=-2)
    with pytest.raises(ValueError, match="max_length: .* of 2000 draws had not ended after 1 tokens"):
        lm.sample(2000, generator=torch.Generator().manual_seed(0), max_length=1)
    never_ends = torch.full((3, 3), -math.inf, dtype=torch.float64)
    never_ends[:, 1] = 0.0  # always token 1, never </s>
    with pytest.raises(ValueError, match="lengths: the model gives length 2 probability 0"):
        NGram(3, 2, never_ends).sample(1, lengths=2)


def test_fit_refuses_float_token_ids_instead_of_truncating_them():
    from ebms.distributions.backoff import BackoffNGram

    with pytest.raises(TypeError, match=r"^corpus: seqs\[1\]\[0\]: expected an integer token id; got 2.7 \(float\)"):
        NGram.fit([[1, 2], [2.7]], 3, 2)
    with pytest.raises(TypeError, match=r"^corpus: seqs\[0\]\[1\]: expected an integer token id; got 3.0 \(float\)"):
        BackoffNGram.fit([[2, 3.0]], 5, 2, smoothing="witten_bell")
    assert NGram.fit([[1, 2], [2]], 3, 2).table.shape == (3, 3)
