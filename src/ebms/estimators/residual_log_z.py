r"""Per-prefix :math:`\log Z` of residual text EBMs: asymptotic lower and upper estimates, perplexity
intervals and per-step probabilities.

A residual model :math:`p(x \mid c) = p_{LM}(x \mid c)\, e^{-E(c, x)} / Z(c)` has
:math:`Z(c) = \mathbb{E}_{x \sim p_{LM}(\cdot \mid c)}\, e^{-E(c, x)}`. With :math:`n` base draws
and :math:`a_i = -E(c, x_i)`:

.. math::  T_n = \operatorname{LSE}_i a_i - \log n, \qquad
           T^{(-i)}_{n-1} = \operatorname{LSE}_{j \ne i} a_j - \log(n - 1), \qquad
           \bar T_{n-1} = \tfrac1n \textstyle\sum_i T^{(-i)}_{n-1},

lower :math:`T_n` and upper :math:`(2n-1) T_n - 2(n-1) \bar T_{n-1}` (Theorem 2 of Deng et al.):
for ``n`` large enough :math:`\mathbb{E}[T_n] < \log Z < \mathbb{E}[\text{upper}]`, each off by
:math:`\frac{\mu_2}{2\mu^2 n} + o(1/n)` (:math:`\mu, \mu_2` the mean and variance of the weights
:math:`e^{a}`). The upper one over-corrects Nowozin's jackknife :math:`n T_n - (n-1)\bar T_{n-1}`
(bias :math:`O(n^{-2})`, returned as ``jackknife``). These are statements about expectations:
one estimate is random (its spread is about ``stderr``), the pair is a bracket only on average and
only asymptotically; distrust it when ``ess`` is a small fraction of ``n``. By Jensen
:math:`\bar T_{n-1} \le T_n`, so upper ``>=`` jackknife ``>=`` lower for every draw.

:math:`\operatorname{LSE}_{j \ne i}` comes from prefix and suffix cumulative log-sum-exps in
float64 (``O(n)``, no cancellation when one weight dominates, unlike
:math:`\log(e^{\mathrm{LSE}} - e^{a_i})`).

The model is duck-typed (``ebms.models.ResidualLM``, whatever its base): ``energy(prefix, x)``,
``base_log_prob(prefix, x)`` (the horizon law), ``sample_base(prefix, n, *, generator)``,
``horizon`` and, for :func:`exact_last_step`, ``vocab_size`` (or ``base.vocab_size``). No
gradients; call ``model.eval()`` first.

References: Deng, Bakhtin, Ott, Szlam, Ranzato (2020), "Residual Energy-Based Models for Text
Generation", ICLR (Theorem 2, Eq. 5, App. A.2); Nowozin (2018), "Debiasing Evidence
Approximations: On Importance-weighted Autoencoders and Jackknife Variational Inference", ICLR.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from ebms._checks import check_int, check_tensor
from ebms._progress import progress_bar
from ebms.capabilities import HasVocabSize
from ebms.samplers.joint_resampling import base_draw_energies, empty_rows, join_rows, negative_energies, repeat_rows
from ebms.sequences import Sequences

__all__ = ["ExactLastStep", "LogZBounds", "ResidualPerplexity", "StepwiseBounds", "exact_last_step",
           "log_z_bounds", "residual_log_z", "residual_perplexity", "stepwise_log_prob_bounds"]


@dataclass(frozen=True)
class LogZBounds:
    """Asymptotic estimates of :math:`\\log Z` per row (all tensors float64 of the batch shape ``(...)``).

    Attributes:
        lower: :math:`T_n` (biased low). upper: :math:`(2n-1)T_n - 2(n-1)\\bar T_{n-1}` (biased high;
            ``+inf`` when a single weight is non-zero). jackknife: :math:`nT_n - (n-1)\\bar T_{n-1}`.
        stderr: delta-method standard error of ``lower``, :math:`\\mathrm{sd}(w)/(\\sqrt n\\,\\bar w)`.
        ess: Kish effective sample size in ``[1, n]``. n: draws per row.
    """

    lower: Tensor
    upper: Tensor
    jackknife: Tensor
    stderr: Tensor
    ess: Tensor
    n: int


def log_z_bounds(neg_energies: Tensor, *, dim: int = -1) -> LogZBounds:
    r"""Lower and upper :math:`\log Z` estimates from log weights :math:`a_i = -E(x_i)`, ``x_i ~ p_LM``.

    Args:
        neg_energies: ``(..., n, ...)`` floating, ``n >= 2`` draws along ``dim``; ``-inf`` is a zero
            weight; no NaN or ``+inf``; every row needs a finite entry.
        dim: the draws' axis.

    Returns:
        :class:`LogZBounds` over the other axes. Cost ``O(n)`` per row (module docstring).
    """
    check_tensor(neg_energies, "neg_energies", floating=True, min_dim=1)
    a = neg_energies.detach().double().movedim(dim, -1)
    n = a.shape[-1]
    if n < 2:
        raise ValueError(f"neg_energies: the upper estimate needs leave-one-out means, so n >= 2 draws along "
                         f"dim={dim}; got shape {tuple(neg_energies.shape)}")
    bad = torch.isnan(a) | (a == math.inf)
    if bool(bad.any()):
        raise ValueError(f"neg_energies: expected finite values or -inf; got {int(bad.sum())} NaN/+inf entries")
    top = a.amax(-1, keepdim=True)
    if not bool(torch.isfinite(top).all()):
        raise ValueError(f"neg_energies: expected a finite entry in every row; {int((~torch.isfinite(top)).sum())} "
                         "rows are all -inf")
    lower = torch.logsumexp(a, -1) - math.log(n)
    pre, suf = a.logcumsumexp(-1), a.flip(-1).logcumsumexp(-1).flip(-1)
    none = torch.full_like(a[..., :1], -math.inf)
    loo = torch.logaddexp(torch.cat([none, pre[..., :-1]], -1), torch.cat([suf[..., 1:], none], -1))
    t_bar = (loo - math.log(n - 1)).mean(-1)
    upper = torch.maximum((2 * n - 1) * lower - 2 * (n - 1) * t_bar, lower)  # >= by Jensen; guards rounding
    jackknife = torch.maximum(n * lower - (n - 1) * t_bar, lower)
    w = torch.exp(a - top)
    mean = w.mean(-1)
    stderr = w.std(-1) / (math.sqrt(n) * mean)
    ess = w.sum(-1) ** 2 / (w * w).sum(-1)
    return LogZBounds(lower, upper, jackknife, stderr, ess, n)


def residual_log_z(model: Any, prefix: Sequences, n: int, *, generator: torch.Generator | None,
                   batch_size: int = 4096, progress: bool | None = False) -> LogZBounds:
    """:func:`log_z_bounds` of each prefix from ``n`` untruncated ``model.sample_base`` draws: ``(P,)`` fields.

    Cost: ``P n`` base draws and energy evaluations, in calls of ``max(batch_size, n)`` rows;
    memory ``P n`` floats (draws are not kept). ``progress``: a progress bar over the calls (default off;
    ``None``: when there are more than 20).

    Example:
        >>> from ebms.models import LSTMLM
        >>> from ebms.models.residual_lm import ResidualLM
        >>> from ebms.nets.text_energy import TextEnergy
        >>> m = ResidualLM(LSTMLM(5, embedding_dim=8, hidden_size=8, num_layers=1),
        ...                TextEnergy(5, dim=8, layers=1), horizon=4).eval()
        >>> b = residual_log_z(m, Sequences.from_lists([[1, 2], [3]]), 64, generator=torch.Generator().manual_seed(0))
        >>> tuple(b.lower.shape), bool((b.lower <= b.upper).all())
        ((2,), True)
    """
    n = check_int(n, "n", minimum=2)
    _, ne = base_draw_energies(model, prefix, n, generator=generator, batch_size=batch_size, keep_draws=False,
                               progress=progress)
    return log_z_bounds(ne)


def _pair(prefix: Any, x: Any, horizon: int | None, names: tuple[str, str] = ("prefix", "x")) -> None:
    for name, s in zip(names, (prefix, x)):
        Sequences.coerce(s, name=name, pairs=False, expected="an ebms.sequences.Sequences")
    if prefix.batch_size != x.batch_size or x.batch_size == 0:
        raise ValueError(f"{names[0]}: expected one prefix per continuation (>= 1); got {prefix.batch_size} "
                         f"prefixes and {x.batch_size} continuations")
    if horizon is not None and int(x.lengths.max()) > horizon:
        raise ValueError(f"{names[1]}: the model's horizon law has at most horizon={horizon} tokens; the longest "
                         f"continuation has {int(x.lengths.max())}")


def _base_log_prob(model: Any, c: Sequences, x: Sequences, batch_size: int) -> Tensor:
    with torch.no_grad():
        parts = [model.base_log_prob(c[i:i + batch_size], x[i:i + batch_size]).double()
                 for i in range(0, x.batch_size, batch_size)]
    return torch.cat(parts) if parts else torch.zeros(0, dtype=torch.float64, device=x.device)


def _base_steps(model: Any, prefix: Sequences, x: Sequences, end: Tensor, batch_size: int) -> Tensor:
    r"""``(P, T + 1)`` float64 base step log-probabilities from ``base_log_prob`` (``B``) alone:
    :math:`\log p(x_{t+1} \mid h) = B(h, x_{t+1}) - B(h x_{t+1}, \varnothing)` with
    :math:`h = c\,x_{\le t}` (the second term only when a one-token continuation keeps its
    ``</s>``, i.e. horizon ``!= 1``), and :math:`\log p(\texttt{</s>} \mid c x) = B(c x, \varnothing)`
    at position ``L`` where ``end``. Cost: about ``2 L + 1`` scored rows per continuation."""
    P, T, L = x.batch_size, x.max_length, x.lengths
    rr, tt = (torch.arange(T, device=L.device) < L.unsqueeze(1)).nonzero(as_tuple=True)
    ctx = join_rows(prefix[rr], Sequences(x.tokens[rr], tt, validate=False))
    tok = Sequences(x.tokens[rr, tt].unsqueeze(1), validate=False)
    steps = _base_log_prob(model, ctx, tok, batch_size)
    if model.horizon is None or model.horizon > 1:
        steps = steps - _base_log_prob(model, join_rows(ctx, tok), empty_rows(rr.numel(), L.device), batch_size)
    out = torch.zeros(P, T + 1, dtype=torch.float64, device=L.device)
    out[rr, tt] = steps.to(L.device)
    e = end.nonzero().squeeze(1)
    out[e, L[e]] = _base_log_prob(model, join_rows(prefix[e], x[e]), empty_rows(e.numel(), L.device),
                                  batch_size).to(L.device)
    return out


@dataclass(frozen=True)
class ResidualPerplexity:
    """Corpus perplexity interval of a residual model (see :func:`residual_perplexity`).

    Attributes:
        lower, upper: perplexity with the lower / upper :math:`\\log Z` (``upper`` may be ``inf``).
        base: the base LM's perplexity on the same tokens. tokens: the token count.
        log_prob_lower, log_prob_upper: ``(P,)`` float64 bounds of :math:`\\log p(x \\mid c)`.
        base_log_prob, energy: ``(P,)`` float64. token_counts: ``(P,)`` int64. log_z: the estimates.
    """

    lower: float
    upper: float
    base: float
    tokens: int
    log_prob_lower: Tensor
    log_prob_upper: Tensor
    base_log_prob: Tensor
    energy: Tensor
    token_counts: Tensor
    log_z: LogZBounds


def residual_perplexity(model: Any, prefixes: Sequences, continuations: Sequences, n: int, *,
                        generator: torch.Generator | None, batch_size: int = 4096,
                        progress: bool | None = False) -> ResidualPerplexity:
    r"""Perplexity interval of held-out continuations, the paper's "a-b" ranges.

    :math:`\log p(x \mid c) = \log p_{LM}(x \mid c) - E(c, x) - \log Z(c)` with :math:`\log Z` from
    :func:`residual_log_z` (``n`` draws per prefix): the lower :math:`\log Z` gives the lower
    (optimistic) perplexity :math:`\exp(-\sum \log p / N)`, the upper one the upper. ``N`` counts
    the predicted tokens: each continuation's tokens, plus its ``</s>`` when the horizon law
    scores it (length ``< horizon``, or ``horizon=None``).

    Args:
        model: the residual model (module docstring).
        prefixes, continuations: ``P`` rows each (continuations at most ``horizon`` long).
        n: base draws per prefix (``>= 2``; the paper uses :math:`10^5`).
        generator, batch_size, progress: as :func:`residual_log_z`.
    """
    horizon = model.horizon
    _pair(prefixes, continuations, horizon, ("prefixes", "continuations"))
    log_z = residual_log_z(model, prefixes, n, generator=generator, batch_size=batch_size, progress=progress)
    base = _base_log_prob(model, prefixes, continuations, batch_size)
    ne = negative_energies(model, prefixes, continuations, batch_size=batch_size)
    lengths = continuations.lengths.to(base.device)
    counts = lengths + (1 if horizon is None else (lengths < horizon).long())
    tokens = int(counts.sum())  # >= 1: a horizon is >= 1, so an empty continuation still predicts its </s>
    lp_low, lp_up = base + ne - log_z.upper, base + ne - log_z.lower
    return ResidualPerplexity(math.exp(-float(lp_up.sum()) / tokens), math.exp(-float(lp_low.sum()) / tokens),
                              math.exp(-float(base.sum()) / tokens), tokens, lp_low, lp_up, base, -ne, counts, log_z)


@dataclass(frozen=True)
class StepwiseBounds:
    """Per-step bounds of :math:`\\log p(x_t \\mid c, x_{<t})` (layout of ``continuation_token_log_probs``).

    Attributes:
        lower, upper: ``(P, T + 1)`` float64; position ``t < L`` scores ``x_{t+1}``, position ``L``
            the ``</s>`` (when the horizon law has it); other positions 0.
        base: ``(P, T + 1)`` float64 base-LM log-probabilities of the same outcomes.
        mask: ``(P, T + 1)`` bool, the real steps.
    """

    lower: Tensor
    upper: Tensor
    base: Tensor
    mask: Tensor


def stepwise_log_prob_bounds(model: Any, prefix: Sequences, x: Sequences, n: int, *,
                             generator: torch.Generator | None, batch_size: int = 4096,
                             progress: bool | None = False) -> StepwiseBounds:
    r"""Eq. 5 of Deng et al.: per-step log-probabilities of the joint model, with bounds.

    .. math::  \log p(x_t \mid c, x_{<t}) = \log p_{LM}(x_t \mid c, x_{<t}) + \log Z_t - \log Z_{t-1},
               \qquad Z_j = \mathbb{E}_{x' \sim p_{LM}(\cdot \mid c, x_{\le j})} e^{-E(c, x_{\le j} x')},

    :math:`x'` a completion over the remaining horizon (a ``sample_base`` draw of
    :math:`c\,x_{\le j}` cut to ``horizon - j`` tokens; to ``</s>`` when unbounded).
    :math:`Z_0 = Z(c)`; :math:`Z_K = e^{-E(c,x)}` exactly at the horizon; the ``</s>`` step has
    numerator :math:`e^{-E(c,x)}` exactly. Each other :math:`\log Z_j` gets
    :func:`log_z_bounds` from ``n`` completions; lower = lower(numerator) - upper(denominator),
    upper = upper(numerator) - lower(denominator).

    Args:
        model: the residual model (module docstring). prefix, x: ``P`` rows each.
        n: completions per :math:`Z_j` (``>= 2``). generator, batch_size, progress: as
            :func:`residual_log_z` (the bar runs over positions ``j``).

    Returns:
        :class:`StepwiseBounds`. Cost: ``(L + 1) n`` completions and energies per row, plus
        about ``2 L + 1`` ``base_log_prob`` rows for the base's step terms.
    """
    n = check_int(n, "n", minimum=2)
    batch_size = check_int(batch_size, "batch_size", minimum=1)
    horizon = model.horizon
    _pair(prefix, x, horizon)
    P, T, L = x.batch_size, x.max_length, x.lengths
    end = torch.ones_like(L, dtype=torch.bool) if horizon is None else L < horizon
    lm = _base_steps(model, prefix, x, end, batch_size)
    ne = negative_energies(model, prefix, x, batch_size=batch_size).to(L.device)
    zl = torch.zeros(P, T + 2, dtype=torch.float64, device=L.device)
    zu = torch.zeros_like(zl)
    positions: Any = range(int(L.max()) + 1)
    if progress or (progress is None and P * n * len(positions) > 20 * batch_size):
        positions = progress_bar(positions, desc="Eq. 5 positions", leave=False)
    per_call = max(1, batch_size // n)
    for j in positions:
        rows = (L >= j).nonzero().squeeze(1)
        if horizon is not None and j == horizon:  # nothing left to complete: exact
            zl[rows, j], zu[rows, j] = ne[rows], ne[rows]
            continue
        for s in range(0, rows.numel(), per_call):
            r = rows[s:s + per_call]
            h = Sequences(x.tokens[r], L[r].clamp(max=j), validate=False)
            with torch.no_grad():
                tail = model.sample_base(join_rows(prefix[r], h), n, generator=generator)
            if horizon is not None:  # the first ``horizon - j`` tokens of a horizon draw: a horizon - j draw
                tail = Sequences(tail.tokens, tail.lengths.clamp(max=horizon - j), validate=False)
            c, h = repeat_rows(prefix[r], n), repeat_rows(h, n)
            b = log_z_bounds(negative_energies(model, c, join_rows(h, tail), batch_size=batch_size).view(-1, n))
            zl[r, j], zu[r, j] = b.lower.to(L.device), b.upper.to(L.device)
    ends = end.nonzero().squeeze(1)
    zl[ends, L[ends] + 1], zu[ends, L[ends] + 1] = ne[ends], ne[ends]
    p = torch.arange(T + 1, device=L.device)
    mask = (p < L.unsqueeze(1)) | ((p == L.unsqueeze(1)) & end.unsqueeze(1))
    lower = torch.where(mask, lm + zl[:, 1:] - zu[:, :-1], 0.0)
    upper = torch.where(mask, lm + zu[:, 1:] - zl[:, :-1], 0.0)
    return StepwiseBounds(lower, upper, torch.where(mask, lm, 0.0), mask)


@dataclass(frozen=True)
class ExactLastStep:
    """The joint model's exact law of the last outcome (see :func:`exact_last_step`).

    Attributes:
        log_probs: ``(P, V)`` float64 :math:`\\log p(v \\mid c, x_{<K})`; column 0 is ``</s>``.
        log_prob: ``(P,)`` float64, the observed :math:`\\log p(x_K \\mid c, x_{<K})`.
    """

    log_probs: Tensor
    log_prob: Tensor


def exact_last_step(model: Any, prefix: Sequences, x: Sequences, *, batch_size: int = 4096) -> ExactLastStep:
    r"""Exact :math:`\log p(x_K \mid c, x_{<K})` at the horizon ``K`` by enumerating the vocabulary.

    At the last position no future remains, so Eq. 5 has no expectation left:
    :math:`p(v \mid c, x_{<K}) \propto p_{LM}(v \mid c, x_{<K})\, e^{-E(c, x_{<K} v)}` over the ``V``
    outcomes (``v = </s>``: the continuation :math:`x_{<K}` ends). Computed as a softmax over ``v`` of
    ``base_log_prob - energy`` of the ``V`` candidates (the shared :math:`\log p_{LM}(x_{<K} \mid c)` cancels).

    Args:
        model: the residual model with an integer ``horizon`` ``K >= 1`` and ``vocab_size`` (or
            ``base.vocab_size``).
        prefix, x: ``P`` rows each; every ``x`` of length exactly ``K``.

    Cost: ``P V`` base and energy evaluations.
    """
    horizon = model.horizon
    if horizon is None or horizon < 1:
        raise ValueError(f"model.horizon: the last step is enumerable only at a fixed horizon K >= 1; got {horizon}")
    _pair(prefix, x, horizon)
    if bool((x.lengths != horizon).any()):
        raise ValueError(f"x: expected every continuation to have exactly horizon={horizon} tokens; got lengths "
                         f"{sorted(set(x.lengths.tolist()))}")
    own = model.vocab_size if isinstance(model, HasVocabSize) else None
    V, P = int(own or model.base.vocab_size), x.batch_size
    cand = x.tokens[:, :horizon].repeat_interleave(V, 0).clone()
    v = torch.arange(V, device=cand.device).repeat(P)
    cand[:, horizon - 1] = v
    cand_x = Sequences(cand, horizon - (v == 0).long(), validate=False)
    c = repeat_rows(prefix, V)
    scores = _base_log_prob(model, c, cand_x, batch_size) + negative_energies(model, c, cand_x, batch_size=batch_size)
    log_probs = scores.view(P, V).log_softmax(-1)
    observed = x.tokens[:, horizon - 1].to(log_probs.device)
    return ExactLastStep(log_probs, log_probs.gather(1, observed.unsqueeze(1)).squeeze(1))
