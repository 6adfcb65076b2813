r"""The seven 2-D toy shapes in *base coordinates* (``scale = 1``).

Each shape is a sampler ``(n, noise, generator) -> (n, 2)`` and, where the
density has a closed form, a log-density ``(x, noise) -> (n,)``. The public
:class:`ebms.data.toy.ToyDataset` multiplies everything by ``scale``.

``noise`` is the standard deviation of isotropic Gaussian noise added to a
noiseless shape (for ``pinwheel`` it is the tangential spread of each arm,
before the arm is curled). Shapes are centred at the origin and span roughly
``[-3, 3]``.

Closed-form densities (base coordinates, :math:`\sigma` = ``noise``,
:math:`\rho = \lVert x \rVert`, :math:`\Phi` the standard normal cdf):

* ``eight_gaussians``: :math:`\tfrac18 \sum_k \mathcal N(x; 2 u_k, \sigma^2 I)`,
  :math:`u_k = (\cos \tfrac{k\pi}{4}, \sin \tfrac{k\pi}{4})`.
* ``rings``: ring radii :math:`r_k \in \{0.5, 1, 1.5, 2\}` with weights
  :math:`w_k \propto r_k`; a point on circle :math:`k` at a uniform angle plus
  :math:`\mathcal N(0, \sigma^2 I)` noise has the Rice-type density
  :math:`\frac{1}{2\pi\sigma^2} \exp\!\big(-\frac{\rho^2 + r_k^2}{2\sigma^2}\big)
  I_0\!\big(\frac{\rho r_k}{\sigma^2}\big)`
  (average of the Gaussian kernel over the circle; :math:`I_0` the modified
  Bessel function), mixed with weights :math:`w_k`.
* ``checkerboard``: uniform on the 8 black unit squares of a 4×4 board on
  :math:`[-2, 2]^2` (square :math:`(i, j)` is black when :math:`i + j` is
  even), convolved with the noise:
  :math:`\tfrac18 \sum_{(i,j)\,\mathrm{black}} m(x_1; a_i)\, m(x_2; a_j)`,
  :math:`m(t; a) = \Phi(\tfrac{t-a}{\sigma}) - \Phi(\tfrac{t-a-1}{\sigma})`,
  which is the plain indicator ``1/8`` when ``noise = 0``.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import Tensor

from ebms.distributions import GaussianMixture

SampleFn = Callable[[int, float, "torch.Generator | None"], Tensor]
LogProbFn = Callable[[Tensor, float], Tensor]

_RING_RADII = (0.5, 1.0, 1.5, 2.0)
_PINWHEEL_ARMS = 5
_PINWHEEL_RADIAL_STD = 0.3
_PINWHEEL_RATE = 0.25
#: Gaussian tail allowance (in standard deviations) used for the bounds:
#: a 7-sigma tail holds about 1.3e-12 of the mass per coordinate.
TAIL_SIGMAS = 7.0


@dataclass(frozen=True)
class ShapeSpec:
    """One row of the toy table (internal).

    Attributes:
        sample: ``(n, noise, generator) -> (n, 2)`` float32, base coordinates.
        half_width: ``noise -> L`` such that ``[-L, L]^2`` holds all but a
            negligible (about 1e-11) fraction of the mass.
        default_noise: ``noise`` used when none is given.
        log_prob: closed-form base-coordinate log-density, or ``None``.
        noise_may_be_zero: whether ``noise = 0`` is a valid setting.
    """

    sample: SampleFn
    half_width: Callable[[float], float]
    default_noise: float
    log_prob: LogProbFn | None = None
    noise_may_be_zero: bool = True


def _device(generator: torch.Generator | None) -> torch.device:
    return generator.device if generator is not None else torch.device("cpu")


def _randn(n: int, d: int, g: torch.Generator | None) -> Tensor:
    return torch.randn(n, d, generator=g, device=_device(g))


def _rand(n: int, g: torch.Generator | None) -> Tensor:
    return torch.rand(n, generator=g, device=_device(g))


def eight_gaussians_mixture(
    noise: float, scale: float = 1.0, dtype: torch.dtype = torch.float32
) -> GaussianMixture:
    """The ``eight_gaussians`` density as a mixture energy (means on radius ``2 scale``)."""
    angles = torch.arange(8, dtype=torch.float64) * (math.pi / 4)
    means = 2.0 * scale * torch.stack([angles.cos(), angles.sin()], dim=1)
    return GaussianMixture(means.float(), (scale * noise) ** 2).to(dtype)


def _sample_eight(n: int, noise: float, g: torch.Generator | None) -> Tensor:
    return eight_gaussians_mixture(noise).to(_device(g)).sample(n, generator=g)


def _log_prob_eight(x: Tensor, noise: float) -> Tensor:
    return eight_gaussians_mixture(noise, dtype=x.dtype).to(x.device).log_prob(x)


def _ring_weights() -> Tensor:
    r = torch.tensor(_RING_RADII, dtype=torch.float64)
    return r / r.sum()


def _sample_rings(n: int, noise: float, g: torch.Generator | None) -> Tensor:
    dev = _device(g)
    k = torch.multinomial(_ring_weights().float().to(dev), n, replacement=True, generator=g)
    theta = 2 * math.pi * _rand(n, g)
    radius = torch.tensor(_RING_RADII, device=dev)[k]
    circle = radius[:, None] * torch.stack([theta.cos(), theta.sin()], dim=1)
    return circle + noise * _randn(n, 2, g)


def _log_prob_rings(x: Tensor, noise: float) -> Tensor:
    xd = x.double()
    rho = xd.norm(dim=1, keepdim=True)  # (n, 1)
    r = torch.tensor(_RING_RADII, dtype=torch.float64, device=x.device)  # (K,)
    s2 = noise**2
    z = rho * r / s2  # (n, K), argument of I0
    # log I0(z) = log i0e(z) + z, so the exponent combines to -(rho - r)^2 / (2 s2).
    comp = -((rho - r) ** 2) / (2 * s2) + torch.log(torch.special.i0e(z)) - math.log(2 * math.pi * s2)
    out = torch.logsumexp(comp + _ring_weights().to(x.device).log(), dim=1)
    return out.to(x.dtype)


def _sample_checkerboard(n: int, noise: float, g: torch.Generator | None) -> Tensor:
    dev = _device(g)
    k = torch.randint(0, 8, (n,), generator=g, device=dev)  # one of the 8 black squares
    i = k // 2  # column 0..3
    j = 2 * (k % 2) + (i % 2)  # row with i + j even
    corner = torch.stack([i, j], dim=1).float() - 2.0
    u = torch.rand(n, 2, generator=g, device=dev)
    x = corner + u
    return x + noise * _randn(n, 2, g) if noise > 0 else x


def _interval_mass(t: Tensor, noise: float) -> Tensor:
    """``m(t; a)`` for the four unit intervals ``[a, a+1)``, ``a = -2..1``: ``(n, 4)``."""
    a = torch.arange(-2.0, 2.0, dtype=torch.float64, device=t.device)
    lo = t[:, None] - a  # distance above the interval's left edge
    if noise == 0:
        return ((lo >= 0) & (lo < 1)).double()
    u, v = lo / noise, (lo - 1) / noise  # mass = Phi(u) - Phi(v), u > v
    # Take the difference on the side of the smaller tail (no 1 - 1 cancellation).
    upper_tail = torch.special.ndtr(-v) - torch.special.ndtr(-u)
    return torch.where(v > 0, upper_tail, torch.special.ndtr(u) - torch.special.ndtr(v))


def _log_prob_checkerboard(x: Tensor, noise: float) -> Tensor:
    xd = x.double()
    mx, my = _interval_mass(xd[:, 0], noise), _interval_mass(xd[:, 1], noise)  # (n, 4) each
    idx = torch.arange(4, device=x.device)
    black = ((idx[:, None] + idx[None, :]) % 2 == 0).double()  # (4, 4), [i, j]
    p = torch.einsum("ni,ij,nj->n", mx, black, my) / 8.0
    return torch.log(p).to(x.dtype)


def _sample_two_moons(n: int, noise: float, g: torch.Generator | None) -> Tensor:
    moon = torch.randint(0, 2, (n,), generator=g, device=_device(g)).float()
    t = math.pi * _rand(n, g)
    upper = torch.stack([t.cos(), t.sin()], dim=1)
    lower = torch.stack([1 - t.cos(), 0.5 - t.sin()], dim=1)
    x = torch.where(moon[:, None] > 0, lower, upper) - torch.tensor([0.5, 0.25], device=t.device)
    return 1.5 * x + noise * _randn(n, 2, g)


def _sample_pinwheel(n: int, noise: float, g: torch.Generator | None) -> Tensor:
    arm = torch.randint(0, _PINWHEEL_ARMS, (n,), generator=g, device=_device(g)).float()
    radial = 1.0 + _PINWHEEL_RADIAL_STD * _randn(n, 1, g)[:, 0]
    tangential = noise * _randn(n, 1, g)[:, 0]
    angle = arm * (2 * math.pi / _PINWHEEL_ARMS) + _PINWHEEL_RATE * torch.exp(radial)
    c, s = angle.cos(), angle.sin()
    return torch.stack([c * radial - s * tangential, s * radial + c * tangential], dim=1)


def _sample_swiss_roll(n: int, noise: float, g: torch.Generator | None) -> Tensor:
    t = 1.5 * math.pi * (1 + 2 * _rand(n, g))
    x = torch.stack([t * t.cos(), t * t.sin()], dim=1) / 5.0
    return x + noise * _randn(n, 2, g)


def _sample_two_spirals(n: int, noise: float, g: torch.Generator | None) -> Tensor:
    t = 3 * math.pi * torch.sqrt(_rand(n, g))
    arm = torch.stack([-t * t.cos(), t * t.sin()], dim=1) / math.pi
    sign = 2 * torch.randint(0, 2, (n, 1), generator=g, device=_device(g)).float() - 1
    return sign * arm + noise * _randn(n, 2, g)


def _pinwheel_half_width(noise: float) -> float:
    return math.hypot(1 + TAIL_SIGMAS * _PINWHEEL_RADIAL_STD, TAIL_SIGMAS * noise)


def _checkerboard_half_width(noise: float) -> float:
    # At least one empty unit of margin around the 4x4 board, so the box's
    # outer cells hold no mass even without noise (the grid evaluator's
    # truncation check looks at them). The board edges sit on cell edges of an
    # n x n grid when 6 / n divides 1 (e.g. n = 384 = 6 * 64).
    return 2.0 + max(TAIL_SIGMAS * noise, 1.0)


def _with_tail(extent: float) -> Callable[[float], float]:
    """Half-width of a shape of half-width ``extent`` plus a Gaussian noise tail."""
    return lambda noise: extent + TAIL_SIGMAS * noise


#: name -> spec; the single table behind :func:`ebms.data.toy.get_toy`.
SHAPES: dict[str, ShapeSpec] = {
    "checkerboard": ShapeSpec(_sample_checkerboard, _checkerboard_half_width, 0.0, _log_prob_checkerboard),
    "eight_gaussians": ShapeSpec(_sample_eight, _with_tail(2.0), 0.2, _log_prob_eight, noise_may_be_zero=False),
    "pinwheel": ShapeSpec(_sample_pinwheel, _pinwheel_half_width, 0.1),
    "rings": ShapeSpec(_sample_rings, _with_tail(max(_RING_RADII)), 0.08, _log_prob_rings, noise_may_be_zero=False),
    "swiss_roll": ShapeSpec(_sample_swiss_roll, _with_tail(4.5 * math.pi / 5.0), 0.1),
    "two_moons": ShapeSpec(_sample_two_moons, _with_tail(2.25), 0.1),
    "two_spirals": ShapeSpec(_sample_two_spirals, _with_tail(3.0), 0.1),
}
