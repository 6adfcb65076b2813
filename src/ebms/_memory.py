"""Memory a process can still have, and allocation failures in words.

:func:`available_memory` says how many bytes this process may still allocate (the kernel's
``MemAvailable``, lowered to a cgroup limit and ``ulimit -v``; the free memory of a CUDA device);
:func:`is_allocation_failure` recognises the ways an allocation fails (``MemoryError``,
``torch.OutOfMemoryError``, the CPU allocator's ``RuntimeError``); :func:`format_bytes` and
:func:`tried_to_allocate` put sizes into messages. The command line uses them to refuse, in one
line naming the setting, what cannot fit (``ebms.cli.build.check_memory``).
:func:`release_free_memory` hands the C heap's free pages back to the kernel (glibc's
``malloc_trim``), which long training loops call now and then (:class:`ebms.train.ReleaseMemory`).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import os
import re
from typing import Any

import torch

__all__ = ["available_memory", "format_bytes", "is_allocation_failure", "release_free_memory", "tried_to_allocate"]


_ALLOCATION_TEXT = ("can't allocate memory", "defaultcpuallocator", "out of memory", "cannot allocate memory")


def is_allocation_failure(err: BaseException) -> bool:
    """Whether ``err`` says memory could not be had: :class:`MemoryError`, ``torch.OutOfMemoryError``
    (CUDA), or the ``RuntimeError`` of torch's CPU allocator (``DefaultCPUAllocator: can't allocate
    memory``)."""
    oom = getattr(torch, "OutOfMemoryError", None) or torch.cuda.OutOfMemoryError
    if isinstance(err, (MemoryError, oom)):
        return True
    return isinstance(err, RuntimeError) and any(t in str(err).lower() for t in _ALLOCATION_TEXT)


def format_bytes(nbytes: float) -> str:
    """``nbytes`` in words: ``"37.3 GiB"``, ``"512.0 MiB"``."""
    for unit, size in (("TiB", 1 << 40), ("GiB", 1 << 30), ("MiB", 1 << 20)):
        if nbytes >= size:
            return f"{nbytes / size:.1f} {unit}"
    return f"{max(nbytes, 0) / 1024:.1f} KiB"


def _read_int(path: str) -> int | None:
    try:
        with open(path) as fh:
            text = fh.read().strip()
    except OSError:
        return None
    return int(text) if text.isdigit() else None


def available_memory(device: str | torch.device = "cpu") -> int | None:
    """Bytes this process can still allocate on ``device``; ``None`` when that cannot be told.

    CPU: ``MemAvailable`` of ``/proc/meminfo``, lowered to what a cgroup (v2 ``memory.max``, v1
    ``memory.limit_in_bytes``) and an address-space limit (``ulimit -v``) still allow; elsewhere
    the physical memory. CUDA: the free memory
    of the device (``torch.cuda.mem_get_info``).
    """
    dev = torch.device(device)
    if dev.type == "cuda":
        try:
            return int(torch.cuda.mem_get_info(dev)[0])
        except (RuntimeError, AssertionError):
            return None
    if dev.type != "cpu":
        return None
    found: list[int] = []
    try:
        with open("/proc/meminfo") as fh:
            for line in fh:
                if line.startswith("MemAvailable:"):
                    found.append(int(line.split()[1]) * 1024)
    except (OSError, ValueError, IndexError):
        pass
    for limit, usage in (("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory.current"),
                         ("/sys/fs/cgroup/memory/memory.limit_in_bytes", "/sys/fs/cgroup/memory/memory.usage_in_bytes")):
        cap, used = _read_int(limit), _read_int(usage)
        if cap is not None and used is not None and cap < 1 << 60:  # "max" or a huge number: no limit
            found.append(max(cap - used, 0))
    try:  # an address-space limit (ulimit -v) counts against what this process has mapped already
        import resource

        soft = resource.getrlimit(resource.RLIMIT_AS)[0]
        if soft != resource.RLIM_INFINITY:
            with open("/proc/self/statm") as fh:
                mapped = int(fh.read().split()[0]) * os.sysconf("SC_PAGE_SIZE")
            found.append(max(soft - mapped, 0))
    except (ImportError, OSError, ValueError, IndexError):
        pass
    if not found and hasattr(os, "sysconf"):
        try:
            found.append(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))
        except (ValueError, OSError):
            pass
    return min(found) if found else None


def tried_to_allocate(err: BaseException) -> str:
    """``"tried to allocate 74.5 GiB"`` from an allocator's message, or ``""``."""
    found = re.search(r"allocate (\d+) bytes", str(err)) or re.search(r"allocate ([\d.]+) ([KMGT]i?B)", str(err))
    if found is None:
        return ""
    if found.lastindex == 1:
        return f"tried to allocate {format_bytes(int(found.group(1)))}"
    return f"tried to allocate {found.group(1)} {found.group(2)}"


def release_free_memory() -> bool:
    """Return the free pages of the C heap to the kernel (glibc's ``malloc_trim(0)``); ``True`` when
    memory was released, ``False`` when none was or the C library has no such call (macOS, Windows,
    musl).

    Why: glibc keeps the memory of freed temporaries below its mmap threshold in the process's heaps
    (the threshold rises to 32 MiB after the first large block is freed), so a loop whose steps
    allocate and free tens of MiB of tensors sees its resident memory creep up by the fragmentation
    of those heaps, step after step, though no object leaks (docs/trf-training.md measures it on the
    PTB recipe). One call takes tens of milliseconds on a heap of a few GiB. Nothing that is in use
    moves; results do not change. ``EBMS_RELEASE_MEMORY=0`` in the environment turns it off (to
    measure what it saves: ``benchmarks/recipe_memory.py --release both``).
    """
    if os.environ.get("EBMS_RELEASE_MEMORY", "1") == "0":
        return False
    trim = _malloc_trim()
    return bool(trim(0)) if trim is not None else False


@functools.cache
def _malloc_trim() -> Any:
    """glibc's ``malloc_trim`` (looked up once), or ``None`` where the C library has none."""
    name = ctypes.util.find_library("c")
    try:
        trim = None if name is None else getattr(ctypes.CDLL(name), "malloc_trim", None)
    except OSError:
        return None
    if trim is not None:
        trim.argtypes, trim.restype = [ctypes.c_size_t], ctypes.c_int
    return trim
