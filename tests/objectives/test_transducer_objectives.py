"""Tests for ebms.objectives.transducer: TransducerML and BeamEarlyUpdate, called on batches and on unpacked arguments."""

from __future__ import annotations

import itertools
import re

import pytest
import torch

from ebms.models.crf_tagger import NeuralCRFTagger
from ebms.models.crf_transducer import CRFTransducer
from ebms.models.rnnt_aligned import AlignedRNNT
from ebms.objectives import BeamEarlyUpdate, LossOutput, TransducerML
from ebms.sequences import Sequences

K, T, V = 3, 4, 12


def _crf_transducer(seed: int = 0, **kw: object) -> CRFTransducer:
    torch.manual_seed(seed)
    return CRFTransducer(V, K, embedding_dim=5, hidden=4, label_dim=3, label_hidden=5, **kw).double().eval()


def _rnnt(seed: int = 0, **kw: object) -> AlignedRNNT:
    torch.manual_seed(seed)
    return AlignedRNNT(V, K, embedding_dim=5, hidden=4, label_dim=3, label_hidden=5, **kw).double().eval()


def _batch(seed: int = 1) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """words (3, T), chars (3, T, 2), tags (3, T), lengths; the longest sentence fills T."""
    g = torch.Generator().manual_seed(seed)
    words = torch.randint(1, V, (3, T), generator=g)
    chars = torch.randint(1, 6, (3, T, 2), generator=g)
    return words, chars, torch.randint(0, K, (3, T), generator=g), torch.tensor([4, 2, 3])


def test_transducer_ml_is_the_rnnt_loss_and_the_mean_negative_log_likelihood():
    m = _rnnt()
    words, _, tags, lengths = _batch()
    out = TransducerML()(m, (words, tags, lengths))
    assert isinstance(out, LossOutput) and out.negatives is None
    same = TransducerML().compute(m, words, lengths, tags)
    assert torch.equal(out.loss, same.loss) and out.metrics == same.metrics
    lp = m.log_prob(words, lengths, tags)
    torch.testing.assert_close(out.loss, -lp.mean(), rtol=0, atol=1e-14)
    assert out.metrics["nll_token"] == pytest.approx(float(-lp.sum().detach()) / 9, rel=1e-6)  # metrics are float32


def test_transducer_ml_takes_chars_sequences_and_padding():
    m = _rnnt(char_vocab_size=6)
    words, chars, tags, lengths = _batch()
    want = TransducerML().compute(m, words, lengths, tags, chars=chars).loss
    assert torch.equal(TransducerML()(m, (words, chars, tags, lengths)).loss, want)
    assert torch.equal(TransducerML()(m, (words, chars, Sequences(tags, lengths))).loss, want)
    pad = (torch.nn.functional.pad(words, (0, 3)), torch.nn.functional.pad(chars, (0, 0, 0, 3)),
           torch.nn.functional.pad(tags, (0, 3), value=7), lengths)  # junk beyond the longest sentence is cut
    torch.testing.assert_close(TransducerML()(m, pad).loss, want, rtol=0, atol=1e-13)


@pytest.mark.parametrize("potentials", ["raw", "log_softmax"])
@pytest.mark.parametrize("beam", [1, 2, K**T])
def test_beam_early_update_is_the_crf_transducer_loss(potentials, beam):
    m = _crf_transducer(potentials=potentials)
    words, _, tags, lengths = _batch(2)
    out = BeamEarlyUpdate(beam)(m, (words, tags, lengths))
    same = BeamEarlyUpdate(beam).compute(m, words, lengths, tags)
    assert torch.equal(out.loss, same.loss) and out.metrics == same.metrics
    assert set(out.metrics) == {"loss", "early", "prefix"}


def test_beam_early_update_with_a_full_beam_is_the_exact_negative_log_likelihood():
    m = _crf_transducer(seed=3)
    words, _, tags, lengths = _batch(4)
    out = BeamEarlyUpdate(K**T)(m, (words, tags, lengths))
    nll = []
    for b in range(3):
        n = int(lengths[b])
        seqs = torch.zeros(K**n, T, dtype=torch.long)
        seqs[:, :n] = torch.tensor(list(itertools.product(range(K), repeat=n)))
        with torch.no_grad():
            s = m.score(words[b : b + 1].expand(K**n, -1), torch.full((K**n,), n), seqs)
            gold = m.score(words[b : b + 1], lengths[b : b + 1], tags[b : b + 1])[0]
        nll.append(torch.logsumexp(s, 0) - gold)
    assert float(out.loss.detach()) == pytest.approx(float(torch.stack(nll).mean()), abs=1e-10)


def test_beam_early_update_trains_a_crf_transducer():
    m = _crf_transducer(seed=5).train()
    words, _, tags, lengths = _batch(6)
    objective = BeamEarlyUpdate(2)
    opt = torch.optim.Adam(m.parameters(), lr=0.05)
    first = objective(m, (words, tags, lengths)).loss.item()
    for _ in range(30):
        opt.zero_grad()
        loss = objective(m, (words, tags, lengths)).loss
        loss.backward()
        opt.step()
    assert loss.item() < first


def test_transducer_objectives_name_wrong_models_and_batches():
    words, chars, tags, lengths = _batch()
    with pytest.raises(TypeError, match=r"^model: expected a locally normalised tagger with log_prob.*; got CRFTransducer"):
        TransducerML()(_crf_transducer(), (words, tags, lengths))
    with pytest.raises(TypeError, match=r"^model: expected an aligned transducer .*; got NeuralCRFTagger"):
        BeamEarlyUpdate(2)(NeuralCRFTagger(V, K, hidden=3, embedding_dim=2), (words, tags, lengths))
    with pytest.raises(ValueError, match=r"^beam: expected an int >= 1; got 0"):
        BeamEarlyUpdate(0)
    with pytest.raises(ValueError, match=re.escape("batch: expected (words, tags, lengths) or (words, chars, tags, "
                                                   "lengths); got 3 inputs before tags and lengths")):
        TransducerML()(_rnnt(), (words, chars, chars, tags, lengths))
    with pytest.raises(ValueError, match=r"^batch: expected a tuple \(\*inputs, tags, lengths\)"):
        BeamEarlyUpdate(2)(_crf_transducer(), words)
    with pytest.raises(ValueError, match=r"^tags: expected values in \[0, 2\]"):
        BeamEarlyUpdate(2)(_crf_transducer(), (words, torch.full_like(tags, K), lengths))
