r"""Noise-contrastive estimation: learn ``E`` and ``log Z`` by telling data from noise.

Model with a learned normaliser :math:`\zeta \approx \log Z`:
:math:`\log p_{\theta,\zeta}(x) = -E_\theta(x) - \zeta`. With a known noise
density ``q`` and :math:`\nu` noise samples per data sample, the posterior of
"data" is :math:`\sigma(G(x))` with the logit (monograph Eq. 2.45)

.. math::  G(x) = -E_\theta(x) - \zeta - \log q(x) - \log\nu ,

and NCE maximises the log-likelihood of the labels (Eq. 2.46), i.e. minimises

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

import inspect
import math
from typing import Protocol

import torch
from torch import Tensor, nn

from ebms._checks import check_energy_output, check_finite, check_int, check_positive, check_shape, check_tensor
from ebms._numerics import softplus
from ebms.energy import EnergyLike, evaluate
from ebms.objectives._base import LossOutput, check_batch, scalar_metrics

__all__ = ["NCE", "GaussianNoise"]


class GaussianNoise(nn.Module):
    r"""A fixed Gaussian :math:`\mathcal N(m, C)` that samples from a given generator.

    ``torch.distributions`` draw from the global RNG; objectives in ``ebms``
    take randomness only from an explicit generator, hence this small
    noise model with the two methods NCE needs.

    Args:
        mean: ``(D,)``.
        cov: ``(D, D)`` symmetric positive definite, or a number ``s^2 > 0``
            for :math:`s^2 I`.

    Shapes: ``sample(n) -> (n, D)``; ``log_prob(x: (B, D)) -> (B,)``.
    """

    mean: Tensor
    scale_tril: Tensor

    def __init__(self, mean: Tensor | list[float], cov: Tensor | float) -> None:
        super().__init__()
        m = torch.as_tensor(mean).detach().clone()
        if not m.is_floating_point():
            m = m.float()
        if m.dim() != 1 or m.numel() == 0:
            raise ValueError(f"mean: expected shape (D,) with D >= 1; got {tuple(m.shape)}")
        check_finite(m, "mean")
        D = m.numel()
        if isinstance(cov, (int, float)):
            c = check_positive(cov, "cov") * torch.eye(D, dtype=m.dtype)
        else:
            c = torch.as_tensor(cov, dtype=m.dtype)
            check_shape(c, (D, D), "cov")
            check_finite(c, "cov")
            if not torch.allclose(c, c.T, atol=1e-6):
                raise ValueError(f"cov: expected a symmetric matrix; got {c.tolist()}")
        try:
            L = torch.linalg.cholesky(c)
        except RuntimeError:
            raise ValueError(f"cov: expected a positive definite matrix; Cholesky failed for {c.tolist()}") from None
        self.register_buffer("mean", m)
        self.register_buffer("scale_tril", L)

    @classmethod
    def fit(cls, x: Tensor, *, scale: float = 1.0) -> GaussianNoise:
        """Gaussian with the mean and (``scale²``-inflated) covariance of ``x: (N, D)``, ``N >= 2``."""
        check_tensor(x, "x", floating=True)
        if x.dim() != 2 or x.shape[0] < 2:
            raise ValueError(f"x: expected shape (N, D) with N >= 2; got {tuple(x.shape)}")
        check_finite(x, "x")
        s = check_positive(scale, "scale")
        c = torch.cov(x.T.detach()).reshape(x.shape[1], x.shape[1])
        return cls(x.detach().mean(0), s * s * c)

    @property
    def event_shape(self) -> tuple[int, ...]:
        return (self.mean.numel(),)

    @property
    def covariance(self) -> Tensor:
        """``C``, ``(D, D)``."""
        return self.scale_tril @ self.scale_tril.T

    def sample(self, n: int, *, generator: torch.Generator | None = None) -> Tensor:
        """``n`` draws ``(n, D)``."""
        check_int(n, "n", minimum=1)
        eps = torch.randn((n, self.mean.numel()), generator=generator, device=self.mean.device, dtype=self.mean.dtype)
        return self.mean + eps @ self.scale_tril.T

    def log_prob(self, x: Tensor) -> Tensor:
        """Normalised log-density ``(B,)`` of ``x: (B, D)``."""
        check_shape(x, (None, self.mean.numel()), "x")
        d = (x - self.mean).T
        z = torch.linalg.solve_triangular(self.scale_tril, d, upper=False)
        D = self.mean.numel()
        half_log_det = torch.log(torch.diagonal(self.scale_tril)).sum()
        return -0.5 * (z * z).sum(0) - half_log_det - 0.5 * D * math.log(2 * math.pi)


class NoiseModel(Protocol):
    """What :class:`NCE` needs from a noise distribution (event shape = the data's)."""

    def sample(self, n: int, *, generator: torch.Generator | None = None) -> Tensor: ...

    def log_prob(self, x: Tensor) -> Tensor: ...


def _takes_generator(fn: object) -> bool:
    try:
        params = inspect.signature(fn).parameters  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return False
    return "generator" in params or any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values())


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
        noise: fixed noise model with ``sample(n, *, generator) -> (n, *event)``
            and ``log_prob(x) -> (B,)``, e.g. :class:`GaussianNoise` or
            :class:`~ebms.nets.GaussianMixtureEnergy`. It must accept a
            ``generator`` keyword (``torch.distributions`` do not: wrap them).
        nu: noise-to-data ratio :math:`\nu > 0`.
        log_z_init: initial :math:`\zeta`.
    """

    def __init__(self, noise: NoiseModel, *, nu: float = 1.0, log_z_init: float = 0.0) -> None:
        super().__init__()
        for name in ("sample", "log_prob"):
            if not callable(getattr(noise, name, None)):
                raise TypeError(
                    f"noise: expected an object with sample(n, *, generator) and log_prob(x); "
                    f"{type(noise).__name__} has no {name}()"
                )
        if not _takes_generator(noise.sample):
            raise TypeError(
                f"noise: expected sample(n, *, generator) to take a generator keyword "
                f"(randomness must come from the trainer's generator); {type(noise).__name__}.sample does not. "
                "Wrap a Gaussian with ebms.objectives.GaussianNoise."
            )
        self.noise: NoiseModel = noise
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
        return -e - self.log_z.to(e.dtype) - log_q - math.log(self.nu)

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
        loss = softplus(-g_pos).mean() + self.nu * softplus(g_neg).mean()
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
