r"""The two-stage learning-rate schedule of stochastic approximation (Wang, Ou & Tan 2018).

.. math::  \gamma_t = \begin{cases} 1 / (t_c + t^{\beta}) & t \le t_0 \\
                                    1 / (t_c + t_0^{\beta} + t - t_0) & t > t_0 \end{cases}
           \qquad t = 1, 2, \dots

A first stage that decays slowly (:math:`\beta < 1`, or stays at :math:`1/(t_c + 1)` with
:math:`\beta = 0`) while the model moves far, then the :math:`1/t` decay that the convergence of
SA needs (:math:`\sum\gamma_t = \infty`, :math:`\sum\gamma_t^2 < \infty`; monograph Theorem 2.2 and
its footnote: "a large learning rate at the early stage, then decrease to 1/t"). The authors'
C++ trainer uses ``t0 = 500`` with :math:`(t_c, \beta) = (0, 0)` for the parameters and
:math:`(0, 0.6)` for :math:`\zeta`.
"""

from __future__ import annotations

from ebms._checks import check_int, check_positive

__all__ = ["SAGain"]


class SAGain:
    r"""Two-stage SA learning rate :math:`\gamma_t` (module docstring); ``gain(step)`` for ``step >= 0``
    returns :math:`\gamma_{step + 1}`.

    Works as the :class:`~ebms.train.Trainer`'s ``lr_schedule`` (a multiplier of the optimizer's
    learning rate: plain SGD with ``lr=1`` then takes the source's steps) and as the
    :math:`\zeta` rate of :class:`~ebms.objectives.AugSA`.

    Args:
        tc: offset :math:`t_c \ge 0` (``tc = 0`` with ``beta = 0`` starts at 1).
        beta: first-stage exponent :math:`\beta \in [0, 1]`.
        t0: length of the first stage (``>= 0``; 0: the :math:`1/t` stage from the start).
        scale: a constant factor ``> 0`` on every :math:`\gamma_t` (1 in the source).

    Example:
        >>> gain = SAGain(tc=0.0, beta=0.6, t0=100)
        >>> round(gain(0), 6), round(gain(99), 6), round(gain(199), 6)
        (1.0, 0.063096, 0.008632)
    """

    def __init__(self, tc: float = 0.0, beta: float = 0.6, t0: int = 500, *, scale: float = 1.0) -> None:
        self.tc = check_positive(tc, "tc", allow_zero=True)
        self.beta = check_positive(beta, "beta", allow_zero=True)
        if self.beta > 1:
            raise ValueError(f"beta: expected an exponent in [0, 1]; got {beta!r}")
        self.t0 = check_int(t0, "t0", minimum=0)
        self.scale = check_positive(scale, "scale")

    def __call__(self, step: int) -> float:
        t = check_int(step, "step", minimum=0) + 1
        if t <= self.t0:
            return self.scale / (self.tc + t**self.beta)
        return self.scale / (self.tc + self.t0**self.beta + t - self.t0)

    def __repr__(self) -> str:
        return f"SAGain(tc={self.tc}, beta={self.beta}, t0={self.t0}, scale={self.scale})"
