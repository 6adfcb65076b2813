r"""A geometric annealing path for any energy, base distribution and Markov kernel.

:math:`\log f_\beta(x) = (1-\beta)\log p_0(x) - \beta E(x)` between a normalised base :math:`p_0`
(any :mod:`ebms.distributions` model, e.g. :class:`~ebms.distributions.IndependentBernoulli`,
:class:`~ebms.distributions.IndependentCategorical`, :class:`~ebms.distributions.Gaussian`) and
the target :math:`e^{-E}`; the transition at :math:`\beta` runs any :class:`~ebms.samplers.Sampler`
on the intermediate energy. It follows the path protocol of :mod:`ebms.estimators.ais`; models with
a faster path (an RBM's ``ais_path()``) supply their own.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Any

import torch
from torch import Tensor

from ebms._checks import check_int
from ebms.capabilities import (
    HasSpace,
    NormalisedModel,
    SupportsAllConditionalLogits,
    SupportsBlocks,
    SupportsConditionalLogits,
    SupportsLogPartition,
    SupportsLogProbGrad,
    SupportsSiteLogits,
)
from ebms.distributions import as_distribution
from ebms.energy import Energy, EnergyLike, autograd_energy_and_grad, energy_and_grad, evaluate
from ebms.samplers import ChainState, Sampler
from ebms.spaces import Space, TokenSequences

__all__ = ["GeometricPath"]


def _autograd_log_prob_and_grad(base: Any) -> Any:
    def fn(x: Tensor) -> tuple[Tensor, Tensor]:
        neg, g = autograd_energy_and_grad(lambda z: -base.log_prob(z), x, allow_constant=True)  # e.g. uniform
        return -neg, -g

    return fn


def _mixed_site_logits(cond: Any, base_logits: Tensor, beta: float, x: Tensor, site: int | Tensor) -> Tensor:
    e_part = cond(x, site)
    b_part = base_logits[site].expand_as(e_part)
    return beta * e_part + (1.0 - beta) * b_part


def _mixed_all_logits(cond: Any, base_logits: Tensor, beta: float, x: Tensor) -> Tensor:
    e_part = cond(x)
    return beta * e_part + (1.0 - beta) * base_logits.expand_as(e_part)


class _AnnealedEnergy(Energy):
    r"""Energy of :math:`f_\beta`: :math:`\beta E(x) - (1-\beta)\log p_0(x)`, with an analytic gradient.

    Carries the target's ``space``. The variants built by :func:`_annealed_class` also carry the
    target's ``blocks`` (a factorised base adds no interaction) and mix single-site conditional
    logits when the target and the base both supply them, as methods of the class: kernels
    resolve capabilities once per class, and a path makes one energy per temperature.
    """

    space: Space | TokenSequences | None = None

    def __init__(self, path: GeometricPath, beta: float) -> None:
        super().__init__()
        self.target, self.base, self.beta = path.energy, path.base, beta
        self.space = path.space
        self._base_log_prob_and_grad = path._base_log_prob_and_grad
        # what the class variants use (None where the target or the base lacks it; see _annealed_class)
        caps: tuple[Any, Any, Any] = path._target_capabilities
        self._target_blocks, self._cond, self._allc = caps
        self._site: Any = path.base_site_logits

    def forward(self, x: Tensor) -> Tensor:
        b = self.beta
        if b == 1.0:
            return evaluate(self.target, x)
        base = -(1.0 - b) * self.base.log_prob(x)
        return base if b == 0.0 else b * evaluate(self.target, x) + base

    def energy_and_grad(self, x: Tensor) -> tuple[Tensor, Tensor]:
        b = self.beta
        if b == 1.0:
            return energy_and_grad(self.target, x)
        lp, glp = self._base_log_prob_and_grad(x)
        e0, g0 = -(1.0 - b) * lp, -(1.0 - b) * glp
        if b == 0.0:
            return e0, g0
        e1, g1 = energy_and_grad(self.target, x)
        return b * e1 + e0, b * g1 + g0


class _KeepsBlocks(_AnnealedEnergy):
    def blocks(self) -> Sequence[Tensor]:
        return self._target_blocks()


class _MixesConditionals(_AnnealedEnergy):
    def conditional_logits(self, x: Tensor, site: int | Tensor) -> Tensor:
        return _mixed_site_logits(self._cond, self._site, self.beta, x, site)


class _MixesAllConditionals(_AnnealedEnergy):
    def all_conditional_logits(self, x: Tensor) -> Tensor:
        return _mixed_all_logits(self._allc, self._site, self.beta, x)


@functools.cache
def _annealed_class(blocks: bool, conditionals: bool, all_conditionals: bool) -> type[_AnnealedEnergy]:
    """The :class:`_AnnealedEnergy` variant offering exactly the named capabilities (at most 8 classes)."""
    chosen = [c for c, on in ((_KeepsBlocks, blocks), (_MixesConditionals, conditionals),
                              (_MixesAllConditionals, all_conditionals)) if on]
    if len(chosen) <= 1:
        return chosen[0] if chosen else _AnnealedEnergy
    name = "_AnnealedEnergy[" + ",".join(c.__name__ for c in chosen) + "]"
    return type(name, tuple(chosen), {"__module__": __name__})


class GeometricPath:
    r"""Geometric annealing path :math:`\log f_\beta = (1-\beta)\log p_0(x) - \beta E(x)` for any energy and kernel.

    Args:
        energy: the target energy ``E`` (``p_1 ∝ exp(-E)``).
        base: the start ``p_0``, a normalised model (:class:`ebms.distributions.NormalisedModel`:
            ``sample(n, *, generator)``, ``log_prob(x) -> (B,)``; a ``torch.distributions`` law is
            wrapped). Used when offered (:mod:`ebms.capabilities`): ``log_prob_and_grad``
            (:class:`~ebms.capabilities.SupportsLogProbGrad`; else autograd), ``site_logits() -> (N, K)``
            (:class:`~ebms.capabilities.SupportsSiteLogits`, mixed into the target's closed-form
            conditionals) and ``log_partition()`` (:class:`~ebms.capabilities.SupportsLogPartition`:
            :math:`\log Z_0` of an unnormalised base; else 0).
            E.g. :class:`~ebms.distributions.IndependentBernoulli`,
            :class:`~ebms.distributions.IndependentCategorical`, :class:`~ebms.distributions.Gaussian`.
        kernel: any :class:`~ebms.samplers.Sampler`; it is run on the intermediate energy
            :math:`\beta E - (1-\beta)\log p_0`, an :class:`~ebms.energy.Energy` with an analytic
            ``energy_and_grad`` (so MALA/HMC/Gibbs-with-Gradients work) that carries the target's
            ``space`` (else the base's) and ``blocks``, and mixes the target's closed-form
            conditionals with the base's site logits when both are offered.
        steps_per_temperature: kernel steps per transition (>= 1).

    The first transition calls ``kernel.init`` (validating the states, with host syncs). If that
    returns a plain :class:`~ebms.samplers.ChainState`, later transitions build the state directly
    from the configured step size (no host sync); kernels with their own state type are initialised
    every time. Adapted step sizes are not carried from one temperature to the next.

    Cost per temperature: one target and one base evaluation for the weight, plus one (gradient
    kernels: with gradient) to start the kernel, plus the kernel's own steps.

    Example:
        >>> import torch
        >>> from ebms.energy import from_fn
        >>> from ebms.estimators import GeometricPath, ais, linear_betas
        >>> from ebms.distributions import Gaussian
        >>> from ebms.samplers import MALA
        >>> e = from_fn(lambda x: 0.5 * ((x - 1.0) ** 2).sum(-1))
        >>> path = GeometricPath(e, Gaussian(torch.zeros(2), std=2.0), MALA(step_size=0.5))
        >>> res = ais(path, 64, linear_betas(20), generator=torch.Generator().manual_seed(0))
        >>> res.estimate.settings["num_steps"]
        20
    """

    def __init__(self, energy: EnergyLike, base: NormalisedModel, kernel: Sampler, *,
                 steps_per_temperature: int = 1) -> None:
        if not callable(energy):
            raise TypeError(f"energy: expected a callable x -> (B,); got {type(energy).__name__}")
        base = as_distribution(base, "base")
        if not isinstance(kernel, Sampler):
            raise TypeError(f"kernel: expected an ebms.samplers.Sampler; got {type(kernel).__name__}")
        self.energy, self.base, self.kernel = energy, base, kernel
        self.steps_per_temperature = check_int(steps_per_temperature, "steps_per_temperature", minimum=1)
        self.space = energy.space if isinstance(energy, HasSpace) else None
        if self.space is None and isinstance(base, HasSpace):
            self.space = base.space
        self.base_site_logits: Tensor | None = base.site_logits() if isinstance(base, SupportsSiteLogits) else None
        self.base_log_partition = float(base.log_partition()) if isinstance(base, SupportsLogPartition) else 0.0
        # resolved once: the intermediate energies (one per temperature) reuse them
        self._base_log_prob_and_grad = (base.log_prob_and_grad if isinstance(base, SupportsLogProbGrad)
                                        else _autograd_log_prob_and_grad(base))
        self._target_capabilities = (
            energy.blocks if isinstance(energy, SupportsBlocks) else None,
            energy.conditional_logits if isinstance(energy, SupportsConditionalLogits) else None,
            energy.all_conditional_logits if isinstance(energy, SupportsAllConditionalLogits) else None,
        )
        blocks, cond, allc = self._target_capabilities
        mixes = self.base_site_logits is not None
        self._annealed = _annealed_class(blocks is not None, mixes and cond is not None, mixes and allc is not None)
        self._plain_state: bool | None = None
        self._kernel_target: _AnnealedEnergy | None = None
        self._steps: dict[tuple[torch.device, torch.dtype], Tensor] = {}

    def intermediate_energy(self, beta: float) -> Energy:
        r"""The energy :math:`\beta E - (1-\beta)\log p_0` of :math:`f_\beta` as an :class:`~ebms.energy.Energy`."""
        return self._annealed(self, float(beta))

    def sample_base(self, n: int, generator: torch.Generator | None = None) -> Tensor:
        """``n`` exact draws from the base."""
        return self.base.sample(n, generator=generator)

    def log_density(self, x: Tensor, beta: float) -> Tensor:
        r"""Unnormalised :math:`\log f_\beta(x)`, ``(B,)``."""
        return -self.intermediate_energy(beta)(x)

    def log_weight_increment(self, x: Tensor, beta_from: float, beta_to: float) -> Tensor:
        r""":math:`\log f_{to}(x) - \log f_{from}(x) = (\beta_{to} - \beta_{from})(-E(x) - \log p_0(x))`, float64 ``(B,)``."""
        e = evaluate(self.energy, x).double()
        lp = self.base.log_prob(x).double()
        return (beta_to - beta_from) * (-e - lp)

    def transition(self, x: Tensor, beta: float, generator: torch.Generator | None = None) -> Tensor:
        """``steps_per_temperature`` kernel steps on :math:`f_\\beta` from ``x``; returns the new states."""
        if self._kernel_target is None:
            self._kernel_target = self._annealed(self, float(beta))
        else:  # one energy object for every temperature: the kernel resolves its capabilities once
            self._kernel_target.beta = float(beta)
        target = self._kernel_target
        k = self.kernel
        if self._plain_state:
            key = (x.device, x.dtype)
            if key not in self._steps:
                self._steps[key] = torch.tensor(k.step_size, dtype=x.dtype, device=x.device)
            if k.uses_grad:
                e, g = target.energy_and_grad(x)
            else:
                with torch.no_grad():
                    e, g = evaluate(target, x), None
            state = ChainState(x=x, energy=e, grad=g, step_size=self._steps[key], t=0)
        else:
            state = k.init(target, x)
            if self._plain_state is None:  # a state the path may rebuild itself: one row per chain, no extras
                self._plain_state = type(state) is ChainState and state.x.shape[0] == x.shape[0]
        for _ in range(self.steps_per_temperature):
            state, _ = k.step(target, state, generator=generator)
        return k.target(state)  # the caller's chains (a tempering kernel also holds hotter replicas)


