r"""Noise-contrastive estimation: learn ``E`` and ``log Z`` by telling data from noise.

Model with a learned normaliser :math:`\zeta \approx \log Z`:
:math:`\log p_{\theta,\zeta}(x) = -E_\theta(x) - \zeta`. With a known noise
density ``q`` and :math:`\nu` noise samples per data sample, the posterior of
"data" is :math:`\sigma(G(x))` with the logit (monograph Eq. 2.45)

.. math::  G(x) = -E_\theta(x) - \zeta - \log q(x) - \log\nu ,

and NCE maximises the log-likelihood of the labels (Eq. 2.46), i.e. minimises (the logistic
core shared with conditional and per-length NCE: :func:`~ebms.objectives.nce_logits`,
:func:`~ebms.objectives.nce_loss`)

.. math::  \mathcal L = \frac1B\sum_{x\in D}\operatorname{softplus}(-G(x))
           + \nu\,\frac1{N}\sum_{y\in Q}\operatorname{softplus}(G(y)),
           \qquad N = \operatorname{round}(\nu B)\ \text{noise samples}.

At the optimum (infinite data) :math:`p_{\theta,\zeta}` equals the data density
and :math:`\zeta = \log Z_\theta`: the fitted model is self-normalised
(Gutmann & Hyvärinen, 2010, 2012; monograph Theorem 2.4). The noise must
cover the data's support, be easy to sample and have a closed-form density;
one close to the data (e.g. a Gaussian fitted to it, a little wider) gives a
harder, more informative task.

References:
    Gutmann, M. & Hyvärinen, A. (2010). "Noise-contrastive estimation: a new
    estimation principle for unnormalized statistical models." AISTATS.
    Gutmann, M. & Hyvärinen, A. (2012). "Noise-contrastive estimation of
    unnormalized statistical models, with applications to natural image
    statistics." JMLR 13.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn

from ebms._checks import check_energy_output, check_positive, check_shape, check_tensor
from ebms.capabilities import NormalisedModel
from ebms.distributions import Gaussian, as_distribution
from ebms.energy import EnergyLike, evaluate
from ebms.objectives._base import LossOutput, check_batch, scalar_metrics
from ebms.objectives._nce_core import nce_logits, nce_loss

__all__ = ["NCE", "GaussianNoise"]

#: Moved to :class:`ebms.distributions.Gaussian` (same constructor, ``fit`` and attributes).
GaussianNoise = Gaussian


class NCE(nn.Module):
    r"""Noise-contrastive estimation with a learned log-normaliser (see the module docstring).

    The objective owns :math:`\zeta` as the parameter ``log_z``: **add
    ``objective.parameters()`` to the optimiser** together with the energy's.

    What is detached: the noise samples and :math:`\log q` (the noise is
    fixed). Gradients flow into the energy's parameters and ``log_z``.

    Metrics (one host sync): ``loss``, ``accuracy`` (fraction of data and
    noise samples on the correct side of :math:`G = 0`), ``log_z``, ``e_pos``
    (mean data energy), ``e_neg`` (mean noise energy), ``gap = e_neg - e_pos``.
    Accuracy near 1 means the noise is too easy to tell apart (little
    signal: move ``q`` closer to the data); near chance at the start means
    ``q`` is already close to the data.

    Random draws: ``noise.sample(N, generator=generator)`` only.

    Args:
        noise: fixed normalised model following :class:`ebms.distributions.NormalisedModel`
            (``sample(n, *, generator) -> (n, *event)``, ``log_prob(x) -> (B,)``), e.g.
            :class:`ebms.distributions.Gaussian` or :class:`~ebms.distributions.GaussianMixture`;
            a ``torch.distributions`` law is wrapped in
            :class:`~ebms.distributions.TorchDistribution` (its draws then come from a seed taken
            from the generator).
        nu: noise-to-data ratio :math:`\nu > 0`.
        log_z_init: initial :math:`\zeta`.
    """

    def __init__(self, noise: NormalisedModel, *, nu: float = 1.0, log_z_init: float = 0.0) -> None:
        super().__init__()
        self.noise: NormalisedModel = as_distribution(noise, "noise")
        self.nu = check_positive(nu, "nu")
        try:
            z0 = float(log_z_init)
        except (TypeError, ValueError):
            raise TypeError(f"log_z_init: expected a number; got {log_z_init!r}") from None
        if not math.isfinite(z0):
            raise ValueError(f"log_z_init: expected a finite number; got {log_z_init!r}")
        self.log_z = nn.Parameter(torch.tensor(z0))

    def _log_q(self, x: Tensor) -> Tensor:
        with torch.no_grad():
            lq = self.noise.log_prob(x)
        return check_energy_output(lq, x.shape[0], "noise.log_prob(x)").to(x.dtype)

    def _logit(self, e: Tensor, log_q: Tensor) -> Tensor:
        return nce_logits(-e, log_q, nu=self.nu, log_z=self.log_z.to(e.dtype))

    def logit(self, energy: EnergyLike, x: Tensor) -> Tensor:
        r"""The classifier's logit :math:`G(x)`, ``(B,)``; ``G > 0`` means "data".

        Its zero set is the decision boundary, where the model density
        :math:`e^{-E-\zeta}` equals :math:`\nu q`.
        """
        check_tensor(x, "x", floating=True, min_dim=1)
        return self._logit(evaluate(energy, x), self._log_q(x))

    def forward(
        self, energy: EnergyLike, batch: Tensor, *, generator: torch.Generator | None = None
    ) -> LossOutput:
        """Loss for ``batch: (B, *event)``; draws ``round(nu * B)`` noise samples."""
        x = check_batch(batch)
        B = x.shape[0]
        n = max(1, round(self.nu * B))
        with torch.no_grad():
            y = self.noise.sample(n, generator=generator)
        check_tensor(y, "noise.sample(n)", floating=True)
        check_shape(y, (n, *x.shape[1:]), "noise.sample(n)")
        if y.dtype != x.dtype or y.device != x.device:
            raise TypeError(
                f"noise.sample(n): expected dtype {x.dtype} on {x.device} like the batch; "
                f"got {y.dtype} on {y.device} (move the objective with .to())"
            )
        y = y.detach()
        both = torch.cat([x, y], dim=0)
        e = evaluate(energy, both)
        G = self._logit(e, self._log_q(both))
        g_pos, g_neg = G[:B], G[B:]
        loss = nce_loss(g_pos, g_neg, nu=self.nu)
        correct = (g_pos > 0).sum() + (g_neg <= 0).sum()
        e_pos, e_neg = e[:B].mean(), e[B:].mean()
        metrics = scalar_metrics(
            loss=loss,
            accuracy=correct.to(e.dtype) / (B + n),
            log_z=self.log_z,
            e_pos=e_pos,
            e_neg=e_neg,
            gap=e_neg - e_pos,
        )
        return LossOutput(loss=loss, metrics=metrics, negatives=y)

    def extra_repr(self) -> str:
        return f"nu={self.nu}"
