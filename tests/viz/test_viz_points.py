"""plot_points (points of any dimension in one panel) and plot_energy_and_density write figures."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from matplotlib.figure import Figure

from ebms.data import get_toy
from ebms.nets import GaussianEnergy
from ebms.viz import new_figure, plot_energy_and_density, plot_points, save_figure

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def _assert_png(fig: Figure, path: Path) -> None:
    assert isinstance(fig, Figure)
    data = save_figure(fig, path).read_bytes()
    assert len(data) > 1000 and data.startswith(PNG_MAGIC)


def test_plot_points_in_1d_is_a_density_histogram_over_the_first_range(tmp_path: Path) -> None:
    x = torch.randn(2000, 1, generator=torch.Generator().manual_seed(0))
    fig = plot_points(x, ((-6.0, 6.0),), title="one")
    ax = fig.axes[0]
    heights = np.array([p.get_height() for p in ax.patches])
    widths = np.array([p.get_width() for p in ax.patches])
    assert len(ax.patches) == 60 and ax.get_title() == "one"
    assert float((heights * widths).sum()) == pytest.approx(1.0, abs=1e-9)  # every point lies inside (-6, 6)
    assert ax.patches[0].get_x() == pytest.approx(-6.0) and ax.patches[-1].get_x() + widths[-1] == pytest.approx(6.0)
    _assert_png(fig, tmp_path / "hist.png")


def test_plot_points_in_2d_is_a_scatter_within_the_bounds(tmp_path: Path) -> None:
    ds = get_toy("two_moons")
    x = ds.sample(300, generator=torch.Generator().manual_seed(0))
    fig = plot_points(x, ds.bounds, title="moons")
    ax = fig.axes[0]
    assert ax.get_title() == "moons" and ax.collections[0].get_offsets().shape == (300, 2)
    assert ax.get_xlim() == pytest.approx(ds.bounds[0]) and ax.get_ylim() == pytest.approx(ds.bounds[1])
    _assert_png(fig, tmp_path / "scatter.png")


def test_plot_points_beyond_2d_shows_the_first_two_coordinates_and_says_so() -> None:
    x = np.arange(12.0).reshape(4, 3)
    fig = new_figure()
    ax = fig.add_subplot(1, 1, 1)
    assert plot_points(x, ((0.0, 12.0), (0.0, 12.0), (0.0, 12.0)), ax=ax, title="x") is fig
    assert ax.get_title() == "x (first 2 coordinates)"
    np.testing.assert_array_equal(ax.collections[0].get_offsets(), x[:, :2])


def test_plot_points_names_bad_points_and_bounds() -> None:
    with pytest.raises(TypeError, match=r"x: expected a torch.Tensor or numpy array of shape \(N, D\); got list"):
        plot_points([[0.0, 1.0]], ((0, 1), (0, 1)))
    with pytest.raises(ValueError, match=r"x: expected shape \(N, D\) with D >= 1; got \(5,\)"):
        plot_points(torch.zeros(5), ((0, 1),))
    with pytest.raises(ValueError, match=r"x: expected shape \(N, D\) with D >= 1; got \(5, 0\)"):
        plot_points(torch.zeros(5, 0), ())
    with pytest.raises(ValueError, match="bounds: expected a \\(low, high\\) range for each of the first 2 "
                                         "coordinates; got 1"):
        plot_points(torch.zeros(5, 3), ((0, 1),))
    with pytest.raises(ValueError, match="x: expected finite points; got 1 of 2 rows with NaN/Inf"):
        plot_points(torch.tensor([[0.0, 1.0], [float("nan"), 0.0]]), ((0, 1), (0, 1)))


def test_plot_energy_and_density_writes_both_panels(tmp_path: Path) -> None:
    fig = plot_energy_and_density(GaussianEnergy(2, learnable=False), ((-4.0, 4.0), (-4.0, 4.0)), resolution=40)
    panels = [ax for ax in fig.axes if ax.images]  # the colour bars are axes too
    assert [ax.get_title() for ax in panels] == ["energy E(x)", "density exp(-E)/Z"]
    density = np.asarray(panels[1].images[0].get_array())
    assert density.shape == (40, 40) and float(density.sum()) * (8 / 40) ** 2 == pytest.approx(1.0, abs=1e-9)
    _assert_png(fig, tmp_path / "energy.png")
