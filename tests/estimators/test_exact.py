"""Exact log Z by enumeration: closed forms, hand-computed lattices, chunking, errors."""

import itertools
import math

import pytest
import torch

from ebms.energy import from_fn
from ebms.estimators import Estimate
from ebms.estimators.exact import exact_log_partition, exact_log_prob
from ebms.spaces import Binary, Categorical, Reals, Spins


def _field_energy(h):
    return from_fn(lambda s: -(s * h).sum(-1))


def test_log_partition_matches_independent_spins_closed_form():
    h = torch.tensor([0.3, -1.2, 2.0, 0.0, 0.7])
    est = exact_log_partition(_field_energy(h), Spins(5))
    expected = sum(math.log(2 * math.cosh(v)) for v in h.tolist())
    assert est.exact and est.stderr == 0.0
    assert est.estimate == pytest.approx(expected, abs=1e-6)
    assert est.settings["num_states"] == 32


def test_log_partition_of_2x2_free_lattice_equals_four_cycle_formula():
    # A 2x2 lattice with free boundaries is the 4-cycle 0-1-3-2-0; by the transfer matrix
    # Z = tr T^4 = (2 cosh J)^4 + (2 sinh J)^4.
    J = 0.8
    bonds = [(0, 1), (1, 3), (3, 2), (2, 0)]
    energy = from_fn(lambda s: -J * sum(s[:, i] * s[:, j] for i, j in bonds))
    est = exact_log_partition(energy, Spins(4))
    expected = math.log((2 * math.cosh(J)) ** 4 + (2 * math.sinh(J)) ** 4)
    assert est.estimate == pytest.approx(expected, abs=1e-6)


def test_log_partition_of_categorical_sites_matches_brute_force():
    w = torch.tensor([[0.2, -0.5, 1.0], [0.0, 0.3, -0.7], [1.5, 0.1, 0.4]])
    coupling = 0.6

    def energy_fn(x):  # x: (B, 3, 3) one-hot; a Potts chain 0-1-2 plus site fields
        same = (x[:, 0] * x[:, 1]).sum(-1) + (x[:, 1] * x[:, 2]).sum(-1)
        return -(x * w).sum((1, 2)) - coupling * same

    total = 0.0
    for ks in itertools.product(range(3), repeat=3):
        e = -sum(w[i, k].item() for i, k in enumerate(ks)) - coupling * ((ks[0] == ks[1]) + (ks[1] == ks[2]))
        total += math.exp(-e)
    est = exact_log_partition(from_fn(energy_fn), Categorical(3, 3))
    assert est.estimate == pytest.approx(math.log(total), abs=1e-6)


def test_log_partition_does_not_depend_on_chunk_size():
    g = torch.Generator().manual_seed(1)
    J = torch.randn(9, 9, generator=g, dtype=torch.float64)
    # float64 energies: float32 matmuls round differently for different batch sizes
    energy = from_fn(lambda s: -0.5 * ((s.double() @ (J + J.T)) * s.double()).sum(-1))
    values = [exact_log_partition(energy, Binary(9), chunk_size=c).estimate for c in (1, 7, 64, 1 << 16)]
    assert max(values) - min(values) < 1e-9


def test_energy_space_attribute_is_used_when_space_is_omitted():
    energy = _field_energy(torch.tensor([0.5, 0.5]))
    energy.space = Spins(2)
    assert exact_log_partition(energy).estimate == pytest.approx(2 * math.log(2 * math.cosh(0.5)), abs=1e-6)


def test_exact_log_prob_is_normalised_over_the_space():
    h = torch.tensor([0.4, -0.9, 1.3])
    energy, space = _field_energy(h), Spins(3)
    x = torch.cat(list(space.enumerate()))
    lp = exact_log_prob(energy, space, x)
    assert lp.dtype == torch.float64
    assert float(torch.logsumexp(lp, 0)) == pytest.approx(0.0, abs=1e-9)
    log_z = exact_log_partition(energy, space)
    assert torch.allclose(exact_log_prob(energy, space, x, log_z=log_z), lp)


def test_too_many_states_message_names_num_states():
    with pytest.raises(ValueError, match=r"num_states=1,048,576 .*max_states=1,000"):
        exact_log_partition(_field_energy(torch.zeros(20)), Binary(20), max_states=1000)


def test_non_discrete_space_message():
    with pytest.raises(TypeError, match="space: expected an ebms.spaces.DiscreteSpace.*got Reals"):
        exact_log_partition(_field_energy(torch.zeros(2)), Reals(2))
    with pytest.raises(TypeError, match="got NoneType"):
        exact_log_partition(_field_energy(torch.zeros(2)))


def test_nan_energy_and_zero_partition_messages():
    nan_energy = from_fn(lambda s: torch.where(s[:, 0] > 0, torch.nan, 0.0) + 0 * s.sum(-1))
    with pytest.raises(ValueError, match="NaN or -inf"):
        exact_log_partition(nan_energy, Spins(2))
    inf_energy = from_fn(lambda s: torch.full((s.shape[0],), math.inf))
    with pytest.raises(ValueError, match=r"every one of the 4 states has energy \+inf"):
        exact_log_partition(inf_energy, Spins(2))


def test_exact_log_prob_rejects_stochastic_log_z_and_invalid_states():
    energy, space = _field_energy(torch.zeros(2)), Spins(2)
    x = torch.ones(3, 2)
    with pytest.raises(ValueError, match="log_z: expected an exact Estimate"):
        exact_log_prob(energy, space, x, log_z=Estimate(1.0, 0.1))
    with pytest.raises(ValueError, match="x: expected values in"):
        exact_log_prob(energy, space, torch.zeros(3, 2))
