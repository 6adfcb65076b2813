r"""N-best rescoring with a sentence LM: combined scores, weight tuning, WER with bootstrap intervals.

Each hypothesis ``h`` of an utterance gets the combined score (log-likelihoods, higher is better)

.. math::

    S(h) = \log p_{AM}(\text{audio} \mid h) + \lambda \log p_{LM}(h) + \beta\,|h|,

``|h|`` its number of words. ``λ`` (``lm_weight``) is the LM scale (Kaldi's ``LMWT`` with the
acoustic scale folded in); ``β`` (``length_penalty``) is a per-word *bonus* when positive and a
penalty when negative, so Kaldi's word insertion penalty ``wip`` is ``β = -wip``. The rescored
output is ``argmax_h S(h)`` per utterance, ties going to the better first-pass rank. For a TRF
``log p = log π_l + U - ζ_l`` (its length terms matter because the hypotheses differ in length);
for a globally normalised ELM the single ``log Z`` shifts all hypotheses alike and cancels.

* :func:`lm_scores` — ``log p_LM`` of every hypothesis: a sentence LM (``lm.log_prob(Sequences)
  -> (B,)``, the ``ebms.distributions`` contract, fed through ``vocabulary.encode``) or a plain
  function ``list[list[str]] -> (B,)``, called on length-sorted batches of all hypotheses.
* :func:`hypothesis_errors` — edit distance of every hypothesis to its reference (computed once;
  every WER below is then a gather and a sum).
* :func:`tune_weights` — grid search of ``(λ, β)`` minimising the WER of a dev set, vectorised
  over the whole grid.
* **Interpolation** of several LMs: pass ``lm`` as named columns (``{"kn5": s1, "trf": s2}`` or
  ``[("kn5", s1), ("trf", s2)]``) and ``lm_weight`` as ``{name: λ}``; the score is
  ``acoustic + Σ_k λ_k log p_k(h) + β|h|`` (log-linear). :func:`tune_weights` then returns an
  :class:`InterpolationResult` (exhaustive grid, or coordinate descent from the best single LM on
  large grids: :mod:`ebms.metrics._interpolation`).
* :func:`evaluate_rescoring` — WER of the rescored, first-pass (rank 1) and oracle (fewest errors)
  hypotheses, utterance-level bootstrap intervals and a paired bootstrap of rescored against
  first pass (Bisani & Ney, 2004: :func:`bootstrap_wer`, :func:`paired_bootstrap`).
* :func:`simulate_nbest` — a **simulated** n-best set from plain sentences (the harness's test
  bed; see :mod:`ebms.metrics._nbest_sim`).

References: Ou (2024), "Energy-Based Models with Applications to Speech and Language Processing",
§3.3 (ELMs rescoring n-best lists with ``AM + λ LM`` scores); Bisani, Ney (2004), "Bootstrap
estimates for confidence intervals in ASR performance evaluation", ICASSP.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, overload

import torch
from torch import Tensor

from ebms._checks import check_int
from ebms.capabilities import SupportsLogProb
from ebms.data.nbest import NBest
from ebms.data.text import Vocabulary
from ebms.metrics._interpolation import (
    MAX_GRID,
    MAX_SWEEPS,
    InterpolationResult,
    _number,
    interpolated,
    is_named,
    named_axes,
    named_weights,
    search_weights,
)
from ebms.metrics._nbest_bootstrap import BootstrapInterval, PairedBootstrap, bootstrap_wer, paired_bootstrap
from ebms.metrics._nbest_sim import cmu_pronunciations, simulate_nbest
from ebms.metrics.error_rate import ErrorRate, edit_distance, error_rate

__all__ = ["BootstrapInterval", "InterpolationResult", "LMColumns", "PairedBootstrap", "RescoringResult",
           "TuningResult", "bootstrap_wer", "combined_scores", "cmu_pronunciations", "evaluate_rescoring",
           "hypothesis_errors", "lm_scores", "paired_bootstrap", "simulate_nbest", "tune_weights"]

#: named LM score columns for interpolation: ``{name: (N,) scores}`` or ``[(name, (N,) scores), ...]``.
LMColumns = Mapping[str, Tensor] | Sequence[tuple[str, Tensor]]


def _nbest(x: object) -> NBest:
    if not isinstance(x, NBest):
        raise TypeError(f"nbest: expected an ebms.data.nbest.NBest; got {type(x).__name__}")
    return x


def _per_hypothesis(x: object, nbest: NBest, name: str) -> Tensor:
    if not isinstance(x, Tensor) or not x.dtype.is_floating_point:
        raise TypeError(f"{name}: expected a floating-point tensor (one score per hypothesis); got {type(x).__name__}")
    if x.shape != (len(nbest),):
        raise ValueError(f"{name}: expected shape ({len(nbest)},) (one per hypothesis); got {tuple(x.shape)}")
    if not bool(torch.isfinite(x).all()):
        raise ValueError(f"{name}: expected finite scores; got a non-finite one at hypothesis "
                         f"{int((~torch.isfinite(x)).nonzero()[0])}")
    return x.detach().double().cpu()


def _columns(lm: Any, nbest: NBest) -> dict[str, Tensor]:
    """Named LM columns, each checked like a single ``lm`` (``lm[name]`` in messages), in the order given."""
    items = list(lm.items()) if isinstance(lm, Mapping) else list(lm)
    if not items:
        raise ValueError("lm: expected at least one named LM score tensor; got none")
    out: dict[str, Tensor] = {}
    for k, item in enumerate(items):
        if not isinstance(item, tuple) or len(item) != 2:
            raise TypeError(f"lm: expected a tensor, a mapping {{name: (N,) scores}} or a sequence of (name, scores) "
                            f"pairs; got {type(item).__name__} at position {k}")
        key, col = item
        if not isinstance(key, str) or not key:
            raise ValueError(f"lm: expected non-empty str names; got {key!r} at position {k}")
        if key in out:
            raise ValueError(f"lm: expected distinct names; got {key!r} twice")
        out[key] = _per_hypothesis(col, nbest, f"lm[{key!r}]")
    return out


def lm_scores(hypotheses: NBest | Sequence[Sequence[str]], lm: Any, *, vocabulary: Any = None,
              batch_size: int = 256, device: torch.device | str | None = None, across_ranks: bool = False) -> Tensor:
    """``(N,)`` float64 LM log-probabilities of all hypotheses, in length-sorted batches.

    Args:
        hypotheses: an :class:`~ebms.data.nbest.NBest` or ``N`` word lists.
        lm: an object with ``log_prob(Sequences) -> (B,)`` (a sentence LM of
            :mod:`ebms.distributions`; ``vocabulary`` required), or a callable
            ``list[list[str]] -> (B,)`` (tensor or list of floats).
        vocabulary: a :class:`ebms.data.text.Vocabulary` (its ``encode(list[list[str]]) -> Sequences``
            turns the hypotheses into the lm's input).
        batch_size: hypotheses per call (>= 1); batches hold hypotheses of similar length.
        device: where the encoded batches go (the LM's device).
        across_ranks: under ``torchrun`` (an initialised default process group), rank ``r`` scores
            batches ``r, r + W, ...`` of the length-sorted batches and the scores are gathered, so
            every rank returns the ``(N,)`` scores one process computes (the same batches, each
            scored by one rank); the rest of rescoring (combined scores, WER, tuning) is cheap and
            runs whole on every rank. Without a process group, the same as ``False``.

    Raises:
        TypeError: ``lm`` neither has ``log_prob`` nor is callable, or ``vocabulary`` is missing.
        ValueError: an output of the wrong shape or a non-finite score (the hypothesis is named).
    """
    hyps = [list(h) for h in (hypotheses.hypotheses if isinstance(hypotheses, NBest) else hypotheses)]
    check_int(batch_size, "batch_size", minimum=1)
    if isinstance(lm, SupportsLogProb):
        if not isinstance(vocabulary, Vocabulary):
            raise TypeError(f"vocabulary: an lm with log_prob needs a vocabulary with encode(list[list[str]]) -> "
                            f"Sequences; got {type(vocabulary).__name__}")

        def call(batch: list[list[str]]) -> Any:
            seqs = vocabulary.encode(batch)
            return lm.log_prob(seqs.to(device) if device is not None else seqs)
    elif callable(lm):
        call = lm
    else:
        raise TypeError(f"lm: expected an object with log_prob(Sequences) or a callable list[list[str]] -> (B,); "
                        f"got {type(lm).__name__}")
    order = sorted(range(len(hyps)), key=lambda i: len(hyps[i]))
    out = torch.empty(len(hyps), dtype=torch.float64)
    starts = list(range(0, len(order), batch_size))
    rank, world = _rank_world() if across_ranks else (0, 1)
    with torch.no_grad():
        for start in starts[rank::world]:
            idx = order[start:start + batch_size]
            got = call([hyps[i] for i in idx])
            got = (got if isinstance(got, Tensor) else torch.as_tensor(got)).detach().double().cpu()
            if got.shape != (len(idx),):
                raise ValueError(f"lm: expected shape ({len(idx)},) (one log-probability per hypothesis); "
                                 f"got {tuple(got.shape)}")
            bad = ~torch.isfinite(got)
            if bool(bad.any()):
                k = idx[int(bad.nonzero()[0])]
                raise ValueError(f"lm: expected finite log-probabilities; got {float(got[bad][0])} for hypothesis "
                                 f"{k} ({' '.join(hyps[k])!r}); smooth the LM or map unknown words to <unk>")
            out[idx] = got
    if world > 1:  # each hypothesis was scored on exactly one rank: gather the scores in place
        import torch.distributed as dist

        parts: list[Any] = [None] * world
        dist.all_gather_object(parts, {s: out[order[s:s + batch_size]] for s in starts[rank::world]})
        for part in parts:
            for start, got in part.items():
                out[order[start:start + batch_size]] = got
    return out


def _rank_world() -> tuple[int, int]:
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    return 0, 1


def hypothesis_errors(nbest: NBest, references: Mapping[str, Sequence[str]]) -> tuple[Tensor, Tensor]:
    """``(errors (N,), ref_lengths (U,))`` int64: edit distance of each hypothesis to its reference.

    Cost: one :func:`~ebms.metrics.error_rate.edit_distance` per hypothesis, ``O(N L^2)``.

    Raises:
        ValueError: an utterance of ``nbest`` without a reference.
    """
    nbest = _nbest(nbest)
    missing = [u for u in nbest.utt_ids if u not in references]
    if missing:
        raise ValueError(f"references: expected one for every utterance; got none for {missing[:3]} "
                         f"({len(missing)} missing)")
    bad = next((u for u in nbest.utt_ids if isinstance(references[u], str)), None)
    if bad is not None:
        raise TypeError(f"references: expected word lists; got a str for {bad!r} (split it: text.split())")
    refs = [list(references[u]) for u in nbest.utt_ids]
    errors = [edit_distance(refs[u], list(h))[0] for u, h in zip(nbest.utterance.tolist(), nbest.hypotheses)]
    return torch.tensor(errors, dtype=torch.long), torch.tensor([len(r) for r in refs], dtype=torch.long)


def _errors(nbest: NBest, references: Mapping[str, Sequence[str]],
            errors: tuple[Tensor, Tensor] | None) -> tuple[Tensor, Tensor]:
    if errors is None:
        return hypothesis_errors(nbest, references)
    err, ref_len = errors
    if not isinstance(err, Tensor) or not isinstance(ref_len, Tensor) or err.shape != (len(nbest),) \
            or ref_len.shape != (nbest.num_utterances,):
        raise ValueError(f"errors: expected hypothesis_errors(nbest, references), tensors of shapes ({len(nbest)},) "
                         f"and ({nbest.num_utterances},); got {getattr(err, 'shape', err)!s}, "
                         f"{getattr(ref_len, 'shape', ref_len)!s}")
    return err.long(), ref_len.long()


def combined_scores(nbest: NBest, lm: Tensor | LMColumns | None = None, *,
                    lm_weight: float | Mapping[str, float] = 1.0, length_penalty: float = 0.0) -> Tensor:
    """``(N,)`` float64 ``acoustic + lm_weight * lm + length_penalty * |h|``; ``lm=None`` uses ``nbest.lm``.

    With named columns ``lm`` (:data:`LMColumns`) and ``lm_weight = {name: λ_k}`` (one finite weight
    per LM, no other names) it is ``acoustic + Σ_k λ_k lm[k] + length_penalty * |h|``, summed in the
    order of ``lm``; one column reproduces the single-LM score exactly.
    """
    nbest = _nbest(nbest)
    if is_named(lm):
        cols = _columns(lm, nbest)
        return interpolated(nbest.acoustic, cols, named_weights(lm_weight, list(cols)), nbest.word_counts().double(),
                            _number(length_penalty, "length_penalty"))
    lm_t = nbest.lm if lm is None else _per_hypothesis(lm, nbest, "lm")
    return (nbest.acoustic + _number(lm_weight, "lm_weight") * lm_t
            + _number(length_penalty, "length_penalty") * nbest.word_counts().double())


def _best(nbest: NBest, scores: Tensor) -> Tensor:
    """``(..., U)`` flat indices of the highest score per utterance; ``scores`` is ``(..., N)``."""
    sizes = nbest.sizes()
    start = torch.cumsum(sizes, 0) - sizes
    pos = torch.arange(len(nbest)) - start[nbest.utterance]
    padded = scores.new_full((*scores.shape[:-1], nbest.num_utterances, int(sizes.max())), -math.inf)
    padded[..., nbest.utterance, pos] = scores
    return start + padded.argmax(-1)  # argmax returns the first maximum: the better rank on ties


@dataclass(frozen=True)
class TuningResult:
    """The ``(λ, β)`` of lowest dev WER and the whole grid.

    Attributes:
        lm_weight, length_penalty: the best pair (the first in grid order, λ outer, on ties).
        wer: its dev WER (a fraction).
        grid: ``(len(lm_weights), len(length_penalties))`` float64 dev WER of every pair.
        lm_weights, length_penalties: the grid axes.
    """

    lm_weight: float
    length_penalty: float
    wer: float
    grid: Tensor
    lm_weights: tuple[float, ...]
    length_penalties: tuple[float, ...]


@overload
def tune_weights(nbest: NBest, references: Mapping[str, Sequence[str]], lm: Tensor | None = None, *,
                 lm_weights: Sequence[float], length_penalties: Sequence[float] = (0.0,),
                 errors: tuple[Tensor, Tensor] | None = None, max_grid: int = MAX_GRID,
                 max_sweeps: int = MAX_SWEEPS) -> TuningResult: ...


@overload
def tune_weights(nbest: NBest, references: Mapping[str, Sequence[str]], lm: LMColumns, *,
                 lm_weights: Sequence[float] | Mapping[str, Sequence[float]],
                 length_penalties: Sequence[float] = (0.0,), errors: tuple[Tensor, Tensor] | None = None,
                 max_grid: int = MAX_GRID, max_sweeps: int = MAX_SWEEPS) -> InterpolationResult: ...


def tune_weights(nbest: NBest, references: Mapping[str, Sequence[str]], lm: Tensor | LMColumns | None = None, *,
                 lm_weights: Sequence[float] | Mapping[str, Sequence[float]],
                 length_penalties: Sequence[float] = (0.0,), errors: tuple[Tensor, Tensor] | None = None,
                 max_grid: int = MAX_GRID, max_sweeps: int = MAX_SWEEPS) -> TuningResult | InterpolationResult:
    """Grid search of ``(lm_weight, length_penalty)`` minimising corpus WER on a dev set.

    Args:
        nbest, references: the dev n-best lists and their references.
        lm: ``(N,)`` LM log-probabilities (:func:`lm_scores`); ``None`` uses ``nbest.lm``. Named
            columns (:data:`LMColumns`) tune a log-linear interpolation instead and return an
            :class:`InterpolationResult` (weights per LM).
        lm_weights, length_penalties: the grid axes (finite numbers, at least one each). With named
            ``lm``, ``lm_weights`` is one axis shared by every LM or ``{name: axis}``.
        errors: :func:`hypothesis_errors` of ``nbest`` if already computed.
        max_grid, max_sweeps: interpolation only: grids of at most ``max_grid`` points
            (``Π_k |λ_k axis| · |length_penalties|``) are searched exhaustively, larger ones by block
            coordinate descent from the best single LM, at most ``max_sweeps`` sweeps
            (:mod:`ebms.metrics._interpolation`; ties: the first point in grid order, the first LM's
            axis outermost and ``β`` innermost).

    Cost: the edit distances once, then ``O(G N)`` for a grid of ``G`` pairs (points).
    """
    nbest = _nbest(nbest)
    if is_named(lm):
        cols = _columns(lm, nbest)
        axes = named_axes(lm_weights, list(cols))
        betas = tuple(_number(v, "length_penalties") for v in length_penalties)
        if not betas:
            raise ValueError("length_penalties: expected at least one value; got 0")
        err_i, ref_len_i = _errors(nbest, references, errors)
        total_i = int(ref_len_i.sum())
        if total_i == 0:
            raise ValueError("references: expected at least one reference word in total; got only empty references")
        return search_weights(cols, nbest.acoustic, nbest.word_counts().double(), axes, betas,
                              lambda s: err_i[_best(nbest, s)].sum(-1), total_i, max_grid=max_grid,
                              max_sweeps=max_sweeps)
    if isinstance(lm_weights, Mapping):
        raise TypeError(f"lm_weights: a mapping of per-LM axes needs named LM columns (lm={{name: scores}}); got "
                        f"lm of type {type(lm).__name__}")
    lam = tuple(_number(v, "lm_weights") for v in lm_weights)
    beta = tuple(_number(v, "length_penalties") for v in length_penalties)
    if not lam or not beta:
        raise ValueError(f"lm_weights, length_penalties: expected at least one value each; got {len(lam)} and "
                         f"{len(beta)}")
    err, ref_len = _errors(nbest, references, errors)
    base = nbest.acoustic
    lm_t = nbest.lm if lm is None else _per_hypothesis(lm, nbest, "lm")
    words = nbest.word_counts().double()
    total = int(ref_len.sum())
    if total == 0:
        raise ValueError("references: expected at least one reference word in total; got only empty references")
    b = torch.tensor(beta, dtype=torch.float64)
    rows = []
    for lw in lam:  # (P, N) scores per LM weight keeps memory at O(P U K)
        scores = base + lw * lm_t + b[:, None] * words
        rows.append(err[_best(nbest, scores)].sum(-1).double() / total)
    grid = torch.stack(rows)
    k = int(grid.flatten().argmin())
    i, j = divmod(k, len(beta))
    return TuningResult(lam[i], beta[j], float(grid[i, j]), grid, lam, beta)


@dataclass(frozen=True)
class RescoringResult:
    """WER of a rescored n-best set beside its first pass and oracle.

    Attributes:
        lm_weight, length_penalty: the weights used (``lm_weight`` is 1.0 for an interpolation).
        chosen: ``(U,)`` flat hypothesis indices picked by the combined score.
        hypotheses: the picked word sequences, one per utterance.
        rescored, first_pass, oracle: :class:`~ebms.metrics.error_rate.ErrorRate` of the rescored,
            rank-1 and fewest-error hypotheses.
        rescored_interval, first_pass_interval: :class:`BootstrapInterval` of the two WERs.
        comparison: :class:`PairedBootstrap` of rescored (B) against first pass (A).
        rescored_errors, first_pass_errors, oracle_errors, ref_lengths: ``(U,)`` int64 per-utterance
            counts, for a paired bootstrap against another system.
        lm_weights: ``{name: λ_k}`` of an interpolation of named LMs; ``None`` for one LM.
    """

    lm_weight: float
    length_penalty: float
    chosen: Tensor
    hypotheses: list[tuple[str, ...]]
    rescored: ErrorRate
    first_pass: ErrorRate
    oracle: ErrorRate
    rescored_interval: BootstrapInterval
    first_pass_interval: BootstrapInterval
    comparison: PairedBootstrap
    rescored_errors: Tensor
    first_pass_errors: Tensor
    oracle_errors: Tensor
    ref_lengths: Tensor
    lm_weights: dict[str, float] | None = None

    def summary(self) -> dict[str, float]:
        """Percent figures for a log line or a JSON record (an interpolation: ``lm_weight_<name>`` per LM)."""
        if self.lm_weights is not None:
            out = {k: v for k, v in self._summary().items() if k != "lm_weight"}
            return {**out, **{f"lm_weight_{k}": v for k, v in self.lm_weights.items()}}
        return self._summary()

    def _summary(self) -> dict[str, float]:
        return {"first_pass_wer": self.first_pass.percent, "rescored_wer": self.rescored.percent,
                "oracle_wer": self.oracle.percent, "rescored_low": 100 * self.rescored_interval.low,
                "rescored_high": 100 * self.rescored_interval.high, "delta": 100 * self.comparison.delta,
                "delta_low": 100 * self.comparison.low, "delta_high": 100 * self.comparison.high,
                "poi": self.comparison.poi, "lm_weight": self.lm_weight, "length_penalty": self.length_penalty}


def evaluate_rescoring(nbest: NBest, references: Mapping[str, Sequence[str]], lm: Tensor | LMColumns | None = None,
                       *, lm_weight: float | Mapping[str, float] = 1.0, length_penalty: float = 0.0, samples: int = 1000,
                       level: float = 0.95, generator: torch.Generator | None = None,
                       errors: tuple[Tensor, Tensor] | None = None) -> RescoringResult:
    """Rescore ``nbest`` with fixed weights and report WERs with bootstrap intervals.

    Args:
        nbest, references: the test n-best lists and their references.
        lm: ``(N,)`` LM log-probabilities; ``None`` uses ``nbest.lm``; named columns
            (:data:`LMColumns`) for an interpolation, with ``lm_weight = {name: λ_k}``.
        lm_weight, length_penalty: ``λ`` and ``β`` (e.g. from :func:`tune_weights` on dev).
        samples, level, generator: the bootstrap (:func:`bootstrap_wer`); both intervals and the
            paired comparison come from one generator, in that order.
        errors: :func:`hypothesis_errors` of ``nbest`` if already computed.
    """
    nbest = _nbest(nbest)
    err, ref_len = _errors(nbest, references, errors)
    chosen = _best(nbest, combined_scores(nbest, lm, lm_weight=lm_weight, length_penalty=length_penalty))
    first = nbest.first()
    oracle = _best(nbest, -err.double())
    refs = [list(references[u]) for u in nbest.utt_ids]

    def rate(idx: Tensor) -> ErrorRate:
        return error_rate(refs, [list(nbest.hypotheses[i]) for i in idx.tolist()])

    e_res, e_first, e_oracle = err[chosen], err[first], err[oracle]
    weights = named_weights(lm_weight, list(_columns(lm, nbest))) if is_named(lm) else None
    return RescoringResult(
        1.0 if weights is not None else _number(lm_weight, "lm_weight"), float(length_penalty), chosen, [nbest.hypotheses[i] for i in chosen.tolist()],
        rate(chosen), rate(first), rate(oracle),
        bootstrap_wer(e_res, ref_len, samples=samples, level=level, generator=generator),
        bootstrap_wer(e_first, ref_len, samples=samples, level=level, generator=generator),
        paired_bootstrap(e_first, e_res, ref_len, samples=samples, level=level, generator=generator),
        e_res, e_first, e_oracle, ref_len, weights)

