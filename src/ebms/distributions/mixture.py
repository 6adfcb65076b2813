"""A fixed Gaussian mixture: an energy with exact log-density and exact sampling."""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
from torch import Tensor

from ebms._checks import check_finite, check_int, check_shape, check_tensor
from ebms.distributions._base import Distribution
from ebms.energy import Energy

__all__ = ["GaussianMixture"]


class GaussianMixture(Energy, Distribution):
    r"""Fixed Gaussian mixture, :math:`E(x) = -\log \sum_k w_k \mathcal N(x; \mu_k, \Sigma_k)`.

    Normalised (``log Z = 0``), with exact sampling — the ground truth for
    sampler tests and for toy data sets that have a true density. It is both an
    :class:`~ebms.energy.Energy` (``forward`` gives ``E(x)``) and a member of the
    :class:`~ebms.distributions.Distribution` protocol, so it also serves as NCE noise or an
    importance proposal. (``ebms.nets.GaussianMixtureEnergy`` is the same class.)

    Args:
        means: ``(K, D)``.
        covariances: ``(K, D, D)``, or ``(K,)`` / a float for isotropic ``s^2 I``.
        weights: ``(K,)`` positive (normalised here); default uniform.
    """

    means: Tensor
    chol: Tensor
    log_weights: Tensor

    def __init__(
        self,
        means: Tensor | Sequence[Sequence[float]],
        covariances: Tensor | float | Sequence[float] = 1.0,
        weights: Tensor | Sequence[float] | None = None,
    ) -> None:
        super().__init__()
        mu = torch.as_tensor(means, dtype=torch.float32)
        check_tensor(mu, "means", floating=True)
        if mu.dim() != 2:
            raise ValueError(f"means: expected shape (K, D); got {tuple(mu.shape)}")
        K, D = mu.shape
        cov = torch.as_tensor(covariances, dtype=torch.float32)
        if cov.dim() == 0:
            cov = cov.expand(K)
        if cov.dim() == 1:
            check_shape(cov, (K,), "covariances")
            cov = cov[:, None, None] * torch.eye(D)
        check_shape(cov, (K, D, D), "covariances")
        w = torch.full((K,), 1.0 / K) if weights is None else torch.as_tensor(weights, dtype=torch.float32)
        check_shape(w, (K,), "weights")
        check_finite(w, "weights")
        if bool((w <= 0).any()):
            raise ValueError(f"weights: expected positive entries; got {w.tolist()}")
        try:
            chol = torch.linalg.cholesky(cov)
        except RuntimeError:
            raise ValueError("covariances: expected positive definite matrices; Cholesky failed") from None
        self.register_buffer("means", mu)
        self.register_buffer("chol", chol)
        self.register_buffer("log_weights", torch.log(w / w.sum()))

    @property
    def dim(self) -> int:
        return self.means.shape[1]

    def component_log_prob(self, x: Tensor) -> Tensor:
        """``log w_k + log N(x; mu_k, Sigma_k)``, shape ``(B, K)``."""
        d = x[:, None, :] - self.means  # (B, K, D)
        z = torch.linalg.solve_triangular(self.chol, d.unsqueeze(-1), upper=False).squeeze(-1)
        logdet = torch.log(torch.diagonal(self.chol, dim1=-2, dim2=-1)).sum(-1)  # (K,)
        D = self.dim
        return self.log_weights - 0.5 * (z * z).sum(-1) - logdet - 0.5 * D * math.log(2 * math.pi)

    def forward(self, x: Tensor) -> Tensor:
        return -torch.logsumexp(self.component_log_prob(x), dim=-1)

    def log_prob(self, x: Tensor) -> Tensor:
        """Normalised log-density ``(B,)``."""
        return -self(x)

    def sample(self, n: int, generator: torch.Generator | None = None) -> Tensor:
        """Exact draws ``(n, D)`` (``generator`` may be passed by keyword)."""
        check_int(n, "n", minimum=1)
        dev = self.means.device
        k = torch.multinomial(self.log_weights.exp(), n, replacement=True, generator=generator)
        eps = torch.randn(n, self.dim, generator=generator, device=dev, dtype=self.means.dtype)
        return self.means[k] + (self.chol[k] @ eps.unsqueeze(-1)).squeeze(-1)
