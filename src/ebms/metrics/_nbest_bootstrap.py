"""Private: bootstrap intervals for corpus WER (re-exported by :mod:`ebms.metrics.rescoring`).

Bisani & Ney (2004) resample *utterances*, not words: errors within an utterance are correlated,
and the corpus WER is a ratio ``W = sum_u e_u / sum_u n_u`` (errors ``e_u``, reference words
``n_u``). Each of ``S`` bootstrap replicates draws ``U`` utterance indices with replacement and
recomputes ``W*``; the interval is the percentile interval of the replicates (the
``(1 - level) / 2`` and ``(1 + level) / 2`` quantiles, linear interpolation).

For two systems A and B on the same utterances the replicates are *paired*: the same indices
give ``ΔW* = W*_B - W*_A``; the probability of improvement ``poi`` is the fraction of replicates
with ``ΔW* < 0`` (B better; ties count for neither), Bisani & Ney's "probability of improvement".

Cost: ``S x U`` integer draws, done in chunks of 256 replicates (memory ``O(256 U)``).

References: Bisani, Ney (2004), "Bootstrap estimates for confidence intervals in ASR performance
evaluation", ICASSP; Efron, Tibshirani (1993), "An Introduction to the Bootstrap", ch. 13.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from ebms._checks import check_int, check_probability

__all__ = ["BootstrapInterval", "PairedBootstrap", "bootstrap_wer", "paired_bootstrap"]

_CHUNK = 256


@dataclass(frozen=True)
class BootstrapInterval:
    """A corpus WER with its percentile bootstrap interval (fractions, not percent).

    Attributes:
        estimate: the WER of the full set, ``sum e / sum n``.
        low, high: the percentile interval at ``level``.
        stderr: the standard deviation of the replicates.
        level: the coverage asked for, e.g. 0.95.
        samples: the number of replicates ``S``.
    """

    estimate: float
    low: float
    high: float
    stderr: float
    level: float
    samples: int

    def __str__(self) -> str:
        pct = round(100 * self.level)
        return f"{100 * self.estimate:.2f}% [{100 * self.low:.2f}, {100 * self.high:.2f}] ({pct}% CI)"


@dataclass(frozen=True)
class PairedBootstrap:
    """System B against system A on the same utterances (``delta = WER_B - WER_A``).

    Attributes:
        delta: the WER difference of the full set (negative: B is better).
        low, high: the percentile interval of ``delta`` at ``level``.
        poi: probability of improvement, the fraction of replicates where B has the lower WER.
        level, samples: as in :class:`BootstrapInterval`.
    """

    delta: float
    low: float
    high: float
    poi: float
    level: float
    samples: int

    def __str__(self) -> str:
        return (f"delta {100 * self.delta:+.2f}% [{100 * self.low:+.2f}, {100 * self.high:+.2f}] "
                f"({round(100 * self.level)}% CI), P(improvement) {self.poi:.3f}")


def _counts(x: object, name: str, size: int | None = None) -> Tensor:
    if not isinstance(x, Tensor) or x.dtype.is_floating_point or x.dtype == torch.bool or x.dim() != 1:
        got = f"{type(x).__name__}" if not isinstance(x, Tensor) else f"dtype {x.dtype}, shape {tuple(x.shape)}"
        raise TypeError(f"{name}: expected a 1-D integer tensor (one count per utterance); got {got}")
    if size is not None and x.shape[0] != size:
        raise ValueError(f"{name}: expected shape ({size},) (one per utterance); got {tuple(x.shape)}")
    if x.numel() == 0:
        raise ValueError(f"{name}: expected at least one utterance; got an empty tensor")
    if int(x.min()) < 0:
        raise ValueError(f"{name}: expected counts >= 0; got minimum {int(x.min())}")
    return x.long().cpu()


def _replicates(ref_lengths: Tensor, errors: list[Tensor], samples: int,
                generator: torch.Generator | None) -> list[Tensor]:
    """``(S,)`` float64 replicate WERs for each errors tensor, on shared resampled indices."""
    u = ref_lengths.shape[0]
    out: list[list[Tensor]] = [[] for _ in errors]
    done = 0
    while done < samples:
        s = min(_CHUNK, samples - done)
        idx = torch.randint(u, (s, u), generator=generator)
        total = ref_lengths[idx].sum(1)
        if bool((total == 0).any()):
            raise ValueError("ref_lengths: a bootstrap replicate drew only empty references (WER 0/0); "
                             "too many utterances have empty references")
        for k, e in enumerate(errors):
            out[k].append(e[idx].sum(1).double() / total.double())
        done += s
    return [torch.cat(parts) for parts in out]


def _check(samples: int, level: float) -> tuple[int, float]:
    return check_int(samples, "samples", minimum=1), check_probability(level, "level", open_low=True, open_high=True)


def _quantiles(x: Tensor, level: float) -> tuple[float, float]:
    q = torch.tensor([(1 - level) / 2, (1 + level) / 2], dtype=torch.float64)
    low, high = torch.quantile(x, q).tolist()
    return low, high


def bootstrap_wer(errors: Tensor, ref_lengths: Tensor, *, samples: int = 1000, level: float = 0.95,
                  generator: torch.Generator | None = None) -> BootstrapInterval:
    """Corpus WER and its utterance-level percentile bootstrap interval (Bisani & Ney, 2004).

    Args:
        errors: ``(U,)`` integer errors (edit distance) of each utterance.
        ref_lengths: ``(U,)`` integer reference lengths (not all 0).
        samples: replicates ``S`` (>= 1).
        level: interval coverage in ``(0, 1)``.
        generator: the source of the resampling (same seed, same interval).
    """
    ref = _counts(ref_lengths, "ref_lengths")
    err = _counts(errors, "errors", ref.shape[0])
    samples, level = _check(samples, level)
    if int(ref.sum()) == 0:
        raise ValueError("ref_lengths: expected at least one reference word in total; got only zeros")
    (rep,) = _replicates(ref, [err], samples, generator)
    low, high = _quantiles(rep, level)
    std = float(rep.std()) if samples > 1 else 0.0
    return BootstrapInterval(int(err.sum()) / int(ref.sum()), low, high, std, level, samples)


def paired_bootstrap(errors_a: Tensor, errors_b: Tensor, ref_lengths: Tensor, *, samples: int = 1000,
                     level: float = 0.95, generator: torch.Generator | None = None) -> PairedBootstrap:
    """Paired bootstrap of ``WER_B - WER_A`` and B's probability of improvement (Bisani & Ney, 2004).

    Args:
        errors_a, errors_b: ``(U,)`` integer errors of systems A and B on the same utterances.
        ref_lengths, samples, level, generator: as in :func:`bootstrap_wer`.
    """
    ref = _counts(ref_lengths, "ref_lengths")
    a = _counts(errors_a, "errors_a", ref.shape[0])
    b = _counts(errors_b, "errors_b", ref.shape[0])
    samples, level = _check(samples, level)
    if int(ref.sum()) == 0:
        raise ValueError("ref_lengths: expected at least one reference word in total; got only zeros")
    rep_a, rep_b = _replicates(ref, [a, b], samples, generator)
    delta = rep_b - rep_a
    low, high = _quantiles(delta, level)
    n = int(ref.sum())
    return PairedBootstrap((int(b.sum()) - int(a.sum())) / n, low, high, float((delta < 0).double().mean()),
                           level, samples)
