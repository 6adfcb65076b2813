"""IndependentCategorical: normalised by enumeration on every discrete space, sampling frequencies,
fit, the linear log_prob and its gradient, torch.distributions on the same states, errors.

Moved here from tests/estimators/test_importance.py (CategoricalBase) and mirrored from
tests/samplers/test_metropolis.py (the proposal's own tests).
"""

from __future__ import annotations

import pytest
import torch

from ebms.distributions import IndependentCategorical
from ebms.spaces import Binary, Box, Categorical, Spins

SPACES = [Spins((2, 3)), Binary(5), Categorical((2, 2), 3)]


@pytest.mark.parametrize("space", SPACES, ids=repr)
def test_log_prob_is_normalised_and_matches_its_samples(space):
    g = torch.Generator().manual_seed(9)
    q = IndependentCategorical(space, torch.randn(space.num_sites, space.num_categories, generator=g))
    log_q = torch.cat([q.log_prob(x) for x in space.enumerate()])
    torch.testing.assert_close(log_q.exp().sum(), torch.tensor(1.0))
    x = q.sample(20000, g)  # generator passed positionally, as MetropolisIndependence does
    space.validate(x)
    # per-site marginals: |freq - p| < 4.5 binomial standard errors (z = 4.5 for all N*K cells together)
    freq = torch.nn.functional.one_hot(space.indices(x), space.num_categories).double().mean(0)
    p = q.log_probs.double().exp()
    assert bool(((freq - p).abs() < 4.5 * (p * (1 - p) / 20000).sqrt()).all())


@pytest.mark.parametrize("space", SPACES, ids=repr)
def test_log_prob_equals_the_gather_of_site_indices_and_its_gradient_is_exact(space):
    g = torch.Generator().manual_seed(1)
    q = IndependentCategorical(space, torch.randn(space.num_sites, space.num_categories, generator=g,
                                                  dtype=torch.float64))
    x = space.random(6, generator=g, dtype=torch.float64)
    idx = space.indices(x)
    gathered = q.log_probs.gather(1, idx.T).T.sum(1)  # (B,): sum_i log q_i(x_i)
    torch.testing.assert_close(q.log_prob(x), gathered)
    xg = x.clone().requires_grad_(True)
    (auto,) = torch.autograd.grad(q.log_prob(xg).sum(), xg)
    lp, grad = q.log_prob_and_grad(x)
    torch.testing.assert_close(grad, auto)
    torch.testing.assert_close(lp, gathered)


def test_fit_uses_smoothed_marginals():
    space = Categorical(2, 3)
    data = space.one_hot(torch.tensor([[0, 1], [0, 2], [2, 2], [0, 2]]))
    q = IndependentCategorical(space).fit(data, pseudocount=0.5)
    expected = torch.tensor([[3.5, 0.5, 1.5], [0.5, 1.5, 3.5]]) / 5.5  # (count + c) / (B + K c)
    torch.testing.assert_close(q.log_probs.exp(), expected)


def test_one_hot_sites_sample_and_refit():
    space = Categorical(2, 3)
    q = IndependentCategorical(space, torch.tensor([[0.0, 1.0, -1.0], [2.0, 0.0, 0.0]]))
    x = q.sample(30000, generator=torch.Generator().manual_seed(0))
    space.validate(x)
    p = q.log_probs.exp()
    assert torch.all((x.mean(0) - p).abs() < 4 * torch.sqrt(p * (1 - p) / 30000))  # z = 4
    fitted = IndependentCategorical(space).fit(x, pseudocount=1.0)
    assert torch.allclose(fitted.log_probs.exp(), (x.sum(0) + 1) / (30000 + 3))
    assert fitted.site_logits().shape == (2, 3)


def test_accepts_bernoulli_logits_for_two_valued_spaces():
    space = Spins((2, 2))
    logits = torch.tensor([[0.3, -1.0], [2.0, 0.0]])
    q = IndependentCategorical(space, logits)
    x = torch.tensor([[[1.0, -1.0], [1.0, -1.0]]])
    expected = torch.nn.functional.logsigmoid(torch.tensor([0.3, 1.0, 2.0, -0.0])).sum()
    torch.testing.assert_close(q.log_prob(x), expected.reshape(1))


@pytest.mark.parametrize("space", [Categorical((2,), 3), Binary((2, 2))], ids=repr)
def test_matches_torch_on_every_state_and_its_entropy(space):
    g = torch.Generator().manual_seed(2)
    q = IndependentCategorical(space, torch.randn(space.num_sites, space.num_categories, generator=g,
                                                  dtype=torch.float64))
    states = torch.cat(list(space.enumerate(dtype=torch.float64)))
    ref = q.to_torch()
    torch.testing.assert_close(q.log_prob(states), ref.log_prob(states))
    torch.testing.assert_close(q.entropy(), ref.entropy())
    p = q.log_prob(states).exp()
    torch.testing.assert_close(q.entropy(), -(p * p.log()).sum())


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_sample_shape_and_dtype_follow_the_logits(dtype):
    space = Categorical((2, 2), 3)
    q = IndependentCategorical(space, torch.zeros(4, 3, dtype=dtype))
    x = q.sample(7, generator=torch.Generator().manual_seed(0))
    assert x.shape == (7, 2, 2, 3) and x.dtype == dtype
    assert q.log_prob(x).dtype == dtype and q.log_prob(x).shape == (7,)


def test_validates_its_arguments():
    with pytest.raises(TypeError, match="space: expected an ebms.spaces.DiscreteSpace; got Box"):
        IndependentCategorical(Box(3))  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"logits: expected shape \(4, 3\) or \(\*\(4,\), 3\); got \(4, 2\)"):
        IndependentCategorical(Categorical(4, 3), torch.zeros(4, 2))
    with pytest.raises(ValueError, match="logits"):
        IndependentCategorical(Binary(2), torch.tensor([0.0, float("nan")]))
    with pytest.raises(ValueError, match=r"x: expected values in \{0, 1\}"):
        IndependentCategorical(Binary(2)).fit(torch.full((3, 2), 0.5))
    with pytest.raises(ValueError, match="pseudocount"):
        IndependentCategorical(Binary(2)).fit(torch.zeros(3, 2), pseudocount=0.0)
    with pytest.raises(ValueError, match=r"x: expected shape \(B, 2\); got \(3, 3\)"):
        IndependentCategorical(Binary(2)).log_prob(torch.zeros(3, 3))
    with pytest.raises(ValueError, match="to_torch: torch has no distribution on Spins"):
        IndependentCategorical(Spins(2)).to_torch()
