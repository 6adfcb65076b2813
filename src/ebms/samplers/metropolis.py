r"""Metropolis–Hastings kernels for discrete spaces: random-walk flips and the independence sampler.

Both kernels propose :math:`x' \sim q(\cdot \mid x)` and accept with probability

.. math::  \alpha = \min\Big\{1,\; \frac{\exp(-E(x'))\, q(x \mid x')}{\exp(-E(x))\, q(x' \mid x)}\Big\},

which leaves :math:`p \propto \exp(-E)` invariant (Metropolis et al., 1953; Hastings, 1970;
monograph §2.2, Eq. 2.22).

* :class:`MetropolisHastings` (random walk): change ``n_flips`` distinct sites chosen uniformly;
  Binary/Spins sites flip, Categorical sites move to a uniformly chosen *other* category. The
  proposal is symmetric, so :math:`\log\alpha = \min\{0, E(x) - E(x')\}`.
* :class:`MetropolisIndependence` (monograph §2.2, the Metropolis independence sampler): propose
  :math:`x' \sim q` regardless of ``x``; with importance weights :math:`w(x) = \exp(-E(x))/q(x)`,
  :math:`\log\alpha = \min\{0, [-E(x') - \log q(x')] - [-E(x) - \log q(x)]\}`. It mixes as well as
  ``q`` covers ``p``: with ``q = p`` every proposal is accepted.

Proposal protocol (:class:`MetropolisIndependence`): any object with

* ``sample(n, generator) -> x``: ``n`` independent draws, ``(n, *event)`` float states of the space;
* ``log_prob(x) -> (n,)``: :math:`\log q(x)` up to an additive constant (normalised or not).

:class:`~ebms.samplers.proposals.IndependentCategorical` (independent sites, ``fit`` from data
marginals) is the ready-made one; autoregressive models fit the protocol too.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from ebms._checks import check_int
from ebms.energy import EnergyLike, evaluate
from ebms.samplers._base import ChainState, StepInfo, batch_where, mh_accept
from ebms.samplers._discrete import DiscreteSampler, resolve_space
from ebms.spaces import Binary, Categorical, DiscreteSpace, Spins

__all__ = ["MetropolisHastings", "MetropolisIndependence"]


def _mh_update(
    energy: EnergyLike, state: ChainState, x_prop: Tensor, log_ratio_extra: Tensor | float, generator
) -> tuple[ChainState, StepInfo]:
    """Evaluate the proposal once, accept with ``E(x) - E(x') + extra``, and build the new state."""
    with torch.no_grad():
        e_prop = evaluate(energy, x_prop).detach()
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


class MetropolisHastings(DiscreteSampler):
    r"""Random-walk Metropolis–Hastings on a discrete space.

    Proposal: choose ``n_flips`` distinct sites uniformly at random (independently per chain);
    flip each (Binary/Spins) or set it to one of the other ``K - 1`` categories uniformly
    (Categorical). Symmetric, so accept with :math:`\min\{1, \exp(E(x) - E(x'))\}`.

    * **Cost:** one energy call of ``B`` rows per step (the current energy is cached in the state).
    * **Randomness, in order:** the sites (one ``randint`` for ``n_flips=1``, else one uniform per
      site and chain), the new categories (Categorical only), one MH uniform per chain.
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
        n_flips: sites changed per proposal, ``1 <= n_flips <= N``.
        space: the discrete space; ``None`` means ``energy.space``.

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

    def __init__(self, n_flips: int = 1, *, space: DiscreteSpace | None = None) -> None:
        super().__init__(space=space)
        self.n_flips = check_int(n_flips, "n_flips", minimum=1)

    def _check_space(self, space: DiscreteSpace) -> None:
        if self.n_flips > space.num_sites:
            raise ValueError(f"n_flips: expected at most the number of sites N={space.num_sites}; got {self.n_flips}")
        if not isinstance(space, (Binary, Spins, Categorical)):
            raise TypeError(
                f"space: MetropolisHastings supports Binary, Spins and Categorical spaces; got {type(space).__name__}"
            )

    def init(self, energy: EnergyLike, x0: Tensor) -> ChainState:
        self._check_space(resolve_space(self.discrete_space, energy))
        return super().init(energy, x0)

    def propose(self, space: DiscreteSpace, x: Tensor, generator: torch.Generator | None = None) -> Tensor:
        """The proposal ``x'`` for every chain (``x`` is not modified)."""
        B, N, K, n = x.shape[0], space.num_sites, space.num_categories, self.n_flips
        if n == 1:
            sites = torch.randint(N, (B, 1), generator=generator, device=x.device)
        else:  # n distinct sites: the n smallest of N iid uniforms form a uniform random subset
            u = torch.rand(B, N, generator=generator, device=x.device)
            sites = u.topk(n, dim=1, largest=False).indices
        if isinstance(space, (Binary, Spins)):
            flat = x.reshape(B, N).clone()
            flat.scatter_(1, sites, (space.low + space.high) - flat.gather(1, sites))
            return flat.view(x.shape)
        flat = x.reshape(B, N, K).clone()
        cur = flat.gather(1, sites.unsqueeze(2).expand(B, n, K)).argmax(2)  # (B, n)
        new = (cur + torch.randint(1, K, (B, n), generator=generator, device=x.device)) % K
        flat.scatter_(1, sites.unsqueeze(2).expand(B, n, K), torch.nn.functional.one_hot(new, K).to(flat.dtype))
        return flat.view(x.shape)

    def step(
        self, energy: EnergyLike, state: ChainState, *, generator: torch.Generator | None = None
    ) -> tuple[ChainState, StepInfo]:
        """One random-walk MH transition of every chain; returns ``(state, info)``."""
        space = resolve_space(self.discrete_space, energy)
        self._check_space(space)
        return _mh_update(energy, state, self.propose(space, state.x, generator), 0.0, generator)

    def __repr__(self) -> str:
        return f"MetropolisHastings(n_flips={self.n_flips}, space={self.discrete_space!r})"


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
    * **Randomness, in order:** the proposal's ``sample``, then one MH uniform per chain.
    * **Failures:** a proposal with NaN or ``-inf`` energy is rejected and flagged in
      ``info.nonfinite``.

    References:
        Tierney (1994), "Markov chains for exploring posterior distributions", Ann. Statist. 22(4).
        Ou (2024), "Energy-Based Models with Applications to Speech and Language Processing", §2.2.

    Args:
        proposal: object with ``sample(n, generator) -> (n, *event)`` and ``log_prob(x) -> (n,)``.
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
        for method in ("sample", "log_prob"):
            if not callable(getattr(proposal, method, None)):
                raise TypeError(
                    f"proposal: expected an object with sample(n, generator) -> x and log_prob(x) -> (n,); "
                    f"{type(proposal).__name__} has no callable {method}"
                )
        self.proposal = proposal

    def _log_q(self, x: Tensor, name: str) -> Tensor:
        lq = self.proposal.log_prob(x)
        if not isinstance(lq, Tensor) or tuple(lq.shape) != (x.shape[0],):
            shape = tuple(lq.shape) if isinstance(lq, Tensor) else type(lq).__name__
            raise ValueError(f"proposal.log_prob({name}): expected shape ({x.shape[0]},); got {shape}")
        return lq.to(x.dtype)

    def step(
        self, energy: EnergyLike, state: ChainState, *, generator: torch.Generator | None = None
    ) -> tuple[ChainState, StepInfo]:
        """One independence-sampler transition of every chain; returns ``(state, info)``."""
        x = state.x
        with torch.no_grad():
            x_prop = self.proposal.sample(x.shape[0], generator)
            if not isinstance(x_prop, Tensor) or x_prop.shape != x.shape:
                shape = tuple(x_prop.shape) if isinstance(x_prop, Tensor) else type(x_prop).__name__
                raise ValueError(f"proposal.sample(n={x.shape[0]}): expected shape {tuple(x.shape)}; got {shape}")
            x_prop = x_prop.to(x.dtype)
            # log alpha = E(x) - E(x') + log q(x) - log q(x')
            extra = self._log_q(x, "x") - self._log_q(x_prop, "x'")
        return _mh_update(energy, state, x_prop, extra, generator)

    def __repr__(self) -> str:
        return f"MetropolisIndependence(proposal={type(self.proposal).__name__}, space={self.discrete_space!r})"
