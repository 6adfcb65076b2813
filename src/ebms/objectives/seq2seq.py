r"""Teacher-forced training loss of an encoder-decoder translation model (:class:`~ebms.models.Seq2SeqTransformer`).

Cross-entropy per target token (``</s>`` included) with optional label smoothing (Szegedy et al.
2016, *Rethinking the Inception architecture*) and scheduled sampling in its two-pass parallel
form (Bengio et al. 2015, *Scheduled sampling for sequence prediction with recurrent neural
networks*; Mihaylova & Martins 2019, *Scheduled sampling for Transformers*). Batches are pairs
``(src, tgt)`` of :class:`~ebms.sequences.Sequences`, or the four tensors a trainer streams.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from ebms._checks import check_probability
from ebms.distributions import sample_categorical
from ebms.models.seq2seq import Seq2SeqAdapter, Seq2SeqTransformer, source_target_pair
from ebms.objectives._base import LossOutput, scalar_metrics
from ebms.sequences import Sequences

__all__ = ["Seq2SeqNLL"]


def _unwrap(model: Any) -> Seq2SeqTransformer:
    inner = model.model if isinstance(model, Seq2SeqAdapter) else model
    if not isinstance(inner, Seq2SeqTransformer):
        raise TypeError(f"model: expected a Seq2SeqTransformer (or its Seq2SeqAdapter); got {type(model).__name__}")
    return inner


class Seq2SeqNLL(nn.Module):
    r"""Mean cross-entropy per target token of a :class:`~ebms.models.Seq2SeqTransformer`, ``</s>`` included.

    .. math::  \mathcal L = \frac{1}{\sum_b (L_b + 1)} \sum_b \sum_{t=1}^{L_b + 1}
               \Big[(1 - \varepsilon)\, (-\log p(y_t \mid \tilde y_{<t}, x))
               + \frac{\varepsilon}{V} \sum_{v} (-\log p(v \mid \tilde y_{<t}, x))\Big].

    Label smoothing ``epsilon`` mixes the one-hot target with the uniform law over all ``V`` ids
    (:func:`torch.nn.functional.cross_entropy`'s ``label_smoothing``). Scheduled sampling with
    probability ``p``: a first teacher-forced pass without gradient predicts every position
    (a draw from the softmax, or its argmax with ``mode="argmax"``); each decoder input
    :math:`\tilde y_t` (``t >= 1``) is that prediction of ``y_t`` with probability ``p``, else
    ``y_t``; the loss is taken on a second pass over the mixed inputs — the parallel variant of
    Mihaylova & Martins 2019 of Bengio et al. 2015. With ``epsilon = p = 0`` it is the plain
    teacher-forced NLL ``-sum log p(y | x) / sum (L + 1)`` (one pass).

    Batch: ``(src, tgt)`` Sequences, or the four tensors ``(src tokens, src lengths, tgt tokens, tgt
    lengths)`` a :class:`~ebms.train.Trainer` streams. Randomness (scheduled sampling only) from ``generator``;
    dropout from torch's global RNG. Metrics: ``nll`` (unsmoothed, nats per token, of the pass
    the loss uses), ``ppl = exp(nll)``, ``tokens``, ``replaced`` (fraction of inputs replaced).
    Cost: one forward and backward pass, plus one forward pass when ``p > 0``.

    Args:
        label_smoothing: ``epsilon`` in ``[0, 1)``.
        scheduled_sampling: ``p`` in ``[0, 1]``.
        mode: ``"sample"`` or ``"argmax"`` (the first pass's prediction).
    """

    def __init__(self, label_smoothing: float = 0.0, scheduled_sampling: float = 0.0, *, mode: str = "sample") -> None:
        super().__init__()
        self.label_smoothing = check_probability(label_smoothing, "label_smoothing", open_high=True)
        self.scheduled_sampling = check_probability(scheduled_sampling, "scheduled_sampling")
        if mode not in ("sample", "argmax"):
            raise ValueError(f"mode: expected 'sample' or 'argmax'; got {mode!r}")
        self.mode = mode

    def forward(self, model: nn.Module, batch: tuple[Sequences, Sequences], *,
                generator: torch.Generator | None = None) -> LossOutput:
        net = _unwrap(model)
        src, tgt = net.check_pair(*source_target_pair(batch))
        inputs, targets, mask = net.teacher_forcing(tgt)
        memory, pad = net.encode(src)
        replaced = torch.zeros((), device=inputs.device)
        if self.scheduled_sampling > 0 and inputs.shape[1] > 1:
            with torch.no_grad():
                first = net.decode(memory, pad, inputs)[:, :-1]  # predictions of y_1 .. y_W
                guess = first.argmax(-1) if self.mode == "argmax" else sample_categorical(first, generator)
            u = torch.rand(guess.shape, generator=generator, device=guess.device)
            swap = (u < self.scheduled_sampling) & mask[:, 1:]
            inputs = torch.cat([inputs[:, :1], torch.where(swap, guess, inputs[:, 1:])], 1)
            replaced = swap.sum() / mask[:, 1:].sum().clamp(min=1)
        logits = net.decode(memory, pad, inputs).transpose(1, 2)  # (B, V, W + 1)
        tokens = mask.sum()
        nll = F.cross_entropy(logits, targets, reduction="none").masked_fill(~mask, 0.0).sum() / tokens
        if self.label_smoothing:
            smoothed = F.cross_entropy(logits, targets, reduction="none", label_smoothing=self.label_smoothing)
            loss = smoothed.masked_fill(~mask, 0.0).sum() / tokens
        else:
            loss = nll
        return LossOutput(loss, scalar_metrics(nll=nll.detach(), ppl=nll.detach().exp(), tokens=tokens,
                                               replaced=replaced))

    def extra_repr(self) -> str:
        return f"label_smoothing={self.label_smoothing}, scheduled_sampling={self.scheduled_sampling}, mode={self.mode!r}"
