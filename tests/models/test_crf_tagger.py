"""Tests for ebms.models.crf_tagger.NeuralCRFTagger (BiLSTM-CRF / CNN-CRF)."""

from __future__ import annotations

import pytest
import torch

from ebms.models.crf_tagger import NeuralCRFTagger
from ebms.objectives.conditional import ConditionalML
from ebms.structured.linear_chain import LinearChainCRF, bio_allowed_transitions

TAGS = ["O", "B-NP", "I-NP", "B-VP", "I-VP"]


def _batch(seed: int = 0, b: int = 4, t: int = 7, vocab: int = 20):
    g = torch.Generator().manual_seed(seed)
    words = torch.randint(1, vocab, (b, t), generator=g)
    lengths = torch.tensor([t, 3, 1, 5][:b])
    return words, lengths


@pytest.mark.parametrize("encoder", ["bilstm", "cnn"])
def test_forward_returns_a_crf_whose_padding_does_not_matter(encoder):
    torch.manual_seed(0)
    model = NeuralCRFTagger(20, 5, embedding_dim=8, hidden=6, encoder=encoder, layers=2).eval()
    words, lengths = _batch()
    crf = model(words, lengths)
    assert isinstance(crf, LinearChainCRF) and crf.emissions.shape == (4, 7, 5)
    padded = torch.cat([words, torch.randint(1, 20, (4, 3))], dim=1)  # 3 more padding columns
    assert torch.allclose(crf.log_partition, model(padded, lengths).log_partition, atol=1e-5)
    alone = model(words[1:2, :3], lengths[1:2]).log_partition  # the same sentence without the batch
    assert torch.allclose(crf.log_partition[1:2], alone, atol=1e-5)


def test_decode_is_viterbi_and_respects_bio_constraints():
    torch.manual_seed(1)
    allowed, allowed_start = bio_allowed_transitions(TAGS)
    model = NeuralCRFTagger(20, 5, embedding_dim=8, hidden=6, allowed=allowed, allowed_start=allowed_start).eval()
    with torch.no_grad():
        model.proj.bias.copy_(torch.tensor([0.0, 0.0, 5.0, 0.0, 5.0]))  # I- tags look best everywhere
    words, lengths = _batch(seed=2)
    tags = model.decode(words, lengths)
    assert tags.shape == (4, 7)
    assert bool((tags[1, 3:] == -1).all()) and bool((tags[2, 1:] == -1).all())
    for row, n in zip(tags.tolist(), lengths.tolist()):
        seq = row[:n]
        assert allowed_start[seq[0]]
        assert all(allowed[a, b] for a, b in zip(seq, seq[1:]))
    free = model(words, lengths).argmax  # unconstrained: I- tags at the start
    assert any(TAGS[row[0]].startswith("I-") for row in free.tolist())
    crf = model(words, lengths, constrained=True)
    assert torch.allclose(crf.score(tags.clamp(min=0)), crf.max_score)


def test_character_cnn_is_used_when_configured():
    torch.manual_seed(2)
    model = NeuralCRFTagger(20, 5, embedding_dim=8, hidden=6, char_vocab_size=12, char_dim=4)
    words, lengths = _batch()
    chars = torch.randint(0, 12, (4, 7, 5))
    crf = model(words, lengths, chars)
    crf.log_partition.sum().backward()
    assert model.encoder.char_embed.weight.grad is not None
    with pytest.raises(ValueError, match="chars: expected character ids exactly when"):
        model(words, lengths)


def test_a_tiny_tagging_task_is_learned_by_conditional_ml():
    # tag = word % 3, except that tag 2 never follows tag 2 (it becomes 0): needs the transitions.
    torch.manual_seed(3)
    g = torch.Generator().manual_seed(4)
    words = torch.randint(1, 9, (64, 6), generator=g)
    tags = words % 3
    for t in range(1, 6):
        tags[:, t] = torch.where((tags[:, t] == 2) & (tags[:, t - 1] == 2), 0, tags[:, t])
    lengths = torch.randint(2, 7, (64,), generator=g)
    model = NeuralCRFTagger(9, 3, embedding_dim=8, hidden=8)
    opt = torch.optim.Adam(model.parameters(), lr=0.05)
    objective = ConditionalML()
    first = None
    for _ in range(60):
        out = objective(model, (words, tags, lengths))
        first = first if first is not None else float(out.loss.detach())
        opt.zero_grad()
        out.loss.backward()
        opt.step()
    pred = model.eval().decode(words, lengths)
    valid = torch.arange(6) < lengths[:, None]
    assert float(out.loss.detach()) < 0.1 * first
    assert bool((pred[valid] == tags[valid]).all())


def test_bad_arguments_are_rejected_by_name():
    with pytest.raises(ValueError, match="encoder: expected one of bilstm, cnn; got 'lstm'"):
        NeuralCRFTagger(10, 3, encoder="lstm")
    with pytest.raises(ValueError, match=r"allowed: expected a bool tensor of shape \(3, 3\)"):
        NeuralCRFTagger(10, 3, allowed=torch.ones(2, 2, dtype=torch.bool))
    with pytest.raises(TypeError, match=r"allowed_start: expected a bool tensor of shape \(3,\); got dtype"):
        NeuralCRFTagger(10, 3, allowed_start=torch.ones(3))
    with pytest.raises(ValueError, match="n_tags"):
        NeuralCRFTagger(10, 0)
    model = NeuralCRFTagger(10, 3, embedding_dim=4, hidden=4)
    with pytest.raises(ValueError, match=r"words: expected ids in \[0, 10\)"):
        model(torch.tensor([[3, 12]]), torch.tensor([2]))
    with pytest.raises(ValueError, match=r"lengths: expected values in \[1, 2\]"):
        model(torch.tensor([[3, 2]]), torch.tensor([3]))


def test_objective_argument_order_words_chars_lengths_is_accepted():
    torch.manual_seed(5)
    model = NeuralCRFTagger(20, 5, embedding_dim=8, hidden=6, char_vocab_size=12, char_dim=4).eval()
    words, lengths = _batch()
    chars = torch.randint(0, 12, (4, 7, 5))
    a = model(words, lengths, chars).log_partition
    b = model(words, chars, lengths).log_partition
    assert torch.allclose(a, b)
