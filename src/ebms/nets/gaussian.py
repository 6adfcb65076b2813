r"""Closed-form energies: a learnable Gaussian and a fixed Gaussian mixture.

These are the exact references the test-suite and the toy data lean on:
their normalisers, moments and samples are known in closed form.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
from torch import Tensor, nn

from ebms._checks import check_int, check_shape
from ebms._numerics import softplus
from ebms._precision import full_precision
from ebms.distributions.mixture import GaussianMixture
from ebms.energy import Energy

__all__ = ["GaussianEnergy", "GaussianMixtureEnergy"]


def _working_dtype(*values: object) -> torch.dtype:
    """float64 if any of ``values`` is a float64 tensor, else float32 (the package default)."""
    if any(isinstance(v, Tensor) and v.dtype == torch.float64 for v in values):
        return torch.float64
    return torch.float32


class GaussianEnergy(Energy):
    r"""Quadratic energy :math:`E(x) = \tfrac12 (x-\mu)^\top P (x-\mu)`, ``P = L L^T``.

    ``p`` is :math:`\mathcal N(\mu, P^{-1})` and
    :math:`\log Z = \tfrac D2 \log 2\pi - \sum_i \log L_{ii}`. The precision is
    parametrised by its Cholesky factor ``L`` (lower triangular, diagonal kept
    positive through ``softplus``), so every parameter value is valid.

    The working dtype is float64 when ``mean`` or ``precision`` is a float64
    tensor and float32 otherwise (Python lists, float32 tensors, defaults);
    ``.to(torch.float64)`` converts later. The factor is computed in float64 and
    rounded to the working dtype, and the diagonal ``softplus`` is the dtype-aware
    :func:`ebms._numerics.softplus`, so a float64 energy and its ``log Z`` are
    exact to float64 rounding (torch's softplus would drop ``e^{-20}`` per
    diagonal entry above 20, i.e. precisions with diagonal above 400).

    Args:
        dim: ``D``.
        mean: initial mean ``(D,)`` (default zeros).
        precision: initial precision ``(D, D)``, symmetric positive definite
            (default identity).
        learnable: register mean and factor as parameters (else buffers).

    Shapes: ``x: (B, D)`` → ``(B,)``.
    """

    mean: Tensor
    raw_factor: Tensor

    def __init__(
        self,
        dim: int,
        *,
        mean: Tensor | Sequence[float] | None = None,
        precision: Tensor | None = None,
        learnable: bool = True,
    ) -> None:
        super().__init__()
        self.dim = check_int(dim, "dim", minimum=1)
        dtype = _working_dtype(mean, precision)
        mu = torch.zeros(dim, dtype=dtype) if mean is None else torch.as_tensor(mean, dtype=dtype).clone()
        check_shape(mu, (dim,), "mean")
        prec = torch.eye(dim, dtype=dtype) if precision is None else torch.as_tensor(precision, dtype=dtype)
        check_shape(prec, (dim, dim), "precision")
        if not torch.allclose(prec, prec.T, atol=1e-6):
            raise ValueError("precision: expected a symmetric matrix; got an asymmetric one")
        try:
            chol = torch.linalg.cholesky(prec.double()).to(dtype)
        except RuntimeError:
            raise ValueError("precision: expected a positive definite matrix; Cholesky failed") from None
        raw = chol.clone()
        d = torch.diagonal(chol)
        raw[range(dim), range(dim)] = d + torch.log(-torch.expm1(-d))  # softplus^{-1}
        if learnable:
            self.mean = nn.Parameter(mu)
            self.raw_factor = nn.Parameter(raw)
        else:
            self.register_buffer("mean", mu)
            self.register_buffer("raw_factor", raw)

    @property
    def factor(self) -> Tensor:
        """Cholesky factor ``L`` of the precision, ``(D, D)``."""
        low = torch.tril(self.raw_factor, -1)
        return low + torch.diag(softplus(torch.diagonal(self.raw_factor)))

    @property
    def precision(self) -> Tensor:
        """``P = L L^T``, ``(D, D)``."""
        L = self.factor
        return L @ L.T

    @property
    def covariance(self) -> Tensor:
        """``P^{-1}``, ``(D, D)``."""
        return torch.cholesky_inverse(self.factor)

    def log_partition(self) -> Tensor:
        r""":math:`\log Z`, 0-d tensor (differentiable)."""
        return 0.5 * self.dim * math.log(2 * math.pi) - torch.log(torch.diagonal(self.factor)).sum()

    def forward(self, x: Tensor) -> Tensor:
        z = (x - self.mean) @ self.factor
        return 0.5 * (z * z).sum(-1)

    @full_precision
    def energy_and_grad(self, x: Tensor) -> tuple[Tensor, Tensor]:
        with torch.no_grad():
            d = x - self.mean
            L = self.factor
            z = d @ L
            return 0.5 * (z * z).sum(-1), z @ L.T

    def log_prob(self, x: Tensor) -> Tensor:
        """Normalised log-density ``(B,)``."""
        return -self(x) - self.log_partition()


#: Moved to :class:`ebms.distributions.GaussianMixture` (a normalised model); this name stays for existing code.
GaussianMixtureEnergy = GaussianMixture
