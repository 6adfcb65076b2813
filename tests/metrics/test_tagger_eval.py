"""Tests for ebms.metrics.tagger_eval: chunked Viterbi decoding of a test set and its figures."""

from __future__ import annotations

import itertools

import pytest
import torch
from torch import nn

from ebms.metrics.chunking import conlleval
from ebms.metrics.tagger_eval import decode_tags, evaluate_tagger
from ebms.metrics.tagging import token_f1
from ebms.models.feature_crf import FeatureCRF
from ebms.structured.features import AttributeVocabulary
from ebms.structured.linear_chain import LinearChainCRF

TAGS = ["O", "B-NP", "I-NP"]


class TableTagger(nn.Module):
    """Emissions ``W[x_t]`` from a word table plus transitions: a tiny exact CRF tagger.

    Records the mode and the keywords of every call."""

    def __init__(self, vocab: int = 4, seed: int = 0) -> None:
        super().__init__()
        g = torch.Generator().manual_seed(seed)
        self.w = nn.Parameter(torch.randn(vocab, len(TAGS), generator=g, dtype=torch.float64))
        self.a = nn.Parameter(torch.randn(len(TAGS), len(TAGS), generator=g, dtype=torch.float64))
        self.drop = nn.Dropout(0.5)
        self.calls: list[tuple[bool, dict, int]] = []

    def forward(self, x, lengths, **kw):
        self.calls.append((self.training, kw, int(x.shape[1])))
        return LinearChainCRF(self.w[x], self.a, lengths)

    def brute_best(self, x: list[int]) -> list[int]:
        w, a = self.w.detach(), self.a.detach()

        def score(y):
            return sum(float(w[p, q]) for p, q in zip(x, y)) + sum(float(a[y[i - 1], y[i]]) for i in range(1, len(y)))

        return list(max(itertools.product(range(len(TAGS)), repeat=len(x)), key=score))


def words(seed: int = 1):
    g = torch.Generator().manual_seed(seed)
    lengths = torch.tensor([3, 1, 4, 2, 4, 1])
    x = torch.randint(0, 4, (6, 5), generator=g)  # padded one past the longest sentence
    return x, lengths


def test_decoded_tags_are_the_enumerated_best_paths_in_any_chunking():
    model = TableTagger()
    x, lengths = words()
    expect = [[TAGS[k] for k in model.brute_best(x[i, :n].tolist())] for i, n in enumerate(lengths.tolist())]
    for chunk in (1, 2, 4, 512):
        assert decode_tags(model, (x,), lengths, TAGS, chunk_size=chunk) == expect


def test_chunks_are_length_sorted_and_cut_to_their_longest_sentence():
    model = TableTagger()
    x, lengths = words()
    decode_tags(model, (x,), lengths, TAGS, chunk_size=2)
    assert [t for _, _, t in model.calls] == [1, 3, 4]  # sorted lengths 1 1 | 2 3 | 4 4


def test_decoding_runs_in_eval_mode_restores_the_mode_and_passes_the_keywords():
    model = TableTagger()
    x, lengths = words()
    model.train()
    decode_tags(model, (x,), lengths, TAGS, model_kwargs={"constrained": True})
    assert model.training
    assert all(not training and kw == {"constrained": True} for training, kw, _ in model.calls)
    model.eval()
    decode_tags(model, (x,), lengths, TAGS)
    assert not model.training


def test_feature_crf_on_an_unpadded_corpus_decodes_as_on_padded_tensors():
    g = torch.Generator().manual_seed(3)
    seqs = [[{f"a{int(torch.randint(0, 5, (1,), generator=g))}": 1.0, "bias": 1.0} for _ in range(n)]
            for n in (2, 5, 1, 3)]
    vocab = AttributeVocabulary.fit(seqs)
    model = FeatureCRF(len(vocab), len(TAGS))
    with torch.no_grad():
        model.state_values.normal_(generator=g)
        model.transition_values.normal_(generator=g)
    ids, values, lengths = vocab.encode(seqs)
    flat = decode_tags(model, vocab.encode_flat(seqs), lengths, TAGS, chunk_size=2)
    assert flat == decode_tags(model, (ids, values), lengths, TAGS, chunk_size=3)
    best = model.decode(ids, values, lengths)
    assert flat == [[TAGS[k] for k in row[:n]] for row, n in zip(best.tolist(), lengths.tolist())]


def test_figures_are_conlleval_and_token_f1_of_the_decoded_tags():
    model = TableTagger()
    x, lengths = words()
    g = torch.Generator().manual_seed(9)
    gold = [[TAGS[int(k)] for k in torch.randint(0, 3, (n,), generator=g)] for n in lengths.tolist()]
    gold = [["O" if t == "I-NP" and (i == 0 or s[i - 1] == "O") else t for i, t in enumerate(s)] for s in gold]
    pred = decode_tags(model, (x,), lengths, TAGS)
    ref = conlleval(gold, pred)
    out = evaluate_tagger(model, (x,), lengths, gold, TAGS)
    assert list(out) == ["precision", "recall", "f1", "accuracy"]
    assert out == {"precision": ref.precision, "recall": ref.recall, "f1": ref.f1, "accuracy": ref.accuracy}
    with_f1 = evaluate_tagger(model, (x,), lengths, gold, TAGS, token_f1_labels=["B-NP", "I-NP"])
    assert list(with_f1) == ["precision", "recall", "f1", "accuracy", "token_f1"]
    assert with_f1["token_f1"] == 100.0 * token_f1(gold, pred, labels=["B-NP", "I-NP"], average="weighted")


def test_bad_arguments_are_refused_with_messages():
    model = TableTagger()
    x, lengths = words()
    corpus = AttributeVocabulary.fit([[{"a": 1.0}]]).encode_flat([[{"a": 1.0}]])
    cases = [
        (((x,), lengths.float()), ValueError, r"lengths: expected a \(N,\) integer tensor; got \(6,\) torch.float32"),
        (((x,), torch.tensor([1, 0])), ValueError, r"lengths: expected every sentence to have at least 1 token; "
                                                   r"got min 0"),
        ((x, lengths), TypeError, r"inputs: expected a non-empty tuple of padded \(N, T, \.\.\.\) tensors or an "
                                  r"EncodedCorpus; got Tensor"),
        (((x[:, :3],), lengths), ValueError, r"inputs\[0\]: expected shape \(6, >= 4, \.\.\.\) \(lengths: 6 "
                                             r"sentences, the longest 4\); got \(6, 3\)"),
        (((x[0],), lengths), ValueError, r"inputs\[0\]: expected at least 2 dimension"),
        ((corpus, lengths), ValueError, r"lengths: expected the corpus's 1 sentence lengths; got 6 lengths"),
    ]
    for (inputs, ln), kind, message in cases:
        with pytest.raises(kind, match=message):
            decode_tags(model, inputs, ln, TAGS)
    with pytest.raises(ValueError, match=r"chunk_size: expected an int >= 1; got 0"):
        decode_tags(model, (x,), lengths, TAGS, chunk_size=0)
    with pytest.raises(ValueError, match=r"tag_names: expected at least one tag name; got none"):
        decode_tags(model, (x,), lengths, [])
    with pytest.raises(ValueError, match=r"pred_tags: expected 1 sentences like true_tags; got 6"):
        evaluate_tagger(model, (x,), lengths, [["O"]], TAGS)
