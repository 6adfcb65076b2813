r"""MCMC diagnostics: autocorrelation, effective sample size, split R-hat, MCMC means.

Chains are tensors shaped ``(S, C)`` or ``(S, C, D)``: ``S`` draws (time
first, as :meth:`ebms.samplers.Sampler.run` stacks them), ``C`` chains and
optionally ``D`` scalar quantities diagnosed separately. Results are tensors of
shape ``()`` or ``(D,)``; arithmetic is float64 and results keep the input's
floating dtype (float64 for integer input).

* :func:`effective_sample_size` — multi-chain ESS with Geyer's initial
  positive and monotone sequence:
  :math:`\mathrm{ESS} = SC/\hat\tau`, :math:`\hat\tau = -1 + 2\sum_{k} P_k`,
  :math:`P_k = \hat\rho_{2k} + \hat\rho_{2k+1}` summed while positive and
  made non-increasing, where :math:`\hat\rho_t = 1 - (W - \bar\gamma_t)/\widehat{\mathrm{var}}^+`
  pools the per-chain autocovariances :math:`\gamma_t` with the between-chain
  variance, so chains that disagree get a low ESS (Geyer, 1992; Vehtari et
  al., 2021, §3.2).
* :func:`split_rhat` — potential scale reduction on chains split in half,
  rank-normalised and folded by default (Vehtari et al., 2021, §4). Values
  above 1.01 mean the chains have not mixed.
* :func:`mcmc_mean` — an :class:`~ebms.estimators.Estimate` of a mean with
  standard error :math:`\sqrt{\hat\sigma^2/\mathrm{ESS}}`.

Distrust an ESS from a handful of draws per chain or when R-hat > 1.01: both
assume every chain has reached the target (discard burn-in first).

References:
    Geyer (1992), "Practical Markov chain Monte Carlo", Statistical Science 7(4).
    Vehtari, Gelman, Simpson, Carpenter & Bürkner (2021), "Rank-normalization,
    folding, and localization: an improved R-hat for assessing convergence of
    MCMC", Bayesian Analysis 16(2).
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from ebms._checks import check_finite, check_tensor
from ebms.estimators._base import Estimate

__all__ = ["autocorrelation", "effective_sample_size", "mcmc_mean", "split_rhat"]

_MIN_DRAWS = 4


def _prepare(chains: Tensor, name: str = "chains") -> tuple[Tensor, torch.dtype, bool]:
    """Validate and return ``(x: float64 (S, C, D), out dtype, input was 2-D)``."""
    check_tensor(chains, name)
    if chains.dtype == torch.bool or chains.is_complex():
        raise TypeError(f"{name}: expected a real floating or integer tensor; got dtype {chains.dtype}")
    if chains.dim() not in (2, 3):
        raise ValueError(
            f"{name}: expected shape (S, C) or (S, C, D) with S draws and C chains; got {tuple(chains.shape)}"
        )
    if chains.shape[0] < _MIN_DRAWS or 0 in chains.shape:
        raise ValueError(
            f"{name}: expected at least {_MIN_DRAWS} draws per chain and non-empty C, D; "
            f"got shape {tuple(chains.shape)}"
        )
    check_finite(chains, name)
    out_dtype = chains.dtype if chains.is_floating_point() else torch.float64
    x = chains.detach().to(torch.float64)
    was_2d = x.dim() == 2
    if was_2d:
        x = x.unsqueeze(-1)
    return x, out_dtype, was_2d


def _finish(v: Tensor, dtype: torch.dtype, was_2d: bool) -> Tensor:
    return (v.squeeze(-1) if was_2d else v).to(dtype)


def _autocovariance(x: Tensor) -> Tensor:
    """Biased per-chain autocovariance (divisor ``S``) at lags ``0..S-1``: ``(S, C, D)``."""
    s = x.shape[0]
    xc = x - x.mean(0, keepdim=True)
    nfft = 1 << (2 * s - 1).bit_length()  # >= 2S: no circular wrap-around
    f = torch.fft.rfft(xc, n=nfft, dim=0)
    return torch.fft.irfft(f * f.conj(), n=nfft, dim=0)[:s] / s


#: deviations below this many float64 ulps of the data's magnitude are rounding, not variation.
_ROUNDING_ULPS = 64.0


def _zero_variance(var: Tensor, x: Tensor) -> Tensor:
    """``var`` is zero up to float64 rounding of the data's scale.

    Equal draws leave deviations from their computed mean of a few ulps of ``max |x|``; the cut is
    ``(64 eps max|x|)^2``. (A cut of ``(1e-10 max|x|)^2`` called draws around ``1e6`` with a spread
    of ``1e-5``, 45,000 ulps, constant, so :func:`mcmc_mean` reported a standard error of 0.)
    """
    scale = x.abs().amax(dim=0).clamp_min(1e-300)
    while scale.dim() > var.dim():
        scale = scale.amax(dim=0)
    return var <= (_ROUNDING_ULPS * torch.finfo(torch.float64).eps * scale) ** 2


def autocorrelation(chains: Tensor) -> Tensor:
    r"""Per-chain autocorrelation :math:`\hat\rho_t = \hat\gamma_t / \hat\gamma_0`, lags ``0..S-1``.

    Uses the biased autocovariance (divisor ``S``, FFT, ``O(S log S)``), which
    keeps the sequence positive semi-definite.

    Args:
        chains: ``(S, C)`` or ``(S, C, D)``, ``S >= 4``.

    Returns:
        Same shape as ``chains``; lag 0 is 1.

    Raises:
        ValueError: a chain is constant (autocorrelation undefined).
    """
    x, dtype, was_2d = _prepare(chains)
    acov = _autocovariance(x)
    zero = _zero_variance(acov[0], x)
    if bool(zero.any()):
        c, d = (int(i) for i in zero.nonzero()[0])
        raise ValueError(
            f"chains: expected every chain to vary; chain {c}, quantity {d} is constant "
            "(autocorrelation undefined)"
        )
    return _finish(acov / acov[:1], dtype, was_2d)


def effective_sample_size(chains: Tensor) -> Tensor:
    r"""Multi-chain effective sample size for the mean (Geyer's initial monotone sequence).

    :math:`\mathrm{ESS} = SC/\hat\tau` (module docstring). ``ESS ≈ SC`` for
    independent draws; it can exceed ``SC`` for antithetic chains and is
    capped at :math:`SC\max(1, \log_{10} SC)`.

    Args:
        chains: ``(S, C)`` or ``(S, C, D)``, ``S >= 4``.

    Returns:
        ESS, shape ``()`` or ``(D,)``.

    Raises:
        ValueError: all draws of a quantity are equal (ESS undefined).
    """
    x, dtype, was_2d = _prepare(chains)
    s, c, _ = x.shape
    acov = _autocovariance(x)  # (S, C, D)
    w = acov[0].mean(0) * s / (s - 1)  # mean within-chain variance (D,)
    var_plus = w * (s - 1) / s
    if c > 1:
        var_plus = var_plus + x.mean(0).var(0)  # + between-chain variance B/S
    zero = _zero_variance(var_plus, x)
    if bool(zero.any()):
        raise ValueError(
            f"chains: expected draws that vary; quantity {int(zero.nonzero()[0, 0])} is constant "
            "across all draws and chains (ESS undefined)"
        )
    rho = 1.0 - (w - acov.mean(1)) / var_plus  # (S, D)
    rho[0] = 1.0
    k = s // 2
    pairs = rho[: 2 * k].reshape(k, 2, -1).sum(1)  # P_k = rho_2k + rho_2k+1, (K, D)
    positive = torch.cumprod((pairs > 0).to(pairs.dtype), dim=0)  # initial positive sequence
    monotone = torch.cummin(pairs, dim=0).values  # initial monotone sequence
    tau = -1.0 + 2.0 * (positive * monotone).sum(0)
    n = float(s * c)
    tau = tau.clamp_min(1.0 / max(1.0, math.log10(n)))
    return _finish(n / tau, dtype, was_2d)


def _average_ranks(v: Tensor) -> Tensor:
    """Ranks ``1..N`` of each column of ``v: (N, D)``, ties given their average rank."""
    n, d = v.shape
    sorted_v, order = torch.sort(v, dim=0)
    new_group = torch.ones_like(sorted_v, dtype=torch.bool)
    new_group[1:] = sorted_v[1:] != sorted_v[:-1]
    group = torch.cumsum(new_group.long(), dim=0) - 1 + n * torch.arange(d, device=v.device)  # (N, D)
    pos = torch.arange(1, n + 1, dtype=v.dtype, device=v.device).expand(d, n).T
    avg = torch.zeros(n * d, dtype=v.dtype, device=v.device)
    avg = avg.scatter_reduce(0, group.reshape(-1), pos.reshape(-1), reduce="mean", include_self=False)
    ranks = torch.empty_like(v)
    ranks.scatter_(0, order, avg[group])
    return ranks


def _rank_normalize(x: Tensor) -> Tensor:
    """Normal scores of the pooled ranks (Blom offset), same shape as ``x: (S, C, D)``."""
    s, c, d = x.shape
    n = s * c
    r = _average_ranks(x.reshape(n, d))
    return torch.special.ndtri((r - 0.375) / (n + 0.25)).reshape(s, c, d)


def _rhat(x: Tensor) -> Tensor:
    """Classic R-hat of ``x: (S, C, D)``: ``sqrt(var_plus / W)``; ``inf`` if only W is 0."""
    s = x.shape[0]
    w = x.var(0).mean(0)
    var_plus = w * (s - 1) / s + x.mean(0).var(0)
    if bool(_zero_variance(var_plus, x).any()):
        d = int(_zero_variance(var_plus, x).nonzero()[0, 0])
        raise ValueError(
            f"chains: expected draws that vary; quantity {d} is constant across all draws and chains "
            "(R-hat undefined)"
        )
    return torch.where(w > 0, torch.sqrt(var_plus / w.clamp_min(1e-300)), torch.full_like(w, float("inf")))


def split_rhat(chains: Tensor, *, rank_normalize: bool = True) -> Tensor:
    r"""Split R-hat: every chain cut into two halves, then the potential scale reduction.

    :math:`\hat R = \sqrt{\widehat{\mathrm{var}}^+ / W}` with
    :math:`\widehat{\mathrm{var}}^+ = \tfrac{S'-1}{S'} W + B/S'` over the
    ``2C`` half-chains of length ``S' = ⌊S/2⌋`` (an odd middle draw is
    dropped). With ``rank_normalize`` (default) it is the maximum of the
    value on rank-normalised draws and on rank-normalised folded draws
    :math:`|x - \mathrm{median}|`, which also catches chains that differ in
    scale or have heavy tails (Vehtari et al., 2021). ``≈ 1`` when mixed; the
    recommended threshold is 1.01.

    Args:
        chains: ``(S, C)`` or ``(S, C, D)``, ``S >= 4``.
        rank_normalize: use the rank-normalised, folded version.

    Returns:
        R-hat, shape ``()`` or ``(D,)``; ``inf`` when every half-chain is
        constant but they disagree.

    Raises:
        ValueError: all draws of a quantity are equal (R-hat undefined).
    """
    x, dtype, was_2d = _prepare(chains)
    s = x.shape[0]
    h = s // 2
    halves = torch.cat([x[:h], x[s - h :]], dim=1)  # (S', 2C, D)
    if not rank_normalize:
        return _finish(_rhat(halves), dtype, was_2d)
    bulk = _rhat(_rank_normalize(halves))
    med = halves.reshape(-1, halves.shape[-1]).median(dim=0).values
    folded = _rhat(_rank_normalize((halves - med).abs()))
    return _finish(torch.maximum(bulk, folded), dtype, was_2d)


def mcmc_mean(chains: Tensor) -> Estimate:
    r"""Mean of a scalar quantity over all draws, with an ESS-based standard error.

    :math:`\hat\mu = \frac{1}{SC}\sum x`, :math:`\mathrm{se} = \sqrt{\hat\sigma^2 / \mathrm{ESS}}`
    with :math:`\hat\sigma^2` the pooled sample variance and ESS from
    :func:`effective_sample_size` (the MCMC standard error; Geyer, 1992).
    When every draw is equal the standard error is 0 and ``ess`` is ``None``.

    Args:
        chains: ``(S, C)`` draws of one scalar quantity, ``S >= 4``. For a
            vector quantity call it once per component (``chains[..., d]``).

    Returns:
        :class:`~ebms.estimators.Estimate` with ``estimate``, ``stderr``,
        ``ess`` and ``settings={"draws": S, "chains": C, "split_rhat": R}``
        (``R`` is ``None`` for constant draws).
    """
    check_tensor(chains, "chains")
    if chains.dim() != 2:
        raise ValueError(
            f"chains: expected shape (S, C) for a scalar quantity (index a vector quantity as "
            f"chains[..., d]); got {tuple(chains.shape)}"
        )
    x, _, _ = _prepare(chains)
    s, c, _ = x.shape
    mean = float(x.mean())
    var = float(x.var())
    settings: dict[str, object] = {"draws": s, "chains": c, "split_rhat": None}
    if _zero_variance(x.reshape(-1).var(), x.reshape(-1, 1, 1)).item():
        return Estimate(estimate=mean, stderr=0.0, ess=None, settings=settings)
    ess = float(effective_sample_size(x[..., 0]))
    settings["split_rhat"] = float(split_rhat(x[..., 0]))
    return Estimate(estimate=mean, stderr=math.sqrt(var / ess), ess=ess, settings=settings)
