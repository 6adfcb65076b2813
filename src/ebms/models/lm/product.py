r"""A product of two autoregressive LMs, normalised at every step: the RALM baseline of residual EBMs.

Deng, Bakhtin, Ott, Szlam & Ranzato (2020, *Residual energy-based models for text generation*, Eq. 6)
compare their joint model with a residual autoregressive LM of the same size:

.. math::  \log P_{RALM}(x_t \mid x_{<t}) = \log P_{LM}(x_t \mid x_{<t}) + \log P_\phi(x_t \mid x_{<t})
           - \log \sum_{v} P_{LM}(v \mid x_{<t})\, P_\phi(v \mid x_{<t}),

a locally normalised product of experts: the frozen base LM times a second LM ``P_phi`` trained by
exact maximum likelihood of the product (the gradient reaches only ``phi``). Unlike the joint residual
EBM, whose energy scores whole sequences and whose normaliser must be estimated, every step here is
normalised exactly, so perplexity, sampling and cross-entropy training work as for any sentence LM.

:class:`ProductLM` is an :class:`~ebms.models.lm.AutoregressiveLM` whose next-token logits are
``log_softmax(base) + residual`` (the residual's own normaliser cancels in the step's softmax), so
``log_prob``, ``token_log_probs``, ``continuation_log_prob``, ``sample`` and
:class:`~ebms.objectives.AutoregressiveNLL` all read the product law. The base is frozen: its
parameters stop requiring gradient and it stays in eval mode (no dropout) whatever mode the product is
in. Cost: one step of each LM.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from ebms.models.lm._base import AutoregressiveLM, LMState

__all__ = ["ProductLM", "ProductState"]


@dataclass
class ProductState(LMState):
    """The base's and the residual's states, side by side."""

    base: LMState
    residual: LMState

    @property
    def batch_size(self) -> int:
        return self.base.batch_size

    def detach(self) -> ProductState:
        return ProductState(self.base.detach(), self.residual.detach())

    def select(self, index: Tensor) -> ProductState:
        return ProductState(self.base.select(index), self.residual.select(index))


class ProductLM(AutoregressiveLM):
    r"""``P(x_t | x_<t) ∝ P_base(x_t | x_<t) · P_residual(x_t | x_<t)`` (module docstring; RALM, Eq. 6).

    Args:
        base: the frozen base LM (an :class:`AutoregressiveLM`; its parameters are set to not require
            gradient and it is kept in eval mode).
        residual: the trained expert (an :class:`AutoregressiveLM` of the same vocabulary).

    Shapes as :class:`AutoregressiveLM`: ``logits(x)`` is ``(B, T + 1, V)``. ``max_length`` is the
    smaller of the two (``None`` when both are unbounded).

    Example:
        >>> from ebms.models.lm import LSTMLM
        >>> from ebms.sequences import Sequences
        >>> torch.manual_seed(0)  # doctest: +ELLIPSIS
        <torch._C.Generator object at ...>
        >>> base = LSTMLM(5, embedding_dim=4, hidden_size=4, num_layers=1)
        >>> ralm = ProductLM(base, LSTMLM(5, embedding_dim=4, hidden_size=4, num_layers=1))
        >>> ralm.log_prob(Sequences.from_lists([[1, 2], [3]])).shape
        torch.Size([2])
        >>> any(p.requires_grad for p in ralm.base.parameters())
        False
    """

    def __init__(self, base: AutoregressiveLM, residual: AutoregressiveLM) -> None:
        super().__init__()
        for name, lm in (("base", base), ("residual", residual)):
            if not isinstance(lm, AutoregressiveLM):
                raise TypeError(f"{name}: expected an AutoregressiveLM (LSTMLM, TransformerLM, ...); got "
                                f"{type(lm).__name__}")
        if base.vocab_size != residual.vocab_size:
            raise ValueError(f"residual: expected the base's vocabulary of {base.vocab_size} ids; got "
                             f"{residual.vocab_size}")
        if residual is base:
            raise ValueError("residual: expected a second LM; got the base itself")
        self.base = base.requires_grad_(False).eval()
        self.residual = residual
        self.vocab_size = base.vocab_size
        bounds = [m for m in (base.max_length, residual.max_length) if m is not None]
        self.max_length = min(bounds) if bounds else None

    def train(self, mode: bool = True) -> ProductLM:
        super().train(mode)
        self.base.eval()  # frozen: never dropout
        return self

    @staticmethod
    def _combine(base_logits: Tensor, residual_logits: Tensor) -> Tensor:
        return torch.log_softmax(base_logits, -1) + residual_logits

    def forward(self, inputs: Tensor, state: LMState | None = None) -> tuple[Tensor, ProductState]:
        """Logits ``(B, S, V)`` of the product after each input, and both states."""
        self._check_inputs(inputs)
        if state is not None and not isinstance(state, ProductState):
            raise TypeError(f"state: expected a ProductState or None; got {type(state).__name__}")
        with torch.no_grad():
            b, bs = self.base(inputs, None if state is None else state.base)
        r, rs = self.residual(inputs, None if state is None else state.residual)
        return self._combine(b, r), ProductState(bs, rs)

    def _encode(self, histories: Tensor, lengths: Tensor) -> tuple[Tensor, ProductState]:
        with torch.no_grad():
            b, bs = self.base._encode(histories, lengths)
        r, rs = self.residual._encode(histories, lengths)
        return self._combine(b, r), ProductState(bs, rs)

    def _dtype(self) -> torch.dtype:
        return self.residual._dtype()

    def _device(self) -> torch.device:
        return self.residual._device()

    def extra_repr(self) -> str:
        return f"vocab_size={self.vocab_size}, max_length={self.max_length}"
