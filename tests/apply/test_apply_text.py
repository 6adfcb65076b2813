"""``ebms.apply.text``: per-sentence scores of language models and n-best rescoring.

Every figure is checked against something exact: the model's own ``log_prob`` (KN, LSTM), ``log pi_l - E(x) -
zeta_l`` (TRF), :func:`ebms.models.lm.perplexity` for the total, and the argmax of the combined score computed
by hand on a tiny n-best list.
"""

from __future__ import annotations

import math
from types import SimpleNamespace

import pytest
import torch

from ebms.apply.text import SentenceScorer, rescore, sentence_scorer
from ebms.data.nbest import NBest
from ebms.data.text import Vocabulary, sentence_batches
from ebms.distributions import BackoffNGram
from ebms.errors import DataError
from ebms.metrics.error_rate import error_rate
from ebms.models import TRF, ElectricCloze
from ebms.models.lm import LSTMLM, TransformerLM, perplexity
from ebms.models.trf import DiscreteFeatures, feature_templates
from ebms.sequences import Sequences

TRAIN = [s.split() for s in ("the cat sat", "the dog ran", "a cat ran", "the cat ran", "a dog sat down", "dog")]
NEW = ["the cat sat", "a zebra ran", "dog dog dog dog", "the"]


@pytest.fixture(scope="module")
def vocab() -> Vocabulary:
    return Vocabulary.build(TRAIN)


@pytest.fixture(scope="module")
def kn(vocab: Vocabulary) -> BackoffNGram:
    return BackoffNGram.fit(vocab.encode(TRAIN), len(vocab), order=3, smoothing="witten_bell")


def test_kn_scores_are_the_models_log_prob_with_end_and_unk_counts(kn: BackoffNGram, vocab: Vocabulary) -> None:
    s = sentence_scorer(kn, vocab, kind="kn")(NEW)
    assert torch.equal(s.log_prob, kn.log_prob(vocab.encode([x.split() for x in NEW])).double())
    assert s.tokens.tolist() == [4, 4, 5, 2] and s.oov.tolist() == [0, 1, 0, 0]
    assert s.measure == "log_prob" and s.log_prob.dtype == torch.float64


@pytest.mark.parametrize("name", ["kn", "lstm", "transformer"])
def test_total_perplexity_is_the_eval_perplexity(name: str, kn: BackoffNGram, vocab: Vocabulary) -> None:
    torch.manual_seed(0)
    model = {"kn": kn, "lstm": LSTMLM(len(vocab), embedding_dim=4, hidden_size=6, num_layers=1),
             "transformer": TransformerLM(len(vocab), d_model=8, num_heads=2, num_layers=1, dim_feedforward=8,
                                          max_length=6)}[name]
    s = sentence_scorer(model, vocab, kind=name, batch_size=3)(NEW)
    ref = perplexity(model, sentence_batches(vocab.encode([x.split() for x in NEW]), 64, shuffle=False))
    assert s.total_perplexity() == pytest.approx(ref.perplexity, rel=1e-6)
    assert int(s.tokens.sum()) == ref.tokens


@pytest.fixture(scope="module")
def trf(vocab: Vocabulary) -> TRF:
    corpus = vocab.encode(TRAIN)
    feats = DiscreteFeatures.fit(corpus, len(vocab), feature_templates(("w",), 2))
    model = TRF.from_corpus(feats, corpus, len(vocab), max_length=4, smoothing=1.0)
    with torch.no_grad():
        feats.weight.normal_(generator=torch.Generator().manual_seed(1))
        model.log_z.add_(torch.tensor([0.3, -0.2, 0.1, 0.5]))
    return model.eval()


def test_trf_scores_are_log_pi_minus_energy_minus_training_zeta(trf: TRF, vocab: Vocabulary) -> None:
    s = sentence_scorer(trf, vocab, kind="trf")(NEW)
    x = vocab.encode([t.split() for t in NEW])
    with torch.no_grad():
        expected = trf.log_pi[x.lengths - 1] - trf.energy(x) - trf.log_z[x.lengths - 1]
    torch.testing.assert_close(s.log_prob, expected.double(), rtol=0, atol=1e-5)
    assert s.measure == "log_prob_training_zeta" and "training" in s.summary()


def test_models_built_without_sentences_take_the_saved_tables_and_features(kn: BackoffNGram, trf: TRF,
                                                                          vocab: Vocabulary) -> None:
    """A run applied from its stored files builds its model from no sentence (``ebms score``): a uniform KN and a
    TRF without features, which take the checkpoint's n-gram tables and feature keys when it loads."""
    shell = BackoffNGram.uniform(len(vocab), 3)
    assert shell.num_ngrams == (len(vocab), 0, 0)
    assert torch.allclose(shell.next_log_probs(vocab.encode([["the"]])), torch.full((1, len(vocab)), -math.log(len(vocab)),
                                                                                    dtype=torch.float64))
    shell.load_state_dict(kn.state_dict())
    assert shell.num_ngrams == kn.num_ngrams
    assert torch.equal(sentence_scorer(shell, vocab)(NEW).log_prob, sentence_scorer(kn, vocab)(NEW).log_prob)
    with pytest.raises(RuntimeError, match="size mismatch for log_probs_1"):  # V stays checked
        BackoffNGram.uniform(len(vocab) + 1, 3).load_state_dict(kn.state_dict())
    none = Sequences.from_lists([])
    feats = DiscreteFeatures.fit(none, len(vocab), feature_templates(("w",), 2))
    empty = TRF.from_corpus(feats, none, len(vocab), max_length=4, smoothing=1.0)
    assert feats.num_features == 0
    empty.load_state_dict(trf.state_dict())
    assert feats.num_features == trf.field.num_features
    sentences = [s for s in NEW if s]
    assert torch.equal(sentence_scorer(empty.eval(), vocab)(sentences).log_prob,
                       sentence_scorer(trf, vocab)(sentences).log_prob)


def test_trf_refuses_a_sentence_beyond_its_lengths_naming_it(trf: TRF, vocab: Vocabulary) -> None:
    scorer = sentence_scorer(trf, vocab, kind="trf")
    with pytest.raises(DataError, match=r"^in:2: a sentence of 5 tokens; this trf run scores sentences of 1\.\.4 "
                                        r"tokens .*\(1 of 2 sentences have none\)"):
        scorer(["the cat", "a b c d e"], names=["in:1", "in:2"])
    lp = scorer.log_probs(["the cat", "a b c d e", ""])
    assert math.isfinite(lp[0]) and lp[1:].tolist() == [-math.inf, -math.inf]


def test_boundary_marker_inside_a_sentence_is_refused(kn: BackoffNGram, vocab: Vocabulary) -> None:
    with pytest.raises(DataError, match="boundary marker '</s>'"):
        sentence_scorer(kn, vocab)(["the </s> cat"])


def test_electric_gives_a_labelled_pseudo_log_likelihood_without_end_tokens(vocab: Vocabulary) -> None:
    torch.manual_seed(0)
    model = ElectricCloze(len(vocab), dim=8, layers=1, heads=2, max_length=6).eval()
    s = sentence_scorer(model, vocab, kind="electric")(NEW)
    with torch.no_grad():
        expected = model.pseudo_log_likelihood(vocab.encode([t.split() for t in NEW])).double()
    torch.testing.assert_close(s.log_prob, expected)
    assert s.tokens.tolist() == [3, 3, 4, 1] and s.perplexity_name == "pseudo_perplexity"
    assert "not a log-probability" in s.summary()


def test_char_level_tokens_are_the_characters_with_whitespace_collapsed() -> None:
    v = Vocabulary.build([list("ab ba")], level="char")
    scorer = SentenceScorer(lambda x: x.lengths.double(), v, kind="k", measure="log_prob", lengths=(0, None),
                            lower=True)
    assert scorer.tokenize("  A \t b ") == ["a", " ", "b"]
    assert scorer(["AB  z"]).oov.tolist() == [1]


def test_tsv_has_a_header_and_one_row_per_sentence(kn: BackoffNGram, vocab: Vocabulary) -> None:
    s = sentence_scorer(kn, vocab, kind="kn")(NEW[:2])
    rows = s.tsv(["the cat sat", "a\tzebra ran"], [3, 7])
    assert rows[0] == "line\tlog_prob\ttokens\toov\tperplexity\tsentence"
    assert [r.split("\t")[0] for r in rows[1:]] == ["3", "7"] and rows[2].endswith("\ta zebra ran")


# --- rescoring ------------------------------------------------------------------------------------
NB = NBest.from_lists(["u1", "u2"], [[["the", "cat"], ["the", "cat", "sat"], ["a"]], [["dog"], ["the", "dog"]]],
                      acoustic=[[-3.0, -3.5, -2.0], [-1.0, -1.2]])


def _lengths_lm(vocab: Vocabulary, per_token: float, longest: int | None = None) -> SentenceScorer:
    """A scorer whose score is ``per_token * (length + 1)`` (shorter is likelier when negative)."""
    return SentenceScorer(lambda x: per_token * (x.lengths.double() + 1), vocab, kind="toy", measure="log_prob",
                          lengths=(0, longest))


def test_weight_zero_keeps_the_acoustic_best(kn: BackoffNGram, vocab: Vocabulary) -> None:
    r = rescore(NB, {"kn": sentence_scorer(kn, vocab)}, {"kn": 0.0})
    assert r.hypotheses == [("a",), ("dog",)]


def test_weights_pick_the_argmax_computed_by_hand(kn: BackoffNGram, vocab: Vocabulary) -> None:
    scorers = {"kn": sentence_scorer(kn, vocab), "len": _lengths_lm(vocab, 0.7)}
    w, scale, beta = {"kn": 0.6, "len": 0.4}, 2.0, -0.5
    r = rescore(NB, scorers, w, lm_scale=scale, length_penalty=beta)
    lp = kn.log_prob(vocab.encode([list(h) for h in NB.hypotheses])).double()
    by_hand = []
    for u in range(NB.num_utterances):
        rows = [i for i in range(len(NB)) if int(NB.utterance[i]) == u]
        total = {i: float(NB.acoustic[i]) + scale * (w["kn"] * float(lp[i]) + w["len"] * 0.7 * (len(NB.hypotheses[i]) + 1))
                 + beta * len(NB.hypotheses[i]) for i in rows}
        by_hand.append(max(rows, key=lambda i: (total[i], -i)))
    assert r.best.tolist() == by_hand and r.weights == {"kn": 1.2, "len": 0.8}
    assert r.hypotheses == [NB.hypotheses[i] for i in by_hand]


def test_a_hypothesis_a_weighted_lm_cannot_score_is_never_chosen(vocab: Vocabulary) -> None:
    r = rescore(NB, {"short": _lengths_lm(vocab, 1.0, longest=2)}, {"short": 1.0})
    assert r.unscored == {"short": 1} and r.combined[1] == -math.inf
    assert r.hypotheses == [("the", "cat"), ("the", "dog")]  # +1 per token: the longest it scores wins


def test_error_rates_before_and_after(kn: BackoffNGram, vocab: Vocabulary) -> None:
    refs = {"u1": ["the", "cat", "sat"], "u2": ["dog"]}
    r = rescore(NB, {"kn": sentence_scorer(kn, vocab)}, {"kn": 1.0})
    before, after = r.error_rates(NB, refs)
    assert before == error_rate([refs["u1"], refs["u2"]], [["the", "cat"], ["dog"]])
    assert after == error_rate([refs["u1"], refs["u2"]], [list(h) for h in r.hypotheses])
    with pytest.raises(DataError, match="refs: no reference for utterance 'u2' \\(1 of 2"):
        r.error_rates(NB, {"u1": ["a"]}, source="refs")


@pytest.mark.parametrize("weights, scale", [({"kn": -1.0}, 1.0), ({"kn": math.nan}, 1.0), ({"kn": 1.0}, math.inf),
                                            ({"other": 1.0}, 1.0)])
def test_bad_weights_are_refused(weights: dict[str, float], scale: float, kn: BackoffNGram,
                                 vocab: Vocabulary) -> None:
    with pytest.raises(ValueError, match="weights"):
        rescore(NB, {"kn": sentence_scorer(kn, vocab)}, weights, lm_scale=scale)


def test_residual_run_is_refused_with_its_reason() -> None:
    from ebms.cli._generation_text import ResidualSettings, TextResidualTask
    from ebms.cli.config import ConfigError

    cfg = SimpleNamespace(sections={"residual": ResidualSettings(base_run="runs/base-lstm")})
    with pytest.raises(ConfigError, match="no sentence log-probability: score its base run 'runs/base-lstm'"):
        TextResidualTask().applier("score", cfg, None, None)  # type: ignore[arg-type]
