"""LabelNGram: normalisation of every history, hand-counted probabilities, log_prob, errors."""

from __future__ import annotations

import itertools

import pytest
import torch

from ebms.structured.ngram import LabelNGram

CORPUS = [[1, 2], [1, 1, 2], [2], []]


@pytest.mark.parametrize("order", [1, 2, 3])
@pytest.mark.parametrize("smoothing", ["witten_bell", "add_k"])
def test_every_history_distribution_sums_to_one(order, smoothing):
    lm = LabelNGram.fit(CORPUS, 4, order, smoothing=smoothing)
    assert lm.table.shape == (4,) * order
    sums = lm.table.exp().sum(-1)
    torch.testing.assert_close(sums, torch.ones_like(sums), atol=1e-12, rtol=0)
    assert bool(torch.isfinite(lm.table).all())


def test_witten_bell_bigram_matches_hand_counts():
    # V = 3: labels {1, 2}, outcomes {</s>=0, 1, 2}. Tokens (output, history):
    # [1,2]: (1|<s>) (2|1) (</s>|2); [1,1,2]: (1|<s>) (1|1) (2|1) (</s>|2); [2]: (2|<s>) (</s>|2);
    # []: (</s>|<s>). Unigram counts: </s> 4, 1: 3, 2: 3 (N = 10, 3 types).
    lm = LabelNGram.fit(CORPUS, 3, 2)
    uni = [(4 + 3 / 3) / 13, (3 + 3 / 3) / 13, (3 + 3 / 3) / 13]
    # history 1: c(1, 1) = 1, c(1, 2) = 2; total 3, 2 types.
    p = [(0 + 2 * uni[0]) / 5, (1 + 2 * uni[1]) / 5, (2 + 2 * uni[2]) / 5]
    torch.testing.assert_close(lm.table[1].exp(), torch.tensor(p, dtype=torch.float64))
    # history <s>: c(<s>, 1) = 2, c(<s>, 2) = 1, c(<s>, </s>) = 1; total 4, 3 types.
    p0 = [(1 + 3 * uni[0]) / 7, (2 + 3 * uni[1]) / 7, (1 + 3 * uni[2]) / 7]
    torch.testing.assert_close(lm.table[0].exp(), torch.tensor(p0, dtype=torch.float64))


def test_add_k_trigram_matches_hand_counts():
    lm = LabelNGram.fit(CORPUS, 3, 3, smoothing="add_k", k=0.5)
    # history (<s>, 1): outputs 2 ([1,2]) and 1 ([1,1,2]); total 2.
    expected = [(0 + 0.5) / 3.5, (1 + 0.5) / 3.5, (1 + 0.5) / 3.5]
    torch.testing.assert_close(lm.table[0, 1].exp(), torch.tensor(expected, dtype=torch.float64))
    # unseen history (2, 2): uniform.
    torch.testing.assert_close(lm.table[2, 2].exp(), torch.full((3,), 1 / 3, dtype=torch.float64))


@pytest.mark.parametrize("order", [1, 2, 3])
def test_log_prob_sums_conditionals_including_end(order):
    lm = LabelNGram.fit([[1, 2, 3], [3, 3], [2, 1]], 4, order)
    seqs = [[2, 3, 3, 1], [], [1]]
    targets = torch.tensor([[2, 3, 3, 1], [1, 1, 1, 1], [1, 2, 2, 2]])  # padding: valid ids
    lengths = torch.tensor([4, 0, 1])
    got = lm.log_prob(targets, lengths)
    for i, seq in enumerate(seqs):
        hist = [0] * (order - 1)
        total = 0.0
        for w in seq + [0]:
            total += float(lm.table[(*hist[len(hist) - (order - 1):], w)]) if order > 1 \
                else float(lm.table[w])
            hist.append(w)
        assert got[i].item() == pytest.approx(total, abs=1e-12)


def test_log_prob_normalised_over_all_short_sequences():
    # sum over all sequences of length <= 6 of p(y) tends to 1; the mass of longer ones is small.
    lm = LabelNGram.fit([[1], [2, 1], [1, 1]], 3, 2)
    total = lm.log_prob(torch.ones(1, 1, dtype=torch.long), torch.tensor([0])).exp().item()
    for length in range(1, 13):
        t = torch.tensor(list(itertools.product([1, 2], repeat=length)))
        total += lm.log_prob(t, torch.full((len(t),), length)).exp().sum().item()
    assert 0.99 < total <= 1.0 + 1e-12


def test_zeros_scores_every_sequence_zero():
    lm = LabelNGram.zeros(5, 3)
    out = lm.log_prob(torch.tensor([[1, 2, 4], [3, 3, 3]]), torch.tensor([3, 1]))
    assert out.tolist() == [0.0, 0.0]


def test_fit_rejects_blank_and_out_of_range_labels():
    with pytest.raises(ValueError, match=r"transcripts: expected label ids in \[1, 3\]"):
        LabelNGram.fit([[1, 0]], 4)
    with pytest.raises(ValueError, match="transcripts: .* sequence 1 has 4"):
        LabelNGram.fit([[1], [4]], 4)
    with pytest.raises(ValueError, match="transcripts: expected at least one"):
        LabelNGram.fit([], 4)
    with pytest.raises(ValueError, match="smoothing: expected"):
        LabelNGram.fit([[1]], 4, smoothing="kneser")
    with pytest.raises(ValueError, match="order: expected an int >= 1"):
        LabelNGram.fit([[1]], 4, 0)
    with pytest.raises(ValueError, match="n_labels: expected an int >= 2"):
        LabelNGram.zeros(1, 2)


def test_log_prob_rejects_bad_targets():
    lm = LabelNGram.zeros(4, 2)
    with pytest.raises(ValueError, match=r"targets: expected labels in \[1, 3\]"):
        lm.log_prob(torch.tensor([[1, 0]]), torch.tensor([2]))
    with pytest.raises(ValueError, match=r"target_lengths: expected values in \[0, 2\]"):
        lm.log_prob(torch.tensor([[1, 2]]), torch.tensor([3]))
    with pytest.raises(TypeError, match="targets: expected an integer tensor"):
        lm.log_prob(torch.tensor([[1.0, 2.0]]), torch.tensor([2]))
    with pytest.raises(ValueError, match=r"target_lengths: expected shape \(1,\)"):
        lm.log_prob(torch.tensor([[1, 2]]), torch.tensor([2, 2]))
