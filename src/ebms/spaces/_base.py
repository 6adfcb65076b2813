"""The space contract and the continuous spaces :class:`Reals` and :class:`Box`."""

from __future__ import annotations

import abc
import math
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


def _in_dtype(value: float, dtype: torch.dtype) -> float:
    """``value`` as ``dtype`` stores it (round to nearest, as a cast or a Python scalar in a tensor
    op does), returned as a Python float; non-float dtypes keep ``value``."""
    if not dtype.is_floating_point:
        return value
    return float(torch.tensor(value, dtype=torch.float64).to(dtype))


def _short(value: float, dtype: torch.dtype) -> str:
    """The shortest decimal that reads back as ``value`` in ``dtype`` (``-3.4`` for float32's
    ``-3.4000000953674316``): messages show what the tensor holds, no more digits."""
    for digits in range(1, 18):
        text = f"{value:.{digits}g}"
        if _in_dtype(float(text), dtype) == value:
            return text
    return repr(value)


class Box(Space):
    """The box ``[low, high]^D`` (e.g. images in ``[-1, 1]``). ``project`` clamps.

    Bounds are Python floats; a tensor holds them as its dtype rounds them (``3.4`` is
    ``3.4000000953674316`` in float32). Every method works with the bounds *as the tensor's dtype
    holds them*: ``validate`` accepts exactly the values ``v`` with ``low_d <= v <= high_d``, where
    ``low_d``/``high_d`` are ``low``/``high`` rounded to nearest in ``x.dtype``, and ``project``
    and ``random`` return values in that same range, so a point they produce always passes
    ``validate`` in its own dtype (a float32 chain that starts at the edge is in the box). In
    float64 the rounded bounds are the bounds themselves.

    Args:
        event_shape: shape of one point.
        low, high: finite bounds with ``low < high``.
    """

    def __init__(self, event_shape: int | Sequence[int], low: float = -1.0, high: float = 1.0) -> None:
        self.event_shape = _as_shape(event_shape)
        try:
            low, high = float(low), float(high)
        except (TypeError, ValueError):
            raise TypeError(f"low, high: expected numbers; got low={low!r}, high={high!r}") from None
        if not (math.isfinite(low) and math.isfinite(high)):
            raise ValueError(f"low, high: expected finite bounds; got low={low}, high={high}")
        if not low < high:
            raise ValueError(f"low, high: expected low < high; got low={low}, high={high}")
        self.low, self.high = low, high

    def bounds(self, dtype: torch.dtype = torch.float64) -> tuple[float, float]:
        """``(low, high)`` as ``dtype`` holds them (rounded to nearest), as Python floats."""
        return _in_dtype(self.low, dtype), _in_dtype(self.high, dtype)

    def validate(self, x: Tensor, name: str = "x") -> Tensor:
        """Check ``x`` is a finite float batch with ``low_d <= x <= high_d`` (the bounds in ``x.dtype``)."""
        super().validate(x, name)
        lo_d, hi_d = self.bounds(x.dtype)
        lo, hi = (float(v) for v in torch.aminmax(x)) if x.numel() else (lo_d, hi_d)
        if lo < lo_d or hi > hi_d:
            raise ValueError(
                f"{name}: expected values in [{self.low}, {self.high}]; got min {_short(lo, x.dtype)}, "
                f"max {_short(hi, x.dtype)} ({x.dtype})"
            )
        return x

    def project(self, x: Tensor) -> Tensor:
        """Clamp ``x`` to the bounds as ``x.dtype`` holds them."""
        return x.clamp(*self.bounds(x.dtype))

    def random(self, n, *, generator=None, device=None, dtype=torch.float32):
        """``n`` points uniform in the box, ``(n, *event_shape)``, within the bounds as ``dtype`` holds them."""
        check_int(n, "n", minimum=1)
        if not dtype.is_floating_point:
            raise TypeError(f"dtype: expected a floating-point dtype for points of a Box; got {dtype}")
        lo_d, hi_d = self.bounds(dtype)
        if not math.isfinite(_in_dtype(self.high - self.low, dtype)):
            raise ValueError(
                f"dtype: the box [{self.low}, {self.high}] is wider than {dtype} can hold "
                f"(largest finite value {torch.finfo(dtype).max:.4g}); use a wider dtype or a smaller box"
            )
        u = torch.rand((n, *self.event_shape), generator=generator, device=device, dtype=dtype)
        # low + width * u rounds in ``dtype``; the clamp keeps a draw that rounds past an edge inside
        return (self.low + (self.high - self.low) * u).clamp_(lo_d, hi_d)

    def __repr__(self) -> str:
        return f"Box(event_shape={self.event_shape}, low={self.low}, high={self.high})"
