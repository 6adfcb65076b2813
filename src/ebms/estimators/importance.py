r"""Importance-sampling estimates of :math:`\log Z`, weight diagnostics, and simple proposals.

With a normalised proposal :math:`q` and :math:`n` draws :math:`x_i \sim q`,

.. math::  w_i = \frac{\exp(-E(x_i))}{q(x_i)}, \qquad
           \hat Z = \frac1n \sum_i w_i, \qquad
           \log \hat Z = \operatorname{logsumexp}_i(-E(x_i) - \log q(x_i)) - \log n .

:math:`\hat Z` is unbiased, so :math:`\log \hat Z` is biased *low* (Jensen) and
:math:`P(\log\hat Z > \log Z + t) \le e^{-t}` (Markov): a stochastic lower bound.

Uncertainty. ``stderr`` is the delta-method standard error
:math:`\widehat{\mathrm{sd}}(w) / (\sqrt n\, \bar w)`; ``ess`` is the Kish effective sample
size :math:`(\sum w)^2 / \sum w^2`. Distrust the estimate when ``ess`` is a small fraction of
``n``: heavy-tailed weights make both the estimate and its ``stderr`` too small (the missing mass
is where the proposal rarely goes). All weight arithmetic is in float64.

The proposals (also the base distributions of :mod:`ebms.estimators.ais`) are factorised:
:class:`BernoulliBase` (binary or spin sites), :class:`CategoricalBase` (one-hot sites) and
:class:`GaussianBase` (continuous). Each has ``sample(n, generator=)``, ``log_prob(x) -> (B,)``,
``log_prob_and_grad(x)`` and ``log_partition = 0.0`` (they are normalised).

Reference: Neal (2001), "Annealed importance sampling", Statistics and Computing 11 (its §2 on
simple importance sampling); Kish (1965), "Survey Sampling" (effective sample size).
"""

from __future__ import annotations

import math
from typing import Any

import torch
from torch import Tensor

from ebms._checks import check_finite, check_int, check_positive, check_tensor
from ebms._numerics import softplus
from ebms.energy import EnergyLike, evaluate
from ebms.estimators._base import Estimate
from ebms.samplers._discrete import sample_categorical
from ebms.spaces import Binary, Categorical, Spins

__all__ = [
    "BernoulliBase",
    "CategoricalBase",
    "GaussianBase",
    "importance_ess",
    "importance_log_partition",
    "importance_log_weights",
    "log_mean_weight",
]


def log_mean_weight(log_weights: Tensor, name: str = "log_weights") -> tuple[float, float, float]:
    r"""Summary of importance weights given as logs: ``(log mean w, stderr of it, ESS)``.

    ``log_weights: (n,)``, ``n >= 2``; entries may be ``-inf`` (zero weight) but not NaN or
    ``+inf``, and at least one must be finite. The stderr is the delta method on
    :math:`\tilde w = \exp(\log w - \max \log w)`: :math:`\mathrm{sd}(\tilde w)/(\sqrt n\,\overline{\tilde w})`
    (sample sd with ``n - 1``). One host sync.
    """
    check_tensor(log_weights, name, floating=True)
    if log_weights.dim() != 1 or log_weights.shape[0] < 2:
        raise ValueError(f"{name}: expected shape (n,) with n >= 2; got {tuple(log_weights.shape)}")
    lw = log_weights.detach().double()
    n_nan = int(torch.isnan(lw).sum())
    n_pinf = int((lw == math.inf).sum())
    if n_nan or n_pinf:
        raise ValueError(f"{name}: expected finite values or -inf; got {n_nan} NaN and {n_pinf} +inf entries")
    m = lw.max()
    if not bool(torch.isfinite(m)):
        raise ValueError(f"{name}: expected at least one finite log weight; got all {lw.shape[0]} equal to -inf")
    n = lw.shape[0]
    w = torch.exp(lw - m)
    s = w.sum()
    mean = s / n
    var = ((w - mean) ** 2).sum() / (n - 1)
    stderr = torch.sqrt(var / n) / mean
    ess = s * s / (w * w).sum()
    return float(m + torch.log(mean)), float(stderr), float(ess)


def importance_ess(log_weights: Tensor) -> float:
    r"""Kish effective sample size :math:`(\sum_i w_i)^2 / \sum_i w_i^2` of weights given as logs.

    Equals ``n`` for equal weights and 1 when one weight dominates. ``log_weights: (n,)``, n >= 2.
    """
    return log_mean_weight(log_weights)[2]


def _check_proposal(proposal: Any) -> None:
    missing = [m for m in ("sample", "log_prob") if not callable(getattr(proposal, m, None))]
    if missing:
        raise TypeError(
            f"proposal: expected an object with sample(n, generator=) and log_prob(x) -> (B,); "
            f"{type(proposal).__name__} lacks {', '.join(missing)}"
        )


def importance_log_weights(
    energy: EnergyLike,
    proposal: Any,
    n_samples: int,
    *,
    generator: torch.Generator | None = None,
    batch_size: int = 1 << 14,
) -> Tensor:
    r"""Log importance weights :math:`-E(x_i) - \log q(x_i)` of ``n_samples`` proposal draws, ``(n,)`` float64.

    Draws come in batches of ``batch_size`` (one ``proposal.sample`` and one energy call each).
    """
    _check_proposal(proposal)
    check_int(n_samples, "n_samples", minimum=2)
    check_int(batch_size, "batch_size", minimum=1)
    out = []
    with torch.no_grad():
        for start in range(0, n_samples, batch_size):
            b = min(batch_size, n_samples - start)
            x = proposal.sample(b, generator=generator)
            if not isinstance(x, Tensor) or x.shape[0] != b:
                got = tuple(x.shape) if isinstance(x, Tensor) else type(x).__name__
                raise ValueError(f"proposal.sample({b}): expected a tensor with {b} rows; got {got}")
            e = evaluate(energy, x)
            lq = proposal.log_prob(x)
            if not isinstance(lq, Tensor) or tuple(lq.shape) != (b,):
                got = tuple(lq.shape) if isinstance(lq, Tensor) else type(lq).__name__
                raise ValueError(f"proposal.log_prob(x): expected shape ({b},); got {got}")
            out.append(-e.double() - lq.double())
    return torch.cat(out)


def importance_log_partition(
    energy: EnergyLike,
    proposal: Any,
    n_samples: int,
    *,
    generator: torch.Generator | None = None,
    batch_size: int = 1 << 14,
) -> Estimate:
    r"""Importance-sampling estimate of :math:`\log Z` for ``p ∝ exp(-E)`` (module docstring).

    Args:
        energy: ``E: (B, *event) -> (B,)``.
        proposal: normalised ``q`` with ``sample(n, generator=) -> (n, *event)`` and ``log_prob(x) -> (B,)``
            (e.g. :class:`BernoulliBase`, :class:`GaussianBase`, a fitted flow).
        n_samples: number of draws ``n >= 2``.
        generator: the random source of the draws.
        batch_size: draws per energy call.

    Returns:
        :class:`Estimate` with ``stderr`` (delta method), ``ess`` (Kish) and ``settings``. With
        ``q = p`` exactly every weight equals ``Z``: stderr 0 and ess ``n``.

    Cost: ``n`` energy and proposal evaluations; memory ``O(batch_size)`` plus ``n`` float64 weights.

    Example:
        >>> import math, torch
        >>> from ebms.energy import from_fn
        >>> from ebms.estimators.importance import GaussianBase, importance_log_partition
        >>> e = from_fn(lambda x: 0.5 * (x ** 2).sum(-1))
        >>> q = GaussianBase(torch.zeros(2), 1.5)
        >>> est = importance_log_partition(e, q, 4000, generator=torch.Generator().manual_seed(0))
        >>> abs(est.estimate - math.log(2 * math.pi)) < 4 * est.stderr
        True
    """
    lw = importance_log_weights(energy, proposal, n_samples, generator=generator, batch_size=batch_size)
    log_z, stderr, ess = log_mean_weight(lw, "log weights -E(x) - log q(x)")
    settings = {"method": "importance", "n_samples": n_samples, "batch_size": batch_size,
                "proposal": type(proposal).__name__}
    return Estimate(estimate=log_z, stderr=stderr, ess=ess, settings=settings)


# ---------------------------------------------------------------------------
# Factorised proposals / AIS base distributions
# ---------------------------------------------------------------------------


def _check_event(x: Tensor, shape: tuple[int, ...], name: str) -> None:
    if x.dim() != 1 + len(shape) or tuple(x.shape[1:]) != shape:
        raise ValueError(f"{name}: expected shape (B, {', '.join(map(str, shape))}); got {tuple(x.shape)}")


class BernoulliBase:
    r"""Independent two-valued sites: :math:`\log q(x) = \sum_i b_i \ell_i - \operatorname{softplus}(\ell_i)`.

    ``b_i = (x_i - low) / (high - low)`` is 1 at the space's high value (1 for :class:`~ebms.spaces.Binary`,
    +1 for :class:`~ebms.spaces.Spins`), so ``logits`` are those of the high value.

    Computed as :math:`\sum_i -b_i\operatorname{softplus}(-\ell_i) - (1 - b_i)\operatorname{softplus}(\ell_i)`
    (the same function, linear in ``b``, with input gradient :math:`\ell_i` per unit of ``b``): each
    term is a log-probability computed directly, so a site with a large logit contributes its tiny
    :math:`\log\sigma(\ell)` to full relative precision instead of the rounding residue of
    :math:`\ell - \operatorname{softplus}(\ell)`, and the softplus is the dtype-aware one of
    :func:`ebms._numerics.softplus` (exact to rounding in float64 too).

    Args:
        logits: ``(*sites)`` finite float tensor.
        space: :class:`~ebms.spaces.Binary` (default) or :class:`~ebms.spaces.Spins` with ``event_shape``
            equal to ``logits.shape``.
    """

    log_partition = 0.0

    def __init__(self, logits: Tensor, *, space: Binary | Spins | None = None) -> None:
        check_tensor(logits, "logits", floating=True, min_dim=1)
        check_finite(logits, "logits")
        space = Binary(tuple(logits.shape)) if space is None else space
        if not isinstance(space, (Binary, Spins)):
            raise TypeError(f"space: expected ebms.spaces.Binary or Spins; got {type(space).__name__}")
        if space.event_shape != tuple(logits.shape):
            raise ValueError(f"logits: expected the space's shape {space.event_shape}; got {tuple(logits.shape)}")
        self.logits, self.space = logits.detach(), space
        self._scale = space.high - space.low

    @classmethod
    def from_data(cls, x: Tensor, *, smoothing: float = 1.0, space: Binary | Spins | None = None) -> BernoulliBase:
        """Site marginals of data ``x: (B, *sites)``, with ``smoothing`` pseudo-counts per value (> 0)."""
        space = Binary(tuple(x.shape[1:])) if space is None else space
        space.validate(x, "x")
        a = check_positive(smoothing, "smoothing")
        b = (x.double() - space.low) / (space.high - space.low)
        p = (b.sum(0) + a) / (x.shape[0] + 2 * a)
        return cls((torch.log(p) - torch.log1p(-p)).to(x.dtype), space=space)

    def sample(self, n: int, generator: torch.Generator | None = None) -> Tensor:
        """``n`` independent draws, ``(n, *sites)``."""
        check_int(n, "n", minimum=1)
        u = torch.rand((n, *self.logits.shape), generator=generator, device=self.logits.device, dtype=self.logits.dtype)
        return self.space.low + self._scale * (u < torch.sigmoid(self.logits)).to(self.logits.dtype)

    def log_prob(self, x: Tensor) -> Tensor:
        """``log q(x)``, ``(B,)`` (differentiable in ``x``)."""
        _check_event(x, self.space.event_shape, "x")
        b = (x - self.space.low) / self._scale
        log_high, log_low = -softplus(-self.logits), -softplus(self.logits)
        return (b * log_high + (1 - b) * log_low).flatten(1).sum(1)

    def log_prob_and_grad(self, x: Tensor) -> tuple[Tensor, Tensor]:
        """``log q(x)`` ``(B,)`` and its (constant) input gradient ``logits / (high - low)``."""
        return self.log_prob(x).detach(), (self.logits / self._scale).expand_as(x)

    def site_logits(self) -> Tensor:
        """Per-site category logits ``(N, 2)`` (category 0 = low, 1 = high)."""
        flat = self.logits.flatten()
        return torch.stack([torch.zeros_like(flat), flat], 1)


class CategoricalBase:
    r"""Independent ``K``-valued one-hot sites: :math:`\log q(x) = \sum_{i,k} x_{ik}\,\log\operatorname{softmax}(\ell_i)_k`.

    Args:
        logits: ``(*sites, K)`` finite float tensor.
        space: a :class:`~ebms.spaces.Categorical` with ``event_shape == logits.shape`` (default: built from it).
    """

    log_partition = 0.0

    def __init__(self, logits: Tensor, *, space: Categorical | None = None) -> None:
        check_tensor(logits, "logits", floating=True, min_dim=2)
        check_finite(logits, "logits")
        space = Categorical(tuple(logits.shape[:-1]), logits.shape[-1]) if space is None else space
        if not isinstance(space, Categorical):
            raise TypeError(f"space: expected ebms.spaces.Categorical; got {type(space).__name__}")
        if space.event_shape != tuple(logits.shape):
            raise ValueError(f"logits: expected the space's shape {space.event_shape}; got {tuple(logits.shape)}")
        self.space = space
        self.log_probs = torch.log_softmax(logits.detach(), -1)

    @classmethod
    def from_data(cls, x: Tensor, *, smoothing: float = 1.0) -> CategoricalBase:
        """Site marginals of one-hot data ``x: (B, *sites, K)`` with ``smoothing`` pseudo-counts per category."""
        check_tensor(x, "x", floating=True, min_dim=3)
        space = Categorical(tuple(x.shape[1:-1]), x.shape[-1])
        space.validate(x, "x")
        counts = x.double().sum(0) + check_positive(smoothing, "smoothing")
        return cls(torch.log(counts).to(x.dtype), space=space)

    def sample(self, n: int, generator: torch.Generator | None = None) -> Tensor:
        """``n`` independent draws, one-hot ``(n, *sites, K)``."""
        check_int(n, "n", minimum=1)
        N, K = self.space.num_sites, self.space.num_categories
        idx = sample_categorical(self.log_probs.reshape(1, N, K).expand(n, N, K), generator)
        return self.space.from_indices(idx, dtype=self.log_probs.dtype)

    def log_prob(self, x: Tensor) -> Tensor:
        """``log q(x)``, ``(B,)`` (differentiable in ``x``)."""
        _check_event(x, self.space.event_shape, "x")
        return (x * self.log_probs).flatten(1).sum(1)

    def log_prob_and_grad(self, x: Tensor) -> tuple[Tensor, Tensor]:
        """``log q(x)`` ``(B,)`` and its (constant) input gradient, the log-probabilities."""
        return self.log_prob(x).detach(), self.log_probs.expand_as(x)

    def site_logits(self) -> Tensor:
        """Per-site category logits ``(N, K)``."""
        return self.log_probs.reshape(self.space.num_sites, self.space.num_categories)


class GaussianBase:
    r"""Diagonal Gaussian :math:`\mathcal N(\mu, \operatorname{diag}\sigma^2)` on the event shape of ``mean``.

    Args:
        mean: ``(*event)`` float tensor.
        std: a positive number or a tensor of ``mean``'s shape (never broadcast otherwise).
    """

    log_partition = 0.0

    def __init__(self, mean: Tensor, std: float | Tensor = 1.0) -> None:
        check_tensor(mean, "mean", floating=True, min_dim=1)
        check_finite(mean, "mean")
        if isinstance(std, Tensor):
            if std.shape != mean.shape:
                raise ValueError(f"std: expected a number or shape {tuple(mean.shape)}; got {tuple(std.shape)}")
            if not bool(torch.isfinite(std).all()) or not bool((std > 0).all()):
                raise ValueError(f"std: expected finite entries > 0; got min {float(std.min()):.4g}")
            std_t = std.detach().to(mean.dtype)
        else:
            std_t = torch.full_like(mean, check_positive(std, "std"))
        self.mean, self.std = mean.detach(), std_t
        self._log_norm = float((torch.log(std_t.double()) + 0.5 * math.log(2 * math.pi)).sum())

    @classmethod
    def from_data(cls, x: Tensor, *, min_std: float = 1e-3) -> GaussianBase:
        """Per-coordinate mean and standard deviation (at least ``min_std``) of ``x: (B, *event)``, B >= 2."""
        check_tensor(x, "x", floating=True, min_dim=2)
        if x.shape[0] < 2:
            raise ValueError(f"x: expected at least 2 rows; got shape {tuple(x.shape)}")
        check_finite(x, "x")
        return cls(x.mean(0), x.std(0).clamp(min=check_positive(min_std, "min_std")))

    def sample(self, n: int, generator: torch.Generator | None = None) -> Tensor:
        """``n`` draws, ``(n, *event)``."""
        check_int(n, "n", minimum=1)
        z = torch.randn((n, *self.mean.shape), generator=generator, device=self.mean.device, dtype=self.mean.dtype)
        return self.mean + self.std * z

    def log_prob(self, x: Tensor) -> Tensor:
        """``log q(x)``, ``(B,)``."""
        _check_event(x, tuple(self.mean.shape), "x")
        z = (x - self.mean) / self.std
        return -0.5 * (z * z).flatten(1).sum(1) - self._log_norm

    def log_prob_and_grad(self, x: Tensor) -> tuple[Tensor, Tensor]:
        r"""``log q(x)`` ``(B,)`` and :math:`\nabla_x \log q = -(x - \mu)/\sigma^2`."""
        return self.log_prob(x).detach(), (-(x - self.mean) / self.std**2).detach()
