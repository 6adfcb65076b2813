"""The space contract and the continuous spaces :class:`Reals` and :class:`Box`."""

from __future__ import annotations

import abc
from collections.abc import Sequence

import torch
from torch import Tensor

from ebms._checks import check_finite, check_int, check_tensor

__all__ = ["MAX_EXACT_STATES", "Box", "Reals", "Space"]

#: Largest number of states any exact computation enumerates (a space's ``enumerate`` for exact
#: tests, an exact log Z). ``2**25`` states of a few bytes each stay within a few hundred MiB.
MAX_EXACT_STATES = 1 << 25


def _as_shape(event_shape: int | Sequence[int], name: str = "event_shape") -> tuple[int, ...]:
    if isinstance(event_shape, int):
        event_shape = (event_shape,)
    shape = tuple(event_shape)
    if not all(isinstance(s, int) and not isinstance(s, bool) and s >= 1 for s in shape):
        raise ValueError(f"{name}: expected positive ints; got {event_shape!r}")
    return shape


class Space(abc.ABC):
    """Base class: a set of tensor points of shape ``event_shape``."""

    event_shape: tuple[int, ...]

    @property
    def dim(self) -> int:
        """Number of scalar coordinates of one point."""
        n = 1
        for s in self.event_shape:
            n *= s
        return n

    def validate(self, x: Tensor, name: str = "x") -> Tensor:
        """Check ``x: (B, *event_shape)`` is a finite float tensor in the space."""
        check_tensor(x, name, floating=True, min_dim=1 + len(self.event_shape))
        self._check_event_shape(x, name)
        return check_finite(x, name)

    def _check_event_shape(self, x: Tensor, name: str) -> None:
        if tuple(x.shape[1:]) != self.event_shape:
            raise ValueError(
                f"{name}: expected shape (B, {', '.join(map(str, self.event_shape))}); got {tuple(x.shape)}"
            )

    def project(self, x: Tensor) -> Tensor:
        """Map a proposal back into the space (identity for unbounded spaces)."""
        return x

    @abc.abstractmethod
    def random(
        self,
        n: int,
        *,
        generator: torch.Generator | None = None,
        device: torch.device | str | None = None,
        dtype: torch.dtype = torch.float32,
    ) -> Tensor:
        """``n`` random starting points, ``(n, *event_shape)``."""


class Reals(Space):
    """Unbounded ``R^D``. ``random`` draws ``N(0, scale^2 I)``."""

    def __init__(self, event_shape: int | Sequence[int], *, scale: float = 1.0) -> None:
        self.event_shape = _as_shape(event_shape)
        self.scale = float(scale)

    def random(self, n, *, generator=None, device=None, dtype=torch.float32):
        check_int(n, "n", minimum=1)
        return self.scale * torch.randn((n, *self.event_shape), generator=generator, device=device, dtype=dtype)

    def __repr__(self) -> str:
        return f"Reals(event_shape={self.event_shape})"


class Box(Space):
    """The box ``[low, high]^D`` (e.g. images in ``[-1, 1]``). ``project`` clamps.

    Args:
        event_shape: shape of one point.
        low, high: bounds with ``low < high``.
    """

    def __init__(self, event_shape: int | Sequence[int], low: float = -1.0, high: float = 1.0) -> None:
        self.event_shape = _as_shape(event_shape)
        low, high = float(low), float(high)
        if not low < high:
            raise ValueError(f"low, high: expected low < high; got low={low}, high={high}")
        self.low, self.high = low, high

    def validate(self, x: Tensor, name: str = "x") -> Tensor:
        super().validate(x, name)
        lo, hi = float(x.min()), float(x.max())
        if lo < self.low or hi > self.high:
            raise ValueError(f"{name}: expected values in [{self.low}, {self.high}]; got min {lo:.4g}, max {hi:.4g}")
        return x

    def project(self, x: Tensor) -> Tensor:
        return x.clamp(self.low, self.high)

    def random(self, n, *, generator=None, device=None, dtype=torch.float32):
        check_int(n, "n", minimum=1)
        u = torch.rand((n, *self.event_shape), generator=generator, device=device, dtype=dtype)
        return self.low + (self.high - self.low) * u

    def __repr__(self) -> str:
        return f"Box(event_shape={self.event_shape}, low={self.low}, high={self.high})"
