r"""Calibration of classifiers: binned ECE (class-wise and top-label), temperature scaling, reports.

A classifier is calibrated when its confidence matches its accuracy. Both ECE forms split
:math:`[0, 1]` into ``n_bins`` equal-width bins, :math:`[b/B, (b+1)/B)` for :math:`b < B - 1` and the
last one closed, :math:`[1 - 1/B, 1]`:

* **class-wise** (the monograph's Eq. 5.19, after Grathwohl et al. 2020 and Kumar et al. 2019):
  every (row, class) pair is a prediction with confidence :math:`p(y \mid x)`, so class :math:`y` puts
  all :math:`n` rows into its bins :math:`B_{yb}` by :math:`p(y \mid x)`, and

  .. math:: \mathrm{ECE} = \frac{1}{K}\sum_{y=1}^{K}\sum_{b=1}^{B}\frac{|B_{yb}|}{n}
            \,\big|\mathrm{acc}(B_{yb}) - \mathrm{conf}(B_{yb})\big|,

  with :math:`\mathrm{acc}(B_{yb})` the share of the bin's rows whose label is :math:`y` and
  :math:`\mathrm{conf}(B_{yb})` their mean :math:`p(y \mid x)`;
* **top-label** (Naeini et al. 2015; Guo et al. 2017): one prediction per row, confidence
  :math:`\max_y p(y \mid x)`, correct when the arg max is the label; the same sum without the class mean.

Since :math:`|B|\,|\mathrm{acc} - \mathrm{conf}| = |\sum_{i\in B}(\mathrm{hit}_i - p_i)|`, the ECE needs
only per-bin sums; empty bins add nothing. Cost: :math:`O(nK)`.

:class:`TemperatureScaling` (Guo et al. 2017) divides logits by one :math:`T > 0` fitted on held-out
data by minimising the NLL. With :math:`\beta = 1/T` the NLL
:math:`\frac1n\sum_i[\operatorname{logsumexp}(\beta z_i) - \beta z_{i y_i}]` is convex in :math:`\beta`
(its second derivative is the mean softmax variance of the logits), so the exact 1-D minimiser is
found by safeguarded Newton steps inside a bracket.

References:
    Naeini, Cooper & Hauskrecht (2015), "Obtaining well calibrated probabilities using Bayesian binning", AAAI.
    Guo, Pleiss, Sun & Weinberger (2017), "On calibration of modern neural networks", ICML.
    Kumar, Liang & Ma (2019), "Verified uncertainty calibration", NeurIPS.
    Grathwohl et al. (2020), "Your classifier is secretly an energy based model and you should treat it like
    one", ICLR.
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor

from ebms._checks import check_choice, check_finite, check_int, check_shape, check_tensor

__all__ = ["CALIBRATION_KINDS", "CalibrationBins", "CalibrationReport", "TemperatureScaling",
           "calibration_bins", "calibration_report", "expected_calibration_error"]

#: Valid ``kind`` values of :func:`calibration_bins` and :func:`expected_calibration_error`.
CALIBRATION_KINDS = ("classwise", "top_label")


def _matrix(x: object, name: str, what: str) -> Tensor:
    t = check_tensor(x, name, floating=True)
    if t.dim() != 2 or t.shape[0] == 0 or t.shape[1] == 0:
        raise ValueError(f"{name}: expected {what} of shape (N, K) with N, K >= 1; got shape {tuple(t.shape)}")
    return check_finite(t, name).detach().to("cpu", torch.float64)


def _labels(labels: object, n: int, k: int) -> Tensor:
    t = check_tensor(labels, "labels")
    if t.dtype.is_floating_point or t.dtype.is_complex or t.dtype == torch.bool:
        raise TypeError(f"labels: expected an integer tensor of class indices; got dtype {t.dtype}")
    check_shape(t, (n,), "labels")
    t = t.detach().to("cpu", torch.int64)
    if bool(((t < 0) | (t >= k)).any()):
        raise ValueError(f"labels: expected class indices in [0, {k - 1}]; got values in "
                         f"[{int(t.min())}, {int(t.max())}]")
    return t


@dataclass(frozen=True)
class CalibrationBins:
    """Per-bin counts, mean confidence and accuracy (the data of a reliability diagram).

    Attributes:
        kind: ``"classwise"`` or ``"top_label"``.
        edges: ``(n_bins + 1,)`` float64, ``b / n_bins``; bin ``b`` is ``[edges[b], edges[b+1])``,
            the last one closed.
        counts: int64, ``(K, n_bins)`` for class-wise bins (every class bins all ``n`` rows),
            ``(n_bins,)`` for top-label bins.
        confidence: float64, same shape: mean confidence of the bin's predictions (0 where empty).
        accuracy: float64, same shape: share of the bin's predictions that are right (0 where empty).
        n: number of rows binned.
    """

    kind: str
    edges: Tensor
    counts: Tensor
    confidence: Tensor
    accuracy: Tensor
    n: int

    @property
    def n_bins(self) -> int:
        """Number of bins."""
        return int(self.edges.shape[0]) - 1

    def ece(self) -> float:
        """The expected calibration error of these bins (see the module docstring)."""
        per_row = (self.counts.double() * (self.accuracy - self.confidence).abs()).sum(-1) / self.n
        return float(per_row.mean()) if self.kind == "classwise" else float(per_row)


def calibration_bins(probs: Tensor, labels: Tensor, *, n_bins: int = 20, kind: str = "classwise") -> CalibrationBins:
    """Bin predictions by confidence into ``n_bins`` equal-width bins.

    Args:
        probs: ``(N, K)`` floating, entries in ``[0, 1]`` (rows of ``p(y | x)``; for class-wise bins
            they need not sum to one).
        labels: ``(N,)`` integer class indices in ``[0, K)``.
        n_bins: number of bins (the monograph uses 20).
        kind: ``"classwise"`` (Eq. 5.19) or ``"top_label"`` (max probability, arg max correct).

    Returns:
        A :class:`CalibrationBins` (float64 on the CPU).

    Raises:
        TypeError: ``probs`` is not a floating tensor, ``labels`` not an integer tensor.
        ValueError: wrong shapes, empty input, non-finite or out-of-range entries, bad ``n_bins``/``kind``.
    """
    check_choice(kind, "kind", CALIBRATION_KINDS)
    check_int(n_bins, "n_bins", minimum=1)
    p = _matrix(probs, "probs", "probabilities")
    if bool(((p < 0) | (p > 1)).any()):
        raise ValueError(f"probs: expected probabilities in [0, 1]; got values in [{float(p.min()):.6g}, "
                         f"{float(p.max()):.6g}] (pass softmax(logits), not logits)")
    n, k = p.shape
    y = _labels(labels, n, k)
    if kind == "top_label":
        conf, pred = p.max(dim=1)
        conf, hit, rows = conf[:, None], (pred == y).double()[:, None], 1
    else:
        conf, hit, rows = p, F.one_hot(y, k).double(), k
    edges = torch.arange(n_bins + 1, dtype=torch.float64) / n_bins
    b = (torch.bucketize(conf, edges, right=True) - 1).clamp_(0, n_bins - 1)
    flat = (b + n_bins * torch.arange(conf.shape[1])).reshape(-1)
    size = rows * n_bins
    counts = torch.zeros(size, dtype=torch.int64).scatter_add_(0, flat, torch.ones_like(flat))
    conf_sum = torch.zeros(size, dtype=torch.float64).scatter_add_(0, flat, conf.reshape(-1))
    hit_sum = torch.zeros(size, dtype=torch.float64).scatter_add_(0, flat, hit.reshape(-1))
    denom = counts.clamp(min=1).double()
    shape = (rows, n_bins) if kind == "classwise" else (n_bins,)
    return CalibrationBins(kind, edges, counts.reshape(shape), (conf_sum / denom).reshape(shape),
                           (hit_sum / denom).reshape(shape), n)


def expected_calibration_error(probs: Tensor, labels: Tensor, *, n_bins: int = 20, kind: str = "classwise") -> float:
    """Binned ECE, class-wise (Eq. 5.19, the default) or top-label; arguments as :func:`calibration_bins`.

    Returns:
        The ECE in ``[0, 1]``.
    """
    return calibration_bins(probs, labels, n_bins=n_bins, kind=kind).ece()


def _nll(z: Tensor, y: Tensor, beta: float) -> float:
    return float(F.cross_entropy(z * beta, y))


class TemperatureScaling:
    """Post-hoc calibration ``logits / T`` with one temperature fitted by held-out NLL (Guo et al. 2017).

    ``fit`` minimises :math:`\\mathrm{NLL}(\\beta) = \\frac1n\\sum_i[\\operatorname{logsumexp}(\\beta z_i) -
    \\beta z_{iy_i}]` over :math:`\\beta = 1/T` in ``[1/bounds[1], 1/bounds[0]]``: the gradient is
    :math:`\\frac1n\\sum_i(\\mathbb E_{p_\\beta}[z_i] - z_{iy_i})` and the curvature the mean softmax
    variance of :math:`z_i` (convex), so Newton steps kept inside a shrinking bracket (bisection in
    :math:`\\log\\beta` as the fallback) converge to the exact optimum; each iteration costs one
    softmax over the ``(N, K)`` logits. When the optimum lies beyond a bound (e.g. separable training
    logits want :math:`T \\to 0`), ``T`` is that bound, ``at_bound`` is set and a warning says so.
    Arg max predictions, hence accuracy, never change.

    Args:
        temperature: a known temperature (usable without ``fit``); ``None`` means "fit first".
        bounds: ``(t_min, t_max)`` searched by ``fit``, ``0 < t_min < t_max``.
        max_iter: Newton/bisection iterations at most.

    Example:
        >>> ts = TemperatureScaling().fit(val_logits, val_labels)     # doctest: +SKIP
        >>> probs = ts(test_logits).softmax(-1)                         # doctest: +SKIP
    """

    def __init__(self, temperature: float | None = None, *, bounds: tuple[float, float] = (1e-2, 1e2),
                 max_iter: int = 200) -> None:
        try:
            lo, hi = (float(v) for v in bounds)
        except (TypeError, ValueError):
            raise TypeError(f"bounds: expected (t_min, t_max); got {bounds!r}") from None
        if not (0 < lo < hi < math.inf):
            raise ValueError(f"bounds: expected finite 0 < t_min < t_max; got {bounds!r}")
        if temperature is not None and not (isinstance(temperature, (int, float)) and not isinstance(temperature, bool)
                                            and 0 < temperature < math.inf):
            raise ValueError(f"temperature: expected a finite number > 0 or None; got {temperature!r}")
        self.bounds = (lo, hi)
        self.max_iter = check_int(max_iter, "max_iter", minimum=1)
        self._temperature = None if temperature is None else float(temperature)
        self.at_bound = False

    @property
    def temperature(self) -> float:
        """The fitted (or given) temperature ``T``."""
        if self._temperature is None:
            raise RuntimeError("temperature: not fitted yet; call fit(logits, labels) first")
        return self._temperature

    def fit(self, logits: Tensor, labels: Tensor) -> TemperatureScaling:
        """Fit ``T`` on held-out ``logits (N, K)`` and integer ``labels (N,)``; returns ``self``."""
        z = _matrix(logits, "logits", "logits")
        y = _labels(labels, z.shape[0], z.shape[1])

        def grad_curv(beta: float) -> tuple[float, float]:
            p = torch.softmax(z * beta, dim=1)
            mean = (p * z).sum(1)
            var = (p * z.square()).sum(1) - mean.square()
            return float((mean - z.gather(1, y[:, None])[:, 0]).mean()), float(var.clamp(min=0).mean())

        lo, hi = 1.0 / self.bounds[1], 1.0 / self.bounds[0]
        g_lo, g_hi = grad_curv(lo)[0], grad_curv(hi)[0]
        self.at_bound = False
        if g_lo >= 0 and g_hi <= 0:  # flat NLL (constant logits): no information, keep T = 1
            beta = 1.0
        elif g_lo >= 0 or g_hi <= 0:
            beta = lo if g_lo >= 0 else hi
            self.at_bound = True
            warnings.warn(f"TemperatureScaling.fit: the NLL optimum lies beyond bounds={self.bounds}; "
                          f"T = {1.0 / beta:.6g} (a bound)", RuntimeWarning, stacklevel=2)
        else:
            beta = min(max(1.0, lo), hi)
            for _ in range(self.max_iter):
                g, h = grad_curv(beta)
                if g == 0.0:
                    break
                if g > 0:
                    hi = beta
                else:
                    lo = beta
                step = beta - g / h if h > 0 else math.nan
                new = step if lo < step < hi else math.sqrt(lo * hi)
                if abs(new - beta) <= 1e-13 * beta or hi - lo <= 1e-13 * hi:
                    beta = new
                    break
                beta = new
        self._temperature = 1.0 / beta
        return self

    def __call__(self, logits: Tensor) -> Tensor:
        """``logits / T`` (same shape, dtype and device; gradients flow to ``logits``)."""
        check_tensor(logits, "logits", floating=True, min_dim=1)
        return logits / self.temperature

    def __repr__(self) -> str:
        t = "unfitted" if self._temperature is None else f"{self._temperature:.6g}"
        return f"TemperatureScaling(temperature={t}, bounds={self.bounds})"


@dataclass(frozen=True)
class CalibrationReport:
    """Accuracy and calibration of logits on a labelled set.

    Attributes:
        accuracy: share of rows whose arg max logit is the label.
        nll: mean negative log-likelihood ``-log softmax(z)[y]`` (nats).
        ece_classwise: class-wise ECE (Eq. 5.19).
        ece_top_label: top-label ECE (Guo et al. 2017).
        n: rows; n_classes: ``K``; n_bins: bins of both ECEs.
    """

    accuracy: float
    nll: float
    ece_classwise: float
    ece_top_label: float
    n: int
    n_classes: int
    n_bins: int

    def as_dict(self) -> dict[str, float]:
        """The figures as a flat dict (for a metrics line or JSON)."""
        return {"accuracy": self.accuracy, "nll": self.nll, "ece_classwise": self.ece_classwise,
                "ece_top_label": self.ece_top_label, "n": float(self.n)}


def calibration_report(logits: Tensor, labels: Tensor, *, n_bins: int = 20) -> CalibrationReport:
    """Accuracy, NLL, class-wise and top-label ECE of ``logits (N, K)`` against ``labels (N,)``.

    Computed in float64 from ``softmax(logits)``; to report a temperature-scaled model pass
    ``TemperatureScaling(...)(logits)``.
    """
    check_int(n_bins, "n_bins", minimum=1)
    z = _matrix(logits, "logits", "logits")
    y = _labels(labels, z.shape[0], z.shape[1])
    probs = torch.softmax(z, dim=1)
    return CalibrationReport(
        accuracy=float((z.argmax(1) == y).double().mean()),
        nll=_nll(z, y, 1.0),
        ece_classwise=calibration_bins(probs, y, n_bins=n_bins, kind="classwise").ece(),
        ece_top_label=calibration_bins(probs, y, n_bins=n_bins, kind="top_label").ece(),
        n=int(z.shape[0]), n_classes=int(z.shape[1]), n_bins=n_bins,
    )
