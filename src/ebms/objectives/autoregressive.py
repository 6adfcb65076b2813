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
batch) — watch ``ppl`` on held-out data. Dropout draws from torch's global RNG, which the
:class:`~ebms.train.Trainer` seeds and checkpoints. Cost: one forward and backward pass of the
model, ``O(B T V)`` memory for the logits.

**Training options** (both off by default; off, the loss is the one above bit for bit):

- ``label_smoothing`` :math:`\varepsilon` (both modes): each target becomes the mixture
  :math:`(1 - \varepsilon)\,\delta_{y_t} + \varepsilon\,\mathcal U(V)` over the ``V`` outcomes
  (``</s>`` included), so the per-token loss is
  :math:`(1 - \varepsilon)(-\log p(y_t \mid \cdot)) + \frac{\varepsilon}{V}\sum_v -\log p(v \mid \cdot)`,
  averaged over the predicted tokens as above (Szegedy et al. 2016, *Rethinking the Inception
  architecture for computer vision*). Sentence mode needs ``model.logits(Sequences) -> (B, T + 1, V)``.
- ``scheduled_sampling`` :math:`p` (sentence mode, objective in training mode only): each input
  token :math:`y_t` (``t = 1..L``; ``<s>`` is always fed) is replaced, independently with probability
  :math:`p`, by a token predicted by the model at the previous position; the loss is the (smoothed)
  cross-entropy of the gold targets after these mixed inputs (Bengio, Vinyals, Jaitly & Shazeer 2015,
  *Scheduled sampling for sequence prediction with recurrent neural networks*). Parallel two-pass
  form for any causal model, LSTM or Transformer (Mihaylova & Martins 2019, *Scheduled sampling
  for Transformers*): pass 1 is teacher-forced without gradient and gives the predictions
  (``scheduled_sampling_decode="sample"``: a draw from the model's next-token law restricted to
  real tokens ``>= 1``; ``"argmax"``: the most likely real token — ``</s>`` is never fed inside a
  sentence); pass 2 runs ``model(inputs) -> (logits, state)`` on the mixed inputs with gradient.
  Coins and draws use ``generator`` (torch's global RNG when ``None``). Cost: one extra forward
  pass without gradient.

With either option the metrics ``nll``/``ppl`` stay the plain teacher-forced values (from pass 1, or
the same logits without smoothing); ``loss`` is the trained quantity.
"""

from __future__ import annotations

import contextlib
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ebms._checks import check_bool, check_probability
from ebms.capabilities import HasVocabSize, RecurrentState, SupportsLogits, SupportsTokenLogProbs, supports
from ebms.distributions import sample_categorical
from ebms.objectives._base import LossOutput, scalar_metrics
from ebms.sequences import Sequences

__all__ = ["AutoregressiveNLL"]

#: the batches :class:`AutoregressiveNLL` reads, as its ``TypeError`` names them.
_FORMS = "Sequences, a (tokens (B, T), lengths (B,)) tuple, or a running-text chunk (inputs (B, S), targets (B, S))"


class AutoregressiveNLL(nn.Module):
    r"""Mean negative log-likelihood per token of an autoregressive LM (see the module docstring).

    Args:
        carry_state: running-text mode only: continue each chunk from the previous one's state.
        label_smoothing: :math:`\varepsilon \in [0, 1)`, the uniform share of each target.
        scheduled_sampling: :math:`p \in [0, 1]`, the chance of feeding a model token in place of
            each gold input token (sentence mode, training mode only).
        scheduled_sampling_decode: ``"sample"`` or ``"argmax"``: how pass 1 predicts the tokens fed.

    Example:
        >>> import torch
        >>> from ebms.models.lm import LSTMLM
        >>> from ebms.sequences import Sequences
        >>> lm = LSTMLM(6, embedding_dim=4, hidden_size=4, num_layers=1)
        >>> out = AutoregressiveNLL()(lm, Sequences.from_lists([[1, 2, 3], [4]]))
        >>> out.metrics["tokens"]
        6.0
    """

    def __init__(self, *, carry_state: bool = False, label_smoothing: float = 0.0, scheduled_sampling: float = 0.0,
                 scheduled_sampling_decode: str = "sample") -> None:
        super().__init__()
        self.carry_state = check_bool(carry_state, "carry_state")
        self.label_smoothing = check_probability(label_smoothing, "label_smoothing", open_high=True)
        self.scheduled_sampling = check_probability(scheduled_sampling, "scheduled_sampling")
        if scheduled_sampling_decode not in ("sample", "argmax"):
            raise ValueError(f"scheduled_sampling_decode: expected 'sample' or 'argmax'; "
                             f"got {scheduled_sampling_decode!r}")
        self.scheduled_sampling_decode = scheduled_sampling_decode
        self._state: Any = None

    def reset(self) -> None:
        """Forget the carried running-text state (the next chunk starts from zeros)."""
        self._state = None

    def forward(self, model: nn.Module, batch: Sequences | tuple[Tensor, Tensor], *,
                generator: torch.Generator | None = None) -> LossOutput:
        if isinstance(batch, tuple) and len(batch) == 2 and all(isinstance(t, Tensor) and t.dim() == 2 for t in batch):
            if self.scheduled_sampling > 0:
                raise ValueError(f"scheduled_sampling: supported for sentence batches only; got a running-text chunk "
                                 f"with scheduled_sampling={self.scheduled_sampling}")
            loss, nll, tokens = self._running_text(model, batch[0], batch[1])
        else:
            seqs = Sequences.coerce(batch, empty=False, expected=_FORMS)
            lm = model
            if not supports(lm, SupportsTokenLogProbs):
                raise TypeError(f"model: expected an autoregressive LM with token_log_probs(Sequences) -> (B, T + 1) "
                                f"(ebms.models.lm); got {type(model).__name__}")
            width = int(seqs.lengths.max())
            seqs = Sequences(seqs.tokens[:, :width], seqs.lengths, validate=False)
            tokens = int(seqs.lengths.sum()) + seqs.batch_size
            if self.label_smoothing == 0 and (self.scheduled_sampling == 0 or not self.training):
                nll = loss = -lm.token_log_probs(seqs).sum() / tokens
            else:
                loss, nll = self._sentence_options(model, seqs, tokens, generator)
        return LossOutput(loss, scalar_metrics(nll=nll.detach(), ppl=nll.detach().exp(), tokens=float(tokens)))

    def _sentence_options(self, model: nn.Module, seqs: Sequences, tokens: int,
                          generator: torch.Generator | None) -> tuple[Tensor, Tensor]:
        """Sentence loss with label smoothing and/or scheduled sampling: ``(loss, teacher-forced nll)``."""
        lm = model
        if not supports(lm, SupportsLogits):
            raise TypeError(f"model: label_smoothing and scheduled_sampling need an autoregressive LM with "
                            f"logits(Sequences) -> (B, T + 1, V) (ebms.models.lm); got {type(model).__name__}")
        B, width = seqs.tokens.shape
        use_ss = self.scheduled_sampling > 0 and self.training
        with torch.no_grad() if use_ss else contextlib.nullcontext():
            first = lm.logits(seqs)  # (B, width + 1, V)
        real_in = seqs.mask().to(first.device)
        gold = seqs.tokens.to(first.device).masked_fill(~real_in, 0)  # (B, width), padding = boundary id
        targets = F.pad(gold, (0, 1))  # y_1 .. y_L, </s>, padding
        keep = torch.arange(width + 1, device=gold.device) <= seqs.lengths.to(gold.device).unsqueeze(1)
        nll = _masked_ce(first.detach(), targets, keep, 0.0) / tokens
        if not use_ss:
            return _masked_ce(first, targets, keep, self.label_smoothing) / tokens, nll
        real = first[:, :width, 1:].detach()  # predictions for inputs 1..L over the real tokens
        guess = (real.argmax(-1) if self.scheduled_sampling_decode == "argmax"
                 else sample_categorical(real, generator)) + 1
        coin = torch.rand((B, width), generator=generator, device=gold.device) < self.scheduled_sampling
        fed = torch.where(coin & real_in, guess, gold)
        second = model(F.pad(fed, (1, 0)))[0]  # (B, width + 1, V) after <s> and the mixed inputs
        return _masked_ce(second, targets, keep, self.label_smoothing) / tokens, nll

    def _running_text(self, model: nn.Module, inputs: Tensor, targets: Tensor) -> tuple[Tensor, Tensor, int]:
        for name, t in (("inputs", inputs), ("targets", targets)):
            if t.dtype.is_floating_point or t.dtype.is_complex or t.dtype == torch.bool:
                raise TypeError(f"batch: expected integer {name} (B, S) of token ids; got dtype {t.dtype}")
        if inputs.shape != targets.shape or inputs.numel() == 0:
            raise ValueError(f"batch: expected running-text inputs and targets of one non-empty shape (B, S); got "
                             f"{tuple(inputs.shape)} and {tuple(targets.shape)}")
        vocab = model.vocab_size if supports(model, HasVocabSize) else None
        for name, t in (("inputs", inputs), ("targets", targets)):
            lo, hi = int(t.min()), int(t.max())
            if lo < 0 or (vocab is not None and hi >= vocab):
                raise ValueError(f"batch: expected {name} token ids in [0, {vocab if vocab is not None else 'V'}); "
                                 f"got values in [{lo}, {hi}]")
        state = self._state if self.carry_state else None
        if state is not None and not (supports(state, RecurrentState) and state.batch_size == inputs.shape[0]):
            state = None
        logits, state = model(inputs.long(), state)
        if self.carry_state:
            self._state = state.detach()
        flat, gold = logits.reshape(-1, logits.shape[-1]), targets.long().reshape(-1)
        nll = F.cross_entropy(flat, gold)
        if self.label_smoothing == 0:
            return nll, nll, targets.numel()
        return F.cross_entropy(flat, gold, label_smoothing=self.label_smoothing), nll, targets.numel()

    def extra_repr(self) -> str:
        extra = f"carry_state={self.carry_state}"
        if self.label_smoothing:
            extra += f", label_smoothing={self.label_smoothing}"
        if self.scheduled_sampling:
            extra += f", scheduled_sampling={self.scheduled_sampling}, decode={self.scheduled_sampling_decode!r}"
        return extra


def _masked_ce(logits: Tensor, targets: Tensor, keep: Tensor, smoothing: float) -> Tensor:
    """Sum over the kept positions of the (label-smoothed) cross-entropy, ``logits (B, S, V)``."""
    per = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1), reduction="none",
                          label_smoothing=smoothing).view(targets.shape)
    return torch.where(keep, per, per.new_zeros(())).sum()
