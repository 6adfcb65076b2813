"""Peak Python-heap allocation of one call, for the tests that readers stay bounded on huge claims."""

from __future__ import annotations

import tracemalloc
from collections.abc import Callable
from typing import Any


def peak_mb(fn: Callable[[], Any]) -> tuple[float, BaseException | None]:
    """Run ``fn()`` under ``tracemalloc``; return (peak MiB allocated, the exception it raised or ``None``).

    torch and numpy allocate through the traced allocator, so a reader that builds an array from a
    header's claimed size shows up here even when it then fails.
    """
    tracemalloc.start()
    err: BaseException | None = None
    try:
        fn()
    except Exception as e:  # noqa: BLE001 - returned for the caller to check
        err = e
    finally:
        peak = tracemalloc.get_traced_memory()[1] / 2**20
        tracemalloc.stop()
    return peak, err
