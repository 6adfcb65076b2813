r"""Generation from a residual energy-based text model by resampling base-LM draws.

The target is the joint (residual) continuation law of a prefix :math:`c`,

.. math::  p(x \mid c) = \frac{p_{LM}(x \mid c)\, e^{-E(c, x)}}{Z(c)}, \qquad
           Z(c) = \mathbb{E}_{x \sim p_{LM}(\cdot \mid c)}\, e^{-E(c, x)},

over continuations of the model's horizon law (an integer ``horizon``: at most that many tokens;
``None``: up to ``</s>``). Two samplers:

* :func:`top_k_joint_sample` — Algorithm 1 of Deng et al. (2020), self-normalised importance
  resampling: draw :math:`x^1..x^n \sim p_{LM}(\cdot \mid c)` (optionally top-k / top-p
  restricted), pick :math:`x^i` with probability :math:`\operatorname{softmax}_i(-E(c, x^i))`.
  Without a restriction the law of the pick tends to :math:`p(x \mid c)` as :math:`n \to \infty`
  (bias :math:`O(1/n)`, governed by the weights' spread: watch ``ess``); with top-k it targets
  :math:`\propto p_{LM}^{(k)}(x \mid c) e^{-E}`, not the joint model. Cost: ``n`` base draws and
  ``n`` energy evaluations per prefix.
* :func:`token_level_joint_sample` — token by token from Eq. 5 of the paper,
  :math:`p(v \mid c, x_{<t}) \propto p_{LM}(v \mid c, x_{<t})\, \hat N(v)` with
  :math:`\hat N(v) = \frac1M \sum_m e^{-E(c, x_{<t} v x'_m)}`, :math:`x'_m` completions of
  :math:`c\,x_{<t}v` drawn from the base (the denominator of Eq. 5 is common to all ``v`` and
  cancels), over the base's ``K`` most likely next outcomes only (``</s>`` included, its
  :math:`N` is exact: :math:`e^{-E(c, x_{<t})}`). Biased twice: the restriction to ``K``
  candidates, and the ratio of Monte Carlo means for finite ``M`` (bias :math:`O(1/M)`); exact
  only for ``K = V`` and ``M \to \infty``. Cost per generated token: one base pass over the
  histories, ``K M`` base completions (horizon-long draws cut to the remaining horizon) and
  ``K M`` energy evaluations — far dearer than Algorithm 1; the paper uses it for qualitative
  analysis only (``K = 128``, ``M = 10^4``).

The model is a :class:`~ebms.capabilities.ResidualModel` (``ebms.models.ResidualLM`` or anything
alike): ``energy(prefix, x) -> (B,)``, ``base_log_prob(prefix, x) -> (B,)`` (the horizon law),
``sample_base(prefix, n, *, generator, top_k, top_p, temperature)`` (``n`` draws per prefix row,
rows ``b*n .. b*n+n-1``), ``horizon``, ``vocab_size`` (or ``base.vocab_size``) and ``base``, whose
``logits`` (an autoregressive LM's next-token logits) is a fast path of the token-level sampler,
not a requirement. Everything runs under ``torch.no_grad`` in the model's current mode: call
``model.eval()`` first.

Reference: Deng, Bakhtin, Ott, Szlam, Ranzato (2020), "Residual Energy-Based Models for Text
Generation", ICLR (Algorithm 1; Eq. 5; App. A.1).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor

from ebms._checks import check_energy_output, check_int, check_tensor
from ebms._progress import progress_bar
from ebms.capabilities import HasVocabSize, ResidualModel, SupportsLogits
from ebms.distributions import sample_categorical
from ebms.sequences import Sequences

__all__ = [
    "JointSample",
    "TokenLevelSample",
    "base_draw_energies",
    "empty_rows",
    "join_rows",
    "negative_energies",
    "repeat_rows",
    "resample",
    "token_level_joint_sample",
    "top_k_joint_sample",
]


@dataclass(frozen=True)
class JointSample:
    """Result of :func:`top_k_joint_sample` for ``P`` prefixes and ``n`` base draws each.

    Attributes:
        continuations: the picked continuation of each prefix, ``P`` rows.
        index: ``(P,)`` int64, which of the prefix's ``n`` draws was picked.
        log_weights: ``(P, n)`` float64 unnormalised log weights :math:`-E(c, x^i)`.
        ess: ``(P,)`` float64 Kish effective sample size :math:`(\\sum w)^2 / \\sum w^2` in ``[1, n]``.
        draws: all ``P n`` base draws, prefix ``b``'s in rows ``b*n .. b*n+n-1``.
    """

    continuations: Sequences
    index: Tensor
    log_weights: Tensor
    ess: Tensor
    draws: Sequences


@dataclass(frozen=True)
class TokenLevelSample:
    """Result of :func:`token_level_joint_sample`.

    Attributes:
        continuations: one draw per prefix, ``P`` rows.
        step_log_probs: ``(P, T + 1)`` float64: position ``t`` holds the estimated log-probability
            of the chosen outcome at step ``t`` under the restricted Eq. 5 law (position ``L`` is
            ``</s>`` when the draw ended; positions after the last step are 0).
    """

    continuations: Sequences
    step_log_probs: Tensor


def repeat_rows(s: Sequences, m: int) -> Sequences:
    """Every row of ``s`` ``m`` times in a row (``repeat_interleave`` order)."""
    return Sequences(s.tokens.repeat_interleave(m, 0), s.lengths.repeat_interleave(m), validate=False)


def join_rows(a: Sequences, b: Sequences) -> Sequences:
    """Row-wise concatenation of the real tokens of ``a`` and ``b`` (same number of rows)."""
    if a.batch_size != b.batch_size:
        raise ValueError(f"join_rows: expected batches of equal size; got {a.batch_size} and {b.batch_size}")
    la, lb = a.lengths, b.lengths
    width = int((la + lb).max()) if a.batch_size else 0
    at, bt = F.pad(a.tokens, (0, 1)), F.pad(b.tokens, (0, 1))  # one spare column: gathers stay in range
    idx = torch.arange(width, device=a.device).expand(a.batch_size, width)
    first = at.gather(1, idx.clamp(max=a.max_length))
    second = bt.gather(1, (idx - la.unsqueeze(1)).clamp(0, b.max_length))
    tokens = torch.where(idx < la.unsqueeze(1), first, second)
    tokens = tokens.masked_fill(idx >= (la + lb).unsqueeze(1), 0)
    return Sequences(tokens, la + lb, validate=False)


def _chunks(total: int, size: int, progress: bool | None, desc: str) -> Iterator[tuple[int, int]]:
    """``(start, stop)`` pairs covering ``range(total)``; a progress bar when asked (``None``: when > 20 chunks)."""
    spans: Iterable[int] = range(0, total, size)
    if progress or (progress is None and total > 20 * size):
        spans = progress_bar(spans, desc=desc, total=-(-total // size), leave=False)
    for start in spans:
        yield start, min(total, start + size)


def negative_energies(model: Any, prefix: Sequences, x: Sequences, *, batch_size: int = 4096) -> Tensor:
    """``-model.energy(prefix, x)`` as ``(B,)`` float64, in chunks of ``batch_size`` rows, without grad."""
    out = []
    with torch.no_grad():
        for start, stop in _chunks(x.batch_size, batch_size, False, "energy"):
            e = check_energy_output(model.energy(prefix[start:stop], x[start:stop]), stop - start,
                                    "model.energy(prefix, x)")
            out.append(-e.double())
    if not out:
        return torch.zeros(0, dtype=torch.float64, device=x.device)
    values = torch.cat(out)
    if bool(torch.isnan(values).any()):
        raise ValueError("model.energy(prefix, x): expected no NaN energies; got NaN")
    return values


def base_draw_energies(model: Any, prefix: Sequences, n: int, *, generator: torch.Generator | None,
                       top_k: int | None = None, top_p: float | None = None, temperature: float = 1.0,
                       batch_size: int = 4096, keep_draws: bool = True,
                       progress: bool | None = None) -> tuple[Sequences | None, Tensor]:
    """``n`` base draws per prefix row and their ``-E``: ``(draws or None, (P, n) float64)``.

    Draws come from ``model.sample_base`` in calls of at most ``max(batch_size, n)`` rows (whole
    prefixes); with ``keep_draws=False`` only the energies are kept (memory ``O(P n)`` floats).
    """
    prefix = Sequences.coerce(prefix, name="prefix", pairs=False, expected="an ebms.sequences.Sequences")
    n = check_int(n, "n", minimum=1)
    batch_size = check_int(batch_size, "batch_size", minimum=1)
    per_call = max(1, batch_size // n)
    kw: dict[str, Any] = {}
    if top_k is not None or top_p is not None or temperature != 1.0:
        kw = {"top_k": top_k, "top_p": top_p, "temperature": temperature}
    draws, values = [], []
    with torch.no_grad():
        for start, stop in _chunks(prefix.batch_size, per_call, progress, "base draws"):
            c = prefix[start:stop]
            x = model.sample_base(c, n, generator=generator, **kw)
            if not isinstance(x, Sequences) or x.batch_size != (stop - start) * n:
                got = f"{x.batch_size} rows" if isinstance(x, Sequences) else type(x).__name__
                raise ValueError(f"model.sample_base(prefix, {n}): expected Sequences of "
                                 f"{(stop - start) * n} rows ({n} per prefix row); got {got}")
            values.append(negative_energies(model, repeat_rows(c, n), x, batch_size=batch_size).view(stop - start, n))
            if keep_draws:
                draws.append(x)
    if not values:
        return (Sequences(prefix.tokens[:0, :0], prefix.lengths[:0]) if keep_draws else None,
                torch.zeros(0, n, dtype=torch.float64, device=prefix.device))
    return (Sequences.cat(draws) if keep_draws else None), torch.cat(values)


def resample(log_weights: Tensor, generator: torch.Generator | None = None) -> Tensor:
    r"""One index per row drawn with probability :math:`\operatorname{softmax}(\log w)` over the last axis.

    Args:
        log_weights: ``(..., n)`` floating, unnormalised; ``-inf`` is a zero weight; no NaN or
            ``+inf``, and every row needs one finite entry.
        generator: the random source.

    Returns:
        ``(...)`` int64 indices in ``[0, n)``. Cost: one softmax and one uniform per row.
    """
    check_tensor(log_weights, "log_weights", floating=True, min_dim=1)
    if log_weights.shape[-1] == 0:
        raise ValueError(f"log_weights: expected n >= 1 weights per row; got shape {tuple(log_weights.shape)}")
    lw = log_weights.detach().double()
    bad = torch.isnan(lw) | (lw == math.inf)
    if bool(bad.any()):
        raise ValueError(f"log_weights: expected finite values or -inf; got {int(bad.sum())} NaN/+inf entries")
    dead = ~torch.isfinite(lw.amax(-1))
    if bool(dead.any()):
        raise ValueError(f"log_weights: expected at least one finite weight per row; {int(dead.sum())} rows are "
                         "all -inf")
    return sample_categorical(lw, generator)


def _kish_ess(log_weights: Tensor) -> Tensor:
    return torch.exp(2 * torch.logsumexp(log_weights, -1) - torch.logsumexp(2 * log_weights, -1))


def top_k_joint_sample(model: Any, prefix: Sequences, n: int, *, generator: torch.Generator | None,
                       top_k: int | None = None, top_p: float | None = None, temperature: float = 1.0,
                       batch_size: int = 4096, progress: bool | None = None) -> JointSample:
    r"""Algorithm 1 (top-k joint sampling): resample one of ``n`` base draws by :math:`\operatorname{softmax}(-E)`.

    For each prefix row :math:`c`: draw :math:`x^1..x^n` with ``model.sample_base(c, n, top_k=,
    top_p=, temperature=)``, compute :math:`s_i = E(c, x^i)`, return :math:`x^i` with probability
    :math:`e^{-s_i} / \sum_j e^{-s_j}` (see the module docstring for the bias).

    Args:
        model: the residual model (module docstring).
        prefix: ``P`` prefixes (on the model's device).
        n: base draws per prefix (``n = 1`` returns the base draw).
        generator: the only random source (draws and the pick).
        top_k, top_p, temperature: the base restriction (all off: the pick tends to the joint law).
        batch_size: rows per ``sample_base`` / ``energy`` call (whole prefixes; at least ``n``).
        progress: tqdm bar over the calls (``None``: when there are more than 20).

    Returns:
        :class:`JointSample`. Cost: ``P n`` base draws and energy evaluations; memory ``P n`` draws.

    Example:
        >>> from ebms.models import LSTMLM
        >>> from ebms.models.residual_lm import ResidualLM
        >>> from ebms.nets.text_energy import TextEnergy
        >>> m = ResidualLM(LSTMLM(5, embedding_dim=8, hidden_size=8, num_layers=1),
        ...                TextEnergy(5, dim=8, layers=1), horizon=4).eval()
        >>> out = top_k_joint_sample(m, Sequences.from_lists([[1, 2], [3]]), 16, top_k=3,
        ...                          generator=torch.Generator().manual_seed(0))
        >>> out.continuations.batch_size, tuple(out.log_weights.shape), bool((out.ess <= 16).all())
        (2, (2, 16), True)
    """
    draws, lw = base_draw_energies(model, prefix, n, generator=generator, top_k=top_k, top_p=top_p,
                                   temperature=temperature, batch_size=batch_size, progress=progress)
    assert draws is not None
    P = prefix.batch_size
    if P == 0:
        empty = torch.zeros(0, dtype=torch.long, device=prefix.device)
        return JointSample(draws, empty, lw, lw.new_zeros(0), draws)
    index = resample(lw, generator)
    rows = torch.arange(P, device=index.device) * n + index
    return JointSample(draws[rows], index, lw, _kish_ess(lw), draws)


def empty_rows(n: int, device: torch.device) -> Sequences:
    """``n`` empty sequences."""
    return Sequences(torch.zeros(n, 0, dtype=torch.long, device=device), torch.zeros(n, dtype=torch.long,
                                                                                       device=device), validate=False)


def _next_log_probs(model: ResidualModel, ctx: Sequences, vocab_size: int) -> Tensor:
    r"""``(A, V)`` float64 base log-probabilities of the outcome after each context (column 0 = ``</s>``).

    One ``model.base.logits`` pass when the base has it; otherwise from ``model.base_log_prob``
    alone: :math:`\log p(\texttt{</s>} \mid h) = B(h, \varnothing)` and
    :math:`\log p(v \mid h) = B(h, v) - B(hv, \varnothing)` (the second term only when the horizon
    law gives a one-token continuation its ``</s>``), ``2V - 1`` scored rows per context.
    """
    A = ctx.batch_size
    if isinstance(model.base, SupportsLogits):
        logits = model.base.logits(ctx)
        last = logits[torch.arange(A, device=logits.device), ctx.lengths.to(logits.device)]
        return last.double().log_softmax(-1)
    none = empty_rows(A * (vocab_size - 1), ctx.device)
    ctx_v = repeat_rows(ctx, vocab_size - 1)
    v = Sequences(torch.arange(1, vocab_size, device=ctx.device).repeat(A).unsqueeze(1), validate=False)
    tok = model.base_log_prob(ctx_v, v).double()
    if model.horizon is None or model.horizon > 1:
        tok = tok - model.base_log_prob(join_rows(ctx_v, v), none).double()
    end = model.base_log_prob(ctx, none[:A]).double()
    return torch.cat([end.unsqueeze(1), tok.view(A, vocab_size - 1)], 1)


def token_level_joint_sample(model: Any, prefix: Sequences, *, candidates: int, completions: int,
                             generator: torch.Generator | None, max_length: int = 128,
                             batch_size: int = 4096) -> TokenLevelSample:
    r"""One draw per prefix, token by token from Eq. 5 over the base's top ``candidates`` outcomes.

    At step ``t`` (see the module docstring): the base's ``K = candidates`` most likely next
    outcomes ``v`` given :math:`c\,x_{<t}`; for each, :math:`\log \hat N(v)` from ``M = completions``
    base completions of :math:`c\,x_{<t}v` over the remaining horizon (exact when ``v`` is
    ``</s>`` or no horizon is left); ``v`` is drawn with probability
    :math:`\propto p_{LM}(v \mid c, x_{<t}) \hat N(v)` over the ``K`` candidates. A draw stops at
    ``</s>``, or after ``horizon`` tokens (cut there, as the horizon law).

    Args:
        model: the residual model (module docstring); ``model.base.logits`` is used when present
            (else ``2V - 1`` ``base_log_prob`` rows per context), completions come from
            ``model.sample_base`` cut to the remaining horizon.
        prefix: ``P`` prefixes (on the model's device).
        candidates: ``K`` in ``[1, V]``.
        completions: ``M >= 1`` completions per candidate.
        generator: the only random source.
        max_length: longest draw when ``model.horizon`` is ``None`` (a draw still running raises).
        batch_size: rows per base-sampling / energy call.

    Returns:
        :class:`TokenLevelSample`. Cost: per generated token ``P K M`` completions and energies.
    """
    prefix = Sequences.coerce(prefix, name="prefix", pairs=False, expected="an ebms.sequences.Sequences")
    K = check_int(candidates, "candidates", minimum=1)
    M = check_int(completions, "completions", minimum=1)
    horizon = model.horizon
    own = model.vocab_size if isinstance(model, HasVocabSize) else None
    vocab = int(own or model.base.vocab_size)
    limit = check_int(max_length, "max_length", minimum=1) if horizon is None else int(horizon)
    if K > vocab:
        raise ValueError(f"candidates: expected at most the vocabulary size {vocab}; got {K}")
    P, device = prefix.batch_size, prefix.device
    x = Sequences(torch.zeros(P, limit, dtype=torch.long, device=device), torch.zeros(P, dtype=torch.long,
                                                                                      device=device), validate=False)
    steps = torch.zeros(P, limit + 1, dtype=torch.float64, device=device)
    alive = torch.ones(P, dtype=torch.bool, device=device)
    with torch.no_grad():
        for t in range(limit):
            rows = alive.nonzero().squeeze(1)
            if rows.numel() == 0:
                break
            c, h = prefix[rows], x[rows]
            logp = _next_log_probs(model, join_rows(c, h), vocab)  # (A, V)
            top_lp, top_v = logp.topk(K, -1)  # (A, K)
            log_n = _candidate_log_n(model, c, h, top_v, M, limit - t - 1, horizon is None, generator, batch_size)
            score = (top_lp + log_n).masked_fill(top_lp == -math.inf, -math.inf)
            pick = resample(score, generator)
            v = top_v.gather(1, pick.unsqueeze(1)).squeeze(1)
            steps[rows, t] = (score.log_softmax(-1)).gather(1, pick.unsqueeze(1)).squeeze(1)
            ended = v == 0
            go = rows[~ended]
            x.tokens[go, t] = v[~ended]
            x.lengths[go] = t + 1
            alive[rows[ended]] = False
    if horizon is None and bool(alive.any()):
        raise ValueError(f"max_length: {int(alive.sum())} of {P} draws had not ended after {limit} tokens")
    width = int(x.lengths.max()) if P else 0
    return TokenLevelSample(Sequences(x.tokens[:, :width], x.lengths, validate=False), steps[:, : width + 1])


def _candidate_log_n(model: Any, c: Sequences, h: Sequences, top_v: Tensor, M: int, remaining: int,
                     unbounded: bool, generator: torch.Generator | None, batch_size: int) -> Tensor:
    r"""``(A, K)`` float64 :math:`\log \hat N(v)` of every candidate (exact for ``</s>`` and no horizon left)."""
    A, K = top_v.shape
    flat_v = top_v.reshape(-1)
    cc, hh = repeat_rows(c, K), repeat_rows(h, K)
    ext = join_rows(hh, Sequences(flat_v.unsqueeze(1), (flat_v != 0).long(), validate=False))
    out = torch.empty(A * K, dtype=torch.float64, device=top_v.device)
    exact = (flat_v == 0) | (remaining == 0 and not unbounded)
    idx = exact.nonzero().squeeze(1)
    if idx.numel():
        out[idx] = negative_energies(model, cc[idx], ext[idx], batch_size=batch_size)
    idx = (~exact).nonzero().squeeze(1)
    per_call = max(1, batch_size // M)
    for start in range(0, idx.numel(), per_call):
        sel = idx[start:start + per_call]
        ce, xe = repeat_rows(cc[sel], M), repeat_rows(ext[sel], M)
        tail = model.sample_base(join_rows(cc[sel], ext[sel]), M, generator=generator)
        if not unbounded:  # the first ``remaining`` tokens of a horizon draw are a ``remaining``-horizon draw
            tail = Sequences(tail.tokens, tail.lengths.clamp(max=remaining), validate=False)
        ne = negative_energies(model, ce, join_rows(xe, tail), batch_size=batch_size).view(-1, M)
        out[sel] = torch.logsumexp(ne, -1) - math.log(M)
    return out.view(A, K)
