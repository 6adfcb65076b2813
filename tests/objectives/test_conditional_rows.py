"""Tests for ebms.objectives.conditional_rows: a conditional objective over rows of an unpadded corpus."""

from __future__ import annotations

import math

import pytest
import torch

from ebms.models.feature_crf import FeatureCRF
from ebms.objectives import ConditionalML, ConditionalNCE, TagBigramNoise
from ebms.objectives.conditional_rows import CorpusRowsObjective
from ebms.structured.features import AttributeVocabulary

N, C = 7, 3


def corpus_and_tags(seed: int = 0):
    """A tiny attribute corpus with ragged sentences and ragged attribute counts, padded too."""
    g = torch.Generator().manual_seed(seed)
    lengths = [4, 1, 3, 2, 5, 1, 3]
    seqs = []
    for n in lengths:
        sent = []
        for _ in range(n):
            k = int(torch.randint(1, 4, (1,), generator=g))
            sent.append({f"a{int(torch.randint(0, 6, (1,), generator=g))}": float(torch.rand(1, generator=g)) + 0.5
                         for _ in range(k)})
        seqs.append(sent)
    vocab = AttributeVocabulary.fit(seqs)
    corpus = vocab.encode_flat(seqs)
    ids, values, ln = vocab.encode(seqs)  # the whole corpus padded: the independent reference
    tags = torch.randint(0, C, (N, max(lengths)), generator=g)
    return corpus, (ids, values, ln), tags, len(vocab)


def model_for(n_attributes: int, seed: int = 1) -> FeatureCRF:
    m = FeatureCRF(n_attributes, C)
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        m.state_values.copy_(torch.randn(m.state_values.shape, generator=g, dtype=torch.float64))
        m.transition_values.copy_(torch.randn(m.transition_values.shape, generator=g, dtype=torch.float64))
    return m


def padded_reference(padded, tags, rows):
    ids, values, ln = padded
    b_ln = ln[rows]
    t = int(b_ln.max())
    return ids[rows, :t], values[rows, :t], tags[rows, :t], b_ln


def test_ml_loss_and_gradient_equal_the_inner_objective_on_the_padded_rows():
    corpus, padded, tags, a = corpus_and_tags()
    rows = torch.tensor([4, 1, 6, 0])
    obj = CorpusRowsObjective(corpus, ConditionalML(l2=0.01))
    m1, m2 = model_for(a), model_for(a)
    out = obj(m1, (rows, tags[rows], corpus.lengths[rows]))
    ref = ConditionalML(l2=0.01)(m2, padded_reference(padded, tags, rows))
    out.loss.backward()
    ref.loss.backward()
    assert float(out.loss.detach()) == pytest.approx(float(ref.loss.detach()), rel=1e-12)
    assert out.metrics == pytest.approx(ref.metrics, rel=1e-12)
    for p1, p2 in zip(m1.parameters(), m2.parameters()):
        torch.testing.assert_close(p1.grad, p2.grad, rtol=1e-12, atol=1e-14)


def test_ml_loss_is_the_mean_sentence_nll_computed_one_sentence_at_a_time():
    corpus, padded, tags, a = corpus_and_tags()
    rows = torch.arange(N)
    m = model_for(a)
    loss = float(CorpusRowsObjective(corpus, ConditionalML())(m, (rows, tags, corpus.lengths)).loss.detach())
    ids, values, ln = padded
    with torch.no_grad():
        nll = [-float(m(ids[i:i + 1, :n], values[i:i + 1, :n], ln[i:i + 1]).log_prob(tags[i:i + 1, :n]))
               for i, n in enumerate(ln.tolist())]
    assert loss == pytest.approx(sum(nll) / N, rel=1e-12)


def test_nce_with_the_same_generator_equals_the_inner_objective_and_keeps_its_state():
    corpus, padded, tags, a = corpus_and_tags()
    rows = torch.tensor([2, 3, 5])
    noise = TagBigramNoise.fit(tags, corpus.lengths, C)
    inner = ConditionalNCE(noise, nu=3)
    obj = CorpusRowsObjective(corpus, inner)
    m = model_for(a)
    out = obj(m, (rows, tags[rows], corpus.lengths[rows]), generator=torch.Generator().manual_seed(5))
    ref = inner(m, padded_reference(padded, tags, rows), generator=torch.Generator().manual_seed(5))
    assert float(out.loss.detach()) == pytest.approx(float(ref.loss.detach()), rel=1e-12)
    assert out.metrics == ref.metrics
    assert obj.inner is inner
    assert list(obj.state_dict()) == [f"inner.{k}" for k in inner.state_dict()]


def test_tags_wider_than_the_batch_are_cut_to_its_longest_sentence():
    corpus, _, tags, _ = corpus_and_tags()
    rows = torch.tensor([1, 5])  # two one-token sentences
    obj = CorpusRowsObjective(corpus, ConditionalML())
    ids, values, t, ln = obj.padded_batch((rows, tags[rows], corpus.lengths[rows]))
    assert ids.shape[:2] == (2, 1) and values.shape == ids.shape and t.shape == (2, 1)
    assert torch.equal(t, tags[rows, :1]) and ln.tolist() == [1, 1]


def test_bad_arguments_are_refused_with_messages():
    corpus, _, tags, a = corpus_and_tags()
    with pytest.raises(TypeError, match=r"corpus: expected an ebms.structured.features.EncodedCorpus; got tuple"):
        CorpusRowsObjective((1, 2), ConditionalML())  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"inner: expected an objective, callable .*; got int"):
        CorpusRowsObjective(corpus, 3)  # type: ignore[arg-type]
    obj = CorpusRowsObjective(corpus, ConditionalML())
    rows = torch.tensor([0, 2])
    good = (rows, tags[rows], corpus.lengths[rows])
    cases = [
        ((rows, tags[rows]), TypeError, r"batch: expected a tuple \(rows, tags, lengths\); got a tuple of 2"),
        ([1, 2, 3], TypeError, r"rows: expected a torch.Tensor; got int"),
        ((rows.float(), *good[1:]), ValueError, r"rows: expected sentence ids, a non-empty 1-d long tensor; "
                                                r"got torch.float32 of shape \(2,\)"),
        ((torch.tensor([0, 7]), *good[1:]), ValueError, r"rows: expected sentence ids in \[0, 6\] \(the corpus has 7\); "
                                                        r"got ids from 0 to 7"),
        ((rows, tags[:3], good[2]), ValueError, r"tags: expected a \(2, T\) integer tensor \(one row per id\); got \(3, 5\)"),
        ((rows, good[1], good[2][:1]), ValueError, r"lengths: expected shape \(2,\) \(one per id\); got \(1,\)"),
        ((rows, good[1], torch.tensor([4, 2])), ValueError, r"lengths: expected the corpus's sentence lengths of rows; "
                                                            r"row 1 \(id 2\) has 3 tokens in the corpus; got 2"),
        ((rows, good[1][:, :2], good[2]), ValueError, r"tags: expected at least 4 columns \(the batch's longest "
                                                      r"sentence\); got 2"),
    ]
    m = model_for(a)
    for batch, kind, message in cases:
        with pytest.raises(kind, match=message):
            obj(m, batch)


def test_the_trainer_runs_it_on_row_ids_and_repeats_itself_from_the_seed(tmp_path):
    from ebms.train import Trainer

    corpus, _, tags, a = corpus_and_tags()
    data = (torch.arange(N), tags, corpus.lengths)
    losses = []
    for run in ("a", "b"):
        obj = CorpusRowsObjective(corpus, ConditionalNCE(TagBigramNoise.fit(tags, corpus.lengths, C), nu=2))
        trainer = Trainer(obj, model_for(a), data, steps=3, batch_size=3, run_dir=tmp_path / run, log_every=1,
                          checkpoint_every=None, progress=False, seed=4)
        result = trainer.fit()
        assert result.step == 3
        losses.append(result.metrics["loss"])
    assert losses[0] == losses[1] and math.isfinite(losses[0])  # bit for bit
