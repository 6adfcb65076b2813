"""TorchDistribution: the same numbers as the wrapped torch law, whole-shape events, generator draws."""

from __future__ import annotations

import pytest
import torch

from ebms.distributions import Distribution, NormalisedModel, TorchDistribution, as_distribution
from ebms.spaces import Binary, Reals

D = torch.distributions


def test_log_prob_sums_the_batch_and_event_dimensions_of_the_torch_law():
    loc = torch.tensor([[0.0, 1.0, -1.0], [2.0, 0.5, 0.0]], dtype=torch.float64)
    law = D.Normal(loc, 0.7)  # batch (2, 3), event ()
    q = TorchDistribution(law)
    assert q.event_shape == (2, 3) and isinstance(q.space, Reals) and q.space.event_shape == (2, 3)
    x = torch.randn(5, 2, 3, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    torch.testing.assert_close(q.log_prob(x), law.log_prob(x).sum((1, 2)))
    with pytest.raises(ValueError, match=r"x: expected shape \(B, 2, 3\); got \(5, 3\)"):
        q.log_prob(x[:, 0])  # would broadcast in torch: refused


def test_variants_declare_exactly_the_methods_they_have():
    cases = {
        "normal": (D.Normal(torch.zeros(2), 1.0), True, True),
        "bernoulli": (D.Bernoulli(logits=torch.zeros(3)), False, True),
        "mixture": (D.MixtureSameFamily(D.Categorical(logits=torch.zeros(2)), D.Normal(torch.zeros(2), 1.0)),
                    False, False),
    }
    for name, (law, rsample, entropy) in cases.items():
        q = TorchDistribution(law)
        assert isinstance(q, TorchDistribution) and isinstance(q, Distribution), name
        assert (q.has_rsample, q.has_entropy) == (rsample, entropy), name
        assert hasattr(q, "rsample") == rsample and hasattr(q, "entropy") == entropy, name
    q = TorchDistribution(D.Normal(torch.zeros(2), torch.tensor([1.0, 3.0])))
    torch.testing.assert_close(q.entropy(), D.Normal(torch.zeros(2), torch.tensor([1.0, 3.0])).entropy().sum())
    assert isinstance(TorchDistribution(D.Bernoulli(logits=torch.zeros(3))).space, Binary)


def test_generator_draws_are_reproducible_and_leave_the_global_rng_alone():
    q = TorchDistribution(D.Normal(torch.zeros(4), 1.0))
    torch.manual_seed(123)
    before = torch.get_rng_state()
    a = q.sample(6, generator=torch.Generator().manual_seed(7))
    b = q.sample(6, generator=torch.Generator().manual_seed(7))
    assert torch.equal(torch.get_rng_state(), before)
    assert a.shape == (6, 4) and torch.equal(a, b)
    g = torch.Generator().manual_seed(7)
    assert not torch.equal(q.sample(6, generator=g), q.sample(6, generator=g))  # the generator advances
    loc = torch.zeros(2, requires_grad=True)
    r = TorchDistribution(D.Normal(loc, 1.0)).rsample(3, generator=torch.Generator().manual_seed(1))
    (grad,) = torch.autograd.grad(r.sum(), loc)
    torch.testing.assert_close(grad, torch.full((2,), 3.0))


def test_as_distribution_wraps_torch_laws_and_names_the_argument_otherwise():
    law = D.Normal(torch.zeros(1), 1.0)
    assert isinstance(law, NormalisedModel)  # it has the methods, but not the generator keyword
    wrapped = as_distribution(law, "noise")
    assert isinstance(wrapped, TorchDistribution)

    class OnlySample:
        def sample(self, n, *, generator=None):
            return torch.zeros(n, 1)

    with pytest.raises(TypeError, match="proposal: expected a normalised model with sample.*; got OnlySample"):
        as_distribution(OnlySample(), "proposal")
    with pytest.raises(TypeError, match="dist: expected a torch.distributions.Distribution; got str"):
        TorchDistribution("normal")  # type: ignore[arg-type]
