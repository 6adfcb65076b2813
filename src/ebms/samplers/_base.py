"""The sampler contract shared by every Markov kernel in ``ebms``.

::

    state = sampler.init(energy, x0)                       # caches E(x0), grad E(x0)
    state, info = sampler.step(energy, state, generator=g)  # one transition
    x = sampler.sample(energy, x0, steps=100, generator=g)  # loop over step

* Samplers hold configuration only. Everything that changes from step to step
  (position, cached energy/gradient, step size, step counter) lives in the
  frozen :class:`ChainState`, so one sampler instance can serve many chains.
* One ``step`` costs one ``energy_and_grad`` call for gradient kernels (the
  current point's values are cached in the state).
* Randomness comes only from ``generator``; the same generator seed gives the
  same chain.
* ``info`` holds tensors (no host syncs inside ``step``). Non-finite proposals
  are rejected and flagged in ``info.nonfinite``.
* Step sizes that cannot move a chain are errors, not silence: :meth:`Sampler.init`
  rejects a step size that overflows to ``inf`` or underflows to ``0`` in the
  chains' dtype (``ValueError``), and :meth:`Sampler.iterate` (so ``sample``,
  ``run`` and the objectives that loop over it) warns once per call
  (``RuntimeWarning``) when, in some step, *every* chain's proposal was
  non-finite and rejected, e.g. because ``step_size * grad`` overflowed. It
  counts such steps with one tensor add per step and reads the count once,
  after the last step (no host sync per step).
"""

from __future__ import annotations

import abc
import dataclasses
import math
import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from ebms._checks import check_finite, check_int, check_positive, check_representable, check_tensor
from ebms.energy import EnergyLike, energy_and_grad, evaluate
from ebms.spaces import Space

__all__ = [
    "ChainResult",
    "ChainState",
    "Sampler",
    "StepInfo",
    "all_finite_on_cpu",
    "batch_where",
    "expand_to",
    "mh_accept",
]


@dataclass(frozen=True)
class ChainState:
    """State of ``B`` chains.

    Attributes:
        x: positions, ``(B, *event)``.
        energy: cached ``E(x)``, ``(B,)``.
        grad: cached :math:`\\nabla_x E(x)`, ``(B, *event)``; ``None`` for
            gradient-free kernels.
        step_size: step size, a 0-d tensor or one per chain ``(B,)``.
        t: number of steps taken so far.
    """

    x: Tensor
    energy: Tensor
    grad: Tensor | None
    step_size: Tensor
    t: int = 0

    def replace(self, **changes: Any) -> ChainState:
        """A copy with some fields changed (states are immutable)."""
        return dataclasses.replace(self, **changes)


@dataclass(frozen=True)
class StepInfo:
    """What one transition did, per chain.

    Attributes:
        accept_prob: MH acceptance probability ``(B,)``; 1 for unadjusted kernels.
        accepted: whether the proposal was taken, bool ``(B,)``.
        energy: energy after the step, ``(B,)``.
        nonfinite: proposal had a non-finite energy or gradient and was
            rejected, bool ``(B,)``.
    """

    accept_prob: Tensor
    accepted: Tensor
    energy: Tensor
    nonfinite: Tensor

    @property
    def acceptance_rate(self) -> Tensor:
        """Mean acceptance probability over chains, 0-d tensor."""
        return self.accept_prob.float().mean()

    @property
    def mean_energy(self) -> Tensor:
        """Mean energy over chains, 0-d tensor."""
        return self.energy.mean()


@dataclass(frozen=True)
class ChainResult:
    """Output of :meth:`Sampler.run`.

    Attributes:
        samples: kept positions ``(S, B, *event)`` (after burn-in, thinned).
        energies: their energies ``(S, B)``.
        acceptance: mean acceptance probability of every step ``(steps,)``.
        state: the final state (to continue the chain).
    """

    samples: Tensor
    energies: Tensor
    acceptance: Tensor
    state: ChainState


def expand_to(v: Tensor, x: Tensor) -> Tensor:
    """Reshape a 0-d or per-chain ``(B,)`` tensor to broadcast against ``x: (B, *event)``."""
    if v.dim() == 0:
        return v
    return v.reshape(v.shape[0], *([1] * (x.dim() - 1)))


def batch_where(mask: Tensor, a: Tensor, b: Tensor) -> Tensor:
    """Per-chain select: rows of ``a`` where ``mask: (B,)`` is true, else rows of ``b``.

    Always one ``torch.where`` and no host sync. Kernels that can skip the select
    altogether test that once per step (see :func:`all_finite_on_cpu`), rather than
    once per selected tensor here.
    """
    return torch.where(expand_to(mask, a), a, b)


def all_finite_on_cpu(*tensors: Tensor) -> bool:
    """``True`` iff every tensor lives on the CPU, we run eagerly, and every entry is finite.

    Decided by one scalar: a sum is finite exactly when no term is NaN or
    ``±Inf`` and nothing overflows, so a finite total proves every entry
    finite; a non-finite total (rare: a bad entry, or an overflowing sum of
    huge finite ones) answers ``False`` and the caller builds the exact
    per-row mask. One reduction per tensor and no full-size temporaries.
    Always ``False`` on accelerators and under ``torch.compile`` (reading
    the scalar would be a host sync or a graph break).
    """
    if torch.compiler.is_compiling() or any(t.device.type != "cpu" for t in tensors):
        return False
    return math.isfinite(sum(float(t.sum()) for t in tensors))


def mh_accept(log_ratio: Tensor, generator: torch.Generator | None) -> tuple[Tensor, Tensor]:
    """Metropolis–Hastings decision from ``log_ratio: (B,)``.

    Accept iff ``log U <= log_ratio``. A NaN ratio counts as a rejection.
    Returns ``(accepted: bool (B,), accept_prob: (B,))``.
    """
    log_ratio = torch.nan_to_num(log_ratio, nan=-float("inf"))
    accept_prob = torch.exp(log_ratio.clamp(max=0.0))
    u = torch.rand(log_ratio.shape, generator=generator, device=log_ratio.device, dtype=log_ratio.dtype)
    return u < accept_prob, accept_prob


def _check_start(e: Tensor, g: Tensor | None) -> None:
    """Chains cannot start where the energy is NaN or ``-inf`` or the gradient is not finite.

    ``+inf`` (zero density) is allowed: such a chain moves as soon as a proposal
    lands on finite energy. One host sync, at the public entry point only.
    """
    bad = torch.isnan(e) | (e == -math.inf)
    if g is not None:
        bad = bad | (torch.isfinite(e) & ~torch.isfinite(g).flatten(1).all(1))
    if bool(bad.any()):
        rows = bad.nonzero().flatten().tolist()
        shown = ", ".join(map(str, rows[:8])) + (", ..." if len(rows) > 8 else "")
        raise ValueError(
            f"energy(x0): expected a finite energy (or +inf) and a finite gradient at every start; "
            f"got NaN/-inf values in {len(rows)} chain(s), rows [{shown}]"
        )


class Sampler(abc.ABC):
    """Base class for Markov kernels. Subclasses implement :meth:`step`.

    Args:
        step_size: initial step size (> 0) stored in the state by :meth:`init`.
        space: optional :class:`~ebms.spaces.Space`; proposals are projected
            into it (e.g. clamped to a box) and ``x0`` is validated against it.
    """

    #: whether the kernel needs (and caches) the input gradient.
    uses_grad: bool = True

    def __init__(self, *, step_size: float = 0.1, space: Space | None = None) -> None:
        self.step_size = check_positive(step_size, "step_size")
        if space is not None and not isinstance(space, Space):
            raise TypeError(f"space: expected an ebms.spaces.Space or None; got {type(space).__name__}")
        self.space = space

    # -- contract ---------------------------------------------------------
    def init(self, energy: EnergyLike, x0: Tensor) -> ChainState:
        """Start chains at ``x0: (B, *event)``; evaluates and caches the energy (and gradient)."""
        check_tensor(x0, "x0", floating=True, min_dim=1)
        if self.space is not None:
            self.space.validate(x0, "x0")
        else:
            check_finite(x0, "x0")
        x = x0.detach()
        if self.uses_grad:
            e, g = energy_and_grad(energy, x)
        else:
            with torch.no_grad():
                e, g = evaluate(energy, x), None
        _check_start(e, g)
        check_representable(self.step_size, "step_size", x.dtype)
        step = torch.tensor(self.step_size, dtype=x.dtype, device=x.device)
        return ChainState(x=x, energy=e.detach(), grad=g, step_size=step, t=0)

    @abc.abstractmethod
    def step(
        self, energy: EnergyLike, state: ChainState, *, generator: torch.Generator | None = None
    ) -> tuple[ChainState, StepInfo]:
        """One transition; returns the new state and what happened."""

    # -- conveniences -----------------------------------------------------
    def iterate(
        self,
        energy: EnergyLike,
        state: ChainState,
        steps: int,
        *,
        generator: torch.Generator | None = None,
        progress: bool = False,
    ) -> Iterator[tuple[ChainState, StepInfo]]:
        """Yield ``(state, info)`` after each of ``steps`` transitions."""
        check_int(steps, "steps", minimum=0)
        it = range(steps)
        if progress:
            from tqdm.auto import tqdm

            it = tqdm(it, desc=type(self).__name__, leave=False)
        stuck: Tensor | None = None  # steps in which no chain could take its proposal
        for _ in it:
            state, info = self.step(energy, state, generator=generator)
            if info.nonfinite.numel():
                all_bad = info.nonfinite.all()
                stuck = all_bad.long() if stuck is None else stuck + all_bad
            yield state, info
        if stuck is not None and (n := int(stuck)):
            warnings.warn(self._stuck_message(n, steps), RuntimeWarning, stacklevel=2)

    def _stuck_message(self, n: int, steps: int) -> str:
        """What :meth:`iterate` says when in ``n`` of ``steps`` steps every proposal was non-finite."""
        return (
            f"{type(self).__name__}: in {n} of {steps} step(s) every chain's proposal had a non-finite "
            f"energy or gradient and was rejected, so no chain moved in those steps; {self._stuck_hint()} "
            "(info.nonfinite flags each chain)"
        )

    def _stuck_hint(self) -> str:
        """The likely cause named by :meth:`_stuck_message` (kernels without a step size override it)."""
        return (
            f"the step size ({self.step_size:g}) is probably too large for this energy "
            "(step_size * grad overflows): lower step_size"
        )

    def target_rows(self, state: ChainState) -> slice:
        """Rows of ``state`` that are the caller's chains: all of them, except for wrappers that
        stack extra chains into the state (parallel tempering's hotter replicas)."""
        return slice(None)

    def target(self, state: ChainState) -> Tensor:
        """The caller's chains in ``state``, ``(B, *event)``."""
        return state.x[self.target_rows(state)]

    def sample(
        self,
        energy: EnergyLike,
        x0: Tensor,
        steps: int,
        *,
        generator: torch.Generator | None = None,
        progress: bool = False,
    ) -> Tensor:
        """Run ``steps`` transitions from ``x0`` and return the final positions ``(B, *event)``."""
        state = self.init(energy, x0)
        for state, _ in self.iterate(energy, state, steps, generator=generator, progress=progress):  # noqa: B007, B020
            pass
        return self.target(state)

    def run(
        self,
        energy: EnergyLike,
        x0: Tensor | ChainState,
        steps: int,
        *,
        generator: torch.Generator | None = None,
        burn_in: int = 0,
        thin: int = 1,
        progress: bool = False,
    ) -> ChainResult:
        """Run chains and keep the trace: every ``thin``-th state after ``burn_in`` steps.

        Only the caller's chains (:meth:`target_rows`) are traced; ``state`` is the full final state.
        """
        check_int(burn_in, "burn_in", minimum=0)
        check_int(thin, "thin", minimum=1)
        state = x0 if isinstance(x0, ChainState) else self.init(energy, x0)
        rows = self.target_rows(state)
        xs, es, acc = [], [], []
        for i, (state, info) in enumerate(  # noqa: B020 (the loop advances the chain)
            self.iterate(energy, state, steps, generator=generator, progress=progress)
        ):
            acc.append(info.accept_prob[rows].float().mean())
            if i >= burn_in and (i - burn_in) % thin == 0:
                xs.append(state.x[rows])
                es.append(state.energy[rows])
        if not xs:
            raise ValueError(f"steps: expected more than burn_in={burn_in} steps; got steps={steps}")
        return ChainResult(
            samples=torch.stack(xs),
            energies=torch.stack(es),
            acceptance=torch.stack(acc),
            state=state,
        )
