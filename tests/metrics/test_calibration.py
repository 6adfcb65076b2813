"""Binned ECE (class-wise Eq. 5.19 and top-label) against hand arithmetic and an independent numpy
binning; temperature scaling against a grid search of the NLL; every validation message.

The scikit-learn cross-check uses ``sklearn.calibration.calibration_curve`` (scikit-learn 1.9.1), whose
uniform bins are closed on the right; on continuous random probabilities no value sits on an edge, so
its per-bin figures must equal ours.
"""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from ebms.metrics.calibration import (
    CalibrationBins,
    CalibrationReport,
    TemperatureScaling,
    calibration_bins,
    calibration_report,
    expected_calibration_error,
)

# Hand example, 4 bins [0, .25), [.25, .5), [.5, .75), [.75, 1]; every probability is a binary fraction,
# and several sit exactly on a bin edge (0.25, 0.5, 0.75, 1.0), so the edge convention matters.
HAND_PROBS = torch.tensor([[1.0, 0.0], [0.75, 0.25], [0.5, 0.5], [0.25, 0.75]], dtype=torch.float64)
HAND_LABELS = torch.tensor([0, 1, 0, 1])


def _random_case(n: int, k: int, seed: int, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    logits = 2.0 * torch.randn(n, k, generator=g, dtype=torch.float64)
    labels = torch.multinomial(torch.softmax(1.5 * logits, 1), 1, generator=g)[:, 0]
    return torch.softmax(logits, 1).to(dtype), labels


def _numpy_ece(probs: np.ndarray, labels: np.ndarray, n_bins: int, kind: str) -> float:
    """Reference written from the definition: np.digitize on edges b / n_bins, last bin closed."""
    n, k = probs.shape
    interior = np.arange(1, n_bins) / n_bins
    if kind == "top_label":
        conf = probs.max(1)
        hit = (probs.argmax(1) == labels).astype(float)
        columns = [(conf, hit)]
    else:
        columns = [(probs[:, y], (labels == y).astype(float)) for y in range(k)]
    total = 0.0
    for conf, hit in columns:
        idx = np.digitize(conf, interior)  # interior[i-1] <= p < interior[i]; p = 1 lands in the last bin
        for b in range(n_bins):
            m = idx == b
            if m.any():
                total += m.sum() / n * abs(hit[m].mean() - conf[m].mean())
    return total / len(columns)


def test_classwise_ece_equals_hand_computation() -> None:
    # class 0: bin 3 {1.0, .75} conf .875 acc .5 -> 2/4 * .375; bin 2 {.5} acc 1 -> 1/4 * .5; bin 1 {.25} acc 0
    #   -> 1/4 * .25; total .375. class 1: bin 0 {0} 0; bin 1 {.25} acc 1 -> .1875; bin 2 {.5} acc 0 -> .125;
    #   bin 3 {.75} acc 1 -> .0625; total .375. Mean over the two classes: .375.
    assert expected_calibration_error(HAND_PROBS, HAND_LABELS, n_bins=4) == pytest.approx(0.375, abs=1e-15)
    bins = calibration_bins(HAND_PROBS, HAND_LABELS, n_bins=4)
    assert bins.counts.tolist() == [[0, 1, 1, 2], [1, 1, 1, 1]]
    assert bins.confidence[0].tolist() == [0.0, 0.25, 0.5, 0.875]
    assert bins.accuracy[0].tolist() == [0.0, 0.0, 1.0, 0.5]


def test_top_label_ece_equals_hand_computation() -> None:
    # float64: 0.7 is the same double as 7 / 10, so it sits on the edge and opens bin 7 (in float32 it
    # would be 0.69999999 and fall into bin 6)
    probs = torch.tensor([[0.8, 0.2], [0.3, 0.7], [0.6, 0.4]], dtype=torch.float64)
    labels = torch.tensor([0, 0, 0])
    # one row per bin 8, 7, 6: |1 - .8| + |0 - .7| + |1 - .6| over 3 rows
    expected = (0.2 + 0.7 + 0.4) / 3
    assert expected_calibration_error(probs, labels, n_bins=10, kind="top_label") == pytest.approx(expected, abs=1e-7)


def test_bin_edges_left_closed_and_last_bin_closed() -> None:
    probs = torch.tensor([[0.0, 1.0], [0.05, 0.95], [0.049, 0.951], [0.051, 0.949]], dtype=torch.float64)
    bins = calibration_bins(probs, torch.tensor([0, 1, 1, 0]), n_bins=20)
    # class 0: 0 and .049 in bin 0 = [0, .05); .05 and .051 in bin 1 = [.05, .1)
    assert bins.counts[0, 0] == 2 and bins.counts[0, 1] == 2 and int(bins.counts[0].sum()) == 4
    # class 1: 1.0, .95 and .951 in the last bin [.95, 1]; .949 in bin 18 = [.9, .95)
    assert bins.counts[1, 19] == 3 and bins.counts[1, 18] == 1
    assert torch.equal(bins.edges, torch.arange(21, dtype=torch.float64) / 20)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("kind", ["classwise", "top_label"])
@pytest.mark.parametrize(("n", "k", "n_bins"), [(1, 3, 20), (257, 4, 20), (500, 10, 15), (64, 2, 1)])
def test_ece_equals_numpy_reference_binning(dtype: torch.dtype, kind: str, n: int, k: int, n_bins: int) -> None:
    probs, labels = _random_case(n, k, seed=n + k, dtype=dtype)
    ours = expected_calibration_error(probs, labels, n_bins=n_bins, kind=kind)
    ref = _numpy_ece(probs.double().numpy(), labels.numpy(), n_bins, kind)
    assert ours == pytest.approx(ref, rel=1e-12, abs=1e-15)


def test_classwise_bins_match_sklearn_calibration_curve() -> None:
    from sklearn.calibration import calibration_curve

    probs, labels = _random_case(2000, 3, seed=7, dtype=torch.float64)
    bins = calibration_bins(probs, labels, n_bins=20)
    for y in range(3):
        prob_true, prob_pred = calibration_curve((labels == y).numpy(), probs[:, y].numpy(), n_bins=20)
        filled = bins.counts[y] > 0
        np.testing.assert_allclose(bins.accuracy[y][filled].numpy(), prob_true, rtol=0, atol=1e-14)
        np.testing.assert_allclose(bins.confidence[y][filled].numpy(), prob_pred, rtol=0, atol=1e-14)


def test_counts_cover_every_prediction_and_ece_method_agrees() -> None:
    probs, labels = _random_case(300, 5, seed=3, dtype=torch.float32)
    cw = calibration_bins(probs, labels)
    tl = calibration_bins(probs, labels, kind="top_label")
    assert isinstance(cw, CalibrationBins) and cw.counts.shape == (5, 20) and tl.counts.shape == (20,)
    assert cw.counts.sum(1).tolist() == [300] * 5 and int(tl.counts.sum()) == 300 and cw.n_bins == 20
    assert cw.ece() == expected_calibration_error(probs, labels)
    assert tl.ece() == expected_calibration_error(probs, labels, kind="top_label")


def test_one_hot_predictions_give_exact_extremes() -> None:
    labels = torch.tensor([0, 1, 2, 2, 1])
    right = F.one_hot(labels, 4).double()
    wrong = F.one_hot((labels + 1) % 4, 4).double()
    assert expected_calibration_error(right, labels) == 0.0
    assert expected_calibration_error(right, labels, kind="top_label") == 0.0
    assert expected_calibration_error(wrong, labels, kind="top_label") == 1.0
    # each wrong row adds 1/n twice (predicted class: conf 1, acc 0; true class: conf 0, acc 1): 2 / K
    assert expected_calibration_error(wrong, labels) == pytest.approx(2 / 4, abs=1e-15)


def test_single_class_and_single_row() -> None:
    probs = torch.tensor([[0.7, 0.3]])
    assert expected_calibration_error(probs, torch.tensor([0]), kind="top_label") == pytest.approx(0.3, abs=1e-7)
    # class 0: |1 - .7|; class 1: |0 - .3|; mean .3
    assert expected_calibration_error(probs, torch.tensor([0])) == pytest.approx(0.3, abs=1e-7)
    all_zero = torch.zeros(6, dtype=torch.int64)
    probs6, _ = _random_case(6, 3, seed=1, dtype=torch.float64)
    ref = _numpy_ece(probs6.numpy(), all_zero.numpy(), 20, "classwise")
    assert expected_calibration_error(probs6, all_zero) == pytest.approx(ref, rel=1e-12)


def _nll_grid(z: torch.Tensor, y: torch.Tensor, log_t: torch.Tensor) -> torch.Tensor:
    return torch.stack([F.cross_entropy(z / math.exp(float(t)), y) for t in log_t])


@pytest.mark.parametrize("scale", [3.0, 0.4])
def test_temperature_matches_fine_grid_search(scale: float) -> None:
    g = torch.Generator().manual_seed(11)
    true_logits = 1.5 * torch.randn(1500, 5, generator=g, dtype=torch.float64)
    labels = torch.multinomial(torch.softmax(true_logits, 1), 1, generator=g)[:, 0]
    z = scale * true_logits  # over- (scale 3) or under-confident (scale .4) logits
    ts = TemperatureScaling().fit(z, labels)
    coarse = torch.linspace(-3, 3, 601, dtype=torch.float64)
    best = coarse[_nll_grid(z, labels, coarse).argmin()]
    fine = torch.linspace(float(best) - 0.02, float(best) + 0.02, 801, dtype=torch.float64)
    nll_fine = _nll_grid(z, labels, fine)
    t_grid = float(fine[nll_fine.argmin()])
    assert abs(math.log(ts.temperature) - t_grid) <= float(fine[1] - fine[0])  # within one grid step (5e-5)
    assert float(F.cross_entropy(ts(z), labels)) <= float(nll_fine.min()) + 1e-12  # at least as good as the grid
    assert not ts.at_bound


def test_temperature_fit_is_the_same_from_float32_logits() -> None:
    g = torch.Generator().manual_seed(2)
    z = 4 * torch.randn(400, 3, generator=g)
    labels = torch.multinomial(torch.softmax(z / 4, 1), 1, generator=g)[:, 0]
    t32 = TemperatureScaling().fit(z, labels).temperature
    t64 = TemperatureScaling().fit(z.double(), labels).temperature
    assert t32 == pytest.approx(t64, rel=1e-12)  # computed in float64 from the same float32 values
    assert t32 == pytest.approx(4.0, rel=0.25)  # the generating temperature, loosely


def test_temperature_scaling_keeps_predictions_dtype_and_gradient() -> None:
    z = torch.randn(10, 4, requires_grad=True)
    ts = TemperatureScaling(2.0)
    out = ts(z)
    assert out.dtype == torch.float32 and torch.equal(out.argmax(1), z.argmax(1))
    out.sum().backward()
    assert torch.allclose(z.grad, torch.full_like(z, 0.5))
    assert "2" in repr(ts) and "unfitted" in repr(TemperatureScaling())


def test_temperature_at_bound_warns_for_separable_logits() -> None:
    labels = torch.arange(6) % 3
    z = 5.0 * F.one_hot(labels, 3).double()  # always right: the NLL falls as T -> 0
    with pytest.warns(RuntimeWarning, match=r"beyond bounds=\(0.01, 100.0\); T = 0.01"):
        ts = TemperatureScaling().fit(z, labels)
    assert ts.at_bound and ts.temperature == pytest.approx(0.01)


def test_temperature_flat_nll_keeps_one() -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        ts = TemperatureScaling().fit(torch.zeros(5, 3), torch.tensor([0, 1, 2, 0, 1]))
    assert ts.temperature == 1.0 and not ts.at_bound


def test_calibration_report_figures() -> None:
    g = torch.Generator().manual_seed(5)
    z = 3 * torch.randn(200, 4, generator=g)
    y = torch.randint(0, 4, (200,), generator=g)
    rep = calibration_report(z, y, n_bins=10)
    p = torch.softmax(z.double(), 1)
    assert isinstance(rep, CalibrationReport)
    assert rep.accuracy == float((z.argmax(1) == y).double().mean())
    assert rep.nll == pytest.approx(float(F.cross_entropy(z.double(), y)), rel=1e-12)
    assert rep.ece_classwise == pytest.approx(expected_calibration_error(p, y, n_bins=10), rel=1e-12)
    assert rep.ece_top_label == pytest.approx(expected_calibration_error(p, y, n_bins=10, kind="top_label"), rel=1e-12)
    assert (rep.n, rep.n_classes, rep.n_bins) == (200, 4, 10)
    assert set(rep.as_dict()) == {"accuracy", "nll", "ece_classwise", "ece_top_label", "n"}


@pytest.mark.parametrize(
    ("probs", "labels", "kwargs", "err", "match"),
    [
        ([[0.5, 0.5]], torch.tensor([0]), {}, TypeError, "probs: expected a torch.Tensor; got list"),
        (torch.tensor([[1, 0]]), torch.tensor([0]), {}, TypeError, "probs: expected a floating-point tensor"),
        (torch.tensor([0.5, 0.5]), torch.tensor([0]), {}, ValueError, r"probs: expected probabilities of shape \(N, K\)"),
        (torch.zeros(0, 3), torch.zeros(0, dtype=torch.long), {}, ValueError, r"got shape \(0, 3\)"),
        (torch.tensor([[float("nan"), 1.0]]), torch.tensor([0]), {}, ValueError, "probs: expected a finite tensor"),
        (torch.tensor([[2.0, -1.0]]), torch.tensor([0]), {}, ValueError, r"probs: expected probabilities in \[0, 1\]"),
        (torch.tensor([[0.5, 0.5]]), torch.tensor([0.0]), {}, TypeError, "labels: expected an integer tensor"),
        (torch.tensor([[0.5, 0.5]]), torch.tensor([True]), {}, TypeError, "labels: expected an integer tensor"),
        (torch.tensor([[0.5, 0.5]]), [0], {}, TypeError, "labels: expected a torch.Tensor; got list"),
        (torch.tensor([[0.5, 0.5]]), torch.tensor([0, 1]), {}, ValueError, r"labels: expected shape \(1,\); got \(2,\)"),
        (torch.tensor([[0.5, 0.5]]), torch.tensor([2]), {}, ValueError, r"labels: expected class indices in \[0, 1\]"),
        (torch.tensor([[0.5, 0.5]]), torch.tensor([0]), {"n_bins": 0}, ValueError, "n_bins: expected an int >= 1"),
        (torch.tensor([[0.5, 0.5]]), torch.tensor([0]), {"n_bins": 2.0}, TypeError, "n_bins: expected an int"),
        (torch.tensor([[0.5, 0.5]]), torch.tensor([0]), {"kind": "toplabel"}, ValueError,
         "kind: expected one of 'classwise', 'top_label'; got 'toplabel'"),
    ],
)
def test_bad_calibration_inputs_name_the_argument(probs, labels, kwargs, err, match) -> None:
    with pytest.raises(err, match=match):
        expected_calibration_error(probs, labels, **kwargs)


def test_bad_temperature_scaling_arguments() -> None:
    with pytest.raises(ValueError, match="bounds: expected finite 0 < t_min < t_max"):
        TemperatureScaling(bounds=(1.0, 0.5))
    with pytest.raises(TypeError, match=r"bounds: expected \(t_min, t_max\)"):
        TemperatureScaling(bounds=3.0)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="temperature: expected a finite number > 0 or None; got -1.0"):
        TemperatureScaling(-1.0)
    with pytest.raises(ValueError, match="temperature: expected a finite number > 0 or None; got True"):
        TemperatureScaling(True)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="max_iter: expected an int >= 1"):
        TemperatureScaling(max_iter=0)
    with pytest.raises(RuntimeError, match=r"temperature: not fitted yet; call fit\(logits, labels\) first"):
        TemperatureScaling()(torch.zeros(2, 3))
    with pytest.raises(TypeError, match="logits: expected a floating-point tensor"):
        TemperatureScaling(1.0)(torch.zeros(2, 3, dtype=torch.long))
    with pytest.raises(ValueError, match=r"logits: expected logits of shape \(N, K\)"):
        TemperatureScaling().fit(torch.zeros(3), torch.zeros(3, dtype=torch.long))
    with pytest.raises(ValueError, match=r"labels: expected class indices in \[0, 2\]"):
        TemperatureScaling().fit(torch.zeros(2, 3), torch.tensor([0, 3]))
    with pytest.raises(ValueError, match="logits: expected a finite tensor"):
        calibration_report(torch.tensor([[float("inf"), 0.0]]), torch.tensor([0]))
    with pytest.raises(ValueError, match="n_bins: expected an int >= 1"):
        calibration_report(torch.zeros(2, 3), torch.tensor([0, 1]), n_bins=-1)
