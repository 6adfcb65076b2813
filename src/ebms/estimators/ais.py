r"""Annealed importance sampling (AIS), reverse AIS, and the bracket they give on :math:`\log Z`.

**Path protocol** (:class:`ebms.capabilities.AnnealingPath`). Any object with

* ``sample_base(n, generator=) -> x``: exact draws from :math:`p_0 = f_0 / Z_0`;
* ``base_log_partition``: :math:`\log Z_0` (a number, or a method returning one);
* ``log_density(x, beta) -> (B,)``: unnormalised :math:`\log f_\beta(x)` with :math:`f_1 = e^{-E}`;
* ``transition(x, beta, generator=) -> x``: a Markov step leaving :math:`f_\beta` invariant;
* optionally ``log_weight_increment(x, beta_from, beta_to) -> (B,)`` =
  :math:`\log f_{to}(x) - \log f_{from}(x)` (cheaper and more accurate than two ``log_density`` calls;
  :class:`ebms.capabilities.SupportsWeightIncrement`).

:class:`GeometricPath` builds one for any energy, base and sampler; models may supply a faster one
(e.g. an RBM's ``ais_path()``).

**Forward AIS** (Neal, 2001) with :math:`0 = \beta_0 \le \dots \le \beta_K = 1`: draw
:math:`x \sim p_0`; for :math:`k = 1..K`: :math:`\log w \mathrel{+}= \log f_{\beta_k}(x) - \log f_{\beta_{k-1}}(x)`,
then (for :math:`k < K`) move :math:`x` with the transition at :math:`\beta_k`. Then
:math:`\mathbb E[w] = Z_1 / Z_0` and

.. math::  \log \hat Z = \log Z_0 + \operatorname{logsumexp}_i \log w_i - \log n ,

a stochastic **lower** bound: :math:`\mathbb E[\log\hat Z] \le \log Z` and
:math:`P(\log\hat Z > \log Z + t) \le e^{-t}`.

**Reverse AIS** runs the same schedule backwards from target samples ``x`` (the bidirectional
Monte Carlo of Grosse, Ghahramani & Adams 2015; the reverse annealing of Burda, Grosse &
Salakhutdinov 2015): for :math:`k = K..1`: :math:`\log w \mathrel{+}= \log f_{\beta_{k-1}}(x) - \log f_{\beta_k}(x)`,
then (for :math:`k > 1`) move with the transition at :math:`\beta_{k-1}`. If ``x`` are exact target draws,
:math:`\mathbb E[w] = Z_0 / Z_1` and :math:`\log\hat Z_{rev} = \log Z_0 - (\operatorname{logsumexp}\log w - \log n)`
is a stochastic **upper** bound. With approximate samples (long chains, or data for a well-fit model)
the upper-bound guarantee holds only as far as they are exact.

**Uncertainty.** ``stderr`` is the delta method on the weights (see
:func:`ebms.estimators.importance.log_mean_weight`) and ``ess`` their Kish ESS. Both understate the
error when the weights are heavy-tailed (low ESS). The forward/reverse gap is the honest measure:
a wide gap means the schedule is too short or the kernel mixes too slowly.

**Results.** :func:`ais` and :func:`reverse_ais` return an :class:`AISResult` holding the
:class:`~ebms.estimators.Estimate` (``.estimate``), the float64 log weights and the final states;
:func:`ais_bracket` returns one :class:`~ebms.estimators.Estimate` whose ``lower``/``upper`` are the
two estimates, each widened by ``z`` standard errors.

Cost: ``n`` chains times ``K`` weight increments and ``K - 1`` transitions. No host sync inside
the temperature loop (betas are Python floats); weights are checked once at the end.

References:
    Neal (2001), "Annealed importance sampling", Statistics and Computing 11(2).
    Salakhutdinov & Murray (2008), "On the quantitative analysis of deep belief networks", ICML.
    Burda, Grosse & Salakhutdinov (2015), "Accurate and conservative estimates of MRF
    log-likelihood using reverse annealing", AISTATS.
    Grosse, Ghahramani & Adams (2015), "Sandwiching the marginal likelihood using bidirectional
    Monte Carlo", arXiv:1511.02543.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from ebms._checks import check_finite, check_int, check_positive, check_tensor
from ebms._progress import progress_bar
from ebms.capabilities import AnnealingPath, SupportsWeightIncrement
from ebms.estimators._base import Estimate
from ebms.estimators._ranks import gather_pieces, my_pieces, piece_generator
from ebms.estimators.importance import log_mean_weight
from ebms.estimators.paths import GeometricPath

__all__ = [
    "AISResult",
    "GeometricPath",
    "ais",
    "ais_across_ranks",
    "ais_bracket",
    "geometric_betas",
    "linear_betas",
    "reverse_ais",
    "salakhutdinov_betas",
    "sigmoid_betas",
    "validate_betas",
]


# ---------------------------------------------------------------------------
# Schedules: float64 tensors 0 = beta_0 <= ... <= beta_K = 1 (K + 1 values, K steps)
# ---------------------------------------------------------------------------


def validate_betas(betas: Sequence[float] | Tensor, name: str = "betas") -> tuple[float, ...]:
    """Check a schedule (1-D, >= 2 finite values, first 0, last 1, nondecreasing); return it as floats."""
    if isinstance(betas, Tensor):
        if betas.dim() != 1:
            raise ValueError(f"{name}: expected a 1-D schedule; got shape {tuple(betas.shape)}")
        values = tuple(float(b) for b in betas.detach().cpu().double().tolist())
    else:
        try:
            values = tuple(float(b) for b in betas)
        except (TypeError, ValueError):
            raise TypeError(f"{name}: expected a sequence of numbers or a 1-D tensor; got {betas!r}") from None
    if len(values) < 2:
        raise ValueError(f"{name}: expected at least 2 values (0 and 1); got {len(values)}")
    if not all(math.isfinite(b) for b in values):
        raise ValueError(f"{name}: expected finite values; got {sum(not math.isfinite(b) for b in values)} non-finite")
    if values[0] != 0.0 or values[-1] != 1.0:
        raise ValueError(f"{name}: expected to start at 0 and end at 1; got first {values[0]!r}, last {values[-1]!r}")
    drops = [k for k in range(1, len(values)) if values[k] < values[k - 1]]
    if drops:
        k = drops[0]
        raise ValueError(
            f"{name}: expected nondecreasing values; got {len(drops)} decrease(s), first at index {k}: "
            f"{values[k - 1]!r} -> {values[k]!r}"
        )
    return values


def linear_betas(n_steps: int) -> Tensor:
    """``n_steps + 1`` equally spaced values from 0 to 1 (float64)."""
    check_int(n_steps, "n_steps", minimum=1)
    return torch.linspace(0.0, 1.0, n_steps + 1, dtype=torch.float64)


def geometric_betas(n_steps: int, *, start: float = 1e-4) -> Tensor:
    """``0`` followed by ``n_steps`` geometrically spaced values from ``start`` to 1 (float64).

    Dense near 0, where the base dominates; suits targets far from the base (Neal, 2001).
    """
    check_int(n_steps, "n_steps", minimum=1)
    s = check_positive(start, "start")
    if s >= 1:
        raise ValueError(f"start: expected a number in (0, 1); got {start!r}")
    if n_steps == 1:
        return torch.tensor([0.0, 1.0], dtype=torch.float64)
    g = torch.logspace(math.log10(s), 0.0, n_steps, dtype=torch.float64)
    g[-1] = 1.0
    return torch.cat([torch.zeros(1, dtype=torch.float64), g])


def sigmoid_betas(n_steps: int, *, scale: float = 4.0) -> Tensor:
    r"""Sigmoid schedule (Grosse, Maddison & Salakhutdinov, 2013, "Annealing between distributions by
    averaging moments"): :math:`\beta_k \propto \sigma(\delta(2k/K - 1))`, rescaled to [0, 1], ``δ = scale``.

    Dense at both ends. ``n_steps + 1`` values (float64).
    """
    check_int(n_steps, "n_steps", minimum=1)
    d = check_positive(scale, "scale")
    s = torch.sigmoid(d * (2.0 * torch.arange(n_steps + 1, dtype=torch.float64) / n_steps - 1.0))
    b = (s - s[0]) / (s[-1] - s[0])
    b[0], b[-1] = 0.0, 1.0
    return b


def salakhutdinov_betas() -> Tensor:
    r"""The 14,500-step schedule behind the published MNIST RBM log-likelihoods (Salakhutdinov & Murray, 2008).

    Uniform steps of ``1e-3`` on [0, 0.5] (500 steps), ``1e-4`` on [0.5, 0.9] (4,000 steps) and ``1e-5``
    on [0.9, 1] (10,000 steps): 14,500 steps, i.e. 14,501 values with both endpoints and 14,499
    intermediate distributions. The authors' MATLAB concatenates the three ranges with their shared
    ends (0.5 and 0.9) repeated; a repeated beta adds a zero weight increment and one more transition,
    so it is dropped here.
    """
    parts = [
        torch.linspace(0.0, 0.5, 501, dtype=torch.float64),
        torch.linspace(0.5, 0.9, 4001, dtype=torch.float64)[1:],
        torch.linspace(0.9, 1.0, 10001, dtype=torch.float64)[1:],
    ]
    return torch.cat(parts)


@dataclass(frozen=True)
class AISResult:
    """Output of :func:`ais` / :func:`reverse_ais`.

    Attributes:
        estimate: the :math:`\\log Z` :class:`~ebms.estimators.Estimate` (``stderr`` by the delta
            method, ``ess`` of the weights, ``settings`` with ``method``, ``n_chains``, ``num_steps``
            (= number of temperatures after the base), ``base_log_partition``, ``path``).
        log_weights: per-chain log weights, float64 ``(n,)`` (forward: of :math:`Z_1/Z_0`; reverse: of
            :math:`Z_0/Z_1`).
        samples: final states ``(n, *event)`` (forward: importance-weighted draws of the target,
            weights ``exp(log_weights)``; reverse: the states after annealing down to the base).
        direction: ``"forward"`` or ``"reverse"``.
    """

    estimate: Estimate
    log_weights: Tensor
    samples: Tensor
    direction: str

    def __str__(self) -> str:
        return f"{self.direction} AIS log Z = {self.estimate} (ESS {self.estimate.ess:.1f} of {len(self.log_weights)})"


Increment = Callable[[Tensor, float, float], Tensor]


def _check_path(path: Any) -> tuple[float, Increment]:
    """``log Z_0`` and the weight-increment function of a path (resolved once, outside the loop)."""
    if not isinstance(path, AnnealingPath):
        raise TypeError(
            f"path: expected the annealing-path protocol (sample_base, base_log_partition, log_density, transition); "
            f"got {type(path).__name__}"
        )
    v = path.base_log_partition
    v = float(v() if callable(v) else v)
    if not math.isfinite(v):
        raise ValueError(f"path.base_log_partition: expected a finite number; got {v!r}")
    if isinstance(path, SupportsWeightIncrement):
        fn, name = path.log_weight_increment, "path.log_weight_increment(x, beta_from, beta_to)"
    else:
        def fn(x: Tensor, beta_from: float, beta_to: float) -> Tensor:
            return path.log_density(x, beta_to).double() - path.log_density(x, beta_from).double()

        name = "path.log_density(x, beta)"

    def increment(x: Tensor, beta_from: float, beta_to: float) -> Tensor:
        d = fn(x, beta_from, beta_to)
        if tuple(d.shape) != (x.shape[0],):
            raise ValueError(f"{name}: expected shape ({x.shape[0]},); got {tuple(d.shape)}")
        return d.double()

    return v, increment


def _loop(indices: range, progress: bool, desc: str) -> Any:
    return progress_bar(indices, desc=desc, enabled=progress, leave=False) if progress else indices


def _result(path: Any, log_z0: float, log_w: Tensor, x: Tensor, betas: tuple[float, ...], direction: str) -> AISResult:
    log_mean, stderr, ess = log_mean_weight(log_w, f"{direction} AIS log weights")
    value = log_z0 + log_mean if direction == "forward" else log_z0 - log_mean
    settings = {"method": f"{direction} ais", "n_chains": int(log_w.shape[0]), "num_steps": len(betas) - 1,
                "base_log_partition": log_z0, "path": type(path).__name__}
    est = Estimate(estimate=value, stderr=stderr, ess=ess, settings=settings)
    return AISResult(estimate=est, log_weights=log_w, samples=x, direction=direction)


def ais(
    path: AnnealingPath,
    n_chains: int,
    betas: Sequence[float] | Tensor,
    *,
    generator: torch.Generator | None = None,
    progress: bool = False,
) -> AISResult:
    r"""Forward AIS estimate of :math:`\log Z` (a stochastic lower bound; module docstring).

    Args:
        path: an annealing path (module docstring), e.g. :class:`GeometricPath` or an RBM's ``ais_path()``.
        n_chains: independent AIS runs ``n >= 2``.
        betas: the schedule, e.g. :func:`linear_betas`, :func:`salakhutdinov_betas`; with ``[0, 1]`` (one step)
            this is plain importance sampling with the base as proposal.
        generator: random source for the base draws and the transitions.
        progress: progress bar over temperatures.
    """
    bs = validate_betas(betas)
    check_int(n_chains, "n_chains", minimum=2)
    log_z0, increment = _check_path(path)
    x = path.sample_base(n_chains, generator=generator)
    check_tensor(x, "path.sample_base(n)", min_dim=1)
    if x.shape[0] != n_chains:
        raise ValueError(f"path.sample_base({n_chains}): expected {n_chains} rows; got shape {tuple(x.shape)}")
    log_w = torch.zeros(n_chains, dtype=torch.float64, device=x.device)
    K = len(bs) - 1
    with torch.no_grad():
        for k in _loop(range(1, K + 1), progress, "AIS"):
            if bs[k] != bs[k - 1]:
                log_w += increment(x, bs[k - 1], bs[k])
            if k < K:
                x = path.transition(x, bs[k], generator=generator)
    return _result(path, log_z0, log_w, x, bs, "forward")


def ais_across_ranks(
    path: AnnealingPath,
    n_chains: int,
    betas: Sequence[float] | Tensor,
    *,
    seed: int,
    blocks: int = 8,
    device: torch.device | str | None = None,
    progress: bool = False,
) -> AISResult:
    r"""Forward AIS (as :func:`ais`) with its chains split into ``blocks`` and the blocks shared by the ranks.

    Block ``b`` (``n_chains / blocks`` chains) draws from its own generator, seeded from ``seed``
    and ``b`` (on ``device``, default CPU: the path's device). Under ``torchrun`` (an initialised
    default process group) rank ``r`` runs blocks ``r, r + W, ...`` and the blocks' log weights and
    final states are gathered on every rank in block order, so every rank returns exactly what one
    process returns with the same ``seed`` and ``blocks``: the estimate, its stderr and ESS from all
    ``n_chains`` weights. (A different ``blocks`` gives another, equally valid, realisation.)

    Args:
        path, n_chains, betas, progress: as in :func:`ais`; ``n_chains`` a multiple of ``blocks``.
        seed: the seed the blocks' generators derive from.
        blocks: number of blocks, ``>= 1``, each of ``>= 2`` chains.
        device: where the blocks' generators live.
    """
    check_int(blocks, "blocks", minimum=1)
    check_int(n_chains, "n_chains", minimum=2)
    check_int(seed, "seed", minimum=0)
    if n_chains % blocks or n_chains // blocks < 2:
        raise ValueError(f"n_chains: expected a multiple of blocks={blocks} with at least 2 chains per block; "
                         f"got {n_chains}")
    bs = validate_betas(betas)
    log_z0, _ = _check_path(path)
    per = n_chains // blocks
    mine = {}
    for b in my_pieces(range(blocks)):
        run = ais(path, per, bs, generator=piece_generator(seed, b, device), progress=progress)
        mine[b] = (run.log_weights.cpu(), run.samples.detach().cpu())
    every = gather_pieces(mine)
    target = torch.device("cpu") if device is None else torch.device(device)
    log_w = torch.cat([every[b][0] for b in range(blocks)]).to(target)
    x = torch.cat([every[b][1] for b in range(blocks)]).to(target)
    out = _result(path, log_z0, log_w, x, bs, "forward")
    out.estimate.settings.update(blocks=blocks, seed=seed)
    return out


def reverse_ais(
    path: AnnealingPath,
    x: Tensor,
    betas: Sequence[float] | Tensor,
    *,
    generator: torch.Generator | None = None,
    progress: bool = False,
) -> AISResult:
    r"""Reverse AIS estimate of :math:`\log Z` from target samples (a stochastic upper bound when they are exact).

    Args:
        path: an annealing path (module docstring).
        x: target samples ``(n, *event)``, ``n >= 2`` (exact draws, long-run chains, or data).
        betas: the schedule, run backwards from 1 to 0.
        generator: random source for the transitions.
        progress: progress bar over temperatures.
    """
    bs = validate_betas(betas)
    log_z0, increment = _check_path(path)
    check_tensor(x, "x", floating=True, min_dim=1)
    if x.shape[0] < 2:
        raise ValueError(f"x: expected at least 2 target samples; got shape {tuple(x.shape)}")
    check_finite(x, "x")
    log_w = torch.zeros(x.shape[0], dtype=torch.float64, device=x.device)
    K = len(bs) - 1
    with torch.no_grad():
        x = x.detach()
        for k in _loop(range(K, 0, -1), progress, "reverse AIS"):
            if bs[k] != bs[k - 1]:
                log_w += increment(x, bs[k], bs[k - 1])
            if k > 1:
                x = path.transition(x, bs[k - 1], generator=generator)
    return _result(path, log_z0, log_w, x, bs, "reverse")


def ais_bracket(
    path: AnnealingPath,
    n_chains: int,
    betas: Sequence[float] | Tensor,
    x_target: Tensor,
    *,
    z: float = 2.0,
    generator: torch.Generator | None = None,
    progress: bool = False,
    forward: AISResult | None = None,
) -> Estimate:
    r"""Forward and reverse AIS together: :math:`\log Z` with a bracket.

    ``forward``: a forward :func:`ais` result already computed on the same path and schedule, to
    reuse instead of running forward AIS again.

    Forward AIS is a stochastic lower bound and reverse AIS (from exact ``x_target``) a stochastic
    upper bound, but each is also noisy: with a good schedule both sit within their stderr of
    :math:`\log Z` and may cross. The bracket therefore widens the two by ``z`` standard errors:
    ``lower = min(fwd, rev) - z * its stderr``, ``upper = max(fwd, rev) + z * its stderr``
    (``z = 0`` gives the raw pair).

    Returns:
        :class:`~ebms.estimators.Estimate` with ``estimate``/``stderr``/``ess`` of forward AIS, the
        bracket in ``lower``/``upper``, and in ``settings`` both raw estimates with their stderr and
        ESS, ``gap = reverse - forward``, ``crossed = gap < 0`` and ``z``. A wide gap means the
        schedule is too short or the kernel mixes too slowly; a crossed one, that the two agree to
        within their noise.
    """
    zz = check_positive(z, "z", allow_zero=True)
    if forward is not None and forward.direction != "forward":
        raise ValueError(f"forward: expected a forward AIS result; got direction {forward.direction!r}")
    fwd = (forward if forward is not None else ais(path, n_chains, betas, generator=generator, progress=progress)).estimate
    rev = reverse_ais(path, x_target, betas, generator=generator, progress=progress).estimate
    gap = rev.estimate - fwd.estimate
    lo, hi = (fwd, rev) if gap >= 0 else (rev, fwd)
    settings = {**fwd.settings, "method": "ais bracket", "n_reverse": rev.settings["n_chains"],
                "forward": fwd.estimate, "forward_stderr": fwd.stderr, "forward_ess": fwd.ess,
                "reverse": rev.estimate, "reverse_stderr": rev.stderr, "reverse_ess": rev.ess,
                "gap": gap, "crossed": gap < 0, "z": zz}
    return Estimate(estimate=fwd.estimate, stderr=fwd.stderr, lower=lo.estimate - zz * lo.stderr,
                    upper=hi.estimate + zz * hi.stderr, ess=fwd.ess, settings=settings)
