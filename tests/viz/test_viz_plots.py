"""Plots return figures, save valid PNGs, and refuse bad shapes with messages naming the argument."""

from __future__ import annotations

import math
import os
from pathlib import Path

import numpy as np
import pytest
import torch
from matplotlib.figure import Figure

from ebms.data import get_toy
from ebms.nets import GaussianEnergy
from ebms.viz import image_grid, new_figure, plot_energy, plot_samples, plot_traces, save_figure, tile_images

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def _assert_png(fig: Figure, path: Path) -> None:
    assert isinstance(fig, Figure)
    out = save_figure(fig, path)
    data = out.read_bytes()
    assert out == path and len(data) > 1000 and data.startswith(PNG_MAGIC)


@pytest.mark.parametrize("kind", ["density", "energy", "log_density"])
def test_plot_energy_writes_png(kind: str, tmp_path: Path) -> None:
    ds = get_toy("checkerboard")  # has +inf energies off the board
    _assert_png(plot_energy(ds.true_energy(), ds.bounds, resolution=48, kind=kind), tmp_path / f"{kind}.png")


def test_plot_energy_density_image_integrates_to_one() -> None:
    fig = plot_energy(GaussianEnergy(2, learnable=False), 6.0, resolution=60, colorbar=False)
    img = np.asarray(fig.axes[0].images[0].get_array())
    assert img.shape == (60, 60)
    assert float(img.sum()) * (12 / 60) ** 2 == pytest.approx(1.0, abs=1e-9)
    # origin="lower": row 0 is the bottom (y = -6), symmetric here, peak at the centre.
    assert np.unravel_index(img.argmax(), img.shape) in {(29, 29), (29, 30), (30, 29), (30, 30)}


def test_plot_energy_bad_kind_lists_valid_values() -> None:
    with pytest.raises(ValueError, match="kind: expected one of density, energy, log_density; got 'prob'"):
        plot_energy(GaussianEnergy(2), 3.0, kind="prob")


def test_plots_reuse_the_given_axes() -> None:
    fig = new_figure()
    ax = fig.add_subplot(1, 1, 1)
    ds = get_toy("eight_gaussians")
    assert plot_energy(ds.true_energy(), ds.bounds, resolution=32, ax=ax, colorbar=False) is fig
    assert plot_samples(ds.sample(50, generator=torch.Generator().manual_seed(0)), ax=ax, bounds=ds.bounds) is fig
    assert len(fig.axes) == 1
    with pytest.raises(TypeError, match="ax: expected a matplotlib Axes or None; got str"):
        plot_samples(torch.zeros(3, 2), ax="here")  # type: ignore[arg-type]


def test_plot_samples_writes_png_and_sets_bounds(tmp_path: Path) -> None:
    x = get_toy("two_moons").sample(500, generator=torch.Generator().manual_seed(0))
    fig = plot_samples(x, bounds=3.0, title="moons")
    assert fig.axes[0].get_xlim() == (-3.0, 3.0) and fig.axes[0].get_title() == "moons"
    _assert_png(fig, tmp_path / "samples.png")
    _assert_png(plot_samples(x.numpy()), tmp_path / "samples_np.png")


@pytest.mark.parametrize("bad", [torch.zeros(5, 3), torch.zeros(5), torch.zeros(0, 2)])
def test_plot_samples_bad_shape_names_x(bad: torch.Tensor) -> None:
    with pytest.raises(ValueError, match=r"x: expected shape \(N, 2\) with N >= 1; got"):
        plot_samples(bad)


def test_plot_samples_refuses_non_finite_points() -> None:
    x = torch.tensor([[0.0, 0.0], [math.nan, 1.0], [math.inf, 0.0]])
    with pytest.raises(ValueError, match="x: expected finite points; got 2 of 3 rows with NaN/Inf"):
        plot_samples(x)
    with pytest.raises(TypeError, match="x: expected a torch.Tensor or numpy array"):
        plot_samples([[0.0, 1.0]])


@pytest.mark.parametrize("shape", [(10, 1, 8, 8), (10, 3, 8, 8), (10, 8, 8)])
def test_image_grid_writes_png(shape: tuple[int, ...], tmp_path: Path) -> None:
    images = torch.rand(*shape, generator=torch.Generator().manual_seed(0))
    _assert_png(image_grid(images, nrow=4, title="samples"), tmp_path / "grid.png")


def test_tile_images_layout_and_scaling() -> None:
    images = torch.stack([torch.full((1, 2, 3), float(v)) for v in range(5)])  # (5, 1, 2, 3), values 0..4
    tiled = tile_images(images, nrow=2, padding=1, pad_value=0.25)
    assert tiled.shape == (3 * (2 + 1) + 1, 2 * (3 + 1) + 1, 1)
    assert tiled[1, 1, 0] == 0.0 and tiled[1, 5, 0] == 0.25  # image 0 scaled to 0; image 1 = 1/4
    assert tiled[7, 1, 0] == 1.0  # image 4 (max) scaled to 1
    assert tiled[7, 5, 0] == 0.25 and tiled[0, 0, 0] == 0.25  # empty slot and border are padding
    clipped = tile_images(images, nrow=5, padding=0, value_range=(1.0, 3.0))
    assert clipped[0, 0, 0] == 0.0 and clipped[0, 3, 0] == 0.0 and clipped[0, 12, 0] == 1.0


def test_image_grid_bad_shape_names_images() -> None:
    expected = r"images: expected shape \(N, C, H, W\) with C in \(1, 3\), or \(N, H, W\); got \(4, 2, 8, 8\)"
    with pytest.raises(ValueError, match=expected):
        image_grid(torch.zeros(4, 2, 8, 8))
    with pytest.raises(ValueError, match=r"images: expected shape .* got \(8, 8\)"):
        image_grid(torch.zeros(8, 8))
    with pytest.raises(ValueError, match="images: expected finite values; got 1 NaN/Inf"):
        image_grid(torch.tensor([[[math.nan]]]))
    with pytest.raises(ValueError, match=r"value_range: expected finite lo < hi; got \(1.0, 0.0\)"):
        image_grid(torch.zeros(2, 4, 4), value_range=(1.0, 0.0))
    with pytest.raises(ValueError, match="nrow: expected an int >= 1; got 0"):
        image_grid(torch.zeros(2, 4, 4), nrow=0)


@pytest.mark.parametrize("shape", [(50, 4), (50, 4, 3)])
def test_plot_traces_writes_png(shape: tuple[int, ...], tmp_path: Path) -> None:
    chains = torch.randn(*shape, generator=torch.Generator().manual_seed(0)).cumsum(0)
    fig = plot_traces(chains, title="chains")
    assert len(fig.axes) == (shape[2] if len(shape) == 3 else 1)
    _assert_png(fig, tmp_path / "traces.png")


def test_plot_traces_running_mean_is_cumulative_average() -> None:
    chains = torch.tensor([[1.0], [3.0], [5.0]])  # (S=3, C=1)
    lines = plot_traces(chains).axes[0].get_lines()
    assert np.allclose(lines[1].get_ydata(), [1.0, 2.0, 3.0])


def test_plot_traces_says_when_chains_are_left_out() -> None:
    fig = plot_traces(torch.zeros(5, 12), max_chains=3)
    assert "first 3 of 12 chains" in fig.get_suptitle()


def test_plot_traces_bad_arguments_messages() -> None:
    with pytest.raises(ValueError, match=r"chains: expected shape \(S, C\) or \(S, C, D\) .* got \(5,\)"):
        plot_traces(torch.zeros(5))
    with pytest.raises(ValueError, match="dims: expected the dimensions to draw when D > 8; got None with D = 9"):
        plot_traces(torch.zeros(5, 2, 9))
    with pytest.raises(ValueError, match=r"dims: expected a non-empty list of ints in \[0, 3\); got \[3\]"):
        plot_traces(torch.zeros(5, 2, 3), dims=[3])
    with pytest.raises(ValueError, match="names: expected 2 labels"):
        plot_traces(torch.zeros(5, 2, 3), dims=[0, 1], names=["a"])
    fig = new_figure()
    with pytest.raises(ValueError, match="ax: can only hold one dimension; got 3"):
        plot_traces(torch.zeros(5, 2, 3), ax=fig.add_subplot(1, 1, 1))


def test_save_figure_is_atomic_and_creates_folders(tmp_path: Path) -> None:
    fig = plot_samples(torch.zeros(3, 2))
    out = save_figure(fig, tmp_path / "a" / "b" / "fig.svg")
    assert out.read_text().lstrip().startswith("<?xml")
    assert [p.name for p in out.parent.iterdir()] == ["fig.svg"]  # no temporary file left
    umask = os.umask(0)
    os.umask(umask)
    assert out.stat().st_mode & 0o777 == 0o666 & ~umask  # not the temporary file's 0600


def test_save_figure_bad_arguments_messages(tmp_path: Path) -> None:
    fig = plot_samples(torch.zeros(3, 2))
    with pytest.raises(ValueError, match=r"path: expected a suffix in .*\.png.*; got '.*fig\.txt'"):
        save_figure(fig, tmp_path / "fig.txt")
    with pytest.raises(TypeError, match="fig: expected a matplotlib Figure; got str"):
        save_figure("fig", tmp_path / "fig.png")  # type: ignore[arg-type]
    assert list(tmp_path.iterdir()) == []


def test_level_grid_puts_one_chain_per_row_and_its_levels_left_to_right(tmp_path: Path) -> None:
    from ebms.viz import level_grid

    L, N = 3, 2
    levels = torch.stack([torch.full((N, 1, 2, 2), -1.0 + level) for level in range(L)])  # level value -1, 0, 1
    levels[:, 1] *= 0.5  # the second chain at half the values
    fig = level_grid(levels)
    _assert_png(fig, tmp_path / "levels.png")
    want = tile_images(levels.transpose(0, 1).reshape(N * L, 1, 2, 2), nrow=L, value_range=(-1.0, 1.0))
    got = np.asarray(fig.axes[0].images[0].get_array())
    np.testing.assert_allclose(got, want[:, :, 0])
    with pytest.raises(ValueError, match=r"levels: expected \(L, N, C, H, W\) or \(L, N, H, W\)"):
        level_grid(torch.zeros(3, 2, 2))
