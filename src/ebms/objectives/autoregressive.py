r"""Teacher-forced maximum likelihood of an autoregressive language model.

**Sentence mode** — batch :class:`~ebms.sequences.Sequences` or ``(tokens (B, T), lengths (B,))``:

.. math::  \mathcal L(\theta) = -\frac{\sum_b \log p_\theta(y_b)}{\sum_b (L_b + 1)},
           \qquad \log p_\theta(y) = \sum_{t=1}^{L+1} \log p_\theta(y_t \mid y_{<t}),
           \quad y_{L+1} = \texttt{</s>},

the mean negative log-likelihood per predicted token, ``</s>`` included (so ``exp(loss)`` is the
batch perplexity of the contract). Needs ``model.token_log_probs(Sequences) -> (B, T + 1)``
(:class:`ebms.models.lm.AutoregressiveLM`).

**Running-text mode** — batch ``(inputs (B, S), targets (B, S))``, two 2-D integer tensors: a
chunk of ``B`` parallel token streams with the targets shifted by one (as
:func:`ebms.data.text.bptt_batches` cuts them); the loss is the mean cross-entropy over the
``B S`` targets. Needs ``model(inputs, state) -> (logits (B, S, V), state)``. With
``carry_state=True`` each call starts from the previous call's final state, detached (truncated
back-propagation through time; Williams & Peng 1990, *An efficient gradient-based algorithm for
on-line training of recurrent network trajectories*); the state is reset when the batch size
changes or by :meth:`AutoregressiveNLL.reset`. It is not part of the state dict: a resumed run
restarts it from zeros. A tuple is read as running text when its second tensor is 2-D, as
sentences when it is 1-D (lengths).

Everything keeps its graph (there is nothing to detach but the carried state). Metrics: ``nll``
(nats per token, equal to the loss), ``ppl = exp(nll)`` and ``tokens`` (predicted tokens in the
batch) — watch ``ppl`` on held-out data. The ``generator`` is unused: dropout draws from torch's
global RNG, which the :class:`~ebms.train.Trainer` seeds and checkpoints. Cost: one forward and
backward pass of the model, ``O(B T V)`` memory for the logits.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ebms.objectives._base import LossOutput, scalar_metrics
from ebms.sequences import Sequences

__all__ = ["AutoregressiveNLL"]


class AutoregressiveNLL(nn.Module):
    """Mean negative log-likelihood per token of an autoregressive LM (see the module docstring).

    Args:
        carry_state: running-text mode only: continue each chunk from the previous one's state.

    Example:
        >>> import torch
        >>> from ebms.models.lm import LSTMLM
        >>> from ebms.sequences import Sequences
        >>> lm = LSTMLM(6, embedding_dim=4, hidden_size=4, num_layers=1)
        >>> out = AutoregressiveNLL()(lm, Sequences.from_lists([[1, 2, 3], [4]]))
        >>> out.metrics["tokens"]
        6.0
    """

    def __init__(self, *, carry_state: bool = False) -> None:
        super().__init__()
        if not isinstance(carry_state, bool):
            raise TypeError(f"carry_state: expected a bool; got {carry_state!r}")
        self.carry_state = carry_state
        self._state: Any = None

    def reset(self) -> None:
        """Forget the carried running-text state (the next chunk starts from zeros)."""
        self._state = None

    def forward(self, model: nn.Module, batch: Sequences | tuple[Tensor, Tensor], *,
                generator: torch.Generator | None = None) -> LossOutput:
        if isinstance(batch, tuple) and len(batch) == 2 and all(isinstance(t, Tensor) and t.dim() == 2 for t in batch):
            nll, tokens = self._running_text(model, batch[0], batch[1])
        else:
            seqs = _sentences(batch)
            token_log_probs = getattr(model, "token_log_probs", None)
            if not callable(token_log_probs):
                raise TypeError(f"model: expected an autoregressive LM with token_log_probs(Sequences) -> (B, T + 1) "
                                f"(ebms.models.lm); got {type(model).__name__}")
            width = int(seqs.lengths.max())
            per = token_log_probs(Sequences(seqs.tokens[:, :width], seqs.lengths, validate=False))
            tokens = int(seqs.lengths.sum()) + seqs.batch_size
            nll = -per.sum() / tokens
        return LossOutput(nll, scalar_metrics(nll=nll.detach(), ppl=nll.detach().exp(), tokens=float(tokens)))

    def _running_text(self, model: nn.Module, inputs: Tensor, targets: Tensor) -> tuple[Tensor, int]:
        for name, t in (("inputs", inputs), ("targets", targets)):
            if t.dtype.is_floating_point or t.dtype.is_complex or t.dtype == torch.bool:
                raise TypeError(f"batch: expected integer {name} (B, S) of token ids; got dtype {t.dtype}")
        if inputs.shape != targets.shape or inputs.numel() == 0:
            raise ValueError(f"batch: expected running-text inputs and targets of one non-empty shape (B, S); got "
                             f"{tuple(inputs.shape)} and {tuple(targets.shape)}")
        vocab = getattr(model, "vocab_size", None)
        for name, t in (("inputs", inputs), ("targets", targets)):
            lo, hi = int(t.min()), int(t.max())
            if lo < 0 or (vocab is not None and hi >= vocab):
                raise ValueError(f"batch: expected {name} token ids in [0, {vocab if vocab is not None else 'V'}); "
                                 f"got values in [{lo}, {hi}]")
        state = self._state if self.carry_state else None
        if state is not None and getattr(state, "batch_size", None) != inputs.shape[0]:
            state = None
        logits, state = model(inputs.long(), state)
        if self.carry_state:
            self._state = state.detach()
        nll = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.long().reshape(-1))
        return nll, targets.numel()

    def extra_repr(self) -> str:
        return f"carry_state={self.carry_state}"


def _sentences(batch: Any) -> Sequences:
    if isinstance(batch, Sequences):
        seqs = batch
    elif isinstance(batch, tuple) and len(batch) == 2 and all(isinstance(t, Tensor) for t in batch):
        seqs = Sequences(batch[0], batch[1])
    else:
        raise TypeError(f"batch: expected Sequences, a (tokens (B, T), lengths (B,)) tuple, or a running-text "
                        f"chunk (inputs (B, S), targets (B, S)); got {type(batch).__name__}")
    if seqs.batch_size == 0:
        raise ValueError(f"batch: expected at least one sentence; got an empty batch {seqs!r}")
    return seqs

