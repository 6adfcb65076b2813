r"""Gaussian :math:`\mathcal N(\mu, \Sigma)`, with a full covariance or a diagonal one.

.. math::  \log q(x) = -\tfrac12 (x-\mu)^\top \Sigma^{-1} (x-\mu) - \tfrac12\log\det\Sigma - \tfrac D2 \log 2\pi .

Full covariance: ``mean: (D,)`` and :math:`\Sigma = LL^\top` stored as its Cholesky factor
``scale_tril`` (``log_prob`` is one triangular solve, ``O(B D^2)``). Diagonal: ``mean`` of any
event shape and a per-coordinate ``std`` (``O(B D)``). Draws :math:`\mu + L\varepsilon` come from
the given ``torch.Generator``; ``rsample`` keeps the graph to ``mean`` and the scale.
"""

from __future__ import annotations

import math
from typing import Any

import torch
from torch import Tensor

from ebms._checks import check_finite, check_int, check_positive, check_shape, check_tensor
from ebms.distributions._base import Distribution, check_event
from ebms.spaces import Reals

__all__ = ["Gaussian"]


class Gaussian(Distribution):
    r"""Gaussian with a full or diagonal covariance (see the module docstring).

    Args:
        mean: ``(*event)`` (a list is converted; integers become float32). Full covariance needs
            ``(D,)``.
        cov: full covariance ``(D, D)``, symmetric positive definite, or a number ``s^2 > 0`` for
            :math:`s^2 I`.
        std: diagonal standard deviations: a number ``> 0`` or a tensor of ``mean``'s shape
            (never broadcast otherwise). Give ``cov`` or ``std``, not both; neither means ``std=1``.

    Attributes:
        mean: ``(*event)`` buffer; ``scale_tril`` ``(D, D)`` (full) or ``std`` ``(*event)``
        (diagonal) buffer; ``diagonal``: which of the two; ``space``: :class:`~ebms.spaces.Reals`.

    Shapes: ``sample(n) -> (n, *event)``; ``log_prob(x: (B, *event)) -> (B,)``.

    Example:
        >>> import torch
        >>> q = Gaussian(torch.zeros(2), 4.0)              # N(0, 4 I), full form
        >>> q.log_prob(q.sample(3, generator=torch.Generator().manual_seed(0))).shape
        torch.Size([3])
    """

    has_rsample = True
    has_entropy = True
    mean: Tensor
    std: Tensor
    scale_tril: Tensor

    def __init__(self, mean: Tensor | list[float], cov: Tensor | float | None = None, *,
                 std: Tensor | float | None = None) -> None:
        super().__init__()
        m = torch.as_tensor(mean).detach().clone()
        if not m.is_floating_point():
            m = m.float()
        if m.dim() == 0 or m.numel() == 0 or (cov is not None and m.dim() != 1):
            raise ValueError(f"mean: expected shape (D,) with D >= 1"
                             f"{'' if cov is not None else ' or (*event)'}; got {tuple(m.shape)}")
        check_finite(m, "mean")
        if cov is not None and std is not None:
            raise ValueError("cov, std: expected one of the two (full or diagonal covariance); got both")
        self.register_buffer("mean", m)
        self.diagonal = cov is None
        if cov is None:
            self.register_buffer("std", self._std(m, 1.0 if std is None else std))
        else:
            self.register_buffer("scale_tril", self._cholesky(m, cov))
        self.space = Reals(tuple(m.shape))

    @staticmethod
    def _std(m: Tensor, std: Tensor | float) -> Tensor:
        if isinstance(std, Tensor):
            if std.shape != m.shape:
                raise ValueError(f"std: expected a number or shape {tuple(m.shape)}; got {tuple(std.shape)}")
            if not bool(torch.isfinite(std).all()) or not bool((std > 0).all()):
                raise ValueError(f"std: expected finite entries > 0; got min {float(std.min()):.4g}")
            return std.detach().to(m.dtype).clone()
        return torch.full_like(m, check_positive(std, "std"))

    @staticmethod
    def _cholesky(m: Tensor, cov: Tensor | float) -> Tensor:
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
            return torch.linalg.cholesky(c)
        except RuntimeError:
            raise ValueError(f"cov: expected a positive definite matrix; Cholesky failed for {c.tolist()}") from None

    @classmethod
    def fit(cls, x: Tensor, *, scale: float = 1.0, diagonal: bool = False, min_std: float = 1e-3) -> Gaussian:
        """Moments of data: ``x: (N, D)`` for the full form, ``(N, *event)`` with ``diagonal``; ``N >= 2``.

        Full: the sample covariance times ``scale**2`` (``scale > 1`` widens NCE noise). Diagonal:
        per-coordinate standard deviations, at least ``min_std``, times ``scale``.
        """
        check_tensor(x, "x", floating=True)
        if x.dim() < 2 or x.shape[0] < 2 or (not diagonal and x.dim() != 2):
            raise ValueError(f"x: expected shape {'(N, *event)' if diagonal else '(N, D)'} with N >= 2; "
                             f"got {tuple(x.shape)}")
        check_finite(x, "x")
        s = check_positive(scale, "scale")
        x = x.detach()
        if diagonal:
            return Gaussian(x.mean(0), std=s * x.std(0).clamp(min=check_positive(min_std, "min_std")))
        c = torch.cov(x.T).reshape(x.shape[1], x.shape[1])
        return Gaussian(x.mean(0), s * s * c)

    @property
    def event_shape(self) -> tuple[int, ...]:
        return tuple(self.mean.shape)

    @property
    def covariance(self) -> Tensor:
        """:math:`\\Sigma`, ``(D, D)`` (for a diagonal Gaussian: of the flattened event)."""
        if self.diagonal:
            return torch.diag_embed(self.std.flatten() ** 2)
        return self.scale_tril @ self.scale_tril.T

    def rsample(self, n: int, generator: torch.Generator | None = None) -> Tensor:
        """``n`` reparameterised draws ``(n, *event)``: :math:`\\mu + L\\varepsilon`, differentiable in the parameters."""
        check_int(n, "n", minimum=1)
        eps = torch.randn((n, *self.mean.shape), generator=generator, device=self.mean.device, dtype=self.mean.dtype)
        if self.diagonal:
            return self.mean + self.std * eps
        return self.mean + eps @ self.scale_tril.T

    def sample(self, n: int, generator: torch.Generator | None = None) -> Tensor:
        """``n`` draws ``(n, *event)`` (detached)."""
        with torch.no_grad():
            return self.rsample(n, generator)

    def log_prob(self, x: Tensor) -> Tensor:
        """``log q(x)``, ``(B,)``, differentiable in ``x`` and the parameters."""
        check_event(x, self.event_shape)
        if self.diagonal:
            z = (x - self.mean) / self.std
            log_norm = torch.log(self.std.double()).sum() + 0.5 * self.mean.numel() * math.log(2 * math.pi)
            return -0.5 * (z * z).flatten(1).sum(1) - log_norm.to(x.dtype)  # the constant in float64
        z = torch.linalg.solve_triangular(self.scale_tril, (x - self.mean).T, upper=False)
        D = self.mean.numel()
        half_log_det = torch.log(torch.diagonal(self.scale_tril)).sum()
        return -0.5 * (z * z).sum(0) - half_log_det - 0.5 * D * math.log(2 * math.pi)

    def log_prob_and_grad(self, x: Tensor) -> tuple[Tensor, Tensor]:
        r"""Detached ``log q(x)`` ``(B,)`` and :math:`\nabla_x \log q = -\Sigma^{-1}(x - \mu)`."""
        with torch.no_grad():
            lp = self.log_prob(x)
            if self.diagonal:
                return lp, -(x - self.mean) / self.std**2
            L = self.scale_tril
            z = torch.linalg.solve_triangular(L, (x - self.mean).T, upper=False)
            return lp, -torch.linalg.solve_triangular(L.T, z, upper=True).T

    def entropy(self) -> Tensor:
        r""":math:`\tfrac D2 (1 + \log 2\pi) + \tfrac12 \log\det\Sigma`, a 0-d tensor."""
        D = self.mean.numel()
        log_scale = torch.log(self.std).sum() if self.diagonal else torch.log(torch.diagonal(self.scale_tril)).sum()
        return 0.5 * D * (1.0 + math.log(2 * math.pi)) + log_scale

    def to_torch(self) -> Any:
        """The same law as a ``torch.distributions`` object (its event = this event)."""
        if self.diagonal:
            return torch.distributions.Independent(torch.distributions.Normal(self.mean, self.std), self.mean.dim())
        return torch.distributions.MultivariateNormal(self.mean, scale_tril=self.scale_tril)

    def extra_repr(self) -> str:
        return f"event_shape={self.event_shape}, {'diagonal' if self.diagonal else 'full'}"
