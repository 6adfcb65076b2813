r"""Exact membership tables for the int64 feature keys of :class:`~ebms.models.trf.DiscreteFeatures`.

Both tables are built once from the sorted, distinct keys ``(F,)`` (non-negative, below :math:`2^{62}`)
and answer, for a query tensor of any shape, the index of each query in those sorted keys (0 where
absent) and whether it is there. They hold only non-persistent buffers: they follow ``.to(device)``
and add nothing to a ``state_dict`` (the owner rebuilds them from its keys).

- :class:`ProbeTable`: open addressing with linear probing, a Python loop that runs until the
  longest probe chain of the batch ends (the former ``DiscreteFeatures`` hash; kept as the reference).
- :class:`BucketTable`: bucketed two-choice (cuckoo) hashing, a fixed number of probes and no loop.

References: Knuth (1998), *The Art of Computer Programming* vol. 3, 6.4 (multiplicative hashing,
linear probing); Dietzfelbinger, Hagerup, Katajainen & Penttonen (1997), "A reliable randomized
algorithm for the closest-pair problem" (multiply-shift hashing); Azar, Broder, Karlin & Upfal (1999),
"Balanced allocations"; Pagh & Rodler (2004), "Cuckoo hashing"; Dietzfelbinger & Weidling (2007),
"Balanced allocation and dictionaries with tightly packed constant size bins"; Lemire (2019), "Fast
random integer generation in an interval" (multiply-high range reduction).
"""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn

__all__ = ["BucketTable", "ProbeTable"]

_KEY_LIMIT = 1 << 62
_M32 = 0xFFFFFFFF
_GOLDEN = -7046029254386353131  # 0x9E3779B97F4A7C15 as a signed int64
_MAX_ATTEMPTS = 32


def _check_keys(keys: Tensor) -> tuple[torch.device, Tensor]:
    """The keys' device and the checked keys on the CPU (tables are built there, then moved)."""
    if not isinstance(keys, Tensor):
        raise TypeError(f"keys: expected a torch.Tensor; got {type(keys).__name__}")
    if keys.dtype != torch.long or keys.dim() != 1:
        raise ValueError(f"keys: expected a 1-D int64 tensor; got {keys.dtype} {tuple(keys.shape)}")
    device, keys = keys.device, keys.detach().cpu()
    if keys.numel() >= 1 << 31:
        raise ValueError(f"keys: expected fewer than 2^31 keys (int32 indices); got {keys.numel()}")
    if keys.numel() and (bool((keys[1:] <= keys[:-1]).any()) or int(keys[0]) < 0 or int(keys[-1]) >= _KEY_LIMIT):
        raise ValueError("keys: expected sorted distinct keys in [0, 2^62)")
    return device, keys


def _check_query(keys: Tensor) -> Tensor:
    if not isinstance(keys, Tensor) or keys.dtype != torch.long:
        got = keys.dtype if isinstance(keys, Tensor) else type(keys).__name__
        raise TypeError(f"keys: expected an int64 tensor; got {got}")
    return keys.reshape(-1)


class ProbeTable(nn.Module):
    r"""Open-addressing hash with linear probing (load at most 1/2): the reference table.

    ``S = 2^s`` slots, :math:`s` = bit length of :math:`2F - 1`; a key starts at slot
    :math:`\lfloor (k \cdot \phi \bmod 2^{64}) / 2^{64-s} \rfloor` (Knuth's multiplicative hash,
    :math:`\phi` = 0x9E3779B97F4A7C15) and moves one slot on while the slot holds another key.

    Cost: a lookup loops, over the still unresolved queries, until the longest probe chain among them
    ends (about 1.5 probes per key on average, but tens of passes for a large batch). Memory:
    ``12 S`` bytes (int64 keys, int32 indices), :math:`24F` to :math:`48F`.

    Args:
        keys: sorted distinct int64 keys ``(F,)`` in :math:`[0, 2^{62})`.
    """

    hash_keys: Tensor
    hash_index: Tensor

    def __init__(self, keys: Tensor) -> None:
        super().__init__()
        device, keys = _check_keys(keys)
        F = keys.numel()
        self.size = F
        bits = max(1, (2 * F - 1).bit_length())
        slots = torch.full((1 << bits,), -1, dtype=torch.long)
        index = torch.full((1 << bits,), -1, dtype=torch.int32)
        self._hash_bits = bits
        pos, rem = self._hash(keys), torch.arange(F)
        while rem.numel():  # place every key at its first free slot; colliding writers retry further on
            free = slots[pos] == -1
            slots[pos[free]] = keys[rem[free]]
            won = torch.zeros_like(free)
            won[free] = slots[pos[free]] == keys[rem[free]]
            index[pos[won]] = rem[won].int()
            rem, pos = rem[~won], (pos[~won] + 1) & ((1 << bits) - 1)
        self.register_buffer("hash_keys", slots.to(device), persistent=False)
        self.register_buffer("hash_index", index.to(device), persistent=False)

    @property
    def nbytes(self) -> int:
        """Bytes held by the table."""
        return self.hash_keys.numel() * 8 + self.hash_index.numel() * 4

    def _hash(self, keys: Tensor) -> Tensor:
        """Multiplicative hash (Knuth): the top ``bits`` bits of ``key * 0x9E3779B97F4A7C15`` (mod 2^64)."""
        return ((keys * _GOLDEN) >> (64 - self._hash_bits)) & ((1 << self._hash_bits) - 1)

    def forward(self, keys: Tensor) -> tuple[Tensor, Tensor]:
        """Index of each key in the sorted keys (long, 0 where absent) and whether it is there (bool)."""
        flat = _check_query(keys)
        out = torch.full_like(flat, -1)
        pos, todo, q = self._hash(flat), torch.arange(flat.numel(), device=flat.device), flat
        mask = (1 << self._hash_bits) - 1
        while todo.numel():
            k = self.hash_keys[pos]
            hit = k == q
            out[todo[hit]] = self.hash_index[pos[hit]].long()
            go = ~(hit | (k == -1))
            todo, pos, q = todo[go], (pos[go] + 1) & mask, q[go]
        out = out.view(keys.shape)
        return out.clamp(min=0), out >= 0

    def extra_repr(self) -> str:
        return f"keys={self.size}, slots={self.hash_keys.numel()}"


def _splitmix64(x: int) -> int:
    """One step of SplitMix64 (Steele, Lea & Flood 2014) on Python ints, as a signed int64."""
    x = (x + 0x9E3779B97F4A7C15) & ((1 << 64) - 1)
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & ((1 << 64) - 1)
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & ((1 << 64) - 1)
    x ^= x >> 31
    return x - (1 << 64) if x >= 1 << 63 else x


def _multipliers(seed: int) -> tuple[int, int]:
    """The two odd 64-bit multipliers (signed) of attempt ``seed``; attempt 0 starts with Knuth's."""
    if seed == 0:
        return _GOLDEN, _splitmix64(1) | 1
    return _splitmix64(2 * seed) | 1, _splitmix64(2 * seed + 1) | 1


def _bucket(keys: Tensor, mul: int, n_buckets: int) -> Tensor:
    """Bucket of each key in ``[0, n_buckets)``: the top 32 bits ``h`` of ``key * mul`` (mod 2^64),
    then ``(h * n_buckets) >> 32`` (multiply-shift, then multiply-high range reduction)."""
    h = keys * mul
    h.bitwise_right_shift_(32).bitwise_and_(_M32).mul_(n_buckets).bitwise_right_shift_(32)
    return h


def _num_buckets(n_keys: int, width: int, load: float, attempt: int) -> int:
    """Buckets for ``n_keys`` at ``load``; 5 % more after every two failed attempts."""
    return max(1, math.ceil(n_keys / (width * load) * 1.05 ** (attempt // 2)))


def _place(choice: Tensor, n_buckets: int, width: int, max_rounds: int) -> Tensor | None:
    """Cuckoo placement of every key in one of its two buckets ``choice (F, 2)``, vectorised by rounds.

    Each round, the pending keys bound for the same bucket are ranked (a stable sort); those that fit
    take its free slots; a key that found both its buckets full evicts up to ``width`` keys of its
    target (slots picked by a hash of the bucket and round), and each evicted key moves to its other
    bucket. Returns the key id in every slot ``(n_buckets * width,)`` (-1 empty), or ``None`` after
    ``max_rounds`` rounds. Deterministic.
    """
    F = choice.shape[0]
    slot = torch.full((n_buckets * width,), -1, dtype=torch.long)
    fill = torch.zeros(n_buckets, dtype=torch.long)
    pend, side = torch.arange(F), torch.zeros(F, dtype=torch.long)
    may_evict = torch.zeros(F, dtype=torch.bool)
    for r in range(max_rounds):
        if pend.numel() == 0:
            return slot
        t = choice[pend, side]
        order = torch.argsort(t, stable=True)
        pend, side, may_evict, t = pend[order], side[order], may_evict[order], t[order]
        n = t.numel()
        head = torch.ones(n, dtype=torch.bool)
        head[1:] = t[1:] != t[:-1]
        idx = torch.arange(n)
        rank = idx - torch.cummax(torch.where(head, idx, 0), 0).values  # rank among keys bound for t
        f = fill[t]
        fits = f + rank < width
        slot[t[fits] * width + f[fits] + rank[fits]] = pend[fits]
        fill.index_add_(0, t[fits], torch.ones(int(fits.sum()), dtype=torch.long))
        over = f + rank - width  # >= 0 for the keys that did not fit, distinct within a bucket
        evict = ~fits & may_evict & (over < width)
        wait = ~fits & ~evict
        te = t[evict]
        pos = te * width + (over[evict] + ((te * _GOLDEN + r) >> 40)) % width
        victim = slot[pos]
        slot[pos] = pend[evict]
        # a victim moves to its other bucket (side 1 if it sat in its first), and evicts there if full
        vside = (choice[victim, 0] == te).long()
        flip = wait & ~may_evict  # keys that have tried one bucket only try the other, without evicting
        pend = torch.cat([victim, pend[wait]])
        side = torch.cat([vside, torch.where(flip[wait], 1 - side[wait], side[wait])])
        may_evict = torch.cat([torch.ones(victim.numel(), dtype=torch.bool), may_evict[wait] | flip[wait]])
    return slot if pend.numel() == 0 else None


class BucketTable(nn.Module):
    r"""Bucketed two-choice (cuckoo) hash: every lookup reads at most two buckets, with no loop.

    **Scheme.** ``n`` buckets of ``W = width`` slots, :math:`n = \lceil F / (W \cdot load) \rceil`.
    Key :math:`k` may live in bucket :math:`b_i(k) = \lfloor h_i(k)\, n / 2^{32} \rfloor`,
    :math:`h_i(k)` = the top 32 bits of :math:`k a_i \bmod 2^{64}` (odd multipliers :math:`a_1, a_2`),
    :math:`i = 1, 2`. Construction puts each key in its first bucket when it fits, else in its
    second, and resolves the rest by cuckoo evictions (:func:`_place`); if that does not settle within
    a bound of rounds it retries with other multipliers (and, every second retry, 5 % more buckets),
    deterministically. A bucket whose keys of first choice overflowed into their second buckets is
    flagged (the sign bit of its first index).

    **Lookup.** One row gather of :math:`b_1` for every query, compared with its ``W`` keys; a second
    row gather of :math:`b_2` only for the queries whose first bucket is flagged (about
    :math:`P(\mathrm{Poisson}(W \cdot load) > W)`: 5 % at the default ``W = 4``, load 1/2). A row holds the ``W``
    int64 keys and the ``W`` int32 indices side by side, so one random memory access answers a query.
    Empty slots hold the smallest key with its index 0, so equality alone decides, for any int64 query.

    **Memory.** ``12 n W`` bytes :math:`\approx 12 F / load` (``24 F`` at load 1/2), at most
    :class:`ProbeTable`'s ``24F``-``48F`` (beyond a few keys, where one bucket of ``W`` slots is
    larger than ProbeTable's two).

    Args:
        keys: sorted distinct int64 keys ``(F,)`` in :math:`[0, 2^{62})`, ``F < 2^{31}``.
        width: slots per bucket ``W`` (even; 4 measured fastest: a 48-byte row). load: target fill of
            the table, in (0, 1).
    """

    rows: Tensor

    def __init__(self, keys: Tensor, *, width: int = 4, load: float = 0.5) -> None:
        super().__init__()
        if isinstance(width, bool) or not isinstance(width, int) or width < 2 or width % 2:
            raise ValueError(f"width: expected an even int >= 2; got {width!r}")
        if not isinstance(load, float | int) or not 0 < load < 1:
            raise ValueError(f"load: expected a number in (0, 1); got {load!r}")
        device, keys = _check_keys(keys)
        F = keys.numel()
        self.size, self.width = F, width
        for attempt in range(_MAX_ATTEMPTS):
            n = _num_buckets(F, width, load, attempt)
            mul = _multipliers(attempt)
            choice = torch.stack((_bucket(keys, mul[0], n), _bucket(keys, mul[1], n)), 1)
            slot = _place(choice, n, width, max_rounds=200 + 2 * width)
            if slot is not None:
                break
        else:  # pragma: no cover - needs 32 independent hash pairs to fail on distinct keys
            raise RuntimeError(f"BucketTable: could not place {F} keys after {_MAX_ATTEMPTS} attempts")
        self.seed, self.n_buckets, self._mul = attempt, n, mul
        ids = slot.view(n, width)
        filled = ids >= 0
        kslot = torch.where(filled, keys[ids.clamp(min=0)] if F else ids, keys[0] if F else -1)
        ids = ids.clamp(min=0).int()
        # flag the first buckets of keys that live in their second bucket
        placed = slot[slot >= 0]
        b = torch.arange(n * width)[slot >= 0] // width
        moved = placed[choice[placed, 0] != b]
        ids[choice[moved, 0], 0] |= torch.iinfo(torch.int32).min
        self.register_buffer("rows", torch.cat([kslot, ids.view(torch.long)], 1).to(device), persistent=False)

    @property
    def nbytes(self) -> int:
        """Bytes held by the table."""
        return self.rows.numel() * 8

    def _probe(self, q: Tensor, mul: int) -> tuple[Tensor, Tensor, Tensor]:
        """Found ``(N,)``, index (valid where found) and first-bucket flag of queries ``q (N,)``."""
        W = self.width
        row = self.rows.index_select(0, _bucket(q, mul, self.n_buckets))  # (N, W + W / 2) int64
        hit = row[:, :W] == q[:, None]
        meta = row[:, W:].view(torch.int32)  # (N, W): indices, flag in the sign bit of column 0
        # the key's index (0 where absent); repeats of the smallest key in empty slots all carry index 0
        idx = ((meta & 0x7FFFFFFF) * hit).sum(1)
        return hit.any(1), idx, meta[:, 0] < 0

    def forward(self, keys: Tensor) -> tuple[Tensor, Tensor]:
        """Index of each key in the sorted keys (long, 0 where absent) and whether it is there (bool)."""
        flat = _check_query(keys)
        if self.size == 0 or flat.numel() == 0:
            return torch.zeros_like(keys), torch.zeros(keys.shape, dtype=torch.bool, device=keys.device)
        found, idx, flag = self._probe(flat, self._mul[0])
        again = flag.nonzero().squeeze(1)  # first bucket overflowed: the key may be in its second
        f2, i2, _ = self._probe(flat[again], self._mul[1])
        found[again] |= f2
        idx[again] = torch.where(f2, i2, idx[again])  # both probes agree when both find it (b_1 = b_2)
        return idx.view(keys.shape), found.view(keys.shape)

    def extra_repr(self) -> str:
        return f"keys={self.size}, buckets={self.n_buckets}, width={self.width}, seed={self.seed}"
