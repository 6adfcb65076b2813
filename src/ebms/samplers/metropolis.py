r"""Metropolis–Hastings kernels for discrete spaces: random-walk flips and the independence sampler.

Both kernels propose :math:`x' \sim q(\cdot \mid x)` and accept with probability

.. math::  \alpha = \min\Big\{1,\; \frac{\exp(-E(x'))\, q(x \mid x')}{\exp(-E(x))\, q(x' \mid x)}\Big\},

which leaves :math:`p \propto \exp(-E)` invariant (Metropolis et al., 1953; Hastings, 1970;
monograph §2.2, Eq. 2.22).

* :class:`MetropolisHastings` (random walk): change ``n_flips`` distinct sites chosen uniformly;
  Binary/Spins sites flip, categorical sites (one-hot or index form) and token positions move to a
  uniformly chosen *other* category. The proposal is symmetric, so
  :math:`\log\alpha = \min\{0, E(x) - E(x')\}`. With ``category_probs`` = :math:`q` the new
  category is drawn from :math:`q` instead (whatever the old one), and
  :math:`\log\alpha = \min\{0, E(x) - E(x') + \sum_i [\log q(x_i) - \log q(x'_i)]\}` over the
  changed sites. On token sequences (:class:`~ebms.sequences.Sequences`) the sites are the
  positions inside each chain's length; lengths stay fixed.
* :class:`MetropolisIndependence` (monograph §2.2, the Metropolis independence sampler): propose
  :math:`x' \sim q` regardless of ``x``; with importance weights :math:`w(x) = \exp(-E(x))/q(x)`,
  :math:`\log\alpha = \min\{0, [-E(x') - \log q(x')] - [-E(x) - \log q(x)]\}`. It mixes as well as
  ``q`` covers ``p``: with ``q = p`` every proposal is accepted. On token sequences each chain keeps
  its length and proposes a whole new sentence from a length-conditional :math:`q(\cdot \mid l)`
  (e.g. an LSTM LM given the length, :class:`~ebms.estimators.LengthConditionalLM`): one energy
  call per step whatever the length, where a sweep of single-position moves of an energy without
  local scores (a BiLSTM's) costs one sentence energy per position — the cheap AIS kernel for
  neural TRFs when ``q`` is close to the model.

Proposal protocol (:class:`MetropolisIndependence`): any object with

* ``sample(n, generator) -> x``: ``n`` independent draws, ``(n, *event)`` float states of the space;
* ``log_prob(x) -> (n,)``: :math:`\log q(x)` up to an additive constant (normalised or not).

:class:`~ebms.samplers.proposals.IndependentCategorical` (independent sites, ``fit`` from data
marginals) is the ready-made one; autoregressive models fit the protocol too. On token sequences
the proposal also has ``conditional_on_length = True`` and ``sample(n, generator, lengths=)``
returning :class:`~ebms.sequences.Sequences` of those lengths.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from ebms._checks import check_finite, check_int, check_tensor
from ebms.capabilities import HasLengthConditioning, NormalisedModel
from ebms.energy import EnergyLike
from ebms.samplers._base import ChainState, StepInfo, batch_where, evaluate_states, mh_accept
from ebms.samplers._discrete import DiscreteSampler, resolve_space, resolve_token_space, sample_categorical
from ebms.sequences import Sequences
from ebms.spaces import Binary, Categorical, CategoricalIndices, DiscreteSpace, Spins, TokenSequences

__all__ = ["MetropolisHastings", "MetropolisIndependence"]


def _mh_update(
    energy: EnergyLike, state: ChainState, x_prop: Tensor | Sequences, log_ratio_extra: Tensor | float, generator
) -> tuple[ChainState, StepInfo]:
    """Evaluate the proposal once, accept with ``E(x) - E(x') + extra``, and build the new state."""
    with torch.no_grad():
        e_prop = evaluate_states(energy, x_prop).detach()
    finite = torch.isfinite(e_prop)
    log_ratio = state.energy - e_prop + log_ratio_extra
    # a NaN/-inf proposal energy is rejected (flagged); +inf (zero density) is an ordinary rejection
    log_ratio = torch.where(finite | (e_prop == float("inf")), log_ratio, torch.full_like(log_ratio, -float("inf")))
    accepted, accept_prob = mh_accept(log_ratio, generator)
    x_out = batch_where(accepted, x_prop, state.x)
    e_out = torch.where(accepted, e_prop, state.energy)
    nonfinite = ~finite & (e_prop != float("inf"))
    info = StepInfo(accept_prob=accept_prob, accepted=accepted, energy=e_out, nonfinite=nonfinite)
    return state.replace(x=x_out, energy=e_out, t=state.t + 1), info


def _log_category_probs(probs: Any) -> Tensor:
    """``log(probs / sum(probs))`` for a proposal over categories, after checking it."""
    check_tensor(probs, "category_probs", floating=True)
    if probs.dim() != 1 or probs.shape[0] < 1:
        raise ValueError(f"category_probs: expected a 1-D tensor (K,) of probabilities; got shape {tuple(probs.shape)}")
    check_finite(probs, "category_probs")
    lo = float(probs.min())
    if lo <= 0:
        raise ValueError(
            f"category_probs: expected positive probabilities (a category of probability 0 could never be "
            f"proposed, and chains holding it could never leave); got min {lo:.4g}"
        )
    probs = probs.detach()
    return (probs / probs.sum()).log()


class MetropolisHastings(DiscreteSampler):
    r"""Random-walk Metropolis–Hastings on a discrete space or on token sequences.

    Proposal: choose ``n_flips`` distinct sites uniformly at random (independently per chain);
    flip each (Binary/Spins) or set it to one of the other ``K - 1`` categories uniformly
    (Categorical, CategoricalIndices, token positions). Symmetric, so accept with
    :math:`\min\{1, \exp(E(x) - E(x'))\}`. With ``category_probs`` the new category comes from that
    distribution :math:`q` and the ratio gains :math:`\sum_i \log q(x_i) - \log q(x'_i)`.

    * **Token sequences** (``Sequences`` states, ``space=TokenSequences(...)`` or ``energy.space``):
      the sites are the positions ``[0, L)`` of each chain (``L`` its length, fixed): ``min(n_flips, L)``
      of them change; chains of length 0 propose themselves.
    * **Cost:** one energy call of ``B`` rows per step (the current energy is cached in the state).
    * **Randomness, in order:** the sites (one ``randint`` for ``n_flips=1``, else one uniform per
      site and chain), the new categories (categorical sites only), one MH uniform per chain.
    * **Failures:** a proposal with NaN or ``-inf`` energy is rejected and flagged in
      ``info.nonfinite``; ``+inf`` (zero density) is an ordinary rejection.
    * **Mixing:** ``N`` steps cost about as much as one Gibbs sweep of a generic energy divided by
      ``K``, but single flips are rejected often in ordered phases; larger ``n_flips`` lowers
      acceptance further.

    References:
        Metropolis, Rosenbluth, Rosenbluth, Teller & Teller (1953), "Equation of state calculations
        by fast computing machines", J. Chem. Phys. 21(6).
        Hastings (1970), "Monte Carlo sampling methods using Markov chains and their applications",
        Biometrika 57(1).

    Args:
        n_flips: sites changed per proposal, ``1 <= n_flips <= N`` (``<= max_length`` for tokens).
        category_probs: optional proposal over the ``K`` categories (``V`` tokens), a positive
            float tensor ``(K,)`` (normalised here), e.g. unigram frequencies; categorical and
            token spaces only. Default: uniform over the other ``K - 1``.
        space: the discrete space (or :class:`~ebms.spaces.TokenSequences`); ``None`` means
            ``energy.space``.

    Example:
        >>> import torch
        >>> from ebms.energy import from_fn
        >>> from ebms.spaces import Spins
        >>> from ebms.samplers.metropolis import MetropolisHastings
        >>> space = Spins(8)
        >>> ring = from_fn(lambda s: -(s * s.roll(1, -1)).sum(-1))
        >>> g = torch.Generator().manual_seed(0)
        >>> x = MetropolisHastings(space=space).sample(ring, space.random(100, generator=g), steps=80, generator=g)
        >>> x.shape
        torch.Size([100, 8])
    """

    accepts_sequences = True

    def __init__(
        self,
        n_flips: int = 1,
        *,
        category_probs: Tensor | None = None,
        space: DiscreteSpace | TokenSequences | None = None,
    ) -> None:
        super().__init__(space=space)
        self.n_flips = check_int(n_flips, "n_flips", minimum=1)
        self.log_q = None if category_probs is None else _log_category_probs(category_probs)

    def _check_space(self, space: DiscreteSpace | TokenSequences) -> None:
        if isinstance(space, TokenSequences):
            if self.n_flips > space.max_length:
                raise ValueError(f"n_flips: expected at most max_length={space.max_length}; got {self.n_flips}")
            K = space.vocab_size
        else:
            if self.n_flips > space.num_sites:
                raise ValueError(
                    f"n_flips: expected at most the number of sites N={space.num_sites}; got {self.n_flips}"
                )
            if not isinstance(space, (Binary, Spins, Categorical, CategoricalIndices)):
                raise TypeError(
                    "space: MetropolisHastings supports Binary, Spins, Categorical, CategoricalIndices and "
                    f"TokenSequences spaces; got {type(space).__name__}"
                )
            K = space.num_categories
        if self.log_q is not None:
            if isinstance(space, (Binary, Spins)):
                raise ValueError(
                    f"category_probs: {type(space).__name__} sites flip; a proposal over categories needs a "
                    "Categorical, CategoricalIndices or TokenSequences space"
                )
            if self.log_q.shape[0] != K:
                raise ValueError(f"category_probs: expected {K} probabilities (one per category of {space!r}); "
                                 f"got {self.log_q.shape[0]}")

    def _space(self, x: Any, energy: EnergyLike) -> DiscreteSpace | TokenSequences:
        space: DiscreteSpace | TokenSequences
        if isinstance(x, Sequences):
            space = resolve_token_space(self.token_space or self.discrete_space, energy)
        else:
            space = resolve_space(self.discrete_space, energy)
        self._check_space(space)
        return space

    def init(self, energy: EnergyLike, x0: Any) -> ChainState:
        self._space(x0, energy)
        return super().init(energy, x0)

    def _new_categories(
        self, cur: Tensor, K: int, generator: torch.Generator | None
    ) -> tuple[Tensor, Tensor | None]:
        """New categories for the chosen sites ``cur: (B, n)`` and, with ``category_probs``, the
        per-site log proposal ratio ``log q(cur) - log q(new)`` ``(B, n)``."""
        if self.log_q is None:
            if K == 1:
                return cur, None
            return (cur + torch.randint(1, K, cur.shape, generator=generator, device=cur.device)) % K, None
        log_q = self.log_q.to(cur.device)
        new = sample_categorical(log_q.expand(*cur.shape, K), generator)
        return new, log_q[cur] - log_q[new]

    def propose(
        self, space: DiscreteSpace | TokenSequences, x: Tensor | Sequences, generator: torch.Generator | None = None
    ) -> Tensor | Sequences:
        """The proposal ``x'`` for every chain (``x`` is not modified)."""
        return self._propose(space, x, generator)[0]

    def _propose(
        self, space: DiscreteSpace | TokenSequences, x: Tensor | Sequences, generator: torch.Generator | None
    ) -> tuple[Tensor | Sequences, Tensor | float]:
        """``(x', log q(x | x') - log q(x' | x))``; the ratio is 0 for the symmetric default."""
        if isinstance(x, Sequences):
            assert isinstance(space, TokenSequences), "Sequences states come with a TokenSequences space"
            return self._propose_tokens(space, x, generator)
        assert isinstance(space, DiscreteSpace), "tensor states come with a DiscreteSpace"
        B, N, K, n = x.shape[0], space.num_sites, space.num_categories, self.n_flips
        if n == 1:
            sites = torch.randint(N, (B, 1), generator=generator, device=x.device)
        else:  # n distinct sites: the n smallest of N iid uniforms form a uniform random subset
            u = torch.rand(B, N, generator=generator, device=x.device)
            sites = u.topk(n, dim=1, largest=False).indices
        if isinstance(space, (Binary, Spins)):
            flat = x.reshape(B, N).clone()
            flat.scatter_(1, sites, (space.low + space.high) - flat.gather(1, sites))
            return flat.view(x.shape), 0.0
        if isinstance(space, CategoricalIndices):
            flat = x.reshape(B, N).clone()
            new, log_ratio = self._new_categories(flat.gather(1, sites).long(), K, generator)
            flat.scatter_(1, sites, new.to(flat.dtype))
            return flat.view(x.shape), 0.0 if log_ratio is None else log_ratio.sum(1)
        flat = x.reshape(B, N, K).clone()
        cur = flat.gather(1, sites.unsqueeze(2).expand(B, n, K)).argmax(2)  # (B, n)
        new, log_ratio = self._new_categories(cur, K, generator)
        flat.scatter_(1, sites.unsqueeze(2).expand(B, n, K), torch.nn.functional.one_hot(new, K).to(flat.dtype))
        return flat.view(x.shape), 0.0 if log_ratio is None else log_ratio.sum(1)

    def _propose_tokens(
        self, space: TokenSequences, x: Sequences, generator: torch.Generator | None
    ) -> tuple[Sequences, Tensor | float]:
        """Change ``min(n_flips, L)`` distinct positions inside each chain's length ``L``."""
        B, T = x.batch_size, x.max_length
        if T == 0:  # every chain is empty: nothing to change
            return x, 0.0
        lengths = x.lengths
        if self.n_flips == 1:  # one uniform position in [0, L) (modulo bias below 2^-50 for L < 2^12)
            draws = torch.randint(1 << 62, (B, 1), generator=generator, device=x.device)
            sites = draws % lengths.clamp(min=1)[:, None]
        else:  # the smallest uniforms among the real positions (padding gets 2 > any uniform)
            u = torch.rand(B, T, generator=generator, device=x.device).masked_fill_(~x.mask(), 2.0)
            sites = u.topk(min(self.n_flips, T), dim=1, largest=False).indices
        active = sites < lengths[:, None]  # (B, n): a real position of the chain
        tokens = x.tokens.clone()
        cur = tokens.gather(1, sites)
        new, log_ratio = self._new_categories(cur, space.vocab_size, generator)
        tokens.scatter_(1, sites, torch.where(active, new, cur))
        return x.with_tokens(tokens), 0.0 if log_ratio is None else (log_ratio * active).sum(1)

    def step(
        self, energy: EnergyLike, state: ChainState, *, generator: torch.Generator | None = None
    ) -> tuple[ChainState, StepInfo]:
        """One random-walk MH transition of every chain; returns ``(state, info)``."""
        x_prop, log_ratio = self._propose(self._space(state.x, energy), state.x, generator)
        return _mh_update(energy, state, x_prop, log_ratio, generator)

    def __repr__(self) -> str:
        space = self.token_space or self.discrete_space
        q = "" if self.log_q is None else f", category_probs=({self.log_q.shape[0]},)"
        return f"MetropolisHastings(n_flips={self.n_flips}{q}, space={space!r})"


class MetropolisIndependence(DiscreteSampler):
    r"""Metropolis independence sampler: propose from a fixed distribution ``q``, accept by weight ratio.

    :math:`x' \sim q`, accepted with
    :math:`\min\{1, \exp([-E(x') - \log q(x')] - [-E(x) - \log q(x)])\}`.

    * **Proposal:** see the protocol in the module docstring (``sample(n, generator)``,
      ``log_prob(x)``). ``q`` must give every state of non-zero target probability a non-zero
      probability, else the chain cannot reach it.
    * **Cost per step:** one energy call and one ``sample`` of ``B`` rows, and two ``log_prob``
      calls: :math:`\log q(x)` of the current state is recomputed each step, because
      :class:`~ebms.samplers._base.ChainState` has no slot for it. For independent-site proposals
      that is a ``B x N`` gather, small next to the energy; a costly proposal can be wrapped to
      memoise it.
    * **Token sequences** (``Sequences`` states): every chain keeps its length; the proposal must be
      length-conditional (``conditional_on_length``, ``sample(n, generator, lengths=)``, e.g.
      :class:`~ebms.estimators.LengthConditionalLM`), so the kernel works within each length (an
      AIS kernel, :func:`~ebms.estimators.ais_log_z_per_length`).
    * **Randomness, in order:** the proposal's ``sample``, then one MH uniform per chain.
    * **Failures:** a proposal with NaN or ``-inf`` energy is rejected and flagged in
      ``info.nonfinite``.

    References:
        Tierney (1994), "Markov chains for exploring posterior distributions", Ann. Statist. 22(4).
        Ou (2024), "Energy-Based Models with Applications to Speech and Language Processing", §2.2.

    Args:
        proposal: object with ``sample(n, generator) -> (n, *event)`` and ``log_prob(x) -> (n,)``
            (:class:`ebms.distributions.NormalisedModel`).
        space: the discrete space; ``None`` means ``energy.space``.

    Example:
        >>> import torch
        >>> from ebms.energy import from_fn
        >>> from ebms.spaces import Binary
        >>> from ebms.samplers.metropolis import MetropolisIndependence
        >>> from ebms.samplers.proposals import IndependentCategorical
        >>> space = Binary(6)
        >>> energy = from_fn(lambda v: -(v[:, :-1] * v[:, 1:]).sum(-1))
        >>> q = IndependentCategorical(space, torch.full((6,), 0.5))
        >>> g = torch.Generator().manual_seed(0)
        >>> x = MetropolisIndependence(q, space=space).sample(energy, q.sample(50, g), steps=30, generator=g)
        >>> x.shape
        torch.Size([50, 6])
    """

    def __init__(self, proposal: Any, *, space: DiscreteSpace | None = None) -> None:
        super().__init__(space=space)
        if not isinstance(proposal, NormalisedModel):
            raise TypeError(
                "proposal: expected an object with sample(n, generator) -> x and log_prob(x) -> (n,) "
                f"(ebms.distributions.NormalisedModel); got {type(proposal).__name__}"
            )
        self.proposal = proposal

    accepts_sequences = True

    def _log_q(self, x: Tensor | Sequences, name: str, dtype: torch.dtype) -> Tensor:
        n = x.batch_size if isinstance(x, Sequences) else x.shape[0]
        lq = self.proposal.log_prob(x)
        if not isinstance(lq, Tensor) or tuple(lq.shape) != (n,):
            shape = tuple(lq.shape) if isinstance(lq, Tensor) else type(lq).__name__
            raise ValueError(f"proposal.log_prob({name}): expected shape ({n},); got {shape}")
        return lq.to(device=self._device_of(x), dtype=dtype)

    @staticmethod
    def _device_of(x: Tensor | Sequences) -> torch.device:
        return x.tokens.device if isinstance(x, Sequences) else x.device

    def _propose_sentences(self, x: Sequences, generator: torch.Generator | None) -> Sequences:
        """New sentences of the chains' lengths from the length-conditional proposal, at ``x``'s width."""
        if not (isinstance(self.proposal, HasLengthConditioning) and self.proposal.conditional_on_length):
            raise TypeError(f"proposal: on token sequences the chains keep their lengths, so the proposal must be "
                            f"length-conditional (conditional_on_length = True, sample(n, generator, lengths=); "
                            f"e.g. ebms.estimators.LengthConditionalLM); got {type(self.proposal).__name__}")
        sample: Any = self.proposal.sample  # the length-conditional form of the protocol
        y = sample(x.batch_size, generator, lengths=x.lengths)
        if not isinstance(y, Sequences) or not torch.equal(y.lengths.to(x.lengths.device), x.lengths):
            raise ValueError(f"proposal.sample(n={x.batch_size}, lengths=...): expected Sequences of the chains' "
                             f"lengths; got {type(y).__name__}")
        return Sequences(y.to(x.tokens.device).pad_to(x.tokens.shape[1]).tokens, x.lengths, validate=False)

    def step(
        self, energy: EnergyLike, state: ChainState, *, generator: torch.Generator | None = None
    ) -> tuple[ChainState, StepInfo]:
        """One independence-sampler transition of every chain; returns ``(state, info)``."""
        x = state.x
        with torch.no_grad():
            if isinstance(x, Sequences):
                x_prop: Tensor | Sequences = self._propose_sentences(x, generator)
            else:
                x_prop = self.proposal.sample(x.shape[0], generator=generator)
                if not isinstance(x_prop, Tensor) or x_prop.shape != x.shape:
                    shape = tuple(x_prop.shape) if isinstance(x_prop, Tensor) else type(x_prop).__name__
                    raise ValueError(f"proposal.sample(n={x.shape[0]}): expected shape {tuple(x.shape)}; got {shape}")
                x_prop = x_prop.to(x.dtype)
            # log alpha = E(x) - E(x') + log q(x) - log q(x')
            dtype = state.energy.dtype  # that of the energies: states may hold integer indices
            extra = self._log_q(x, "x", dtype) - self._log_q(x_prop, "x'", dtype)
        return _mh_update(energy, state, x_prop, extra, generator)

    def __repr__(self) -> str:
        space = self.token_space or self.discrete_space
        return f"MetropolisIndependence(proposal={type(self.proposal).__name__}, space={space!r})"
