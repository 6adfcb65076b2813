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

from ebms.capabilities import HasVocabSize, RecurrentState
from ebms.distributions import Distribution
from ebms.sequences import Sequences

__all__ = ["Perplexity", "perplexity"]

#: the largest sentence log-probability accepted (float rounding of ``log 1``).
_MAX_LOG_PROB = 1e-4


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


#: the batches :func:`perplexity` reads, as its ``TypeError`` names them.
_FORMS = "Sequences, a (tokens, lengths) tuple or an (inputs, targets) running-text chunk"


def _is_stream(batch: Any) -> bool:
    return (isinstance(batch, tuple) and len(batch) == 2 and all(isinstance(t, Tensor) for t in batch)
            and batch[0].dim() == 2 and batch[1].dim() == 2)


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
        ValueError: no tokens at all; a running-text shape mismatch or ids outside the model's
            vocabulary; a model whose log-probabilities are NaN or above 0 (not a normalised model:
            an energy-based model's unnormalised score gives no perplexity).
        TypeError: a batch of another kind, or float token ids (never rounded).
    """
    if isinstance(model, Distribution) and not model.normalised:
        raise ValueError(f"model: this {type(model).__name__} is not normalised (model.normalised is False, e.g. "
                         "NGram.zeros scores sentences, it is not a law); a perplexity needs a normalised model")
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
                seqs = Sequences.coerce(batch, name=f"data[{i}]", expected=_FORMS)
                total += _checked_sum(model.log_prob(seqs), seqs.batch_size, i)
                tokens += int(seqs.lengths.sum()) + seqs.batch_size
                sentences += seqs.batch_size
    finally:
        if module is not None:
            module.train(was_training)
    if tokens == 0:
        raise ValueError("data: expected at least one sentence or token; got none")
    nll = -total / tokens
    return Perplexity(math.exp(nll) if nll < 709.0 else math.inf, nll, total, tokens, sentences)


def _checked_sum(log_probs: Any, batch_size: int, i: int) -> float:
    """The sum of one batch's sentence log-probabilities, refusing what no normalised model gives."""
    if not isinstance(log_probs, Tensor) or tuple(log_probs.shape) != (batch_size,):
        raise ValueError(f"model: log_prob of data[{i}] must be a tensor of shape ({batch_size},); got "
                         f"{getattr(log_probs, 'shape', type(log_probs).__name__)}")
    lp = log_probs.detach().double()
    bad = torch.isnan(lp) | (lp > _MAX_LOG_PROB)
    if bool(bad.any()):
        k = int(bad.nonzero()[0])
        raise ValueError(f"model: log_prob of sentence {k} of data[{i}] is {float(lp[k]):.6g}; a normalised model "
                         "gives log p <= 0 and never NaN (an unnormalised score has no perplexity)")
    return float(lp.sum())


def _chunk(model: Any, batch: tuple[Tensor, Tensor], state: Any, i: int) -> tuple[float, Any]:
    inputs, targets = batch
    for name, t in (("inputs", inputs), ("targets", targets)):
        if t.dtype.is_floating_point or t.is_complex() or t.dtype == torch.bool:
            raise TypeError(f"data[{i}]: {name} must be integer token ids; got dtype {t.dtype} (ids are never rounded)")
    if inputs.shape != targets.shape:
        raise ValueError(f"data[{i}]: expected inputs and targets of one shape; got {tuple(inputs.shape)} and "
                         f"{tuple(targets.shape)}")
    V = model.vocab_size if isinstance(model, HasVocabSize) else None
    if isinstance(V, int) and inputs.numel():
        lo, hi = int(torch.minimum(inputs.min(), targets.min())), int(torch.maximum(inputs.max(), targets.max()))
        if lo < 0 or hi >= V:
            raise ValueError(f"data[{i}]: expected token ids in [0, {V - 1}] (the model's vocabulary); got "
                             f"{lo}..{hi}")
    if state is not None and not (isinstance(state, RecurrentState) and state.batch_size == inputs.shape[0]):
        state = None
    device = next(model.parameters()).device
    logits, state = model(inputs.to(device).long(), state)
    nll = F.cross_entropy(logits.reshape(-1, logits.shape[-1]).double(), targets.to(device).long().reshape(-1),
                          reduction="sum")
    if math.isnan(float(nll)):
        raise ValueError(f"model: its logits on data[{i}] give a NaN log-likelihood")
    return -float(nll), state
