"""Corpus perplexity counts </s> as a token, works for any model with log_prob over Sequences, and
in running-text mode carries the state across chunks exactly."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from ebms.data.text import bptt_batches
from ebms.distributions import NGram
from ebms.models.lm import LSTMLM, TransformerLM, perplexity
from ebms.sequences import Sequences

V = 6
CORPUS = [[1, 2, 3], [4], [], [5, 5, 1, 2], [3, 1]]


def _lstm() -> LSTMLM:
    torch.manual_seed(0)
    return LSTMLM(V, embedding_dim=4, hidden_size=5, num_layers=2, dropout=0.3).double()


def test_sentence_perplexity_divides_by_tokens_plus_sentences():
    lm = _lstm().eval()
    batches = [Sequences.from_lists(CORPUS[:2]), Sequences.from_lists(CORPUS[2:])]
    got = perplexity(lm, batches)
    total = float(lm.log_prob(Sequences.from_lists(CORPUS)).detach().sum())
    tokens = sum(len(s) for s in CORPUS) + len(CORPUS)
    assert (got.tokens, got.sentences) == (tokens, len(CORPUS))
    assert got.log_prob == pytest.approx(total, abs=1e-12)
    assert got.nll == pytest.approx(-total / tokens, abs=1e-12)
    assert got.perplexity == pytest.approx(math.exp(-total / tokens), rel=1e-12)
    tuples = perplexity(lm, [(b.tokens, b.lengths) for b in batches])
    assert tuples.perplexity == pytest.approx(got.perplexity, rel=1e-12)


def test_a_uniform_ngram_over_v_outcomes_has_perplexity_v():
    got = perplexity(NGram.uniform(V), [Sequences.from_lists(CORPUS)])
    assert got.perplexity == pytest.approx(V, rel=1e-12)


def test_the_model_is_scored_in_eval_mode_and_put_back():
    lm = _lstm().train()
    got = perplexity(lm, [Sequences.from_lists(CORPUS)])
    assert lm.training
    again = perplexity(lm.eval(), [Sequences.from_lists(CORPUS)])
    assert got == again and not lm.training


@pytest.mark.parametrize("build", [_lstm, lambda: TransformerLM(V, d_model=8, num_heads=2, num_layers=1,
                                                                    dim_feedforward=8, max_length=40).double()])
def test_running_text_perplexity_carries_the_state_across_chunks(build):
    lm = build().eval()
    stream = torch.tensor([t for s in CORPUS * 4 for t in [*s, 0]])  # 60 tokens, a </s> after each sentence
    chunks = bptt_batches(stream, 2, 5)
    got = perplexity(lm, chunks)
    rows = stream.view(2, -1)
    with torch.no_grad():
        logits, _ = lm(rows[:, :-1])  # each row read in one pass from its start
    nll = F.cross_entropy(logits.reshape(-1, V), rows[:, 1:].reshape(-1), reduction="sum")
    assert got.tokens == rows[:, 1:].numel() and got.sentences == 0
    assert got.log_prob == pytest.approx(-float(nll), abs=1e-10)


def test_bad_data_is_named():
    lm = _lstm()
    with pytest.raises(ValueError, match=r"^data: expected at least one sentence or token; got none"):
        perplexity(lm, [])
    with pytest.raises(TypeError, match=r"^data\[0\]: expected Sequences, a \(tokens, lengths\) tuple or an "
                                        r"\(inputs, targets\) running-text chunk; got list"):
        perplexity(lm, [[1, 2]])
    with pytest.raises(ValueError, match=r"^data\[0\]: expected inputs and targets of one shape; got \(2, 3\) and "
                                         r"\(2, 2\)"):
        perplexity(lm, [(torch.zeros(2, 3, dtype=torch.long), torch.zeros(2, 2, dtype=torch.long))])


def test_float_or_out_of_range_running_text_ids_are_refused_not_rounded():
    lm = _lstm()
    ids = torch.tensor([[1, 2, 3], [4, 5, 1]])
    with pytest.raises(TypeError, match=r"^data\[0\]: inputs must be integer token ids; got dtype torch.float32 "
                                        r"\(ids are never rounded\)$"):
        perplexity(lm, [(ids.float() + 0.5, ids)])
    with pytest.raises(TypeError, match=r"^data\[0\]: targets must be integer token ids; got dtype torch.float64"):
        perplexity(lm, [(ids, ids.double())])
    with pytest.raises(ValueError, match=r"^data\[1\]: expected token ids in \[0, 5\] \(the model's vocabulary\); "
                                         r"got 1\.\.6$"):
        perplexity(lm, [(ids, ids), (ids, ids + 1)])


class _Scores(torch.nn.Module):
    """Not a normalised model: a fixed score per sentence."""

    def __init__(self, value: float) -> None:
        super().__init__()
        self.value = value

    def log_prob(self, x: Sequences) -> torch.Tensor:
        out = torch.full((x.batch_size,), -1.0)
        out[-1] = self.value
        return out


@pytest.mark.parametrize("value, shown", [(2.5, "2.5"), (math.nan, "nan")])
def test_a_log_probability_above_zero_or_nan_is_refused(value, shown):
    # log p > 0 means p > 1: an energy's unnormalised score, whose "perplexity" would read below 1
    with pytest.raises(ValueError, match=rf"^model: log_prob of sentence 1 of data\[0\] is {shown}; a normalised "
                                         r"model gives log p <= 0 and never NaN"):
        perplexity(_Scores(value), [Sequences.from_lists(CORPUS[:2]), Sequences.from_lists(CORPUS[2:])])
    assert perplexity(_Scores(-2.0), [Sequences.from_lists(CORPUS)]).log_prob == pytest.approx(-6.0)


def test_a_table_that_is_not_normalised_has_no_perplexity():
    with pytest.raises(ValueError, match=r"^model: this NGram is not normalised \(model.normalised is False"):
        perplexity(NGram.zeros(V, 2), [Sequences.from_lists(CORPUS)])  # every sentence scores 0: "perplexity 1"
