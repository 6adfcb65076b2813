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

The proposal is any normalised model of :mod:`ebms.distributions` (or any object with
``sample(n, *, generator)`` and ``log_prob(x) -> (B,)``; a ``torch.distributions`` law is
wrapped): e.g. :class:`~ebms.distributions.IndependentBernoulli`,
:class:`~ebms.distributions.IndependentCategorical`, :class:`~ebms.distributions.Gaussian`,
an :class:`~ebms.distributions.NGram` for an energy over :class:`~ebms.sequences.Sequences`.
The factorised proposals once defined here (``BernoulliBase``, ``CategoricalBase``,
``GaussianBase``) moved to :mod:`ebms.distributions`; the names still import from here.

Reference: Neal (2001), "Annealed importance sampling", Statistics and Computing 11 (its §2 on
simple importance sampling); Kish (1965), "Survey Sampling" (effective sample size).
"""

from __future__ import annotations

import math
from typing import Any

import torch
from torch import Tensor

from ebms._checks import check_energy_output, check_int, check_tensor
from ebms._progress import progress_bar
from ebms.distributions import Gaussian, IndependentBernoulli, IndependentCategorical, as_distribution
from ebms.energy import EnergyLike
from ebms.estimators._base import Estimate
from ebms.estimators.likelihood import _in_energy_dtype
from ebms.sequences import Sequences
from ebms.spaces import Categorical

__all__ = [
    "BernoulliBase",
    "CategoricalBase",
    "GaussianBase",
    "importance_ess",
    "importance_log_partition",
    "importance_log_weights",
    "log_mean_weight",
]

#: Moved to :class:`ebms.distributions.IndependentBernoulli` (same constructor, ``from_data`` and methods).
BernoulliBase = IndependentBernoulli


class GaussianBase(Gaussian):
    """Moved to :class:`ebms.distributions.Gaussian` (its diagonal form); this name keeps ``(mean, std=1.0)``."""

    def __init__(self, mean: Tensor, std: float | Tensor = 1.0) -> None:
        super().__init__(mean, std=std)

    @classmethod
    def from_data(cls, x: Tensor, *, min_std: float = 1e-3) -> Gaussian:
        """``Gaussian.fit(x, diagonal=True, min_std=min_std)``: per-coordinate moments of ``x: (B, *event)``."""
        return Gaussian.fit(x, diagonal=True, min_std=min_std)


class CategoricalBase(IndependentCategorical):
    """Moved to :class:`ebms.distributions.IndependentCategorical`; this name keeps ``(logits, *, space)`` for
    one-hot sites, ``logits: (*sites, K)``."""

    def __init__(self, logits: Tensor, *, space: Categorical | None = None) -> None:
        check_tensor(logits, "logits", floating=True, min_dim=2)
        space = Categorical(tuple(logits.shape[:-1]), logits.shape[-1]) if space is None else space
        if not isinstance(space, Categorical):
            raise TypeError(f"space: expected ebms.spaces.Categorical; got {type(space).__name__}")
        if space.event_shape != tuple(logits.shape):
            raise ValueError(f"logits: expected the space's shape {space.event_shape}; got {tuple(logits.shape)}")
        super().__init__(space, logits)

    @classmethod
    def from_data(cls, x: Tensor, *, smoothing: float = 1.0) -> IndependentCategorical:
        """Smoothed site frequencies of one-hot data ``x: (B, *sites, K)``."""
        check_tensor(x, "x", floating=True, min_dim=3)
        return IndependentCategorical(Categorical(tuple(x.shape[1:-1]), x.shape[-1])).fit(x, pseudocount=smoothing)


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


def importance_log_weights(
    energy: EnergyLike,
    proposal: Any,
    n_samples: int,
    *,
    generator: torch.Generator | None = None,
    batch_size: int = 1 << 14,
    progress: bool = False,
) -> Tensor:
    r"""Log importance weights :math:`-E(x_i) - \log q(x_i)` of ``n_samples`` proposal draws, ``(n,)`` float64.

    Draws come in batches of ``batch_size`` (one ``proposal.sample`` and one energy call each);
    ``progress``: a progress bar over the batches. Float draws in another dtype than the energy's
    parameters reach the energy cast to theirs (``log q`` is computed on the draws as drawn).
    """
    proposal = as_distribution(proposal, "proposal")
    check_int(n_samples, "n_samples", minimum=2)
    check_int(batch_size, "batch_size", minimum=1)
    out = []
    with torch.no_grad():
        starts = range(0, n_samples, batch_size)
        for start in progress_bar(starts, desc="importance", enabled=progress, leave=False, unit="batch"):
            b = min(batch_size, n_samples - start)
            x = proposal.sample(b, generator=generator)
            rows = x.shape[0] if isinstance(x, Tensor) else x.batch_size if isinstance(x, Sequences) else None
            if rows != b:
                got = tuple(x.shape) if isinstance(x, Tensor) else f"{rows} sequences" if rows else type(x).__name__
                raise ValueError(f"proposal.sample({b}): expected a tensor or Sequences with {b} rows; got {got}")
            e = check_energy_output(energy(_in_energy_dtype(energy, x) if isinstance(x, Tensor) else x), b)
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
    progress: bool = False,
) -> Estimate:
    r"""Importance-sampling estimate of :math:`\log Z` for ``p ∝ exp(-E)`` (module docstring).

    Args:
        energy: ``E(x) -> (B,)`` on the proposal's draws.
        proposal: normalised ``q`` following :class:`ebms.distributions.NormalisedModel` (e.g.
            :class:`~ebms.distributions.IndependentBernoulli`, :class:`~ebms.distributions.Gaussian`,
            a fitted flow, a ``torch.distributions`` law); its draws may be tensors or
            :class:`~ebms.sequences.Sequences`, whatever ``energy`` takes.
        n_samples: number of draws ``n >= 2``.
        generator: the random source of the draws.
        batch_size: draws per energy call.
        progress: show a progress bar over the batches.

    Returns:
        :class:`Estimate` with ``stderr`` (delta method), ``ess`` (Kish) and ``settings``. With
        ``q = p`` exactly every weight equals ``Z``: stderr 0 and ess ``n``.

    Cost: ``n`` energy and proposal evaluations; memory ``O(batch_size)`` plus ``n`` float64 weights.

    Example:
        >>> import math, torch
        >>> from ebms.energy import from_fn
        >>> from ebms.distributions import Gaussian
        >>> from ebms.estimators.importance import importance_log_partition
        >>> e = from_fn(lambda x: 0.5 * (x ** 2).sum(-1))
        >>> q = Gaussian(torch.zeros(2), std=1.5)
        >>> est = importance_log_partition(e, q, 4000, generator=torch.Generator().manual_seed(0))
        >>> abs(est.estimate - math.log(2 * math.pi)) < 4 * est.stderr
        True
    """
    lw = importance_log_weights(energy, proposal, n_samples, generator=generator, batch_size=batch_size,
                              progress=progress)
    log_z, stderr, ess = log_mean_weight(lw, "log weights -E(x) - log q(x)")
    settings = {"method": "importance", "n_samples": n_samples, "batch_size": batch_size,
                "proposal": type(proposal).__name__}
    return Estimate(estimate=log_z, stderr=stderr, ess=ess, settings=settings)
