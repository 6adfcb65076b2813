"""The protocol, checked on every member: declared capabilities, sample shapes and dtypes, the
generator as the only source of randomness, log_prob shapes, and the names that moved here."""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch

import ebms.distributions as dist
from ebms.distributions import (
    Distribution,
    Gaussian,
    IndependentBernoulli,
    IndependentCategorical,
    NGram,
    NormalisedModel,
    SupportsLogProbGrad,
    SupportsSiteLogits,
    TorchDistribution,
)
from ebms.sequences import Sequences
from ebms.spaces import Binary, Categorical, Spins

#: name -> factory(dtype); event shape of one draw, or None for Sequences
MEMBERS: dict[str, tuple[Callable[[torch.dtype], Distribution], tuple[int, ...] | None]] = {
    "gaussian-full": (lambda dt: Gaussian(torch.zeros(3, dtype=dt), torch.eye(3, dtype=dt) * 2.0), (3,)),
    "gaussian-diag": (lambda dt: Gaussian(torch.zeros(2, 2, dtype=dt), std=0.5), (2, 2)),
    "bernoulli": (lambda dt: IndependentBernoulli(torch.linspace(-1, 1, 4, dtype=dt), space=Spins(4)), (4,)),
    "categorical": (lambda dt: IndependentCategorical(Categorical(2, 3), torch.zeros(2, 3, dtype=dt)), (2, 3)),
    "categorical-binary": (lambda dt: IndependentCategorical(Binary(3), torch.ones(3, dtype=dt)), (3,)),
    "ngram": (lambda dt: NGram.fit([[1, 2], [2, 2, 1]], 3, 2), None),
    "torch-normal": (lambda dt: TorchDistribution(torch.distributions.Normal(torch.zeros(2, dtype=dt), 1.0)), (2,)),
}
TENSOR_MEMBERS = [k for k, (_, shape) in MEMBERS.items() if shape is not None]


@pytest.mark.parametrize("name", list(MEMBERS))
def test_capabilities_are_declared_exactly(name):
    q = MEMBERS[name][0](torch.float32)
    assert isinstance(q, Distribution) and isinstance(q, NormalisedModel)
    assert hasattr(q, "rsample") == q.has_rsample
    assert hasattr(q, "entropy") == q.has_entropy
    if q.has_entropy:
        assert q.entropy().shape == ()
    assert q.log_partition() == 0.0
    assert q.conditional_on_length is False


def test_member_classes_declare_their_capabilities():
    for cls in (Gaussian, IndependentBernoulli, IndependentCategorical, NGram):
        assert hasattr(cls, "rsample") == cls.has_rsample, cls
        assert hasattr(cls, "entropy") == cls.has_entropy, cls
    assert issubclass(IndependentBernoulli, SupportsLogProbGrad) and issubclass(IndependentBernoulli, SupportsSiteLogits)
    assert not issubclass(Gaussian, SupportsSiteLogits) and not issubclass(NGram, SupportsLogProbGrad)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("name", TENSOR_MEMBERS)
def test_tensor_members_sample_and_score_in_their_dtype(name, dtype):
    factory, event = MEMBERS[name]
    q = factory(dtype)
    x = q.sample(5, generator=torch.Generator().manual_seed(0))
    assert x.shape == (5, *event) and x.dtype == dtype
    lp = q.log_prob(x)
    assert lp.shape == (5,) and lp.dtype == dtype and bool(torch.isfinite(lp).all())
    if q.space is not None:
        q.space.validate(x)


@pytest.mark.parametrize("name", list(MEMBERS))
def test_draws_come_only_from_the_generator(name):
    q = MEMBERS[name][0](torch.float64)
    torch.manual_seed(0)
    a = q.sample(8, generator=torch.Generator().manual_seed(4))
    torch.manual_seed(1)  # a different global RNG state changes nothing
    b = q.sample(8, generator=torch.Generator().manual_seed(4))
    if isinstance(a, Sequences):
        assert a.equal(b) and q.log_prob(a).shape == (8,)
    else:
        assert torch.equal(a, b)


@pytest.mark.parametrize("name", ["gaussian-full", "bernoulli", "categorical", "ngram"])
def test_buffers_move_with_the_module(name):
    q = MEMBERS[name][0](torch.float32)
    names = [n for n, _ in q.named_buffers()]
    assert names, "parameters live in buffers"
    q64 = q.double()
    assert all(b.dtype == torch.float64 for _, b in q64.named_buffers() if b.is_floating_point())


def test_package_exports_are_sorted_and_complete():
    assert dist.__all__ == sorted(dist.__all__)
    for name in dist.__all__:
        assert hasattr(dist, name)


def test_old_names_still_import_from_their_old_homes():
    from ebms.estimators import BernoulliBase, CategoricalBase, GaussianBase
    from ebms.objectives import GaussianNoise, TagBigramNoise
    from ebms.samplers import IndependentCategorical as OldIndependentCategorical
    from ebms.samplers.proposals import IndependentCategorical as ProposalIndependentCategorical
    from ebms.structured import LabelNGram

    assert GaussianNoise is Gaussian and BernoulliBase is IndependentBernoulli and LabelNGram is NGram
    assert OldIndependentCategorical is IndependentCategorical is ProposalIndependentCategorical
    # the three whose old constructors differ keep them, and build the merged classes
    mean, std = torch.tensor([0.5, -1.0]), torch.tensor([2.0, 0.3])
    x = torch.randn(4, 2, generator=torch.Generator().manual_seed(0))
    torch.testing.assert_close(GaussianBase(mean, std).log_prob(x), Gaussian(mean, std=std).log_prob(x))
    assert isinstance(GaussianBase.from_data(x), Gaussian) and GaussianBase.from_data(x).diagonal
    logits = torch.tensor([[0.0, 1.0, -1.0], [2.0, 0.0, 0.0]])
    cb = CategoricalBase(logits)
    assert isinstance(cb, IndependentCategorical) and cb.space.event_shape == (2, 3)
    torch.testing.assert_close(cb.log_probs, torch.log_softmax(logits, -1))
    data = Categorical(2, 3).one_hot(torch.tensor([[0, 1], [2, 2]]))
    torch.testing.assert_close(CategoricalBase.from_data(data, smoothing=1.0).log_probs.exp(),
                               (data.sum(0) + 1) / (2 + 3))
    with pytest.raises(TypeError, match="space: expected ebms.spaces.Categorical; got Binary"):
        CategoricalBase(torch.zeros(2, 2), space=Binary(2))  # type: ignore[arg-type]
    tag = TagBigramNoise.uniform(3)
    assert isinstance(tag, NGram) and tag.conditional_on_length and (tag.vocab_size, tag.boundary) == (4, 3)
