"""``ebms._memory.release_free_memory``: freed heap blocks below the mmap threshold go back to the kernel."""

from __future__ import annotations

import ctypes
import ctypes.util
import sys

import pytest

from ebms._memory import release_free_memory


def _rss_bytes() -> int:
    with open("/proc/self/statm") as fh:
        import os

        return int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's malloc_trim and /proc are Linux's")
def test_freed_heap_blocks_leave_the_resident_set() -> None:
    name = ctypes.util.find_library("c")
    libc = ctypes.CDLL(name) if name else None
    if libc is None or getattr(libc, "malloc_trim", None) is None:
        pytest.skip("no glibc malloc_trim here")
    libc.malloc.restype, libc.malloc.argtypes = ctypes.c_void_p, [ctypes.c_size_t]
    libc.free.argtypes = [ctypes.c_void_p]
    block, n = 64 << 10, 2048  # 128 MiB in 64 KiB blocks: below the mmap threshold, so on the heap
    ptrs = [libc.malloc(block) for _ in range(n)]
    for p in ptrs:
        ctypes.memset(p, 1, block)  # touch every page
    for p in ptrs[:-1]:  # the last block stays: the heap's top cannot shrink past it by itself
        libc.free(p)
    before = _rss_bytes()
    assert release_free_memory() is True
    after = _rss_bytes()
    libc.free(ptrs[-1])
    assert before - after > 64 << 20, (before, after)  # most of the 128 MiB went back


def test_a_second_call_is_harmless() -> None:
    assert isinstance(release_free_memory(), bool)
    assert isinstance(release_free_memory(), bool)
