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
from typing import Any, Protocol, TypeGuard, TypeVar, runtime_checkable

import torch
from torch import Tensor

from ebms.sequences import Sequences
from ebms.spaces import Space, TokenSequences

__all__ = [
    "AnnealingPath",
    "BlockProducts",
    "HasSpace",
    "RBMLike",
    "SupportsAISPath",
    "SupportsAllConditionalLogits",
    "SupportsBipartiteSampling",
    "SupportsBlocks",
    "SupportsConditionalLogits",
    "SupportsEnergyAndGrad",
    "SupportsFlatTokenLogits",
    "SupportsLogPartition",
    "SupportsLogProb",
    "SupportsLogProbGrad",
    "SupportsSingleTokenEnergies",
    "SupportsSiteLogits",
    "SupportsTokenLogits",
    "SupportsWeightIncrement",
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


# -- normalised models (optional members of ebms.distributions.NormalisedModel) ----------------
@runtime_checkable
class SupportsLogProb(Protocol):
    """A (normalised) log-density or log-mass: ``log_prob(x) -> (B,)``.

    The half of :class:`ebms.distributions.NormalisedModel` that does not sample. Used by
    :class:`~ebms.energy.Residual` (its base model), :func:`~ebms.estimators.true_log_likelihood`
    (a toy data set's density).
    """

    def log_prob(self, x: Any) -> Tensor: ...


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
class SupportsSingleTokenEnergies(Protocol):
    r"""The energies of the ``V - 1`` one-token sentences ``[1] .. [V - 1]``, from cached structure.

    ``single_token_energies() -> (V - 1,)``: equal to the energy of those sentences (the exact
    :math:`\log Z_1` is their negated log-sum-exp), cheaper than an energy call when the sentences'
    features are fixed and only the weights move. Offered by :class:`~ebms.models.trf.DiscreteFeatures`
    (the one-token windows' feature ids cached) and :class:`~ebms.models.trf.TRF` (its field's, or one
    energy call). Used by the exact :math:`\log Z_1` of AugSA's anchor and ``TRF.log_normalisers``.
    """

    def single_token_energies(self) -> Tensor: ...


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
