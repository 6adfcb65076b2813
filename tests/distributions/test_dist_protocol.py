"""The protocol, checked on every member: declared capabilities, sample shapes and dtypes, the
generator as the only source of randomness, log_prob shapes and normalisation, and the names that
moved here.

``MEMBERS`` holds a tiny instance of every public :class:`Distribution` subclass of
:mod:`ebms.distributions` and :mod:`ebms.models` (the autoregressive LMs, PixelCNN): a completeness
test fails when one is added without a row. The sentence LMs are built end-heavy
(``p(</s> | h) >= 0.85`` after every history) so that enumerating every sentence of at most
``MAX_LENGTH`` tokens misses less than ``1e-6`` of the mass.
"""

from __future__ import annotations

import inspect
import math
from collections.abc import Callable

import pytest
import torch

import ebms.distributions as dist
import ebms.models as models_pkg
from ebms.distributions import (
    BackoffNGram,
    ClassConditionalGaussian,
    Distribution,
    Gaussian,
    GaussianMixture,
    IndependentBernoulli,
    IndependentCategorical,
    MixtureLM,
    NGram,
    NormalisedModel,
    SupportsLogProbGrad,
    SupportsSiteLogits,
    TorchDistribution,
)
from ebms.models import LSTMLM, ClassFactoredLSTMLM, PixelCNNModel, TransformerLM
from ebms.models.lm import AutoregressiveLM
from ebms.nets.pixelcnn import PixelCNN
from ebms.sequences import Sequences
from ebms.spaces import Binary, Categorical, Spins, TokenSequences

#: sentence LMs: symbols 0 (<s>/</s>), 1, 2; every sentence of up to MAX_LENGTH tokens is enumerated
VOCAB, MAX_LENGTH = 3, 6


def _end_heavy_ngram() -> NGram:
    """Bigram with ``p(</s> | h) = 0.9`` after every history: ``P(|y| > 6) = 0.1**7``."""
    probs = torch.tensor([[0.9, 0.06, 0.04], [0.9, 0.03, 0.07], [0.9, 0.05, 0.05]], dtype=torch.float64)
    return NGram(VOCAB, 2, probs.log())


def _end_heavy_backoff() -> BackoffNGram:
    """Backoff bigram: unigrams ``[</s>, 1, 2] = [0.9, 0.05, 0.05]``, bigrams ``<s> 1`` (0.1) and ``1 2``
    (0.04), the contexts' backoff weights normalising each row: ``P(|y| > 6) <= 0.15 * 0.1**6``."""
    ngrams = [torch.tensor([[0], [1], [2]]), torch.tensor([[0, 1], [1, 2]])]
    log_probs = [torch.tensor([0.9, 0.05, 0.05]).log(), torch.tensor([0.1, 0.04]).log()]
    backoffs = [torch.tensor([0.9 / 0.95, 0.96 / 0.95, 1.0]).log(), torch.zeros(2)]
    return BackoffNGram(VOCAB, ngrams, log_probs, backoffs)


def _end_heavy(lm: AutoregressiveLM, dt: torch.dtype) -> AutoregressiveLM:
    """A tiny LM (small random weights) whose output bias favours ``</s>``: ``p(</s> | h)`` about 0.94."""
    with torch.no_grad():
        if isinstance(lm, ClassFactoredLSTMLM):
            lm.class_decoder.bias[lm.num_classes] += 3.5  # </s> is the class of its own, index C
        else:
            lm.decoder.bias[0] += 3.5
    return lm.to(dt).eval()


def _lm(kind: str, dt: torch.dtype) -> AutoregressiveLM:
    torch.manual_seed(0)
    if kind == "lstm":
        return _end_heavy(LSTMLM(VOCAB, embedding_dim=4, hidden_size=4, num_layers=1), dt)
    if kind == "class-factored":
        return _end_heavy(ClassFactoredLSTMLM(torch.tensor([0, 0, 1]), embedding_dim=4, hidden_size=4, num_layers=1), dt)
    return _end_heavy(TransformerLM(VOCAB, d_model=4, num_heads=2, num_layers=1, dim_feedforward=8, max_length=8), dt)


def _pixelcnn(dt: torch.dtype) -> PixelCNNModel:
    torch.manual_seed(0)
    return PixelCNNModel(PixelCNN(1, hidden=4, layers=2), 2, 2).to(dt)


def _class_gaussian(dt: torch.dtype) -> ClassConditionalGaussian:
    means = torch.tensor([[0.0, 1.0], [-1.0, 0.5]], dtype=dt)
    tril = torch.tensor([[[1.0, 0.0], [0.3, 0.5]], [[0.7, 0.0], [-0.2, 0.9]]], dtype=dt)
    return ClassConditionalGaussian(means, tril, torch.tensor([0.3, 0.7], dtype=dt).log())


#: name -> factory(dtype); event shape of one draw, or None for Sequences. A row covers the nearest public
#: class in its instance's MRO (TorchDistribution builds private subclasses)
MEMBERS: dict[str, tuple[Callable[[torch.dtype], Distribution], tuple[int, ...] | None]] = {
    "gaussian-full": (lambda dt: Gaussian(torch.zeros(3, dtype=dt), torch.eye(3, dtype=dt) * 2.0), (3,)),
    "gaussian-diag": (lambda dt: Gaussian(torch.zeros(2, 2, dtype=dt), std=0.5), (2, 2)),
    "bernoulli": (lambda dt: IndependentBernoulli(torch.linspace(-1, 1, 4, dtype=dt), space=Spins(4)), (4,)),
    "categorical": (lambda dt: IndependentCategorical(Categorical(2, 3), torch.zeros(2, 3, dtype=dt)), (2, 3)),
    "categorical-binary": (lambda dt: IndependentCategorical(Binary(3), torch.ones(3, dtype=dt)), (3,)),
    "ngram": (lambda dt: NGram.fit([[1, 2], [2, 2, 1]], 3, 2).to(dt), None),
    "torch-normal": (lambda dt: TorchDistribution(torch.distributions.Normal(torch.zeros(2, dtype=dt), 1.0)), (2,)),
    "class-gaussian": (_class_gaussian, (2,)),
    "gaussian-mixture": (lambda dt: GaussianMixture([[0.0, 1.0], [1.5, -1.0]], [0.5, 0.8], [0.4, 0.6]).to(dt), (2,)),
    "ngram-end-heavy": (lambda dt: _end_heavy_ngram().to(dt), None),
    "backoff-ngram": (lambda dt: _end_heavy_backoff().to(dt), None),
    "mixture-lm": (lambda dt: MixtureLM([_end_heavy_ngram().to(dt), _end_heavy_backoff().to(dt)], [0.25, 0.75]), None),
    "lstm-lm": (lambda dt: _lm("lstm", dt), None),
    "class-factored-lstm-lm": (lambda dt: _lm("class-factored", dt), None),
    "transformer-lm": (lambda dt: _lm("transformer", dt), None),
    "pixelcnn": (_pixelcnn, (1, 2, 2)),
}
TENSOR_MEMBERS = [k for k, (_, shape) in MEMBERS.items() if shape is not None]
SEQUENCE_MEMBERS = [k for k, (_, shape) in MEMBERS.items() if shape is None]
#: members whose sample(0) is an empty batch (AutoregressiveLM documents it); every other member refuses n = 0
EMPTY_SAMPLE = {"lstm-lm", "class-factored-lstm-lm", "transformer-lm"}
#: members whose log_prob keeps no dtype of its own, with the reason; the dtype test checks the stated one
DTYPE_EXEMPT = {
    "mixture-lm": "log_prob mixes its components' scores in float64 whatever their dtype (float64 always)",
}


@torch.no_grad()
def _total_mass(name: str, q: Distribution) -> float:
    """``sum exp(log_prob)`` over every point of a discrete member's space (or every sentence of at most
    ``MAX_LENGTH`` tokens), or a trapezoid grid integral of a continuous one (see ``CONTINUOUS``)."""
    if name in SEQUENCE_MEMBERS:
        space = TokenSequences(VOCAB - 1, MAX_LENGTH, min_length=0)  # tokens 1..V-1 after the shift
        blocks = (Sequences(x.tokens + x.mask(), x.lengths) for x in space.enumerate())
        return sum(float(q.log_prob(x).double().exp().sum()) for x in blocks)
    event = MEMBERS[name][1]
    assert event is not None
    if name not in CONTINUOUS:
        assert q.space is not None
        return sum(float(q.log_prob(x).double().exp().sum()) for x in q.space.enumerate(dtype=torch.float64))
    reach, step = CONTINUOUS[name]
    axis = torch.arange(-reach, reach + step / 2, step, dtype=torch.float64)
    d = math.prod(event)
    grid = torch.cartesian_prod(*[axis] * d).reshape(-1, *event)
    return float(q.log_prob(grid).exp().sum()) * step**d


#: sequence members whose sentences past MAX_LENGTH tokens hold more than 1e-6 of the mass: (a bound on
#: that mass, the reason); the sum over the enumerated sentences is checked to lie within it
TRUNCATED = {
    "ngram": (0.1, "fitted Witten-Bell bigram, p(</s> | h) 0.15 to 0.4: sentences past 6 tokens hold 6% of its "
                   "mass; NGram is checked to 1e-6 on ngram-end-heavy"),
}
#: continuous members: (half-width of the grid's box, its spacing). The box reaches 6 standard deviations
#: past every mean, the spacing is at most 0.6 of the smallest one: the trapezoid rule on a Gaussian (or a
#: mixture of them) then misses about exp(-2 pi^2 / 0.6^2) = 1e-24 of the mass, far below the 1e-6 asked
CONTINUOUS = {
    "gaussian-full": (8.5, 0.7),
    "gaussian-diag": (3.0, 0.3),
    "torch-normal": (6.0, 0.5),
    "class-gaussian": (7.0, 0.2),
    "gaussian-mixture": (7.0, 0.25),
}


def test_every_public_distribution_class_is_in_the_table():
    public = {
        name
        for package in (dist, models_pkg)
        for name in package.__all__
        if inspect.isclass(getattr(package, name))
        and issubclass(getattr(package, name), Distribution)
        and not inspect.isabstract(getattr(package, name))
    }
    covered = set()
    for factory, _ in MEMBERS.values():
        covered.add(next(c.__name__ for c in type(factory(torch.float64)).__mro__ if c.__name__ in public))
    assert covered == public, f"no MEMBERS row for {sorted(public - covered)}"


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


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("name", SEQUENCE_MEMBERS)
def test_sequence_members_sample_sentences_and_score_in_their_dtype(name, dtype):
    q = MEMBERS[name][0](dtype)
    x = q.sample(5, generator=torch.Generator().manual_seed(0))
    assert isinstance(x, Sequences) and x.batch_size == 5 and x.tokens.dtype == torch.long
    assert bool((x.tokens.masked_select(x.mask()) >= 1).all()), "id 0 is the boundary, never a token"
    lp = q.log_prob(x)
    assert lp.shape == (5,) and lp.dtype == (torch.float64 if name in DTYPE_EXEMPT else dtype)
    assert bool(torch.isfinite(lp).all())


@pytest.mark.parametrize("name", list(MEMBERS))
def test_log_prob_sums_to_one_over_the_support(name):
    q = MEMBERS[name][0](torch.float64)
    if name in TRUNCATED:  # the mass past MAX_LENGTH is not negligible: bounded, not equal
        assert 1.0 - TRUNCATED[name][0] < _total_mass(name, q) <= 1.0 + 1e-9
    else:
        assert _total_mass(name, q) == pytest.approx(1.0, abs=1e-6)


@pytest.mark.parametrize("name", list(MEMBERS))
def test_an_empty_sample_is_an_empty_batch_or_refused_naming_n(name):
    q, g = MEMBERS[name][0](torch.float64), torch.Generator().manual_seed(0)
    if name in EMPTY_SAMPLE:
        x = q.sample(0, generator=g)
        assert isinstance(x, Sequences) and x.batch_size == 0 and q.log_prob(x).shape == (0,)
    else:  # the members of ebms.distributions and PixelCNN (pinned for Gaussian in test_dist_gaussian.py)
        with pytest.raises(ValueError, match=r"^n: expected an int >= 1; got 0$"):
            q.sample(0, generator=g)


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
    c, d = (q.sample(64, generator=torch.Generator().manual_seed(seed)) for seed in (4, 5))
    assert not (c.equal(d) if isinstance(c, Sequences) else torch.equal(c, d)), "another seed, another sample"


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
