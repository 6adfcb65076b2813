r"""Parallel tempering (replica exchange) around any kernel.

``R`` replicas of each of ``B`` chains run at inverse temperatures
:math:`1 = \beta_0 > \beta_1 > \dots > \beta_{R-1} > 0`; replica ``r`` targets
:math:`\pi_r(x) \propto \exp(-\beta_r E(x))`. One step is

1. one step of the inner kernel on every replica, applied to the tempered energy :math:`\beta_r E`;
2. swap proposals between adjacent temperatures ``(r, r+1)``, accepted with probability

   .. math::  \min\Big\{1,\; \exp\big((\beta_r - \beta_{r+1})\,(E(x_r) - E(x_{r+1}))\big)\Big\}.

Both parts leave the product :math:`\prod_r \pi_r` invariant, so the ``β = 1`` replica samples
:math:`\exp(-E)`; hot replicas cross energy barriers and swaps carry their states down.

Swap schedules: ``"even-odd"`` proposes all pairs with ``r`` even on even steps and ``r`` odd on odd
steps (the deterministic even-odd scheme, which moves states through the ladder fastest);
``"random-pair"`` proposes one uniformly chosen adjacent pair per chain per step.

**State layout.** The :class:`~ebms.samplers.ChainState` contract is kept by stacking replicas into
the batch, replica-major: row ``r*B + b`` is replica ``r`` of chain ``b``. ``state.energy`` and
``state.grad`` hold the *tempered* values :math:`\beta_r E` and :math:`\beta_r \nabla E` (exactly what
the inner kernel caches and expects); at ``β_0 = 1`` they equal the untempered ones.
``state.step_size`` is per row ``(R*B,)`` and belongs to the temperature slot, not to the state that
moves through it, so hot rows may carry larger steps for continuous kernels.

**How tempering reaches the kernel.** The kernel is evaluated on a wrapper energy that multiplies the
energy, gradient and single-site conditional logits by each row's :math:`\beta` (logits of
:math:`p_\beta(x_i = k\mid\cdot)` are :math:`\beta` times the untempered ones). Discrete kernels see it
through ``conditional_logits``/``all_conditional_logits``, which the wrapper always provides, so
Gibbs, block Gibbs (colouring mode), Gibbs-with-Gradients, Metropolis–Hastings, ULA and MALA all work.
Block Gibbs in bipartite mode (``sample_hidden``/``sample_visible``) draws untempered conditionals and
is refused.

References: Swendsen & Wang (1986), "Replica Monte Carlo simulation of spin glasses", PRL 57;
Geyer (1991), "Markov chain Monte Carlo maximum likelihood"; Hukushima & Nemoto (1996), "Exchange
Monte Carlo method and application to spin glass simulations", JPSJ 65; Okabe et al. (2001),
"Replica-exchange Monte Carlo method for the isobaric-isothermal ensemble" (even-odd swaps).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import cast

import torch
from torch import Tensor

from ebms._checks import check_finite, check_int, check_positive, check_tensor
from ebms.capabilities import HasSpace, SupportsBlocks, supports
from ebms.energy import EnergyLike, energy_and_grad, evaluate
from ebms.samplers._base import (
    ChainState,
    Sampler,
    StepInfo,
    _check_start,
    check_chain_dtype,
    expand_to,
    mh_accept,
)
from ebms.samplers._discrete import DiscreteSampler, all_site_logits, site_logits
from ebms.samplers.block_gibbs import BlockGibbs
from ebms.spaces import DiscreteSpace, Space, TokenSequences

__all__ = ["ParallelTempering", "TemperingInfo"]

_SWAPS = ("even-odd", "random-pair")


@dataclass(frozen=True)
class TemperingInfo(StepInfo):
    """What one parallel-tempering step did.

    ``accept_prob``, ``accepted``, ``energy`` (tempered) and ``nonfinite`` are per row ``(R*B,)`` and
    describe the inner kernel's move (``energy`` is after the swaps).

    Attributes:
        swap_rate: ``(R-1,)`` mean over chains of the swap acceptance probability of each adjacent
            pair ``(r, r+1)``, computed for every pair at the post-kernel states whether or not the
            pair was proposed this step (a lower-variance estimate of the swap rate).
        swapped: ``(R-1, B)`` bool, which swaps happened.
        kernel_info: the inner kernel's own info (e.g. an ``HMCInfo``), rows as in the state.
    """

    swap_rate: Tensor
    swapped: Tensor
    kernel_info: StepInfo


class _RowTempered:
    """``β_row · E`` for a replica-major batch of ``R*B`` rows (``betas: (R*B,)``).

    Offers, as methods of the class (so kernels resolve them once per class, not per step), the
    energy, ``energy_and_grad``, ``conditional_logits`` and ``all_conditional_logits`` (from the
    base energy's own methods when offered, else from energy differences) and the space;
    :class:`_RowTemperedBlocks` adds ``blocks()`` for a base that offers it. Evaluating any other
    number of rows is an error, since the row's replica (and so its ``β``) would be unknown.
    """

    # built afresh every step: slots make the class decide what it offers (ebms.capabilities.supports)
    __slots__ = ("base", "betas", "space")

    def __init__(self, energy: EnergyLike, betas: Tensor, space: Space | TokenSequences | None) -> None:
        self.base, self.betas = energy, betas
        self.space: Space | TokenSequences | None = space

    def _check_rows(self, x: Tensor) -> None:
        if x.shape[0] != self.betas.shape[0]:
            raise ValueError(
                f"ParallelTempering: the tempered energy evaluates exactly the {self.betas.shape[0]} replica rows; "
                f"got a batch of {x.shape[0]} (a kernel evaluating extra rows, e.g. site variants, must use "
                "energy.conditional_logits / all_conditional_logits instead)"
            )

    def __call__(self, x: Tensor) -> Tensor:
        self._check_rows(x)
        return self.betas * evaluate(self.base, x)

    def energy_and_grad(self, x: Tensor) -> tuple[Tensor, Tensor]:
        self._check_rows(x)
        e, g = energy_and_grad(self.base, x)
        return self.betas * e, expand_to(self.betas, g) * g

    def _space(self) -> DiscreteSpace:
        if not isinstance(self.space, DiscreteSpace):
            raise TypeError(
                "space: single-site conditionals need a DiscreteSpace passed to ParallelTempering, to the kernel, "
                f"or set as energy.space; got {type(self.space).__name__}"
            )
        return self.space

    def conditional_logits(self, x: Tensor, site: int | Tensor) -> Tensor:
        self._check_rows(x)
        return self.betas[:, None] * site_logits(self.base, self._space(), x, site)

    def all_conditional_logits(self, x: Tensor) -> Tensor:
        self._check_rows(x)
        return self.betas[:, None, None] * all_site_logits(self.base, self._space(), x)


class _RowTemperedBlocks(_RowTempered):
    """:class:`_RowTempered` of a base that offers :class:`~ebms.capabilities.SupportsBlocks` (tempering keeps them)."""

    __slots__ = ()

    def blocks(self) -> Sequence[Tensor]:
        return cast(SupportsBlocks, self.base).blocks()


def _check_betas(betas: Sequence[float]) -> list[float]:
    try:
        values = [float(b) for b in betas]
    except (TypeError, ValueError):
        raise TypeError(f"betas: expected a sequence of floats; got {betas!r}") from None
    if len(values) < 2:
        raise ValueError(f"betas: expected at least 2 inverse temperatures; got {len(values)}")
    if values[0] != 1.0:
        raise ValueError(f"betas: expected betas[0] == 1 (the target); got {values[0]}")
    if not all(math.isfinite(b) and b > 0 for b in values):
        raise ValueError(f"betas: expected finite positive values; got {values}")
    if any(b >= a for a, b in zip(values, values[1:])):
        raise ValueError(f"betas: expected strictly decreasing values; got {values}")
    return values


class ParallelTempering(Sampler):
    r"""Replica exchange around an inner kernel (module docstring: update, state layout).

    Args:
        kernel: any :class:`~ebms.samplers.Sampler` (discrete or continuous).
        betas: inverse temperatures, ``betas[0] == 1`` (the target), strictly decreasing, positive.
            ``None`` means a geometric ladder of ``n_replicas`` values from 1 to ``min_beta``.
        n_replicas: ``R >= 2`` when ``betas`` is ``None`` (default 4); must equal ``len(betas)`` if both given.
        min_beta: smallest inverse temperature of the default ladder, in ``(0, 1)``.
        swap: ``"even-odd"`` (default) or ``"random-pair"``.
        space: optional space; ``x0`` is validated against it and, if discrete, the tempered energy
            exposes it to the kernel (else the kernel's own space or ``energy.space`` is used).

    Cost per step: one inner-kernel step on ``R*B`` rows, plus ``O(R*B)`` work and one gather of the
    states for the swaps. :meth:`sample` and :meth:`run` return the ``β = 1`` replica only;
    :meth:`target` extracts it from a state and :meth:`replicas` views all of them.

    Example:
        >>> import torch
        >>> from ebms.energy import from_fn
        >>> from ebms.spaces import Spins
        >>> from ebms.samplers.gwg import GibbsWithGradients
        >>> from ebms.samplers.tempering import ParallelTempering
        >>> e = from_fn(lambda x: -0.3 * x.sum(-1) ** 2)
        >>> pt = ParallelTempering(GibbsWithGradients(space=Spins(8)), betas=[1.0, 0.6, 0.3])
        >>> g = torch.Generator().manual_seed(0)
        >>> pt.sample(e, Spins(8).random(5, generator=g), steps=10, generator=g).shape
        torch.Size([5, 8])
    """

    def __init__(
        self,
        kernel: Sampler,
        betas: Sequence[float] | None = None,
        *,
        n_replicas: int | None = None,
        min_beta: float = 0.1,
        swap: str = "even-odd",
        space: Space | None = None,
    ) -> None:
        if not isinstance(kernel, Sampler):
            raise TypeError(f"kernel: expected an ebms.samplers.Sampler; got {type(kernel).__name__}")
        if swap not in _SWAPS:
            raise ValueError(f"swap: expected one of {_SWAPS}; got {swap!r}")
        if betas is None:
            R = 4 if n_replicas is None else check_int(n_replicas, "n_replicas", minimum=2)
            check_positive(min_beta, "min_beta")
            if not min_beta < 1.0:
                raise ValueError(f"min_beta: expected a value in (0, 1); got {min_beta}")
            betas = [min_beta ** (r / (R - 1)) for r in range(R)]
        values = _check_betas(betas)
        if n_replicas is not None and n_replicas != len(values):
            raise ValueError(f"n_replicas: expected len(betas) = {len(values)}; got {n_replicas}")
        super().__init__(step_size=kernel.step_size, space=space)
        self.kernel, self.betas, self.swap = kernel, tuple(values), swap
        self.uses_grad = kernel.uses_grad

    @property
    def n_replicas(self) -> int:
        return len(self.betas)

    # -- layout helpers ---------------------------------------------------------
    def _batch(self, state: ChainState) -> int:
        n, R = state.x.shape[0], self.n_replicas
        if n % R:
            raise ValueError(f"state.x: expected R*B rows with R = {R} replicas; got {n} rows")
        return n // R

    def target_rows(self, state: ChainState) -> slice:
        """The ``β = 1`` replica's rows (the first ``B``): what ``target``, ``sample`` and ``run`` return."""
        return slice(0, self._batch(state))

    def replicas(self, state: ChainState) -> Tensor:
        """All replicas, ``(R, B, *event)`` (index 0 is the target)."""
        return state.x.reshape(self.n_replicas, self._batch(state), *state.x.shape[1:])

    def _tempered(self, energy: EnergyLike, B: int, x: Tensor) -> _RowTempered:
        if isinstance(self.kernel, BlockGibbs) and BlockGibbs.is_bipartite(energy):
            raise TypeError(
                "kernel: block Gibbs in bipartite mode (energy.sample_hidden/sample_visible) draws untempered "
                "conditionals and cannot be tempered; use GibbsWithGradients, a Metropolis kernel, or a "
                "single-site Gibbs kernel on the (free) energy instead"
            )
        betas = torch.tensor(self.betas, dtype=x.dtype, device=x.device).repeat_interleave(B)
        space: Space | TokenSequences | None = self.space
        kernel_space = self.kernel.discrete_space if isinstance(self.kernel, DiscreteSampler) else None
        for candidate in (kernel_space, energy.space if supports(energy, HasSpace) else None):
            if not isinstance(space, DiscreteSpace) and candidate is not None:
                space = candidate
        wrapper = _RowTemperedBlocks if supports(energy, SupportsBlocks) else _RowTempered
        return wrapper(energy, betas, space)

    # -- contract -----------------------------------------------------------------
    def init(self, energy: EnergyLike, x0: Tensor) -> ChainState:
        """Start every replica of chain ``b`` at ``x0[b]``; ``x0: (B, *event)``, state rows ``R*B``."""
        check_tensor(x0, "x0", floating=True, min_dim=1)
        check_chain_dtype(energy, x0, "x0")
        if self.space is not None:
            self.space.validate(x0, "x0")
        else:
            check_finite(x0, "x0")
        # errors name the caller's chains (rows of x0), not the stacked replica rows
        if self.kernel.uses_grad:
            e0, g0 = energy_and_grad(energy, x0.detach())
        else:
            with torch.no_grad():
                e0, g0 = evaluate(energy, x0.detach()), None
        _check_start(e0, g0)
        B = x0.shape[0]
        x = x0.detach().repeat(self.n_replicas, *([1] * (x0.dim() - 1)))
        state = self.kernel.init(self._tempered(energy, B, x), x)
        return state.replace(step_size=state.step_size.expand(x.shape[0]).clone())

    def step(
        self, energy: EnergyLike, state: ChainState, *, generator: torch.Generator | None = None
    ) -> tuple[ChainState, TemperingInfo]:
        """One kernel step on every replica, then one round of swaps; returns ``(state, info)``."""
        R, B = self.n_replicas, self._batch(state)
        tempered = self._tempered(energy, B, state.x)
        moved, kinfo = self.kernel.step(tempered, state, generator=generator)
        beta_rows = tempered.betas
        betas = beta_rows[::B]  # (R,)
        u = (moved.energy / beta_rows).reshape(R, B)  # untempered energies
        log_ratio = (betas[:-1] - betas[1:])[:, None] * (u[:-1] - u[1:])  # (R-1, B)
        ok, prob = mh_accept(log_ratio.reshape(-1), generator)
        ok, prob = ok.reshape(R - 1, B), prob.reshape(R - 1, B)
        pairs = torch.arange(R - 1, device=u.device)[:, None]
        if self.swap == "even-odd":
            active = (pairs % 2 == state.t % 2).expand(R - 1, B)
        else:
            chosen = torch.randint(R - 1, (B,), generator=generator, device=u.device)
            active = pairs == chosen[None, :]
        swapped = ok & active
        s = swapped.long()
        src = torch.arange(R, device=u.device)[:, None].expand(R, B).clone()  # row (r, b) takes replica src
        src[:-1] += s
        src[1:] -= s
        src = (src * B + torch.arange(B, device=u.device)).reshape(-1)

        x = moved.x.index_select(0, src)
        e = u.reshape(-1).index_select(0, src) * beta_rows
        g = moved.grad
        if g is not None:
            g = g.index_select(0, src) * expand_to(beta_rows / beta_rows.index_select(0, src), g)
        info = TemperingInfo(
            accept_prob=kinfo.accept_prob,
            accepted=kinfo.accepted,
            energy=e,
            nonfinite=kinfo.nonfinite,
            swap_rate=prob.mean(1),
            swapped=swapped,
            kernel_info=kinfo,
        )
        return moved.replace(x=x, energy=e, grad=g), info

    def _stuck_hint(self) -> str:
        return self.kernel._stuck_hint()

    def __repr__(self) -> str:
        return f"ParallelTempering({self.kernel!r}, betas={list(self.betas)}, swap={self.swap!r})"
