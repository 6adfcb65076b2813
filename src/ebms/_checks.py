"""Shared input checks for public boundaries.

Every check raises ``ValueError``/``TypeError`` naming the argument, what was
expected and what was received, e.g.::

    x: expected a finite tensor; got 3 NaN and 0 Inf entries in shape (8, 2)

Checks that need a host sync (``check_finite``) belong at public entry points
(``sampler.init``, an objective's data batch, the trainer), never inside a
per-step loop.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import torch
from torch import Tensor

__all__ = [
    "check_bool",
    "check_choice",
    "check_energy_output",
    "check_exactly_one",
    "check_finite",
    "check_in_range",
    "check_int",
    "check_positive",
    "check_probability",
    "check_representable",
    "check_shape",
    "check_tensor",
]


def _shape(t: Tensor) -> tuple[int, ...]:
    return tuple(t.shape)


def check_tensor(x: Any, name: str, *, floating: bool = False, min_dim: int = 0) -> Tensor:
    """``x`` is a tensor (optionally floating point) with at least ``min_dim`` dims."""
    if not isinstance(x, Tensor):
        raise TypeError(f"{name}: expected a torch.Tensor; got {type(x).__name__}")
    if floating and not x.is_floating_point():
        raise TypeError(f"{name}: expected a floating-point tensor; got dtype {x.dtype}")
    if x.dim() < min_dim:
        raise ValueError(
            f"{name}: expected at least {min_dim} dimension(s) (batch first); got shape {_shape(x)}"
        )
    return x


def check_shape(x: Tensor, expected: Sequence[int | None], name: str) -> Tensor:
    """Exact shape match; ``None`` in ``expected`` matches any size. Never broadcasts."""
    exp = tuple(expected)
    got = _shape(x)
    ok = len(got) == len(exp) and all(e is None or e == g for e, g in zip(exp, got))
    if not ok:
        shown = tuple("*" if e is None else e for e in exp)
        raise ValueError(f"{name}: expected shape {shown}; got {got}")
    return x


def check_bool_mask(mask: Any, shape: Sequence[int], name: str) -> Tensor | None:
    """An optional bool mask of exactly ``shape`` (``None`` passes through): a TypeError for
    another dtype, a ValueError for another shape, both naming ``name``."""
    if mask is None:
        return None
    check_tensor(mask, name)
    want = tuple(shape)
    if mask.dtype != torch.bool:
        raise TypeError(f"{name}: expected a bool tensor of shape {want}; got dtype {mask.dtype}")
    if tuple(mask.shape) != want:
        raise ValueError(f"{name}: expected a bool tensor of shape {want}; got shape {tuple(mask.shape)}")
    return mask


def check_finite(x: Tensor, name: str) -> Tensor:
    """No NaN or Inf entries (one host sync).

    Fast path: the sum of finite entries is finite unless it overflows, so the
    elementwise scan (and its boolean temporary) runs only when ``x.sum()`` is
    not finite.
    """
    if (x.is_floating_point() or x.is_complex()) and x.numel() > 0:
        if bool(torch.isfinite(x.sum())):
            return x
        bad = ~torch.isfinite(x)
        if bool(bad.any()):
            n_nan = int(torch.isnan(x).sum())
            n_inf = int(bad.sum()) - n_nan
            raise ValueError(
                f"{name}: expected a finite tensor; got {n_nan} NaN and {n_inf} Inf "
                f"entries in shape {_shape(x)}"
            )
    return x


def check_energy_output(e: Any, batch: int, name: str = "energy(x)") -> Tensor:
    """An energy must return a tensor of shape ``(B,)``; a ``(B, 1)`` output is an error."""
    if not isinstance(e, Tensor):
        raise TypeError(f"{name}: expected a tensor of shape ({batch},); got {type(e).__name__}")
    if e.dim() != 1 or e.shape[0] != batch:
        hint = ""
        if e.dim() == 2 and e.shape == (batch, 1):
            hint = " (squeeze the last dimension: return out.squeeze(-1))"
        raise ValueError(f"{name}: expected shape ({batch},); got {_shape(e)}{hint}")
    return e


def check_positive(value: Any, name: str, *, allow_zero: bool = False) -> float:
    """A finite positive (or non-negative) real number."""
    try:
        v = float(value)
    except (TypeError, ValueError):
        raise TypeError(f"{name}: expected a number; got {value!r}") from None
    if not math.isfinite(v) or v < 0 or (v == 0 and not allow_zero):
        rel = ">= 0" if allow_zero else "> 0"
        raise ValueError(f"{name}: expected a finite number {rel}; got {value!r}")
    return v


def check_probability(value: Any, name: str, *, open_low: bool = False, open_high: bool = False) -> float:
    """A number in [0, 1] (ends optionally open)."""
    try:
        v = float(value)
    except (TypeError, ValueError):
        raise TypeError(f"{name}: expected a number in [0, 1]; got {value!r}") from None
    lo_bad = v <= 0 if open_low else v < 0
    hi_bad = v >= 1 if open_high else v > 1
    if not math.isfinite(v) or lo_bad or hi_bad:
        lo = "(" if open_low else "["
        hi = ")" if open_high else "]"
        raise ValueError(f"{name}: expected a number in {lo}0, 1{hi}; got {value!r}")
    return v


def check_bool(value: Any, name: str) -> bool:
    """A ``bool`` (``0``, ``1`` and NumPy booleans rejected)."""
    if not isinstance(value, bool):
        raise TypeError(f"{name}: expected a bool; got {value!r}")
    return value


def check_choice(value: Any, name: str, valid: Sequence[str]) -> str:
    """One of the names ``valid`` (the message lists them quoted)."""
    if value not in valid:
        raise ValueError(f"{name}: expected one of {', '.join(map(repr, valid))}; got {value!r}")
    return value


def check_int(value: Any, name: str, *, minimum: int | None = None) -> int:
    """An integer (bool rejected), optionally at least ``minimum``."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name}: expected an int; got {value!r} ({type(value).__name__})")
    if minimum is not None and value < minimum:
        raise ValueError(f"{name}: expected an int >= {minimum}; got {value}")
    return value


def check_in_range(value: Any, name: str, low: float, high: float) -> float:
    """A number with ``low <= value <= high``."""
    try:
        v = float(value)
    except (TypeError, ValueError):
        raise TypeError(f"{name}: expected a number in [{low}, {high}]; got {value!r}") from None
    if not (low <= v <= high):
        raise ValueError(f"{name}: expected a number in [{low}, {high}]; got {value!r}")
    return v


def check_exactly_one(**kwargs: Any) -> str:
    """Exactly one of the keyword arguments is not ``None``; returns its name."""
    given = [k for k, v in kwargs.items() if v is not None]
    if len(given) != 1:
        names = ", ".join(kwargs)
        raise ValueError(f"expected exactly one of ({names}); got {given or 'none'}")
    return given[0]


def check_representable(value: float, name: str, dtype: torch.dtype) -> float:
    """A positive finite ``value`` stays positive and finite once stored as ``dtype``.

    ``1e308`` is a finite Python float but ``inf`` in float32, and ``1e-50``
    becomes ``0``: a step size or noise scale that silently turns into either
    would leave every chain where it started. Returns ``value`` as stored in
    ``dtype`` (a Python float).

    Raises:
        ValueError: naming ``name``, the value, the dtype and its limits.
    """
    if not dtype.is_floating_point:
        return float(value)
    stored = float(torch.tensor(float(value), dtype=dtype))
    info = torch.finfo(dtype)
    if not math.isfinite(stored):
        raise ValueError(
            f"{name}: {value!r} overflows to inf in {dtype} (largest finite value {info.max:.4g}); "
            f"use a smaller {name}"
        )
    if value > 0 and stored == 0:
        raise ValueError(
            f"{name}: {value!r} underflows to 0 in {dtype} (smallest positive value {info.tiny:.4g}); "
            f"use a larger {name}"
        )
    return stored
