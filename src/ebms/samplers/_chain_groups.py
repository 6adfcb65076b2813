r"""Private: :class:`~ebms.samplers.TransDimensional`'s chain groups, stepped here or in forked worker processes.

With ``groups = G > 1`` a step splits the ``B`` chains into ``G`` contiguous blocks of rows
(``torch.tensor_split``), draws ``G`` seeds from the caller's generator, and steps block ``g`` with
its own generator seeded by seed ``g``. The chains of a block never read another block's, so the
blocks may run anywhere: in this process one after the other (``workers = 1``), or spread over
``workers`` processes (block ``g`` on process ``g mod workers``, process 0 being this one). Where a
block runs does not change a number: the result depends on ``G`` and the seeds only, so ``workers``
is a speed setting (a test checks ``workers = 2`` against ``workers = 1`` bit for bit).

**Workers** are forked once, with the target, and serve blocks until the sampler is collected or
the process ends (daemon processes). The target's parameters are moved to shared memory before
the fork (``Tensor.share_memory_``), so in-place updates (an optimizer's step, :math:`\zeta`'s
update) reach the workers; everything else of the target (buffers, tables, caches) is the workers'
copy from the fork, which is right for the TRF (its buffers do not change while it trains); a worker
returns its freed heap memory to the kernel every ``TRIM_EVERY`` blocks. When a
step brings another target, or one whose parameters or buffers have moved to other storage (a
loaded state dict, a rebuilt table) or whose ``training`` flags changed, the workers are replaced.
A target that is not an ``nn.Module`` cannot be shared: ``workers > 1`` refuses it. Blocks travel
as NumPy arrays through pipes (a few KB per step); errors in a worker are raised here.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import traceback
import warnings
import weakref
from typing import Any

import numpy as np
import torch
from torch import Tensor, nn

from ebms._memory import release_free_memory
from ebms.sequences import Sequences

__all__ = ["ChainWorkers", "block_generators", "blocks", "fit_threads", "usable_cpus"]  # and _INFO, the step info fields

TRIM_EVERY = 100  # blocks a worker steps between two release_free_memory calls

_INFO = ("accept_prob", "accepted", "energy", "nonfinite", "jump_accept_prob", "jumped", "move_accept_prob")


def blocks(batch_size: int, groups: int) -> list[Tensor]:
    """The rows of each of the ``groups`` contiguous blocks (some empty when ``batch_size < groups``)."""
    return list(torch.tensor_split(torch.arange(batch_size), groups))


def block_generators(groups: int, generator: torch.Generator | None, device: torch.device) -> list[int]:
    """``groups`` seeds in ``[0, 2^62)`` drawn from ``generator`` (the default generator when ``None``)."""
    gen_device = generator.device if generator is not None else torch.device("cpu")
    return torch.randint(0, 1 << 62, (groups,), generator=generator, device=gen_device).tolist()


def _signature(target: Any) -> tuple[Any, ...]:
    """What the forked copy of ``target`` must still agree with: its identity, storages and modes."""
    tensors = [*target.parameters(), *target.buffers()]
    return (id(target), tuple((t.data_ptr(), tuple(t.shape), t.dtype) for t in tensors),
            tuple(m.training for m in target.modules()))


def _pack(x: Sequences, energy: Tensor) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    return x.tokens.cpu().numpy(), x.lengths.cpu().numpy(), energy.detach().cpu().numpy()


def usable_cpus() -> int:
    """CPUs this process may run on (its affinity where the OS tells it, else ``os.cpu_count()``)."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def fit_threads(processes: int) -> None:
    """Lower this process's torch threads so that ``processes`` processes (this one and its workers, one
    thread each there) do not ask for more CPUs than there are, with one warning saying so: on two CPUs a
    trainer with two intra-op threads beside one worker runs both slower (the PTB recipe: 1.5 instead of
    2.7 steps/s). ``OMP_NUM_THREADS`` set by the user is left alone."""
    have, cpus = torch.get_num_threads(), usable_cpus()
    want = max(1, cpus - (processes - 1))
    if have > want and "OMP_NUM_THREADS" not in os.environ:
        torch.set_num_threads(want)
        warnings.warn(f"workers: {processes} processes on {cpus} CPUs: this process's torch threads lowered from "
                      f"{have} to {want} (each worker uses 1); set OMP_NUM_THREADS to choose", stacklevel=3)


def _serve(conn: Any, kernel: Any, target: Any) -> None:
    """A worker's loop: step each block it receives with the forked kernel and target."""
    torch.set_num_threads(1)
    served = 0
    while True:
        msg = conn.recv()
        if msg is None:
            return
        served += 1
        if served % TRIM_EVERY == 0:  # freed temporaries back to the kernel (ebms.train.ReleaseMemory's reason)
            release_free_memory()
        tokens, lengths, energy, t, seed = msg
        try:
            from ebms.samplers._base import ChainState
            x = Sequences(torch.from_numpy(tokens), torch.from_numpy(lengths), validate=False)
            e = torch.from_numpy(energy)
            state = ChainState(x=x, energy=e, grad=None, step_size=torch.ones((), dtype=e.dtype), t=t)
            gen = torch.Generator().manual_seed(seed)
            new, info = kernel._step_block(target, state, gen)
            conn.send(("ok", (*_pack(new.x, new.energy), [getattr(info, f).cpu().numpy() for f in _INFO])))
        except BaseException as err:  # noqa: BLE001 - sent back and raised in the parent
            conn.send(("error", f"{type(err).__name__}: {err}\n{traceback.format_exc()}"))


class ChainWorkers:
    """``n`` worker processes forked with ``kernel`` and ``target`` (see the module docstring).

    Args:
        kernel: the sampler whose ``_step_block(target, state, generator)`` the workers run.
        target: the ``nn.Module`` target; its parameters are moved to shared memory first.
        n: the number of worker processes (``workers - 1``: this process steps blocks too).
    """

    def __init__(self, kernel: Any, target: Any, n: int) -> None:
        if not isinstance(target, nn.Module):
            raise TypeError(f"workers: stepping chains in other processes needs an nn.Module target (its "
                            f"parameters are shared with them); got {type(target).__name__}: use workers=1")
        for p in target.parameters():
            p.share_memory_()
        self.signature = _signature(target)
        fit_threads(n + 1)
        ctx = mp.get_context("fork")
        self.conns, self.procs = [], []
        for _ in range(n):
            parent, child = ctx.Pipe()
            proc = ctx.Process(target=_serve, args=(child, kernel, target), daemon=True)
            proc.start()
            child.close()
            self.conns.append(parent)
            self.procs.append(proc)
        self._finalizer = weakref.finalize(self, ChainWorkers._stop, self.conns, self.procs)

    def matches(self, target: Any) -> bool:
        """Whether the workers' copy of the target is still ``target`` (same object, storages and modes)."""
        return isinstance(target, nn.Module) and _signature(target) == self.signature

    def submit(self, worker: int, x: Sequences, energy: Tensor, t: int, seed: int) -> None:
        self.conns[worker].send((*_pack(x, energy), t, seed))

    def result(self, worker: int, device: torch.device) -> tuple[Sequences, Tensor, dict[str, Tensor]]:
        """The block a worker stepped: ``(x, energy, info fields)``."""
        status, payload = self.conns[worker].recv()
        if status != "ok":
            raise RuntimeError(f"TransDimensional worker {worker + 1} failed:\n{payload}")
        tokens, lengths, energy, info = payload
        x = Sequences(torch.from_numpy(tokens).to(device), torch.from_numpy(lengths).to(device), validate=False)
        return x, torch.from_numpy(energy).to(device), {f: torch.from_numpy(v).to(device) for f, v in zip(_INFO, info)}

    def close(self) -> None:
        self._finalizer()

    @staticmethod
    def _stop(conns: list[Any], procs: list[Any]) -> None:
        for conn in conns:
            try:
                conn.send(None)
                conn.close()
            except OSError:
                pass
        for proc in procs:
            proc.join(timeout=5)
            if proc.is_alive():
                proc.terminate()
