r"""Normalised models: one protocol for NCE noise, importance proposals, AIS bases and proposals.

Every member follows the same two calls::

    x = q.sample(n, generator=g)     # n independent draws: (n, *event) tensor, or Sequences
    lp = q.log_prob(x)               # normalised log-density / log-mass, shape (B,)

Randomness comes only from ``generator``. What else a member offers is declared as a class
attribute, never discovered by probing: ``has_rsample`` (a reparameterised ``rsample``),
``has_entropy`` (an exact ``entropy()``); instances carry ``space`` (the
:class:`~ebms.spaces.Space` of one draw, or ``None``) and ``conditional_on_length`` (sequence
models giving ``log p(y | length)``, sampled with ``sample(n, lengths=...)``). Factorised members
also give ``log_prob_and_grad`` (:class:`SupportsLogProbGrad`) and discrete ones ``site_logits``
(:class:`SupportsSiteLogits`), which AIS paths use.

Members: :class:`Gaussian` (full or diagonal covariance), :class:`IndependentBernoulli`
(Binary/Spins sites), :class:`IndependentCategorical` (any discrete space), :class:`NGram`
(dense n-gram LMs over :class:`~ebms.sequences.Sequences`, smoothed by :class:`WittenBell` or
:class:`AddK`), :class:`BackoffNGram` (sparse backoff n-gram LMs for real vocabularies: modified
Kneser–Ney, Witten–Bell, add-k, count pruning, ARPA files), :class:`MixtureLM` (mixtures of
sentence LMs, e.g. NCE noise with a heavy-tailed component), and :class:`TorchDistribution` (any ``torch.distributions`` law, its whole shape
taken as the event). The first three also convert the other way with ``to_torch()``.

Consumers accept any object that satisfies :class:`NormalisedModel`, and wrap
``torch.distributions`` laws with :func:`as_distribution`.
"""

from ebms.distributions._base import Distribution, NormalisedModel, SupportsLogProbGrad, SupportsSiteLogits
from ebms.distributions._sampling import sample_categorical
from ebms.distributions.backoff import BackoffNGram
from ebms.distributions.bernoulli import IndependentBernoulli
from ebms.distributions.categorical import IndependentCategorical
from ebms.distributions.class_gaussian import ClassConditionalGaussian
from ebms.distributions.gaussian import Gaussian
from ebms.distributions.mixture import GaussianMixture
from ebms.distributions.mixture_lm import MixtureLM
from ebms.distributions.ngram import NGram
from ebms.distributions.smoothing import AddK, Smoothing, WittenBell
from ebms.distributions.torch_distribution import TorchDistribution, as_distribution

__all__ = [
    "AddK",
    "BackoffNGram",
    "ClassConditionalGaussian",
    "Distribution",
    "Gaussian",
    "GaussianMixture",
    "IndependentBernoulli",
    "IndependentCategorical",
    "MixtureLM",
    "NGram",
    "NormalisedModel",
    "Smoothing",
    "SupportsLogProbGrad",
    "SupportsSiteLogits",
    "TorchDistribution",
    "WittenBell",
    "as_distribution",
    "sample_categorical",
]
