"""PottsModel: energies, conditionals, gradients and blocks against exact references."""

import itertools
import math

import pytest
import torch
from _discrete_checks import assert_matches_exact, empirical_probs, exact_probs, tv_distance, tv_threshold

from ebms.energy import autograd_energy_and_grad
from ebms.estimators.exact import exact_log_partition
from ebms.models.ising import IsingModel
from ebms.models.potts import PottsModel
from ebms.samplers.block_gibbs import BlockGibbs
from ebms.spaces import Categorical

LATTICES = [  # (height, width, K, boundary)
    (3, 3, 3, "periodic"),
    (4, 4, 3, "periodic"),
    (2, 5, 4, "periodic"),
    (3, 4, 2, "free"),
    (3, 3, 5, "free"),
]


def _random_lattice(h, w, k, boundary, seed=0, **kw):
    g = torch.Generator().manual_seed(seed)
    right, down = 0.8 * torch.randn(2, h, w, generator=g) + 0.4
    field = 0.3 * torch.randn(h, w, k, generator=g)
    return PottsModel.lattice(h, w, k, (right, down), field=field, beta=1.0, boundary=boundary, **kw)


def _random_dense(n=6, k=3, seed=0, **kw):
    g = torch.Generator().manual_seed(seed)
    a = torch.randn(n, n, generator=g) * (torch.rand(n, n, generator=g) < 0.5)
    J = torch.triu(a, 1)
    return PottsModel(J + J.T, k, field=0.2 * torch.randn(n, k, generator=g), beta=0.8, **kw)


def _models():
    return [_random_lattice(*c) for c in LATTICES] + [_random_dense()]


def _states(model, n=16, seed=1):
    return model.space.random(n, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)


@pytest.mark.parametrize("model", _models(), ids=lambda m: str(m.space))
def test_conditional_logits_match_energy_differences(model):
    x = _states(model)
    B, N, K = x.shape[0], model.num_sites, model.num_categories
    exact = []
    for i in range(N):
        variants = model.space.site_variants(x, i)  # (B, K, *sites, K)
        e = model(variants.reshape(B * K, *model.space.event_shape)).reshape(B, K)
        expected = torch.log_softmax(-e, -1)
        torch.testing.assert_close(torch.log_softmax(model.conditional_logits(x, i), -1), expected)
        exact.append(expected)
    exact = torch.stack(exact, 1)  # (B, N, K)
    torch.testing.assert_close(torch.log_softmax(model.all_conditional_logits(x), -1), exact)
    sites = torch.randint(N, (B,), generator=torch.Generator().manual_seed(2))
    per_chain = torch.log_softmax(model.conditional_logits(x, sites), -1)
    torch.testing.assert_close(per_chain, exact[torch.arange(B), sites])


@pytest.mark.parametrize("h,w,k,boundary", LATTICES)
def test_lattice_energy_matches_dense_coupling_matrix(h, w, k, boundary):
    lattice = _random_lattice(h, w, k, boundary)
    dense = PottsModel(lattice.coupling_matrix(), k, field=lattice.field, beta=lattice.beta)
    x = _states(lattice, n=64)
    flat = x.reshape(64, h * w, k)
    torch.testing.assert_close(lattice(x), dense(flat))
    torch.testing.assert_close(lattice.local_fields(x), dense.local_fields(flat))


def test_energy_counts_agreeing_neighbours():
    # all sites equal on a free 3 x 3 lattice: 12 agreeing edges; a checkerboard has none
    model = PottsModel.lattice(3, 3, 3, 1.0, beta=1.0, boundary="free")
    same = model.space.one_hot(torch.zeros(1, 9, dtype=torch.long))
    board = model.space.one_hot((torch.arange(9) % 2).reshape(1, 9))
    torch.testing.assert_close(model(torch.cat([same, board])), torch.tensor([-12.0, 0.0]))


@pytest.mark.parametrize("model", _models(), ids=lambda m: str(m.space))
def test_analytic_energy_and_grad_match_autograd(model):
    x = _states(model)
    e, g = model.energy_and_grad(x)
    e_ref, g_ref = autograd_energy_and_grad(model, x)
    torch.testing.assert_close(e, e_ref)
    torch.testing.assert_close(g, g_ref)
    assert g.shape == x.shape and not g.requires_grad


@pytest.mark.parametrize("model", _models(), ids=lambda m: str(m.space))
def test_blocks_partition_sites_without_coupling_inside_a_block(model):
    blocks = model.blocks()
    assert torch.equal(torch.cat(blocks).sort().values, torch.arange(model.num_sites))
    J = model.coupling_matrix()
    for b in blocks:
        assert not bool(J[b][:, b].any())


def test_two_site_probabilities_match_hand_computation():
    J, beta = 0.7, 1.5
    h = torch.tensor([[0.2, 0.0, -0.4], [0.1, 0.3, 0.0]])
    model = PottsModel(torch.tensor([[0.0, J], [J, 0.0]]), 3, field=h, beta=beta)
    # enumeration order: site 0 most significant
    w = torch.tensor(
        [math.exp(beta * (J * (a == b) + h[0, a] + h[1, b])) for a in range(3) for b in range(3)], dtype=torch.float64
    )
    torch.testing.assert_close(exact_probs(model, model.space), w / w.sum())


def test_two_category_potts_is_ising_with_half_couplings():
    potts = _random_lattice(2, 3, 2, "periodic", seed=4)
    hp = potts.field.reshape(-1, 2)
    right, down = potts.edge_couplings()
    ising = IsingModel.lattice(2, 3, (right / 2, down / 2), field=(hp[:, 1] - hp[:, 0]) / 2, beta=potts.beta)
    torch.testing.assert_close(exact_probs(potts, potts.space), exact_probs(ising, ising.space))


def test_learnable_lattice_couplings_receive_gradients():
    model = PottsModel.lattice(3, 3, 4, 0.5, boundary="free", beta=0.9, learn_couplings=True)
    x = _states(model, n=5).float()
    model(x).sum().backward()
    right = model.couplings.right.grad
    agree = (x[:, :, :-1] * x[:, :, 1:]).sum((0, -1))  # number of chains whose right edge agrees
    torch.testing.assert_close(right[:, :-1], -0.9 * agree)
    assert not bool(right[:, -1].any())
    assert model.couplings.down.grad is not None


def test_block_gibbs_with_model_blocks_matches_exact_distribution():
    # 3 x 3 torus with K = 3 (19683 states); odd cycles, so the model gives three blocks
    model = _random_lattice(3, 3, 3, "periodic", seed=3)
    assert len(model.blocks()) == 3
    g = torch.Generator().manual_seed(0)
    x = BlockGibbs(sweeps=30).sample(model, model.space.random(50000, generator=g), steps=1, generator=g)
    assert_matches_exact(x, model, model.space)
    # negative control: the same draws are rejected as samples of the energy scaled by 1.3
    p_wrong = exact_probs(model.tempered(1 / 1.3), model.space)
    assert tv_distance(empirical_probs(x, model.space), p_wrong) > tv_threshold(p_wrong, x.shape[0])


def test_category_index_out_of_range_is_rejected_by_one_hot():
    model = PottsModel.lattice(2, 2, 3)
    with pytest.raises(ValueError, match=r"indices: expected category indices in \[0, 2\]; got min 0, max 3"):
        model.space.one_hot(torch.tensor([[0, 1, 2, 3]]))
    x = model.space.one_hot(torch.tensor([[0, 1, 2, 1]]))
    assert model(x).shape == (1,)


def test_bad_input_messages_name_the_argument():
    model = PottsModel.lattice(2, 2, 3)
    with pytest.raises(ValueError, match=r"x: expected shape \(B, 2, 2, 3\); got \(1, 4, 3\)"):
        model(torch.zeros(1, 4, 3))
    with pytest.raises(ValueError, match=r"x: expected one-hot rows over the last axis \(size 3\)"):
        model.check_input(torch.full((1, 2, 2, 3), 1 / 3))
    with pytest.raises(ValueError, match=r"num_categories: expected an int >= 2; got 1"):
        PottsModel.lattice(2, 2, 1)
    with pytest.raises(ValueError, match=r"field: expected a number or shape .*\(3,\).*; got \(4,\)"):
        PottsModel.lattice(2, 2, 3, field=torch.zeros(4))
    with pytest.raises(ValueError, match=r"couplings: expected a symmetric matrix; got max \|J - J\^T\| = 2"):
        PottsModel(torch.tensor([[0.0, 2.0], [0.0, 0.0]]), 3)


def test_field_forms_are_equivalent():
    g = torch.Generator().manual_seed(0)
    hk = torch.randn(3, generator=g)
    a = PottsModel.lattice(2, 2, 3, field=hk)
    b = PottsModel.lattice(2, 2, 3, field=hk.expand(4, 3))
    c = PottsModel.lattice(2, 2, 3, field=hk.expand(2, 2, 3))
    x = _states(a)
    torch.testing.assert_close(a(x), b(x))
    torch.testing.assert_close(a(x), c(x))
    assert isinstance(a.space, Categorical) and a.space.event_shape == (2, 2, 3) and a.lattice_shape == (2, 2)


def test_float64_couplings_and_field_are_kept_exactly():
    # Couplings and fields were always stored as float32: a float64 model lost ~1e-8 in log Z.
    g = torch.Generator().manual_seed(3)
    n, k, beta = 5, 3, 0.7
    J = torch.randn(n, n, generator=g, dtype=torch.float64) * 0.4
    J = (J + J.T) / 2
    J.fill_diagonal_(0)
    h = torch.randn(n, k, generator=g, dtype=torch.float64) * 0.3
    model = PottsModel(J, k, field=h, beta=beta).double()
    assert model.coupling_matrix().dtype == torch.float64 and model.field.dtype == torch.float64
    vals = []
    for s in itertools.product(range(k), repeat=n):  # -E in plain Python float64
        pair = sum(J[i, j].item() for i in range(n) for j in range(n) if s[i] == s[j])
        vals.append(beta * (0.5 * pair + sum(h[i, s[i]].item() for i in range(n))))
    top = max(vals)
    exact = top + math.log(sum(math.exp(v - top) for v in vals))
    assert exact_log_partition(model).estimate == pytest.approx(exact, rel=1e-14)
