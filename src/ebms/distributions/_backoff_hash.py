r"""Cuckoo hash tables over the sorted n-gram keys of :class:`~ebms.distributions.BackoffNGram` (private).

The keys of order ``m`` (``parent_row * V + w``, sorted, distinct, non-negative) are found by
:func:`ebms.distributions._backoff_tables.find` with a binary search: about ``log2 N`` dependent,
cache-missing reads per query. Scoring a test set instead asks each key's row from a cuckoo table
(Pagh & Rodler 2004): ``S = 2**k >= 2.5 N`` slots, each holding one row, every key in one of its
two slots

.. math::  h_i(q) = \lfloor ((a_i q) \bmod 2^{64}) / 2^{64 - k} \rfloor,\quad i = 1, 2

(multiplicative hashing with odd 64-bit multipliers ``a_i``), so a lookup is two slot reads, two
key reads and two compares, the same for every query. An empty slot holds row 0: reading it is
harmless, since a row is returned only when its key equals the query.

The table is built in vectorised rounds (every pending key claims its current slot, the largest
row wins, the evicted occupant and the losers move to their other slot) and verified at the end
(every row in one of its two slots); a build that does not settle within its rounds is retried
with other multipliers, and a larger table every second try. The lookup's answer is the same as
the binary search's, whatever table was built (``tests/distributions/test_backoff_fast.py``).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

#: odd 64-bit multipliers (as signed int64) of the hash pairs, tried in turn.
_MULTIPLIERS = ((-7046029254386353131, 0x5851F42D4C957F2D), (-4658895280553007687, 0x27BB2EE687B0B0FD),
                (0x2545F4914F6CDD1D, -3335678366873096957), (0x369DEA0F31A53F85, -6939463189283549271))
#: slots per key (at least): the two-choice cuckoo table settles below a load of 1/2.
_SLOTS_PER_KEY = 2.5
#: rounds of one build before it is retried.
_ROUNDS = 500


@dataclass(frozen=True)
class CuckooTable:
    """``slots`` (``2**bits``,) rows (int32 below 2**31 rows); ``a``, ``b``: the two multipliers."""

    bits: int
    a: int
    b: int
    slots: Tensor

    def home(self, query: Tensor) -> tuple[Tensor, Tensor]:
        """The two slots of each query key."""
        shift, mask = 64 - self.bits, (1 << self.bits) - 1
        return (query * self.a >> shift) & mask, (query * self.b >> shift) & mask


def build(keys: Tensor) -> CuckooTable | None:
    """The cuckoo table of ``keys`` (sorted, distinct, >= 0); ``None`` for an empty table."""
    n = keys.numel()
    if n == 0:
        return None
    bits = max(2, int(n * _SLOTS_PER_KEY).bit_length())
    dtype = torch.int32 if n < 2**31 else torch.long
    rows = torch.arange(n, device=keys.device)
    for attempt in range(2 * len(_MULTIPLIERS)):
        a, b = _MULTIPLIERS[attempt % len(_MULTIPLIERS)]
        table = CuckooTable(bits, a, b, torch.empty(0))
        h = torch.stack(table.home(keys))  # (2, n)
        slots = torch.full((1 << bits,), -1, dtype=torch.long, device=keys.device)
        pending, side = rows, torch.zeros(n, dtype=torch.long, device=keys.device)
        for _ in range(_ROUNDS):
            if pending.numel() == 0:
                break
            target = h[side[pending], pending]
            old = slots[target]
            slots.scatter_reduce_(0, target, pending, "amax", include_self=False)
            lost = pending[slots[target] != pending]
            evicted = torch.unique(old[old >= 0])  # every claimed slot's occupant leaves it
            side[lost] ^= 1
            side[evicted] ^= 1
            pending = torch.cat([lost, evicted])
        if pending.numel() == 0:
            slots.clamp_(min=0)
            if bool(((slots[h[0]] == rows) | (slots[h[1]] == rows)).all()):
                return CuckooTable(bits, a, b, slots.to(dtype))
        if attempt % 2:
            bits += 1
    raise RuntimeError(f"no cuckoo table settled for {n} keys")  # pragma: no cover - not met in practice


def lookup(keys: Tensor, table: CuckooTable | None, query: Tensor) -> tuple[Tensor, Tensor]:
    """``(found, row)`` of each query key (1-D): ``found`` bool, ``row`` its row in ``keys`` where
    found (any valid row elsewhere). Negative queries are never found."""
    if table is None or query.numel() == 0:
        return torch.zeros_like(query, dtype=torch.bool), torch.zeros_like(query)
    h1, h2 = table.home(query)
    r1, r2 = table.slots.index_select(0, h1), table.slots.index_select(0, h2)
    f1 = keys.index_select(0, r1) == query
    found = f1 | (keys.index_select(0, r2) == query)
    return found, torch.where(f1, r1, r2).long()
