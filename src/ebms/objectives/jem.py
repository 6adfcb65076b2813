r"""JEM training: cross-entropy on labelled rows plus persistent contrastive divergence on :math:`p(x)`.

For a :class:`~ebms.models.jem.JEM` with logits :math:`f_\theta`, marginal energy
:math:`E(x) = -\log\sum_y \exp f_\theta(x)[y]` and :math:`p(y|x) = \operatorname{softmax} f_\theta(x)`,
the hybrid objective (Grathwohl et al., 2020, Eq. 5; monograph Eq. 5.4, semi-supervised) is

.. math::  \mathcal L = \lambda_{ce}\,\frac{1}{|L|}\sum_{b \in L} -\log p_\theta(y_b \mid \tilde x_b)
           \;+\; w_t \Big[\overline{E(\tilde x)} - \overline{E(x^-)}
           + \alpha\big(\overline{E(\tilde x)^2} + \overline{E(x^-)^2}\big)\Big],

where :math:`\tilde x = x + \sigma_d \varepsilon` are the data with optional Gaussian noise
(``data_noise``; JEM trains on noisy data; projected into the sampler's space when it has one, so a
``Box`` clips them as it clips the chains), :math:`L` are the rows with a label (``y >= 0``;
``y = -1`` marks an unlabelled row, which enters the generative term only), bars are batch means
over all ``B`` rows, and the negatives :math:`x^-` are ``B`` persistent chains: drawn from the
replay buffer, moved by ``k`` steps of the sampler (SGLD in JEM), written back
(:class:`~ebms.objectives.cd.PersistentContrastiveDivergence`'s scheme). The bracket's gradient
is the PCD estimate of :math:`-\nabla_\theta \log p_\theta(\tilde x)`; :math:`\alpha` is the
energy-magnitude penalty of Du & Mordatch (2019).

* ``conditional=True``: chain ``b`` targets :math:`p(x \mid y^-_b)` (energy
  :math:`-f_\theta(x)[y^-_b]`, :meth:`JEM.class_energy`) for a uniform random class
  :math:`y^-_b`, drawn from and written back to block :math:`y^-_b` of a per-class buffer
  (``ReplayBuffer(..., n_classes=K)``); the loss still scores them with :math:`E(x)`, as in JEM's
  class-conditional sampling option (uniform classes make the chains a sample of the model's
  :math:`p(x)` when its :math:`p(y)` is near uniform).
* Warm-up: :math:`w_t = \text{generative\_weight}\cdot\min(1, t/\text{warmup\_steps})` on the
  ``t``-th call in training mode (``t = 0, 1, ...``; ``warmup_steps = 0``: no warm-up). ``t`` is
  the registered buffer ``step``, so ``state_dict()`` (and the trainer's checkpoints) resume the
  ramp exactly. Chains are run and written back during warm-up too, so they are warm when the
  term switches on.

What keeps its graph: the logits of :math:`\tilde x` and :math:`x^-`, computed in **one** forward
pass over the ``2B`` rows (CE and both energies come from it; per-sample networks only). What is
detached: the negatives (no gradient through the chains) and the data noise.

Metrics (one host sync): ``loss``; ``ce`` (mean over labelled rows, 0 when there are none);
``acc`` (accuracy on the labelled rows, 0 when none); ``labelled`` (their fraction);
``e_pos``, ``e_neg``, ``gap = e_neg - e_pos`` (watch it as for CD; the trainer's divergence guard
watches ``e_pos``/``e_neg``); ``accept`` and ``nonfinite`` of the sampler; ``gen_weight``
(:math:`w_t`).

Random draws per call, in order: the data noise (``data_noise > 0``), the chains' classes
(``conditional``), the buffer's slots, coins and fresh starts, then the sampler's noise.

Cost: ``k`` ``energy_and_grad`` calls on ``B`` chains plus one forward and backward on ``2B`` rows.

References:
    Grathwohl, W., Wang, K.-C., Jacobsen, J.-H., Duvenaud, D., Norouzi, M. & Swersky, K. (2020).
    "Your classifier is secretly an energy based model and you should treat it like one." ICLR.
    Du, Y. & Mordatch, I. (2019). "Implicit generation and generalization in energy-based models."
    Yang, X. & Ji, S. (2021). "JEM++: Improved techniques for training JEM." ICCV (informative
    buffer initialisation: :class:`~ebms.distributions.class_gaussian.ClassConditionalGaussian`).
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor, nn

from ebms._checks import check_bool, check_int, check_positive, check_shape, check_tensor
from ebms.capabilities import JointEnergyModel
from ebms.energy import EnergyLike
from ebms.objectives._base import LossOutput, scalar_metrics
from ebms.objectives.buffer import ReplayBuffer
from ebms.objectives.cd import ContrastiveDivergence, _check_batch
from ebms.samplers import Sampler

__all__ = ["JEMObjective"]


def _check_labels(y: object, n: int, n_classes: int) -> Tensor:
    """``y``: ``LongTensor (n,)`` in ``[-1, K)``, ``-1`` marking unlabelled rows (one host sync)."""
    check_tensor(y, "y")
    assert isinstance(y, Tensor)
    if y.dtype != torch.long:
        raise TypeError(f"y: expected a LongTensor of class indices; got dtype {y.dtype}")
    check_shape(y, (n,), "y")
    lo, hi = torch.stack([y.min(), y.max()]).tolist()
    if lo < -1 or hi >= n_classes:
        raise ValueError(
            f"y: expected values in [-1, {n_classes - 1}] (-1 marks an unlabelled row); got min {lo}, max {hi}"
        )
    return y


class JEMObjective(nn.Module):
    r"""Hybrid JEM loss: cross-entropy + warm-up-weighted PCD on :math:`E(x)` (see the module docstring).

    Args:
        sampler: the Markov kernel for the chains (e.g. ``SGLD(1.0, 0.01, space=Box(...))``).
        buffer: :class:`~ebms.objectives.buffer.ReplayBuffer` of the data's event shape; with
            ``n_classes=K`` when ``conditional``.
        k: sampler steps per call, ``>= 1``.
        generative_weight: weight of the generative term after warm-up, ``>= 0``.
        warmup_steps: calls over which that weight ramps linearly from 0, ``>= 0``.
        conditional: sample ``x | y`` from per-class buffer blocks (see the module docstring).
        data_noise: :math:`\sigma_d >= 0`, std of the Gaussian noise added to the data.
        regularization: :math:`\alpha >= 0`, energy-magnitude penalty.
        ce_weight: :math:`\lambda_{ce} >= 0`, weight of the cross-entropy.

    Call: ``objective(model, batch, *, generator=None) -> LossOutput``, with ``model`` a
    :class:`~ebms.models.jem.JEM` (any :class:`~ebms.capabilities.JointEnergyModel`) and ``batch`` a
    tensor ``x: (B, *event)`` (all rows unlabelled) or a pair ``(x, y)``, ``y: LongTensor (B,)``
    in ``[-1, K)``. ``LossOutput.negatives`` holds the ``B`` chains' new positions.

    Example:
        >>> import torch
        >>> from ebms.models.jem import JEM
        >>> from ebms.nets.classifier import MLPClassifier
        >>> from ebms.samplers import SGLD
        >>> obj = JEMObjective(SGLD(0.5, 0.01), ReplayBuffer(64, 2), k=5)
        >>> g = torch.Generator().manual_seed(0)
        >>> x, y = torch.randn(8, 2, generator=g), torch.tensor([0, 1, -1, -1, 2, 0, -1, 1])
        >>> out = obj(JEM(MLPClassifier(2, 3, hidden=(16,)), 3), (x, y), generator=g)
        >>> sorted(out.metrics)[:4]
        ['acc', 'accept', 'ce', 'e_neg']
    """

    step: Tensor

    def __init__(
        self,
        sampler: Sampler,
        buffer: ReplayBuffer,
        k: int = 20,
        *,
        generative_weight: float = 1.0,
        warmup_steps: int = 0,
        conditional: bool = False,
        data_noise: float = 0.0,
        regularization: float = 0.0,
        ce_weight: float = 1.0,
    ) -> None:
        super().__init__()
        self.cd = ContrastiveDivergence(sampler, k, regularization=regularization)
        if not isinstance(buffer, ReplayBuffer):
            raise TypeError(f"buffer: expected an ebms.objectives.ReplayBuffer; got {type(buffer).__name__}")
        check_bool(conditional, "conditional")
        if conditional and buffer.n_classes is None:
            raise ValueError(
                "buffer: conditional=True samples x | y from per-class blocks; expected a ReplayBuffer with "
                "n_classes=K; got n_classes=None"
            )
        self.buffer = buffer
        self.conditional = conditional
        self.generative_weight = check_positive(generative_weight, "generative_weight", allow_zero=True)
        self.warmup_steps = check_int(warmup_steps, "warmup_steps", minimum=0)
        self.data_noise = check_positive(data_noise, "data_noise", allow_zero=True)
        self.ce_weight = check_positive(ce_weight, "ce_weight", allow_zero=True)
        self.register_buffer("step", torch.zeros((), dtype=torch.long))

    @property
    def sampler(self) -> Sampler:
        return self.cd.sampler

    @property
    def k(self) -> int:
        return self.cd.k

    @property
    def regularization(self) -> float:
        return self.cd.regularization

    def weight_at(self, t: int) -> float:
        r""":math:`w_t = \text{generative\_weight}\cdot\min(1, t/\text{warmup\_steps})` (Python float)."""
        if self.warmup_steps == 0:
            return self.generative_weight
        return self.generative_weight * min(1.0, t / self.warmup_steps)

    def _weight(self) -> Tensor:
        """:meth:`weight_at` of the current ``step`` as a float64 0-d tensor (no host sync)."""
        t = self.step.to(torch.float64)
        if self.warmup_steps == 0:
            return torch.full_like(t, self.generative_weight)
        return (t / self.warmup_steps).clamp(max=1.0) * self.generative_weight

    def _split(self, batch: Any, n_classes: int) -> tuple[Tensor, Tensor]:
        """``(x, y)`` from a tensor (all unlabelled) or a pair; validated shapes and label range."""
        if isinstance(batch, Tensor):
            x = batch
            y = None
        elif isinstance(batch, (tuple, list)):
            if len(batch) != 2:
                raise ValueError(f"batch: expected a tensor x or a pair (x, y); got a sequence of {len(batch)} items")
            x, y = batch
        else:
            raise TypeError(f"batch: expected a tensor x or a pair (x, y); got {type(batch).__name__}")
        x = _check_batch(x, self.cd.sampler, self.buffer.event_shape)
        if y is None:
            return x, torch.full((x.shape[0],), -1, dtype=torch.long, device=x.device)
        return x, _check_labels(y, x.shape[0], n_classes).to(x.device)

    def forward(self, model: JointEnergyModel, batch: Tensor | tuple[Tensor, Tensor], *,
                generator: torch.Generator | None = None) -> LossOutput:
        """The JEM loss for one batch; moves ``B`` chains of the buffer (see the class docstring)."""
        if not isinstance(model, JointEnergyModel):
            raise TypeError(
                "model: expected a joint energy model with n_classes, logits(x) and class_energy(y) "
                f"(e.g. ebms.models.jem.JEM); got {type(model).__name__}"
            )
        K = model.n_classes
        if self.conditional and self.buffer.n_classes != K:
            raise ValueError(f"buffer: expected n_classes={K} blocks to match the model's classes; "
                             f"got n_classes={self.buffer.n_classes}")
        x, y = self._split(batch, K)
        B = x.shape[0]
        pos = x
        if self.data_noise > 0:
            pos = x + self.data_noise * torch.randn(x.shape, generator=generator, device=x.device, dtype=x.dtype)
            if self.cd.sampler.space is not None:  # noisy data stay where the chains live (a Box clips)
                pos = self.cd.sampler.space.project(pos)
        chain_energy: EnergyLike = model
        if self.conditional:
            y_neg = torch.randint(0, K, (B,), generator=generator, device=self.buffer.data.device)
            x0, idx = self.buffer.sample(B, generator, labels=y_neg)
            chain_energy = model.class_energy(y_neg.to(x.device))
        else:
            x0, idx = self.buffer.sample(B, generator)
        neg, accept, bad = self.cd.negatives(chain_energy, x0.to(device=x.device, dtype=x.dtype), generator=generator)
        self.buffer.update(idx, neg)

        logits = model.logits(torch.cat([pos, neg], dim=0))
        e = -torch.logsumexp(logits, dim=-1)
        e_pos, e_neg = e[:B], e[B:]
        m_pos, m_neg = e_pos.mean(), e_neg.mean()
        gen = m_pos - m_neg
        if self.regularization > 0:
            gen = gen + self.regularization * (e_pos.pow(2).mean() + e_neg.pow(2).mean())

        lab = y >= 0
        n_lab = lab.sum().clamp(min=1).to(logits.dtype)
        log_p = torch.log_softmax(logits[:B], dim=-1).gather(1, y.clamp(min=0)[:, None]).squeeze(1)
        ce = -torch.where(lab, log_p, torch.zeros_like(log_p)).sum() / n_lab  # unlabelled rows: no term, no gradient
        hits = (logits[:B].detach().argmax(dim=-1) == y) & lab
        acc = hits.sum().to(logits.dtype) / n_lab

        w = self._weight()
        loss = self.ce_weight * ce + w.to(gen.dtype) * gen
        if self.training:
            self.step.add_(1)
        metrics = scalar_metrics(
            loss=loss, ce=ce, acc=acc, labelled=lab.to(logits.dtype).mean(), e_pos=m_pos, e_neg=m_neg,
            gap=m_neg - m_pos, accept=accept, nonfinite=bad, gen_weight=w,
        )
        return LossOutput(loss=loss, metrics=metrics, negatives=neg)

    def extra_repr(self) -> str:
        return (
            f"k={self.k}, generative_weight={self.generative_weight}, warmup_steps={self.warmup_steps}, "
            f"conditional={self.conditional}, data_noise={self.data_noise}, regularization={self.regularization}, "
            f"ce_weight={self.ce_weight}"
        )
