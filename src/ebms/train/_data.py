"""Private: batch sources for the trainer (in-memory tensors or a sampling function).

* **Tensor data** ``(N, *event)`` (or a tuple of tensors sharing ``N``, e.g.
  ``(x, y)``): each epoch uses the permutation ``randperm(N)`` drawn from a
  generator seeded by ``hash(seed, epoch)``; global batches of ``world * b``
  rows are taken in order and rank ``r`` keeps rows ``[r*b, (r+1)*b)``. The last
  incomplete global batch of an epoch is dropped. The position is just
  ``(epoch, batch index)``, so resuming needs no extra RNG state, and every rank
  agrees on the permutation without communicating.
* **A stream** ``fn(batch_size, generator) -> batch``: called with the
  trainer's generator (per-rank seeds, so ranks draw different data). With
  ``batch_size=None`` the stream chooses the size of each batch (it is called
  with ``None``), e.g. near-equal splits of an epoch.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor

from ebms._checks import check_tensor

Batch = Tensor | tuple[Tensor, ...]


def mix_seed(seed: int, *salt: int) -> int:
    """A 63-bit seed derived from ``seed`` and ``salt`` (stable across runs and platforms)."""
    text = ":".join(str(v) for v in (seed, *salt)).encode()
    return int.from_bytes(hashlib.sha256(text).digest()[:8], "little") & ((1 << 63) - 1)


def to_device(batch: Batch, device: torch.device) -> Batch:
    if isinstance(batch, Tensor):
        return batch if batch.device == device else batch.to(device, non_blocking=True)
    return tuple(t.to(device, non_blocking=True) for t in batch)


def _batch_rows(batch: Any, name: str) -> int:
    if isinstance(batch, Tensor):
        check_tensor(batch, name, min_dim=1)
        return batch.shape[0]
    if isinstance(batch, tuple) and batch and all(isinstance(t, Tensor) for t in batch):
        rows = {check_tensor(t, f"{name}[{i}]", min_dim=1).shape[0] for i, t in enumerate(batch)}
        if len(rows) != 1:
            shapes = [tuple(t.shape) for t in batch]
            raise ValueError(f"{name}: expected tensors with the same first dimension; got shapes {shapes}")
        return rows.pop()
    raise TypeError(f"{name}: expected a Tensor or a tuple of Tensors; got {type(batch).__name__}")


class TensorBatches:
    """Shuffled, sharded batches from in-memory tensors (see the module docstring)."""

    def __init__(self, data: Batch, batch_size: int, *, seed: int, rank: int, world_size: int) -> None:
        self.data = data
        self.n = _batch_rows(data, "data")
        self.b, self.seed, self.rank, self.world = batch_size, seed, rank, world_size
        self.global_batch = batch_size * world_size
        self.per_epoch = self.n // self.global_batch
        if self.per_epoch == 0:
            raise ValueError(
                f"data: expected at least batch_size * world_size = {self.global_batch} rows; got {self.n}"
            )
        self.epoch, self.index = 0, 0
        self._perm: Tensor | None = None

    def describe(self) -> dict[str, Any]:
        return {"kind": "tensor", "rows": self.n}

    def _permutation(self) -> Tensor:
        if self._perm is None:
            g = torch.Generator().manual_seed(mix_seed(self.seed, self.epoch))
            self._perm = torch.randperm(self.n, generator=g)
        return self._perm

    def next(self) -> Batch:
        start = self.index * self.global_batch + self.rank * self.b
        rows = self._permutation()[start : start + self.b]
        self.index += 1
        if self.index == self.per_epoch:
            self.epoch, self.index, self._perm = self.epoch + 1, 0, None
        if isinstance(self.data, Tensor):
            return self.data[rows.to(self.data.device)]
        return tuple(t[rows.to(t.device)] for t in self.data)

    def state_dict(self) -> dict[str, int]:
        return {"epoch": self.epoch, "index": self.index}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        epoch, index = state["epoch"], state["index"]
        if not (isinstance(epoch, int) and isinstance(index, int) and epoch >= 0 and 0 <= index < self.per_epoch):
            raise ValueError(f"data position: expected epoch >= 0 and 0 <= index < {self.per_epoch}; got {state}")
        self.epoch, self.index, self._perm = epoch, index, None


class StreamBatches:
    """Batches drawn by ``fn(batch_size, generator)``; its state is the generator's.

    ``batch_size=None``: the stream picks each batch's size (any number of rows >= 1).
    """

    def __init__(self, fn: Callable[[Any, torch.Generator], Batch], batch_size: int | None,
                 generator: torch.Generator) -> None:
        self.fn, self.b, self.generator = fn, batch_size, generator

    def describe(self) -> dict[str, Any]:
        return {"kind": "stream"}

    def next(self) -> Batch:
        batch = self.fn(self.b, self.generator)
        rows = _batch_rows(batch, "data(batch_size, generator)")
        if rows == 0:
            raise ValueError("data(batch_size, generator): expected at least one row; got 0")
        if self.b is not None and rows != self.b:
            raise ValueError(f"data(batch_size, generator): expected {self.b} rows; got {rows}")
        return batch

    def state_dict(self) -> dict[str, int]:
        return {}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        return None
