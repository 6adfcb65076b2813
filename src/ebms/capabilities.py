r"""Typed protocols for what energies, models and paths may offer beyond ``energy(x) -> (B,)``.

An energy only has to be callable. Some offer more: an analytic gradient, closed-form
conditionals, a colouring of their sites, an exact :math:`\log Z`, an annealing path for AIS.
Each such capability is one :class:`typing.Protocol` here, checked with ``isinstance`` (all are
``@runtime_checkable``), never by probing attribute names. Consumers take the fast route when the
protocol is offered and a generic one otherwise; a model offers a capability simply by defining
the method (no registration, no base class), and mypy checks the signature wherever a model is
used as the protocol type. ``docs/capabilities.md`` lists every protocol with the classes that
offer it and the code that uses it.

Shapes: ``B`` chains (batch rows), ``N`` sites of a discrete space, ``K`` categories per site,
``event`` the shape of one point, ``H`` hidden units; sentences are
:class:`~ebms.sequences.Sequences` (``tokens (B, T)``, ``lengths (B,)``) of length up to ``L``.

A runtime ``isinstance`` against a protocol looks up every member by name: a few microseconds,
too slow for code that runs every sampler step. Such code calls :func:`supports`, which gives
the same answer and resolves it once per class (when the class decides: it defines the members,
or its instances have ``__slots__`` only) or once per object (weakly remembered). Hence: give an
object its capabilities before its first use; adding a method to an instance afterwards is not
seen by per-step code. Wrappers built afresh at every step (the tempered energy of
ParallelTempering) use ``__slots__``, so that their class decides.

A runtime check sees names, not signatures or return types: an object whose ``log_partition``
is a tensor attribute (e.g. :class:`~ebms.structured.LinearChainCRF`, per sequence) passes
``isinstance(obj, SupportsLogPartition)`` without offering it. The docs table says which
built-in classes do.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable, Sequence
from typing import Any, ClassVar, Protocol, TypeGuard, TypeVar, runtime_checkable

import torch
from torch import Tensor

from ebms.sequences import Sequences
from ebms.spaces import Space, TokenSequences

__all__ = [
    "AnnealingPath",
    "BlockProducts",
    "ClozeNoise",
    "EARMModel",
    "EnergyCloze",
    "HasChannels",
    "HasEventShape",
    "HasLengthConditioning",
    "HasSpace",
    "HasVocabSize",
    "JointEnergyModel",
    "JointRandomField",
    "NormalisedModel",
    "RBMLike",
    "RecurrentState",
    "ResidualEnergy",
    "ResidualModel",
    "SentenceLM",
    "SupportsAISPath",
    "SupportsAllConditionalLogits",
    "SupportsBipartiteSampling",
    "SupportsBlocks",
    "SupportsConditionalLogits",
    "SupportsContinuations",
    "SupportsEffectiveWeights",
    "SupportsEnergyAndGrad",
    "SupportsFlatTokenLogits",
    "SupportsInteractionRange",
    "SupportsLogPartition",
    "SupportsLogProb",
    "SupportsLogProbGrad",
    "SupportsLogits",
    "SupportsNextLogProbs",
    "SupportsPrefixSampling",
    "SupportsScore",
    "SupportsSingleTokenEnergies",
    "SupportsSiteLogits",
    "SupportsTeacherForcing",
    "SupportsTokenLogProbs",
    "SupportsTokenLogits",
    "SupportsWeightIncrement",
    "TeacherForcedLogProb",
    "TransDimensionalField",
    "TransDimensionalTarget",
    "supports",
]

T = TypeVar("T")


# -- energies ----------------------------------------------------------------------------------
@runtime_checkable
class SupportsEnergyAndGrad(Protocol):
    r"""An energy that returns its value and input gradient in one call.

    ``energy_and_grad(x: (B, *event)) -> (E: (B,), dE/dx: (B, *event))``, both detached.
    Every :class:`~ebms.energy.Energy` has it (autograd by default; analytic in
    :class:`~ebms.nets.MLPEnergy`, the RBMs, the Ising/Potts models).

    Used by :func:`ebms.energy.energy_and_grad`, hence by every gradient kernel (ULA, SGLD, MALA,
    HMC, Gibbs-with-Gradients), by :class:`~ebms.estimators.GeometricPath` and by the tempered
    and summed energies.
    """

    def energy_and_grad(self, x: Tensor) -> tuple[Tensor, Tensor]: ...


@runtime_checkable
class HasSpace(Protocol):
    """An energy or model that declares where its points live: ``space``.

    ``space`` is a :class:`~ebms.spaces.Space` (``Binary``, ``Spins``, ``Categorical``,
    ``Reals``, ...), a :class:`~ebms.spaces.TokenSequences`, or ``None`` (not declared).

    Used by the discrete samplers built without ``space=`` (Gibbs, BlockGibbs, Metropolis,
    Gibbs-with-Gradients, :func:`~ebms.samplers.model_samples`), ParallelTempering,
    :func:`~ebms.estimators.exact_log_partition`, :func:`~ebms.estimators.log_likelihood_report`
    (validates the test points) and :class:`~ebms.estimators.GeometricPath`.
    """

    @property
    def space(self) -> Space | TokenSequences | None: ...


@runtime_checkable
class SupportsConditionalLogits(Protocol):
    r"""Closed-form single-site conditionals of a discrete energy.

    ``conditional_logits(x: (B, *event), site) -> (B, K)``: logits of
    :math:`p(x_{site} = k \mid x_{\setminus site})` (any per-row constant may be added); ``site``
    is one flat site index or a ``LongTensor (B,)`` with one site per chain.

    Used by :class:`~ebms.samplers.Gibbs` (no energy call per site update),
    :func:`ebms.samplers._discrete.site_logits`, ParallelTempering and GeometricPath (carried over
    to tempered and annealed energies). Without it: ``B*K`` energy rows per site update.
    """

    def conditional_logits(self, x: Tensor, site: int | Tensor) -> Tensor: ...


@runtime_checkable
class SupportsAllConditionalLogits(Protocol):
    r"""Every site's single-site conditional at once.

    ``all_conditional_logits(x: (B, *event)) -> (B, N, K)``: row ``i`` are the logits of
    :math:`p(x_i = k \mid x_{\setminus i})`, all given the same ``x``.

    Used by :class:`~ebms.samplers.BlockGibbs` in colouring mode (one call per block),
    :func:`ebms.samplers._discrete.all_site_logits`, ParallelTempering and GeometricPath.
    Without it: ``B*N*K`` energy rows, chunked.
    """

    def all_conditional_logits(self, x: Tensor) -> Tensor: ...


@runtime_checkable
class SupportsBlocks(Protocol):
    """A partition of the sites into blocks with no interaction inside a block.

    ``blocks() -> sequence of LongTensor``: flat site indices of each block (e.g. the two colours
    of a checkerboard lattice); every site in exactly one block.

    Used by :class:`~ebms.samplers.BlockGibbs` built without ``blocks=`` (colouring mode),
    :func:`~ebms.samplers.model_samples`, and carried by ParallelTempering and GeometricPath.
    """

    def blocks(self) -> Sequence[Tensor]: ...


@runtime_checkable
class SupportsBipartiteSampling(Protocol):
    r"""A latent-variable model whose layers are conditionally independent given each other (RBMs).

    ``sample_hidden(v: (B, *event), generator=None) -> h: (B, H)`` draws :math:`h \sim p(h \mid v)`;
    ``sample_visible(h: (B, H), generator=None) -> v: (B, *event)`` draws :math:`v \sim p(v \mid h)`.
    The energy is the free energy of ``v``.

    Used by :class:`~ebms.samplers.BlockGibbs` (bipartite mode: one sweep is ``h`` then ``v``),
    :func:`~ebms.samplers.model_samples`; ParallelTempering refuses block Gibbs on such a model
    (the layer draws cannot be tempered).
    """

    def sample_hidden(self, v: Tensor, generator: torch.Generator | None = None) -> Tensor: ...

    def sample_visible(self, h: Tensor, generator: torch.Generator | None = None) -> Tensor: ...


@runtime_checkable
class SupportsLogPartition(Protocol):
    r"""An exact log normalising constant.

    ``log_partition() -> float`` (or a 0-d tensor, kept differentiable where the model is):
    :math:`\log Z = \log \sum_x e^{-E(x)}` (an integral for continuous ``x``). May raise
    ``ValueError`` when the exact sum is too large (an RBM with both layers wide).

    Used by :class:`~ebms.estimators.GeometricPath` (``log Z_0`` of the base), the RBM estimator
    and the command line's evaluation (exact log Z beside AIS), :meth:`RBMBase.log_prob`.
    """

    def log_partition(self) -> float | Tensor: ...


# -- normalised models --------------------------------------------------------------------------
@runtime_checkable
class SupportsLogProb(Protocol):
    r"""A (normalised) log-density or log-mass: ``log_prob(x) -> (B,)``.

    The half of :class:`NormalisedModel` that does not sample. Used by
    :class:`~ebms.energy.Residual` (its base model), :func:`~ebms.estimators.true_log_likelihood`
    (a toy data set's density), and :class:`~ebms.objectives.ConditionalML`, whose
    ``model(*inputs, lengths)`` returns a law over tag sequences with ``log_prob(tags (B, T)) ->
    (B,)``, the normalised :math:`\log p(y \mid x)` (entries beyond each length ignored; a
    :class:`~ebms.structured.LinearChainCRF`).
    """

    def log_prob(self, x: Any) -> Tensor: ...


@runtime_checkable
class NormalisedModel(Protocol):
    """What every consumer of a normalised model (NCE noise, importance proposal, AIS base,
    independence proposal) needs.

    ``sample(n, *, generator=None)`` returns ``n`` independent draws (a tensor ``(n, *event)`` or a
    :class:`~ebms.sequences.Sequences` of ``n`` sequences) taking randomness only from
    ``generator``; ``log_prob(x) -> (B,)`` is the normalised log-density or log-mass. Any object
    with the two methods qualifies; the members of :mod:`ebms.distributions` subclass
    :class:`~ebms.distributions.Distribution`, which also declares ``conditional_on_length``
    (``log_prob`` is ``log q(x | length)``, drawn with ``sample(n, lengths=...)``).

    Offered by every :class:`~ebms.distributions.Distribution` (hence the LMs) and
    :class:`~ebms.estimators.LengthConditionalLM`. Used by :class:`~ebms.objectives.NCE` and the
    sentence NCE objectives (noise), :func:`~ebms.estimators.importance_log_z` and the per-length
    estimators (proposal), :class:`~ebms.estimators.GeometricPath` (base),
    :class:`~ebms.samplers.MetropolisIndependence` (proposal),
    :class:`~ebms.distributions.MixtureLM` (components) and
    :func:`~ebms.distributions.as_distribution`.
    """

    def sample(self, n: int, *, generator: torch.Generator | None = None) -> Any: ...

    def log_prob(self, x: Any) -> Tensor: ...


@runtime_checkable
class HasLengthConditioning(Protocol):
    r"""A normalised model that declares whether it is a law of sentences given their lengths.

    ``conditional_on_length``: ``True`` when ``log_prob(x)`` is :math:`\log q(x \mid |x|)` and
    ``sample(n, generator, lengths=...)`` draws sentences of the given lengths; ``False`` for a law
    over sentences ending in ``</s>``. A class attribute of every
    :class:`~ebms.distributions.Distribution` (``False``; ``not end`` for an
    :class:`~ebms.distributions.NGram`) and of :class:`~ebms.estimators.LengthConditionalLM` (``True``).

    Used by the per-length log-normaliser estimators and
    :class:`~ebms.samplers.MetropolisIndependence` on sentences (both need ``True``),
    :class:`~ebms.distributions.MixtureLM` (its components need ``False``).
    """

    conditional_on_length: bool


@runtime_checkable
class SupportsLogProbGrad(Protocol):
    """A model that gives ``log q(x)`` ``(B,)`` and its input gradient ``(B, *event)`` in one call.

    Used by :class:`~ebms.estimators.GeometricPath` (the base term of the annealed energies'
    gradient; autograd otherwise).
    """

    def log_prob_and_grad(self, x: Tensor) -> tuple[Tensor, Tensor]: ...


@runtime_checkable
class SupportsSiteLogits(Protocol):
    """A factorised discrete model that lists its per-site category log-probabilities ``(N, K)``.

    ``site_logits() -> (N, K)``. Used by :class:`~ebms.estimators.GeometricPath` to mix the base
    into the target's closed-form conditionals.
    """

    def site_logits(self) -> Tensor: ...


# -- annealed importance sampling ----------------------------------------------------------------
@runtime_checkable
class AnnealingPath(Protocol):
    r"""A path of unnormalised densities :math:`f_\beta`, :math:`\beta \in [0, 1]`, for AIS.

    * ``sample_base(n, generator=None) -> (n, *event)``: exact draws from :math:`p_0 = f_0 / Z_0`;
    * ``base_log_partition``: :math:`\log Z_0`, a number (or a method returning one);
    * ``log_density(x: (B, *event), beta) -> (B,)``: :math:`\log f_\beta(x)`, with :math:`f_1 = e^{-E}`;
    * ``transition(x, beta, generator=None) -> x``: a Markov step leaving :math:`f_\beta` invariant.

    Optional: :class:`SupportsWeightIncrement`. Offered by :class:`~ebms.estimators.GeometricPath`
    and :class:`~ebms.models.BernoulliRBMAISPath`; used by :func:`~ebms.estimators.ais`,
    :func:`~ebms.estimators.reverse_ais`, :func:`~ebms.estimators.ais_bracket`.
    """

    @property
    def base_log_partition(self) -> float | Callable[[], float]: ...

    def sample_base(self, n: int, generator: torch.Generator | None = None) -> Tensor: ...

    def log_density(self, x: Tensor, beta: float) -> Tensor: ...

    def transition(self, x: Tensor, beta: float, generator: torch.Generator | None = None) -> Tensor: ...


@runtime_checkable
class SupportsWeightIncrement(Protocol):
    r"""The AIS weight increment in one call (cheaper and more accurate than two densities).

    ``log_weight_increment(x: (B, *event), beta_from, beta_to) -> (B,)`` =
    :math:`\log f_{to}(x) - \log f_{from}(x)`. Used by :func:`~ebms.estimators.ais` and
    :func:`~ebms.estimators.reverse_ais` when the path offers it.
    """

    def log_weight_increment(self, x: Tensor, beta_from: float, beta_to: float) -> Tensor: ...


@runtime_checkable
class SupportsAISPath(Protocol):
    """A model that builds its own (faster) annealing path.

    ``ais_path(...) -> AnnealingPath``; the arguments are the model's (a :class:`BernoulliRBM`
    takes the base model's logits ``(D,)``). Used by the RBM estimator and the command line's
    ``ebms eval --ais``; other energies get a :class:`~ebms.estimators.GeometricPath`.
    """

    def ais_path(self, *args: Any, **kwargs: Any) -> AnnealingPath: ...


# -- sentences (energy-based language models) ----------------------------------------------------
@runtime_checkable
class TransDimensionalTarget(Protocol):
    r"""A law over (length, tokens) of sentences: :math:`p(l, x) \propto \exp(a_l - E(x))`.

    ``energy(x: Sequences) -> (B,)`` is :math:`E` (without the length term);
    ``length_log_weights() -> (L + 1,)`` holds :math:`a_l` at index ``l`` (``-inf`` where a length is
    impossible, e.g. 0), such as :math:`\log\pi^0_l - \zeta_l` of a TRF (sampling length prior
    :math:`\pi^0`, log normalisers :math:`\zeta`), or zeros for a GN-ELM, whose energy carries the length.

    Offered by :class:`~ebms.models.trf.TRF` and :class:`~ebms.models.trf.GNELM`. Used by
    :class:`~ebms.samplers.TransDimensional` (a plain callable ``E(Sequences) -> (B,)`` is read as the
    joint energy, :math:`a = 0`), :func:`~ebms.models.trf.exact_log_z` and the per-length
    log-normaliser estimators of :mod:`ebms.estimators.sequence_log_z` (which take its ``energy``).
    """

    def energy(self, x: Sequences) -> Tensor: ...

    def length_log_weights(self) -> Tensor: ...


@runtime_checkable
class SupportsTokenLogits(Protocol):
    r"""Scores of single-position substitutions of sentences, without evaluating whole sentences.

    ``token_logits(x: Sequences (B, T), position: LongTensor (B,), candidates: LongTensor (B, K)) ->
    (B, K)``: :math:`-E(x^{position_b \to candidates_{bk}}) + c_b`, with :math:`c_b` any per-row
    constant. Entries ``-1`` of ``candidates`` are absent (any finite score may be returned there), so
    ragged candidate sets come padded; rows whose ``position`` is at or beyond their length may return
    anything finite. Worth offering when the energy is local (n-gram features: only the windows
    through ``position`` change).

    Offered by :class:`~ebms.models.trf.DiscreteFeatures` (local windows),
    :class:`~ebms.models.trf.MixedEnergy`, :class:`~ebms.models.trf.TRF` and
    :class:`~ebms.models.trf.GNELM` (their field's, or whole-sentence variants). Used by
    :class:`~ebms.samplers.TransDimensional` (token proposals and within-length moves; otherwise one
    energy call over ``B K`` substituted sentences), :class:`~ebms.models.trf.MixedEnergy` (per term),
    and the annealed energies of :func:`~ebms.estimators.ais_log_z_per_length`.
    """

    def token_logits(self, x: Sequences, position: Tensor, candidates: Tensor) -> Tensor: ...


@runtime_checkable
class SupportsFlatTokenLogits(Protocol):
    r""":class:`SupportsTokenLogits` for a flat list of substitutions (ragged candidate sets without padding).

    ``token_logits_flat(x: Sequences (B, T), position: LongTensor (B,), row: LongTensor (N,),
    candidates: LongTensor (N,)) -> (N,)``: the score of candidate ``candidates[n]`` at
    ``position[row[n]]`` of sentence ``row[n]``, the same number ``token_logits`` gives it (per-row
    constants included). Offered by :class:`~ebms.models.trf.DiscreteFeatures` and
    :class:`~ebms.models.trf.TRF`; used by :class:`~ebms.samplers.TransDimensional`'s class proposals,
    whose word classes differ in size.
    """

    def token_logits_flat(self, x: Sequences, position: Tensor, row: Tensor, candidates: Tensor) -> Tensor: ...


@runtime_checkable
class SupportsInteractionRange(Protocol):
    r"""How far apart two positions of a sentence can share a term of the energy.

    ``interaction_range() -> int | None``: the largest distance :math:`d` between two positions read by
    one term of :math:`E(x)` (0: every term reads one position; ``None``: not bounded, e.g. a neural
    energy). Positions at least :math:`d + 1` apart are then conditionally independent given the rest
    of the sentence (and of its length), so a sampler may update them at once. Offered by
    :class:`~ebms.models.trf.DiscreteFeatures` (its longest template span) and
    :class:`~ebms.models.trf.TRF` (its field's, else ``None``); used by
    :class:`~ebms.samplers.TransDimensional`'s ``scan="colored"``.
    """

    def interaction_range(self) -> int | None: ...


@runtime_checkable
class SupportsSingleTokenEnergies(Protocol):
    r"""The energies of the ``V - 1`` one-token sentences ``[1] .. [V - 1]``, from cached structure.

    ``single_token_energies() -> (V - 1,)``: equal to the energy of those sentences (the exact
    :math:`\log Z_1` is their negated log-sum-exp), cheaper than an energy call when the sentences'
    features are fixed and only the weights move. Offered by :class:`~ebms.models.trf.DiscreteFeatures`
    (the one-token windows' feature ids cached) and :class:`~ebms.models.trf.TRF` (its field's, or one
    energy call). Used by the exact :math:`\log Z_1` of AugSA's anchor and ``TRF.log_normalisers``.
    """

    def single_token_energies(self) -> Tensor: ...


@runtime_checkable
class TransDimensionalField(TransDimensionalTarget, Protocol):
    r"""A trans-dimensional random field :math:`p(l, x) = \pi_l e^{-E(x)} / Z_l` with learned
    :math:`\zeta_l \approx \log Z_l`: a :class:`TransDimensionalTarget` with its length parameters.

    * ``energy(x: Sequences) -> (B,)``: :math:`E`;
    * ``log_z``: the parameter :math:`\zeta` ``(L,)`` for lengths ``1..L``;
    * ``log_pi`` / ``log_pi0``: :math:`\log\pi` and the sampling prior :math:`\log\pi^0`, ``(L,)``;
    * ``log_normalisers() -> (L,)``: :math:`\log Z_l` as the model uses it (:math:`\zeta`, or
      anchored at the exact :math:`\log Z_1` when ``anchor_first``);
    * ``length_log_weights() -> (L + 1,)``: :math:`\log\pi^0_l - \zeta_l` (the sampler's target);
    * ``space``: the :class:`~ebms.spaces.TokenSequences` of sentences; ``vocab_size``.

    Offered by :class:`~ebms.models.trf.TRF` and :class:`~ebms.models.jrf.JRF`. Used by the TRF
    objectives :class:`~ebms.objectives.AugSA`, :class:`~ebms.objectives.TRFNCE` and
    :class:`~ebms.objectives.DynamicNCE` (which also need ``log_z`` to be an ``nn.Parameter``).
    """

    log_z: Tensor
    log_pi: Tensor
    log_pi0: Tensor
    anchor_first: bool
    vocab_size: int

    @property
    def space(self) -> TokenSequences: ...

    def log_normalisers(self) -> Tensor: ...


@runtime_checkable
class JointRandomField(TransDimensionalField, Protocol):
    r"""A :class:`TransDimensionalField` over sentences whose tags given the words are a CRF.

    ``crf(x: Sequences) -> LinearChainCRF`` of :math:`p(y \mid x)` (tags ``(B, T)``).
    Offered by :class:`~ebms.models.jrf.JRF`; used by :class:`~ebms.objectives.JRFObjective`.
    """

    def crf(self, x: Sequences) -> Any: ...


# -- language models (autoregressive, residual) ---------------------------------------------------
@runtime_checkable
class HasVocabSize(Protocol):
    """A model of token ids that declares its vocabulary: ``vocab_size``, the ``V`` ids ``0 .. V - 1``
    (0 the boundary ``<s>``/``</s>``).

    Offered by the n-gram models, the sentence LMs, the TRFs and the proposals and residual LMs built
    on them. Used by :class:`~ebms.distributions.MixtureLM` (one vocabulary for all components),
    :class:`~ebms.models.ResidualLM` (the energy's must be the base's),
    :class:`~ebms.estimators.LengthConditionalLM`, :func:`~ebms.models.lm.perplexity` and
    :class:`~ebms.objectives.AutoregressiveNLL` (running-text ids checked against it), and the
    residual samplers and estimators.
    """

    vocab_size: int


@runtime_checkable
class SupportsTokenLogProbs(Protocol):
    r"""Per-position log-probabilities of sentences under an autoregressive law.

    ``token_log_probs(x: Sequences (B, T)) -> (B, T + 1)``: position ``t < L_b`` is
    :math:`\log p(x_{t+1} \mid x_{\le t})`, position ``L_b`` is :math:`\log p(\texttt{</s>} \mid x)`,
    0 beyond. Offered by the sentence LMs (:class:`~ebms.models.LSTMLM`,
    :class:`~ebms.models.TransformerLM`, ...) and :class:`~ebms.distributions.BackoffNGram`. Used by
    :class:`~ebms.objectives.AutoregressiveNLL`, :func:`~ebms.metrics.exposure_bias_ratio` and the
    fast n-gram route of :class:`~ebms.estimators.LengthConditionalLM`.
    """

    def token_log_probs(self, x: Sequences) -> Tensor: ...


@runtime_checkable
class RecurrentState(Protocol):
    """The state an autoregressive LM carries after a batch of histories (LSTM hidden state,
    Transformer key/value cache): ``model(inputs (B, S), state) -> (logits, state)``.

    ``batch_size``: the rows ``B`` it holds; ``detach()``: the same state cut from the autograd graph;
    ``select(index: LongTensor (B',))``: the state of those rows. Offered by the states of the LMs
    (every :class:`~ebms.models.lm.LMState`: ``LSTMState``, ``KVCache``, ``HFState``). Used by
    :class:`~ebms.objectives.AutoregressiveNLL` and :func:`~ebms.models.lm.perplexity` on running
    text (a state is carried to the next chunk only when it holds as many rows).
    """

    @property
    def batch_size(self) -> int: ...

    def detach(self) -> Any: ...

    def select(self, index: Tensor) -> Any: ...


@runtime_checkable
class SupportsNextLogProbs(Protocol):
    r"""The next-token law after each prefix: ``next_log_probs(prefixes: Sequences (B, T)) -> (B, V)``,
    :math:`\log p(v \mid \text{prefix}_b)` with column 0 the ``</s>`` outcome.

    Offered by :class:`~ebms.distributions.BackoffNGram`. Used by
    :class:`~ebms.estimators.LengthConditionalLM` (its n-gram route: no network call per position).
    """

    def next_log_probs(self, prefixes: Sequences) -> Tensor: ...


@runtime_checkable
class SupportsLogits(Protocol):
    """Unnormalised log-probabilities of every outcome: ``logits(x) -> (..., K)``.

    A classifier's ``(B, K)`` for inputs ``(B, *event)`` (:class:`~ebms.models.JEM`), a sentence LM's
    ``(B, T + 1, V)`` for ``Sequences (B, T)`` (the next-token logits after ``<s>`` and each token).
    Used by :class:`~ebms.objectives.CrossEntropy` (else ``model(x)``),
    :class:`~ebms.objectives.AutoregressiveNLL` (label smoothing, scheduled sampling) and
    :func:`~ebms.samplers.token_level_joint_sample` (one base pass per context).
    """

    def logits(self, x: Any) -> Tensor: ...


@runtime_checkable
class SentenceLM(Protocol):
    r"""An autoregressive law of whole sentences, read by next-token logits and ancestral draws.

    * ``logits(x: Sequences (B, T)) -> (B, T + 1, V)``: the next-token logits after ``<s>`` and after
      each token (column 0 the ``</s>`` outcome);
    * ``sample(n, generator=None, *, max_length=None, truncate=False) -> Sequences``: ``n`` draws,
      those still running at ``max_length`` cut there with ``truncate``;
    * ``max_length``: the longest sentence it scores (``None``: unbounded).

    Offered by the sentence LMs (every :class:`~ebms.models.lm.AutoregressiveLM`). Used by
    :class:`~ebms.models.lm.LMAdapter` (an :class:`EARMModel` with a horizon of its own).
    """

    @property
    def max_length(self) -> int | None: ...

    def logits(self, x: Sequences) -> Tensor: ...

    def sample(self, n: int, generator: torch.Generator | None = None, *, max_length: int | None = None,
               truncate: bool = False) -> Sequences: ...


@runtime_checkable
class SupportsPrefixSampling(Protocol):
    r"""A base LM that draws continuations of prefixes.

    * ``sample(n, generator=None, *, max_length, temperature, top_k, top_p, prefix, truncate) ->
      Sequences``: ``n`` continuations of ``prefix`` (``n`` rows), cut at ``max_length`` with ``truncate``;
    * ``per_prefix_sampling``: ``True`` when ``sample`` also takes ``per_prefix=m`` (``prefix`` of
      ``n / m`` rows, each encoded once for its ``m`` draws).

    Offered by the sentence LMs (``per_prefix_sampling`` ``True``) and
    :class:`~ebms.models.NGramContinuations` (``False``). Used by
    :meth:`~ebms.data.NegativeCache.build`, which only draws.
    """

    per_prefix_sampling: ClassVar[bool]

    def sample(self, n: int, generator: torch.Generator | None = None, *, max_length: int | None = None,
               temperature: float = 1.0, top_k: int | None = None, top_p: float | None = None,
               prefix: Sequences | None = None, truncate: bool = False) -> Sequences: ...


@runtime_checkable
class SupportsContinuations(SupportsPrefixSampling, Protocol):
    r"""A base LM for residual models: scores and draws continuations of prefixes.

    * ``continuation_token_log_probs(prefix: Sequences, x: Sequences) -> (B, T_x + 1)``: position
      ``j < L_x`` is :math:`\log p(x_{j+1} \mid c, x_{\le j})`, position ``L_x`` the ``</s>`` term;
    * ``sample`` and ``per_prefix_sampling`` of :class:`SupportsPrefixSampling`.

    Offered by the sentence LMs and :class:`~ebms.models.NGramContinuations`. Used by
    :class:`~ebms.models.ResidualLM` (its base).
    """

    def continuation_token_log_probs(self, prefix: Sequences, x: Sequences) -> Tensor: ...


@runtime_checkable
class ResidualEnergy(Protocol):
    r"""A residual language model's energy of continuations: ``energy(prefix: Sequences, x:
    Sequences) -> (B,)``, :math:`E_\theta(c, x)` (lower = more likely under
    :math:`p \propto p_{LM}(x \mid c)\, e^{-E_\theta(c, x)}`).

    Offered by :class:`~ebms.models.ResidualLM`; used by :class:`~ebms.objectives.ResidualNCE`.
    """

    def energy(self, prefix: Sequences, x: Sequences) -> Tensor: ...


@runtime_checkable
class ResidualModel(ResidualEnergy, Protocol):
    r"""A residual language model :math:`p(x \mid c) \propto p_{LM}(x \mid c)\, e^{-E(c, x)}` over the
    continuations of its horizon law: a :class:`ResidualEnergy` with

    * ``base``: the base LM (its ``logits``, when it offers :class:`SupportsLogits`, are a fast path);
    * ``horizon``: ``None`` (continuations run to ``</s>``) or ``K >= 1`` (at most ``K`` tokens);
    * ``base_log_prob(prefix, x) -> (B,)``: :math:`\log p_{LM}(x \mid c)` under the horizon law;
    * ``sample_base(prefix, n, *, generator=None, top_k=None, top_p=None, temperature=1.0) ->
      Sequences``: ``n`` base draws per prefix row, row ``b``'s at ``b n .. b n + n - 1``.

    Its vocabulary is its ``vocab_size`` when it declares one (:class:`HasVocabSize`), else the
    base's. Offered by :class:`~ebms.models.ResidualLM`; used by the samplers of
    :mod:`ebms.samplers.joint_resampling` and the estimators of
    :mod:`ebms.estimators.residual_log_z`.
    """

    base: Any
    horizon: int | None

    def base_log_prob(self, prefix: Sequences, x: Sequences) -> Tensor: ...

    def sample_base(self, prefix: Sequences, n: int, *, generator: torch.Generator | None = None,
                    top_k: int | None = None, top_p: float | None = None, temperature: float = 1.0) -> Sequences: ...


# -- taggers, autoregressive and joint models (what their objectives take) ------------------------
@runtime_checkable
class SupportsScore(Protocol):
    r"""An unnormalised log-potential of tag sequences: ``score(tags (B, T)) -> (B,)``, :math:`U(x, y)`
    (entries beyond each length ignored).

    Offered by :class:`~ebms.structured.LinearChainCRF`. Used by
    :class:`~ebms.objectives.ConditionalNCE`, whose ``model(*inputs, lengths)`` returns one.
    """

    def score(self, tags: Tensor) -> Tensor: ...


@runtime_checkable
class TeacherForcedLogProb(Protocol):
    r"""A locally normalised tagger: ``log_prob(words (B, T), lengths (B,), tags (B, T), *,
    chars=None) -> (B,)``, the exact :math:`\log p(y \mid x)`.

    Offered by :class:`~ebms.models.AlignedRNNT`; used by :class:`~ebms.objectives.TransducerML`.
    Its member is named like :class:`SupportsLogProb`'s, so ``isinstance`` cannot tell the two
    apart: mypy checks the signature.
    """

    def log_prob(self, words: Tensor, lengths: Tensor, tags: Tensor, *, chars: Tensor | None = None) -> Tensor: ...


@runtime_checkable
class SupportsTeacherForcing(Protocol):
    """An autoregressive model's next-step logits after the observed history, at every step.

    ``teacher_forced(batch) -> (logits (B, K, V) float, targets (B, K) int64, mask (B, K) bool)``
    (shapes as in :class:`EARMModel`). Used by :func:`~ebms.metrics.exposure_bias_ratio`; the
    half of :class:`EARMModel` that does not sample.
    """

    def teacher_forced(self, batch: Any) -> tuple[Tensor, Tensor, Tensor]: ...


@runtime_checkable
class EARMModel(SupportsTeacherForcing, Protocol):
    """An autoregressive model seen step by step (sentence LM, seq2seq decoder, PixelCNN).

    Shapes: ``B`` rows, ``K`` steps (``L + 1`` for a sentence, ``</s>`` included; ``H W`` for an
    image), ``V`` outcomes per step.

    * ``teacher_forced(batch) -> (logits (B, K, V) float, targets (B, K) int64, mask (B, K) bool)``:
      the next-step logits after the observed history at every step (with gradient), the observed
      outcome, and which steps are real; targets at masked steps may be anything in ``[0, V)``;
    * ``draw(batch, generator) -> batch``: one draw of the model's law per row of ``batch``
      (conditioned on the same sources where the model is conditional), in ``batch``'s type,
      without gradient, in evaluation mode (the model's law, no dropout).

    Offered by the sentence LMs (every :class:`~ebms.models.lm.AutoregressiveLM`: :class:`~ebms.models.LSTMLM`,
    :class:`~ebms.models.TransformerLM`, :class:`~ebms.models.HuggingFaceLM`, ...),
    :class:`~ebms.models.lm.LMAdapter`, :class:`~ebms.models.Seq2SeqAdapter` and
    :class:`~ebms.models.PixelCNNAdapter`. Used by :class:`~ebms.objectives.EARM`.
    """

    def draw(self, batch: Any, generator: torch.Generator | None) -> Any: ...


@runtime_checkable
class JointEnergyModel(Protocol):
    r"""A classifier read as an energy: ``model(x) -> (B,)`` is the marginal energy
    :math:`-\log\sum_y e^{f(x)[y]}`, ``logits(x) -> (B, K)`` the logits it is made of,
    ``class_energy(y: LongTensor (B,))`` the energy of ``x | y`` (a callable ``(B, *event) -> (B,)``),
    and ``n_classes`` is ``K``.

    Offered by :class:`~ebms.models.JEM`; used by :class:`~ebms.objectives.JEMObjective`.
    """

    n_classes: int

    def __call__(self, x: Tensor) -> Tensor: ...

    def logits(self, x: Tensor) -> Tensor: ...

    def class_energy(self, y: Tensor) -> Callable[[Tensor], Tensor]: ...


# -- cloze and image models ----------------------------------------------------------------------
@runtime_checkable
class ClozeNoise(Protocol):
    r"""The noise side of a cloze energy model: per-position token laws and replacement draws.

    * ``log_probs(x: Sequences (B, T)) -> (B, T, V)``: :math:`\log q(v \mid x_{\setminus t})` at
      every position, from the clean context;
    * ``sample_replacements(x, positions: bool (B, T), *, generator=None, log_probs=None) -> (B, T)``:
      the tokens of ``x`` with the marked positions redrawn from ``q`` (``log_probs``: the
      ``log_probs(x)`` output, when already computed).

    Offered by :class:`~ebms.nets.TwoTowerCloze`; used by :class:`~ebms.objectives.ElectricNCE`
    (through :class:`EnergyCloze`).
    """

    def log_probs(self, x: Sequences) -> Tensor: ...

    def sample_replacements(self, x: Sequences, positions: Tensor, *, generator: torch.Generator | None = None,
                            log_probs: Tensor | None = None) -> Tensor: ...


@runtime_checkable
class EnergyCloze(Protocol):
    r"""An energy-based cloze model: ``token_scores(x: Sequences (B, T)) -> (B, T)``, the negative
    energy :math:`\log\hat p(x_t \mid x_{\setminus t})` of each token given the rest (0 at padding),
    and its ``noise`` (a :class:`ClozeNoise`, checked separately).

    Offered by :class:`~ebms.models.ElectricCloze`; used by :class:`~ebms.objectives.ElectricNCE`.
    """

    noise: Any

    def token_scores(self, x: Sequences) -> Tensor: ...


@runtime_checkable
class HasEventShape(Protocol):
    """A model that declares the shape of one point: ``event_shape``, a tuple of ints.

    Offered by the networks of :mod:`ebms.nets` (``MLPEnergy``, ``ConvEnergy``, the classifiers,
    the noise-conditional energies) and some laws (:class:`~ebms.distributions.TorchDistribution`).
    Used by :func:`~ebms.objectives.recovery_sample` (the shape of its draws when not given).
    """

    event_shape: tuple[int, ...]


@runtime_checkable
class HasChannels(Protocol):
    """An image network that declares its channels per pixel: ``channels``, an int ``C >= 1``.

    Offered by :class:`~ebms.nets.PixelCNN`. Used by :class:`~ebms.models.PixelCNNModel` (the event
    shape ``(C, H, W)`` of its images; ``C = 1`` for a network that declares none).
    """

    channels: int


@runtime_checkable
class SupportsEffectiveWeights(Protocol):
    """A feature CRF's dense weights: ``effective_weights() -> (state weights (A, C), transitions
    (C, C))`` (with gradient), and its trainable ``parameters()``.

    Offered by :class:`~ebms.models.FeatureCRF`; used by
    :class:`~ebms.objectives.FeatureCRFLikelihood`.
    """

    def effective_weights(self) -> tuple[Tensor, Tensor]: ...

    def parameters(self, recurse: bool = True) -> Any: ...


# -- resolution for per-step code ----------------------------------------------------------------
_MISSING = object()
_MEMBERS: dict[type, tuple[tuple[str, bool], ...]] = {}
_BY_CLASS: dict[tuple[type, type], Any] = {}
_BY_OBJECT: weakref.WeakKeyDictionary[Any, dict[type, bool]] = weakref.WeakKeyDictionary()


def _members(protocol: type) -> tuple[tuple[str, bool], ...]:
    """``(name, is_method)`` of each member a protocol declares (its own and its protocol bases')."""
    found = _MEMBERS.get(protocol)
    if found is None:
        names: dict[str, bool] = {}
        for base in reversed(protocol.__mro__):
            if base in (object, Protocol) or not base.__dict__.get("_is_protocol", False):
                continue
            for name in base.__dict__.get("__annotations__", {}):
                names[name] = False
            for name, value in base.__dict__.items():
                if not name.startswith("_"):
                    names[name] = callable(value)
        found = _MEMBERS[protocol] = tuple(names.items())
    return found


def _lookup(cls: type, name: str) -> Any:
    """``name`` as the class defines it (first in its MRO), or ``_MISSING``."""
    return next((c.__dict__[name] for c in cls.__mro__ if name in c.__dict__), _MISSING)


def _class_offers(cls: type, protocol: type) -> bool:
    """Whether the class itself defines every member (methods not set to ``None``)."""
    for name, is_method in _members(protocol):
        value = _lookup(cls, name)
        if value is _MISSING or (is_method and value is None):
            return False
    return True


def _by_class(cls: type, protocol: type) -> bool | None:
    """The answer for every instance of ``cls``, or ``None`` when it depends on the instance.

    The class decides when it defines every member, or when its instances can hold nothing it
    does not define (``__slots__`` without ``__dict__``, and no ``__getattr__``).
    """
    if _class_offers(cls, protocol):
        return True
    if cls.__dictoffset__ == 0 and _lookup(cls, "__getattr__") is _MISSING:
        return False
    return None


def supports(obj: object, protocol: Callable[..., T]) -> TypeGuard[T]:
    """``isinstance(obj, protocol)``, resolved once per class or object: cheap enough for per-step code.

    When the class decides (it defines every member, or its instances have ``__slots__`` only),
    the answer is remembered for the class; otherwise (members set on the instance, or missing)
    it is computed with ``isinstance`` once and remembered for the object, weakly (objects that
    cannot be weakly referenced or hashed are checked every time). Narrows ``obj`` to the
    protocol for type checkers, like ``isinstance``.

    Example:
        >>> from ebms.capabilities import SupportsConditionalLogits, supports
        >>> supports(lambda x: x.sum(-1), SupportsConditionalLogits)
        False
    """
    proto: type = protocol  # type: ignore[assignment]
    key = (type(obj), proto)
    by_class = _BY_CLASS.get(key, _MISSING)
    if by_class is _MISSING:
        by_class = _BY_CLASS[key] = _by_class(type(obj), proto)
    if by_class is not None:
        return by_class
    try:
        memo = _BY_OBJECT.get(obj)
        if memo is None:
            memo = _BY_OBJECT[obj] = {}
    except TypeError:  # not weakly referenceable, or unhashable
        return isinstance(obj, proto)
    found = memo.get(proto)
    if found is None:
        found = memo[proto] = isinstance(obj, proto)
    return found


# -- RBMs (moved from ebms.objectives.rbm_cd) --
@runtime_checkable
class RBMLike(Protocol):
    r"""An RBM with analytic contrastive-divergence statistics.

    ``space`` (the visible units' space, ``event`` their shape); ``grad_uses_params`` (whether the
    statistics read the parameters, as the Gaussian RBM's do); ``visible_term(v: (B, *event)) ->
    (B,)`` (the :math:`\phi(v)` of the free energy), ``hidden_input(v) -> (B, H)``,
    ``visible_mean(h: (B, H)) -> (B, *event)``, ``sample_visible(h, generator) -> (B, *event)``;
    ``add_loglik_grad_(out, v, ph, alpha)`` adds ``alpha`` times the sufficient statistics
    :math:`\sum_b \nabla_\theta(-F(v_b))` (hidden probabilities ``ph: (B, H)``) into ``out``, aligned
    with ``cd_parameters()``. Every :class:`~ebms.models.BernoulliRBM`,
    :class:`~ebms.models.GaussianBernoulliRBM` and :class:`~ebms.models.CategoricalRBM` has it.

    Used by :class:`~ebms.objectives.RBMContrastiveDivergence` and its
    :func:`~ebms.objectives.rbm_cd.negative_phase`, hence by :class:`ebms.fit.RBMEstimator` and
    :func:`ebms.fit.cd_update`.
    """

    @property
    def space(self) -> Space: ...
    @property
    def grad_uses_params(self) -> bool: ...

    def visible_term(self, v: Tensor) -> Tensor: ...
    def hidden_input(self, v: Tensor) -> Tensor: ...
    def visible_mean(self, h: Tensor) -> Tensor: ...
    def sample_visible(self, h: Tensor, generator: torch.Generator | None = None) -> Tensor: ...
    def add_loglik_grad_(self, out: Sequence[Tensor], v: Tensor, ph: Tensor, alpha: float) -> None: ...
    def cd_parameters(self) -> list[Tensor]: ...


@runtime_checkable
class BlockProducts(Protocol):
    """The products of one contrastive-divergence update of an :class:`RBMLike`.

    ``hidden_input(v: (B, *event)) -> (B, H)``, ``visible_term(v) -> (B,)``,
    ``visible_mean(h: (B, H)) -> (B, *event)``, ``sample_visible(mean, h, generator) -> (B, *event)``
    (a draw that may reuse the means); ``statistics(v, ph, vn, phn, alpha_pos, alpha_neg)``
    returns ``alpha_pos s(v, ph) + alpha_neg s(vn, phn)`` as new tensors (aligned with
    ``cd_parameters()``), and ``add_grad_(out, ...)`` adds the same into ``out`` in place.

    Used by :func:`~ebms.objectives.rbm_cd.negative_phase` and
    :class:`~ebms.objectives.RBMContrastiveDivergence` (its ``products`` factory returns one), and
    by :func:`ebms.fit.cd_update`; offered by :class:`~ebms.objectives.rbm_cd.ModelProducts` (the
    model's own methods) and the faster Bernoulli products of :func:`ebms.fit.rbm_products`.
    """

    def hidden_input(self, v: Tensor) -> Tensor: ...
    def visible_term(self, v: Tensor) -> Tensor: ...
    def visible_mean(self, h: Tensor) -> Tensor: ...
    def sample_visible(self, mean: Tensor, h: Tensor, generator: torch.Generator | None) -> Tensor: ...
    def statistics(self, v: Tensor, ph: Tensor, vn: Tensor, phn: Tensor, alpha_pos: float,
                   alpha_neg: float) -> list[Tensor]: ...
    def add_grad_(self, out: Sequence[Tensor], v: Tensor, ph: Tensor, vn: Tensor, phn: Tensor,
                  alpha_pos: float, alpha_neg: float) -> None: ...
