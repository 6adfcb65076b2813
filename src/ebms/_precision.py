r"""Mixed precision (private): the names of the precisions a user may ask for, and the autocast state.

``ebms`` runs in float32 (or the dtype of the user's tensors) unless asked otherwise. Asking for
``"bf16"`` (the :class:`~ebms.train.Trainer`'s ``precision``, :func:`ebms.energy.mixed_precision`,
the key ``train.precision``) runs the energy's forward pass under ``torch.autocast``: matrix
products and convolutions in bfloat16, the rest in float32, parameters and chain states kept in
float32. Energies and input gradients leave every evaluation in the dtype of the input
(:func:`ebms.energy.evaluate`, :func:`ebms.energy.energy_and_grad`), so Metropolis ratios, losses
and Langevin updates are never formed in bfloat16.

Whether it pays depends on the hardware. On a CPU without bfloat16 instructions (AVX2 only) a
bfloat16 product is emulated and runs tens of times *slower* than float32; on CPUs with
AVX-512 BF16 or AMX and on GPUs it can be faster. ``benchmarks/precision.py`` measures it on the
machine at hand and records the CPU's flags with the figures.

``"fp16"`` is not offered: float16 training needs loss scaling (a ``GradScaler``) and float16's
range (about :math:`6\cdot 10^4`) is easily left by unnormalised energies.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

import torch

__all__ = ["PRECISIONS", "autocast", "autocast_dtype", "check_precision", "full_precision"]

#: the precisions a user may ask for, by name: ``None`` is no autocast (the tensors' own dtype).
PRECISIONS: dict[str, torch.dtype | None] = {"fp32": None, "bf16": torch.bfloat16}

F = TypeVar("F", bound=Callable[..., Any])


def check_precision(value: Any, name: str = "precision") -> str:
    """``value`` if it names a precision of :data:`PRECISIONS`; else ``ValueError`` naming ``name``."""
    if not isinstance(value, str) or value not in PRECISIONS:
        raise ValueError(f"{name}: expected one of {sorted(PRECISIONS)} (\"bf16\": matrix products in bfloat16 "
                         f"under torch.autocast); got {value!r}")
    return value


def autocast_dtype(device_type: str) -> torch.dtype | None:
    """The dtype of the autocast active on ``device_type`` (``"cpu"``, ``"cuda"``, ...), or ``None``."""
    try:
        if not torch.is_autocast_enabled(device_type):
            return None
        return torch.get_autocast_dtype(device_type)
    except RuntimeError:  # a device type autocast does not know
        return None
    except TypeError:  # torch before the device-generic autocast queries: the CPU and CUDA ones
        if device_type == "cpu":
            return torch.get_autocast_cpu_dtype() if torch.is_autocast_cpu_enabled() else None
        if device_type == "cuda":
            return torch.get_autocast_gpu_dtype() if torch.is_autocast_enabled() else None
        return None


@contextlib.contextmanager
def autocast(precision: str, device_type: str) -> Iterator[None]:
    """``torch.autocast(device_type, dtype)`` for a precision of :data:`PRECISIONS`; nothing for ``"fp32"``."""
    dtype = PRECISIONS[check_precision(precision)]
    if dtype is None:
        yield
        return
    with torch.autocast(device_type, dtype=dtype):
        yield


def full_precision(method: F) -> F:
    """Decorate an analytic ``energy_and_grad(self, x)`` that must not run under autocast.

    Closed-form energies whose cost is a few products (Gaussians, RBMs, lattices) gain nothing
    from bfloat16 and lose their exactness (Gibbs conditionals, AIS weights): the call runs
    with autocast off on ``x``'s device, in the dtypes of ``x`` and the parameters.
    """

    @functools.wraps(method)
    def wrapper(self: Any, x: torch.Tensor, *args: Any, **kwargs: Any) -> Any:
        if autocast_dtype(x.device.type) is None:
            return method(self, x, *args, **kwargs)
        with torch.autocast(x.device.type, enabled=False):
            return method(self, x, *args, **kwargs)

    return wrapper  # type: ignore[return-value]
