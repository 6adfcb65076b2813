r"""Replay buffer of persistent chains for PCD / SML training.

The buffer holds ``capacity`` chain positions. Each training step draws ``n``
distinct slots, (re)starts a few of them from the space's random
initialisation, runs the sampler from there, and writes the results back::

    x0, idx = buffer.sample(n, generator)          # (n, *event), (n,)
    x = sampler.sample(energy, x0, steps=k, generator=generator)
    buffer.update(idx, x)

Everything the buffer remembers (positions and which slots were ever written)
lives in registered buffers, so ``state_dict()`` captures it and a resumed run
continues the same chains bit for bit.

References:
    Tieleman, T. (2008). "Training restricted Boltzmann machines using
    approximations to the likelihood gradient." ICML.
    Du, Y. & Mordatch, I. (2019). "Implicit generation and generalization in
    energy-based models." NeurIPS (replay buffer with re-initialisation).
    Grathwohl, W. et al. (2020). "Your classifier is secretly an energy based
    model and you should treat it like one." ICLR (per-class buffers).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch
from torch import Tensor, nn

from ebms._checks import check_int, check_probability, check_shape, check_tensor
from ebms.spaces import Reals, Space

__all__ = ["BufferInit", "ReplayBuffer"]

#: ``init(n, generator, labels) -> x (n, *event)``: fresh starting points for restarted slots;
#: ``labels`` is the class of each drawn slot (``LongTensor (n,)``) for a buffer with classes, else ``None``.
BufferInit = Callable[[int, torch.Generator | None, Tensor | None], Tensor]


class ReplayBuffer(nn.Module):
    r"""Fixed-size store of chain positions with random re-initialisation.

    Slots that were never written hold no chain yet: :meth:`sample` always
    starts them from ``space.random``. A written slot is restarted with
    probability ``reinit_prob`` (Du & Mordatch use 0.05), which keeps some
    fresh chains exploring and stops the buffer from collapsing onto a few
    modes.

    With ``n_classes = C`` the slots are split into ``C`` contiguous blocks of
    ``capacity // C``; block ``c`` holds chains for class ``c`` (e.g. JEM's
    conditional sampling of ``x | y``). ``sample(n, g, labels=y)`` then draws
    each row from its label's block; without ``labels`` it draws from all slots.

    Restarted slots take their fresh point from ``space.random`` or, when
    given, from ``init(n, generator, labels)``: e.g. the sampler of a
    class-conditional Gaussian fitted on the data
    (:class:`~ebms.distributions.class_gaussian.ClassConditionalGaussian`),
    the informative initialisation of JEM++ (Yang & Ji, 2021), which makes
    short chains start near the data instead of in uniform noise.

    Sampling is *without* replacement, so the ``n`` chains of one step are
    distinct and :meth:`update` never writes one slot twice (writes with
    duplicate indices would be order-dependent and break bit-exact resume).

    Args:
        capacity: number of slots ``M >= 1``.
        space: the :class:`~ebms.spaces.Space` of one point (its ``random``
            gives re-initialisations), or an event shape (int or tuple), which
            means ``Reals(shape)``: re-initialisation from ``N(0, I)``.
        reinit_prob: probability in ``[0, 1]`` of restarting a drawn slot.
        n_classes: optional number of classes ``C``; must divide ``capacity``.
        dtype: storage dtype (default float32).
        init: optional ``init(n, generator, labels) -> (n, *event)`` used instead
            of ``space.random`` for fresh points; ``labels`` is the class of
            each drawn slot (``slot // slots_per_class``, ``LongTensor (n,)``)
            when the buffer has classes, else ``None``. Its output is cast to
            the storage dtype and device and passed through ``space.project``
            (a :class:`~ebms.spaces.Box` clamps). A function or bound method
            (``gaussian.sample``) is not part of ``state_dict()``: a resumed
            run must be given the same ``init``.

    Shapes:
        storage ``data: (M, *event)``; ``sample`` returns ``x: (n, *event)`` and
        ``idx: LongTensor (n,)``.

    Example:
        >>> import torch
        >>> from ebms.spaces import Box
        >>> buf = ReplayBuffer(100, Box(2, -1.0, 1.0))
        >>> g = torch.Generator().manual_seed(0)
        >>> x0, idx = buf.sample(8, g)
        >>> buf.update(idx, x0 * 0.5)
        >>> bool(buf.filled[idx].all())
        True
    """

    data: Tensor
    filled: Tensor

    def __init__(
        self,
        capacity: int,
        space: Space | int | Sequence[int],
        *,
        reinit_prob: float = 0.05,
        n_classes: int | None = None,
        dtype: torch.dtype = torch.float32,
        init: BufferInit | None = None,
    ) -> None:
        super().__init__()
        self.capacity = check_int(capacity, "capacity", minimum=1)
        if not isinstance(space, Space):
            try:
                space = Reals(space)  # type: ignore[arg-type]
            except (TypeError, ValueError):
                raise TypeError(
                    f"space: expected an ebms.spaces.Space or an event shape (int or tuple of ints); got {space!r}"
                ) from None
        self.space = space
        self.reinit_prob = check_probability(reinit_prob, "reinit_prob")
        if n_classes is not None:
            check_int(n_classes, "n_classes", minimum=1)
            if capacity % n_classes != 0:
                raise ValueError(
                    f"n_classes: expected a divisor of capacity={capacity} (equal slots per class); got {n_classes}"
                )
        self.n_classes = n_classes
        if not (isinstance(dtype, torch.dtype) and dtype.is_floating_point):
            raise TypeError(f"dtype: expected a floating-point torch.dtype; got {dtype!r}")
        if init is not None and not callable(init):
            raise TypeError(f"init: expected a callable (n, generator, labels) -> x or None; got {type(init).__name__}")
        self.init = init
        self.register_buffer("data", torch.zeros((capacity, *space.event_shape), dtype=dtype))
        self.register_buffer("filled", torch.zeros(capacity, dtype=torch.bool))

    @property
    def event_shape(self) -> tuple[int, ...]:
        """Shape of one stored point."""
        return tuple(self.space.event_shape)

    @property
    def slots_per_class(self) -> int:
        """``capacity // n_classes`` (``capacity`` when there are no classes)."""
        return self.capacity // (self.n_classes or 1)

    def slot_labels(self) -> Tensor:
        """Class of every slot, ``LongTensor (M,)`` (requires ``n_classes``)."""
        if self.n_classes is None:
            raise ValueError("slot_labels: this buffer has no classes (n_classes=None)")
        return torch.arange(self.capacity, device=self.data.device) // self.slots_per_class

    def __len__(self) -> int:
        return self.capacity

    # -- drawing ------------------------------------------------------------
    def _draw_slots(self, n: int, generator: torch.Generator | None, labels: Tensor | None) -> Tensor:
        dev = self.data.device
        if labels is None:
            if n > self.capacity:
                raise ValueError(
                    f"n: expected at most capacity={self.capacity} (sampling without replacement); got {n}"
                )
            return torch.randperm(self.capacity, generator=generator, device=dev)[:n]
        if self.n_classes is None:
            raise ValueError("labels: this buffer has no classes; construct it with n_classes=C to sample by label")
        check_tensor(labels, "labels")
        if labels.dtype != torch.long:
            raise TypeError(f"labels: expected a LongTensor; got dtype {labels.dtype}")
        check_shape(labels, (n,), "labels")
        C, m = self.n_classes, self.slots_per_class
        labels = labels.to(dev)
        counts = torch.bincount(labels.clamp(0, C - 1), minlength=C)
        lo, hi, most = torch.stack([labels.min(), labels.max(), counts.max()]).tolist()
        if lo < 0 or hi >= C:
            raise ValueError(f"labels: expected values in [0, {C - 1}]; got min {lo}, max {hi}")
        if most > m:
            raise ValueError(
                f"labels: at most slots_per_class={m} rows per class (sampling without replacement); "
                f"got {most} rows with one label"
            )
        # A random permutation of every class block; row r takes the j-th entry of its
        # label's permutation, where j is r's rank among the rows with the same label.
        perm = torch.rand((C, m), generator=generator, device=dev).argsort(dim=1)
        order = torch.argsort(labels, stable=True)
        starts = torch.cumsum(counts, 0) - counts
        rank = torch.empty_like(labels)
        rank[order] = torch.arange(n, device=dev) - starts[labels[order]]
        return labels * m + perm[labels, rank]

    def sample(
        self, n: int, generator: torch.Generator | None = None, labels: Tensor | None = None
    ) -> tuple[Tensor, Tensor]:
        """Draw ``n`` distinct slots and their starting points.

        Random draws, in this order: the slots, one uniform per row for the
        re-initialisation coin, then ``space.random(n)`` or ``init(n, generator,
        labels)`` (always drawn, so the generator advances by the same amount
        whatever the coins say).

        Args:
            n: number of chains, ``1 <= n <= capacity`` (per class when labelled).
            generator: the source of randomness.
            labels: optional ``LongTensor (n,)`` in ``[0, C)``; row ``r`` comes
                from class ``labels[r]``'s block.

        Returns:
            ``(x, idx)``: detached starting points ``(n, *event)`` (a copy) and
            slot indices ``LongTensor (n,)`` to pass back to :meth:`update`.
        """
        check_int(n, "n", minimum=1)
        idx = self._draw_slots(n, generator, labels)
        dev, dtype = self.data.device, self.data.dtype
        coin = torch.rand(n, generator=generator, device=dev) < self.reinit_prob
        fresh = self._fresh(n, generator, idx) if self.init is not None else (
            self.space.random(n, generator=generator, device=dev, dtype=dtype)
        )
        restart = coin | ~self.filled[idx]
        mask = restart.reshape(n, *([1] * len(self.event_shape)))
        x = torch.where(mask, fresh, self.data[idx])
        return x, idx

    def _fresh(self, n: int, generator: torch.Generator | None, idx: Tensor) -> Tensor:
        """``n`` points from ``init`` for slots ``idx``, checked, cast and projected into the space."""
        assert self.init is not None
        labels = None if self.n_classes is None else idx // self.slots_per_class
        x = self.init(n, generator, labels)
        name = "init(n, generator, labels)"
        check_tensor(x, name, floating=True, min_dim=1)
        check_shape(x, (n, *self.event_shape), name)
        return self.space.project(x.detach().to(device=self.data.device, dtype=self.data.dtype))

    def update(self, idx: Tensor, x: Tensor) -> None:
        """Write chain positions back: ``data[idx] = x`` and mark the slots filled.

        Args:
            idx: distinct slot indices ``LongTensor (n,)`` (from :meth:`sample`).
            x: positions ``(n, *event)``, finite; stored detached.
        """
        idx, x = self._check_update(idx, x)
        self.data[idx] = x
        self.filled[idx] = True

    def _check_update(self, idx: Tensor, x: Tensor) -> tuple[Tensor, Tensor]:
        """The checks of :meth:`update`: ``idx`` and ``x`` moved to the storage's device (``x``
        detached, in its dtype), or the one-line error."""
        check_tensor(idx, "idx")
        if idx.dtype != torch.long:
            raise TypeError(f"idx: expected a LongTensor of slot indices; got dtype {idx.dtype}")
        if idx.dim() != 1 or idx.shape[0] == 0:
            raise ValueError(f"idx: expected shape (n,) with n >= 1; got {tuple(idx.shape)}")
        n = idx.shape[0]
        check_tensor(x, "x", floating=True, min_dim=1)
        check_shape(x, (n, *self.event_shape), "x")
        idx = idx.to(self.data.device)
        x = x.detach().to(device=self.data.device, dtype=self.data.dtype)
        # one host sync for all three checks
        s = idx.sort().values
        dup = (s[1:] == s[:-1]).sum()
        lo, hi, n_dup, finite = torch.stack([s[0], s[-1], dup, torch.isfinite(x).all().long()]).tolist()
        if lo < 0 or hi >= self.capacity:
            raise ValueError(f"idx: expected slot indices in [0, {self.capacity - 1}]; got min {lo}, max {hi}")
        if n_dup:
            raise ValueError(f"idx: expected distinct slot indices; got {n_dup} duplicate(s) among {n}")
        if not finite:
            raise ValueError(f"x: expected finite chain positions; got non-finite entries in shape {tuple(x.shape)}")
        return idx, x

    def extra_repr(self) -> str:
        cls = f", n_classes={self.n_classes}" if self.n_classes is not None else ""
        init = "" if self.init is None else f", init={getattr(self.init, '__qualname__', type(self.init).__name__)}"
        return f"capacity={self.capacity}, space={self.space!r}, reinit_prob={self.reinit_prob}{cls}{init}"
