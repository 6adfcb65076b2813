r"""Hamiltonian Monte Carlo (HMC) with a pluggable integrator (leapfrog by default).

With momentum :math:`p \sim \mathcal N(0, M)` (``M`` diagonal) the Hamiltonian is

.. math::  H(x, p) = E(x) + \tfrac12\, p^\top M^{-1} p .

One step draws a fresh momentum, integrates Hamilton's equations for ``L``
leapfrog steps of size ``ε`` (the inner half-steps merged, so the gradient of
every position is used once),

.. math::  p \leftarrow p - \tfrac{\epsilon}{2}\nabla E(x);\quad
           \big[x \leftarrow x + \epsilon M^{-1} p;\;
           p \leftarrow p - \epsilon\nabla E(x)\big]_{L-1\ \text{times}};\quad
           x \leftarrow x + \epsilon M^{-1} p;\; p \leftarrow p - \tfrac{\epsilon}{2}\nabla E(x),

and accepts the end point with probability :math:`\min\{1, \exp(H_{old} - H_{new})\}`.
Leapfrog is volume preserving and reversible, so the chain is exact for
``exp(-E)`` (Duane et al., 1987; Neal, 2011). The acceptance rate to tune for is
about 0.65 (Neal, 2011, §4.4; Beskos et al., 2013 derive 0.651 as ``D → ∞``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import NamedTuple

import torch
from torch import Tensor

from ebms._checks import check_finite, check_int, check_positive, check_shape
from ebms.energy import EnergyLike, energy_and_grad
from ebms.samplers._base import ChainState, Sampler, StepInfo, batch_where, expand_to, mh_accept
from ebms.samplers._util import check_grad_state, finite_rows, in_space, sq_norm
from ebms.spaces import Space

__all__ = ["HMC", "HMCInfo", "Trajectory", "leapfrog"]


class Trajectory(NamedTuple):
    """End point of an integrated trajectory (all ``(B, ...)``).

    Attributes:
        x: final positions ``(B, *event)``.
        momentum: final momenta ``(B, *event)``.
        energy: ``E(x)`` at the final positions ``(B,)``.
        grad: :math:`\\nabla E(x)` at the final positions ``(B, *event)``.
        finite: every energy/gradient evaluated along the path was finite, bool ``(B,)``.
        inside: every position along the path lay in ``space``, bool ``(B,)``.
    """

    x: Tensor
    momentum: Tensor
    energy: Tensor
    grad: Tensor
    finite: Tensor
    inside: Tensor


#: An integrator maps ``(energy, x, momentum, energy_x, grad_x, step_size, n_steps,
#: inv_mass=..., space=...)`` to a :class:`Trajectory`; it must be volume preserving
#: and reversible for HMC to stay exact.
Integrator = Callable[..., Trajectory]


def leapfrog(
    energy: EnergyLike,
    x: Tensor,
    momentum: Tensor,
    energy_x: Tensor,
    grad_x: Tensor,
    step_size: Tensor,
    n_steps: int,
    *,
    inv_mass: Tensor | None = None,
    space: Space | None = None,
) -> Trajectory:
    r"""Leapfrog (Störmer–Verlet) integration of ``H = E(x) + p^T M^{-1} p / 2``.

    Cost: ``n_steps`` ``energy_and_grad`` calls (the gradient at the start is
    passed in, and the inner half-steps for ``p`` are merged).

    A chain whose path produces a non-finite energy/gradient, or (with
    ``space``) a position outside the space, is frozen at its last good point
    and flagged; both conditions are symmetric under time reversal, so
    rejecting such trajectories keeps HMC exact.

    Args:
        energy: the energy.
        x: start positions ``(B, *event)``.
        momentum: start momenta ``(B, *event)``.
        energy_x: ``E(x)`` ``(B,)``.
        grad_x: :math:`\nabla E(x)` ``(B, *event)``.
        step_size: ``ε``, broadcastable to ``x`` (0-d or ``(B, 1, ...)``).
        n_steps: ``L >= 1``.
        inv_mass: diagonal of :math:`M^{-1}` with shape ``event``; ``None`` is identity.
        space: optional space the path must stay in.

    Returns:
        The :class:`Trajectory` end point.
    """
    ones = torch.ones(x.shape[0], dtype=torch.bool, device=x.device)
    finite, inside = ones, ones.clone()
    e, g = energy_x, grad_x
    p = momentum - 0.5 * step_size * g
    for i in range(n_steps):
        velocity = p if inv_mass is None else inv_mass * p
        x_try = x + step_size * velocity
        alive = finite & inside
        in_now = in_space(space, x_try)
        if in_now is not None:
            inside = inside & (in_now | ~alive)
            alive = alive & in_now
        e_try, g_try = energy_and_grad(energy, batch_where(alive, x_try, x))
        ok = finite_rows(e_try, g_try)
        finite = finite & (ok | ~alive)
        alive = alive & ok
        x = batch_where(alive, x_try, x)
        e = torch.where(alive, e_try, e)
        g = batch_where(alive, g_try, g)
        p = p - (step_size if i < n_steps - 1 else 0.5 * step_size) * g
    return Trajectory(x=x, momentum=p, energy=e, grad=g, finite=finite, inside=inside)


@dataclass(frozen=True)
class HMCInfo(StepInfo):
    """:class:`StepInfo` plus Hamiltonian diagnostics.

    Attributes:
        divergent: energy error above ``divergence_threshold`` or a non-finite
            evaluation along the path, bool ``(B,)``.
        energy_error: :math:`H_{new} - H_{old}` ``(B,)``; ``+inf`` where the
            path was cut (non-finite evaluation or left the space).
    """

    divergent: Tensor
    energy_error: Tensor


class HMC(Sampler):
    r"""Hamiltonian Monte Carlo with exact MH correction on the Hamiltonian.

    Update: :math:`p \sim \mathcal N(0, M)`; integrate ``n_leapfrog`` steps of
    size ``ε`` with ``integrator``; accept with
    :math:`\min\{1, \exp(H(x, p) - H(x', p'))\}` (module docstring).

    * **Cost:** ``n_leapfrog`` ``energy_and_grad`` calls per step (the start
      point's gradient is cached in the state).
    * **Tuning:** acceptance ≈ 0.65 (Neal, 2011; Beskos et al., 2013); use
      :class:`~ebms.samplers.StepSizeAdaptation` or :func:`~ebms.samplers.warmup`.
      Trajectory length ``ε L`` should be comparable to the widest scale of
      the target; a diagonal ``mass`` ≈ 1 / (marginal variance) evens out scales.
    * **Per-chain step sizes:** ``state.step_size`` may be ``(B,)``.
    * **Failures:** non-finite energies/gradients on the path and (with
      ``space``) paths leaving the space are rejected; non-finite paths are
      flagged in ``info.nonfinite`` and ``info.divergent``. Positions are never
      clamped into the space (that would break reversibility).

    References:
        Duane, Kennedy, Pendleton & Roweth (1987), "Hybrid Monte Carlo",
        Physics Letters B 195(2).
        Neal (2011), "MCMC using Hamiltonian dynamics", Handbook of MCMC, ch. 5.
        Beskos, Pillai, Roberts, Sanz-Serna & Stuart (2013), "Optimal tuning of
        the hybrid Monte Carlo algorithm", Bernoulli 19(5A).

    Args:
        step_size: leapfrog step ``ε > 0``.
        n_leapfrog: number of leapfrog steps ``L >= 1``.
        integrator: a function with the signature of :func:`leapfrog`.
        mass: diagonal mass ``M`` with the event shape (positive); ``None`` is identity.
        divergence_threshold: energy error above which a step is flagged divergent.
        space: optional space; ``x0`` is validated against it, paths leaving it
            are rejected.

    Example:
        >>> import torch
        >>> from ebms.energy import from_fn
        >>> from ebms.samplers import HMC
        >>> e = from_fn(lambda x: 0.5 * (x ** 2).sum(-1))
        >>> g = torch.Generator().manual_seed(0)
        >>> sampler = HMC(step_size=0.3, n_leapfrog=5)
        >>> state = sampler.init(e, torch.zeros(8, 2))
        >>> state, info = sampler.step(e, state, generator=g)
        >>> info.divergent.shape
        torch.Size([8])
    """

    #: acceptance rate to tune for (Neal, 2011; Beskos et al., 2013).
    default_target_accept: float = 0.65

    def __init__(
        self,
        step_size: float = 0.1,
        n_leapfrog: int = 10,
        *,
        integrator: Integrator = leapfrog,
        mass: Tensor | Sequence[float] | None = None,
        divergence_threshold: float = 1000.0,
        space: Space | None = None,
    ) -> None:
        super().__init__(step_size=step_size, space=space)
        self.n_leapfrog = check_int(n_leapfrog, "n_leapfrog", minimum=1)
        if not callable(integrator):
            raise TypeError(
                f"integrator: expected a callable like ebms.samplers.leapfrog; got {type(integrator).__name__}"
            )
        self.integrator = integrator
        self.divergence_threshold = check_positive(divergence_threshold, "divergence_threshold")
        self.mass: Tensor | None = None
        if mass is not None:
            m = torch.as_tensor(mass)
            if not m.is_floating_point():
                m = m.to(torch.get_default_dtype())
            check_finite(m, "mass")
            if m.dim() == 0 or bool((m <= 0).any()):
                raise ValueError(
                    f"mass: expected positive entries with the event shape; got shape {tuple(m.shape)}, "
                    f"min {float(m.min()):.4g}"
                )
            self.mass = m

    def init(self, energy: EnergyLike, x0: Tensor) -> ChainState:
        """Start chains at ``x0: (B, *event)``; checks ``mass`` matches the event shape."""
        state = super().init(energy, x0)
        if self.mass is not None:
            check_shape(self.mass, tuple(x0.shape[1:]), "mass")
            m = self.mass.to(x0.dtype)
            if not bool((torch.isfinite(m) & (m > 0) & torch.isfinite(1.0 / m)).all()):
                raise ValueError(
                    f"mass: expected entries that stay finite and > 0 (with a finite inverse) in {x0.dtype}; "
                    f"got min {float(self.mass.min()):.4g}, max {float(self.mass.max()):.4g}"
                )
        return state

    def step(
        self, energy: EnergyLike, state: ChainState, *, generator: torch.Generator | None = None
    ) -> tuple[ChainState, HMCInfo]:
        """One HMC transition of every chain; returns ``(state, info)``."""
        g = check_grad_state(state)
        x, e = state.x, state.energy
        eps = expand_to(state.step_size, x)
        noise = torch.randn(x.shape, generator=generator, device=x.device, dtype=x.dtype)
        inv_mass = None
        if self.mass is None:
            p0 = noise
            kin0 = 0.5 * sq_norm(noise)
        else:
            mass = self.mass.to(device=x.device, dtype=x.dtype)
            check_shape(mass, tuple(x.shape[1:]), "mass")
            inv_mass = 1.0 / mass
            p0 = torch.sqrt(mass) * noise
            kin0 = 0.5 * sq_norm(noise)  # p^T M^{-1} p / 2 with p = sqrt(M) xi

        traj = self.integrator(
            energy, x, p0, e, g, eps, self.n_leapfrog, inv_mass=inv_mass, space=self.space
        )
        p1 = traj.momentum
        kin1 = 0.5 * sq_norm(p1 if inv_mass is None else p1 * torch.sqrt(inv_mass))
        valid = traj.finite & traj.inside
        inf = torch.full_like(e, float("inf"))
        energy_error = (traj.energy + kin1) - (e + kin0)
        energy_error = torch.where(valid & ~torch.isnan(energy_error), energy_error, inf)
        accepted, accept_prob = mh_accept(-energy_error, generator)

        x_out = batch_where(accepted, traj.x, x)
        e_out = torch.where(accepted, traj.energy, e)
        g_out = batch_where(accepted, traj.grad, g)
        nonfinite = ~traj.finite
        divergent = nonfinite | (valid & (energy_error > self.divergence_threshold))
        info = HMCInfo(
            accept_prob=accept_prob,
            accepted=accepted,
            energy=e_out,
            nonfinite=nonfinite,
            divergent=divergent,
            energy_error=energy_error,
        )
        return state.replace(x=x_out, energy=e_out, grad=g_out, t=state.t + 1), info

    def __repr__(self) -> str:
        mass = None if self.mass is None else tuple(self.mass.shape)
        return (
            f"HMC(step_size={self.step_size}, n_leapfrog={self.n_leapfrog}, "
            f"integrator={getattr(self.integrator, '__name__', self.integrator)!r}, mass_shape={mass}, "
            f"space={self.space!r})"
        )
