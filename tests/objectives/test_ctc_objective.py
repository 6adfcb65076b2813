"""CTCObjective: the objective contract around CTC and CTC-CRF, checked against the structured losses."""

from __future__ import annotations

import pytest
import torch
from torch import Tensor, nn

from ebms.objectives import LossOutput
from ebms.objectives.ctc import CTCObjective
from ebms.structured import DenominatorGraph, LabelNGram, ctc_crf_loss, ctc_loss

V, F = 4, 3  # labels 1..3 and the blank 0; feature width


class Frames(nn.Module):
    """Per-frame label log-probabilities ``(T, B, V)`` from features ``(B, T, F)``, lengths unchanged."""

    def __init__(self) -> None:
        super().__init__()
        self.proj = nn.Linear(F, V)

    def forward(self, x: Tensor, lengths: Tensor) -> tuple[Tensor, Tensor]:
        return self.proj(x).log_softmax(-1).transpose(0, 1), lengths


def _batch(pad: int = 0) -> tuple[Tensor, ...]:
    g = torch.Generator().manual_seed(0)
    features = torch.randn(3, 7, F, generator=g, dtype=torch.float64)
    features = torch.cat([features, torch.randn(3, pad, F, generator=g, dtype=torch.float64)], 1)  # junk padding
    lengths = torch.tensor([7, 5, 6])
    targets = torch.tensor([[1, 2, 3, 0], [2, 2, 0, 0], [3, 1, 0, 0]])
    return features, lengths, torch.nn.functional.pad(targets, (0, pad)), torch.tensor([3, 2, 2])


@pytest.fixture
def model() -> Frames:
    torch.manual_seed(0)
    return Frames().double()


def test_ctc_objective_is_the_ctc_loss_of_the_model_output(model: Frames) -> None:
    features, lengths, targets, target_lengths = _batch()
    out = CTCObjective()(model, _batch(pad=4))  # padding beyond the longest input and target is cut off
    log_probs, out_lengths = model(features, lengths)
    assert isinstance(out, LossOutput) and out.negatives is None
    torch.testing.assert_close(out.loss, ctc_loss(log_probs, targets, out_lengths, target_lengths), rtol=1e-12, atol=0)
    assert out.metrics == {"ctc": pytest.approx(float(out.loss.detach()))}
    out.loss.backward()
    assert model.proj.weight.grad is not None and bool(torch.isfinite(model.proj.weight.grad).all())


def test_ctc_crf_objective_is_the_ctc_crf_loss_and_reduces_to_ctc_with_a_constant_lm(model: Frames) -> None:
    features, lengths, targets, target_lengths = _batch()
    log_probs, out_lengths = model(features, lengths)
    graph = DenominatorGraph.from_ngram(LabelNGram.fit([[1, 2, 3], [2, 2], [3, 1]], V, 2))
    out = CTCObjective(graph, ctc_weight=0.5)(model, _batch())
    expected = ctc_crf_loss(log_probs, targets, out_lengths, target_lengths, graph, ctc_weight=0.5)
    torch.testing.assert_close(out.loss, expected, rtol=1e-12, atol=0)
    assert set(out.metrics) == {"ctc_crf"}
    zeros = DenominatorGraph.from_ngram(LabelNGram.zeros(V, 2))  # Z_den = 1: CTC-CRF is CTC
    torch.testing.assert_close(CTCObjective(zeros)(model, _batch()).loss, CTCObjective()(model, _batch()).loss,
                               rtol=1e-9, atol=1e-12)


def test_ctc_objective_keeps_no_state_and_names_bad_arguments() -> None:
    assert CTCObjective().state_dict() == {}
    with pytest.raises(ValueError, match=r"ctc_weight: expected a number >= 0; got -1"):
        CTCObjective(ctc_weight=-1)
    with pytest.raises(ValueError, match=r"ctc_weight: weights the CTC term of CTC-CRF, which needs a graph; got 0.5"):
        CTCObjective(ctc_weight=0.5)
    with pytest.raises(TypeError, match=r"graph: expected a DenominatorGraph or None; got str"):
        CTCObjective("bigram")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"batch: expected \(features, lengths, targets, target_lengths\); got 2"):
        CTCObjective()(Frames(), _batch()[:2])


@pytest.mark.parametrize(
    ("change", "error", "match"),
    [
        ({0: torch.zeros(3, 7, F, dtype=torch.long)}, TypeError, r"features: expected a floating-point tensor"),
        ({0: torch.zeros(0, 7, F, dtype=torch.float64)}, ValueError, r"features: expected at least one utterance"),
        ({1: torch.tensor([7, 5])}, ValueError, r"lengths: expected a \(3\) integer tensor \(B = features.shape\[0\]\); "
                                                r"got \(2,\)"),
        ({2: torch.zeros(3, 4)}, ValueError, r"targets: expected a \(3, S\) integer tensor"),
        ({3: torch.tensor([[3], [2], [2]])}, ValueError, r"target_lengths: expected a \(3\) integer tensor"),
    ],
)
def test_ctc_objective_names_bad_batch_entries(change, error, match) -> None:
    batch = list(_batch())
    for i, v in change.items():
        batch[i] = v
    with pytest.raises(error, match="^" + match):
        CTCObjective()(Frames().double(), tuple(batch))


def test_ctc_objective_names_a_non_tuple_batch_and_a_model_of_the_wrong_output() -> None:
    with pytest.raises(ValueError, match=r"^batch: expected \(features, lengths, targets, target_lengths\); got a Tensor"):
        CTCObjective()(Frames(), torch.zeros(3, 7, F))

    class OneOutput(nn.Module):
        def forward(self, x: Tensor, lengths: Tensor) -> Tensor:
            return x

    with pytest.raises(TypeError, match=r"^model: expected model\(features, lengths\) to return \(log_probs"):
        CTCObjective()(OneOutput(), _batch())
