"""Toy data sets: seeded sampling, bounds, and exact densities checked against samples and grids."""

from __future__ import annotations

import math

import pytest
import torch
from _exact_refs import chi_square_tail

from ebms.data import TOY_NAMES, ToyDataset, get_toy
from ebms.estimators.grid import grid_energy, grid_log_partition
from ebms.nets import GaussianMixtureEnergy

DENSITY_CASES = [
    ("eight_gaussians", {}),
    ("eight_gaussians", {"scale": 1.5, "noise": 0.3}),
    ("rings", {}),
    ("rings", {"scale": 0.5, "noise": 0.12}),
    ("checkerboard", {}),
    ("checkerboard", {"noise": 0.1}),
]
#: 384 = 6 * 64 cells on the noiseless checkerboard's [-3, 3] box put every
#: board edge on a cell edge (at 384 and at the 192 check grid).
RESOLUTION = 384
N_SAMPLES = 20_000


def _gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


@pytest.mark.parametrize("name", TOY_NAMES)
def test_same_seed_gives_identical_samples(name: str) -> None:
    ds = get_toy(name)
    a = ds.sample(300, generator=_gen(7))
    b = ds.sample(300, generator=_gen(7))
    assert torch.equal(a, b)


@pytest.mark.parametrize("name", TOY_NAMES)
def test_different_seeds_give_different_samples(name: str) -> None:
    ds = get_toy(name)
    assert not torch.equal(ds.sample(300, generator=_gen(1)), ds.sample(300, generator=_gen(2)))


@pytest.mark.parametrize("name", TOY_NAMES)
def test_samples_are_float32_n_by_2_and_finite(name: str) -> None:
    x = get_toy(name).sample(17, generator=_gen(0))
    assert x.shape == (17, 2) and x.dtype == torch.float32
    assert bool(torch.isfinite(x).all())


@pytest.mark.parametrize("name", TOY_NAMES)
def test_scale_multiplies_samples_exactly(name: str) -> None:
    base = get_toy(name).sample(200, generator=_gen(3))
    scaled = get_toy(name, scale=2.0).sample(200, generator=_gen(3))
    assert torch.equal(scaled, 2.0 * base)  # multiplying by 2 is exact in floating point
    assert get_toy(name, scale=2.0).bounds == tuple((2 * lo, 2 * hi) for lo, hi in get_toy(name).bounds)


@pytest.mark.parametrize("name", TOY_NAMES)
def test_samples_lie_inside_bounds(name: str) -> None:
    ds = get_toy(name)
    (x0, x1), (y0, y1) = ds.bounds
    assert x0 == y0 == -x1 and x1 == y1 > 0  # a centred square
    x = ds.sample(N_SAMPLES, generator=_gen(4))
    assert bool(((x[:, 0] >= x0) & (x[:, 0] <= x1) & (x[:, 1] >= y0) & (x[:, 1] <= y1)).all())


def test_has_density_flags() -> None:
    with_density = {n for n in TOY_NAMES if get_toy(n).has_density}
    assert with_density == {"checkerboard", "eight_gaussians", "rings"}


@pytest.mark.parametrize(("name", "config"), DENSITY_CASES)
def test_density_integrates_to_one_on_the_grid(name: str, config: dict) -> None:
    ds = get_toy(name, **config)
    est = grid_log_partition(ds.true_energy(), ds.bounds, resolution=RESOLUTION)
    assert est.stderr < 1e-4, est.settings  # the check is only meaningful with a tight error bar
    assert abs(est.estimate) <= est.stderr, (est, est.settings)


@pytest.mark.parametrize(("name", "config"), [c for c in DENSITY_CASES if c != ("checkerboard", {})])
def test_sample_log_prob_matches_grid_entropy(name: str, config: dict) -> None:
    """-mean log p(samples) estimates the entropy H = -∫ p log p, computed on the grid."""
    ds = get_toy(name, **config)
    grids = [grid_energy(ds.true_energy(), ds.bounds, resolution=r) for r in (RESOLUTION, RESOLUTION // 2)]
    entropies = []
    for g in grids:
        lp = g.log_density()
        p = lp.exp()
        entropies.append(float(-(torch.where(p > 0, p * lp, torch.zeros_like(p))).sum() * g.cell_area))
    h, h_err = entropies[0], abs(entropies[0] - entropies[1])
    lp = ds.log_prob(ds.sample(N_SAMPLES, generator=_gen(11)).double())
    se = float(lp.std()) / math.sqrt(N_SAMPLES)
    # z = 4: a correct density fails with probability about 6e-5.
    assert abs(float(-lp.mean()) - h) <= 4 * se + h_err, (float(-lp.mean()), h, se, h_err)


@pytest.mark.parametrize(("name", "config"), DENSITY_CASES)
def test_sample_histogram_matches_density_chi_square(name: str, config: dict) -> None:
    """8x8 histogram of draws against the density integrated over each bin (48^2 midpoints per bin)."""
    ds = get_toy(name, **config)
    bins, sub = 8, RESOLUTION // 8
    g = grid_energy(ds.true_energy(), ds.bounds, resolution=bins * sub)
    cell = (g.log_density().exp() * g.cell_area).reshape(bins, sub, bins, sub).sum(dim=(1, 3))  # [y, x]
    prob = cell / cell.sum()
    x = ds.sample(N_SAMPLES, generator=_gen(12)).double()
    (x0, x1), (y0, y1) = ds.bounds
    ix = ((x[:, 0] - x0) / (x1 - x0) * bins).long().clamp(0, bins - 1)
    iy = ((x[:, 1] - y0) / (y1 - y0) * bins).long().clamp(0, bins - 1)
    observed = torch.bincount(iy * bins + ix, minlength=bins * bins).double()
    expected = prob.reshape(-1) * N_SAMPLES
    assert float(observed[expected == 0].sum()) == 0, "draws in a bin of zero density"
    low = expected < 5  # pool sparse bins into one category
    obs = torch.cat([observed[~low], observed[low].sum().reshape(1)])
    exp = torch.cat([expected[~low], expected[low].sum().reshape(1)])
    keep = exp > 0
    obs, exp = obs[keep], exp[keep]
    chi2 = float(((obs - exp) ** 2 / exp).sum())
    dof = obs.numel() - 1
    p_value = chi_square_tail(chi2, dof)
    assert p_value > 1e-4, (chi2, dof)  # test size 1e-4


def test_noiseless_checkerboard_draws_have_density_one_eighth() -> None:
    ds = get_toy("checkerboard")
    lp = ds.log_prob(ds.sample(N_SAMPLES, generator=_gen(5)))
    assert torch.allclose(lp, torch.full_like(lp, -math.log(8.0)))
    assert ds.log_prob(torch.tensor([[-1.5, -0.5], [-0.5, 0.5], [2.5, 0.0]])).tolist() == [-math.inf] * 3


def test_rings_density_equals_circle_average_of_gaussians() -> None:
    """Rice form vs the Gaussian kernel averaged over 1024 angles (periodic trapezoid, spectrally exact)."""
    ds = get_toy("rings", noise=0.15)
    x = ds.sample(64, generator=_gen(6)).double()
    theta = torch.arange(1024, dtype=torch.float64) * (2 * math.pi / 1024)
    radii = torch.tensor([0.5, 1.0, 1.5, 2.0], dtype=torch.float64)
    weights = radii / radii.sum()
    centres = radii[:, None, None] * torch.stack([theta.cos(), theta.sin()], dim=-1)  # (K, M, 2)
    d2 = ((x[:, None, None, :] - centres) ** 2).sum(-1)  # (n, K, M)
    kernel = torch.exp(-d2 / (2 * 0.15**2)) / (2 * math.pi * 0.15**2)
    expected = (kernel.mean(-1) * weights).sum(-1).log()
    torch.testing.assert_close(ds.log_prob(x), expected, rtol=0, atol=1e-10)


def test_eight_gaussians_energy_is_the_mixture_energy() -> None:
    ds = get_toy("eight_gaussians", scale=2.0, noise=0.25)
    energy = ds.true_energy()
    assert isinstance(energy, GaussianMixtureEnergy)
    x = ds.sample(100, generator=_gen(8))
    torch.testing.assert_close(energy(x), -ds.log_prob(x))
    means = energy.means
    assert isinstance(means, torch.Tensor)
    torch.testing.assert_close(means.norm(dim=1), torch.full((8,), 4.0))


def test_log_prob_keeps_float64() -> None:
    for name in ("checkerboard", "eight_gaussians", "rings"):
        assert get_toy(name).log_prob(torch.zeros(3, 2, dtype=torch.float64)).dtype == torch.float64


@pytest.mark.parametrize("name", ["pinwheel", "swiss_roll", "two_moons", "two_spirals"])
def test_log_prob_without_density_names_the_alternatives(name: str) -> None:
    ds = get_toy(name)
    with pytest.raises(ValueError, match="no closed-form density") as err:
        ds.log_prob(torch.zeros(2, 2))
    assert "grid_log_likelihood" in str(err.value) and "eight_gaussians" in str(err.value)
    with pytest.raises(ValueError, match="true_energy"):
        ds.true_energy()


def test_get_toy_unknown_name_lists_valid_names() -> None:
    with pytest.raises(ValueError, match="unknown toy data set 'nope'") as err:
        get_toy("nope")
    for name in TOY_NAMES:
        assert name in str(err.value)


def test_get_toy_unknown_keyword_lists_valid_keywords() -> None:
    with pytest.raises(TypeError, match=r"unknown keyword\(s\) \['sigma'\]; valid keywords are: noise, scale"):
        get_toy("rings", sigma=0.1)


def test_default_noise_is_resolved_in_the_config() -> None:
    assert get_toy("rings").noise == 0.08
    assert get_toy("checkerboard").noise == 0.0
    assert get_toy("two_moons", noise=0.3) == ToyDataset("two_moons", 1.0, 0.3)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"name": "nope"}, "name: expected one of checkerboard"),
        ({"name": "rings", "scale": 0.0}, r"scale: expected a finite number > 0; got 0.0"),
        ({"name": "rings", "noise": 0.0}, r"noise \(rings needs > 0\): expected a finite number > 0; got 0.0"),
        ({"name": "two_moons", "noise": -0.1}, r"noise \(two_moons needs >= 0\): expected a finite number >= 0"),
    ],
)
def test_bad_config_message_names_argument(kwargs: dict, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        ToyDataset(**kwargs)


def test_bad_sample_arguments_messages() -> None:
    ds = get_toy("rings")
    with pytest.raises(ValueError, match="n: expected an int >= 1; got 0"):
        ds.sample(0)
    with pytest.raises(TypeError, match="generator: expected a torch.Generator or None; got int"):
        ds.sample(3, generator=0)  # type: ignore[arg-type]


def test_bad_log_prob_input_messages() -> None:
    ds = get_toy("eight_gaussians")
    with pytest.raises(ValueError, match=r"x: expected shape \('\*', 2\); got \(4, 3\)"):
        ds.log_prob(torch.zeros(4, 3))
    with pytest.raises(TypeError, match="x: expected a floating-point tensor"):
        ds.log_prob(torch.zeros(4, 2, dtype=torch.long))
    with pytest.raises(ValueError, match="x: expected a finite tensor; got 1 NaN"):
        ds.log_prob(torch.tensor([[0.0, float("nan")]]))
