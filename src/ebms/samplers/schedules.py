r"""Step-size schedules: small callables ``t -> multiplier`` for ``ULA``/``SGLD``.

A schedule multiplies the state's step size at step ``t`` (``t = 0, 1, ...``)::

    ULA(step_size=0.1, schedule=PolynomialDecay(b=10.0, gamma=0.55))

* :class:`Constant` — ``c`` (the default behaviour, with ``c = 1``).
* :class:`PolynomialDecay` — :math:`a (b + t)^{-\gamma}`. With
  :math:`\gamma \in (0.5, 1]` the steps satisfy the Robbins–Monro conditions
  :math:`\sum_t \epsilon_t = \infty`, :math:`\sum_t \epsilon_t^2 < \infty`
  under which SGLD converges to the target (Welling & Teh, 2011; monograph
  Theorem 2.1, Eq. 2.24).
* :class:`ExponentialDecay` — :math:`r^t`, floored at ``minimum``.
* :class:`CosineAnnealing` / :class:`LinearAnnealing` — from 1 down to
  ``final`` over ``total_steps`` steps, then ``final``.

Only the decaying schedules make the *unadjusted* kernels asymptotically
exact; a fixed small step leaves an ``O(ε)`` bias. Schedules are for ULA/SGLD;
MH kernels (MALA, HMC) are exact at any step size and are tuned with
:class:`~ebms.samplers.StepSizeAdaptation` instead.

References:
    Welling & Teh (2011), "Bayesian learning via stochastic gradient Langevin
    dynamics", ICML.
    Loshchilov & Hutter (2017), "SGDR: stochastic gradient descent with warm
    restarts", ICLR (cosine annealing).
"""

from __future__ import annotations

import math

from ebms._checks import check_int, check_positive

__all__ = ["Constant", "CosineAnnealing", "ExponentialDecay", "LinearAnnealing", "PolynomialDecay"]


def _check_t(t: int) -> int:
    if isinstance(t, bool) or not isinstance(t, int) or t < 0:
        raise ValueError(f"t: expected a step index int >= 0; got {t!r}")
    return t


def _check_final(final: float) -> float:
    v = check_positive(final, "final", allow_zero=True)
    if v > 1:
        raise ValueError(f"final: expected a multiplier in [0, 1]; got {final!r}")
    return v


class Constant:
    """Multiplier ``value`` at every step.

    Args:
        value: ``> 0`` (default 1).
    """

    def __init__(self, value: float = 1.0) -> None:
        self.value = check_positive(value, "value")

    def __call__(self, t: int) -> float:
        _check_t(t)
        return self.value

    def __repr__(self) -> str:
        return f"Constant(value={self.value})"


class PolynomialDecay:
    r"""Multiplier :math:`a (b + t)^{-\gamma}` (SGLD's schedule).

    Args:
        a: scale ``> 0``.
        b: offset ``> 0`` (delays the decay; the multiplier at ``t = 0`` is :math:`a b^{-\gamma}`).
        gamma: decay exponent in ``(0.5, 1]`` (Robbins–Monro conditions).

    Example:
        >>> PolynomialDecay(a=1.0, b=1.0, gamma=1.0)(3)
        0.25
    """

    def __init__(self, a: float = 1.0, b: float = 1.0, gamma: float = 0.55) -> None:
        self.a = check_positive(a, "a")
        self.b = check_positive(b, "b")
        g = check_positive(gamma, "gamma")
        if not 0.5 < g <= 1.0:
            raise ValueError(
                f"gamma: expected a number in (0.5, 1] (sum of steps infinite, sum of squares finite); "
                f"got {gamma!r}"
            )
        self.gamma = g

    def __call__(self, t: int) -> float:
        return self.a * (self.b + _check_t(t)) ** (-self.gamma)

    def __repr__(self) -> str:
        return f"PolynomialDecay(a={self.a}, b={self.b}, gamma={self.gamma})"


class ExponentialDecay:
    r"""Multiplier :math:`\max(r^t, \text{minimum})`.

    Args:
        rate: ``r`` in ``(0, 1]``.
        minimum: floor ``>= 0`` (default 0: no floor).
    """

    def __init__(self, rate: float, *, minimum: float = 0.0) -> None:
        r = check_positive(rate, "rate")
        if r > 1.0:
            raise ValueError(f"rate: expected a number in (0, 1]; got {rate!r}")
        self.rate = r
        self.minimum = check_positive(minimum, "minimum", allow_zero=True)

    def __call__(self, t: int) -> float:
        return max(self.rate ** _check_t(t), self.minimum)

    def __repr__(self) -> str:
        return f"ExponentialDecay(rate={self.rate}, minimum={self.minimum})"


class _Annealing:
    """Shared part of the annealing schedules: ``T`` steps from 1 to ``final``, then flat."""

    def __init__(self, total_steps: int, *, final: float = 0.0) -> None:
        self.total_steps = check_int(total_steps, "total_steps", minimum=1)
        self.final = _check_final(final)

    def _fraction(self, t: int) -> float:
        return min(_check_t(t), self.total_steps) / self.total_steps

    def __repr__(self) -> str:
        return f"{type(self).__name__}(total_steps={self.total_steps}, final={self.final})"


class CosineAnnealing(_Annealing):
    r"""Multiplier :math:`f + (1 - f)\,\tfrac12\,(1 + \cos(\pi \min(t, T) / T))`.

    Goes from 1 at ``t = 0`` to ``final`` at ``t = T`` and stays there.

    Args:
        total_steps: ``T >= 1``.
        final: end multiplier ``f`` in ``[0, 1]``.
    """

    def __call__(self, t: int) -> float:
        return self.final + (1.0 - self.final) * 0.5 * (1.0 + math.cos(math.pi * self._fraction(t)))


class LinearAnnealing(_Annealing):
    r"""Multiplier :math:`1 - (1 - f) \min(t, T) / T`: linear from 1 to ``final``.

    Args:
        total_steps: ``T >= 1``.
        final: end multiplier ``f`` in ``[0, 1]``.
    """

    def __call__(self, t: int) -> float:
        return 1.0 - (1.0 - self.final) * self._fraction(t)