"""The sampler contract shared by every Markov kernel in ``ebms``.

::

    state = sampler.init(energy, x0)                       # caches E(x0), grad E(x0)
    state, info = sampler.step(energy, state, generator=g)  # one transition
    x = sampler.sample(energy, x0, steps=100, generator=g)  # loop over step

* States are float tensors ``(B, *event)`` for every kernel; the discrete kernels also take
  integer tensors (category indices, :class:`~ebms.spaces.CategoricalIndices`) and, where
  :attr:`Sampler.accepts_sequences` says so (Gibbs, Metropolis–Hastings), token sequences
  (:class:`~ebms.sequences.Sequences`, with energies ``E(Sequences) -> (B,)``). Gradient
  kernels (Langevin, MALA, HMC, Gibbs-with-Gradients) need floating point.
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
* The chains and the energy share one floating dtype: a float tensor ``x0`` whose dtype differs
  from that of the energy's parameters (an ``nn.Module``, or a function or bound method of one)
  is a ``TypeError`` naming ``x0`` and both dtypes, raised by :meth:`Sampler.init` before the
  energy runs. No kernel casts the chains: a silent cast would change the precision the caller
  asked for, and a float64 chain on a float32 model would otherwise end in a matmul traceback.
  Energies without parameters (plain functions) are not checked.
"""

from __future__ import annotations

import abc
import dataclasses
import math
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, ClassVar, Generic, TypeVar, overload

import torch
from torch import Tensor, nn

from ebms._checks import (
    check_energy_output,
    check_finite,
    check_int,
    check_positive,
    check_representable,
    check_tensor,
)
from ebms._precision import check_precision
from ebms._progress import progress_bar
from ebms.energy import EnergyLike, FunctionEnergy, energy_and_grad, evaluate, mixed_precision
from ebms.sequences import Sequences
from ebms.spaces import Space

__all__ = [
    "ChainResult",
    "ChainState",
    "Sampler",
    "StepInfo",
    "all_finite_on_cpu",
    "batch_where",
    "check_chain_dtype",
    "energy_dtype",
    "evaluate_states",
    "expand_to",
    "mh_accept",
    "num_chains",
]

#: What a chain position is: a tensor ``(B, *event)`` (float, or integer for index-form discrete
#: states) or a batch of token sequences.
X = TypeVar("X", Tensor, Sequences)


@dataclass(frozen=True)
class ChainState(Generic[X]):
    """State of ``B`` chains.

    Attributes:
        x: positions: a float tensor ``(B, *event)``; an integer tensor ``(B, *event)`` (category
            indices) for discrete kernels; or :class:`~ebms.sequences.Sequences` (``tokens (B, T)``,
            ``lengths (B,)``, int64, never one-hot) for the kernels that update token positions.
        energy: cached ``E(x)``, ``(B,)``.
        grad: cached :math:`\\nabla_x E(x)`, ``(B, *event)``; ``None`` for
            gradient-free kernels.
        step_size: step size, a 0-d tensor or one per chain ``(B,)`` (the dtype of float
            states, else that of the energy).
        t: number of steps taken so far.
    """

    x: X
    energy: Tensor
    grad: Tensor | None
    step_size: Tensor
    t: int = 0

    def replace(self, **changes: Any) -> ChainState[X]:
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
class ChainResult(Generic[X]):
    """Output of :meth:`Sampler.run`.

    Attributes:
        samples: kept positions ``(S, B, *event)`` (after burn-in, thinned); for token states one
            :class:`~ebms.sequences.Sequences` of ``S*B`` rows, row ``s*B + b`` being chain ``b``'s
            ``s``-th kept state.
        energies: their energies ``(S, B)``.
        acceptance: mean acceptance probability of every step ``(steps,)``.
        state: the final state (to continue the chain).
    """

    samples: X
    energies: Tensor
    acceptance: Tensor
    state: ChainState[X]


def num_chains(x: Tensor | Sequences) -> int:
    """``B``, the number of chains in a state ``x`` (a tensor ``(B, *event)`` or ``Sequences``)."""
    return x.batch_size if isinstance(x, Sequences) else x.shape[0]


def evaluate_states(energy: Callable[..., Tensor], x: Tensor | Sequences) -> Tensor:
    """``energy(x)`` for a tensor or a ``Sequences`` batch, output checked to be ``(B,)`` (no host sync)."""
    if isinstance(x, Sequences):
        return check_energy_output(energy(x), x.batch_size)
    return evaluate(energy, x)


def _module_of(energy: Any) -> nn.Module | None:
    """The module whose parameters an energy computes with: the energy itself, the module a
    :func:`~ebms.energy.from_fn` wraps, or the owner of a bound method (``model.energy``)."""
    if isinstance(energy, FunctionEnergy) and not isinstance(energy.fn, nn.Module):
        energy = energy.fn
    if isinstance(energy, nn.Module):
        return energy
    owner = getattr(energy, "__self__", None)
    return owner if isinstance(owner, nn.Module) else None


def energy_dtype(energy: Any) -> torch.dtype | None:
    """The floating dtype an energy computes in: that of its floating parameters (of its floating
    buffers when it has no parameters), when they all share one; ``None`` when the energy has no
    module, no floating tensors, or several dtypes (then nothing can be said)."""
    module = _module_of(energy)
    if module is None:
        return None
    for tensors in (module.parameters(), module.buffers()):
        dtypes = {t.dtype for t in tensors if t.is_floating_point()}
        if dtypes:
            return dtypes.pop() if len(dtypes) == 1 else None
    return None


def check_chain_dtype(energy: Any, x: Tensor, name: str = "x0") -> None:
    """A floating ``x`` has the dtype of the energy's parameters (:func:`energy_dtype`), else a
    ``TypeError`` naming ``name``, both dtypes and the two ways to agree. Integer states (category
    indices) and energies of unknown dtype pass. Metadata only: no host sync."""
    if not x.is_floating_point():
        return
    want = energy_dtype(energy)
    if want is not None and x.dtype != want:
        module = _module_of(energy)
        raise TypeError(
            f"{name}: expected dtype {want}, the dtype of the energy's parameters ({type(module).__name__}); "
            f"got {x.dtype}; convert the chains ({name}.to({want})) or the model (model.to({x.dtype}))"
        )


def expand_to(v: Tensor, x: Tensor) -> Tensor:
    """Reshape a 0-d or per-chain ``(B,)`` tensor to broadcast against ``x: (B, *event)``."""
    if v.dim() == 0:
        return v
    return v.reshape(v.shape[0], *([1] * (x.dim() - 1)))


@overload
def batch_where(mask: Tensor, a: Tensor, b: Tensor) -> Tensor: ...
@overload
def batch_where(mask: Tensor, a: Sequences, b: Sequences) -> Sequences: ...
def batch_where(mask: Tensor, a: Tensor | Sequences, b: Tensor | Sequences) -> Tensor | Sequences:
    """Per-chain select: rows of ``a`` where ``mask: (B,)`` is true, else rows of ``b``.

    Always one ``torch.where`` (two for ``Sequences``: tokens and lengths, which must have the same
    padded width) and no host sync. Kernels that can skip the select altogether test that once
    per step (see :func:`all_finite_on_cpu`), rather than once per selected tensor here.
    """
    if isinstance(a, Sequences) and isinstance(b, Sequences):
        if a.tokens.shape != b.tokens.shape:
            raise ValueError(
                f"batch_where: expected Sequences of the same shape; got tokens {tuple(a.tokens.shape)} "
                f"and {tuple(b.tokens.shape)}"
            )
        tokens = torch.where(mask[:, None], a.tokens, b.tokens)
        return Sequences(tokens, torch.where(mask, a.lengths, b.lengths), validate=False)
    assert isinstance(a, Tensor) and isinstance(b, Tensor), "batch_where: a and b are both tensors or both Sequences"
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


def _at_precision(energy: EnergyLike, x0: Any, precision: str) -> EnergyLike:
    """``energy`` evaluated at ``precision`` (:func:`ebms.energy.mixed_precision`); ``"fp32"``: unchanged."""
    if check_precision(precision) == "fp32":
        return energy
    if not (isinstance(x0, Tensor) and x0.is_floating_point()):
        raise ValueError(f"precision: {precision!r} evaluates energies of float tensor states; these chains hold "
                         f"{type(x0).__name__ if not isinstance(x0, Tensor) else x0.dtype} states: use precision='fp32'")
    return mixed_precision(energy, precision)


class Sampler(abc.ABC):
    """Base class for Markov kernels. Subclasses implement :meth:`step`.

    Args:
        step_size: initial step size (> 0) stored in the state by :meth:`init`.
        space: optional :class:`~ebms.spaces.Space`; proposals are projected
            into it (e.g. clamped to a box) and ``x0`` is validated against it.
    """

    #: whether the kernel needs (and caches) the input gradient.
    uses_grad: bool = True
    #: whether the kernel takes token-sequence states (:class:`~ebms.sequences.Sequences`).
    accepts_sequences: ClassVar[bool] = False
    #: acceptance rate that step-size adaptation tunes for by default (``None``: no default;
    #: Metropolis-adjusted kernels set it, e.g. MALA 0.574, HMC 0.65).
    default_target_accept: float | None = None

    def __init__(self, *, step_size: float = 0.1, space: Space | None = None) -> None:
        self.step_size = check_positive(step_size, "step_size")
        if space is not None and not isinstance(space, Space):
            raise TypeError(f"space: expected an ebms.spaces.Space or None; got {type(space).__name__}")
        self.space = space

    # -- contract ---------------------------------------------------------
    def init(self, energy: EnergyLike, x0: Any) -> ChainState:
        """Start chains at ``x0``; evaluates and caches the energy (and gradient).

        ``x0`` is a tensor ``(B, *event)`` (floating point for gradient kernels; integer category
        indices also for gradient-free ones) or, for kernels with :attr:`accepts_sequences`, a
        :class:`~ebms.sequences.Sequences` batch. The step size is stored in the dtype of float
        states, else in that of the energy.
        """
        x = self._check_x0(energy, x0)
        if self.uses_grad:
            assert isinstance(x, Tensor), "_check_x0 gives gradient kernels tensors only"
            e, g = energy_and_grad(energy, x)
        else:
            with torch.no_grad():
                e, g = evaluate_states(energy, x), None
        _check_start(e, g)
        dtype = x.dtype if isinstance(x, Tensor) and x.is_floating_point() else e.dtype
        check_representable(self.step_size, "step_size", dtype)
        step = torch.tensor(self.step_size, dtype=dtype, device=x.device)
        return ChainState(x=x, energy=e.detach(), grad=g, step_size=step, t=0)

    def _check_x0(self, energy: EnergyLike, x0: Any) -> Tensor | Sequences:
        """Validate the chains' starts against the kernel and its space; returns them detached.

        Subclasses that take more kinds of state (discrete kernels: token sequences) extend it.

        Raises:
            TypeError: a ``Sequences`` batch (this kernel takes tensors), a non-float tensor for a
                gradient kernel, a bool or complex tensor, or a float tensor whose dtype is not the
                energy's (:func:`check_chain_dtype`).
            ValueError: from the space's ``validate``, or non-finite entries when there is no space.
        """
        name = type(self).__name__
        if isinstance(x0, Sequences):
            raise TypeError(
                f"x0: {name} works on tensor states (B, *event); got Sequences "
                "(token sequences: use Gibbs or MetropolisHastings with a TokenSequences space)"
            )
        check_tensor(x0, "x0", min_dim=1)
        if self.uses_grad and not x0.is_floating_point():
            raise TypeError(
                f"x0: expected a floating-point tensor; got dtype {x0.dtype} ({name} follows the energy's "
                "gradient in x: integer states need a discrete kernel such as Gibbs or MetropolisHastings)"
            )
        if x0.dtype == torch.bool or x0.is_complex():
            raise TypeError(f"x0: expected a floating-point or integer tensor; got dtype {x0.dtype}")
        check_chain_dtype(energy, x0, "x0")
        if self.space is not None:
            self.space.validate(x0, "x0")
        else:
            check_finite(x0, "x0")
        return x0.detach()

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
        it: Any = range(steps)
        if progress:
            it = progress_bar(it, desc=type(self).__name__, leave=False)
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

    def target(self, state: ChainState[X]) -> X:
        """The caller's chains in ``state``, ``(B, *event)`` (or ``Sequences``)."""
        return state.x[self.target_rows(state)]

    @overload
    def sample(
        self, energy: EnergyLike, x0: Tensor, steps: int, *, generator: torch.Generator | None = ..., progress: bool = ...,
        precision: str = ...
    ) -> Tensor: ...
    @overload
    def sample(
        self, energy: EnergyLike, x0: Sequences, steps: int, *, generator: torch.Generator | None = ...,
        progress: bool = ..., precision: str = ...
    ) -> Sequences: ...
    def sample(
        self,
        energy: EnergyLike,
        x0: Tensor | Sequences,
        steps: int,
        *,
        generator: torch.Generator | None = None,
        progress: bool = False,
        precision: str = "fp32",
    ) -> Tensor | Sequences:
        """Run ``steps`` transitions from ``x0`` and return the final positions (same kind as ``x0``).

        ``x0``: a tensor ``(B, *event)`` or, for kernels that take them, ``Sequences``.
        ``precision="bf16"`` evaluates the energy with bfloat16 products
        (:func:`ebms.energy.mixed_precision`; float tensor states only): the chains, energies
        and gradients stay in ``x0``'s dtype. To compile the energy, pass
        :func:`ebms.energy.compiled` ``(energy)``, made once and reused across calls.
        """
        energy = _at_precision(energy, x0, precision)
        state = self.init(energy, x0)
        for state, _ in self.iterate(energy, state, steps, generator=generator, progress=progress):  # noqa: B007, B020
            pass
        return self.target(state)

    def run(
        self,
        energy: EnergyLike,
        x0: Tensor | Sequences | ChainState,
        steps: int,
        *,
        generator: torch.Generator | None = None,
        burn_in: int = 0,
        thin: int = 1,
        progress: bool = False,
        precision: str = "fp32",
    ) -> ChainResult:
        """Run chains and keep the trace: every ``thin``-th state after ``burn_in`` steps.

        Only the caller's chains (:meth:`target_rows`) are traced; ``state`` is the full final state.
        ``precision``: as in :meth:`sample`.
        """
        energy = _at_precision(energy, x0.x if isinstance(x0, ChainState) else x0, precision)
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
            samples=Sequences.cat(xs) if isinstance(xs[0], Sequences) else torch.stack(xs),
            energies=torch.stack(es),
            acceptance=torch.stack(acc),
            state=state,
        )
