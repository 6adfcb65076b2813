r"""Contrastive divergence (CD-k) and persistent CD (PCD / SML).

Both estimate the maximum-likelihood gradient

.. math::  \nabla_\theta \big(-\log p_\theta(x^+)\big)
           = \nabla_\theta E_\theta(x^+) - \mathbb E_{x^-\sim p_\theta}[\nabla_\theta E_\theta(x^-)]

with a surrogate loss whose gradient is the same difference, the negatives
:math:`x^-` coming from ``k`` steps of a Markov kernel and treated as
constants (detached):

.. math::  \mathcal L = \overline{E(x^+)} - \overline{E(x^-)}
           + \alpha\big(\overline{E(x^+)^2} + \overline{E(x^-)^2}\big),

where the bar is a batch mean and the optional :math:`\alpha` term keeps
energies near zero (Du & Mordatch, 2019).

* **CD-k** (Hinton, 2002) starts the chains at the data batch (or at a fresh
  random draw from ``init``: "short-run" chains). It is biased: it does not
  converge to the MLE for finite ``k`` (monograph §2.3.3).
* **PCD** (Tieleman, 2008; SML, Younes 1989; monograph Algorithm 6) starts
  them where the previous step left them, kept in a
  :class:`~ebms.objectives.ReplayBuffer`. PCD is CD plus a buffer: it reuses
  :meth:`ContrastiveDivergence.contrast` and only changes where ``x0`` comes
  from.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from ebms._checks import check_int, check_positive
from ebms.energy import EnergyLike, evaluate
from ebms.objectives._base import LossOutput, check_batch, scalar_metrics
from ebms.objectives.buffer import ReplayBuffer
from ebms.samplers import Sampler
from ebms.spaces import Space

__all__ = ["ContrastiveDivergence", "PersistentContrastiveDivergence"]


def _check_batch(batch: Tensor, sampler: Sampler, event_shape: tuple[int, ...] | None) -> Tensor:
    """:func:`check_batch`, plus the chains' event shape and the sampler's space (which checks finiteness)."""
    batch = check_batch(batch, finite=sampler.space is None)
    if event_shape is not None and tuple(batch.shape[1:]) != event_shape:
        raise ValueError(
            f"batch: expected shape (B, {', '.join(map(str, event_shape))}) to match the chains' event shape; "
            f"got {tuple(batch.shape)}"
        )
    if sampler.space is not None:
        sampler.space.validate(batch, "batch")
    return batch


class ContrastiveDivergence(nn.Module):
    r"""CD-k: negatives from ``k`` sampler steps started at the data.

    Loss (see the module docstring):
    :math:`\overline{E(x^+)} - \overline{E(x^-)} + \alpha(\overline{E(x^+)^2} + \overline{E(x^-)^2})`.

    What keeps its graph: both energy terms, through the parameters only.
    What is detached: the negatives :math:`x^-` (the sampler returns detached
    chains; no gradient flows through the ``k`` steps). The sampler computes
    input gradients only and never fills parameter ``.grad``.

    Metrics (one host sync): ``loss``, ``e_pos`` (mean data energy), ``e_neg``
    (mean negative energy), ``gap = e_neg - e_pos``, ``accept`` (mean
    acceptance over the ``k`` steps) and ``nonfinite`` (fraction of proposals
    rejected as non-finite). Watch the gap: it should stay small and
    bounded; a gap that grows steadily means the chains no longer reach the
    model's low-energy regions (take more steps or a larger step size), a
    strongly negative one means the sampler finds energies below the data's.

    Cost: ``k`` ``energy_and_grad`` calls for the chains plus one forward
    (data and negatives concatenated) with its backward.

    Args:
        sampler: any :class:`~ebms.samplers.Sampler` (e.g. ``ULA``, ``SGLD``,
            ``MALA``); it should keep ``exp(-E)`` invariant.
        k: number of sampler steps ``>= 1``.
        regularization: :math:`\alpha >= 0`, energy-magnitude penalty.
        init: optional :class:`~ebms.spaces.Space`; when given, chains start
            from ``init.random(B)`` instead of the data batch.

    Example:
        >>> import torch
        >>> from ebms.nets import GaussianEnergy
        >>> from ebms.samplers import ULA
        >>> cd = ContrastiveDivergence(ULA(step_size=0.01), k=5)
        >>> g = torch.Generator().manual_seed(0)
        >>> out = cd(GaussianEnergy(2), torch.randn(16, 2, generator=g), generator=g)
        >>> sorted(out.metrics)
        ['accept', 'e_neg', 'e_pos', 'gap', 'loss', 'nonfinite']
    """

    def __init__(
        self, sampler: Sampler, k: int = 1, *, regularization: float = 0.0, init: Space | None = None
    ) -> None:
        super().__init__()
        if not isinstance(sampler, Sampler):
            raise TypeError(f"sampler: expected an ebms.samplers.Sampler; got {type(sampler).__name__}")
        if init is not None and not isinstance(init, Space):
            raise TypeError(f"init: expected an ebms.spaces.Space or None; got {type(init).__name__}")
        self.sampler = sampler
        self.k = check_int(k, "k", minimum=1)
        self.regularization = check_positive(regularization, "regularization", allow_zero=True)
        self.init = init

    def negatives(
        self, energy: EnergyLike, x0: Tensor, *, generator: torch.Generator | None = None
    ) -> tuple[Tensor, Tensor, Tensor]:
        """Run ``k`` steps from ``x0: (N, *event)``.

        Returns:
            ``(x_neg, accept, nonfinite)``: detached negatives ``(N, *event)``,
            mean acceptance and the fraction of non-finite proposals (0-d tensors).
        """
        state = self.sampler.init(energy, x0)
        accept = torch.zeros((), dtype=x0.dtype, device=x0.device)
        bad = torch.zeros((), dtype=x0.dtype, device=x0.device)
        for state, info in self.sampler.iterate(energy, state, self.k, generator=generator):  # noqa: B007, B020
            accept = accept + info.acceptance_rate.to(accept.dtype)
            bad = bad + info.nonfinite.to(bad.dtype).mean()
        return state.x.detach(), accept / self.k, bad / self.k

    def contrast(
        self,
        energy: EnergyLike,
        positives: Tensor,
        x0: Tensor,
        *,
        generator: torch.Generator | None = None,
    ) -> LossOutput:
        """The CD loss for validated ``positives: (B, *event)`` and chain starts ``x0: (N, *event)``.

        Shared by CD and PCD (and by compositions such as JEM): the caller
        decides where ``x0`` comes from.
        """
        neg, accept, bad = self.negatives(energy, x0, generator=generator)
        B = positives.shape[0]
        e = evaluate(energy, torch.cat([positives, neg], dim=0))
        e_pos, e_neg = e[:B], e[B:]
        m_pos, m_neg = e_pos.mean(), e_neg.mean()
        loss = m_pos - m_neg
        if self.regularization > 0:
            loss = loss + self.regularization * (e_pos.pow(2).mean() + e_neg.pow(2).mean())
        metrics = scalar_metrics(
            loss=loss, e_pos=m_pos, e_neg=m_neg, gap=m_neg - m_pos, accept=accept, nonfinite=bad
        )
        return LossOutput(loss=loss, metrics=metrics, negatives=neg)

    def forward(
        self, energy: EnergyLike, batch: Tensor, *, generator: torch.Generator | None = None
    ) -> LossOutput:
        """CD-k loss for a data batch ``(B, *event)``; negatives ``(B, *event)``."""
        event = None if self.init is None else tuple(self.init.event_shape)
        pos = _check_batch(batch, self.sampler, event)
        if self.init is None:
            x0 = pos
        else:
            x0 = self.init.random(pos.shape[0], generator=generator, device=pos.device, dtype=pos.dtype)
        return self.contrast(energy, pos, x0, generator=generator)

    def extra_repr(self) -> str:
        return f"sampler={type(self.sampler).__name__}, k={self.k}, regularization={self.regularization}"


class PersistentContrastiveDivergence(nn.Module):
    r"""PCD / SML: CD whose chains persist across steps in a replay buffer.

    Each call draws ``B`` slots from ``buffer`` (some re-initialised, see
    :class:`~ebms.objectives.ReplayBuffer`), runs ``k`` sampler steps from
    them, computes the CD loss of :class:`ContrastiveDivergence`, and writes
    the final positions back. Loss, detaching and metrics are those of CD.

    The buffer is a sub-module: ``objective.state_dict()`` holds the chains,
    so a resumed run continues them exactly.

    Random draws per call, in order: the buffer's slots, re-init coins and
    random starts (:meth:`ReplayBuffer.sample`), then the sampler's noise.

    Args:
        sampler: the Markov kernel.
        buffer: the :class:`~ebms.objectives.ReplayBuffer` holding the chains;
            its event shape must match the data's.
        k: sampler steps per call (persistent chains need fewer than CD from
            noise; 10–60 are common for images).
        regularization: :math:`\alpha >= 0` as in CD.
    """

    def __init__(
        self, sampler: Sampler, buffer: ReplayBuffer, k: int = 20, *, regularization: float = 0.0
    ) -> None:
        super().__init__()
        if not isinstance(buffer, ReplayBuffer):
            raise TypeError(f"buffer: expected an ebms.objectives.ReplayBuffer; got {type(buffer).__name__}")
        self.cd = ContrastiveDivergence(sampler, k, regularization=regularization)
        self.buffer = buffer

    @property
    def sampler(self) -> Sampler:
        return self.cd.sampler

    @property
    def k(self) -> int:
        return self.cd.k

    def forward(
        self, energy: EnergyLike, batch: Tensor, *, generator: torch.Generator | None = None
    ) -> LossOutput:
        """PCD loss for a data batch ``(B, *event)``; updates ``B`` buffer slots."""
        pos = _check_batch(batch, self.cd.sampler, self.buffer.event_shape)
        x0, idx = self.buffer.sample(pos.shape[0], generator)
        out = self.cd.contrast(energy, pos, x0.to(device=pos.device, dtype=pos.dtype), generator=generator)
        assert out.negatives is not None  # contrast always returns its negatives
        self.buffer.update(idx, out.negatives)
        return out
