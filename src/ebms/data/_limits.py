"""Private: the size limits of the file readers, and bounded reading.

Every reader in :mod:`ebms.data` checks what a file *claims* (its size on disk, a header's
dimensions, a zip member's declared size) against a limit before it allocates anything, and
reads compressed data in blocks with a cap, so a lying header or a decompression bomb fails
after reading at most the limit (plus one block), never after filling memory.

A limit that is too small for a genuine file is raised by passing ``max_bytes=`` to the reader
(``data.max_mb`` on the command line); the :class:`~ebms.errors.LimitExceeded` message says so.
"""

from __future__ import annotations

import os
import zlib
from collections.abc import Callable
from pathlib import Path
from typing import IO

from ebms.errors import DataError, LimitExceeded

__all__ = ["BLOCK", "MiB", "check_max_bytes", "check_size", "file_size", "human", "read_at_most", "read_capped"]

MiB = 1 << 20
#: bytes read (or decompressed) per block by the streaming readers.
BLOCK = 1 << 20


def human(n: int) -> str:
    """``n`` bytes in readable units (``"2.0 GiB"``, ``"512 B"``)."""
    size = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if size < 1024 or unit == "TiB":
            return f"{int(size)} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return f"{n} B"  # pragma: no cover - the loop always returns


def check_max_bytes(max_bytes: int, name: str = "max_bytes") -> int:
    """``max_bytes`` as a positive int (a programmer's argument: ``ValueError`` / ``TypeError``)."""
    if isinstance(max_bytes, bool) or not isinstance(max_bytes, int):
        raise TypeError(f"{name}: expected an int number of bytes; got {type(max_bytes).__name__} {max_bytes!r}")
    if max_bytes < 1:
        raise ValueError(f"{name}: expected a number of bytes >= 1; got {max_bytes}")
    return max_bytes


def _how(max_bytes: int, needed: int, reader: str) -> str:
    mb = -(-needed // MiB)
    return (f"if the file is genuine, raise the limit: pass max_bytes={max(needed, max_bytes + 1)} to "
            f"{reader} (data.max_mb={mb} on the command line)")


def check_size(path: Path, claimed: int, max_bytes: int, what: str, reader: str) -> None:
    """Raise :class:`LimitExceeded` when ``claimed`` bytes (``what``) exceed ``max_bytes``."""
    if claimed > max_bytes:
        raise LimitExceeded(
            f"{path}: {what} is {human(claimed)} ({claimed} bytes), above the limit "
            f"max_bytes={max_bytes} ({human(max_bytes)}); {_how(max_bytes, claimed, reader)}"
        )


def file_size(path: Path, max_bytes: int, reader: str) -> int:
    """Size of ``path`` on disk, checked against ``max_bytes`` (sparse files count their full size)."""
    size = os.stat(path).st_size
    check_size(path, size, max_bytes, "the file", reader)
    return size


def read_at_most(stream: IO[bytes], n: int, path: Path, what: str,
                 on_block: Callable[[bytes], None] | None = None) -> bytearray:
    """Up to ``n`` bytes of ``stream``, read in blocks (memory grows only with the bytes that exist).

    Raises:
        DataError: a compressed stream that is corrupt or ends early (names ``path``).
    """
    out = bytearray()
    while len(out) < n:
        try:
            block = stream.read(min(BLOCK, n - len(out)))
        except EOFError:
            raise DataError(f"{path}: {what} ends early (truncated compressed stream)") from None
        except (OSError, ValueError, zlib.error) as e:  # gzip.BadGzipFile, zlib.error, zipfile's bad CRC
            raise DataError(f"{path}: {what} is corrupt ({e})") from None
        if not block:
            break
        out += block
        if on_block is not None:
            on_block(block)
    return out


def read_capped(stream: IO[bytes], cap: int, path: Path, what: str, reader: str,
                on_block: Callable[[bytes], None] | None = None) -> bytearray:
    """Read ``stream`` to its end; more than ``cap`` bytes is :class:`LimitExceeded`.

    At most ``cap + 1`` bytes are ever read, so a decompression bomb stops at the limit.

    Raises:
        LimitExceeded: the stream holds more than ``cap`` bytes.
        DataError: a compressed stream that is corrupt or ends early (names ``path``).
    """
    out = read_at_most(stream, cap + 1, path, what, on_block)
    if len(out) > cap:
        raise LimitExceeded(
            f"{path}: {what} expands to more than {human(cap)} ({cap} bytes), the limit "
            f"max_bytes={cap} (a decompression bomb, or a larger file than expected); "
            f"{_how(cap, cap + 1, reader)}"
        )
    return out
