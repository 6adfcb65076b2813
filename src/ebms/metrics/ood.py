r"""Out-of-distribution detection: AUROC, AUPR, FPR at a TPR, bootstrap report, and JEM-style scores.

Convention: a score is higher for points that look more **in**-distribution, and in-distribution
points are the positive class (as in Hendrycks & Gimpel 2017 and Grathwohl et al. 2020).

* :func:`auroc` is the Mann–Whitney statistic
  :math:`\frac{1}{n_{in} n_{out}}\sum_{i,j}\big[\mathbb 1(s_i > t_j) + \tfrac12\mathbb 1(s_i = t_j)\big]`,
  the probability that a random in-point outscores a random out-point, ties counted half (equal to
  scikit-learn's ``roc_auc_score``). Computed from mid-ranks in :math:`O(n \log n)`.
* :func:`aupr` is average precision as scikit-learn defines it,
  :math:`\mathrm{AP} = \sum_k (R_k - R_{k-1}) P_k` over the distinct score thresholds in decreasing
  order (all points tied at a threshold enter together), no interpolation.
* :func:`fpr_at_tpr`: the share of out-points scoring at least the largest threshold whose TPR reaches
  ``tpr`` (FPR95 for ``tpr=0.95``).
* :func:`detection_report`: all of the above, a stratified bootstrap percentile interval of the AUROC
  (in- and out-points resampled separately, sizes kept), and the Hanley–McNeil (1982) standard error
  :math:`\mathrm{se}^2 = [A(1-A) + (n_{in}-1)(Q_1-A^2) + (n_{out}-1)(Q_2-A^2)]/(n_{in}n_{out})`,
  :math:`Q_1 = A/(2-A)`, :math:`Q_2 = 2A^2/(1+A)` (exact for exponential score laws, a guide otherwise;
  trust the bootstrap interval when they disagree).
* :func:`ood_scores`: scores from a classifier's logits ``f(x)`` read as a JEM (Grathwohl et al. 2020):
  ``"logp"`` :math:`\operatorname{logsumexp}_y f(x)[y] = -E(x)` (unnormalised :math:`\log p(x)`),
  ``"max_softmax"`` :math:`\max_y p(y \mid x)` (Hendrycks & Gimpel 2017), ``"grad_norm"``
  :math:`-\lVert\nabla_x \operatorname{logsumexp}_y f(x)[y]\rVert_2` (JEM's approximate-mass score,
  §5.3: data sit where the density is high *and* flat).

References:
    Hanley & McNeil (1982), "The meaning and use of the area under a receiver operating characteristic
    (ROC) curve", Radiology 143(1).
    Hendrycks & Gimpel (2017), "A baseline for detecting misclassified and out-of-distribution examples in
    neural networks", ICLR.
    Grathwohl et al. (2020), "Your classifier is secretly an energy based model and you should treat it like
    one", ICLR.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import Tensor

from ebms._checks import check_choice, check_finite, check_int, check_probability, check_tensor

__all__ = ["OOD_SCORE_KINDS", "DetectionReport", "aupr", "auroc", "detection_report", "fpr_at_tpr",
           "ood_scores", "roc_curve"]

#: Valid ``kind`` values of :func:`ood_scores`.
OOD_SCORE_KINDS = ("grad_norm", "logp", "max_softmax")


def _scores(x: object, name: str) -> Tensor:
    t = check_tensor(x, name, floating=True)
    if t.dim() != 1 or t.shape[0] == 0:
        raise ValueError(f"{name}: expected a non-empty 1-D tensor of scores (N,); got shape {tuple(t.shape)}")
    return check_finite(t, name).detach().to("cpu", torch.float64)


def _pair(scores_in: object, scores_out: object) -> tuple[Tensor, Tensor]:
    return _scores(scores_in, "scores_in"), _scores(scores_out, "scores_out")


def _placements(s_in: Tensor, s_out: Tensor) -> Tensor:
    """``(n_in,)``: per in-point, the out-points below it plus half those tied with it."""
    t = s_out.sort().values
    lo = torch.searchsorted(t, s_in, right=False)
    hi = torch.searchsorted(t, s_in, right=True)
    return lo.double() + 0.5 * (hi - lo).double()


def auroc(scores_in: Tensor, scores_out: Tensor) -> float:
    """Area under the ROC curve, in-distribution positive, ties counted half (Mann–Whitney U / (n_in n_out)).

    Args:
        scores_in: ``(N_in,)`` floating scores of in-distribution points.
        scores_out: ``(N_out,)`` floating scores of out-of-distribution points.

    Returns:
        AUROC in ``[0, 1]``; 0.5 is chance, 1 perfect separation.
    """
    s_in, s_out = _pair(scores_in, scores_out)
    return float(_placements(s_in, s_out).sum()) / (s_in.shape[0] * s_out.shape[0])


def roc_curve(scores_in: Tensor, scores_out: Tensor) -> tuple[Tensor, Tensor]:
    """ROC points ``(fpr, tpr)``, float64, one per distinct threshold in decreasing order, from ``(0, 0)``."""
    s_in, s_out = _pair(scores_in, scores_out)
    s = torch.cat([s_in, s_out])
    pos = torch.cat([torch.ones_like(s_in), torch.zeros_like(s_out)])
    order = torch.argsort(s, descending=True, stable=True)
    s, pos = s[order], pos[order]
    last = torch.ones_like(s, dtype=torch.bool)
    last[:-1] = s[1:] != s[:-1]  # the last point of each group of tied scores
    tp = pos.cumsum(0)[last]
    fp = (1 - pos).cumsum(0)[last]
    zero = torch.zeros(1, dtype=torch.float64)
    return torch.cat([zero, fp / s_out.shape[0]]), torch.cat([zero, tp / s_in.shape[0]])


def aupr(scores_in: Tensor, scores_out: Tensor, *, positive: str = "in") -> float:
    """Average precision (scikit-learn's definition) with ``positive`` the class to retrieve.

    Args:
        scores_in, scores_out: as :func:`auroc` (higher = more "in").
        positive: ``"in"`` (AUPR-In, rank by score) or ``"out"`` (AUPR-Out, rank by ``-score``).

    Returns:
        :math:`\\sum_k (R_k - R_{k-1}) P_k` over distinct thresholds, in ``[0, 1]``.
    """
    if positive not in ("in", "out"):
        raise ValueError(f"positive: expected 'in' or 'out'; got {positive!r}")
    s_in, s_out = _pair(scores_in, scores_out)
    if positive == "out":
        s_in, s_out = -s_out, -s_in
    fpr, tpr = roc_curve(s_in, s_out)
    tp, fp = tpr[1:] * s_in.shape[0], fpr[1:] * s_out.shape[0]
    precision = tp / (tp + fp)
    return float((torch.diff(tpr) * precision).sum())


def fpr_at_tpr(scores_in: Tensor, scores_out: Tensor, tpr: float = 0.95) -> float:
    """False-positive rate at the largest threshold whose true-positive rate is at least ``tpr``.

    The threshold is the ``k``-th largest in-score with ``k`` the smallest count with
    ``k / n_in >= tpr``; the result is the share of out-scores ``>=`` it (ties count as detected
    in-points, the convention of scikit-learn's ``roc_curve``).

    Args:
        scores_in, scores_out: as :func:`auroc`.
        tpr: target true-positive rate in ``(0, 1]``.
    """
    check_probability(tpr, "tpr", open_low=True)
    s_in, s_out = _pair(scores_in, scores_out)
    n_in = s_in.shape[0]
    k = max(1, math.ceil(tpr * n_in))
    while k > 1 and (k - 1) / n_in >= tpr:  # undo a ceil pushed up by rounding (0.95 * 100 > 95)
        k -= 1
    threshold = s_in.sort(descending=True).values[k - 1]
    return float((s_out >= threshold).double().mean())


@dataclass(frozen=True)
class DetectionReport:
    """OOD detection figures for one (in, out) pair of score sets.

    Attributes:
        auroc: AUROC (ties half).
        auroc_interval: ``(low, high)`` stratified bootstrap percentile interval at ``level``.
        auroc_stderr: Hanley–McNeil standard error.
        aupr_in, aupr_out: average precision with in / out as the positive class.
        fpr95: FPR at 95% TPR.
        n_in, n_out: sample sizes; n_boot, level: bootstrap settings.
    """

    auroc: float
    auroc_interval: tuple[float, float]
    auroc_stderr: float
    aupr_in: float
    aupr_out: float
    fpr95: float
    n_in: int
    n_out: int
    n_boot: int
    level: float

    def as_dict(self) -> dict[str, float]:
        """The figures as a flat dict (for a metrics line or JSON)."""
        return {"auroc": self.auroc, "auroc_low": self.auroc_interval[0], "auroc_high": self.auroc_interval[1],
                "auroc_stderr": self.auroc_stderr, "aupr_in": self.aupr_in, "aupr_out": self.aupr_out,
                "fpr95": self.fpr95, "n_in": float(self.n_in), "n_out": float(self.n_out)}


def _resample_weights(n: int, b: int, g: torch.Generator | None) -> Tensor:
    """``(b, n)`` float64 multinomial counts: how often each point is drawn in each replicate."""
    idx = torch.randint(0, n, (b, n), generator=g)
    return torch.zeros(b, n, dtype=torch.float64).scatter_add_(1, idx, torch.ones(b, n, dtype=torch.float64))


def detection_report(scores_in: Tensor, scores_out: Tensor, *, n_boot: int = 1000, level: float = 0.95,
                     generator: torch.Generator | None = None, chunk: int = 100) -> DetectionReport:
    """AUROC with a stratified bootstrap interval and an analytic stderr, AUPR-In/Out and FPR95.

    Each bootstrap replicate redraws ``n_in`` in-points and ``n_out`` out-points with replacement. It is
    computed without re-sorting: with out-scores sorted once, a replicate's U statistic is
    :math:`\\sum_i w_i (c_{lo(i)} + \\tfrac12 (c_{hi(i)} - c_{lo(i)}))` for in-draw counts :math:`w` and
    cumulative out-draw counts :math:`c`, so the cost is :math:`O(n_{boot}(n_{in} + n_{out}))`, in
    chunks of ``chunk`` replicates.

    Args:
        scores_in, scores_out: as :func:`auroc`.
        n_boot: bootstrap replicates (>= 2).
        level: coverage of the percentile interval, in ``(0, 1)``.
        generator: randomness of the resampling (global RNG when ``None``, not reproducible).
        chunk: replicates per vectorised block (memory ``chunk * (n_in + n_out)`` floats).
    """
    check_int(n_boot, "n_boot", minimum=2)
    check_probability(level, "level", open_low=True, open_high=True)
    check_int(chunk, "chunk", minimum=1)
    if generator is not None and not isinstance(generator, torch.Generator):
        raise TypeError(f"generator: expected a torch.Generator or None; got {type(generator).__name__}")
    s_in, s_out = _pair(scores_in, scores_out)
    n_in, n_out = s_in.shape[0], s_out.shape[0]
    a = float(_placements(s_in, s_out).sum()) / (n_in * n_out)
    q1, q2 = a / (2 - a), 2 * a * a / (1 + a)
    var = (a * (1 - a) + (n_in - 1) * (q1 - a * a) + (n_out - 1) * (q2 - a * a)) / (n_in * n_out)
    t, order = s_out.sort()
    lo = torch.searchsorted(t, s_in, right=False)
    hi = torch.searchsorted(t, s_in, right=True)
    stats = []
    for start in range(0, n_boot, chunk):
        b = min(chunk, n_boot - start)
        w_in = _resample_weights(n_in, b, generator)
        w_out = _resample_weights(n_out, b, generator)[:, order]
        cum = torch.cat([torch.zeros(b, 1, dtype=torch.float64), w_out.cumsum(1)], dim=1)
        below, upto = cum[:, lo], cum[:, hi]
        stats.append((w_in * (below + 0.5 * (upto - below))).sum(1) / (n_in * n_out))
    boot = torch.cat(stats)
    tail = (1 - level) / 2
    low, high = torch.quantile(boot, torch.tensor([tail, 1 - tail], dtype=torch.float64)).tolist()
    return DetectionReport(
        auroc=a, auroc_interval=(low, high), auroc_stderr=math.sqrt(max(var, 0.0)),
        aupr_in=aupr(s_in, s_out, positive="in"), aupr_out=aupr(s_in, s_out, positive="out"),
        fpr95=fpr_at_tpr(s_in, s_out, 0.95), n_in=n_in, n_out=n_out, n_boot=n_boot, level=float(level),
    )


def _logits(classifier: Callable[[Tensor], Tensor], xb: Tensor) -> Tensor:
    out = classifier(xb)
    if not isinstance(out, Tensor) or out.dim() != 2 or out.shape[0] != xb.shape[0] or out.shape[1] == 0:
        got = tuple(out.shape) if isinstance(out, Tensor) else type(out).__name__
        raise ValueError(f"classifier(x): expected logits of shape ({xb.shape[0]}, K) with K >= 1; got {got}")
    return check_finite(out, "classifier(x)")


def ood_scores(classifier: Callable[[Tensor], Tensor], x: Tensor, *, kind: str = "logp",
               batch_size: int = 256) -> Tensor:
    """Per-point OOD scores (higher = more in-distribution) from a classifier's logits.

    Args:
        classifier: maps ``(B, *event)`` to logits ``(B, K)``; its mode (train/eval) is left as it is.
            ``"grad_norm"`` differentiates the summed scores of a batch, which is per-point only when
            rows do not interact (GroupNorm/LayerNorm or eval-mode BatchNorm, not train-mode BatchNorm).
        x: ``(N, *event)`` floating inputs, ``N >= 1``.
        kind: ``"logp"`` (``logsumexp f(x)``, i.e. ``-E(x)``), ``"max_softmax"`` or ``"grad_norm"``
            (``-||grad_x logsumexp f(x)||_2`` over all event dimensions).
        batch_size: rows per classifier call (one forward, plus one backward for ``"grad_norm"``).

    Returns:
        ``(N,)`` detached scores, dtype of the logits, on ``x``'s device. Parameter ``.grad`` is untouched.
    """
    check_choice(kind, "kind", OOD_SCORE_KINDS)
    if not callable(classifier):
        raise TypeError(f"classifier: expected a callable (B, *event) -> (B, K); got {type(classifier).__name__}")
    check_tensor(x, "x", floating=True, min_dim=1)
    if x.shape[0] == 0:
        raise ValueError(f"x: expected at least one row; got shape {tuple(x.shape)}")
    check_finite(x, "x")
    check_int(batch_size, "batch_size", minimum=1)
    parts = []
    for xb in x.detach().split(batch_size):
        if kind == "grad_norm":
            with torch.enable_grad():
                xb = xb.clone().requires_grad_(True)
                lse = torch.logsumexp(_logits(classifier, xb), dim=1)
                if not lse.requires_grad:
                    raise ValueError("classifier(x): expected logits differentiable in x for kind='grad_norm'; "
                                     "got a result without a graph (is the classifier run under no_grad?)")
                (grad,) = torch.autograd.grad(lse.sum(), xb, allow_unused=True)
            if grad is None:  # logits do not depend on x: the density is flat everywhere
                grad = torch.zeros_like(xb)
            parts.append(-grad.flatten(1).norm(dim=1).to(lse.dtype))
        else:
            with torch.no_grad():
                z = _logits(classifier, xb)
                parts.append(torch.logsumexp(z, 1) if kind == "logp" else torch.softmax(z, 1).amax(1))
    return torch.cat(parts)
