r"""Private: log-linear interpolation of several LMs in n-best rescoring, and the search for its weights.

Each hypothesis ``h`` gets, with ``K`` named LM score columns ``log p_k(h)`` (log-likelihoods, higher
is better),

.. math::

    S(h) = \log p_{AM}(\text{audio} \mid h) + \sum_{k=1}^{K} \lambda_k \log p_k(h) + \beta\,|h|,

a log-linear (product-of-experts) combination: the LMs' log-probabilities are added with weights
``λ_k`` (``lm_weight[name]``) beside the acoustic score and the per-word bonus ``β``. It is the
``AM + λ LM`` score of :mod:`ebms.metrics.rescoring` with the single LM replaced by a weighted sum,
and the way the monograph's tables combine a TRF with KN5 or an LSTM (Ou, 2024, §3.3; Wang, Ou &
Tan, 2018, Table 6). The sum is evaluated in the order the LMs are given,
``((acoustic + λ_1 s_1) + λ_2 s_2) + ... + β|h|``, by :func:`~ebms.metrics.rescoring.combined_scores`
and by the search alike, so both rank hypotheses with the same floating-point numbers.

**Search** (:func:`search_weights`, called by :func:`~ebms.metrics.rescoring.tune_weights` with
named LMs), minimising the corpus WER of a development set over a grid of ``λ_k`` per LM and of
``β``:

* ``"grid"`` — every point of ``Λ_1 × ... × Λ_K × B`` when there are at most ``max_grid``
  (default :data:`MAX_GRID`); ties go to the first point in lexicographic order (the first LM's
  axis outermost, ``β`` innermost; axes in the order given), as for one LM.
* ``"coordinate"`` — larger grids: block coordinate descent. It starts from the best single-LM
  point: each LM alone on its axis with ``β`` (the others at weight 0), the one of fewest dev
  errors (the first LM on ties). A sweep then visits the LMs in order and re-searches
  ``(λ_k, β)`` jointly on ``Λ_k × B`` with the other weights held; it moves only when the
  block's best point has strictly fewer errors than the current one (first in grid order among
  equals), so the dev WER never rises above the best single LM's and the search cannot cycle.
  It stops after a sweep without a move, or after ``max_sweeps`` sweeps (``converged=False``).
  A local optimum of the grid, not necessarily the global one.

Cost: ``O(G N)`` for ``G`` evaluated points and ``N`` hypotheses, in chunks of about
:data:`CHUNK_ELEMENTS` scores; grid ``G = Π_k |Λ_k| · |B|``, coordinate descent
``G = (1 + sweeps) Σ_k |Λ_k| · |B|``.

References: Ou (2024), "Energy-Based Models with Applications to Speech and Language Processing",
§3.3; Wang, Ou, Tan (2018), "Learning trans-dimensional random fields with applications to language
modeling", IEEE TPAMI 40(4) (log-linear interpolation of TRF with KN5 and LSTM LMs).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from ebms._checks import check_int

__all__ = ["CHUNK_ELEMENTS", "MAX_GRID", "MAX_SWEEPS", "InterpolationResult", "interpolated", "is_named",
           "named_axes", "named_weights", "search_weights"]

#: largest number of grid points searched exhaustively; above it, coordinate descent.
MAX_GRID = 100_000
#: default bound on the coordinate-descent sweeps.
MAX_SWEEPS = 50
#: scores per evaluation chunk (points x hypotheses), about 8 MB of float64.
CHUNK_ELEMENTS = 1 << 20


def is_named(lm: object) -> bool:
    """Whether ``lm`` holds named LM columns (a mapping, or a list/tuple of ``(name, scores)`` pairs)."""
    return isinstance(lm, (Mapping, list, tuple))


def _number(v: object, name: str) -> float:
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(float(v)):
        raise ValueError(f"{name}: expected a finite number; got {v!r}")
    return float(v)


def _by_name(values: object, names: Sequence[str], name: str, what: str) -> dict[str, Any]:
    """``values`` (a mapping) checked to hold exactly ``names``; returned in the order of ``names``."""
    if not isinstance(values, Mapping):
        raise TypeError(f"{name}: expected a mapping {{name: {what}}} for the LMs {list(names)}; got "
                        f"{type(values).__name__} {values!r}")
    unknown = [k for k in values if k not in names]
    if unknown:
        raise ValueError(f"{name}: unknown LM name(s) {unknown}; expected the names of lm: {list(names)}")
    missing = [k for k in names if k not in values]
    if missing:
        raise ValueError(f"{name}: no {what} for the LM(s) {missing} (weight 0.0 leaves an LM out); got "
                         f"{list(values)}")
    return {k: values[k] for k in names}


def named_weights(weights: object, names: Sequence[str], name: str = "lm_weight") -> dict[str, float]:
    """``{name: λ}`` for exactly the LMs ``names`` (finite numbers)."""
    return {k: _number(v, f"{name}[{k!r}]") for k, v in _by_name(weights, names, name, "weight").items()}


def named_axes(axes: object, names: Sequence[str], name: str = "lm_weights") -> dict[str, tuple[float, ...]]:
    """Grid axes per LM: one sequence shared by every LM, or a mapping ``{name: sequence}``."""
    per = (_by_name(axes, names, name, "axis") if isinstance(axes, Mapping)
           else dict.fromkeys(names, axes))
    out = {}
    for k, axis in per.items():
        label = f"{name}[{k!r}]" if isinstance(axes, Mapping) else name
        if isinstance(axis, (str, bytes)) or not isinstance(axis, Sequence):
            raise TypeError(f"{label}: expected a sequence of finite numbers; got {type(axis).__name__}")
        out[k] = tuple(_number(v, label) for v in axis)
        if not out[k]:
            raise ValueError(f"{label}: expected at least one value; got 0")
    return out


def interpolated(base: Tensor, columns: Mapping[str, Tensor], weights: Mapping[str, float], words: Tensor,
                 length_penalty: float) -> Tensor:
    """``(N,)`` ``base + Σ_k λ_k s_k + β |h|``, summed in the order of ``columns`` (module docstring)."""
    out = base
    for k, col in columns.items():
        out = out + weights[k] * col
    return out + length_penalty * words


@dataclass(frozen=True)
class InterpolationResult:
    """The interpolation weights of lowest dev WER found by :func:`search_weights`.

    Attributes:
        weights: ``{name: λ_k}``, in the order the LMs were given.
        length_penalty: ``β``.
        wer: its dev WER (a fraction); ``errors`` the word errors behind it.
        search: ``"grid"`` (exhaustive) or ``"coordinate"`` (block coordinate descent).
        evaluations: grid points evaluated.
        sweeps: coordinate-descent sweeps made (0 for the grid search).
        converged: the last sweep made no move (always ``True`` for the grid search).
        start: the LM whose single-LM point started the coordinate descent (``None``: grid).
        start_wer: the dev WER of that start (``None``: grid).
        axes: the grid axis of each LM; ``length_penalties`` that of ``β``.
    """

    weights: dict[str, float]
    length_penalty: float
    wer: float
    errors: int
    search: str
    evaluations: int
    sweeps: int
    converged: bool
    start: str | None
    start_wer: float | None
    axes: dict[str, tuple[float, ...]]
    length_penalties: tuple[float, ...]

    def summary(self) -> dict[str, Any]:
        """JSON-ready figures (WER in percent) for a log line or a record."""
        return {"weights": dict(self.weights), "length_penalty": self.length_penalty, "dev_wer": 100 * self.wer,
                "search": self.search, "evaluations": self.evaluations, "sweeps": self.sweeps,
                "converged": self.converged, "start": self.start,
                "start_dev_wer": None if self.start_wer is None else 100 * self.start_wer,
                "axes": {k: list(v) for k, v in self.axes.items()}, "length_penalties": list(self.length_penalties)}


def _evaluate(points: Tensor, base: Tensor, stack: Tensor, count_errors: Callable[[Tensor], Tensor]) -> Tensor:
    """``(G,)`` int64 errors of the points ``(G, K + 1)`` (``λ_1..λ_K, β``); ``stack`` ``(K + 1, N)``."""
    rows = max(1, CHUNK_ELEMENTS // stack.shape[1])
    out = []
    for s in range(0, points.shape[0], rows):
        p = points[s:s + rows]
        scores = base.expand(p.shape[0], -1)
        for k in range(stack.shape[0]):  # the order of interpolated(): LMs in order, then beta |h|
            scores = scores + p[:, k, None] * stack[k]
        out.append(count_errors(scores).long())
    return torch.cat(out)


def _block(current: Tensor, k: int, axis: Tensor, betas: Tensor) -> Tensor:
    """Points ``Λ_k × B`` (``λ_k`` outer, ``β`` inner) with the other weights of ``current`` held."""
    pts = current.repeat(axis.numel() * betas.numel(), 1)
    pts[:, k] = axis.repeat_interleave(betas.numel())
    pts[:, -1] = betas.repeat(axis.numel())
    return pts


def search_weights(columns: Mapping[str, Tensor], base: Tensor, words: Tensor, axes: Mapping[str, Sequence[float]],
                   length_penalties: Sequence[float], count_errors: Callable[[Tensor], Tensor], total: int, *,
                   max_grid: int = MAX_GRID, max_sweeps: int = MAX_SWEEPS) -> InterpolationResult:
    """Minimise the dev WER of ``base + Σ_k λ_k s_k + β|h|`` over the grid (module docstring).

    Args:
        columns: ``{name: (N,) float64}`` validated LM scores (order = interpolation order).
        base: ``(N,)`` float64 acoustic scores; ``words``: ``(N,)`` float64 ``|h|``.
        axes: ``{name: λ axis}`` for every column; ``length_penalties``: the ``β`` axis.
        count_errors: ``(G, N)`` scores -> ``(G,)`` word errors of each row's per-utterance argmax.
        total: reference words (> 0); WER = errors / total.
        max_grid: exhaustive search up to this many points, coordinate descent above (int >= 1).
        max_sweeps: bound on the coordinate-descent sweeps (int >= 1).
    """
    check_int(max_grid, "max_grid", minimum=1)
    check_int(max_sweeps, "max_sweeps", minimum=1)
    names = list(columns)
    stack = torch.stack([*columns.values(), words])  # (K + 1, N)
    ax = [torch.tensor(axes[k], dtype=torch.float64) for k in names]
    betas = torch.tensor(tuple(length_penalties), dtype=torch.float64)
    axis_tuples = {k: tuple(float(v) for v in axes[k]) for k in names}
    size = math.prod(a.numel() for a in ax) * betas.numel()

    def result(point: Tensor, errors: int, **kw: Any) -> InterpolationResult:
        return InterpolationResult({k: float(point[i]) for i, k in enumerate(names)}, float(point[-1]),
                                   errors / total, errors, axes=axis_tuples,
                                   length_penalties=tuple(float(b) for b in betas), **kw)

    if size <= max_grid:
        grids = torch.meshgrid(*ax, betas, indexing="ij")  # lexicographic: first LM outermost, beta innermost
        points = torch.stack([g.reshape(-1) for g in grids], 1)
        err = _evaluate(points, base, stack, count_errors)
        i = int(err.argmin())  # the first minimum
        return result(points[i], int(err[i]), search="grid", evaluations=size, sweeps=0, converged=True,
                      start=None, start_wer=None)

    evaluations = 0
    best: tuple[int, int, Tensor] | None = None  # (errors, LM index, point)
    zero = torch.zeros(len(names) + 1, dtype=torch.float64)
    for k in range(len(names)):  # each LM alone (the others at 0): the single-LM tunings
        pts = _block(zero, k, ax[k], betas)
        err = _evaluate(pts, base, stack, count_errors)
        evaluations += pts.shape[0]
        i = int(err.argmin())
        if best is None or int(err[i]) < best[0]:
            best = (int(err[i]), k, pts[i])
    assert best is not None
    cur_err, start, cur = best
    start_err, sweeps, moved = cur_err, 0, True
    while moved and sweeps < max_sweeps:
        moved, sweeps = False, sweeps + 1
        for k in range(len(names)):
            pts = _block(cur, k, ax[k], betas)
            err = _evaluate(pts, base, stack, count_errors)
            evaluations += pts.shape[0]
            i = int(err.argmin())
            if int(err[i]) < cur_err:  # strictly fewer errors: move; else keep the current point
                cur, cur_err, moved = pts[i], int(err[i]), True
    return result(cur, cur_err, search="coordinate", evaluations=evaluations, sweeps=sweeps, converged=not moved,
                  start=names[start], start_wer=start_err / total)
