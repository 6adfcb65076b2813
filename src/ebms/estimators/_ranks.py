"""Private: dealing independent pieces of an estimate to the ranks of a ``torchrun`` job and gathering them.

A piece (a block of AIS chains, one sentence length) draws from its own generator, seeded from the
user's seed and the piece's number, so what it computes does not depend on which rank computes it
nor on how many ranks there are: gathered in piece order, the pieces give every rank the result
one process computes alone. Without an initialised default process group (or with one rank) every
piece is this process's.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from typing import Any, TypeVar

import torch
import torch.distributed as dist

T = TypeVar("T")


def piece_seed(seed: int, piece: int) -> int:
    """A 63-bit seed for piece ``piece`` of a computation seeded with ``seed`` (stable across platforms)."""
    digest = hashlib.sha256(f"ebms-piece:{int(seed)}:{int(piece)}".encode()).digest()
    return int.from_bytes(digest[:8], "little") & ((1 << 63) - 1)


def piece_generator(seed: int, piece: int, device: torch.device | str | None = None) -> torch.Generator:
    g = torch.Generator(device=torch.device("cpu") if device is None else torch.device(device))
    g.manual_seed(piece_seed(seed, piece))
    return g


def rank_and_world() -> tuple[int, int]:
    """This process's rank and the number of ranks of the default group (``(0, 1)`` without one)."""
    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    return 0, 1


def my_pieces(items: Sequence[T]) -> list[T]:
    """The items this rank computes: ``items[rank::world]`` (round robin, so sorted work is shared evenly)."""
    rank, world = rank_and_world()
    return list(items[rank::world])


def gather_pieces(mine: dict[Any, T]) -> dict[Any, T]:
    """Every rank's ``{piece: result}`` merged, on every rank (``mine`` itself on one process)."""
    _, world = rank_and_world()
    if world == 1:
        return dict(mine)
    parts: list[Any] = [None] * world
    dist.all_gather_object(parts, mine)
    out: dict[Any, T] = {}
    for part in parts:
        out.update(part)
    return out
