"""The exposure-bias ratio counts the gold steps (tokens and </s>) to which model A gives strictly
more probability than model B, teacher-forced on the gold prefix, with ties apart."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from ebms.metrics.exposure_bias import ExposureBiasRatio, exposure_bias_ratio
from ebms.models.lm import LSTMLM
from ebms.sequences import Sequences


class Unigram(nn.Module):
    """A sentence 'LM' whose next-token law ignores the history: ``p = probs`` at every step."""

    def __init__(self, probs: list[float]) -> None:
        super().__init__()
        self.log_p = nn.Parameter(torch.tensor(probs, dtype=torch.float64).log())

    def token_log_probs(self, x: Sequences) -> torch.Tensor:
        targets = torch.nn.functional.pad(x.tokens.masked_fill(~x.mask(), 0), (0, 1))
        keep = torch.arange(targets.shape[1]) <= x.lengths.unsqueeze(1)
        return torch.where(keep, self.log_p[targets], 0.0)


class Teacher(nn.Module):
    """A fixed-length model in the EARMModel form: the same table of logits at every step."""

    def __init__(self, logits: list[float], *, last_is_real: bool = True) -> None:
        super().__init__()
        self.logits, self.last_is_real = nn.Parameter(torch.tensor(logits)), last_is_real

    def teacher_forced(self, x: torch.Tensor):
        mask = torch.ones_like(x, dtype=torch.bool)
        mask[:, -1] = self.last_is_real
        return self.logits.expand(*x.shape, -1), x, mask


def test_ratio_counts_gold_steps_with_strictly_higher_probability_by_hand():
    a, b = Unigram([0.1, 0.4, 0.2, 0.3]), Unigram([0.25] * 4)
    x = Sequences.from_lists([[1, 2], [3]])
    # gold steps: 1, 2, </s> | 3, </s>; A beats B on tokens 1 (0.4) and 3 (0.3), loses on 2 and </s>
    got = exposure_bias_ratio(a, b, x)
    assert got == ExposureBiasRatio(count=2, total=5, ratio=0.4, ties=0)
    assert exposure_bias_ratio(b, a, (x.pad_to(6).tokens, x.lengths)) == ExposureBiasRatio(3, 5, 0.6, 0)
    same = exposure_bias_ratio(a, Unigram([0.1, 0.4, 0.2, 0.3]), [x, x[:1]])  # a list of batches adds up
    assert same == ExposureBiasRatio(0, 8, 0.0, 8)


def test_counts_of_both_directions_and_ties_partition_the_gold_steps_for_neural_lms():
    torch.manual_seed(0)
    a = LSTMLM(6, embedding_dim=4, hidden_size=5, num_layers=1, dropout=0.5)
    b = LSTMLM(6, embedding_dim=4, hidden_size=5, num_layers=1).eval()
    x = Sequences.from_lists([[1, 2, 3], [4], [], [5, 5, 1, 2]])
    ab, ba = exposure_bias_ratio(a, b, x), exposure_bias_ratio(b, a, x)
    assert ab.total == ba.total == 3 + 1 + 0 + 4 + 4
    assert ab.count + ba.count + ab.ties == ab.total and ab.ties == ba.ties
    gold_a, gold_b = a.eval().token_log_probs(x), b.token_log_probs(x)
    keep = torch.arange(5) <= x.lengths.unsqueeze(1)
    assert ab.count == int((keep & (gold_a > gold_b)).sum())
    a.train()
    assert exposure_bias_ratio(a, b, x) == ab and a.training and not b.training  # eval inside, modes restored


def test_teacher_forced_models_are_compared_on_their_own_steps():
    x = torch.tensor([[0, 1, 2], [2, 2, 2]])
    got = exposure_bias_ratio(Teacher([0.0, 1.0, 0.0]), Teacher([0.0, 0.0, 0.0]), x)
    assert got == ExposureBiasRatio(count=1, total=6, ratio=1 / 6, ties=0)


def test_bad_models_and_data_are_named():
    a = Unigram([0.5, 0.5])
    with pytest.raises(TypeError, match=r"^model_b: expected a sentence LM with token_log_probs\(Sequences\) or a "
                                        r"model with teacher_forced\(batch\) \(ebms.objectives.earm.EARMModel\); "
                                        r"got Linear"):
        exposure_bias_ratio(a, nn.Linear(1, 1), Sequences.from_lists([[1]]))
    with pytest.raises(TypeError, match=r"^data: expected Sequences, a \(tokens \(B, T\), lengths \(B,\)\) tuple, or "
                                        r"a list of them for sentence LMs; got Tensor"):
        exposure_bias_ratio(a, a, torch.ones(1, 2, dtype=torch.long))
    with pytest.raises(ValueError, match=r"^data: batch 0: the two models disagree on the gold steps"):
        exposure_bias_ratio(Teacher([0.0, 0.0]), Teacher([0.0, 0.0], last_is_real=False), torch.ones(1, 2).long())
    with pytest.raises(ValueError, match=r"^data: expected at least one gold step to compare; got none"):
        exposure_bias_ratio(a, a, [])
