"""RBM energies checked against brute-force enumeration over (v, h), autograd and quadrature."""

from __future__ import annotations

import math

import pytest
import torch
from _discrete_checks import assert_matches_exact

from ebms.energy import autograd_energy_and_grad
from ebms.models.rbm import (
    BernoulliRBM,
    CategoricalRBM,
    GaussianBernoulliRBM,
    check_binary,
    marginal_logits,
)
from ebms.samplers.block_gibbs import BlockGibbs
from ebms.spaces import Binary

Z = 4.0  # z-value of the moment checks: false alarm about 6e-5 per comparison


def _gen(seed: int = 0) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def _randomise(model, seed: int = 0, scale: float = 1.0):
    """Weights of order one (the 0.01 default makes every check trivially near-uniform)."""
    g = _gen(seed)
    with torch.no_grad():
        for p in model.cd_parameters():
            p.copy_(scale * torch.randn(p.shape, generator=g))
    return model.double()


def _bernoulli(d: int, h: int, seed: int = 0) -> BernoulliRBM:
    return _randomise(BernoulliRBM(d, h), seed)


def _joint(model, visibles: torch.Tensor):
    """All (v, h) pairs: v repeated over every hidden state; returns (v, h, E(v, h))."""
    hs = torch.cat(list(Binary(model.n_hidden).enumerate(dtype=torch.float64)))
    v = visibles.repeat_interleave(hs.shape[0], 0)
    h = hs.repeat(visibles.shape[0], 1)
    with torch.no_grad():
        return v, h, model.joint_energy(v, h)


def _all_visible(model):
    return torch.cat(list(model.space.enumerate(dtype=torch.float64)))


# -- free energy and log Z ----------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["bernoulli", "categorical", "gaussian"])
def test_free_energy_equals_minus_log_sum_over_hidden(kind):
    if kind == "bernoulli":
        model = _bernoulli(5, 4)
        v = _all_visible(model)
    elif kind == "categorical":
        model = _randomise(CategoricalRBM(3, 3, 4))
        v = _all_visible(model)
    else:
        model = _randomise(GaussianBernoulliRBM(3, 4, sigma=torch.tensor([0.5, 1.0, 2.0])))
        v = torch.randn(7, 3, generator=_gen(1), dtype=torch.float64)
    _, _, e = _joint(model, v)
    expected = -torch.logsumexp(-e.reshape(v.shape[0], -1), 1)
    with torch.no_grad():
        torch.testing.assert_close(model(v), expected)


@pytest.mark.parametrize(("d", "h"), [(4, 7), (7, 3)], ids=["visible_smaller", "hidden_smaller"])
def test_bernoulli_log_partition_smaller_layer_equals_joint_enumeration(d, h):
    model = _bernoulli(d, h, seed=d)
    _, _, e = _joint(model, _all_visible(model))
    assert model.log_partition() == pytest.approx(float(torch.logsumexp(-e, 0)), abs=1e-9)


@pytest.mark.parametrize(("n", "k", "h"), [(2, 3, 5), (4, 3, 3)], ids=["visible_smaller", "hidden_smaller"])
def test_categorical_log_partition_smaller_layer_equals_joint_enumeration(n, k, h):
    model = _randomise(CategoricalRBM(n, k, h), seed=n)
    assert (model.num_visible_states <= 2**h) == (n == 2)
    _, _, e = _joint(model, _all_visible(model))
    assert model.log_partition() == pytest.approx(float(torch.logsumexp(-e, 0)), abs=1e-9)


def test_log_partition_is_invariant_to_the_enumeration_chunk():
    model = _bernoulli(6, 9)
    assert model.log_partition(max_elements=10) == pytest.approx(model.log_partition(), abs=1e-10)


def test_gaussian_log_partition_matches_quadrature_in_one_dimension():
    model = _randomise(GaussianBernoulliRBM(1, 3, sigma=0.7), seed=3, scale=0.8)
    grid = torch.linspace(-30, 30, 200001, dtype=torch.float64).unsqueeze(1)
    with torch.no_grad():
        log_f = -model(grid)
    quad = torch.logsumexp(log_f, 0) + math.log(float(grid[1] - grid[0]))
    assert model.log_partition() == pytest.approx(float(quad), abs=1e-8)


def test_gaussian_log_partition_matches_quadrature_in_two_dimensions():
    model = _randomise(GaussianBernoulliRBM(2, 2, sigma=torch.tensor([0.6, 1.3])), seed=4, scale=0.7)
    axis = torch.linspace(-16, 16, 1601, dtype=torch.float64)
    grid = torch.cartesian_prod(axis, axis)
    with torch.no_grad():
        quad = torch.logsumexp(-model(grid), 0) + 2 * math.log(float(axis[1] - axis[0]))
    assert model.log_partition() == pytest.approx(float(quad), abs=1e-7)


def test_log_partition_beyond_the_limit_names_the_layer_sizes():
    with pytest.raises(ValueError, match=r"n_visible=30, n_hidden=40.*2\*\*25"):
        BernoulliRBM(30, 40).log_partition()


def test_log_prob_normalises_over_all_states():
    model = _bernoulli(6, 5)
    with torch.no_grad():
        total = torch.logsumexp(model.log_prob(_all_visible(model)), 0)
    assert float(total) == pytest.approx(0.0, abs=1e-10)


# -- float64 precision with large pre-activations (softplus beyond torch's threshold of 20) ------------

EPS64 = torch.finfo(torch.float64).eps


def test_softplus_is_exact_to_rounding_beyond_torchs_threshold():
    from ebms.models._rbm_layers import softplus

    x = torch.linspace(-60.0, 60.0, 24001, dtype=torch.float64)
    # independent formula, well conditioned on each side: x + log1p(e^-x) for x > 0, log1p(e^x) otherwise
    ref = torch.where(x > 0, x + torch.log1p(torch.exp(-x.abs())), torch.log1p(torch.exp(-x.abs())))
    assert float(((softplus(x) - ref).abs() / ref).max()) <= 2 * EPS64
    # the defect fixed: torch's default threshold drops e^-20.5, about 1e7 ulps of 20.5
    x20 = torch.tensor([20.5], dtype=torch.float64)
    assert float(torch.nn.functional.softplus(x20) - x20) == 0.0 and float(softplus(x20) - x20) > 1e-9
    x32 = x.float()
    assert torch.equal(softplus(x32), torch.nn.functional.softplus(x32))  # float32 results are unchanged


def _large(d: int, h: int, seed: int, scale: float = 30.0) -> BernoulliRBM:
    """Weights and biases N(0, 30^2): most pre-activations far beyond 20 in magnitude."""
    return _randomise(BernoulliRBM(d, h), seed, scale=scale)


@pytest.mark.parametrize(("d", "h"), [(5, 9), (9, 5), (7, 7)], ids=["visible_smaller", "hidden_smaller", "equal"])
@pytest.mark.parametrize("scale", [3.0, 10.0, 30.0])
def test_log_partition_with_large_weights_matches_joint_enumeration_to_1e12(d, h, scale):
    worst = 0.0
    for seed in range(4):
        model = _large(d, h, seed, scale)
        _, _, e = _joint(model, _all_visible(model))  # E(v, h) = -b.v - h.(a + vW): no softplus involved
        exact = float(torch.logsumexp(-e, 0))
        worst = max(worst, abs(model.log_partition() - exact) / abs(exact))
    # before the fix: up to 1.9e-11 at scales 5-30 (float64); rounding of the sums is about 1e-15
    assert worst < 1e-12, worst


@pytest.mark.parametrize("scale", [10.0, 30.0])
def test_free_energy_and_hidden_marginal_with_large_weights_match_enumeration(scale):
    model = _large(6, 5, seed=2, scale=scale)
    v = _all_visible(model)
    _, _, e = _joint(model, v)
    e = e.reshape(v.shape[0], -1)  # (visible states, hidden states)
    hs = torch.cat(list(Binary(5).enumerate(dtype=torch.float64)))
    with torch.no_grad():
        torch.testing.assert_close(model(v), -torch.logsumexp(-e, 1), rtol=1e-13, atol=0)
        torch.testing.assert_close(model.energy_and_grad(v)[0], -torch.logsumexp(-e, 1), rtol=1e-13, atol=0)
        torch.testing.assert_close(model.hidden_log_marginal(hs), torch.logsumexp(-e, 0), rtol=1e-13, atol=0)


def test_pseudo_likelihood_with_large_weights_matches_enumerated_free_energies():
    model = _large(5, 4, seed=3)
    v = _all_visible(model)
    _, _, e = _joint(model, v)
    free = -torch.logsumexp(-e.reshape(v.shape[0], -1), 1)  # F(v) by enumeration, indexed like v
    index = (v * 2 ** torch.arange(4, -1, -1, dtype=torch.float64)).sum(1).long()  # v -> its row in v
    assert torch.equal(index, torch.arange(v.shape[0]))
    expected = torch.zeros(v.shape[0], dtype=torch.float64)
    for i in range(5):
        flipped = v.clone()
        flipped[:, i] = 1 - flipped[:, i]
        f_flip = free[(flipped * 2 ** torch.arange(4, -1, -1, dtype=torch.float64)).sum(1).long()]
        expected += -torch.logaddexp(torch.zeros(()), free - f_flip)  # log p(v_i | v_-i)
    torch.testing.assert_close(model.pseudo_log_likelihood(v), expected, rtol=1e-12, atol=1e-12)


def test_ais_path_with_large_weights_matches_enumeration():
    model = _large(5, 4, seed=4)
    c = 30.0 * torch.randn(5, generator=_gen(5), dtype=torch.float64)
    path = model.ais_path(c)
    v = _all_visible(model)
    hs = torch.cat(list(Binary(4).enumerate(dtype=torch.float64)))
    a, w, b = model.hidden_bias.detach(), model.weight.detach(), model.visible_bias.detach()
    for beta in (0.0, 0.37, 1.0):
        # log f_beta(v) = (1 - beta) c.v + beta b.v + log sum_h exp(beta h.(a + vW)), summed over h directly
        expected = v @ ((1 - beta) * c + beta * b) + torch.logsumexp(beta * (a + v @ w) @ hs.T, 1)
        torch.testing.assert_close(path.log_density(v, beta), expected, rtol=1e-13, atol=0)
    lz0 = float(torch.logsumexp(v @ c, 0)) + 4 * math.log(2.0)
    assert path.base_log_partition == pytest.approx(lz0, rel=1e-13)
    torch.testing.assert_close(
        path.log_weight_increment(v, 0.37, 1.0), path.log_density(v, 1.0) - path.log_density(v, 0.37), rtol=1e-13, atol=0
    )


# -- conditionals --------------------------------------------------------------------------------


def test_bernoulli_conditionals_equal_enumeration():
    model = _bernoulli(4, 3)
    v, h, e = _joint(model, _all_visible(model))
    p = torch.softmax(-e, 0)
    for i in range(16):  # p(h_j = 1 | v) at each visible state
        rows = (v == v[i * 8]).all(1)
        expected = (p[rows, None] * h[rows]).sum(0) / p[rows].sum()
        torch.testing.assert_close(model.hidden_probs(v[i * 8 : i * 8 + 1])[0], expected)
    for hs in h[:8]:  # p(v_i = 1 | h) at each hidden state
        rows = (h == hs).all(1)
        expected = (p[rows, None] * v[rows]).sum(0) / p[rows].sum()
        torch.testing.assert_close(model.visible_probs(hs[None])[0], expected)


def test_categorical_visible_probs_equal_enumeration():
    model = _randomise(CategoricalRBM(2, 3, 2))
    v, h, e = _joint(model, _all_visible(model))
    p = torch.softmax(-e, 0)
    for hs in h[:4]:
        rows = (h == hs).all(1)
        expected = (p[rows, None, None] * v[rows]).sum(0) / p[rows].sum()
        torch.testing.assert_close(model.visible_probs(hs[None])[0], expected)


def test_single_site_logits_equal_free_energy_differences():
    model = _bernoulli(6, 4)
    v = _all_visible(model)[::3]
    with torch.no_grad():
        flipped = [model(torch.where(torch.arange(6) == i, 1 - v, v)) for i in range(6)]
        f = model(v)
        diff = torch.stack([(2 * v[:, i] - 1) * (fi - f) for i, fi in enumerate(flipped)], 1)  # F(v_i=0) - F(v_i=1)
        torch.testing.assert_close(model.all_conditional_logits(v)[..., 1], diff)
        site = torch.arange(v.shape[0]) % 6
        torch.testing.assert_close(model.conditional_logits(v, site)[:, 1], diff[torch.arange(v.shape[0]), site])
        torch.testing.assert_close(model.conditional_logits(v, 2)[:, 1], diff[:, 2])


def test_pseudo_log_likelihood_sums_the_single_site_conditionals():
    model = _bernoulli(5, 3)
    v = _all_visible(model)
    with torch.no_grad():
        logits = model.flip_logits(v)
    expected = torch.nn.functional.logsigmoid((2 * v - 1) * logits).sum(1)
    torch.testing.assert_close(model.pseudo_log_likelihood(v, max_elements=7), expected)


def test_gaussian_visible_samples_have_the_conditional_moments():
    model = _randomise(GaussianBernoulliRBM(2, 3, sigma=torch.tensor([0.5, 2.0])))
    h = torch.tensor([[1.0, 0.0, 1.0]], dtype=torch.float64).expand(20000, 3)
    x = model.sample_visible(h, _gen(2))
    mean, sd = model.visible_mean(h[:1])[0], model.sigma.double()
    assert ((x.mean(0) - mean).abs() < Z * sd / math.sqrt(20000)).all()
    # var of the sample variance of a Gaussian is 2 sd^4 / (n - 1)
    assert ((x.var(0) - sd**2).abs() < Z * sd**2 * math.sqrt(2 / 19999)).all()


# -- gradients -------------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["bernoulli", "categorical", "gaussian"])
def test_analytic_energy_and_grad_matches_autograd(kind):
    if kind == "bernoulli":
        model, v = _bernoulli(5, 4), torch.rand(6, 5, generator=_gen(1), dtype=torch.float64)
    elif kind == "categorical":
        model, v = _randomise(CategoricalRBM(3, 4, 2)), torch.rand(6, 3, 4, generator=_gen(1), dtype=torch.float64)
    else:
        model = _randomise(GaussianBernoulliRBM(3, 4, sigma=torch.tensor([0.5, 1.0, 2.0])))
        v = torch.randn(6, 3, generator=_gen(1), dtype=torch.float64)
    e, g = model.energy_and_grad(v)
    e_ref, g_ref = autograd_energy_and_grad(model, v)
    torch.testing.assert_close(e, e_ref)
    torch.testing.assert_close(g, g_ref)


@pytest.mark.parametrize("kind", ["bernoulli", "categorical", "gaussian_learn_sigma"])
def test_loglik_parameter_gradient_matches_autograd(kind):
    if kind == "bernoulli":
        model, v = _bernoulli(5, 4), torch.bernoulli(torch.full((6, 5), 0.5, dtype=torch.float64), generator=_gen(1))
    elif kind == "categorical":
        model = _randomise(CategoricalRBM(3, 4, 2))
        v = model.space.random(6, generator=_gen(1), dtype=torch.float64)
    else:
        model = _randomise(GaussianBernoulliRBM(3, 4, learn_sigma=True))
        v = torch.randn(6, 3, generator=_gen(1), dtype=torch.float64)
    params = model.cd_parameters()
    expected = torch.autograd.grad(-model(v).sum() * 0.3, params)
    out = [torch.zeros_like(p) for p in params]
    with torch.no_grad():
        model.add_loglik_grad_(out, v, model.hidden_probs(v), 0.3)
    for got, ref in zip(out, expected):
        torch.testing.assert_close(got, ref)


# -- sampling ---------------------------------------------------------------------------------------


def test_block_gibbs_leaves_the_bernoulli_rbm_marginal_invariant():
    model = _bernoulli(4, 3, seed=5).float()
    sampler = BlockGibbs(sweeps=30)
    x = sampler.sample(model, model.space.random(4000, generator=_gen(1)), steps=1, generator=_gen(2))
    assert_matches_exact(x, model, model.space)
    with pytest.raises(AssertionError, match="TV distance"):  # the check rejects a wrong target
        assert_matches_exact(x, model.tempered(1 / 1.3), model.space)


def test_block_gibbs_leaves_the_categorical_rbm_marginal_invariant():
    model = _randomise(CategoricalRBM(2, 3, 3), seed=6).float()
    x = BlockGibbs(sweeps=30).sample(model, model.space.random(3000, generator=_gen(1)), steps=1, generator=_gen(2))
    assert_matches_exact(x, model, model.space)


def test_hidden_samples_have_the_conditional_frequencies():
    model = _bernoulli(4, 3)
    v = torch.tensor([[1.0, 0.0, 1.0, 1.0]], dtype=torch.float64).expand(20000, 4)
    freq = model.sample_hidden(v, _gen(3)).mean(0)
    p = model.hidden_probs(v[:1])[0]
    assert ((freq - p).abs() < Z * torch.sqrt(p * (1 - p) / 20000)).all()


# -- AIS path ----------------------------------------------------------------------------------------


def test_ais_path_endpoints_by_enumeration():
    model = _bernoulli(6, 4, seed=7)
    c = torch.randn(6, generator=_gen(8), dtype=torch.float64)
    path = model.ais_path(c)
    v = _all_visible(model)
    assert float(torch.logsumexp(path.log_density(v, 0.0), 0)) == pytest.approx(path.base_log_partition, abs=1e-10)
    with torch.no_grad():
        torch.testing.assert_close(path.log_density(v, 1.0), -model(v))
        # f_0 is proportional to the base model's product of Bernoullis
        base = (v * c - torch.nn.functional.softplus(c)).sum(1)
    torch.testing.assert_close(path.log_density(v, 0.0) - path.base_log_partition, base)
    inc = path.log_weight_increment(v, 0.3, 0.8)
    torch.testing.assert_close(inc, path.log_density(v, 0.8) - path.log_density(v, 0.3))


def test_ais_path_base_draws_and_transition_match_the_exact_distributions():
    model = _bernoulli(4, 3, seed=9)
    path = model.ais_path(torch.tensor([0.5, -1.0, 0.0, 2.0]))
    space = model.space
    x0 = path.sample_base(4000, _gen(1))
    assert_matches_exact(x0, lambda x: -path.log_density(x, 0.0), space)
    x = x0
    for _ in range(30):
        x = path.transition(x, 0.6, _gen(_ + 2))
    assert_matches_exact(x, lambda x: -path.log_density(x, 0.6), space)


def test_ais_path_default_base_is_the_visible_bias():
    model = _bernoulli(3, 2)
    torch.testing.assert_close(model.ais_path().base_logits, model.visible_bias.detach())


def test_ais_path_rejects_base_logits_of_the_wrong_shape():
    with pytest.raises(ValueError, match=r"base_logits: expected shape \(3,\)"):
        BernoulliRBM(3, 2).ais_path(torch.zeros(4))


# -- data, initialisation and validation ------------------------------------------------------------


def test_visible_bias_from_data_is_the_smoothed_log_odds():
    v = torch.tensor([[1.0, 0.0], [1.0, 0.0], [0.0, 0.0], [1.0, 1.0]])
    model = BernoulliRBM(2, 3)
    model.init_visible_bias_from_data(v)
    torch.testing.assert_close(model.visible_bias.detach(), torch.tensor([math.log(4 / 2), math.log(2 / 4)]))
    torch.testing.assert_close(
        marginal_logits(v, pseudocount=0.5), torch.tensor([math.log(3.5 / 1.5), math.log(1.5 / 3.5)])
    )


def test_reset_parameters_is_reproducible_from_the_generator():
    a, b = BernoulliRBM(5, 3, generator=_gen(4)), BernoulliRBM(5, 3, generator=_gen(4))
    torch.testing.assert_close(a.weight, b.weight)
    assert float(a.weight.detach().std()) < 0.05 and float(a.visible_bias.detach().abs().sum()) == 0.0


def test_non_binary_data_into_a_bernoulli_rbm_is_a_clear_error():
    model = BernoulliRBM(3, 2)
    bad = torch.tensor([[0.0, 0.5, 1.0]])
    for call in (model.log_prob, model.free_energy, model.pseudo_log_likelihood, model.init_visible_bias_from_data):
        with pytest.raises(ValueError, match=r"expected values in \{0, 1\}; got 1 other value\(s\), e\.g\. 0\.5"):
            call(bad)
    with pytest.raises(ValueError, match=r"v: expected shape \('\*', 3\); got \(1, 4\)"):
        model.log_prob(torch.zeros(1, 4))
    with pytest.raises(ValueError, match="X: expected values"):
        check_binary(torch.tensor([[float("nan"), 1.0]]), "X")


def test_categorical_rbm_rejects_rows_that_are_not_one_hot():
    model = CategoricalRBM(2, 3, 2)
    with pytest.raises(ValueError, match="one-hot"):
        model.log_prob(torch.ones(1, 2, 3))


def test_gaussian_rbm_rejects_bad_sigma_and_nonfinite_data():
    with pytest.raises(ValueError, match=r"sigma: expected finite values > 0"):
        GaussianBernoulliRBM(2, 2, sigma=torch.tensor([1.0, 0.0]))
    with pytest.raises(ValueError, match=r"sigma: expected shape \(2,\)"):
        GaussianBernoulliRBM(2, 2, sigma=torch.ones(3))
    with pytest.raises(ValueError, match="v: expected a finite tensor"):
        GaussianBernoulliRBM(2, 2).log_prob(torch.tensor([[0.0, float("inf")]]))


def test_log_prob_rejects_a_nonfinite_log_z():
    with pytest.raises(ValueError, match="log_z: expected a finite number"):
        BernoulliRBM(2, 2).log_prob(torch.zeros(1, 2), log_z=float("nan"))


def test_joint_energy_rejects_hidden_of_the_wrong_shape():
    with pytest.raises(ValueError, match=r"h: expected shape \(1, 2\); got \(1, 3\)"):
        BernoulliRBM(2, 2).joint_energy(torch.zeros(1, 2), torch.zeros(1, 3))
