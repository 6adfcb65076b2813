"""IndependentBernoulli: normalised by enumeration, sampling frequencies, exact float64, torch, errors.

Moved here from tests/estimators/test_importance.py (BernoulliBase).
"""

from __future__ import annotations

import math

import pytest
import torch

from ebms.distributions import IndependentBernoulli
from ebms.spaces import Binary, Spins


@pytest.mark.parametrize("space", [Binary(4), Spins(4)])
def test_bernoulli_is_normalised_and_matches_its_samples(space):
    logits = torch.tensor([0.5, -1.0, 2.0, 0.0])
    q = IndependentBernoulli(logits, space=space)
    states = torch.cat(list(space.enumerate()))
    assert float(torch.logsumexp(q.log_prob(states).double(), 0)) == pytest.approx(0.0, abs=1e-6)
    x = q.sample(40000, generator=torch.Generator().manual_seed(0))
    space.validate(x)
    p = torch.sigmoid(logits)
    freq = ((x - space.low) / (space.high - space.low)).mean(0)
    # z = 4 per site on the binomial standard error
    assert torch.all((freq - p).abs() < 4 * torch.sqrt(p * (1 - p) / 40000))
    lp, grad = q.log_prob_and_grad(x[:5])
    xg = x[:5].clone().requires_grad_(True)
    (auto,) = torch.autograd.grad(q.log_prob(xg).sum(), xg)
    assert torch.allclose(grad, auto) and torch.allclose(lp, q.log_prob(x[:5]))


def test_bernoulli_matches_torch_on_the_same_states_and_its_entropy():
    logits = torch.tensor([[0.5, -1.0], [3.0, 0.0]], dtype=torch.float64)
    q = IndependentBernoulli(logits)
    states = torch.cat(list(Binary((2, 2)).enumerate(dtype=torch.float64)))
    ref = torch.distributions.Independent(torch.distributions.Bernoulli(logits=logits), 2)
    torch.testing.assert_close(q.log_prob(states), ref.log_prob(states))
    torch.testing.assert_close(q.to_torch().log_prob(states), ref.log_prob(states))
    torch.testing.assert_close(q.entropy(), ref.entropy())
    p = q.log_prob(states).exp()  # entropy by enumeration too
    torch.testing.assert_close(q.entropy(), -(p * p.log()).sum())


def test_bernoulli_from_data_uses_smoothed_site_frequencies():
    x = torch.tensor([[1.0, 0.0], [1.0, 0.0], [0.0, 0.0]])
    q = IndependentBernoulli.from_data(x, smoothing=1.0)
    assert torch.allclose(torch.sigmoid(q.logits), torch.tensor([3 / 5, 1 / 5]))
    with pytest.raises(ValueError, match="x: expected values in"):
        IndependentBernoulli.from_data(torch.tensor([[0.5, 1.0]]))
    with pytest.raises(ValueError, match="logits: expected the space's shape"):
        IndependentBernoulli(torch.zeros(3), space=Spins(2))


def _exact_log_sigmoid(t: float) -> float:
    """log sigmoid(t) = -softplus(-t) in the closed form min(t, 0) - log1p(exp(-|t|)) (no cut-off)."""
    return min(t, 0.0) - math.log1p(math.exp(-abs(t)))


@pytest.mark.parametrize("space_cls", [Binary, Spins])
def test_bernoulli_log_prob_is_exact_in_float64_for_large_logits(space_cls):
    # torch's softplus returns l itself above 20, so l - softplus(l) was 0 where the exact
    # log-probability of the likely value at l = 25 is -1.4e-11 (and off by up to 2e-9 near 20).
    logits = torch.tensor([25.0, -25.0, 21.0, 36.0, 40.0, -3.0], dtype=torch.float64)
    space = space_cls(6)
    q = IndependentBernoulli(logits, space=space)
    lo, hi = space.low, space.high
    bits = torch.tensor([[1, 1, 1, 1, 1, 1], [0, 0, 0, 0, 0, 0], [1, 0, 1, 0, 1, 0]], dtype=torch.float64)
    x = lo + (hi - lo) * bits
    got = q.log_prob(x)
    for row, b in enumerate(bits.tolist()):
        exact = sum(_exact_log_sigmoid(v if bi else -v) for v, bi in zip(logits.tolist(), b))
        assert float(got[row]) == pytest.approx(exact, rel=1e-14, abs=1e-300)
    # all-high row: a sum of tiny log-probabilities, relative precision kept
    assert float(got[0]) < 0


def test_bernoulli_log_prob_input_gradient_is_the_logits_per_unit():
    logits = torch.tensor([25.0, -2.0, 0.5], dtype=torch.float64)
    q = IndependentBernoulli(logits, space=Spins(3))
    x = torch.tensor([[1.0, -1.0, 1.0]], dtype=torch.float64, requires_grad=True)
    (g,) = torch.autograd.grad(q.log_prob(x).sum(), x)
    torch.testing.assert_close(g[0], logits / 2, rtol=1e-14, atol=1e-14)
    torch.testing.assert_close(q.log_prob_and_grad(x)[1][0], logits / 2)


def test_site_logits_give_the_site_probabilities():
    q = IndependentBernoulli(torch.tensor([[0.3, -2.0]]))
    torch.testing.assert_close(torch.softmax(q.site_logits(), -1)[:, 1], torch.sigmoid(q.logits.flatten()))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_samples_and_log_probs_keep_the_logits_dtype(dtype):
    q = IndependentBernoulli(torch.zeros(3, dtype=dtype), space=Spins(3))
    x = q.sample(5, generator=torch.Generator().manual_seed(0))
    assert x.shape == (5, 3) and x.dtype == dtype and q.log_prob(x).dtype == dtype
    torch.testing.assert_close(q.log_prob(x), torch.full((5,), -3 * math.log(2), dtype=dtype))


def test_bad_arguments_are_named():
    with pytest.raises(TypeError, match="logits: expected a floating-point tensor"):
        IndependentBernoulli(torch.zeros(3, dtype=torch.long))
    with pytest.raises(ValueError, match="logits: expected a finite tensor"):
        IndependentBernoulli(torch.tensor([0.0, math.nan]))
    with pytest.raises(TypeError, match="space: expected ebms.spaces.Binary or Spins; got Box"):
        from ebms.spaces import Box

        IndependentBernoulli(torch.zeros(2), space=Box(2))  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"x: expected shape \(B, 3\); got \(2, 4\)"):
        IndependentBernoulli(torch.zeros(3)).log_prob(torch.zeros(2, 4))
    with pytest.raises(ValueError, match="to_torch: torch's Bernoulli has values"):
        IndependentBernoulli(torch.zeros(3), space=Spins(3)).to_torch()
    with pytest.raises(ValueError, match="smoothing: expected a finite number > 0"):
        IndependentBernoulli.from_data(torch.zeros(2, 2), smoothing=0.0)
