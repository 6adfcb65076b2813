r"""Private: a sentence LM seen step by step, the :class:`~ebms.capabilities.EARMModel` capability.

Shared by :meth:`AutoregressiveLM.teacher_forced` / :meth:`AutoregressiveLM.draw` and by
:class:`LMAdapter` (another horizon, or any :class:`~ebms.capabilities.SentenceLM`: ``logits``,
``sample``, ``max_length``). Batches are :class:`~ebms.sequences.Sequences` or ``(tokens (B, T),
lengths (B,))`` tuples; step ``k < L`` predicts ``y_{k+1}`` after ``<s> y_1..y_k`` and step ``L``
predicts ``</s>`` (id 0), so ``K = L + 1``.

The horizon ``H`` and the draws' length cap are described in :class:`LMAdapter`.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ebms._checks import check_int
from ebms.capabilities import SentenceLM
from ebms.sequences import Sequences

Triple = tuple[Tensor, Tensor, Tensor]


def horizon(lm: Any, max_length: int | None) -> int | None:
    """``H``: ``max_length`` (checked: ``>= 1`` and at most the LM's own) or the LM's ``max_length``."""
    own = lm.max_length
    if max_length is None:
        return own
    max_length = check_int(max_length, "max_length", minimum=1)
    if own is not None and max_length > own:
        raise ValueError(f"max_length: expected at most the LM's max_length={own}; got {max_length}")
    return max_length


def teacher_forced(lm: Any, batch: Sequences | tuple[Tensor, Tensor], H: int | None) -> Triple:
    """``(logits (B, W + 1, V), targets, mask)`` with ``W`` the longest (cut) length; one LM pass."""
    seqs = Sequences.coerce(batch, empty=False)
    if H is not None and int(seqs.lengths.max()) > H:
        seqs = Sequences(seqs.tokens[:, :H], seqs.lengths.clamp(max=H), validate=False)
    width = int(seqs.lengths.max())
    logits = lm.logits(Sequences(seqs.tokens[:, :width], seqs.lengths, validate=False))[:, :width + 1]
    lengths = seqs.lengths.to(logits.device).unsqueeze(1)
    tokens = seqs.tokens[:, :width].to(logits.device)
    k = torch.arange(width + 1, device=logits.device)
    targets = F.pad(tokens.masked_fill(k[:width] >= lengths, 0), (0, 1))
    ends = (k == lengths) if H is None else (k == lengths) & (lengths < H)
    return logits, targets, (k < lengths) | ends


def draw(lm: Any, batch: Sequences | tuple[Tensor, Tensor], generator: torch.Generator | None,
         max_length: int | None, H: int | None) -> Any:
    """``B`` sentences of the LM's law (cut at the cap above), in ``batch``'s type."""
    seqs = Sequences.coerce(batch, empty=False)
    cap = max_length
    if cap is None:
        cap = int(seqs.lengths.max()) + 1
        cap = cap if H is None else min(cap, H)
    was_training = lm.training
    lm.eval()
    try:
        with torch.no_grad():
            out = lm.sample(seqs.batch_size, generator, max_length=cap, truncate=True)
    finally:
        lm.train(was_training)
    return out if isinstance(batch, Sequences) else (out.tokens, out.lengths)


class LMAdapter(nn.Module):
    r""":class:`~ebms.capabilities.EARMModel` view of a sentence LM (an
    :class:`~ebms.capabilities.SentenceLM`: ``logits``, ``sample``, ``max_length``) with a horizon of
    its own. Every :class:`~ebms.models.lm.AutoregressiveLM` is an ``EARMModel`` itself (its
    :meth:`~ebms.models.lm.AutoregressiveLM.teacher_forced` and ``draw`` read it under its own
    ``max_length``); the adapter fixes another horizon, or serves an LM that is not one.

    Batches are :class:`~ebms.sequences.Sequences` or ``(tokens (B, T), lengths (B,))`` tuples (the
    Trainer's form); :meth:`draw` returns the same type. Step ``k < L`` predicts ``y_{k+1}`` after
    ``<s> y_1..y_k`` and step ``L`` predicts ``</s>`` (id 0), so ``K = L + 1``.

    **Horizon.** ``H`` is ``max_length`` when given, else the LM's own ``max_length`` (``None``:
    unbounded). Rows are read under the horizon-``H`` law (as the ``horizon`` of
    ``ebms.models.ResidualLM``): a row of ``L >= H`` tokens is cut to its first ``H`` and has no
    ``</s>`` step (mask ``False`` there), for the data and the draws alike. Draws come from
    ``lm.sample(B, max_length=cap, truncate=True)`` in evaluation mode: ``cap = H`` when
    ``max_length`` is given, else one token past the batch's longest sentence (at most ``H``) — a
    draw cut there still has every step the data have, and its unreal ``</s>`` step lies after the
    data's last step, which E-ARM ignores: exact, and no more than needed. Pass ``max_length`` to fix
    the draw length (the paper draws 50 tokens for LMs), above the longest training sentence so the
    data are never cut.

    Args:
        lm: the sentence LM.
        max_length: horizon ``H`` (``>= 1``) or ``None``.
    """

    lm: Any

    def __init__(self, lm: SentenceLM, *, max_length: int | None = None) -> None:
        super().__init__()
        if not isinstance(lm, SentenceLM):
            raise TypeError(f"lm: expected an autoregressive sentence LM with logits(Sequences) and sample(n, "
                            f"...) (ebms.models.lm); got {type(lm).__name__}")
        self.horizon: int | None = horizon(lm, max_length)
        self.lm = lm
        self.max_length = max_length

    def forward(self, batch: Sequences | tuple[Tensor, Tensor]) -> Triple:
        """Same as :meth:`teacher_forced`."""
        return self.teacher_forced(batch)

    def teacher_forced(self, batch: Sequences | tuple[Tensor, Tensor]) -> Triple:
        """``(logits (B, W + 1, V), targets, mask)`` with ``W`` the longest (cut) length; one LM pass."""
        return teacher_forced(self.lm, batch, self.horizon)

    def draw(self, batch: Sequences | tuple[Tensor, Tensor], generator: torch.Generator | None) -> Any:
        """``B`` sentences of the LM's law (cut at the cap above), in ``batch``'s type."""
        return draw(self.lm, batch, generator, self.max_length, self.horizon)

    def extra_repr(self) -> str:
        return f"max_length={self.max_length}"
