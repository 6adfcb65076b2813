r"""Conditional NCE for residual energy-based LMs, with the frozen base LM as the noise.

The model :math:`p_\theta(x \mid c) \propto p_{LM}(x \mid c)\, e^{-E_\theta(c, x)}` is classified
against its own base: data continuations :math:`x^+ \sim p_{data}(\cdot \mid c)` versus ``nu``
base draws :math:`x^- \sim p_{LM}(\cdot \mid c)` of the same prefix. With the noise law equal to
the base, :math:`\log p_{LM}` cancels from NCE's logit (monograph Eq. 2.45, self-normalised,
:math:`\zeta = 0`):

.. math::  G(c, x) = -E_\theta(c, x) - \log\nu,

.. math::  \mathcal L = \frac1B\sum_{b} \operatorname{softplus}(-G(c_b, x^+_b))
           + \nu\,\frac{1}{\nu B}\sum_{b, k} \operatorname{softplus}(G(c_b, x^-_{b,k})),

which for ``nu = 1`` is :math:`\operatorname{softplus}(E(x^+)) + \operatorname{softplus}(-E(x^-))`
averaged over the batch (Deng, Bakhtin, Ott, Szlam & Ranzato 2020, *Residual energy-based models
for text generation*, ICLR, Eq. 3). Where the supports match, the population minimiser is
:math:`E_\theta(c, x) = \log p_{LM}(x \mid c) - \log p_{data}(x \mid c)`, so the joint model
equals the data law and is self-normalised for every prefix (their Theorem 1; conditional NCE:
Ma & Collins 2018, *Noise contrastive estimation and negative sampling for conditional models:
consistency and statistical efficiency*, EMNLP).

Batches: ``(prefix, positive, negatives)`` :class:`~ebms.sequences.Sequences` with ``B``, ``B`` and
``nu B`` rows, negatives in the n-per-prefix layout (row ``b``'s negatives at
``b nu .. b nu + nu - 1``, as :meth:`ebms.models.residual_lm.ResidualLM.sample_base` and
:meth:`ebms.data.negative_cache.NegativeCache.draw` return them), or the same as six tensors
(:meth:`ResidualNCE.pack`) for :class:`~ebms.train.Trainer` data streams. Negatives are usually
drawn offline (:class:`~ebms.data.negative_cache.NegativeCache`).

Cost: two energy passes (``B`` and ``nu B`` rows); no base LM call.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor, nn

from ebms._checks import check_int
from ebms.capabilities import ResidualEnergy, supports
from ebms.objectives._base import LossOutput, scalar_metrics
from ebms.objectives._nce_core import nce_logits, nce_loss
from ebms.sequences import Sequences

__all__ = ["ResidualNCE"]

Batch = tuple[Sequences, Sequences, Sequences] | tuple[Tensor, Tensor, Tensor, Tensor, Tensor, Tensor]


class ResidualNCE(nn.Module):
    r"""Conditional NCE of a residual energy against its base LM (see the module docstring).

    Args:
        nu: negatives per positive, an integer ``>= 1``.

    Call: ``objective(model, batch, generator=None) -> LossOutput``; ``model`` has
    ``energy(prefix, x) -> (B,)`` (a :class:`~ebms.models.residual_lm.ResidualLM`); ``generator``
    is unused (the negatives come with the batch).

    Metrics: ``e_pos`` and ``e_neg`` (mean energies, the names the Trainer's progress bar shows),
    ``gap = e_neg - e_pos``
    (grows as the energy separates data from base samples), ``accuracy`` (fraction of the
    ``(1 + nu) B`` samples the classifier ``G > 0`` labels correctly).
    """

    def __init__(self, *, nu: int = 1) -> None:
        super().__init__()
        self.nu = check_int(nu, "nu", minimum=1)

    @staticmethod
    def pack(prefix: Sequences, positive: Sequences, negatives: Sequences) -> tuple[Tensor, ...]:
        """The six-tensor form ``(prefix tokens (B, T_c), prefix lengths (B,), positive tokens (B, T_x),
        positive lengths (B,), negative tokens (B, nu, T_n), negative lengths (B, nu))`` of a batch
        (every tensor has ``B`` rows, as the Trainer's data streams require)."""
        for name, s in (("prefix", prefix), ("positive", positive), ("negatives", negatives)):
            Sequences.coerce(s, name=name, pairs=False, expected="an ebms.sequences.Sequences")
        B = prefix.batch_size
        if B == 0 or negatives.batch_size % B:
            raise ValueError(f"negatives: expected a positive multiple of the {B} prefixes; got {negatives.batch_size}")
        nu = negatives.batch_size // B
        return (prefix.tokens, prefix.lengths, positive.tokens, positive.lengths,
                negatives.tokens.reshape(B, nu, -1), negatives.lengths.reshape(B, nu))

    def _unpack(self, batch: Any) -> tuple[Sequences, Sequences, Sequences]:
        if isinstance(batch, tuple) and len(batch) == 6 and all(isinstance(t, Tensor) for t in batch):
            nt, nl = batch[4], batch[5]
            if nt.dim() != 3 or nl.dim() != 2 or nl.shape != nt.shape[:2]:
                raise ValueError(f"batch: expected negative tokens (B, nu, T) and lengths (B, nu); got "
                                 f"{tuple(nt.shape)} and {tuple(nl.shape)}")
            neg = Sequences(nt.reshape(-1, nt.shape[-1]), nl.reshape(-1))
            return Sequences(batch[0], batch[1]), Sequences(batch[2], batch[3]), neg
        if not (isinstance(batch, tuple) and len(batch) == 3):
            raise TypeError(f"batch: expected (prefix, positive, negatives) Sequences or their six-tensor pack; "
                            f"got {type(batch).__name__}" + (f" of {len(batch)}" if isinstance(batch, tuple) else ""))
        for name, s in zip(("prefix", "positive", "negatives"), batch):
            Sequences.coerce(s, name=name, pairs=False, expected="an ebms.sequences.Sequences")
        return batch[0], batch[1], batch[2]

    def forward(self, model: Any, batch: Batch, *, generator: torch.Generator | None = None) -> LossOutput:
        """The NCE loss of one batch.

        Raises:
            TypeError: a model without ``energy``, a batch of the wrong form.
            ValueError: an empty batch, positives not one per prefix, negatives not ``nu`` per prefix.
        """
        if not supports(model, ResidualEnergy):
            raise TypeError(f"model: expected a residual LM with energy(prefix, x) -> (B,); got {type(model).__name__}")
        prefix, positive, negatives = self._unpack(batch)
        B, nu = prefix.batch_size, self.nu
        if B == 0:
            raise ValueError("prefix: expected at least one prefix; got an empty batch")
        if positive.batch_size != B:
            raise ValueError(f"positive: expected one continuation per prefix ({B}); got {positive.batch_size}")
        if negatives.batch_size != nu * B:
            raise ValueError(f"negatives: expected nu * B = {nu} * {B} = {nu * B} rows (n-per-prefix layout); "
                             f"got {negatives.batch_size}")
        rep = Sequences(prefix.tokens.repeat_interleave(nu, 0), prefix.lengths.repeat_interleave(nu), validate=False)
        e_pos, e_neg = model.energy(prefix, positive), model.energy(rep, negatives)
        g_pos = nce_logits(-e_pos, torch.zeros_like(e_pos), nu=nu)
        g_neg = nce_logits(-e_neg, torch.zeros_like(e_neg), nu=nu)
        loss = nce_loss(g_pos, g_neg, nu=nu)
        with torch.no_grad():
            correct = (g_pos > 0).sum() + (g_neg < 0).sum()
            ep, en = e_pos.mean(), e_neg.mean()
            metrics = scalar_metrics(e_pos=ep, e_neg=en, gap=en - ep,
                                     accuracy=correct.to(e_pos.dtype) / (B + nu * B))
        return LossOutput(loss, metrics)

    def extra_repr(self) -> str:
        return f"nu={self.nu}"
