r"""Unadjusted Langevin dynamics: the exact ULA form and the decoupled SGLD form.

ULA (Roberts & Tweedie, 1996; monograph Eq. 2.23 with :math:`\epsilon=\sigma^2`):

.. math::  x' = x - \frac{\epsilon}{2}\nabla_x E(x) + \sqrt{\epsilon}\,\xi, \qquad \xi\sim\mathcal N(0, I).

Decoupled Langevin as used to train neural EBMs (Du & Mordatch, 2019;
Grathwohl et al., 2020 "JEM"), with independent gradient step ``α`` and noise
scale ``σ``:

.. math::  x' = x - \alpha\,\nabla_x E(x) + \sigma\,\xi .

With :math:`\sigma = \sqrt{2\alpha}` the two coincide (``ε = 2α``). Both are
*biased*: the chain targets ``exp(-E)`` only as the step goes to zero (no MH
correction; see :class:`~ebms.samplers.MALA` for the exact version). In
practice the decoupled form with ``σ ≪ sqrt(2α)`` samples a *colder*
distribution — fine for training negatives, wrong for estimating expectations.

Cost: one ``energy_and_grad`` per step. Acceptance is always 1, except that a
proposal with a non-finite energy or gradient is rejected (the chain stays)
and flagged in ``info.nonfinite``. On the CPU the check costs one sum per tensor
when every proposal is finite (the common case); the per-row mask is built only
otherwise, and always on accelerators (where a read would be a host sync).
"""

from __future__ import annotations

import abc
import math
from collections.abc import Callable

import torch
from torch import Tensor

from ebms._checks import check_positive, check_representable
from ebms.energy import EnergyLike, energy_and_grad
from ebms.samplers._base import ChainState, Sampler, StepInfo, all_finite_on_cpu, batch_where, expand_to
from ebms.samplers._util import finite_rows
from ebms.spaces import Space

__all__ = ["SGLD", "ULA"]

Schedule = Callable[[int], float]


def _sqrt(v: Tensor | float) -> Tensor | float:
    return math.sqrt(v) if isinstance(v, float) else torch.sqrt(v)


class _Langevin(Sampler, abc.ABC):
    def __init__(self, *, step_size: float, schedule: Schedule | None, space: Space | None) -> None:
        super().__init__(step_size=step_size, space=space)
        if schedule is not None and not callable(schedule):
            raise TypeError(f"schedule: expected a callable t -> multiplier or None; got {type(schedule).__name__}")
        self.schedule = schedule

    @abc.abstractmethod
    def _coefficients(self, eps: Tensor | float) -> tuple[Tensor | float, Tensor | float]:
        """Gradient coefficient and noise scale for step size ``eps`` (a tensor or a float)."""

    def _direction(self, g: Tensor) -> Tensor:
        """The gradient the move uses (the energy's own; SGLD may clamp it)."""
        return g

    def step(
        self, energy: EnergyLike, state: ChainState, *, generator: torch.Generator | None = None
    ) -> tuple[ChainState, StepInfo]:
        x, g = state.x, state.grad
        assert g is not None, "Langevin states always cache the gradient (Sampler.init)"
        eps: Tensor | float = state.step_size
        on_cpu = x.device.type == "cpu" and not torch.compiler.is_compiling()
        if on_cpu and state.step_size.dim() == 0 and state.step_size.device.type == "cpu":
            # A shared step size on the CPU becomes a Python float (reading a
            # CPU tensor is no device sync): the coefficients are then plain
            # arithmetic instead of tensor kernels. ``0.5 * eps`` and
            # ``sqrt(eps)`` round to the same float32 values either way.
            eps = float(eps)
        if self.schedule is not None:
            m = float(self.schedule(state.t))
            if not (m >= 0 and math.isfinite(m)):  # a NaN/inf/negative multiplier would make every proposal NaN
                raise ValueError(f"schedule({state.t}): expected a finite multiplier >= 0; got {m!r}")
            eps = eps * m
        alpha, sigma = self._coefficients(expand_to(eps, x) if isinstance(eps, Tensor) else eps)
        g = self._direction(g)
        noise = torch.randn(x.shape, generator=generator, device=x.device, dtype=x.dtype)
        if g.dtype != x.dtype:  # a gradient in another precision: let type promotion decide
            x_new = x - alpha * g + sigma * noise
        elif isinstance(alpha, float) and isinstance(sigma, float):
            # x + (-alpha) g, then + sigma xi: two kernels (a fused multiply-add
            # per element each) and one temporary
            x_new = torch.add(x, g, alpha=-alpha)
            x_new.add_(noise, alpha=sigma)
        else:
            # tensor coefficients (per-chain step sizes, accelerators): the same
            # with one temporary instead of four (large temporaries cost page faults)
            x_new = torch.mul(g, alpha)
            torch.sub(x, x_new, out=x_new)
            x_new.add_(noise.mul_(sigma))
        if self.space is not None:
            x_new = self.space.project(x_new)
        e_new, g_new = energy_and_grad(energy, x_new)
        if all_finite_on_cpu(e_new, g_new):
            # Common case, decided by one sum per tensor: nothing to reject, so no
            # per-row mask and no selects; the info tensors are constants.
            ok = torch.ones(x.shape[0], dtype=torch.bool, device=x.device)
            info = StepInfo(
                accept_prob=torch.ones(x.shape[0], dtype=x.dtype, device=x.device),
                accepted=ok,
                energy=e_new,
                nonfinite=torch.zeros_like(ok),
            )
            return state.replace(x=x_new, energy=e_new, grad=g_new, t=state.t + 1), info
        ok = finite_rows(e_new, g_new)
        x_out = batch_where(ok, x_new, x)
        e_out = batch_where(ok, e_new, state.energy)
        g_out = batch_where(ok, g_new, g)
        info = StepInfo(accept_prob=ok.to(x.dtype), accepted=ok, energy=e_out, nonfinite=~ok)
        return state.replace(x=x_out, energy=e_out, grad=g_out, t=state.t + 1), info


class ULA(_Langevin):
    r"""Unadjusted Langevin algorithm, :math:`x' = x - \tfrac{\epsilon}{2}\nabla E + \sqrt{\epsilon}\,\xi`.

    Args:
        step_size: ``ε > 0`` (the noise variance per step).
        schedule: optional ``t -> multiplier`` applied to ``ε`` at step ``t``
            (see :mod:`ebms.samplers.schedules`; SGLD theory wants
            :math:`\sum \epsilon_t = \infty`, :math:`\sum \epsilon_t^2 < \infty`).
        space: optional space to project onto after each move (e.g. a box).

    Example:
        >>> import torch
        >>> from ebms.energy import from_fn
        >>> from ebms.samplers import ULA
        >>> e = from_fn(lambda x: 0.5 * (x ** 2).sum(-1))
        >>> g = torch.Generator().manual_seed(0)
        >>> ULA(step_size=0.05).sample(e, torch.zeros(4, 2), steps=10, generator=g).shape
        torch.Size([4, 2])
    """

    def __init__(self, step_size: float = 0.01, *, schedule: Schedule | None = None, space: Space | None = None) -> None:
        super().__init__(step_size=step_size, schedule=schedule, space=space)

    def _coefficients(self, eps: Tensor | float) -> tuple[Tensor | float, Tensor | float]:
        return 0.5 * eps, _sqrt(eps)


class SGLD(_Langevin):
    r"""Decoupled Langevin, :math:`x' = x - \alpha\nabla E + \sigma\,\xi`.

    Args:
        step_size: gradient step ``α > 0``.
        noise_scale: ``σ >= 0``; ``None`` means ``sqrt(2 α)`` (the exact
            Langevin noise, i.e. ULA with ``ε = 2α``).
        schedule: optional ``t -> multiplier`` applied to ``α`` (``σ`` stays fixed
            unless ``noise_scale`` is ``None``).
        space: optional space to project onto after each move.
        grad_clamp: ``c > 0``: each element of ``∇E`` is clamped to ``[-c, c]`` before the move,
            so no coordinate moves by more than ``α c`` plus noise (the image-EBM tutorials' rule, e.g.
            ``α = 10``, ``c = 0.03``); ``None`` (default): the gradient as it is. The chain is then
            no longer a discretised Langevin diffusion of ``E``: a heuristic sampler for training.
    """

    def __init__(
        self,
        step_size: float = 1.0,
        noise_scale: float | None = 0.01,
        *,
        schedule: Schedule | None = None,
        space: Space | None = None,
        grad_clamp: float | None = None,
    ) -> None:
        super().__init__(step_size=step_size, schedule=schedule, space=space)
        self.noise_scale = None if noise_scale is None else check_positive(noise_scale, "noise_scale", allow_zero=True)
        self.grad_clamp = None if grad_clamp is None else check_positive(grad_clamp, "grad_clamp")

    def _direction(self, g: Tensor) -> Tensor:
        return g if self.grad_clamp is None else g.clamp(-self.grad_clamp, self.grad_clamp)

    def init(self, energy: EnergyLike, x0: Tensor) -> ChainState:
        """Start chains at ``x0``; ``noise_scale`` must, like ``step_size``, be finite in ``x0``'s dtype."""
        state = super().init(energy, x0)
        if self.noise_scale:
            check_representable(self.noise_scale, "noise_scale", x0.dtype)
        return state

    def _coefficients(self, eps: Tensor | float) -> tuple[Tensor | float, Tensor | float]:
        if self.noise_scale is None:
            return eps, _sqrt(2.0 * eps)
        return eps, self.noise_scale
