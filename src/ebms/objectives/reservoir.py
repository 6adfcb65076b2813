r"""Replay buffer whose writes follow reservoir sampling (Vitter's algorithm R).

A :class:`~ebms.objectives.buffer.ReplayBuffer` writes each chain back to the
slot it came from, so old chains are overwritten as soon as they are resumed.
Du, Li, Tenenbaum & Mordatch (2021, "Improved Contrastive Divergence Training
of Energy-Based Models", ICML) keep the buffer diverse instead with reservoir
sampling: the buffer holds a uniform random subset of *every* sample ever
offered to it.

Algorithm R (Vitter, 1985, "Random sampling with a reservoir", ACM TOMS 11(1)),
for the ``s``-th offered sample (``s = 1, 2, ...``, counted over all calls):

* ``s <= M``: store it in slot ``s - 1`` (the buffer fills in order);
* ``s > M``: draw ``j`` uniformly from ``{0, ..., s - 1}``; if ``j < M``,
  replace slot ``j``, else discard the sample.

After ``N >= M`` offers every one of them is in the buffer with probability
exactly ``M / N``. Rows of one :meth:`ReservoirBuffer.update` are offered in
row order; when two rows pick the same slot the later one stays, as in the
sequential algorithm.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from torch import Tensor

from ebms.objectives.buffer import ReplayBuffer
from ebms.spaces import Space

__all__ = ["ReservoirBuffer"]


class ReservoirBuffer(ReplayBuffer):
    r"""A :class:`~ebms.objectives.buffer.ReplayBuffer` whose writes follow reservoir sampling.

    :meth:`sample` is the parent's (``n`` distinct slots; unwritten or re-initialised
    slots start from ``space.random``). :meth:`update` ignores *where* the chains
    came from (``idx`` is only validated, as in the parent) and offers each row to
    the reservoir (module docstring): the buffer stays a uniform sample of all
    chains ever written, each kept with probability ``capacity / seen``.

    Randomness: one ``float64`` uniform per offered row, drawn from the
    ``generator`` passed to :meth:`update`, or, when that is ``None``, from the
    generator of the most recent :meth:`sample` call (so objectives that call
    ``buffer.update(idx, x)`` without a generator, such as
    :class:`~ebms.objectives.cd.PersistentContrastiveDivergence`, still draw from
    their explicit generator). The count ``seen`` is a registered buffer:
    ``state_dict()`` holds it and a resumed run continues bit for bit.

    Args:
        capacity: number of slots ``M >= 1``.
        space: the space of one point, or an event shape (see ``ReplayBuffer``).
        reinit_prob: probability of restarting a drawn slot from ``space.random``.
        dtype: storage dtype.
        **kwargs: passed on to ``ReplayBuffer`` (per-class blocks are refused:
            reservoir writes ignore classes).

    Shapes: as ``ReplayBuffer``; ``seen``: 0-d ``int64``.

    Example:
        >>> import torch
        >>> buf = ReservoirBuffer(4, 2)
        >>> g = torch.Generator().manual_seed(0)
        >>> x0, idx = buf.sample(3, g)
        >>> buf.update(idx, x0)
        >>> int(buf.seen), buf.filled.tolist()
        (3, [True, True, True, False])
    """

    seen: Tensor

    def __init__(
        self,
        capacity: int,
        space: Space | int | Sequence[int],
        *,
        reinit_prob: float = 0.05,
        dtype: torch.dtype = torch.float32,
        **kwargs: Any,
    ) -> None:
        if kwargs.get("n_classes") is not None:
            raise ValueError(
                f"n_classes: a ReservoirBuffer has no per-class blocks (reservoir writes go to any slot); "
                f"got {kwargs['n_classes']}; use ReplayBuffer for class-conditional chains"
            )
        super().__init__(capacity, space, reinit_prob=reinit_prob, dtype=dtype, **kwargs)
        self.register_buffer("seen", torch.zeros((), dtype=torch.long))
        self._last_generator: torch.Generator | None = None

    def sample(
        self, n: int, generator: torch.Generator | None = None, labels: Tensor | None = None
    ) -> tuple[Tensor, Tensor]:
        """As :meth:`ReplayBuffer.sample`; remembers ``generator`` for a following :meth:`update`."""
        self._last_generator = generator
        return super().sample(n, generator, labels)

    def update(self, idx: Tensor, x: Tensor, generator: torch.Generator | None = None) -> None:
        """Offer the rows of ``x: (n, *event)`` to the reservoir, in row order.

        Args:
            idx: ``LongTensor (n,)`` from :meth:`sample` (validated as by the parent;
                it does not choose the slots written).
            x: finite positions ``(n, *event)``, stored detached.
            generator: source of the ``n`` uniforms; ``None`` means the generator of
                the last :meth:`sample` call.
        """
        _, x = self._check_update(idx, x)
        g = generator if generator is not None else self._last_generator
        n, M, dev = x.shape[0], self.capacity, self.data.device
        s = self.seen.to(dev) + torch.arange(1, n + 1, device=dev)  # 1-based offer numbers (n,)
        u = torch.rand(n, generator=g, device=dev, dtype=torch.float64)
        j = torch.where(s <= M, s - 1, torch.floor(u * s.to(torch.float64)).long())
        keep = j < M
        rows = torch.arange(n, device=dev)
        # the last row that picks each slot wins (sequential semantics, no duplicate writes)
        last = torch.full((M,), -1, dtype=torch.long, device=dev)
        last.scatter_reduce_(0, j[keep], rows[keep], reduce="amax")
        slots = torch.nonzero(last >= 0).squeeze(-1)
        self.data[slots] = x[last[slots]]
        self.filled[slots] = True
        self.seen.add_(n)

    def extra_repr(self) -> str:
        return f"{super().extra_repr()}, seen={int(self.seen)}"
