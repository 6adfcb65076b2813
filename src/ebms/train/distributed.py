"""Data-parallel training under ``torchrun``: process group, gradient averaging, batch shards.

Launch any training script unchanged with::

    torchrun --standalone --nproc_per_node 2 train.py

:class:`DistributedContext.from_env` reads ``RANK``/``WORLD_SIZE``/``LOCAL_RANK``
(set by ``torchrun``); the :class:`~ebms.train.Trainer` then initialises the
process group (``gloo`` on CPU, ``nccl`` on CUDA), broadcasts rank 0's model
and objective tensors, feeds each rank its shard of every global batch, averages
gradients, and lets only rank 0 write logs, checkpoints and the progress bar.

**Why not ``DistributedDataParallel``.** DDP averages gradients with hooks
armed by the *wrapper's* ``forward``, and assumes one forward per backward.
Objectives do not fit that mould: they call ``energy(x)`` several times per
step (data, negatives, noise), run samplers that take input gradients through
the energy, and call methods such as ``log_partition`` or ``energy_and_grad``
that a DDP wrapper hides. So the trainer hands the *unwrapped* model to the
objective and, after ``backward()``, all-reduces and averages every gradient of
the model and objective parameters itself (:meth:`average_gradients`, in flat
buckets). The result equals DDP's when DDP applies and is correct when it does
not: with equal shard sizes, the average of per-rank mean losses' gradients is
the gradient of the mean loss over the global batch. Nothing in the model
changes, and the test-suite checks that two ranks with batch ``b`` end with the
same parameters as one process with batch ``2b``.

**Several machines.** Ranks are global: a rank's data shard, generator seed and global-RNG seed
depend on ``RANK`` alone (``LOCAL_RANK`` only picks the CUDA device), so ``--nnodes 2
--nproc_per_node 2`` computes exactly what ``--nproc_per_node 4`` does on one machine
(``tests/train/test_two_node.py``); the run folder must be on storage every machine sees.

**Sharding.** With ``Trainer(shard="fsdp")`` the energy's parameters are FSDP2 DTensors
(:mod:`ebms.train._fsdp`): their gradients arrive reduced from ``backward()``, so
:meth:`DistributedContext.average_gradients` and :meth:`DistributedContext.broadcast_` leave
DTensors alone and handle the rest (objective parameters, buffers) as before.

Cost per step: one small all-reduce of "which parameters have gradients", one
all-reduce per ~64 MiB bucket of gradients, one all-reduce of the step's
scalar metrics (so every rank sees the same numbers and takes the same
divergence decision).
"""

from __future__ import annotations

import atexit
import os
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import timedelta

import torch
import torch.distributed as dist
from torch import Tensor

__all__ = ["DistributedContext"]

_BUCKET_ELEMENTS = 1 << 24  # 64 MiB of float32 per all-reduce


def _env_int(env: Mapping[str, str], key: str, default: int) -> int:
    raw = env.get(key)
    if raw is None:
        return default
    try:
        return int(raw)
    except ValueError:
        raise ValueError(f"{key}: expected an integer environment variable; got {raw!r}") from None


@dataclass(frozen=True)
class DistributedContext:
    """Where this process sits in a data-parallel job (``world_size == 1``: no job).

    Attributes:
        rank: global rank, ``0 <= rank < world_size``.
        world_size: number of processes.
        local_rank: rank on this machine (selects the CUDA device).
    """

    rank: int = 0
    world_size: int = 1
    local_rank: int = 0

    def __post_init__(self) -> None:
        if self.world_size < 1 or not 0 <= self.rank < self.world_size or self.local_rank < 0:
            raise ValueError(
                f"rank/world_size/local_rank: expected 0 <= rank < world_size and local_rank >= 0; "
                f"got rank={self.rank}, world_size={self.world_size}, local_rank={self.local_rank}"
            )

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> DistributedContext:
        """Read ``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK`` (defaults: a single process).

        An already initialised process group takes precedence over the environment.
        """
        if dist.is_available() and dist.is_initialized():
            world = dist.get_world_size()
            local = _env_int(os.environ if env is None else env, "LOCAL_RANK", dist.get_rank())
            return cls(rank=dist.get_rank(), world_size=world, local_rank=local)
        env = os.environ if env is None else env
        world = _env_int(env, "WORLD_SIZE", 1)
        rank = _env_int(env, "RANK", 0)
        return cls(rank=rank, world_size=world, local_rank=_env_int(env, "LOCAL_RANK", rank))

    @property
    def enabled(self) -> bool:
        """More than one process."""
        return self.world_size > 1

    @property
    def is_main(self) -> bool:
        """Rank 0: the process that writes files and shows progress."""
        return self.rank == 0

    def default_device(self) -> torch.device:
        """``cuda:<local_rank>`` when CUDA is available, else CPU."""
        if torch.cuda.is_available():
            return torch.device("cuda", self.local_rank % torch.cuda.device_count())
        return torch.device("cpu")

    def setup(self, device: torch.device) -> None:
        """Initialise the default process group if needed (``nccl`` for CUDA, else ``gloo``).

        A group this call creates is destroyed at interpreter exit, after a barrier.
        """
        if not self.enabled:
            return
        if not dist.is_available():
            raise RuntimeError("torch.distributed is not available in this build of torch")
        if device.type == "cuda":
            torch.cuda.set_device(device)
        if dist.is_initialized():
            if dist.get_world_size() != self.world_size or dist.get_rank() != self.rank:
                raise ValueError(
                    f"distributed: process group has rank {dist.get_rank()} of {dist.get_world_size()}; "
                    f"context says rank {self.rank} of {self.world_size}"
                )
            backend = dist.get_backend()
            if device.type == "cpu" and backend == "nccl":
                raise ValueError("device: the process group uses nccl, which needs CUDA tensors; got device cpu")
            return
        new_backend = "nccl" if device.type == "cuda" else "gloo"
        dist.init_process_group(backend=new_backend, init_method="env://", rank=self.rank, world_size=self.world_size)
        atexit.register(_destroy)

    # ------------------------------------------------------------------ collectives

    def broadcast_(self, tensors: Sequence[Tensor]) -> None:
        """Overwrite ``tensors`` in place with rank 0's values."""
        if self.enabled:
            for t in tensors:
                if not _is_dtensor(t):  # FSDP2 shards: each rank holds its own part (ebms.train._fsdp)
                    dist.broadcast(t.data, src=0)

    def average_gradients(self, params: Sequence[Tensor]) -> None:
        """Replace each ``p.grad`` by its mean over ranks (in place, bucketed).

        A parameter without a gradient on every rank keeps ``grad=None``; one with
        a gradient on some ranks only gets zeros on the others before averaging.
        Parameters sharded by FSDP2 (DTensors) are left out: their backward has
        already reduce-scattered and averaged their gradients.
        """
        params = [p for p in params if not _is_dtensor(p)]
        if not self.enabled or not params:
            return
        device = params[0].device
        have = torch.tensor([p.grad is not None for p in params], dtype=torch.float32, device=device)
        dist.all_reduce(have)
        grads: list[Tensor] = []
        for p, count in zip(params, have.tolist()):
            if count == 0:
                continue
            if p.grad is None:
                p.grad = torch.zeros_like(p)
            if p.grad.is_sparse:
                raise ValueError("distributed: sparse gradients are not supported")
            grads.append(p.grad)
        buckets: dict[tuple[torch.dtype, torch.device], list[list[Tensor]]] = {}
        for g in grads:
            lists = buckets.setdefault((g.dtype, g.device), [[]])
            if lists[-1] and sum(x.numel() for x in lists[-1]) + g.numel() > _BUCKET_ELEMENTS:
                lists.append([])
            lists[-1].append(g)
        for lists in buckets.values():
            for bucket in lists:
                flat = torch.cat([g.reshape(-1) for g in bucket])
                dist.all_reduce(flat)
                flat.div_(self.world_size)
                offset = 0
                for g in bucket:
                    g.copy_(flat[offset : offset + g.numel()].view_as(g))
                    offset += g.numel()

    def mean(self, values: Tensor) -> Tensor:
        """All-reduce average of a tensor (returns ``values`` itself on one process)."""
        if not self.enabled:
            return values
        out = values.clone()
        dist.all_reduce(out)
        return out.div_(self.world_size)

    def gather_bytes(self, blob: bytes, device: torch.device) -> list[bytes]:
        """Every rank's ``blob``, in rank order, on every rank."""
        if not self.enabled:
            return [blob]
        length = torch.tensor([len(blob)], dtype=torch.int64, device=device)
        lengths = [torch.zeros_like(length) for _ in range(self.world_size)]
        dist.all_gather(lengths, length)
        size = max(int(n) for n in lengths)
        buf = torch.zeros(size, dtype=torch.uint8, device=device)
        if blob:
            buf[: len(blob)] = torch.frombuffer(bytearray(blob), dtype=torch.uint8).to(device)
        parts = [torch.empty_like(buf) for _ in range(self.world_size)]
        dist.all_gather(parts, buf)
        return [bytes(p[: int(n)].cpu().numpy().tobytes()) for p, n in zip(parts, lengths)]

    def gather_tensor(self, t: Tensor) -> list[Tensor]:
        """Every rank's ``t`` (same shape and dtype on all ranks), in rank order."""
        if not self.enabled:
            return [t]
        parts = [torch.empty_like(t) for _ in range(self.world_size)]
        dist.all_gather(parts, t.contiguous())
        return parts

    def barrier(self) -> None:
        if self.enabled:
            dist.barrier()


def _is_dtensor(t: Tensor) -> bool:
    """A ``torch.distributed.tensor.DTensor`` (none can exist before that module is imported)."""
    module = sys.modules.get("torch.distributed.tensor")
    return module is not None and isinstance(t, module.DTensor)


def _destroy() -> None:
    """Tear down a group this module created; ranks first meet at a barrier so that no rank
    closes its connections while another is still using them (gloo aborts otherwise)."""
    if not dist.is_initialized():
        return
    try:
        if dist.get_backend() == "gloo":
            dist.monitored_barrier(timeout=timedelta(seconds=60))
        else:
            dist.barrier()
    except Exception:  # a peer is gone: nothing left to synchronise with
        pass
    dist.destroy_process_group()
