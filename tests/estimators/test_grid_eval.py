"""Grid evaluation of 2-D energies against closed forms."""

from __future__ import annotations

import math
import warnings

import pytest
import torch

from ebms.data import get_toy
from ebms.energy import FunctionEnergy, from_fn
from ebms.estimators._base import Estimate
from ebms.estimators.grid import (
    as_bounds,
    grid_energy,
    grid_log_likelihood,
    grid_log_partition,
    grid_points,
    true_log_likelihood,
)
from ebms.nets import GaussianEnergy

PRECISION = torch.tensor([[2.0, 1.2], [1.2, 1.5]])  # correlation 1.2 / sqrt(3) ~ 0.69


def _gaussian() -> GaussianEnergy:
    return GaussianEnergy(2, mean=[0.3, -0.5], precision=PRECISION, learnable=False)


def _laplace() -> FunctionEnergy:
    """E = |x| + |y|: kinked at the axes, so the midpoint rule is O(h^2), not spectrally accurate."""
    return from_fn(lambda x: x.abs().sum(-1))


def _laplace_log_z(half: float) -> float:
    return 2 * math.log(2 * (1 - math.exp(-half)))  # exact over the box [-half, half]^2


def test_log_partition_matches_correlated_gaussian_closed_form() -> None:
    g = _gaussian()
    est = grid_log_partition(g, 8.0, resolution=256)
    true = float(g.log_partition())
    assert est.stderr < 1e-4
    assert abs(est.estimate - true) <= est.stderr, (est.estimate - true, est.settings)
    assert not est.exact and est.settings["resolution"] == 256


@pytest.mark.parametrize("resolution", [8, 12, 16, 24])
def test_error_estimate_covers_coarse_grid_error_on_gaussian(resolution: int) -> None:
    g = _gaussian()
    est = grid_log_partition(g, 8.0, resolution=resolution)
    assert abs(est.estimate - float(g.log_partition())) <= est.stderr


@pytest.mark.parametrize("resolution", [16, 64, 256])
def test_error_estimate_tracks_second_order_error(resolution: int) -> None:
    """For an O(h^2) rule, |log Z_h - log Z_2h| is about 3x the fine error, so it lies in [1x, 4x]."""
    half = 6.0
    with pytest.warns(RuntimeWarning, match="Widen bounds"):  # e^-6 tails reach the edge cells
        est = grid_log_partition(_laplace(), half, resolution=resolution)
    err = abs(est.estimate - _laplace_log_z(half))
    assert err <= est.stderr <= 4 * err, (err, est.stderr)
    assert abs(est.settings["richardson"] - _laplace_log_z(half)) < err / 2  # the h^2 term is removed


def test_box_truncation_warns_and_underestimates() -> None:
    g = _gaussian()
    with pytest.warns(RuntimeWarning, match=r"outermost cells .* Widen bounds"):
        est = grid_log_partition(g, 1.0, resolution=64)
    assert est.estimate < float(g.log_partition())
    assert est.settings["edge_mass"] > 1e-6


def test_no_warning_when_box_holds_the_mass() -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        est = grid_log_partition(_gaussian(), 8.0, resolution=64)
    assert est.settings["edge_mass"] < 1e-6


def test_grid_log_likelihood_of_true_density_equals_true_log_likelihood() -> None:
    ds = get_toy("eight_gaussians")
    x = ds.sample(2000, generator=torch.Generator().manual_seed(0))
    grid = grid_log_likelihood(ds.true_energy(), x, ds.bounds, resolution=256)
    true = true_log_likelihood(ds, x)
    # Same points: only log Z differs, by at most its reported grid error.
    assert abs(grid.estimate - true.estimate) <= grid.settings["log_z_error"]
    assert grid.stderr == pytest.approx(true.stderr, rel=1e-4)
    assert grid.settings["n"] == true.settings["n"] == 2000


def test_grid_log_likelihood_is_mean_of_minus_energy_minus_log_z() -> None:
    g = _gaussian()
    x = torch.randn(500, 2, generator=torch.Generator().manual_seed(1))
    log_z = grid_log_partition(g, 8.0, resolution=64)
    est = grid_log_likelihood(g, x, 8.0, log_z=log_z)
    lp = -g(x).double() - log_z.estimate
    assert est.estimate == pytest.approx(float(lp.mean()), abs=1e-9)
    assert est.stderr == pytest.approx(float(lp.std()) / math.sqrt(500), rel=1e-9)
    assert est.settings["log_z"] == log_z.estimate and est.settings["outside_fraction"] == 0.0


def test_true_log_likelihood_is_mean_log_prob_with_its_standard_error() -> None:
    ds = get_toy("rings")
    x = ds.sample(300, generator=torch.Generator().manual_seed(2))
    est = true_log_likelihood(ds, x)
    lp = ds.log_prob(x.double())
    assert isinstance(est, Estimate)
    assert est.estimate == pytest.approx(float(lp.mean()), abs=1e-9)
    assert est.stderr == pytest.approx(float(lp.std()) / math.sqrt(300), rel=1e-6)


def test_grid_points_are_cell_centres_in_row_major_order() -> None:
    xs, ys, pts = grid_points(((0.0, 4.0), (-1.0, 1.0)), 4, dtype=torch.float64)
    torch.testing.assert_close(xs, torch.tensor([0.5, 1.5, 2.5, 3.5], dtype=torch.float64))
    torch.testing.assert_close(ys, torch.tensor([-0.75, -0.25, 0.25, 0.75], dtype=torch.float64))
    assert pts.shape == (16, 2)
    assert pts[1 * 4 + 2].tolist() == [2.5, -0.25]


def test_grid_energy_table_and_log_density_normalise() -> None:
    g = grid_energy(_gaussian(), 8.0, resolution=64)
    assert g.energy.shape == (64, 64) and g.energy.dtype == torch.float64
    assert g.cell_area == pytest.approx((16 / 64) ** 2)
    assert float(g.log_density().exp().sum() * g.cell_area) == pytest.approx(1.0, abs=1e-12)


def test_zero_density_regions_are_allowed() -> None:
    """E = +inf off a disc (a hard wall) is a zero density, not an error."""
    wall = from_fn(lambda x: torch.where(x.norm(dim=-1) < 1, torch.zeros(len(x)), torch.full((len(x),), math.inf)))
    est = grid_log_partition(wall, 1.5, resolution=400)
    assert abs(est.estimate - math.log(math.pi)) <= est.stderr


def test_as_bounds_accepts_three_forms() -> None:
    assert as_bounds(2) == ((-2.0, 2.0), (-2.0, 2.0))
    assert as_bounds((0, 1)) == ((0.0, 1.0), (0.0, 1.0))
    assert as_bounds([[0, 1], [2, 4]]) == ((0.0, 1.0), (2.0, 4.0))


@pytest.mark.parametrize(
    ("bounds", "error", "match"),
    [
        ("wide", TypeError, "bounds: expected L, .lo, hi. or"),
        ((1.0, 1.0), ValueError, "bounds: expected finite intervals with lo < hi; got"),
        (((0, 1), (0, float("inf"))), ValueError, "bounds: expected finite intervals"),
        ((1, 2, 3), TypeError, "bounds: expected L"),
    ],
)
def test_bad_bounds_message(bounds: object, error: type, match: str) -> None:
    with pytest.raises(error, match=match):
        grid_log_partition(_gaussian(), bounds, resolution=8)


def test_bad_resolution_messages() -> None:
    with pytest.raises(ValueError, match="resolution: expected an even number .* got 9"):
        grid_log_partition(_gaussian(), 4.0, resolution=9)
    with pytest.raises(ValueError, match="resolution: expected an int >= 4; got 2"):
        grid_log_partition(_gaussian(), 4.0, resolution=2)
    with pytest.raises(ValueError, match="chunk: expected an int >= 1; got 0"):
        grid_energy(_gaussian(), 4.0, chunk=0)


def test_nan_energy_message_names_count_and_point() -> None:
    bad = from_fn(lambda x: torch.where(x[:, 0] > 0, torch.full((len(x),), math.nan), x[:, 1] ** 2))
    with pytest.raises(ValueError, match=r"energy: expected finite values or \+inf on the grid; got 8 NaN and 0 -inf"):
        grid_log_partition(bad, 1.0, resolution=4)


def test_minus_inf_energy_is_an_error() -> None:
    bad = from_fn(lambda x: torch.full((len(x),), -math.inf))
    with pytest.raises(ValueError, match="got 0 NaN and 16 -inf"):
        grid_log_partition(bad, 1.0, resolution=4)


def test_energy_infinite_everywhere_is_an_error() -> None:
    bad = from_fn(lambda x: torch.full((len(x),), math.inf))
    with pytest.raises(ValueError, match=r"E = \+inf at every point"):
        grid_log_partition(bad, 1.0, resolution=4)


def test_energy_with_wrong_output_shape_is_an_error() -> None:
    bad = from_fn(lambda x: x[:, :1])
    with pytest.raises(ValueError, match=r"energy\(x\): expected shape \(16,\); got \(16, 1\)"):
        grid_log_partition(bad, 1.0, resolution=4, chunk=16)


def test_bad_test_points_messages() -> None:
    g = _gaussian()
    log_z = grid_log_partition(g, 8.0, resolution=16)
    with pytest.raises(ValueError, match=r"x: expected shape \('\*', 2\); got \(5, 3\)"):
        grid_log_likelihood(g, torch.zeros(5, 3), 8.0, log_z=log_z)
    with pytest.raises(ValueError, match=r"x: expected at least 2 points .* got shape \(1, 2\)"):
        grid_log_likelihood(g, torch.zeros(1, 2), 8.0, log_z=log_z)
    with pytest.raises(ValueError, match="x: expected a finite tensor"):
        grid_log_likelihood(g, torch.tensor([[0.0, 0.0], [math.inf, 0.0]]), 8.0, log_z=log_z)
    with pytest.raises(TypeError, match="log_z: expected an Estimate from grid_log_partition or None; got float"):
        grid_log_likelihood(g, torch.zeros(3, 2), 8.0, log_z=1.0)  # type: ignore[arg-type]


def test_test_points_outside_the_box_warn() -> None:
    g = _gaussian()
    log_z = grid_log_partition(g, 8.0, resolution=16)
    x = torch.tensor([[0.0, 0.0], [9.0, 0.0]])
    with pytest.warns(RuntimeWarning, match="50.00% of the test points lie outside bounds"):
        est = grid_log_likelihood(g, x, 8.0, log_z=log_z)
    assert est.settings["outside_fraction"] == 0.5


def test_zero_model_density_at_a_test_point_is_an_error() -> None:
    ds = get_toy("checkerboard")
    x = torch.tensor([[-1.5, -1.5], [-0.5, 0.5]])  # the second point is on a white square
    with pytest.raises(ValueError, match=r"1 point\(s\) have zero density"):
        true_log_likelihood(ds, x)
    log_z = grid_log_partition(ds.true_energy(), ds.bounds, resolution=48)
    with pytest.raises(ValueError, match=r"x: the model gives zero density \(E = \+inf\) to 1 test point"):
        grid_log_likelihood(ds.true_energy(), x, ds.bounds, log_z=log_z)


def test_true_log_likelihood_without_density_raises() -> None:
    with pytest.raises(ValueError, match="no closed-form density"):
        true_log_likelihood(get_toy("two_moons"), torch.zeros(3, 2))
    with pytest.raises(TypeError, match="dataset: expected a ToyDataset"):
        true_log_likelihood(object(), torch.zeros(3, 2))  # type: ignore[arg-type]
