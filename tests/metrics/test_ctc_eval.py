"""Tests for ebms.metrics.ctc_eval: batched CTC decoding of a test set and its label error figures."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from ebms.metrics.ctc_eval import ctc_transcripts, evaluate_ctc
from ebms.metrics.error_rate import error_rate
from ebms.structured.ctc import greedy_decode
from ebms.structured.ctc_crf import ctc_crf_decode
from ebms.structured.den_graph import DenominatorGraph
from ebms.structured.ngram import LabelNGram

V = 4  # blank 0 and labels 1..3


class FrameScores(nn.Module):
    """The features are the per-frame scores: ``log_softmax(features)``, time-major, all frames kept.
    Records the mode and the padded width of every call."""

    def __init__(self) -> None:
        super().__init__()
        self.scale = nn.Parameter(torch.ones((), dtype=torch.float64))
        self.calls: list[tuple[bool, int]] = []

    def forward(self, x, lengths):
        self.calls.append((self.training, int(x.shape[1])))
        return torch.log_softmax(self.scale * x, dim=-1).transpose(0, 1), lengths


def make_test_set(seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    lengths = torch.tensor([6, 3, 8, 5, 2])
    x = 3.0 * torch.randn(5, 9, V, generator=g, dtype=torch.float64)
    x[torch.arange(9) >= lengths[:, None]] = 0.0
    refs = [[1, 2], [3], [1, 1, 2, 3], [2, 3], [1]]
    return x, lengths, refs


def graph() -> DenominatorGraph:
    return DenominatorGraph.from_ngram(LabelNGram.fit([[1, 2], [3], [1, 2, 3], [2, 3, 1]], V, 2))


def whole_batch(x, lengths, den=None):
    lp = torch.log_softmax(x, dim=-1).transpose(0, 1)
    greedy = greedy_decode(lp, lengths).sequences()
    return greedy, (None if den is None else ctc_crf_decode(lp, lengths, den).sequences())


def test_batched_transcripts_equal_decoding_the_whole_set_at_once():
    x, lengths, _ = make_test_set()
    den = graph()
    expect = whole_batch(x, lengths, den)
    for batch_size in (1, 2, 64):
        assert ctc_transcripts(FrameScores(), x, lengths, den_graph=den, batch_size=batch_size) == expect
    assert ctc_transcripts(FrameScores(), x, lengths) == (expect[0], None)


def test_batches_are_cut_to_their_longest_utterance_in_eval_mode_and_the_mode_is_restored():
    x, lengths, _ = make_test_set()
    model = FrameScores()
    ctc_transcripts(model, x, lengths, batch_size=2)
    assert model.calls == [(False, 6), (False, 8), (False, 2)]
    assert model.training


def test_figures_are_the_error_rates_of_the_transcripts():
    x, lengths, refs = make_test_set()
    den = graph()
    greedy, with_lm = whole_batch(x, lengths, den)
    er = error_rate(refs, greedy)
    out = evaluate_ctc(FrameScores(), x, lengths, refs, den_graph=den, batch_size=2)
    assert out == {"ler": er.percent, "substitutions": er.substitutions, "deletions": er.deletions,
                   "insertions": er.insertions, "ser": 100.0 * er.sentence_error_rate, "ref_labels": 10,
                   "utterances": 5, "ler_lm": error_rate(refs, with_lm).percent}
    assert "ler_lm" not in evaluate_ctc(FrameScores(), x, lengths, refs)


def test_bad_arguments_are_refused_with_messages():
    x, lengths, refs = make_test_set()
    m = FrameScores()
    with pytest.raises(TypeError, match=r"features: expected a floating-point tensor; got dtype torch.int64"):
        ctc_transcripts(m, x.long(), lengths)
    with pytest.raises(ValueError, match=r"features: expected shape \(N, T, F\); got \(5, 9\)"):
        ctc_transcripts(m, x[..., 0], lengths)
    with pytest.raises(ValueError, match=r"lengths: expected a \(5,\) integer tensor \(one per utterance\); "
                                         r"got \(4,\) torch.int64"):
        ctc_transcripts(m, x, lengths[:4])
    with pytest.raises(ValueError, match=r"lengths: expected frame counts in \[1, 9\] \(features.shape\[1\]\); "
                                         r"got min 0, max 8"):
        ctc_transcripts(m, x, torch.tensor([6, 0, 8, 5, 2]))
    with pytest.raises(ValueError, match=r"batch_size: expected an int >= 1; got 0"):
        ctc_transcripts(m, x, lengths, batch_size=0)
    with pytest.raises(TypeError, match=r"den_graph: expected an ebms.structured.den_graph.DenominatorGraph or None; "
                                        r"got dict"):
        ctc_transcripts(m, x, lengths, den_graph={})  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"hyps: expected one hypothesis per reference \(2\); got 5"):
        evaluate_ctc(m, x, lengths, refs[:2])
