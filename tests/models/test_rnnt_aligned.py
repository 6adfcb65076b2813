"""Tests for ebms.models.rnnt_aligned: normalisation, teacher forcing, beam search, padding."""

from __future__ import annotations

import itertools

import pytest
import torch

from ebms.models.rnnt_aligned import AlignedRNNT
from ebms.objectives import TransducerML
from ebms.objectives._base import LossOutput

K, T, V = 3, 4, 12


def _model(seed: int = 0, **kw: object) -> AlignedRNNT:
    torch.manual_seed(seed)
    return AlignedRNNT(V, K, embedding_dim=5, hidden=4, label_dim=3, label_hidden=5, **kw).double().eval()


def _batch(seed: int = 1) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return torch.randint(1, V, (3, T), generator=g), torch.tensor([4, 2, 3])


def _all_log_probs(m: AlignedRNNT, words: torch.Tensor, length: int) -> tuple[torch.Tensor, torch.Tensor]:
    seqs = torch.tensor(list(itertools.product(range(K), repeat=length)))
    tags = torch.zeros(seqs.shape[0], words.shape[1], dtype=torch.long)
    tags[:, :length] = seqs
    with torch.no_grad():
        lp = m.log_prob(words.expand(len(tags), -1), torch.full((len(tags),), length), tags)
    return tags, lp


def test_rnnt_probabilities_sum_to_one_over_all_tag_sequences():
    m = _model()
    words, lengths = _batch()
    for b in range(3):
        _, lp = _all_log_probs(m, words[b : b + 1], int(lengths[b]))
        assert torch.logsumexp(lp, 0).item() == pytest.approx(0.0, abs=1e-12)


def test_rnnt_with_allowed_mask_normalises_over_allowed_sequences_only():
    allowed = torch.ones(K, K, dtype=torch.bool)
    allowed[2, 0] = False
    m = _model(allowed=allowed, allowed_start=torch.tensor([True, True, False]))
    words, lengths = _batch()
    tags, lp = _all_log_probs(m, words[:1], 4)
    ok = torch.tensor([t[0] != 2 and all(not (p == 2 and q == 0) for p, q in zip(t, t[1:])) for t in tags.tolist()])
    assert torch.isneginf(lp[~ok]).all()
    assert torch.logsumexp(lp[ok], 0).item() == pytest.approx(0.0, abs=1e-12)


def test_rnnt_full_beam_finds_the_most_probable_sequence():
    m = _model()
    words, lengths = _batch()
    with torch.no_grad():
        tags, scores = m.beam_search(words, lengths, beam=K**T)
    for b in range(3):
        length = int(lengths[b])
        all_tags, lp = _all_log_probs(m, words[b : b + 1], length)
        assert torch.equal(tags[b, :length], all_tags[int(lp.argmax()), :length])
        assert scores[b].item() == pytest.approx(lp.max().item(), abs=1e-10)


def test_rnnt_teacher_forced_log_prob_equals_incremental_scoring():
    m = _model()
    words, lengths = _batch()
    tags = torch.tensor([[0, 2, 1, 1], [2, 2, 0, 0], [1, 0, 2, 0]])
    with torch.no_grad():
        f = m.transcription(words, lengths)
        state, prev = m.prediction.initial_state(3), torch.full((3,), K)
        total = torch.zeros(3, dtype=torch.float64)
        for i in range(T):
            g, state = m.prediction.step(prev, state)
            step = torch.log_softmax(f[:, i] + g, -1).gather(1, tags[:, i : i + 1]).squeeze(1)
            total += torch.where(i < lengths, step, torch.zeros(()))
            prev = tags[:, i]
        assert torch.allclose(m.log_prob(words, lengths, tags), total, atol=1e-12)


def test_rnnt_padding_does_not_change_log_probs():
    m = _model()
    words, lengths = _batch()
    tags = torch.tensor([[0, 2, 1, 1], [2, 2, 0, 0], [1, 0, 2, 0]])
    pad_w = torch.cat([words, torch.randint(1, V, (3, 2))], 1)
    pad_t = torch.cat([tags, torch.full((3, 2), -1)], 1)
    with torch.no_grad():
        assert torch.allclose(m.log_prob(words, lengths, tags), m.log_prob(pad_w, lengths, pad_t), atol=1e-12)


def test_rnnt_loss_is_mean_negative_log_likelihood_and_trains():
    m = _model()
    m.train()
    words, lengths = _batch()
    tags = torch.tensor([[0, 2, 1, 1], [2, 2, 0, 0], [1, 0, 2, 0]])
    out = TransducerML().compute(m, words, lengths, tags)
    assert isinstance(out, LossOutput)
    lp = m.log_prob(words, lengths, tags)
    assert out.loss.item() == pytest.approx(-lp.mean().item(), abs=1e-12)
    assert out.metrics["nll_token"] == pytest.approx(-lp.sum().item() / 9, abs=1e-6)
    opt = torch.optim.Adam(m.parameters(), lr=0.05)
    for _ in range(30):
        opt.zero_grad()
        loss = TransducerML().compute(m, words, lengths, tags).loss
        loss.backward()
        opt.step()
    assert loss.item() < out.loss.item()


@pytest.mark.parametrize(
    ("change", "match"),
    [
        ({"tags": torch.full((3, T), -1)}, r"tags: expected values in \[0, 2\]"),
        ({"tags": torch.zeros(2, T, dtype=torch.long)}, r"tags: expected shape \(3, 4\)"),
        ({"lengths": torch.tensor([4, 0, 3])}, r"lengths: expected values in \[1, 4\]"),
        ({"words": torch.zeros(0, T, dtype=torch.long), "lengths": torch.zeros(0, dtype=torch.long),
          "tags": torch.zeros(0, T, dtype=torch.long)}, r"words: expected a non-empty batch"),
    ],
)
def test_rnnt_bad_inputs_name_the_argument(change, match):
    m = _model()
    words, lengths = _batch()
    args = {"words": words, "lengths": lengths, "tags": torch.zeros(3, T, dtype=torch.long)}
    args.update(change)
    with pytest.raises(ValueError, match=match):
        m.log_prob(args["words"], args["lengths"], args["tags"])
    if "tags" not in change:
        with pytest.raises(ValueError, match=match):
            m.beam_search(args["words"], args["lengths"])
