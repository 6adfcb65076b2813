"""Comparing two methods over seeds: the paired difference, its interval, and the words it allows.

A comparison of two methods run on the same seeds (same data split, same initial draws where the
methods share them) is judged by the per-seed differences ``d_s = a_s - b_s``: their mean, the
Student-t interval

.. math::

    \\bar d \\pm t_{1-\\alpha/2,\\,n-1}\\; s_d / \\sqrt{n},

and a verdict that follows from the interval alone: *not significant* where it covers 0, otherwise
which method is higher (and, given the metric's direction, better). One seed gives no interval and
no verdict beyond "one seed". The wording is fixed here so that every page of the documentation
and every benchmark says the same thing for the same evidence.

The t quantile is computed from the regularised incomplete beta function (continued fraction,
Press et al., *Numerical Recipes*, 3rd ed., §6.4) by bisection, in double precision; it agrees with
``scipy.stats.t.ppf`` to 1e-10 (tests/metrics/test_seeds.py).

Reference: Student (1908), "The probable error of a mean", *Biometrika* 6(1).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

__all__ = ["SeedComparison", "compare_over_seeds", "student_t_quantile"]


def _betacf(a: float, b: float, x: float) -> float:
    """The continued fraction of the incomplete beta function (modified Lentz), for x < (a+1)/(a+b+2)."""
    tiny = 1e-300
    qab, qap, qam = a + b, a + 1.0, a - 1.0
    c, d = 1.0, 1.0 - qab * x / qap
    d = 1.0 / (d if abs(d) > tiny else tiny)
    h = d
    for m in range(1, 10_000):
        m2 = 2 * m
        for num in (m * (b - m) * x / ((qam + m2) * (a + m2)), -(a + m) * (qab + m) * x / ((a + m2) * (qap + m2))):
            d = 1.0 + num * d
            d = 1.0 / (d if abs(d) > tiny else tiny)
            c = 1.0 + num / c
            c = c if abs(c) > tiny else tiny
            h *= d * c
        if abs(d * c - 1.0) < 1e-16:
            break
    return h


def _betainc(a: float, b: float, x: float) -> float:
    """The regularised incomplete beta function ``I_x(a, b)`` for ``0 <= x <= 1``."""
    if x <= 0.0:
        return 0.0
    if x >= 1.0:
        return 1.0
    log_front = math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x)
    if x < (a + 1.0) / (a + b + 2.0):
        return math.exp(log_front) * _betacf(a, b, x) / a
    return 1.0 - math.exp(log_front) * _betacf(b, a, 1.0 - x) / b


def _t_upper(t: float, df: float) -> float:
    """``P(T > t)`` for ``t >= 0``, from the incomplete beta function (no cancellation in the far tail)."""
    return 0.5 * _betainc(df / 2.0, 0.5, df / (df + t * t))


def student_t_quantile(p: float, df: float) -> float:
    """The ``p`` quantile of Student's t distribution with ``df`` degrees of freedom.

    Args:
        p: probability in ``(0, 1)``.
        df: degrees of freedom, ``> 0``.

    Returns:
        ``t`` with ``P(T <= t) = p``; exact closed forms for ``df = 1, 2``, otherwise bisection on
        the tail probability ``min(p, 1 - p)`` (to double-precision round-off).
    """
    if not (isinstance(p, (int, float)) and 0.0 < p < 1.0):
        raise ValueError(f"p: expected a probability in (0, 1); got {p!r}")
    if not (isinstance(df, (int, float)) and df > 0 and math.isfinite(df)):
        raise ValueError(f"df: expected a finite number > 0; got {df!r}")
    if p == 0.5:
        return 0.0
    if df == 1:
        return math.tan(math.pi * (p - 0.5))
    if df == 2:
        return (2 * p - 1) / math.sqrt(2 * p * (1 - p))
    tail, sign = (p, -1.0) if p < 0.5 else (1.0 - p, 1.0)
    lo, hi = 0.0, 1.0
    while _t_upper(hi, df) > tail:
        lo, hi = hi, hi * 2.0
    for _ in range(400):
        mid = 0.5 * (lo + hi)
        if _t_upper(mid, df) > tail:
            lo = mid
        else:
            hi = mid
        if hi - lo <= 4e-16 * hi:
            break
    return sign * 0.5 * (lo + hi)


def _fmt(x: float, digits: int) -> str:
    s = f"{x:+.{digits}f}"
    return s.replace("-", "−")


@dataclass(frozen=True)
class SeedComparison:
    """Two methods over the same seeds: per-seed values, the paired difference and its interval.

    Attributes:
        name_a, name_b: the methods (the difference is ``a - b``).
        metric: what was measured (e.g. ``"test WER (%)"``).
        seeds: the seeds, in the order of the values.
        values_a, values_b: per-seed results.
        mean_diff: mean of ``a_s - b_s``.
        sd_diff: sample standard deviation of the differences (``nan`` for one seed).
        ci_low, ci_high: the two-sided Student-t interval of the mean difference at ``confidence``
            (``nan`` for one seed).
        confidence: e.g. ``0.95``.
        higher_is_better: the metric's direction, ``None`` when it has none.
        verdict: ``"not significant"``, ``"a higher"``/``"a lower"``, or ``"one seed"``.
    """

    name_a: str
    name_b: str
    metric: str
    seeds: tuple[int, ...]
    values_a: tuple[float, ...]
    values_b: tuple[float, ...]
    mean_diff: float
    sd_diff: float
    ci_low: float
    ci_high: float
    confidence: float
    higher_is_better: bool | None
    verdict: str
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def n(self) -> int:
        return len(self.seeds)

    @property
    def significant(self) -> bool:
        """Whether the interval excludes 0 (never for one seed)."""
        return self.verdict in ("a higher", "a lower")

    @property
    def better(self) -> str | None:
        """The better method's name when the interval excludes 0 and the metric has a direction."""
        if not self.significant or self.higher_is_better is None:
            return None
        a_higher = self.verdict == "a higher"
        return self.name_a if a_higher == self.higher_is_better else self.name_b

    def words(self) -> str:
        """The verdict in words: ``"not significant"``, ``"<a> better"``/``"<a> worse"`` (or ``higher``/
        ``lower`` without a direction), or ``"one seed, no interval"``."""
        if self.verdict == "one seed":
            return "one seed, no interval"
        if not self.significant:
            return "not significant"
        if self.higher_is_better is None:
            return f"{self.name_a} {'higher' if self.verdict == 'a higher' else 'lower'}"
        return f"{self.name_a} {'better' if self.better == self.name_a else 'worse'}"

    def sentence(self, digits: int = 3) -> str:
        """One line for a report: ``a − b on metric: mean (95 % CI lo to hi, n seeds, paired): verdict``."""
        head = f"{self.name_a} − {self.name_b}, {self.metric}: {_fmt(self.mean_diff, digits)}"
        if self.verdict == "one seed":
            return f"{head} (one seed, no interval)"
        pct = f"{100 * self.confidence:g} %"
        return (f"{head} ({pct} CI {_fmt(self.ci_low, digits)} to {_fmt(self.ci_high, digits)}, "
                f"{self.n} seeds, paired): {self.words()}")

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON for a benchmark record (the verdict and its words included)."""
        return {
            "name_a": self.name_a, "name_b": self.name_b, "metric": self.metric, "seeds": list(self.seeds),
            "values_a": list(self.values_a), "values_b": list(self.values_b),
            "diffs": [a - b for a, b in zip(self.values_a, self.values_b)],
            "mean_a": sum(self.values_a) / self.n, "mean_b": sum(self.values_b) / self.n,
            "mean_diff": self.mean_diff, "sd_diff": None if math.isnan(self.sd_diff) else self.sd_diff,
            "ci_low": None if math.isnan(self.ci_low) else self.ci_low,
            "ci_high": None if math.isnan(self.ci_high) else self.ci_high,
            "confidence": self.confidence, "higher_is_better": self.higher_is_better,
            "verdict": self.verdict, "words": self.words(), "sentence": self.sentence(), **self.extra,
        }


def _values(x: Sequence[float], name: str) -> tuple[float, ...]:
    try:
        vals = tuple(float(v) for v in x)
    except (TypeError, ValueError):
        raise TypeError(f"{name}: expected a sequence of numbers (one per seed); got {x!r}") from None
    bad = [v for v in vals if not math.isfinite(v)]
    if bad:
        raise ValueError(f"{name}: expected finite values; got {bad[0]!r} (a diverged run is a result to report, "
                         "not to average)")
    return vals


def compare_over_seeds(
    a: Sequence[float],
    b: Sequence[float],
    *,
    seeds: Sequence[int] | None = None,
    name_a: str = "a",
    name_b: str = "b",
    metric: str = "",
    higher_is_better: bool | None = None,
    confidence: float = 0.95,
) -> SeedComparison:
    """Compare two methods run on the same seeds by the paired difference ``a - b``.

    Args:
        a, b: per-seed results of the two methods, ``a[i]`` and ``b[i]`` from the same seed.
        seeds: the seeds (default ``0 .. n-1``).
        name_a, name_b: names used in the verdict.
        metric: what was measured, used in :meth:`SeedComparison.sentence`.
        higher_is_better: the metric's direction (``False`` for error rates and perplexities),
            ``None`` when it has none.
        confidence: level of the two-sided interval, in ``(0, 1)``.

    Returns:
        A :class:`SeedComparison`. Its verdict is ``"not significant"`` when the interval covers 0
        (a zero-width interval at 0 included), ``"a higher"``/``"a lower"`` when it excludes 0,
        ``"one seed"`` for a single pair.

    Example:
        >>> c = compare_over_seeds([10.2, 10.8, 11.0], [10.0, 10.1, 10.9], name_a="CTC-CRF", name_b="CTC",
        ...                        metric="WER (%)", higher_is_better=False)
        >>> c.words()
        'not significant'
    """
    va, vb = _values(a, "a"), _values(b, "b")
    if len(va) != len(vb):
        raise ValueError(f"a, b: expected one value per seed for both methods; got {len(va)} and {len(vb)}")
    if not va:
        raise ValueError("a, b: expected at least one seed; got none")
    if not (isinstance(confidence, float) and 0.0 < confidence < 1.0):
        raise ValueError(f"confidence: expected a float in (0, 1); got {confidence!r}")
    sd = tuple(range(len(va))) if seeds is None else tuple(int(s) for s in seeds)
    if len(sd) != len(va):
        raise ValueError(f"seeds: expected {len(va)} seeds (one per value); got {len(sd)}")
    if len(set(sd)) != len(sd):
        raise ValueError(f"seeds: expected distinct seeds; got {list(sd)}")
    diffs = [x - y for x, y in zip(va, vb)]
    n = len(diffs)
    mean = sum(diffs) / n
    if n == 1:
        nan = float("nan")
        return SeedComparison(name_a, name_b, metric, sd, va, vb, mean, nan, nan, nan, confidence,
                              higher_is_better, "one seed")
    sdev = math.sqrt(sum((d - mean) ** 2 for d in diffs) / (n - 1))
    half = student_t_quantile(0.5 + confidence / 2.0, n - 1) * sdev / math.sqrt(n)
    lo, hi = mean - half, mean + half
    verdict = "not significant" if lo <= 0.0 <= hi else ("a higher" if lo > 0 else "a lower")
    return SeedComparison(name_a, name_b, metric, sd, va, vb, mean, sdev, lo, hi, confidence, higher_is_better,
                          verdict)
