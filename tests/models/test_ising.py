"""IsingModel: energies, conditionals, gradients and blocks against exact references."""

import itertools
import math

import pytest
import torch
from _discrete_checks import assert_matches_exact, empirical_probs, exact_probs, tv_distance, tv_threshold

from ebms.energy import autograd_energy_and_grad
from ebms.estimators.exact import exact_log_partition
from ebms.models.ising import IsingModel
from ebms.samplers.block_gibbs import BlockGibbs
from ebms.spaces import Spins

LATTICES = [  # (height, width, boundary)
    (4, 4, "periodic"),
    (3, 5, "periodic"),
    (5, 5, "periodic"),
    (1, 5, "periodic"),
    (2, 3, "periodic"),
    (4, 6, "free"),
    (3, 3, "free"),
]


def _random_lattice(h, w, boundary, seed=0, **kw):
    g = torch.Generator().manual_seed(seed)
    right, down = torch.randn(2, h, w, generator=g)
    field = 0.3 * torch.randn(h, w, generator=g)
    return IsingModel.lattice(h, w, (right, down), field=field, beta=0.7, boundary=boundary, **kw)


def _random_dense(n=7, seed=0, density=0.5, **kw):
    g = torch.Generator().manual_seed(seed)
    a = torch.randn(n, n, generator=g) * (torch.rand(n, n, generator=g) < density)
    J = torch.triu(a, 1)
    return IsingModel(J + J.T, field=0.2 * torch.randn(n, generator=g), beta=1.3, **kw)


def _models():
    return [_random_lattice(*c) for c in LATTICES] + [_random_dense()]


def _states(model, n=16, seed=1):
    return model.space.random(n, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)


@pytest.mark.parametrize("model", _models(), ids=lambda m: str(m.space))
def test_conditional_logits_match_energy_differences(model):
    x = _states(model)
    B, N = x.shape[0], model.num_sites
    exact = []
    for i in range(N):
        variants = model.space.site_variants(x, i)  # (B, 2, *sites), variant k has category k
        e = model(variants.reshape(B * 2, *model.space.event_shape)).reshape(B, 2)
        expected = torch.log_softmax(-e, -1)
        torch.testing.assert_close(torch.log_softmax(model.conditional_logits(x, i), -1), expected)
        exact.append(expected)
    exact = torch.stack(exact, 1)  # (B, N, 2)
    torch.testing.assert_close(torch.log_softmax(model.all_conditional_logits(x), -1), exact)
    sites = torch.randint(N, (B,), generator=torch.Generator().manual_seed(2))
    per_chain = torch.log_softmax(model.conditional_logits(x, sites), -1)
    torch.testing.assert_close(per_chain, exact[torch.arange(B), sites])


def test_conditional_is_sigmoid_of_twice_beta_local_field():
    model = _random_lattice(4, 4, "periodic")
    x = _states(model)
    p_up = torch.softmax(model.all_conditional_logits(x), -1)[..., 1]
    torch.testing.assert_close(p_up, torch.sigmoid(2 * model.beta * model.local_fields(x)))


@pytest.mark.parametrize("h,w,boundary", LATTICES)
def test_lattice_energy_matches_dense_coupling_matrix(h, w, boundary):
    lattice = _random_lattice(h, w, boundary)
    J = lattice.coupling_matrix()
    dense = IsingModel(J, field=lattice.field.reshape(-1), beta=lattice.beta)
    x = _states(lattice, n=64)
    torch.testing.assert_close(lattice(x), dense(x.reshape(64, -1)))
    torch.testing.assert_close(lattice.local_fields(x), dense.local_fields(x.reshape(64, -1)))
    # the graph has the expected edges: right/down neighbours, wrap-around only along sides >= 3
    wrap = boundary == "periodic"
    n_edges = h * (w - 1 + (wrap and w >= 3)) + w * (h - 1 + (wrap and h >= 3))
    assert int((J != 0).sum()) == 2 * n_edges
    assert torch.equal(J, J.T) and not bool(J.diagonal().any())


@pytest.mark.parametrize("model", _models(), ids=lambda m: str(m.space))
def test_analytic_energy_and_grad_match_autograd(model):
    x = _states(model)
    e, g = model.energy_and_grad(x)
    e_ref, g_ref = autograd_energy_and_grad(model, x)
    torch.testing.assert_close(e, e_ref)
    torch.testing.assert_close(g, g_ref)
    assert not e.requires_grad and not g.requires_grad
    # the energy is linear in each spin, so the gradient gives flip differences exactly
    i = 3
    flipped = x.clone().reshape(x.shape[0], -1)
    flipped[:, i] *= -1
    diff = model(flipped.reshape(x.shape)) - e
    torch.testing.assert_close(diff, -2 * x.reshape(x.shape[0], -1)[:, i] * g.reshape(x.shape[0], -1)[:, i])


@pytest.mark.parametrize("model", _models(), ids=lambda m: str(m.space))
def test_blocks_partition_sites_without_coupling_inside_a_block(model):
    blocks = model.blocks()
    allsites = torch.cat(blocks).sort().values
    assert torch.equal(allsites, torch.arange(model.num_sites))
    J = model.coupling_matrix()
    for b in blocks:
        assert not bool(J[b][:, b].any())


def test_bipartite_lattices_get_two_blocks_and_odd_tori_three():
    assert len(IsingModel.lattice(4, 6).blocks()) == 2
    assert len(IsingModel.lattice(5, 5, boundary="free").blocks()) == 2
    assert len(IsingModel.lattice(5, 4).blocks()) == 3
    assert len(IsingModel.lattice(25, 25).blocks()) == 3


def test_two_spin_probabilities_match_hand_computation():
    J, h1, h2, beta = 0.8, 0.3, -0.5, 1.2
    model = IsingModel(torch.tensor([[0.0, J], [J, 0.0]]), field=torch.tensor([h1, h2]), beta=beta)
    # enumeration order: site 0 most significant, category 0 = -1
    states = [(-1, -1), (-1, 1), (1, -1), (1, 1)]
    w = torch.tensor([math.exp(beta * (J * a * b + h1 * a + h2 * b)) for a, b in states], dtype=torch.float64)
    torch.testing.assert_close(exact_probs(model, model.space), w / w.sum())
    # p(x_0 = +1 | x_1 = +1) = sigmoid(2 beta (J + h1))
    p = torch.softmax(model.conditional_logits(torch.tensor([[-1.0, 1.0]]), 0), -1)[0, 1]
    assert abs(float(p) - 1 / (1 + math.exp(-2 * beta * (J + h1)))) < 1e-6


def test_temperature_is_inverse_beta():
    a = IsingModel.lattice(3, 4, 0.5, temperature=2.0)
    b = IsingModel.lattice(3, 4, 0.5, beta=0.5)
    x = _states(a)
    torch.testing.assert_close(a(x), b(x))
    assert a.temperature == 2.0 and a.beta == 0.5


def test_learnable_lattice_couplings_receive_gradients():
    model = IsingModel.lattice(3, 4, 0.5, boundary="free", beta=0.9, learn_couplings=True, learn_field=True)
    params = dict(model.named_parameters())
    assert set(params) == {"field", "couplings.right", "couplings.down"}
    x = _states(model, n=5).float()
    model(x).sum().backward()
    right, down = model.couplings.right.grad, model.couplings.down.grad
    # dE/dJ_right[r, c] = -beta * sum_b x[r, c] x[r, c+1]; border edges are absent and get zero
    torch.testing.assert_close(right[:, :-1], -0.9 * (x[:, :, :-1] * x[:, :, 1:]).sum(0))
    torch.testing.assert_close(down[:-1], -0.9 * (x[:, :-1] * x[:, 1:]).sum(0))
    assert not bool(right[:, -1].any()) and not bool(down[-1].any())
    torch.testing.assert_close(model.field.grad, -0.9 * x.sum(0).reshape(-1, 1))


def test_learnable_matrix_couplings_stay_symmetric_on_the_given_graph():
    model = _random_dense(learn_couplings=True)
    x = _states(model).float()
    model(x).sum().backward()
    assert model.couplings.weight.grad is not None
    with torch.no_grad():
        model.couplings.weight.add_(torch.randn(7, 7))  # an arbitrary update
    J = model.coupling_matrix()
    assert torch.equal(J, J.T)
    assert not bool(J[model.couplings.edge_mask == 0].any())


def test_block_gibbs_with_model_blocks_matches_exact_distribution():
    # 10 spins: a 2 x 5 torus (the 5-cycle is odd, so the model gives three blocks)
    model = _random_lattice(2, 5, "periodic", seed=3)
    assert len(model.blocks()) == 3
    g = torch.Generator().manual_seed(0)
    x = BlockGibbs(sweeps=30).sample(model, model.space.random(20000, generator=g), steps=1, generator=g)
    tv, thr = assert_matches_exact(x, model, model.space)
    # negative control: the same draws are rejected as samples of the energy scaled by 1.3
    p_wrong = exact_probs(model.tempered(1 / 1.3), model.space)
    assert tv_distance(empirical_probs(x, model.space), p_wrong) > tv_threshold(p_wrong, x.shape[0])


def test_nonsymmetric_coupling_matrix_is_rejected_with_the_asymmetry():
    J = torch.tensor([[0.0, 1.0], [0.75, 0.0]])
    with pytest.raises(ValueError, match=r"couplings: expected a symmetric matrix; got max \|J - J\^T\| = 0.25"):
        IsingModel(J)


@pytest.mark.parametrize(
    "J,match",
    [
        (torch.tensor([[0.5, 1.0], [1.0, 0.0]]), r"couplings: expected a zero diagonal.*0.5"),
        (torch.zeros(2, 3), r"couplings: expected a square matrix \(N, N\); got shape \(2, 3\)"),
        (torch.tensor([[0.0, float("nan")], [float("nan"), 0.0]]), r"couplings: expected a finite tensor; got 2 NaN"),
    ],
)
def test_bad_coupling_matrix_message_names_argument(J, match):
    with pytest.raises(ValueError, match=match):
        IsingModel(J)


def test_bad_configuration_messages_name_the_argument():
    with pytest.raises(ValueError, match=r"expected exactly one of \(beta, temperature\)"):
        IsingModel.lattice(3, 3, beta=1.0, temperature=1.0)
    with pytest.raises(ValueError, match=r"beta: expected a finite number > 0; got -1.0"):
        IsingModel.lattice(3, 3, beta=-1.0)
    with pytest.raises(ValueError, match=r"boundary: expected one of \('periodic', 'free'\); got 'open'"):
        IsingModel.lattice(3, 3, boundary="open")
    with pytest.raises(ValueError, match=r"field: expected a number or shape \(3, 3\) or \(9,\); got \(4,\)"):
        IsingModel.lattice(3, 3, field=torch.zeros(4))
    with pytest.raises(ValueError, match=r"coupling\[1\]: expected shape \(3, 3\); got \(3, 2\)"):
        IsingModel.lattice(3, 3, (torch.zeros(3, 3), torch.zeros(3, 2)))
    with pytest.raises(ValueError, match=r"coupling: expected a finite tensor"):
        IsingModel.lattice(3, 3, float("inf"))


def test_bad_input_messages_name_the_argument():
    model = IsingModel.lattice(3, 4)
    with pytest.raises(ValueError, match=r"x: expected shape \(B, 3, 4\); got \(2, 12\)"):
        model(torch.ones(2, 12))
    with pytest.raises(TypeError, match=r"x: expected a floating-point tensor; got torch.int64"):
        model(torch.ones(2, 3, 4, dtype=torch.long))
    x = torch.ones(2, 3, 4)
    x[1, 2, 3] = 0.0
    with pytest.raises(ValueError, match=r"x: expected values in \{-1, 1\}; got 1 other value\(s\), e.g. 0"):
        model.check_input(x)
    assert model.check_input(torch.ones(2, 3, 4)) is not None
    with pytest.raises(ValueError, match=r"site: expected an int in \[0, 11\] or a LongTensor \(B,\); got 12"):
        model.conditional_logits(torch.ones(2, 3, 4), 12)
    with pytest.raises(ValueError, match=r"site: expected an int or a LongTensor \(2,\)"):
        model.conditional_logits(torch.ones(2, 3, 4), torch.zeros(3, dtype=torch.long))
    with pytest.raises(TypeError, match=r"edge_couplings: only lattice models"):
        _random_dense().edge_couplings()


def test_space_and_lattice_shape_are_exposed():
    model = IsingModel.lattice(3, 4)
    assert isinstance(model.space, Spins) and model.space.event_shape == (3, 4)
    assert model.lattice_shape == (3, 4)
    assert _random_dense().lattice_shape is None
    right, down = model.edge_couplings()
    assert right.shape == down.shape == (3, 4)


def test_prepared_couplings_module_with_learn_flag_is_rejected():
    from ebms.models._lattice import LatticeCouplings

    lat = LatticeCouplings(3, 3, 1.0, learnable=True)
    with pytest.raises(ValueError, match=r"learn_couplings: expected False with a prepared couplings module"):
        IsingModel(lat, learn_couplings=True)
    assert len(list(IsingModel(lat).parameters())) == 2


def test_module_apply_and_state_dict_round_trip():
    model = _random_lattice(3, 4, "free", learn_couplings=True)
    model.apply(lambda m: None)  # nn.Module.apply still walks the submodules
    copy = IsingModel.lattice(3, 4, beta=0.7, boundary="free", learn_couplings=True)
    copy.load_state_dict(model.state_dict())
    x = _states(model).float()
    torch.testing.assert_close(copy(x), model(x))


def test_float64_couplings_and_field_are_kept_exactly():
    # Couplings and fields were always stored as float32, so a float64 model (built from float64
    # tensors, then .double()) had log Z off by 6e-9 from its own definition.
    g = torch.Generator().manual_seed(0)
    n = 8
    J = torch.randn(n, n, generator=g, dtype=torch.float64) * 0.3
    J = (J + J.T) / 2
    J.fill_diagonal_(0)
    h = torch.randn(n, generator=g, dtype=torch.float64) * 0.3
    for model in (IsingModel(J, field=h).double(), IsingModel(J, field=0.1).double()):
        assert model.coupling_matrix().dtype == torch.float64 and model.field.dtype == torch.float64
        hh = model.field[:, 0].tolist()
        vals = []
        for s in itertools.product([-1.0, 1.0], repeat=n):  # -E in plain Python float64
            vals.append(sum(0.5 * J[i, j].item() * s[i] * s[j] for i in range(n) for j in range(n))
                        + sum(hi * si for hi, si in zip(hh, s)))
        top = max(vals)
        exact = top + math.log(sum(math.exp(v - top) for v in vals))
        assert exact_log_partition(model).estimate == pytest.approx(exact, rel=1e-14)
    assert IsingModel(J, field=0.1).double().field[0, 0].item() == 0.1  # a number follows the couplings' dtype
    assert IsingModel(J.float()).coupling_matrix().dtype == torch.float32  # float32 stays the default
    lat = IsingModel.lattice(3, 3, (torch.full((3, 3), 0.3, dtype=torch.float64),) * 2).double()
    assert lat.edge_couplings()[0][0, 0].item() == 0.3
