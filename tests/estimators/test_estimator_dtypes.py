"""Estimators evaluate a model on data in the model's precision: float data or proposal draws in another
dtype are cast to the dtype of the energy's parameters (documented; they used to end in a matmul
traceback), and an explicit grid ``dtype`` the energy cannot take is a ``TypeError`` naming ``dtype``."""

from __future__ import annotations

import copy

import pytest
import torch

from ebms.estimators import (
    Estimate,
    GaussianBase,
    exact_log_partition,
    exact_log_prob,
    grid_log_partition,
    importance_log_partition,
    log_likelihood_report,
)
from ebms.models import BernoulliRBM
from ebms.nets import MLPEnergy


def _rbm() -> BernoulliRBM:
    torch.manual_seed(0)
    model = BernoulliRBM(6, 3)
    model.reset_parameters(torch.Generator().manual_seed(0))
    return model


def test_log_likelihood_report_casts_test_data_to_the_models_dtype():
    model = _rbm()  # float32 parameters
    x = (torch.rand(20, 6, generator=torch.Generator().manual_seed(1)) < 0.5).float()
    want = log_likelihood_report(model, x, Estimate(3.0, exact=True))
    got = log_likelihood_report(model, x.double(), Estimate(3.0, exact=True))
    assert got.estimate == want.estimate and got.stderr == want.stderr


def test_exact_log_prob_casts_states_to_the_models_dtype():
    model = _rbm()
    x = (torch.rand(5, 6, generator=torch.Generator().manual_seed(2)) < 0.5).float()
    lz = exact_log_partition(model)
    torch.testing.assert_close(exact_log_prob(model, None, x.double(), log_z=lz), exact_log_prob(model, None, x, log_z=lz),
                               rtol=0, atol=0)


def test_importance_sampling_evaluates_float64_draws_on_a_float32_energy():
    model = MLPEnergy(2, (8,))
    proposal = GaussianBase(torch.zeros(2, dtype=torch.float64), 2.0)
    est = importance_log_partition(model, proposal, 64, generator=torch.Generator().manual_seed(0))
    assert est.estimate == est.estimate and est.stderr > 0  # finite, not NaN


@pytest.mark.filterwarnings("ignore:bounds. .* of the grid mass:RuntimeWarning")  # an untrained, flat energy
def test_a_grid_dtype_the_energy_cannot_take_names_dtype():
    model = MLPEnergy(2, (8,))
    with pytest.raises(TypeError, match=r"^dtype: expected None or torch.float32, the dtype of the energy's parameters; "
                                        r"got torch.float64 \(convert the model with model.to\(torch.float64\)"):
        grid_log_partition(model, 3.0, resolution=8, dtype=torch.float64)
    f32 = grid_log_partition(model, 3.0, resolution=8, dtype=torch.float32).estimate
    f64 = grid_log_partition(copy.deepcopy(model).double(), 3.0, resolution=8, dtype=torch.float64).estimate
    assert abs(f32 - f64) < 1e-4  # the same model in both precisions


@pytest.mark.filterwarnings("ignore:bounds. .* of the grid mass:RuntimeWarning")
def test_float32_test_points_on_the_edge_of_the_box_are_inside_it():
    """-3.4 in float32 is -3.4000000953674316: on the edge of [-3.4, 3.4] as float32 holds it, and no
    longer counted (with a warning) as a point outside the box."""
    import warnings

    from ebms.energy import from_fn
    from ebms.estimators import grid_log_likelihood

    energy = from_fn(lambda x: 0.5 * (x**2).sum(-1))
    x = torch.tensor([[-3.4, 0.0], [0.1, 3.4], [0.0, -0.1]])
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)  # the outside-the-box warning would fail the test
        warnings.filterwarnings("ignore", "bounds: .* of the grid mass", RuntimeWarning)
        est = grid_log_likelihood(energy, x, ((-3.4, 3.4), (-3.4, 3.4)), resolution=64)
    assert est.settings["outside_fraction"] == 0.0
    with pytest.warns(RuntimeWarning, match=r"x: 33.33% of the test points lie outside bounds"):
        far = torch.tensor([[-3.4000003, 0.0], [0.1, 3.4], [0.0, -0.1]])  # one float32 step beyond the edge
        grid_log_likelihood(energy, far, ((-3.4, 3.4), (-3.4, 3.4)), resolution=64)
