r"""Experts and soft constraints for controlled generation (mix-and-match and COLD, monograph §4.4.2).

The samplers live in :mod:`ebms.samplers.mix_and_match` and :mod:`ebms.samplers.cold`; this module
wires language models into the pieces they take. Every expert is an energy (lower = better).

Token experts (``Sequences (B, T) -> (B,)``, for :class:`~ebms.samplers.MixAndMatch`):

* :class:`LMFluency`: :math:`E(X) = -\log p_{LM}(X)`, the exact log-probability of an
  autoregressive LM (:class:`~ebms.models.lm.AutoregressiveLM`).
* :class:`ClozeFluency`: :math:`E_{mlm}(X) = -\sum_t \log q(X_t \mid X_{\setminus t})`, the negative
  pseudo-log-likelihood of a cloze model (:class:`~ebms.nets.TwoTowerCloze`). The monograph's
  :math:`E_{mlm}` sums un-normalised masked-LM logits (:math:`-`SumMaskedLogit, Eq. 3.13); a cloze
  model's log-probabilities differ from its logits by one normaliser per position.
* :class:`TokenConstraint`: :math:`E(X) = [X_p \notin A_b]`, 0 when the token at position ``p`` of
  row ``b`` is one of the allowed tokens, else 1: a hard constraint, as an expert with weight
  :math:`\alpha` it costs :math:`\alpha` nats. :meth:`TokenConstraint.soft` is its relaxation
  :math:`-\log \sum_{v \in A_b} \mathrm{softmax}(\tilde y_p)_v` for COLD.

:func:`cloze_proposal` turns a cloze model into the proposal ``(x, i) -> (B, V)`` of mix-and-match.

Soft experts (``(B, T, V)`` logits :math:`\tilde y -> (B,)`, for :func:`~ebms.samplers.cold_decode`):

* :class:`SoftFluency`: COLD's left-to-right fluency :math:`f_{LM}(\tilde y) = \sum_{t=1}^{T}
  \sum_v p_{LM}(v \mid \tilde y_{<t}) \log \mathrm{softmax}(\tilde y_t)_v`, the LM reading the soft
  tokens :math:`\mathrm{softmax}(\tilde y_s / \tau)` as probability-weighted embeddings; the energy is
  :math:`-f_{LM}`.

:func:`lm_next_logits` gives the next-token logits that guide COLD's discretisation and
:func:`lm_logits_along` the soft logits COLD starts from (an LM's logits along a draw).

References:
    Mireshghallah, Goyal & Berg-Kirkpatrick (2022), "Mix and match", ACL.
    Qin, Welleck, Khashabi & Choi (2022), "COLD decoding", NeurIPS.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ebms._checks import check_int, check_positive, check_tensor
from ebms.models.lm import AutoregressiveLM
from ebms.nets.two_tower import TwoTowerCloze
from ebms.sequences import Sequences

__all__ = ["ClozeFluency", "LMFluency", "SoftFluency", "TokenConstraint", "allowed_tokens", "cloze_proposal", "lm_logits_along",
           "lm_next_logits"]


def _check_lm(lm: Any, name: str = "lm") -> AutoregressiveLM:
    if not isinstance(lm, AutoregressiveLM):
        raise TypeError(f"{name}: expected an ebms.models.lm.AutoregressiveLM (TransformerLM, LSTMLM, ...); got "
                        f"{type(lm).__name__}")
    return lm


def _sentences(x: Any, name: str = "x") -> Sequences:
    if not isinstance(x, Sequences):
        raise TypeError(f"{name}: expected Sequences (tokens (B, T), lengths (B,)); got {type(x).__name__}")
    return x


class LMFluency(nn.Module):
    r"""Fluency expert :math:`E(X) = -\log p_{LM}(X)` (``</s>`` included), ``(B,)``; the LM is used as it is (call ``eval()``)."""

    def __init__(self, lm: AutoregressiveLM) -> None:
        super().__init__()
        self.lm = _check_lm(lm)

    def forward(self, x: Sequences) -> Tensor:
        return -self.lm.log_prob(_sentences(x))


class ClozeFluency(nn.Module):
    r"""Fluency expert :math:`E_{mlm}(X) = -\sum_{t < L} \log q(X_t \mid X_{\setminus t})` of a cloze model, ``(B,)``."""

    def __init__(self, cloze: TwoTowerCloze) -> None:
        super().__init__()
        if not isinstance(cloze, TwoTowerCloze):
            raise TypeError(f"cloze: expected an ebms.nets.TwoTowerCloze; got {type(cloze).__name__}")
        self.cloze = cloze

    def forward(self, x: Sequences) -> Tensor:
        x = _sentences(x)
        lp = self.cloze.log_probs(x).gather(2, x.tokens.unsqueeze(-1)).squeeze(-1)
        return -lp.masked_fill(~x.mask(), 0.0).sum(1)


def cloze_proposal(cloze: TwoTowerCloze) -> Callable[[Sequences, int], Tensor]:
    r"""The mix-and-match proposal :math:`q(\cdot \mid X_{\setminus i})`: ``(x, i) -> (B, V)`` log-probabilities.

    A :class:`~ebms.nets.TwoTowerCloze` never reads the token at the position it predicts, so no
    mask token is needed. Cost: one pass of both towers per call.
    """
    if not isinstance(cloze, TwoTowerCloze):
        raise TypeError(f"cloze: expected an ebms.nets.TwoTowerCloze; got {type(cloze).__name__}")

    def propose(x: Sequences, i: int) -> Tensor:
        return cloze.log_probs(x)[:, i]

    return propose


class TokenConstraint(nn.Module):
    r"""A hard constraint on one position: row ``b``'s token at ``position`` must be in ``allowed[b]``.

    Args:
        position: ``p``, counted from 0 in the (unprompted part of the) sequence.
        allowed: bool ``(B, V)``: the tokens allowed in each row (one row broadcast to all when ``(1, V)``).

    ``forward(x: Sequences) -> (B,)``: 0 when met, 1 when not (a row shorter than ``p + 1`` fails).
    ``soft(y: (B, T, V)) -> (B,)``: :math:`-\log \sum_{v \in A_b} \mathrm{softmax}(\tilde y_p)_v` (COLD).
    ``met(tokens (B, T)) -> bool (B,)``.
    """

    allowed: Tensor

    def __init__(self, position: int, allowed: Tensor) -> None:
        super().__init__()
        self.position = check_int(position, "position", minimum=0)
        allowed = check_tensor(allowed, "allowed")
        if allowed.dtype != torch.bool or allowed.dim() != 2:
            raise ValueError(f"allowed: expected a bool tensor (B, V); got {allowed.dtype} {tuple(allowed.shape)}")
        if not bool(allowed.any(1).all()):
            raise ValueError("allowed: every row needs at least one allowed token; some row has none")
        self.register_buffer("allowed", allowed, persistent=False)

    @classmethod
    def targets(cls, position: int, targets: Tensor, vocab_size: int) -> TokenConstraint:
        """One required token per row: ``targets (B,)`` int64 ids in ``[0, vocab_size)``."""
        targets = check_tensor(targets, "targets")
        if targets.dim() != 1 or targets.dtype != torch.long:
            raise ValueError(f"targets: expected int64 ids (B,); got {targets.dtype} {tuple(targets.shape)}")
        if targets.numel() and not (0 <= int(targets.min()) and int(targets.max()) < vocab_size):
            raise ValueError(f"targets: expected ids in [0, {vocab_size}); got [{int(targets.min())}, {int(targets.max())}]")
        return cls(position, F.one_hot(targets, vocab_size).bool())

    def _rows(self, b: int) -> Tensor:
        if self.allowed.shape[0] not in (1, b):
            raise ValueError(f"x: the constraint holds {self.allowed.shape[0]} rows; got a batch of {b}")
        return self.allowed.expand(b, -1)

    def met(self, tokens: Tensor, lengths: Tensor | None = None) -> Tensor:
        """Whether each row of ``tokens (B, T)`` meets the constraint, bool ``(B,)``."""
        B, T = tokens.shape
        if self.position >= T:
            return torch.zeros(B, dtype=torch.bool, device=tokens.device)
        tok = tokens[:, self.position]
        ok = self._rows(B).gather(1, tok.clamp(0, self.allowed.shape[1] - 1).unsqueeze(1)).squeeze(1)
        ok = ok & (tok < self.allowed.shape[1])
        return ok if lengths is None else ok & (lengths > self.position)

    def forward(self, x: Sequences) -> Tensor:
        x = _sentences(x)
        return (~self.met(x.tokens, x.lengths)).float()

    def soft(self, y: Tensor) -> Tensor:
        y = check_tensor(y, "y", floating=True)
        if y.dim() != 3 or y.shape[2] != self.allowed.shape[1] or y.shape[1] <= self.position:
            raise ValueError(f"y: expected soft logits (B, T > {self.position}, V = {self.allowed.shape[1]}); got "
                             f"{tuple(y.shape)}")
        lp = y[:, self.position].log_softmax(-1)
        neg = torch.tensor(-float("inf"), dtype=lp.dtype, device=lp.device)
        return -torch.where(self._rows(y.shape[0]), lp, neg).logsumexp(-1)


class SoftFluency(nn.Module):
    r"""COLD's soft left-to-right fluency as an energy, ``(B, T, V) -> (B,)`` (module docstring).

    .. math::  E(\tilde y) = -\sum_{t=1}^{T} \sum_v p_{LM}(v \mid c, s_{<t}) \log\mathrm{softmax}(\tilde y_t)_v,
               \qquad s_t = \mathrm{softmax}(\tilde y_t / \tau),

    where the LM reads ``<s>``, the prompt ``c`` (tokens, optional) and the soft tokens :math:`s_t` as
    :math:`s_t^\top W` with :math:`W` its token embedding. Differentiable in :math:`\tilde y`, both through
    the target distributions and the LM's reading of the soft prefix.

    Args:
        lm: an :class:`~ebms.models.lm.AutoregressiveLM` whose ``embedding`` is an ``nn.Embedding``
            (:class:`~ebms.models.lm.TransformerLM`, :class:`~ebms.models.lm.LSTMLM`).
        temperature: :math:`\tau > 0` of the soft tokens.
        prefix: ``(B, P)`` or ``(1, P)`` int64 prompt tokens (default none).
    """

    def __init__(self, lm: AutoregressiveLM, *, temperature: float = 1.0, prefix: Tensor | None = None) -> None:
        super().__init__()
        self.lm = _check_lm(lm)
        emb = getattr(lm, "embedding", None)
        if not isinstance(emb, nn.Embedding):
            raise TypeError(f"lm: SoftFluency feeds soft tokens through the LM's nn.Embedding 'embedding'; "
                            f"{type(lm).__name__} has none")
        self.temperature = check_positive(temperature, "temperature")
        if prefix is not None:
            prefix = check_tensor(prefix, "prefix")
            if prefix.dim() != 2 or prefix.dtype != torch.long:
                raise ValueError(f"prefix: expected int64 tokens (B, P); got {prefix.dtype} {tuple(prefix.shape)}")
        self.prefix = prefix

    def lm_logits(self, y: Tensor) -> Tensor:
        """The LM's next-token logits ``(B, T, V)`` at positions ``1..T`` reading ``<s>, c, s_1 .. s_{T-1}``."""
        y = check_tensor(y, "y", floating=True)
        B, T, V = y.shape if y.dim() == 3 else (0, 0, 0)
        if y.dim() != 3 or V != self.lm.vocab_size:
            raise ValueError(f"y: expected soft logits (B, T, V = {self.lm.vocab_size}); got {tuple(y.shape)}")
        prefix = y.new_zeros(B, 0, dtype=torch.long) if self.prefix is None else self.prefix.expand(B, -1)
        P = prefix.shape[1]
        ids = torch.cat([y.new_zeros(B, 1, dtype=torch.long), prefix, y.new_zeros(B, T - 1, dtype=torch.long)], 1)
        soft = (y[:, : T - 1] / self.temperature).softmax(-1)
        emb: nn.Embedding = self.lm.embedding  # type: ignore[assignment]

        def replace(module: nn.Module, inputs: Any, out: Tensor) -> Tensor:
            return torch.cat([out[:, : P + 1], soft.to(out.dtype) @ emb.weight], 1)

        handle = emb.register_forward_hook(replace)
        try:
            logits = self.lm(ids)[0]
        finally:
            handle.remove()
        return logits[:, P:]

    def forward(self, y: Tensor) -> Tensor:
        target = self.lm_logits(y).softmax(-1)
        return -(target * y.log_softmax(-1)).sum((1, 2))


def lm_next_logits(lm: AutoregressiveLM) -> Callable[[Tensor], Tensor]:
    """``prefix (B, t) -> (B, V)``: the LM's next-token logits after ``<s>`` and the prefix (COLD's guide)."""
    lm = _check_lm(lm)

    def next_logits(prefix: Tensor) -> Tensor:
        return lm(F.pad(prefix, (1, 0), value=lm.boundary))[0][:, -1]

    return next_logits


def lm_logits_along(lm: AutoregressiveLM, x: Sequences, *, scale: float = 1.0) -> Tensor:
    """``scale`` times the LM's teacher-forced logits along ``x``, ``(B, T, V)``: COLD's starting soft
    sequence (position ``t`` holds the logits that predicted ``x_t``)."""
    lm, x = _check_lm(lm), _sentences(x)
    check_positive(scale, "scale")
    with torch.no_grad():
        return scale * lm.logits(x)[:, : x.tokens.shape[1]]


def allowed_tokens(vocab_size: int, forbidden: Sequence[int]) -> Tensor:
    """Bool ``(V,)``: every id except ``forbidden`` (e.g. the boundary and ``<unk>``)."""
    out = torch.ones(check_int(vocab_size, "vocab_size", minimum=1), dtype=torch.bool)
    out[list(forbidden)] = False
    return out
