r"""Exact corpus perplexity of a normalised language model.

Sentence batches (:class:`~ebms.sequences.Sequences` or ``(tokens (B, T), lengths (B,))``): for
sentences :math:`y^{(1..N)}` of lengths :math:`L_i`,

.. math::  \mathrm{PPL} = \exp\Big(-\frac{\sum_i \log p(y^{(i)})}{\sum_i (L_i + 1)}\Big),

where ``log p`` includes the final ``</s>``, which counts as a token (as SRILM, KenLM and the PTB
literature count it). Any model with ``log_prob(Sequences) -> (B,)`` qualifies: the LMs of
:mod:`ebms.models.lm`, :class:`ebms.distributions.NGram`, the back-off n-grams.

Running-text batches (``(inputs (B, S), targets (B, S))`` pairs of 2-D tensors, consecutive
chunks of ``B`` streams as :func:`ebms.data.text.bptt_batches` cuts them): the model's state is
carried from one chunk to the next (``model(inputs, state) -> (logits, state)``), and every
target counts, ``</s>`` included. The perplexity then conditions on the text before each
sentence, so it differs from the sentence-level one.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ebms.sequences import Sequences

__all__ = ["Perplexity", "perplexity"]


@dataclass(frozen=True)
class Perplexity:
    """A corpus score.

    Attributes:
        perplexity: ``exp(nll)`` (``inf`` when some token has probability 0).
        nll: mean negative log-likelihood per token, nats (``</s>`` counted).
        log_prob: total log-probability of the corpus, nats.
        tokens: predicted tokens, ``</s>`` included (sentences: words + sentences).
        sentences: number of sentences scored (0 for running text).
    """

    perplexity: float
    nll: float
    log_prob: float
    tokens: int
    sentences: int


def _is_stream(batch: Any) -> bool:
    return (isinstance(batch, tuple) and len(batch) == 2 and all(isinstance(t, Tensor) for t in batch)
            and batch[0].dim() == 2 and batch[1].dim() == 2)


def _sentences(batch: Any, i: int) -> Sequences:
    if isinstance(batch, Sequences):
        return batch
    if isinstance(batch, tuple) and len(batch) == 2 and all(isinstance(t, Tensor) for t in batch):
        return Sequences(batch[0], batch[1])
    raise TypeError(f"data[{i}]: expected Sequences, a (tokens, lengths) tuple or an (inputs, targets) running-text "
                    f"chunk; got {type(batch).__name__}")


def perplexity(model: Any, data: Iterable[Any]) -> Perplexity:
    """Perplexity of ``model`` on the batches of ``data`` (see the module docstring).

    Args:
        model: for sentences, any object with ``log_prob(Sequences) -> (B,)``; for running text,
            an :class:`~ebms.models.lm.AutoregressiveLM` (``model(inputs, state)``).
        data: an iterable of batches: :class:`~ebms.sequences.Sequences`, ``(tokens, lengths)``
            or ``(inputs, targets)`` running-text chunks (the state is carried across consecutive
            chunks of the same batch size).

    An ``nn.Module`` model is scored in eval mode (dropout off) and put back in its mode after;
    no gradients are kept. Sums are accumulated in float64.

    Raises:
        ValueError: no tokens at all; a running-text shape mismatch.
    """
    module = model if isinstance(model, nn.Module) else None
    was_training = module.training if module is not None else False
    if module is not None:
        module.eval()
    total, tokens, sentences, state = 0.0, 0, 0, None
    try:
        with torch.no_grad():
            for i, batch in enumerate(data):
                if _is_stream(batch):
                    lp, state = _chunk(model, batch, state, i)
                    total += lp
                    tokens += batch[1].numel()
                    continue
                seqs = _sentences(batch, i)
                total += float(model.log_prob(seqs).double().sum())
                tokens += int(seqs.lengths.sum()) + seqs.batch_size
                sentences += seqs.batch_size
    finally:
        if module is not None:
            module.train(was_training)
    if tokens == 0:
        raise ValueError("data: expected at least one sentence or token; got none")
    nll = -total / tokens
    return Perplexity(math.exp(nll) if nll < 709.0 else math.inf, nll, total, tokens, sentences)


def _chunk(model: Any, batch: tuple[Tensor, Tensor], state: Any, i: int) -> tuple[float, Any]:
    inputs, targets = batch
    if inputs.shape != targets.shape:
        raise ValueError(f"data[{i}]: expected inputs and targets of one shape; got {tuple(inputs.shape)} and "
                         f"{tuple(targets.shape)}")
    if state is not None and getattr(state, "batch_size", None) != inputs.shape[0]:
        state = None
    device = next(model.parameters()).device
    logits, state = model(inputs.to(device).long(), state)
    nll = F.cross_entropy(logits.reshape(-1, logits.shape[-1]).double(), targets.to(device).long().reshape(-1),
                          reduction="sum")
    return -float(nll), state
