r"""Private: decoding a seq2seq model — greedy, beam search and ancestral sampling.

Each function takes a model with ``encode(src) -> (memory (B, S, d), pad (B, S) bool)`` and
``decode(memory, pad, inputs (N, t)) -> logits (N, t, V)`` (the next-token logits after each
decoder input, ``inputs[:, 0] = <s> = 0``), and decodes ``y`` one token at a time, id 0 being
``</s>``. Every step recomputes the decoder over the whole prefix (no key/value cache), so a
sentence of ``L`` tokens costs ``O(L)`` decoder passes over at most ``L + 1`` positions:
``O(L^2)`` position-layers, negligible at toy sizes. Sources are validated by the caller.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor

from ebms.distributions import sample_categorical
from ebms.sequences import Sequences


@dataclass(frozen=True)
class BeamSearchResult:
    """The best hypothesis per source sentence, and the whole final beam (an n-best list).

    Attributes:
        sequences: :class:`~ebms.sequences.Sequences` of ``B`` rows (``</s>`` not included).
        scores: ``(B,)`` the ranking score ``log p(y | x) / (L + 1)^alpha``.
        log_probs: ``(B,)`` ``log p(y | x)``, the final ``</s>`` included.
        hypotheses: ``B * beam`` rows, sentence ``b``'s beam at rows ``b * beam .. b * beam + beam - 1``,
            best raw score first (the beam's finished hypotheses; an empty slot, when fewer than
            ``beam`` outputs exist, is an empty row with log-probability ``-inf``).
        hypothesis_log_probs: ``(B, beam)`` their ``log p(y | x)``.
    """

    sequences: Sequences
    scores: Tensor
    log_probs: Tensor
    hypotheses: Sequences
    hypothesis_log_probs: Tensor


def greedy(model: Any, src: Sequences, limit: int) -> Sequences:
    """The argmax token at every step until ``</s>``; a sentence still running after ``limit``
    tokens is cut there."""
    return _decode(model, src, lambda logits: logits.argmax(-1), limit, truncate=True)


def beam_search(model: Any, src: Sequences, beam: int, limit: int, length_penalty: float) -> BeamSearchResult:
    r"""Batched beam search with ``beam`` hypotheses per sentence (see ``Seq2SeqTransformer.beam_search``).

    Hypotheses are ranked while searching by the raw score :math:`\log p(y_{\le t} \mid x)`. A
    hypothesis that emits ``</s>`` is finished: it stays in its beam with a frozen score (its only
    continuation is itself at cost 0) and competes with the running ones; at step ``limit`` only
    ``</s>`` may be emitted. The search stops when every beam holds finished hypotheses only —
    then no running hypothesis could overtake them, since extending one never raises its score.
    The result is the finished hypothesis with the best :math:`\log p(y \mid x) / (L + 1)^\alpha`.
    With ``beam`` at least the number of hypotheses alive at every step the search is exhaustive.
    """
    memory, pad = model.encode(src)
    B, K, dev = src.batch_size, beam, memory.device
    memory, pad = memory.repeat_interleave(K, 0), pad.repeat_interleave(K, 0)
    scores = torch.full((B, K), -math.inf, device=dev, dtype=memory.dtype)
    scores[:, 0] = 0.0
    finished = torch.ones(B, K, dtype=torch.bool, device=dev)
    finished[:, 0] = False  # the other slots start empty (score -inf), i.e. dead
    lengths = torch.zeros(B, K, dtype=torch.long, device=dev)
    tokens = torch.zeros(B, K, 0, dtype=torch.long, device=dev)
    rows = torch.arange(B, device=dev).unsqueeze(1)
    frozen: Tensor | None = None
    for t in range(limit + 1):
        if bool(finished.all()):
            break
        inputs = F.pad(tokens.reshape(B * K, t), (1, 0), value=0)
        logp = model.decode(memory, pad, inputs)[:, -1].log_softmax(-1).view(B, K, -1)
        if frozen is None:
            frozen = torch.full_like(logp[0, 0], -math.inf)
            frozen[0] = 0.0
        if t == limit:  # only </s> is left
            logp = torch.cat([logp[..., :1], torch.full_like(logp[..., 1:], -math.inf)], -1)
        logp = torch.where(finished.unsqueeze(-1), frozen, logp)
        V = logp.shape[-1]
        top, idx = (scores.unsqueeze(-1) + logp).view(B, K * V).topk(K, dim=-1)
        parent, word = idx // V, idx % V
        parent_done = finished.gather(1, parent)
        lengths = torch.where(parent_done, lengths.gather(1, parent), torch.where(word == 0, t, t + 1))
        finished = parent_done | (word == 0) | torch.isinf(top)
        scores = top
        tokens = torch.cat([tokens[rows, parent], word.masked_fill(parent_done, 0).unsqueeze(-1)], -1)
    ranked = scores / (lengths + 1).to(scores.dtype) ** length_penalty if length_penalty else scores
    best = ranked.argmax(-1, keepdim=True)
    lengths = lengths.masked_fill(torch.isinf(scores), 0)  # an empty slot: an empty row at -inf
    width = int(lengths.max()) if B else 0
    real = torch.arange(width, device=dev) < lengths.unsqueeze(-1)
    every = tokens[..., :width].masked_fill(~real, 0)
    length = lengths.gather(1, best).squeeze(1)
    seqs = Sequences(every[rows, best].squeeze(1)[:, :int(length.max()) if B else 0], length, validate=False)
    hypotheses = Sequences(every.reshape(B * K, width), lengths.reshape(B * K), validate=False)
    return BeamSearchResult(seqs, ranked.gather(1, best).squeeze(1), scores.gather(1, best).squeeze(1), hypotheses,
                            scores)


def sample(model: Any, src: Sequences, generator: torch.Generator | None, limit: int, truncate: bool) -> Sequences:
    """One ancestral draw ``y ~ p(y | x)`` per source row (one categorical per step from
    ``generator``); a draw still running after ``limit`` tokens is cut (``truncate``) or raises."""
    return _decode(model, src, lambda logits: sample_categorical(logits, generator), limit, truncate)


def _decode(model: Any, src: Sequences, pick: Callable[[Tensor], Tensor], limit: int, truncate: bool) -> Sequences:
    """Left to right, ``pick(next-token logits (n, V)) -> (n,)`` at every step until ``</s>``; a row
    still running after ``limit`` tokens is cut (``truncate``) or raises."""
    memory, pad = model.encode(src)
    n, dev = src.batch_size, memory.device
    tokens = torch.zeros(n, limit, dtype=torch.long, device=dev)
    lengths = torch.full((n,), limit, dtype=torch.long, device=dev)
    done = torch.zeros(n, dtype=torch.bool, device=dev)
    inputs = torch.zeros(n, 1, dtype=torch.long, device=dev)
    for t in range(limit + 1):
        if t == limit and truncate:
            break
        w = pick(model.decode(memory, pad, inputs)[:, -1])
        ended = ~done & (w == 0)
        lengths = torch.where(ended, t, lengths)
        done = done | ended
        if t == limit:
            running = int((~done).sum())
            if running:
                raise ValueError(f"max_length: {running} of {n} draws had not ended after {limit} tokens; "
                                 "raise max_length, or pass truncate=True to keep them cut")
            break
        if bool(done.all()):
            break
        w = w.masked_fill(done, 0)
        tokens[:, t] = w
        inputs = torch.cat([inputs, w.unsqueeze(1)], 1)
    width = int(lengths.max()) if n else 0
    return Sequences(tokens[:, :width], lengths, validate=False)
