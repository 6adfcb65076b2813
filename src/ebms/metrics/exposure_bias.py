r"""Exposure-bias comparison of two autoregressive models: how often one gives the gold token more
probability than the other.

For gold sequences :math:`y^{(1)}, \dots, y^{(S)}` and every predicted step :math:`k` of each
(for a sentence LM the tokens and the final ``</s>``, as in the perplexity contract), read both
models teacher-forced on the gold prefix and compare the gold outcome's probabilities:

.. math::  \mathcal N = \#\{(s, k) : q_A(y^{(s)}_k \mid y^{(s)}_{<k}) > q_B(y^{(s)}_k \mid y^{(s)}_{<k})\},
           \qquad \text{ratio} = \mathcal N / \text{total},

with ``total`` the number of predicted steps; ties (equal log-probabilities) count for neither and
are reported apart. This is the measure of Table 8 of Wang et al. (2022) (model ``A`` = E-ARM,
``B`` = the cross-entropy baseline), which follows Zhang, Feng, Meng, You & Liu (2019): a model
that suffers less from exposure bias puts more mass on the ground-truth words. Zhang et al. feed
the gold prefix ("the ground truth as prefix"); the paper's wording ("when decoding") does not say
more, so this module fixes the gold-prefix (teacher-forced) reading: both models see the same
histories and only their next-step laws are compared. A ratio above 1/2 (with few ties) says ``A``
assigns higher probability to most gold tokens. Models run in evaluation mode without gradient,
their modes restored afterwards.

Models: a sentence LM (``token_log_probs(Sequences) -> (B, T + 1)``,
:class:`~ebms.models.lm.AutoregressiveLM`) with :class:`~ebms.sequences.Sequences` (or
``(tokens, lengths)``) batches, or any :class:`~ebms.objectives.earm.EARMModel` (seq2seq, PixelCNN
adapters) with its own batch type through ``teacher_forced(batch) -> (logits, targets, mask)``;
both models must report the same targets and mask. Cost: one teacher-forced pass of each model
per batch.

References: Wang, Che, Li, Song, Pei, Bengio & Li (2022), *Your autoregressive generative model
can be better if you treat it as an energy-based one*; Zhang, Feng, Meng, You & Liu (2019),
*Bridging the gap between training and inference for neural machine translation*.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ebms.capabilities import SupportsTeacherForcing, SupportsTokenLogProbs
from ebms.sequences import Sequences

__all__ = ["ExposureBiasRatio", "exposure_bias_ratio"]


@dataclass(frozen=True)
class ExposureBiasRatio:
    r"""Result of :func:`exposure_bias_ratio`.

    Attributes:
        count: :math:`\mathcal N`, gold steps where model A's probability is strictly higher.
        total: gold steps compared.
        ratio: ``count / total``.
        ties: steps with equal log-probabilities (in neither ``count`` nor B's share).
    """

    count: int
    total: int
    ratio: float
    ties: int


def exposure_bias_ratio(model_a: nn.Module, model_b: nn.Module, data: Any) -> ExposureBiasRatio:
    """Share of gold steps to which ``model_a`` gives more probability than ``model_b`` (module docstring).

    Args:
        model_a: the model under study (E-ARM in the paper's Table 8).
        model_b: the baseline.
        data: one batch, or a ``list`` of batches (Sequences / ``(tokens, lengths)`` for sentence LMs,
            the adapter's batch type for ``teacher_forced`` models).

    Returns:
        :class:`ExposureBiasRatio`.

    Raises:
        TypeError: a model with neither ``teacher_forced`` nor ``token_log_probs``; a bad batch.
        ValueError: no gold step at all, or the two models disagree on the targets or the mask.
    """
    batches = data if isinstance(data, list) else [data]
    count = total = ties = 0
    modes = [(m, m.training) for m in (model_a, model_b) if isinstance(m, nn.Module)]
    try:
        for m, _ in modes:
            m.eval()
        with torch.no_grad():
            for i, batch in enumerate(batches):
                lp_a, tgt_a, mask_a = _gold_log_probs(model_a, batch, "model_a")
                lp_b, tgt_b, mask_b = _gold_log_probs(model_b, batch, "model_b")
                if mask_a.shape != mask_b.shape or not torch.equal(mask_a, mask_b.to(mask_a.device)) or \
                        not torch.equal(torch.where(mask_a, tgt_a, 0), torch.where(mask_a, tgt_b.to(tgt_a.device), 0)):
                    raise ValueError(f"data: batch {i}: the two models disagree on the gold steps (targets or mask "
                                     f"of shapes {tuple(mask_a.shape)} and {tuple(mask_b.shape)})")
                lp_b = lp_b.to(lp_a.device, lp_a.dtype)
                count += int((mask_a & (lp_a > lp_b)).sum())
                ties += int((mask_a & (lp_a == lp_b)).sum())
                total += int(mask_a.sum())
    finally:
        for m, mode in modes:
            m.train(mode)
    if total == 0:
        raise ValueError("data: expected at least one gold step to compare; got none")
    return ExposureBiasRatio(count, total, count / total, ties)


def _gold_log_probs(model: Any, batch: Any, name: str) -> tuple[Tensor, Tensor, Tensor]:
    """``(log q(gold) (B, K), targets (B, K), mask (B, K))`` of one teacher-forced pass."""
    if not isinstance(model, SupportsTokenLogProbs):  # a sentence LM is read by its own scores (it has both)
        if not isinstance(model, SupportsTeacherForcing):
            raise TypeError(f"{name}: expected a sentence LM with token_log_probs(Sequences) or a model with "
                            f"teacher_forced(batch) (ebms.objectives.earm.EARMModel); got {type(model).__name__}")
        logits, targets, mask = model.teacher_forced(batch)
        lp = logits.log_softmax(-1).gather(-1, targets.masked_fill(~mask, 0).unsqueeze(-1)).squeeze(-1)
        return lp, targets, mask
    batch = Sequences.coerce(batch, name="data", expected="Sequences, a (tokens (B, T), lengths (B,)) tuple, or a "
                             "list of them for sentence LMs")
    lp = model.token_log_probs(batch)
    k = torch.arange(lp.shape[1], device=lp.device)
    lengths = batch.lengths.to(lp.device).unsqueeze(1)
    tokens = F.pad(batch.tokens.to(lp.device), (0, 1))[:, :lp.shape[1]]
    return lp, torch.where(k < lengths, tokens, 0), k <= lengths
