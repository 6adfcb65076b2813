r"""Contrastive divergence for RBMs with analytic gradients: CD-k and PCD-k by block Gibbs sweeps.

An RBM (:mod:`ebms.models.rbm`) has the free energy
:math:`F(v) = -\phi(v) - \sum_j \operatorname{softplus}(a_j + \psi_j(v))` and closed-form
conditionals, so the maximum-likelihood gradient needs no autograd:

.. math::
    g = \frac1B \sum_b \nabla_\theta F(v_b) - \frac1C \sum_c \nabla_\theta F(\tilde v_c)
      = -\Big(\frac1B \sum_b s(v_b, p_b) - \frac1C \sum_c s(\tilde v_c, \tilde p_c)\Big),

where :math:`s(v, p)` are the sufficient statistics :math:`\nabla_\theta(-F(v))` (for a Bernoulli
RBM :math:`(v p^\top, v, p)` for :math:`(W, b, a)`) with the hidden *probabilities*
:math:`p = p(h = 1 \mid v)`, and the negatives :math:`\tilde v` come from ``k`` block Gibbs sweeps
:math:`h \sim p(h \mid v)`, :math:`v \sim p(v \mid h)` started at the data's hidden sample (CD-k;
Hinton, 2002, "Training products of experts by minimizing contrastive divergence") or at
persistent hidden chains carried between calls (PCD; Tieleman, 2008, "Training restricted
Boltzmann machines using approximations to the likelihood gradient"; scikit-learn's
``BernoulliRBM`` keeps its chains the same way). ``g`` is the gradient of the CD surrogate
:math:`\overline{F(v)} - \overline{F(\tilde v)}` with the negatives held fixed.

:class:`RBMContrastiveDivergence` is the objective: it declares ``sets_gradients = True``
(:class:`ebms.train.protocols.GradientObjective`) and writes ``g`` into the ``.grad`` of
``model.cd_parameters()``, so the :class:`~ebms.train.Trainer` runs no ``backward()`` and any
optimizer takes the step (SGD with momentum, and weight decay on ``W`` only through a parameter
group, is the classic recipe; :class:`ebms.train.LeanSGD` runs it without ``torch.optim``'s
per-step overhead). :func:`negative_phase` is the sampling half, shared with
:func:`ebms.fit.cd_update`. What the objective needs from the model is
:class:`ebms.capabilities.RBMLike`; the products it runs, :class:`ebms.capabilities.BlockProducts`.

Cost per call: ``2k + 1`` ``B x D x H`` products for the conditionals plus two for the statistics;
the free energies for the metrics (``energies=True``) add ``2 (B x H)`` softplus and one ``B x D``
product per phase.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ebms._checks import check_finite, check_int, check_shape, check_tensor
from ebms.capabilities import BlockProducts, RBMLike
from ebms.objectives._base import LossOutput, scalar_metrics
from ebms.spaces import DiscreteSpace

__all__ = ["ModelProducts", "NegativePhase", "RBMContrastiveDivergence", "negative_phase"]


#: ``products(model, batch) -> BlockProducts``: a faster implementation for a model and batch
ProductsFactory = Callable[[Any, Tensor], BlockProducts]


class ModelProducts:
    """:class:`BlockProducts` through the model's own methods (any :class:`RBMLike`)."""

    def __init__(self, model: RBMLike) -> None:
        self.model = model

    def hidden_input(self, v: Tensor) -> Tensor:
        return self.model.hidden_input(v)

    def visible_term(self, v: Tensor) -> Tensor:
        return self.model.visible_term(v)

    def visible_mean(self, h: Tensor) -> Tensor:
        return self.model.visible_mean(h)

    def sample_visible(self, mean: Tensor, h: Tensor, generator: torch.Generator | None) -> Tensor:
        return self.model.sample_visible(h, generator)

    def statistics(self, v: Tensor, ph: Tensor, vn: Tensor, phn: Tensor, alpha_pos: float,
                   alpha_neg: float) -> list[Tensor]:
        out = [torch.zeros_like(p) for p in self.model.cd_parameters()]
        self.add_grad_(out, v, ph, vn, phn, alpha_pos, alpha_neg)
        return out

    def add_grad_(self, out: Sequence[Tensor], v: Tensor, ph: Tensor, vn: Tensor, phn: Tensor,
                  alpha_pos: float, alpha_neg: float) -> None:
        self.model.add_loglik_grad_(out, v, ph, alpha_pos)
        self.model.add_loglik_grad_(out, vn, phn, alpha_neg)


@dataclass
class NegativePhase:
    """One CD sampling phase (:func:`negative_phase`).

    Attributes:
        ph_pos: ``p(h = 1 | v)`` of the data ``(B, H)``.
        v_neg: negatives ``(C, *event)`` (visible means in a mean-field last sweep).
        ph_neg: ``p(h = 1 | v_neg)`` ``(C, H)``.
        chain: next persistent hidden states ``(C, H)`` (``None`` for CD-k).
        products: the products used (for the statistics).
        f_pos, f_neg: mean free energies of data and negatives (0-d; ``None`` unless asked).
    """

    ph_pos: Tensor
    v_neg: Tensor
    ph_neg: Tensor
    chain: Tensor | None
    products: BlockProducts
    f_pos: Tensor | None = None
    f_neg: Tensor | None = None


def _probs(products: BlockProducts, v: Tensor, energies: bool) -> tuple[Tensor, Tensor | None]:
    """``p(h = 1 | v)`` and, with ``energies``, the mean free energy of ``v`` (same product)."""
    pre = products.hidden_input(v)
    mean_f = None
    if energies:
        mean_f = -(products.visible_term(v).sum() + F.softplus(pre).sum()) / v.shape[0]
    return pre.sigmoid_(), mean_f


def negative_phase(model: RBMLike, v: Tensor, *, k: int, persistent: bool, chain: Tensor | None,
                   mean_field: bool, products: BlockProducts, generator: torch.Generator | None,
                   energies: bool = False) -> NegativePhase:
    """Hidden probabilities of ``v``, ``k`` block Gibbs sweeps and, for PCD, the next chain (no autograd).

    The chains start at ``chain`` (PCD, when given) or at ``h ~ p(h | v)``; each sweep draws
    ``v' ~ p(v | h)`` (its mean instead in the last sweep when ``mean_field``) and takes
    ``p(h | v')``; PCD then draws the next ``h`` from the last probabilities. Random draws, in
    order: the start (if drawn), per sweep the visible draw then (except the last) the hidden one,
    the next chain.
    """
    with torch.no_grad():
        return _sweeps(v, k, persistent, chain, mean_field, products, generator, energies)


def _sweeps(v: Tensor, k: int, persistent: bool, chain: Tensor | None, mean_field: bool, products: BlockProducts,
            generator: torch.Generator | None, energies: bool) -> NegativePhase:
    """:func:`negative_phase`'s work; the caller has switched autograd off."""
    bern = _bernoulli
    ph_pos, f_pos = _probs(products, v, energies)
    h = chain if persistent and chain is not None else bern(ph_pos, generator)
    ph_neg, f_neg, v_neg = ph_pos, None, v
    for step in range(k):
        last = step == k - 1
        mean = products.visible_mean(h)
        v_neg = mean if last and mean_field else products.sample_visible(mean, h, generator)
        ph_neg, f_neg = _probs(products, v_neg, energies and last)
        if not last:
            h = bern(ph_neg, generator)
    nxt = bern(ph_neg, generator) if persistent else None
    return NegativePhase(ph_pos, v_neg, ph_neg, nxt, products, f_pos, f_neg)


def _bernoulli(p: Tensor, generator: torch.Generator | None) -> Tensor:
    """``u < p`` with ``u ~ U[0, 1)``, as floats (the RBMs' own Bernoulli draw: the same stream as
    the RBM modules' ``bernoulli``, whose ``torch.rand(shape, ...)`` parses its arguments slower)."""
    return torch.rand_like(p, generator=generator, memory_format=torch.contiguous_format).lt_(p)


class RBMContrastiveDivergence(nn.Module):
    r"""CD-k / PCD-k for RBMs with analytic gradients (module docstring).

    ``out = objective(model, v, generator=g)`` on a batch ``v (B, *event)`` runs the negative
    phase and **sets** ``p.grad`` of ``model.cd_parameters()`` (adds to a gradient already there)
    to the descent direction ``g``; the returned loss carries no graph (``sets_gradients = True``:
    the trainer calls no ``backward()``). With ``energies=True`` the loss is the CD surrogate
    :math:`\overline{F(v)} - \overline{F(\tilde v)}` and the metrics are ``e_pos``, ``e_neg`` (mean
    free energies) and ``gap = e_neg - e_pos``; with ``energies=False`` (drivers that read no
    metrics, e.g. :class:`ebms.fit.RBMEstimator`) none are computed, there are no metrics and
    the loss is 0.

    Persistent chains (``persistent=True``) live in the buffer ``chain`` ``(C, H)``: empty until
    the first call, which starts ``C = B`` chains at the data's hidden sample; the buffer is in
    ``state_dict()``, so a checkpointed run continues them. The batch is not checked for values
    (validate the data set once, e.g. ``model.check_input``); its shape is.

    Args:
        k: Gibbs sweeps per call (``>= 1``).
        persistent: PCD instead of CD-k.
        mean_field: visible *means* instead of a draw in the last sweep (Hinton, 2010, "A practical
            guide to training restricted Boltzmann machines", sec. 3.3). ``None``: on for CD-k with
            discrete visibles, off for PCD (chains must hold samples; ``True`` with ``persistent``
            is an error) and for continuous visibles (the means lack the visible noise).
        energies: compute the free energies for the loss and metrics (see above).
        products: ``products(model, v) -> BlockProducts``, a faster implementation for the model
            at hand (``None``: :class:`ModelProducts`).
    """

    sets_gradients: ClassVar[bool] = True
    chain: Tensor

    def __init__(self, k: int = 1, *, persistent: bool = False, mean_field: bool | None = None,
                 energies: bool = True, products: ProductsFactory | None = None) -> None:
        super().__init__()
        self.k = check_int(k, "k", minimum=1)
        if mean_field and persistent:
            raise ValueError("mean_field: expected False (or None) with persistent=True: PCD chains must hold samples")
        if products is not None and not callable(products):
            raise TypeError(f"products: expected a callable (model, batch) -> BlockProducts or None; got {products!r}")
        self.persistent, self.mean_field, self.energies = bool(persistent), mean_field, bool(energies)
        self.products = products
        self.register_buffer("chain", torch.zeros(0))

    def forward(self, model: RBMLike, batch: Tensor, *, generator: torch.Generator | None = None) -> LossOutput:
        """CD step on ``batch (B, *event)``: sets the parameters' ``.grad``; see the class docstring."""
        check_tensor(batch, "batch", floating=True)
        v = check_shape(batch, (None, *model.space.event_shape), "batch")
        if v.shape[0] == 0:
            raise ValueError(f"batch: expected at least one row; got shape {tuple(v.shape)}")
        check_finite(v, "batch")
        persistent, mean_field = self.persistent, self.mean_field
        if mean_field is None:
            mean_field = not persistent and isinstance(model.space, DiscreteSpace)
        products = ModelProducts(model) if self.products is None else self.products(model, v)
        chain = None
        if persistent:
            chain = self.chain
            chain = chain if chain.numel() else None
        with torch.no_grad():  # one context for the sweeps and the statistics (a context costs µs)
            phase = _sweeps(v, self.k, persistent, chain, mean_field, products, generator, self.energies)
            grads = products.statistics(v, phase.ph_pos, phase.v_neg, phase.ph_neg,
                                        -1.0 / v.shape[0], 1.0 / phase.v_neg.shape[0])
            for p, g in zip(model.cd_parameters(), grads):
                if p.grad is None:
                    p.grad = g
                else:
                    p.grad.add_(g)
        if phase.chain is not None:
            self._buffers["chain"] = phase.chain  # the buffer's new value, without Module.__setattr__'s hooks (µs)
        if phase.f_pos is None or phase.f_neg is None:
            return LossOutput(v.new_zeros(()), {}, phase.v_neg)
        gap = phase.f_neg - phase.f_pos
        return LossOutput(-gap, scalar_metrics(e_pos=phase.f_pos, e_neg=phase.f_neg, gap=gap), phase.v_neg)

    def _load_from_state_dict(self, state_dict: dict[str, Any], prefix: str, *args: Any) -> None:
        """Chains of any size load (they are created on the first call, so a fresh objective has none)."""
        stored = state_dict.get(prefix + "chain")
        if isinstance(stored, Tensor) and stored.shape != self.chain.shape:
            self._buffers["chain"] = torch.empty(stored.shape, dtype=self.chain.dtype, device=self.chain.device)
        super()._load_from_state_dict(state_dict, prefix, *args)

    def extra_repr(self) -> str:
        return (f"k={self.k}, persistent={self.persistent}, mean_field={self.mean_field}, "
                f"energies={self.energies}")
