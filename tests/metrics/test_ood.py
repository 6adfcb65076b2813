"""OOD detection metrics against scikit-learn 1.9.1 (``roc_auc_score``, ``average_precision_score``,
``roc_curve``) on random and heavily tied scores; the vectorised bootstrap against a naive one; the
Hanley–McNeil stderr against hand arithmetic and Monte Carlo; JEM scores against autograd and finite
differences; every validation message."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from sklearn.metrics import average_precision_score, roc_auc_score
from sklearn.metrics import roc_curve as sk_roc_curve

from ebms.metrics.ood import DetectionReport, aupr, auroc, detection_report, fpr_at_tpr, ood_scores, roc_curve


def _case(kind: str, n_in: int, n_out: int, seed: int, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    if kind == "random":
        return (torch.randn(n_in, generator=g, dtype=dtype) + 0.7, torch.randn(n_out, generator=g, dtype=dtype))
    # tied: few distinct values, shared between the two sets
    return (torch.randint(0, 4, (n_in,), generator=g).to(dtype), torch.randint(0, 3, (n_out,), generator=g).to(dtype))


def _sk(s_in: torch.Tensor, s_out: torch.Tensor) -> tuple[np.ndarray, np.ndarray]:
    y = np.r_[np.ones(s_in.shape[0]), np.zeros(s_out.shape[0])]
    return y, np.r_[s_in.double().numpy(), s_out.double().numpy()]


CASES = [(kind, n_in, n_out, dtype) for kind in ("random", "tied") for (n_in, n_out) in [(1, 1), (7, 3), (100, 250)]
         for dtype in (torch.float32, torch.float64)]


@pytest.mark.parametrize(("kind", "n_in", "n_out", "dtype"), CASES)
def test_auroc_and_aupr_equal_sklearn(kind: str, n_in: int, n_out: int, dtype: torch.dtype) -> None:
    s_in, s_out = _case(kind, n_in, n_out, seed=n_in * 31 + n_out, dtype=dtype)
    y, s = _sk(s_in, s_out)
    assert auroc(s_in, s_out) == pytest.approx(roc_auc_score(y, s), abs=1e-12)
    assert aupr(s_in, s_out) == pytest.approx(average_precision_score(y, s), abs=1e-12)
    assert aupr(s_in, s_out, positive="out") == pytest.approx(average_precision_score(1 - y, -s), abs=1e-12)


@pytest.mark.parametrize(("kind", "n_in", "n_out", "dtype"), CASES)
def test_roc_curve_and_fpr_at_tpr_equal_sklearn(kind: str, n_in: int, n_out: int, dtype: torch.dtype) -> None:
    s_in, s_out = _case(kind, n_in, n_out, seed=n_in + 17 * n_out, dtype=dtype)
    y, s = _sk(s_in, s_out)
    fpr_ref, tpr_ref, _ = sk_roc_curve(y, s, drop_intermediate=False)
    fpr, tpr = roc_curve(s_in, s_out)
    np.testing.assert_allclose(fpr.numpy(), fpr_ref, rtol=0, atol=1e-15)
    np.testing.assert_allclose(tpr.numpy(), tpr_ref, rtol=0, atol=1e-15)
    for target in (0.01, 0.5, 0.95, 1.0):
        ref = fpr_ref[np.searchsorted(tpr_ref, target)]  # the first (largest-threshold) point with TPR >= target
        assert fpr_at_tpr(s_in, s_out, target) == pytest.approx(ref, abs=1e-15), target


def test_fpr95_with_exactly_95_percent_reachable() -> None:
    # 0.95 * 100 = 95.00000000000001 in floating point; the 95th largest in-score is still the threshold
    s_in = torch.arange(100, dtype=torch.float64)  # 95th largest is 5
    s_out = torch.tensor([4.5, 5.0, 5.5, 100.0], dtype=torch.float64)
    assert fpr_at_tpr(s_in, s_out) == 0.75  # 5.0, 5.5 and 100 are >= 5


def test_degenerate_sets() -> None:
    one, zero = torch.tensor([1.0]), torch.tensor([0.0])
    assert auroc(one, zero) == 1.0 and auroc(zero, one) == 0.0 and auroc(one, one) == 0.5
    same_in, same_out = torch.full((3,), 2.0), torch.full((5,), 2.0)
    assert auroc(same_in, same_out) == 0.5
    assert aupr(same_in, same_out) == pytest.approx(3 / 8) and aupr(same_in, same_out, positive="out") == 5 / 8
    assert fpr_at_tpr(same_in, same_out) == 1.0


def test_bootstrap_interval_equals_naive_resampling() -> None:
    s_in, s_out = _case("tied", 40, 25, seed=3, dtype=torch.float64)
    rep = detection_report(s_in, s_out, n_boot=200, level=0.9, generator=torch.Generator().manual_seed(8), chunk=64)
    g = torch.Generator().manual_seed(8)  # the same draws, in the same order: per chunk, in-indices then out
    stats = []
    for start in range(0, 200, 64):
        b = min(64, 200 - start)
        idx_in = torch.randint(0, 40, (b, 40), generator=g)
        idx_out = torch.randint(0, 25, (b, 25), generator=g)
        stats += [roc_auc_score(*_sk(s_in[idx_in[r]], s_out[idx_out[r]])) for r in range(b)]
    low, high = np.quantile(np.array(stats), [0.05, 0.95])
    assert rep.auroc_interval == pytest.approx((low, high), abs=1e-12)
    assert isinstance(rep, DetectionReport) and (rep.n_in, rep.n_out, rep.n_boot, rep.level) == (40, 25, 200, 0.9)


def test_report_fields_match_the_single_metrics() -> None:
    s_in, s_out = _case("random", 60, 80, seed=4, dtype=torch.float32)
    rep = detection_report(s_in, s_out, n_boot=50, generator=torch.Generator().manual_seed(0))
    assert rep.auroc == auroc(s_in, s_out) and rep.fpr95 == fpr_at_tpr(s_in, s_out)
    assert rep.aupr_in == aupr(s_in, s_out) and rep.aupr_out == aupr(s_in, s_out, positive="out")
    assert rep.auroc_interval[0] <= rep.auroc_interval[1]
    again = detection_report(s_in, s_out, n_boot=50, generator=torch.Generator().manual_seed(0))
    assert again == rep  # same generator, same report
    assert set(rep.as_dict()) >= {"auroc", "auroc_low", "auroc_high", "auroc_stderr", "fpr95"}


def test_hanley_mcneil_stderr_equals_hand_arithmetic() -> None:
    s_in = torch.tensor([3.0, 2.0, 0.5])
    s_out = torch.tensor([1.0, 0.0])
    # placements: 3 -> 2, 2 -> 2, 0.5 -> 1; A = 5/6
    a = 5 / 6
    q1, q2 = a / (2 - a), 2 * a * a / (1 + a)
    se = math.sqrt((a * (1 - a) + 2 * (q1 - a * a) + 1 * (q2 - a * a)) / 6)
    rep = detection_report(s_in, s_out, n_boot=10, generator=torch.Generator().manual_seed(0))
    assert rep.auroc == pytest.approx(a) and rep.auroc_stderr == pytest.approx(se, rel=1e-12)


def test_hanley_mcneil_variance_matches_monte_carlo_for_exponential_scores() -> None:
    # In Exp(rate 1/3) vs out Exp(rate 1): A = 1/(1 + 1/3) = .75, and Hanley–McNeil's Q1, Q2 are exact, so
    # their formula is the exact variance of the AUROC. M = 2000 data sets; the sample variance has a
    # relative standard error of about sqrt(2 / (M - 1)) = .032 (normal approximation); z = 4 -> 12.7%.
    g = torch.Generator().manual_seed(21)
    m, n_in, n_out = 2000, 30, 40
    e_in = torch.empty(m, n_in, dtype=torch.float64).exponential_(1 / 3, generator=g)
    e_out = torch.empty(m, n_out, dtype=torch.float64).exponential_(1.0, generator=g)
    areas = torch.tensor([auroc(e_in[i], e_out[i]) for i in range(m)], dtype=torch.float64)
    a = 0.75
    q1, q2 = a / (2 - a), 2 * a * a / (1 + a)
    var_hm = (a * (1 - a) + (n_in - 1) * (q1 - a * a) + (n_out - 1) * (q2 - a * a)) / (n_in * n_out)
    var_mc = float(areas.var())
    assert abs(var_mc / var_hm - 1) < 4 * math.sqrt(2 / (m - 1))
    assert abs(float(areas.mean()) - a) < 4 * math.sqrt(var_hm / m)


class _MLP(torch.nn.Module):
    def __init__(self, dtype: torch.dtype) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.net = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(6, 8), torch.nn.Tanh(),
                                       torch.nn.Linear(8, 3)).to(dtype)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_logp_and_max_softmax_scores(dtype: torch.dtype) -> None:
    f = _MLP(dtype)
    x = torch.randn(11, 2, 3, generator=torch.Generator().manual_seed(1), dtype=dtype)
    with torch.no_grad():
        z = f(x)
    lp = ood_scores(f, x, kind="logp", batch_size=4)
    ms = ood_scores(f, x, kind="max_softmax", batch_size=100)
    assert lp.shape == (11,) and lp.dtype == dtype and not lp.requires_grad
    torch.testing.assert_close(lp, torch.logsumexp(z, 1))
    torch.testing.assert_close(ms, torch.softmax(z, 1).max(1).values)


def test_grad_norm_score_equals_per_point_autograd_and_finite_differences() -> None:
    f = _MLP(torch.float64)
    x = torch.randn(5, 2, 3, generator=torch.Generator().manual_seed(2), dtype=torch.float64)
    got = ood_scores(f, x, kind="grad_norm", batch_size=2)
    for i in range(5):
        xi = x[i : i + 1].clone().requires_grad_(True)
        (grad,) = torch.autograd.grad(torch.logsumexp(f(xi), 1).sum(), xi)
        assert float(got[i]) == pytest.approx(-float(grad.norm()), rel=1e-12)
        # central differences of logsumexp f over the 6 input coordinates (error O(h^2) ~ 1e-10)
        h, fd = 1e-5, torch.zeros(6, dtype=torch.float64)
        for j in range(6):
            e = torch.zeros(6, dtype=torch.float64)
            e[j] = h
            with torch.no_grad():
                up = torch.logsumexp(f(x[i : i + 1] + e.view(1, 2, 3)), 1)
                dn = torch.logsumexp(f(x[i : i + 1] - e.view(1, 2, 3)), 1)
            fd[j] = float((up - dn) / (2 * h))
        assert float(got[i]) == pytest.approx(-float(fd.norm()), rel=1e-7)
    assert all(p.grad is None for p in f.parameters()) and not x.requires_grad


def test_grad_norm_is_zero_when_logits_ignore_x() -> None:
    w = torch.nn.Parameter(torch.randn(3))
    scores = ood_scores(lambda x: w.expand(x.shape[0], 3), torch.randn(4, 2), kind="grad_norm")
    assert torch.equal(scores, torch.zeros(4))


def test_bad_ood_score_inputs_name_the_argument() -> None:
    f = _MLP(torch.float32)
    x = torch.randn(3, 2, 3)
    with pytest.raises(ValueError, match="kind: expected one of 'grad_norm', 'logp', 'max_softmax'; got 'energy'"):
        ood_scores(f, x, kind="energy")
    with pytest.raises(TypeError, match="classifier: expected a callable"):
        ood_scores(3, x)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="x: expected a torch.Tensor"):
        ood_scores(f, x.numpy())  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="x: expected a floating-point tensor"):
        ood_scores(f, torch.zeros(3, 2, 3, dtype=torch.long))
    with pytest.raises(ValueError, match=r"x: expected at least 1 dimension\(s\) \(batch first\); got shape \(\)"):
        ood_scores(f, torch.tensor(1.0))
    with pytest.raises(ValueError, match=r"x: expected at least one row; got shape \(0, 2, 3\)"):
        ood_scores(f, torch.zeros(0, 2, 3))
    with pytest.raises(ValueError, match="x: expected a finite tensor"):
        ood_scores(f, torch.full((3, 2, 3), float("nan")))
    with pytest.raises(ValueError, match="batch_size: expected an int >= 1"):
        ood_scores(f, x, batch_size=0)
    with pytest.raises(ValueError, match=r"classifier\(x\): expected logits of shape \(3, K\) with K >= 1; got \(3,\)"):
        ood_scores(lambda t: t.sum((1, 2)), x)
    with pytest.raises(ValueError, match=r"classifier\(x\): expected logits .* got list"):
        ood_scores(lambda t: [0.0], x)  # type: ignore[arg-type, return-value]
    with pytest.raises(ValueError, match=r"classifier\(x\): expected a finite tensor"):
        ood_scores(lambda t: torch.full((t.shape[0], 2), float("inf")), x)

    def frozen(t: torch.Tensor) -> torch.Tensor:
        with torch.no_grad():
            return f(t)

    with pytest.raises(ValueError, match=r"classifier\(x\): expected logits differentiable in x"):
        ood_scores(frozen, x, kind="grad_norm")


@pytest.mark.parametrize(
    ("call", "err", "match"),
    [
        (lambda: auroc([1.0], torch.tensor([0.0])), TypeError, "scores_in: expected a torch.Tensor; got list"),
        (lambda: auroc(torch.tensor([1]), torch.tensor([0.0])), TypeError, "scores_in: expected a floating-point"),
        (lambda: auroc(torch.ones(2, 2), torch.tensor([0.0])), ValueError,
         r"scores_in: expected a non-empty 1-D tensor of scores \(N,\); got shape \(2, 2\)"),
        (lambda: auroc(torch.tensor([1.0]), torch.zeros(0)), ValueError,
         r"scores_out: expected a non-empty 1-D tensor of scores \(N,\); got shape \(0,\)"),
        (lambda: aupr(torch.tensor([1.0]), torch.tensor([float("nan")])), ValueError,
         "scores_out: expected a finite tensor; got 1 NaN"),
        (lambda: roc_curve(torch.tensor([float("inf")]), torch.tensor([0.0])), ValueError,
         "scores_in: expected a finite tensor; got 0 NaN and 1 Inf"),
        (lambda: aupr(torch.tensor([1.0]), torch.tensor([0.0]), positive="ood"), ValueError,
         "positive: expected 'in' or 'out'; got 'ood'"),
        (lambda: fpr_at_tpr(torch.tensor([1.0]), torch.tensor([0.0]), 0.0), ValueError,
         r"tpr: expected a number in \(0, 1\]; got 0.0"),
        (lambda: fpr_at_tpr(torch.tensor([1.0]), torch.tensor([0.0]), "x"), TypeError, "tpr: expected a number"),
        (lambda: detection_report(torch.tensor([1.0]), torch.tensor([0.0]), n_boot=1), ValueError,
         "n_boot: expected an int >= 2"),
        (lambda: detection_report(torch.tensor([1.0]), torch.tensor([0.0]), level=1.0), ValueError,
         r"level: expected a number in \(0, 1\); got 1.0"),
        (lambda: detection_report(torch.tensor([1.0]), torch.tensor([0.0]), chunk=0), ValueError,
         "chunk: expected an int >= 1"),
        (lambda: detection_report(torch.tensor([1.0]), torch.tensor([0.0]), generator=0), TypeError,
         "generator: expected a torch.Generator or None; got int"),
    ],
)
def test_bad_metric_inputs_name_the_argument(call, err, match) -> None:
    with pytest.raises(err, match=match):
        call()
