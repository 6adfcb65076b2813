r"""Per-length log normalisers :math:`\log Z_l` of sentence energies (TRF, GN-ELM), re-estimated after training.

For a sentence energy :math:`E` (a TRF's or GN-ELM's field) and each length :math:`l`,

.. math::  Z_l = \sum_{x \in \{1..V-1\}^l} e^{-E(x)} .

A TRF keeps :math:`\zeta_l \approx \log Z_l` as parameters fitted during training (AugSA, NCE),
which are themselves noisy estimates; its perplexity is only as good as they are. The functions
here estimate :math:`\log Z_l` afresh, with a length-conditional proposal :math:`q(x \mid l)`
(``conditional_on_length``: ``sample(n, lengths=, generator=)`` and ``log_prob(x) = log q(x | l)``,
e.g. ``NGram.fit(train, V, order=2, end=False)``, ``NGram.uniform(V, end=False)``, or an
autoregressive LM with ``</s>`` removed, :class:`LengthConditionalLM`):

* :func:`importance_log_z_per_length`: :math:`\log\hat Z_l = \log\frac1n\sum_i e^{-E(x_i) - \log q(x_i \mid l)}`,
  :math:`x_i \sim q(\cdot \mid l)` (Neal 2001, §2);
* :func:`ais_log_z_per_length`: annealed importance sampling from :math:`q(\cdot \mid l)` to
  :math:`e^{-E}` along :math:`\log f_\beta = (1-\beta)\log q - \beta E` at fixed length, moved by a
  within-length kernel; with ``target_samples`` also reverse AIS, a stochastic upper bound, and
  the bracket of :func:`~ebms.estimators.ais_bracket`.

Both return a :class:`LengthLogZ`: one :class:`~ebms.estimators.Estimate` per length (delta-method
``stderr``, Kish ``ess``); :meth:`LengthLogZ.total` gives a GN-ELM's single
:math:`\log Z = \log\sum_l Z_l` with its delta-method stderr. Each per-length estimate is a
stochastic lower bound (:math:`\mathbb E\,\hat Z_l = Z_l`, so :math:`\mathbb E\log\hat Z_l \le
\log Z_l`); when ``ess`` is a small fraction of the draws, both it and its stderr are too small.

References:
    Neal (2001), "Annealed importance sampling", Statistics and Computing 11(2).
    Burda, Grosse & Salakhutdinov (2015), "Accurate and conservative estimates of MRF
    log-likelihood using reverse annealing", AISTATS.
    Wang, Ou & Tan (2018), "Learning trans-dimensional random fields with applications to language
    modeling", IEEE TPAMI 40(4) (per-length normalisers of TRF LMs).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import torch
from torch import Tensor

from ebms._checks import check_int, check_positive
from ebms._progress import progress_bar
from ebms.estimators._base import Estimate
from ebms.estimators._ranks import gather_pieces, my_pieces, piece_generator
from ebms.estimators._seq_ais import annealed_weights
from ebms.estimators._seq_common import (
    AnnealedSentenceEnergy,
    annealed_energy,
    boundary_rows,
    check_proposal,
    draw,
    energy_of,
    per_length,
    proposal_log_prob,
    resolve_lengths,
    resolve_target,
)
from ebms.estimators._seq_proposal import LengthConditionalLM
from ebms.estimators._seq_result import LengthLogZ
from ebms.estimators.ais import validate_betas
from ebms.samplers import Sampler
from ebms.samplers.trans_dimensional import TransDimensional
from ebms.sequences import Sequences
from ebms.spaces import TokenSequences

__all__ = ["LengthConditionalLM", "LengthLogZ", "ais_log_z_per_length", "importance_log_z_per_length",
           "log_z_per_length_across_ranks"]


def _repeat(lengths: tuple[int, ...], n: int) -> Tensor:
    """Each length ``n`` times, ``(len(lengths) n,)`` on the CPU (the proposal moves it to its device)."""
    return torch.tensor(lengths, dtype=torch.long).repeat_interleave(n)


def importance_log_z_per_length(
    model: Any,
    proposal: Any,
    n_samples: int,
    *,
    lengths: int | Iterable[int] | None = None,
    space: TokenSequences | None = None,
    generator: torch.Generator | None = None,
    batch_size: int = 1 << 14,
    progress: bool = False,
) -> LengthLogZ:
    r"""Importance-sampling estimates of :math:`\log Z_l` for every length (module docstring).

    Args:
        model: a :class:`~ebms.models.trf.TRF` / :class:`~ebms.models.trf.GNELM` (its ``energy``:
            no length prior, no :math:`\zeta`) or a sentence energy ``E(Sequences) -> (B,)``.
        proposal: a length-conditional law :math:`q(x \mid l)` (module docstring).
        n_samples: draws per length, ``>= 2``.
        lengths: the lengths to estimate (default: all of the space, from 1).
        space: the :class:`~ebms.spaces.TokenSequences`; default ``model.space``.
        generator: random source of the draws.
        batch_size: sentences per energy call.
        progress: show a progress bar over the batches.

    Returns:
        :class:`LengthLogZ` (``method="importance"``), each estimate with delta-method ``stderr``
        and Kish ``ess``.

    Cost: ``n_samples`` energy and proposal evaluations per length.
    """
    energy, space = resolve_target(model, space)
    proposal = check_proposal(proposal)
    ls = resolve_lengths(lengths, space)
    check_int(n_samples, "n_samples", minimum=2)
    check_int(batch_size, "batch_size", minimum=1)
    rows = _repeat(ls, n_samples)
    parts = []
    starts = range(0, rows.shape[0], batch_size)
    for start in progress_bar(starts, desc="importance log Z_l", enabled=progress, leave=False, unit="batch"):
        x = draw(proposal, rows[start:start + batch_size], generator)
        parts.append(-energy_of(energy, x) - proposal_log_prob(proposal, x))
    settings = {"method": "importance", "proposal": type(proposal).__name__, "n_samples": n_samples}
    found = per_length(torch.cat(parts), rows, ls, "log weights -E(x) - log q(x | l)", settings)
    return LengthLogZ(ls, tuple(found[n][0] for n in ls), "importance", tuple(found[n][1] for n in ls))


def _default_kernel(space: TokenSequences) -> TransDimensional:
    probs = torch.ones(space.vocab_size, dtype=torch.float64)
    probs[0] = 0.0
    return TransDimensional(token_probs=probs, jump=False)


def _check_kernel(kernel: Sampler | None, space: TokenSequences) -> Sampler:
    if kernel is None:
        return _default_kernel(space)
    if not isinstance(kernel, Sampler) or not kernel.accepts_sequences:
        raise TypeError("kernel: expected an ebms.samplers.Sampler over Sequences that keeps lengths (e.g. "
                        f"TransDimensional(jump=False), Gibbs(), MetropolisHastings()); got {kernel!r}")
    if isinstance(kernel, TransDimensional) and kernel.jump:
        raise ValueError("kernel: AIS runs at fixed lengths; build the trans-dimensional sampler with jump=False")
    return kernel


def _groups(ls: tuple[int, ...], n: int, batch_size: int) -> list[tuple[int, ...]]:
    per = max(1, batch_size // n)
    return [ls[i:i + per] for i in range(0, len(ls), per)]


def ais_log_z_per_length(
    model: Any,
    proposal: Any,
    n_chains: int,
    betas: Sequence[float] | Tensor,
    *,
    lengths: int | Iterable[int] | None = None,
    kernel: Sampler | None = None,
    steps_per_temperature: int = 1,
    target_samples: Sequences | None = None,
    z: float = 2.0,
    space: TokenSequences | None = None,
    generator: torch.Generator | None = None,
    batch_size: int = 1 << 14,
    progress: bool = False,
) -> LengthLogZ:
    r"""AIS estimates of :math:`\log Z_l` for every length, from :math:`q(\cdot \mid l)` to :math:`e^{-E}`.

    At each temperature :math:`\beta_k` the chains of all lengths move together by
    ``steps_per_temperature`` steps of ``kernel`` on :math:`\beta E - (1-\beta)\log q` (an energy
    carrying the model's space; sentences holding the boundary id get :math:`+\infty`), and gain
    :math:`(\beta_k - \beta_{k-1})(-E(x) - \log q(x \mid l))`. :math:`Z_0 = 1` since ``q`` is
    normalised at each length.

    Args:
        model, proposal, lengths, space: as in :func:`importance_log_z_per_length`.
        n_chains: AIS chains per length, ``>= 2``.
        betas: the schedule (:func:`~ebms.estimators.linear_betas`, ...; ``[0, 1]`` is plain IS).
        kernel: a within-length kernel over ``Sequences`` that keeps lengths: e.g.
            ``TransDimensional(jump=False, ...)`` (its MH moves, class proposals or multiple trials),
            :class:`~ebms.samplers.Gibbs` (exact conditionals, ``V`` sentences per position),
            :class:`~ebms.samplers.MetropolisHastings`. Default: ``TransDimensional(jump=False)``
            proposing tokens ``1..V-1`` uniformly (one MH sweep per step).
        steps_per_temperature: kernel steps per transition, ``>= 1``.
        target_samples: optional draws from the model at their lengths (exact, long-run chains, or
            data for a well-fitted model); lengths holding at least 2 of them also get reverse AIS
            (a stochastic upper bound when they are exact) and the bracket of
            :func:`~ebms.estimators.ais_bracket`: ``lower = min(fwd, rev) - z se``, ``upper = max + z se``.
        z: standard errors widening the bracket.
        generator: random source for the draws and the kernel.
        batch_size: chains run together (lengths are grouped to fit).
        progress: progress bars over temperatures.

    Returns:
        :class:`LengthLogZ` (``method="ais"``, or ``"ais bracket"`` with ``target_samples``): the
        forward estimate, its stderr and ESS; with a reverse run, ``lower``/``upper`` and
        ``settings`` ``reverse``, ``reverse_stderr``, ``gap``, ``crossed``.

    Cost: per length, ``n_chains (K + 1)`` energy and proposal evaluations plus ``K - 1`` kernel
    transitions (``K`` = steps of the schedule); the reverse run the same for its samples.
    """
    energy, space = resolve_target(model, space)
    proposal = check_proposal(proposal)
    ls = resolve_lengths(lengths, space)
    check_int(n_chains, "n_chains", minimum=2)
    check_int(batch_size, "batch_size", minimum=1)
    steps = check_int(steps_per_temperature, "steps_per_temperature", minimum=1)
    zz = check_positive(z, "z", allow_zero=True)
    bs = validate_betas(betas)
    kernel = _check_kernel(kernel, space)
    target = annealed_energy(model, energy, proposal, space)
    settings = {"method": "ais", "proposal": type(proposal).__name__, "n_chains": n_chains,
                "num_steps": len(bs) - 1, "steps_per_temperature": steps, "kernel": repr(kernel)}
    fwd: dict[int, tuple[Estimate, Tensor]] = {}
    for group in _groups(ls, n_chains, batch_size):
        rows = _repeat(group, n_chains)
        log_w = annealed_weights(target, kernel, draw(proposal, rows, generator), bs, steps, generator, progress)
        fwd.update(per_length(log_w, rows, group, "forward AIS log weights", settings))
    weights = tuple(fwd[n][1] for n in ls)
    if target_samples is None:
        return LengthLogZ(ls, tuple(fwd[n][0] for n in ls), "ais", weights)
    rev = _reverse(target, kernel, target_samples, ls, bs, steps, space, generator, batch_size, progress, settings)
    out = tuple(_bracket(fwd[n][0], rev[n][0], zz) if n in rev else fwd[n][0] for n in ls)
    return LengthLogZ(ls, out, "ais bracket", weights, tuple(rev[n][1] if n in rev else None for n in ls))


def log_z_per_length_across_ranks(
    estimator: Callable[..., LengthLogZ],
    model: Any,
    proposal: Any,
    *args: Any,
    seed: int,
    lengths: int | Iterable[int] | None = None,
    space: TokenSequences | None = None,
    device: torch.device | str | None = None,
    **options: Any,
) -> LengthLogZ:
    r"""``estimator`` (:func:`importance_log_z_per_length` or :func:`ais_log_z_per_length`) with the lengths
    shared by the ranks of a ``torchrun`` job; every rank returns the estimates of all lengths.

    Length ``l`` is estimated on its own, with a generator (on ``device``, default CPU) seeded from
    ``seed`` and ``l``, by ``estimator(model, proposal, *args, lengths=[l], generator=..., **options)``;
    the lengths (increasing) are dealt round robin to the ranks of the default process group and
    the estimates gathered, so the result equals this call's in one process (with the same
    ``seed``). One process computes the same lengths one after another.

    Args:
        estimator: :func:`importance_log_z_per_length` or :func:`ais_log_z_per_length`.
        model, proposal, space: as in those functions.
        *args: the estimator's other positional arguments (``n_samples``; ``n_chains, betas``).
        seed: the seed every length's generator derives from.
        lengths: the lengths to estimate (default: all of the space, from 1).
        device: where the generators live (the model's device).
        **options: the estimator's other keywords (``batch_size``, ``kernel``, ``target_samples``, ...).

    Example::

        est = log_z_per_length_across_ranks(importance_log_z_per_length, trf, proposal, 4000, seed=0)
    """
    if estimator not in (importance_log_z_per_length, ais_log_z_per_length):
        raise TypeError(f"estimator: expected importance_log_z_per_length or ais_log_z_per_length; got {estimator!r}")
    if "generator" in options:
        raise TypeError("generator: each length draws from its own generator seeded from seed; pass seed only")
    check_int(seed, "seed", minimum=0)
    _, space = resolve_target(model, space)
    ls = resolve_lengths(lengths, space)
    mine = {}
    for n in my_pieces(ls):
        one = estimator(model, proposal, *args, lengths=[n], space=space, generator=piece_generator(seed, n, device),
                        **options)
        rev = one.reverse_log_weights[0] if one.reverse_log_weights is not None else None
        mine[n] = (one.method, one.estimates[0], None if one.log_weights is None else one.log_weights[0].cpu(),
                   None if rev is None else rev.cpu())
    every = gather_pieces(mine)
    methods = {every[n][0] for n in ls}
    method = methods.pop() if len(methods) == 1 else "ais bracket"  # lengths without target samples: plain ais
    weights = tuple(every[n][2] for n in ls)
    reverse = tuple(every[n][3] for n in ls)
    return LengthLogZ(ls, tuple(every[n][1] for n in ls), method,
                      None if any(w is None for w in weights) else weights,  # type: ignore[arg-type]
                      reverse if any(r is not None for r in reverse) else None)


def _reverse(target: AnnealedSentenceEnergy, kernel: Sampler, x: Sequences, ls: tuple[int, ...],
             bs: tuple[float, ...], steps: int, space: TokenSequences, generator: torch.Generator | None,
             batch_size: int, progress: bool, settings: dict[str, Any]) -> dict[int, tuple[Estimate, Tensor]]:
    x = Sequences.coerce(x, name="target_samples", pairs=False, expected="an ebms.sequences.Sequences")
    space.validate(x, "target_samples")
    if bool(boundary_rows(x).any()):
        raise ValueError("target_samples: expected sentences without the boundary id 0")
    x = x[torch.isin(x.lengths, torch.tensor(ls, device=x.device))]
    parts = []
    for start in range(0, x.batch_size, batch_size):
        y = x[start:start + batch_size]
        zero = proposal_log_prob(target.proposal, y) == -math.inf
        if bool(zero.any()):
            raise ValueError(f"target_samples: the proposal gives sentence {start + int(zero.nonzero()[0])} (among "
                             "those of the estimated lengths) probability 0, so reverse AIS cannot start there "
                             "(its base must cover the target)")
        parts.append(annealed_weights(target, kernel, y, bs, steps, generator, progress, reverse=True))
    if not parts:
        return {}
    rev_settings = {**settings, "method": "reverse ais"}
    return per_length(torch.cat(parts), x.lengths, ls, "reverse AIS log weights", rev_settings, sign=-1.0)


def _bracket(fwd: Estimate, rev: Estimate, z: float) -> Estimate:
    """Forward and reverse together, as :func:`~ebms.estimators.ais_bracket` combines them."""
    gap = rev.estimate - fwd.estimate
    lo, hi = (fwd, rev) if gap >= 0 else (rev, fwd)
    settings = {**fwd.settings, "method": "ais bracket", "n_reverse": rev.settings["n"], "forward": fwd.estimate,
                "forward_stderr": fwd.stderr, "reverse": rev.estimate, "reverse_stderr": rev.stderr,
                "reverse_ess": rev.ess, "gap": gap, "crossed": gap < 0, "z": z}
    return Estimate(fwd.estimate, stderr=fwd.stderr, lower=lo.estimate - z * lo.stderr,
                    upper=hi.estimate + z * hi.stderr, ess=fwd.ess, settings=settings)
