r"""Metropolis-adjusted Langevin algorithm (MALA): Langevin proposals made exact.

The proposal is one ULA move,

.. math::  x' = x - \frac{\epsilon}{2}\nabla_x E(x) + \sqrt{\epsilon}\,\xi,
           \qquad \xi \sim \mathcal N(0, I),

so :math:`q(x' \mid x) = \mathcal N(x';\, x - \tfrac{\epsilon}{2}\nabla E(x),\, \epsilon I)`,
accepted with the Metropolis–Hastings probability

.. math::  \log\alpha = \min\Big\{0,\; E(x) - E(x') + \log q(x \mid x') - \log q(x' \mid x)\Big\},
           \qquad \log q(x' \mid x) = -\frac{\lVert x' - x + \frac{\epsilon}{2}\nabla E(x)\rVert^2}{2\epsilon} + c .

The chain leaves ``exp(-E)`` exactly invariant for any ``ε`` (Roberts &
Tweedie, 1996; monograph §2.2, Eq. 2.22–2.23); the step size only changes how
fast it mixes. For a ``D``-dimensional target the optimal acceptance rate is
about 0.574 (Roberts & Rosenthal, 1998), which :class:`StepSizeAdaptation`
targets by default.
"""

from __future__ import annotations

import torch

from ebms.energy import EnergyLike, energy_and_grad
from ebms.samplers._base import ChainState, Sampler, StepInfo, batch_where, expand_to, mh_accept
from ebms.samplers._util import check_grad_state, finite_rows, in_space, sq_norm
from ebms.spaces import Space

__all__ = ["MALA"]




class MALA(Sampler):
    r"""Metropolis-adjusted Langevin kernel (exact target ``exp(-E)``).

    Update: propose :math:`x' = x - \tfrac{\epsilon}{2}\nabla E(x) + \sqrt{\epsilon}\,\xi`
    and accept with the MH ratio above (module docstring).

    * **Cost:** one ``energy_and_grad`` per step (the current point's energy
      and gradient are cached in the state).
    * **Tuning:** aim for acceptance ≈ 0.574 (Roberts & Rosenthal, 1998);
      wrap in :class:`~ebms.samplers.StepSizeAdaptation` or call
      :func:`~ebms.samplers.warmup` to tune ``ε``.
    * **Per-chain step sizes:** ``state.step_size`` may be ``(B,)``.
    * **Failures:** a NaN ratio counts as a rejection; a proposal whose energy
      or gradient is not finite is rejected and flagged in ``info.nonfinite``.
    * **Bounded spaces:** a proposal outside ``space`` (e.g. a
      :class:`~ebms.spaces.Box`) is *rejected*, never clamped. Clamping would
      put a point mass on the boundary that the reverse proposal cannot
      produce, breaking detailed balance; rejecting keeps the kernel exact for
      the target restricted to the space.

    References:
        Roberts & Tweedie (1996), "Exponential convergence of Langevin
        distributions and their discrete approximations", Bernoulli 2(4).
        Roberts & Rosenthal (1998), "Optimal scaling of discrete approximations
        to Langevin diffusions", JRSS B 60(1).

    Args:
        step_size: ``ε > 0``, the proposal noise variance.
        space: optional space; ``x0`` is validated against it and proposals
            outside it are rejected.

    Example:
        >>> import torch
        >>> from ebms.energy import from_fn
        >>> from ebms.samplers import MALA
        >>> e = from_fn(lambda x: 0.5 * (x ** 2).sum(-1))
        >>> g = torch.Generator().manual_seed(0)
        >>> sampler = MALA(step_size=0.5)
        >>> state = sampler.init(e, torch.zeros(8, 2))
        >>> state, info = sampler.step(e, state, generator=g)
        >>> info.accept_prob.shape
        torch.Size([8])
    """

    #: optimal acceptance rate for Langevin proposals (Roberts & Rosenthal, 1998).
    default_target_accept: float = 0.574

    def __init__(self, step_size: float = 0.1, *, space: Space | None = None) -> None:
        super().__init__(step_size=step_size, space=space)

    def step(
        self, energy: EnergyLike, state: ChainState, *, generator: torch.Generator | None = None
    ) -> tuple[ChainState, StepInfo]:
        """One MALA transition of every chain; returns ``(state, info)``."""
        g = check_grad_state(state)
        x, e = state.x, state.energy
        eps = state.step_size  # () or (B,)
        eps_x = expand_to(eps, x)
        noise = torch.randn(x.shape, generator=generator, device=x.device, dtype=x.dtype)
        x_prop = x - 0.5 * eps_x * g + torch.sqrt(eps_x) * noise

        inside = in_space(self.space, x_prop)
        # Evaluate out-of-space proposals at the current point instead: they are
        # rejected anyway, and the energy may be undefined outside the space.
        x_eval = x_prop if inside is None else batch_where(inside, x_prop, x)
        e_prop, g_prop = energy_and_grad(energy, x_eval)
        finite = finite_rows(e_prop, g_prop)

        # log q(x'|x) = -|xi|^2 / 2 ; log q(x|x') = -|x - x' + eps/2 g'|^2 / (2 eps)
        log_fwd = -0.5 * sq_norm(noise)
        log_bwd = -sq_norm(x - x_prop + 0.5 * eps_x * g_prop) / (2.0 * eps)
        log_ratio = e - e_prop + log_bwd - log_fwd
        valid = finite if inside is None else finite & inside
        log_ratio = torch.where(valid, log_ratio, torch.full_like(log_ratio, -float("inf")))
        accepted, accept_prob = mh_accept(log_ratio, generator)

        x_out = batch_where(accepted, x_prop, x)
        e_out = torch.where(accepted, e_prop, e)
        g_out = batch_where(accepted, g_prop, g)
        nonfinite = ~finite if inside is None else inside & ~finite
        info = StepInfo(accept_prob=accept_prob, accepted=accepted, energy=e_out, nonfinite=nonfinite)
        return state.replace(x=x_out, energy=e_out, grad=g_out, t=state.t + 1), info

    def __repr__(self) -> str:
        return f"MALA(step_size={self.step_size}, space={self.space!r})"
