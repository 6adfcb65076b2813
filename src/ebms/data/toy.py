r"""Seeded 2-D toy data sets, with their exact density where one exists.

Seven shapes, looked up by name with :func:`get_toy` (the one table of names
lives in :mod:`ebms.data._toy_shapes`)::

    checkerboard  eight_gaussians  pinwheel  rings  swiss_roll  two_moons  two_spirals

Every shape lives in ``[-3, 3]^2``-ish *base coordinates* and is multiplied by
``scale``. ``noise`` is the standard deviation of isotropic Gaussian noise
added to the noiseless shape in base coordinates (for ``pinwheel``: the
tangential spread of an arm). Three sets have a closed-form density,
:attr:`ToyDataset.has_density`:

* ``eight_gaussians`` — an equal-weight mixture of 8 Gaussians with means on
  the circle of radius 2 and covariance ``noise^2 I`` (an
  :class:`ebms.distributions.GaussianMixture`);
* ``rings`` — four noisy circles (radii 0.5, 1, 1.5, 2, weights ∝ radius);
  each is a uniform angle on the circle plus Gaussian noise, whose density is
  the Rice-type form with the Bessel function :math:`I_0`;
* ``checkerboard`` — uniform on the 8 black unit squares of a 4×4 board on
  ``[-2, 2]^2`` (``noise = 0`` by default: density exactly ``1/8`` on the
  board's black squares and 0 elsewhere), convolved with the noise when
  ``noise > 0`` (a product of normal-cdf differences).

With ``scale = s`` the density is :math:`p_s(x) = p_1(x/s)/s^2`. The formulas
are in :mod:`ebms.data._toy_shapes`.

Example:
    >>> import torch
    >>> from ebms.data import get_toy
    >>> ds = get_toy("eight_gaussians")
    >>> x = ds.sample(500, generator=torch.Generator().manual_seed(0))
    >>> x.shape, x.dtype, ds.log_prob(x).shape
    (torch.Size([500, 2]), torch.float32, torch.Size([500]))
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from ebms._checks import check_finite, check_int, check_positive, check_shape, check_tensor
from ebms.data._toy_shapes import SHAPES, LogProbFn, eight_gaussians_mixture
from ebms.energy import Energy, from_fn

__all__ = ["TOY_NAMES", "ToyDataset", "get_toy"]

#: Valid names for :func:`get_toy`, sorted.
TOY_NAMES: tuple[str, ...] = tuple(sorted(SHAPES))

Bounds = tuple[tuple[float, float], tuple[float, float]]


@dataclass(frozen=True)
class ToyDataset:
    """A 2-D toy distribution: seeded sampler, bounds, and exact density when known.

    Args:
        name: one of :data:`TOY_NAMES`.
        scale: multiplies every coordinate (> 0).
        noise: Gaussian noise standard deviation in base coordinates (>= 0;
            > 0 for ``eight_gaussians`` and ``rings``). ``None`` picks the
            set's default (0.2 for ``eight_gaussians``, 0.08 for ``rings``,
            0 for ``checkerboard``, 0.1 otherwise); the resolved value is
            stored, so ``repr`` shows the full configuration.

    Sampling costs ``O(n)``; ``log_prob`` is ``O(n)`` (``O(8n)`` / ``O(4n)``
    for the mixtures), computed in float64 for ``rings`` and ``checkerboard``
    and in ``x``'s dtype for ``eight_gaussians``.
    """

    name: str
    scale: float = 1.0
    noise: float | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or self.name not in SHAPES:
            raise ValueError(f"name: expected one of {', '.join(TOY_NAMES)}; got {self.name!r}")
        spec = SHAPES[self.name]
        object.__setattr__(self, "scale", check_positive(self.scale, "scale"))
        noise = spec.default_noise if self.noise is None else self.noise
        allow_zero = spec.noise_may_be_zero
        label = f"noise ({self.name} needs {'>= 0' if allow_zero else '> 0'})"
        noise = check_positive(noise, label, allow_zero=allow_zero)
        object.__setattr__(self, "noise", noise)

    @property
    def _sigma(self) -> float:
        """The resolved ``noise`` (never ``None`` after ``__post_init__``)."""
        assert self.noise is not None
        return self.noise

    @property
    def dim(self) -> int:
        """``D = 2``: every toy set lives in the plane (same attribute as ``PointCloud.dim``)."""
        return 2

    @property
    def has_density(self) -> bool:
        """Whether :meth:`log_prob` is available (a closed-form density)."""
        return SHAPES[self.name].log_prob is not None

    @property
    def bounds(self) -> Bounds:
        """``((-L, L), (-L, L))``: a square holding all but ~1e-11 of the mass.

        ``L`` is ``scale`` times the noiseless shape's half-width plus seven
        noise standard deviations (``checkerboard``: at least one empty unit
        around the board, ``L = 3`` when ``noise = 0``).
        """
        half = self.scale * SHAPES[self.name].half_width(self._sigma)
        return ((-half, half), (-half, half))

    def sample(self, n: int, *, generator: torch.Generator | None = None) -> Tensor:
        """Draw ``n`` points, ``(n, 2)`` float32, on ``generator``'s device (CPU by default).

        The same generator state gives identical draws; all randomness comes
        from ``generator`` (the global RNG when it is ``None``).
        """
        check_int(n, "n", minimum=1)
        if generator is not None and not isinstance(generator, torch.Generator):
            raise TypeError(f"generator: expected a torch.Generator or None; got {type(generator).__name__}")
        x = SHAPES[self.name].sample(n, self._sigma, generator)
        return (x * self.scale).float()

    def log_prob(self, x: Tensor) -> Tensor:
        r"""Exact log-density :math:`\log p(x)`, ``x: (n, 2)`` → ``(n,)`` in ``x``'s dtype.

        Values are ``-inf`` where the density is zero (off the board for a
        noiseless ``checkerboard``, or underflow far in the tails).

        Raises:
            ValueError: for sets without a closed-form density (see
                :attr:`has_density`), naming the alternatives.
        """
        fn = self._density("log_prob")
        check_tensor(x, "x", floating=True)
        check_shape(x, (None, 2), "x")
        check_finite(x, "x")
        return fn(x / self.scale, self._sigma) - 2.0 * math.log(self.scale)

    def true_energy(self) -> Energy:
        r"""The normalised energy :math:`E(x) = -\log p(x)` (``log Z = 0``).

        ``eight_gaussians`` returns a :class:`ebms.distributions.GaussianMixture`
        (float32); the other sets with a density wrap :meth:`log_prob`.
        """
        self._density("true_energy")
        if self.name == "eight_gaussians":
            return eight_gaussians_mixture(self._sigma, self.scale)
        return from_fn(lambda x: -self.log_prob(x))

    def _density(self, caller: str) -> LogProbFn:
        fn = SHAPES[self.name].log_prob
        if fn is None:
            with_density = ", ".join(n for n in TOY_NAMES if SHAPES[n].log_prob is not None)
            raise ValueError(
                f"{caller}: the {self.name!r} toy set has no closed-form density (has_density=False). "
                f"Evaluate a model on it with ebms.estimators.grid.grid_log_likelihood(energy, x, "
                f"dataset.bounds), or use a set with an exact density: {with_density}"
            )
        return fn


def get_toy(name: str, **config: Any) -> ToyDataset:
    """Look up a toy set by name (the config/CLI edge).

    Args:
        name: one of :data:`TOY_NAMES`.
        **config: ``scale`` and/or ``noise`` (see :class:`ToyDataset`).

    Raises:
        ValueError: unknown ``name`` (the message lists the valid names).
        TypeError: an unknown configuration key.
    """
    if name not in SHAPES:
        raise ValueError(f"name: unknown toy data set {name!r}; valid names are: {', '.join(TOY_NAMES)}")
    unknown = sorted(set(config) - {"scale", "noise"})
    if unknown:
        raise TypeError(f"get_toy: unknown keyword(s) {unknown}; valid keywords are: noise, scale")
    return ToyDataset(name, **config)
