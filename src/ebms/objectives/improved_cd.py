r"""Improved contrastive divergence (Du, Li, Tenenbaum & Mordatch, 2021).

PCD's surrogate treats the negatives as constants and so drops the part of the
gradient that flows through the sampler. Du et al. add it back as a KL term
between the sampler's distribution :math:`q_\theta` (``k`` Langevin steps from
the buffer) and the model, minimised with respect to the *sampler* only:

.. math::  \mathcal L = \underbrace{\overline{E_\theta(x^+)} - \overline{E_\theta(\bar x^-)}
           + \alpha\big(\overline{E_\theta(x^+)^2} + \overline{E_\theta(\bar x^-)^2}\big)}_{\text{CD (negatives detached)}}
           + \lambda_{KL}\Big(\underbrace{\overline{E_{\bar\theta}(x^-_\theta)}}_{\text{frozen energy}}
           - \lambda_H\,\hat H(x^-_\theta)\Big),

where :math:`x^-_\theta = x_{k-1} - a\,\nabla_x E_\theta(x_{k-1}) + s\,\xi` is the last
Langevin step, kept differentiable in :math:`\theta` (``create_graph=True``),
:math:`x_{k-1}` comes from ``k - 1`` ordinary (detached) sampler steps, and
:math:`E_{\bar\theta}` is the energy with *detached* parameters
(``torch.func.functional_call``): the KL gradient reaches :math:`\theta` only through
the chain. The entropy is the nearest-neighbour estimate against ``R`` stored
buffer chains :math:`r_j` (Kozachenko & Leonenko, 1987, up to the factor ``D`` and
constants, as Du et al. use it):

.. math::  \hat H(x^-) = \frac1B \sum_i \log \min_j \lVert x^-_i - r_j \rVert_2 .

Options from the paper: chain starts may be augmented (``augment``, e.g.
:class:`ebms.data.augment.Augment`) and the buffer may be a
:class:`~ebms.objectives.reservoir.ReservoirBuffer`.

Reference: Du, Y., Li, S., Tenenbaum, J. & Mordatch, I. (2021). "Improved
Contrastive Divergence Training of Energy-Based Models." ICML.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor, nn
from torch.func import functional_call

from ebms._checks import check_int, check_positive
from ebms.energy import evaluate
from ebms.objectives._base import LossOutput, check_batch, scalar_metrics
from ebms.objectives.buffer import ReplayBuffer
from ebms.samplers.langevin import SGLD, ULA

__all__ = ["ImprovedCD"]

#: Augmentation of chain starts, ``(x (B, *event), generator) -> (B, *event)``.
Augmentation = Callable[[Tensor, "torch.Generator | None"], Tensor]


class ImprovedCD(nn.Module):
    r"""CD with a replay buffer plus the KL term through the last sampler step (module docstring).

    What keeps its graph: the CD energies (through :math:`\theta`), and the last
    Langevin step (through :math:`\nabla_x E_\theta`, second order) into the frozen
    energy and the entropy. Detached: the first ``k - 1`` steps, the negatives in
    the CD term, the reference chains of the entropy.

    Metrics (one host sync): ``loss``, ``e_pos``, ``e_neg``, ``gap = e_neg - e_pos``,
    ``kl`` (the bracket above), ``entropy`` (:math:`\hat H`; 0 while the buffer holds
    no written chain), ``accept`` and ``nonfinite`` over the ``k`` steps. Watch ``gap``
    as for CD; a falling ``entropy`` signals mode collapse of the chains.

    Cost: ``k`` energy-and-gradient evaluations, one more backward with a graph
    through the last step (about 2-3 times the last step's cost), an ``(B, R)``
    distance matrix, one forward/backward on ``2B`` rows.

    Random draws per call, in order: ``buffer.sample``, ``augment``, the ``k - 1``
    steps' noise, the last step's noise, the choice of the ``R`` reference chains.

    Args:
        sampler: :class:`~ebms.samplers.langevin.ULA` or :class:`~ebms.samplers.langevin.SGLD`
            (the last step is a Langevin step, differentiated); its ``space`` (e.g. a ``Box``)
            projects the augmented starts and the last step as well.
        buffer: a :class:`~ebms.objectives.buffer.ReplayBuffer` (or ``ReservoirBuffer``);
            the final chains are written back with ``buffer.update``.
        k: sampler steps ``>= 1`` (``k - 1`` detached plus one differentiable).
        kl_weight: :math:`\lambda_{KL} >= 0` (0 gives PCD with the same draws).
        entropy_weight: :math:`\lambda_H >= 0` (0 turns the entropy term off).
        augment: optional transform of the chain starts ``(x, generator) -> x``.
        regularization: :math:`\alpha >= 0`, energy-magnitude penalty as in CD.
        n_entropy: number ``R >= 1`` of buffer chains the entropy compares against.
    """

    #: the loss holds a Langevin step kept differentiable (``create_graph=True``): a double backward
    differentiates_twice = True

    def __init__(
        self,
        sampler: ULA | SGLD,
        buffer: ReplayBuffer,
        k: int = 40,
        *,
        kl_weight: float = 1.0,
        entropy_weight: float = 1.0,
        augment: Augmentation | None = None,
        regularization: float = 0.0,
        n_entropy: int = 100,
    ) -> None:
        super().__init__()
        if not isinstance(sampler, (ULA, SGLD)):
            raise TypeError(
                f"sampler: expected ebms.samplers.ULA or SGLD (the last Langevin step is differentiated); "
                f"got {type(sampler).__name__}"
            )
        if not isinstance(buffer, ReplayBuffer):
            raise TypeError(f"buffer: expected an ebms.objectives.ReplayBuffer; got {type(buffer).__name__}")
        if augment is not None and not callable(augment):
            raise TypeError(f"augment: expected a callable (x, generator) -> x or None; got {type(augment).__name__}")
        self.sampler = sampler
        self.buffer = buffer
        self.k = check_int(k, "k", minimum=1)
        self.kl_weight = check_positive(kl_weight, "kl_weight", allow_zero=True)
        self.entropy_weight = check_positive(entropy_weight, "entropy_weight", allow_zero=True)
        self.augment = augment
        self.regularization = check_positive(regularization, "regularization", allow_zero=True)
        self.n_entropy = check_int(n_entropy, "n_entropy", minimum=1)

    # -- pieces ---------------------------------------------------------------
    def _coefficients(self) -> tuple[float, float]:
        """Gradient coefficient ``a`` and noise scale ``s`` of the last (``k``-th) step."""
        eps = self.sampler.step_size
        if self.sampler.schedule is not None:
            eps = eps * float(self.sampler.schedule(self.k - 1))
        if isinstance(self.sampler, ULA):
            return 0.5 * eps, eps**0.5
        s = self.sampler.noise_scale
        return eps, (2.0 * eps) ** 0.5 if s is None else s

    def last_step(
        self, energy: nn.Module, x: Tensor, *, generator: torch.Generator | None = None, create_graph: bool = True
    ) -> tuple[Tensor, Tensor]:
        r"""The differentiable step :math:`x' = x - a\nabla_x E_\theta(x) + s\,\xi` from detached ``x: (B, *event)``.

        ``create_graph=False`` (used when ``kl_weight = 0``) skips the second-order graph.

        Returns:
            ``(x_new, nonfinite)``: ``(B, *event)`` with a graph to the parameters, and a bool
            ``(B,)`` marking rows whose step was not finite (they stay at ``x``, no gradient).
        """
        a, s = self._coefficients()
        with torch.enable_grad():
            xg = x.detach().requires_grad_(True)
            e = evaluate(energy, xg)
            (g,) = torch.autograd.grad(e.sum(), xg, create_graph=create_graph)
            noise = torch.randn(x.shape, generator=generator, device=x.device, dtype=x.dtype)
            x_new = xg - a * g + s * noise
            if self.sampler.space is not None:
                x_new = self.sampler.space.project(x_new)
        ok = torch.isfinite(x_new.detach()).flatten(1).all(1) & torch.isfinite(e.detach())
        mask = ok.reshape(-1, *([1] * (x.dim() - 1)))
        return torch.where(mask, x_new, x.detach()), ~ok

    def frozen_energy(self, energy: nn.Module, x: Tensor) -> Tensor:
        r""":math:`E_{\bar\theta}(x)` ``(B,)``: the energy with detached parameters (gradient only through ``x``)."""
        params = {name: p.detach() for name, p in energy.named_parameters()}
        return evaluate(lambda z: functional_call(energy, params, (z,)), x)

    def entropy(self, x: Tensor, *, generator: torch.Generator | None = None) -> Tensor | None:
        r"""Nearest-neighbour entropy :math:`\hat H` of ``x: (B, *event)`` against up to ``R`` written
        buffer chains (0-d, differentiable in ``x``); ``None`` while no slot has been written."""
        filled = torch.nonzero(self.buffer.filled).squeeze(-1)
        count = int(filled.numel())
        if count == 0:
            return None
        pick = torch.randperm(count, generator=generator, device=filled.device)[: self.n_entropy]
        ref = self.buffer.data[filled[pick]].to(device=x.device, dtype=x.dtype)
        dist = torch.cdist(x.flatten(1), ref.flatten(1)).min(dim=1).values
        # a chain sitting exactly on a stored one would give log 0 = -inf
        return dist.clamp_min(torch.finfo(x.dtype).tiny).log().mean()

    # -- objective ------------------------------------------------------------
    def forward(self, energy: nn.Module, batch: Tensor, *, generator: torch.Generator | None = None) -> LossOutput:
        """Improved-CD loss for a data batch ``(B, *event)``; writes ``B`` chains to the buffer.

        ``energy`` must be an ``nn.Module`` (its parameters are detached for the KL term).
        """
        if not isinstance(energy, nn.Module):
            raise TypeError(
                f"energy: expected an nn.Module (its parameters are frozen for the KL term); got {type(energy).__name__}"
            )
        pos = check_batch(batch, finite=self.sampler.space is None)
        if tuple(pos.shape[1:]) != self.buffer.event_shape:
            shown = ", ".join(map(str, self.buffer.event_shape))
            raise ValueError(
                f"batch: expected shape (B, {shown}) to match the buffer's event shape; got {tuple(pos.shape)}"
            )
        space = self.sampler.space
        if space is not None:
            space.validate(pos, "batch")
        B = pos.shape[0]
        x0, idx = self.buffer.sample(B, generator)
        x0 = x0.to(device=pos.device, dtype=pos.dtype)
        if self.augment is not None:
            x0 = self.augment(x0, generator)
            if space is not None:
                x0 = space.project(x0)
        accept = pos.new_zeros(())
        bad = pos.new_zeros(())
        x = x0
        if self.k > 1:
            state = self.sampler.init(energy, x0)
            for state, info in self.sampler.iterate(energy, state, self.k - 1, generator=generator):  # noqa: B007, B020
                accept = accept + info.acceptance_rate.to(accept.dtype)
                bad = bad + info.nonfinite.to(bad.dtype).mean()
            x = state.x
        x_k, last_bad = self.last_step(energy, x, generator=generator, create_graph=self.kl_weight > 0)
        accept = (accept + (~last_bad).to(accept.dtype).mean()) / self.k
        bad = (bad + last_bad.to(bad.dtype).mean()) / self.k
        neg = x_k.detach()

        e = evaluate(energy, torch.cat([pos, neg], dim=0))
        e_pos, e_neg = e[:B], e[B:]
        m_pos, m_neg = e_pos.mean(), e_neg.mean()
        loss = m_pos - m_neg
        if self.regularization > 0:
            loss = loss + self.regularization * (e_pos.pow(2).mean() + e_neg.pow(2).mean())
        kl = self.frozen_energy(energy, x_k).mean()
        ent = self.entropy(x_k, generator=generator)
        if ent is not None and self.entropy_weight > 0:
            kl = kl - self.entropy_weight * ent
        if self.kl_weight > 0:
            loss = loss + self.kl_weight * kl
        self.buffer.update(idx, neg)
        metrics = scalar_metrics(
            loss=loss,
            e_pos=m_pos,
            e_neg=m_neg,
            gap=m_neg - m_pos,
            kl=kl,
            entropy=ent if ent is not None else 0.0,
            accept=accept,
            nonfinite=bad,
        )
        return LossOutput(loss=loss, metrics=metrics, negatives=neg)

    def extra_repr(self) -> str:
        return (
            f"sampler={type(self.sampler).__name__}, k={self.k}, kl_weight={self.kl_weight}, "
            f"entropy_weight={self.entropy_weight}, augment={self.augment is not None}"
        )
