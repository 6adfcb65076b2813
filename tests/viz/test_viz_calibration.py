"""Reliability diagrams, ROC curves and energy histograms: figures whose drawn data are the metrics'
numbers, valid PNGs, reuse of a given axes, and messages naming the argument."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from matplotlib.figure import Figure

from ebms.metrics.calibration import calibration_bins
from ebms.metrics.ood import auroc, roc_curve
from ebms.viz.calibration import plot_energy_histograms, plot_reliability, plot_roc
from ebms.viz.figure import new_figure, save_figure

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def _probs(n: int = 300, k: int = 4, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    z = 2 * torch.randn(n, k, generator=g)
    y = torch.multinomial(torch.softmax(z / 2, 1), 1, generator=g)[:, 0]
    return torch.softmax(z, 1), y


def _png(fig: Figure, path: Path) -> None:
    assert isinstance(fig, Figure)
    data = save_figure(fig, path).read_bytes()
    assert data.startswith(PNG_MAGIC) and len(data) > 1000


def test_reliability_bars_are_the_bin_accuracies(tmp_path: Path) -> None:
    probs, y = _probs()
    fig = plot_reliability(probs, y, n_bins=10, title="top label")
    bins = calibration_bins(probs, y, n_bins=10, kind="top_label")
    ax = fig.axes[0]
    filled = (bins.counts > 0).numpy()
    acc_bars = ax.containers[0]
    np.testing.assert_allclose([p.get_height() for p in acc_bars], bins.accuracy.numpy()[filled], atol=1e-12)
    np.testing.assert_allclose([p.get_x() for p in acc_bars], bins.edges.numpy()[:-1][filled], atol=1e-12)
    gap_bars = ax.containers[1]
    gaps = (bins.accuracy - bins.confidence).abs().numpy()[filled]
    np.testing.assert_allclose([p.get_height() for p in gap_bars], gaps, atol=1e-12)
    assert any(f"{bins.ece():.4f}" in t.get_text() for t in ax.get_legend().get_texts())
    assert ax.get_title() == "top label"
    _png(fig, tmp_path / "reliability.png")


def test_reliability_pools_classwise_bins_over_classes() -> None:
    probs, y = _probs(k=3)
    bins = calibration_bins(probs, y, n_bins=5)
    fig = plot_reliability(bins)
    counts = bins.counts.sum(0).double()
    pooled_acc = (bins.counts * bins.accuracy).sum(0) / counts.clamp(min=1)
    heights = [p.get_height() for p in fig.axes[0].containers[0]]
    np.testing.assert_allclose(heights, pooled_acc[counts > 0].numpy(), atol=1e-12)
    assert any("classwise" in t.get_text() for t in fig.axes[0].get_legend().get_texts())


def test_roc_lines_are_the_roc_curves(tmp_path: Path) -> None:
    g = torch.Generator().manual_seed(1)
    s_in = torch.randn(80, generator=g) + 1
    outs = {"noise": torch.randn(60, generator=g), "flipped": (torch.randn(50, generator=g) + 0.5).numpy()}
    fig = plot_roc(s_in, outs, title="ROC")
    lines = fig.axes[0].get_lines()
    assert len(lines) == 3  # two curves and the chance diagonal
    fpr, tpr = roc_curve(s_in, outs["noise"])
    np.testing.assert_allclose(lines[0].get_xdata(), fpr.numpy())
    np.testing.assert_allclose(lines[0].get_ydata(), tpr.numpy())
    labels = [t.get_text() for t in fig.axes[0].get_legend().get_texts()]
    assert labels[0] == f"noise (AUROC {auroc(s_in, outs['noise']):.3f})" and labels[1].startswith("flipped (AUROC")
    _png(fig, tmp_path / "roc.png")


def test_energy_histograms_share_bins(tmp_path: Path) -> None:
    g = torch.Generator().manual_seed(2)
    energies = {"data": torch.randn(200, generator=g), "samples": torch.randn(100, generator=g) + 0.5,
                "noise": np.full(30, 4.0)}
    fig = plot_energy_histograms(energies, bins=20)
    ax = fig.axes[0]
    assert len(ax.patches) == 3
    xs = [p.get_xy()[:, 0] for p in ax.patches]
    assert all(x.min() == pytest.approx(xs[0].min()) and x.max() == pytest.approx(xs[0].max()) for x in xs)
    assert [t.get_text().split(" ")[0] for t in ax.get_legend().get_texts()] == ["data", "samples", "noise"]
    _png(fig, tmp_path / "hist.png")
    constant = plot_energy_histograms({"flat": torch.zeros(5)}, density=False)
    assert constant.axes[0].get_ylabel() == "count"


def test_plots_reuse_the_given_axes() -> None:
    fig = new_figure()
    ax = fig.add_subplot(1, 1, 1)
    probs, y = _probs()
    assert plot_reliability(probs, y, ax=ax) is fig
    assert plot_roc(torch.randn(5), {"a": torch.randn(5)}, ax=ax) is fig
    assert plot_energy_histograms({"a": torch.randn(5)}, ax=ax) is fig
    assert len(fig.axes) == 1


def test_bad_plot_inputs_name_the_argument() -> None:
    probs, y = _probs()
    bins = calibration_bins(probs, y)
    with pytest.raises(ValueError, match="labels: expected None when bins is a CalibrationBins"):
        plot_reliability(bins, y)
    with pytest.raises(ValueError, match=r"labels: expected \(N,\) integer labels with probabilities; got None"):
        plot_reliability(probs)
    with pytest.raises(ValueError, match="n_bins: expected an int >= 1"):
        plot_reliability(probs, y, n_bins=0)
    with pytest.raises(ValueError, match="kind: expected one of"):
        plot_reliability(probs, y, kind="class")
    with pytest.raises(ValueError, match="scores_out_by_name: expected a non-empty dict"):
        plot_roc(torch.randn(4), {})
    with pytest.raises(TypeError, match=r"scores_in: expected a torch.Tensor or numpy array of shape \(N,\); got list"):
        plot_roc([0.1, 0.2], {"a": torch.randn(3)})
    with pytest.raises(ValueError, match=r"scores_out_by_name\['a'\]: expected a non-empty 1-D array of scores"):
        plot_roc(torch.randn(4), {"a": torch.randn(2, 2)})
    with pytest.raises(ValueError, match="energies: expected a non-empty dict"):
        plot_energy_histograms({})
    with pytest.raises(ValueError, match=r"energies\['x'\]: expected a non-empty 1-D array \(N,\); got shape \(2, 2\)"):
        plot_energy_histograms({"x": torch.zeros(2, 2)})
    with pytest.raises(ValueError, match=r"energies\['x'\]: expected finite energies; got 1 NaN/Inf"):
        plot_energy_histograms({"x": torch.tensor([0.0, float("nan")])})
    with pytest.raises(TypeError, match=r"energies\['x'\]: expected a torch.Tensor or numpy array"):
        plot_energy_histograms({"x": [1.0, 2.0]})
    with pytest.raises(ValueError, match="bins: expected an int >= 1"):
        plot_energy_histograms({"x": torch.zeros(3)}, bins=0)
    with pytest.raises(TypeError, match="ax: expected a matplotlib Axes or None; got str"):
        plot_roc(torch.randn(4), {"a": torch.randn(3)}, ax="here")  # type: ignore[arg-type]
