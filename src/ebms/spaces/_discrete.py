"""Finite product spaces: :class:`Binary`, :class:`Spins`, one-hot :class:`Categorical` and
index-form :class:`CategoricalIndices`."""

from __future__ import annotations

import abc
import math
from collections.abc import Iterator, Sequence

import torch
from torch import Tensor

from ebms._checks import check_int, check_tensor
from ebms.spaces._base import Space, _as_shape

__all__ = ["Binary", "Categorical", "CategoricalIndices", "DiscreteSpace", "Spins"]


class DiscreteSpace(Space):
    r"""A finite product space: ``num_sites`` sites, each taking one of ``num_categories`` values.

    Binary, spin and one-hot states are *float* tensors so energies stay differentiable in
    ``x`` (Gibbs-with-Gradients needs :math:`\nabla_x E`); index-form states are integer
    tensors (no one-hot, for large ``K``):

    ==================  ===================  ===============================
    space               one point            site value ``k``
    ==================  ===================  ===============================
    Binary              ``(*sites)``         ``k`` in {0, 1}
    Spins               ``(*sites)``         ``2k - 1`` in {-1, +1}
    Categorical         ``(*sites, K)``      one-hot row with a 1 at ``k``
    CategoricalIndices  ``(*sites)`` int     ``k`` itself
    ==================  ===================  ===============================

    The *index view* ``indices(x) -> LongTensor (B, num_sites)`` and its inverse
    ``from_indices`` connect the two; samplers work on whichever is cheaper.
    ``site_variants(x, site)`` gives, for every chain, the ``K`` states that
    differ from ``x`` only at ``site`` — the batch a generic Gibbs update
    evaluates in one energy call.

    Attributes:
        site_shape: shape of the site grid (e.g. ``(10, 10)`` for a lattice).
        num_categories: values per site ``K``.
    """

    site_shape: tuple[int, ...]
    num_categories: int

    @property
    def num_sites(self) -> int:
        """Number of sites ``N``."""
        return math.prod(self.site_shape)

    @property
    def num_states(self) -> int:
        """``K ** N``, the size of the space."""
        return self.num_categories**self.num_sites

    @abc.abstractmethod
    def indices(self, x: Tensor) -> Tensor:
        """Category index of every site, ``LongTensor (B, N)`` (no validation)."""

    @abc.abstractmethod
    def from_indices(self, idx: Tensor, dtype: torch.dtype = torch.float32) -> Tensor:
        """The states with category indices ``idx: (B, N)`` (no validation), ``(B, *event_shape)``."""

    def check_indices(self, idx: Tensor, name: str = "indices") -> Tensor:
        """Check ``idx: (B, N)`` holds integers in ``[0, K)``."""
        check_tensor(idx, name)
        if idx.dtype.is_floating_point or idx.dtype == torch.bool:
            raise TypeError(f"{name}: expected an integer tensor; got dtype {idx.dtype}")
        if idx.dim() != 2 or idx.shape[1] != self.num_sites:
            raise ValueError(f"{name}: expected shape (B, {self.num_sites}); got {tuple(idx.shape)}")
        if idx.numel():
            lo, hi = int(idx.min()), int(idx.max())
            if lo < 0 or hi >= self.num_categories:
                raise ValueError(
                    f"{name}: expected category indices in [0, {self.num_categories - 1}]; got min {lo}, max {hi}"
                )
        return idx

    def random(self, n, *, generator=None, device=None, dtype=torch.float32):
        """``n`` uniformly random states."""
        check_int(n, "n", minimum=1)
        idx = torch.randint(self.num_categories, (n, self.num_sites), generator=generator, device=device)
        return self.from_indices(idx, dtype=dtype)

    def check_site(self, site: int | Tensor, batch: int, name: str = "site") -> int | Tensor:
        """Check ``site`` is a flat site index (``int`` in ``[0, N)``) or one per chain (``LongTensor (batch,)``)."""
        N = self.num_sites
        if isinstance(site, Tensor):
            if site.dtype != torch.long or tuple(site.shape) != (batch,):
                raise ValueError(
                    f"{name}: expected an int or a LongTensor ({batch},); got {site.dtype} {tuple(site.shape)}"
                )
        elif isinstance(site, bool) or not isinstance(site, int) or not 0 <= site < N:
            raise ValueError(f"{name}: expected an int in [0, {N - 1}] or a LongTensor (B,); got {site!r}")
        return site

    @abc.abstractmethod
    def category_values(self, dtype: torch.dtype = torch.float32, device=None) -> Tensor:
        """What a site holds for each category: ``(K,)`` scalars, or ``(K, K)`` one-hot rows."""

    def site_variants(self, x: Tensor, site: int | Tensor, *, out: Tensor | None = None) -> Tensor:
        """All ``K`` states equal to ``x`` except at ``site``, ``(B, K, *event_shape)``.

        ``site`` is one flat site index (``int``) or one per chain (``LongTensor (B,)``).
        Variant ``k`` has category ``k`` at the site. Works on the state directly
        (no round trip through the index view). ``out``: a contiguous ``(B, K, *event_shape)``
        buffer to write into (a site-by-site sampler reuses one for every site).
        """
        B, K, N = x.shape[0], self.num_categories, self.num_sites
        flat = x.reshape(B, N, -1)  # (B, N, C): C = 1 for scalar sites, K for one-hot sites
        C = flat.shape[2]
        values = self.category_values(x.dtype, x.device).reshape(K, C)
        if out is None:
            out = flat.unsqueeze(1).expand(B, K, N, C).clone()
        else:
            out = out.view(B, K, N, C)
            out.copy_(flat.unsqueeze(1).expand(B, K, N, C))
        if isinstance(site, Tensor):
            index = site.reshape(B, 1, 1, 1).expand(B, K, 1, C)
            out.scatter_(2, index, values.reshape(1, K, 1, C).expand(B, K, 1, C))
        else:
            out[:, :, site] = values
        return out.reshape(B, K, *self.event_shape)

    def enumerate(self, chunk_size: int = 1 << 16, *, device=None, dtype=torch.float32) -> Iterator[Tensor]:
        """Every state of the space in ``chunk_size`` blocks, ``(≤chunk, *event_shape)``.

        State ``s`` has site ``i`` equal to digit ``i`` of ``s`` in base ``K``
        (site 0 most significant), so chunks come in lexicographic order.
        """
        check_int(chunk_size, "chunk_size", minimum=1)
        self._check_indexable()
        K, N = self.num_categories, self.num_sites
        powers = K ** torch.arange(N - 1, -1, -1, device=device, dtype=torch.int64)
        for start in range(0, self.num_states, chunk_size):
            s = torch.arange(start, min(start + chunk_size, self.num_states), device=device, dtype=torch.int64)
            yield self.from_indices((s.unsqueeze(1) // powers) % K, dtype=dtype)

    def _check_indexable(self) -> None:
        if self.num_states > (1 << 63) - 1:
            raise ValueError(
                f"space: {self.num_categories}^{self.num_sites} states do not fit a 64-bit state index; "
                "enumeration and state_index need at most 2^63 - 1 states"
            )

    def state_index(self, x: Tensor) -> Tensor:
        """Position of each state in :meth:`enumerate` order, ``LongTensor (B,)``."""
        self._check_indexable()
        K, N = self.num_categories, self.num_sites
        powers = K ** torch.arange(N - 1, -1, -1, device=x.device, dtype=torch.int64)
        return (self.indices(x) * powers).sum(1)

    def _check_float_batch(self, x: Tensor, name: str) -> None:
        check_tensor(x, name, floating=True, min_dim=1 + len(self.event_shape))
        self._check_event_shape(x, name)


class _TwoValued(DiscreteSpace):
    low: float
    high: float

    def __init__(self, event_shape: int | Sequence[int]) -> None:
        self.event_shape = self.site_shape = _as_shape(event_shape)
        self.num_categories = 2

    def validate(self, x: Tensor, name: str = "x") -> Tensor:
        self._check_float_batch(x, name)
        bad = (x != self.low) & (x != self.high)
        if bool(bad.any()):
            v = x[bad][0].item()
            raise ValueError(
                f"{name}: expected values in {{{self.low:g}, {self.high:g}}}; got {int(bad.sum())} other value(s), "
                f"e.g. {v:.4g}"
            )
        return x

    def indices(self, x):
        return (x.reshape(x.shape[0], -1) == self.high).long()

    def from_indices(self, idx, dtype=torch.float32):
        v = idx.to(dtype) * (self.high - self.low) + self.low
        return v.reshape(idx.shape[0], *self.event_shape)

    def category_values(self, dtype=torch.float32, device=None):
        return torch.tensor([self.low, self.high], dtype=dtype, device=device)

    def flip(self, x: Tensor) -> Tensor:
        """Every site flipped (the other value)."""
        return (self.low + self.high) - x

    def __repr__(self) -> str:
        return f"{type(self).__name__}(event_shape={self.event_shape})"


class Binary(_TwoValued):
    """Binary states ``{0, 1}^sites`` as floats (pixels of binarised images, RBM units)."""

    low, high = 0.0, 1.0


class Spins(_TwoValued):
    """Spin states ``{-1, +1}^sites`` as floats (Ising models). Category 1 is ``+1``."""

    low, high = -1.0, 1.0


class Categorical(DiscreteSpace):
    """``K``-valued sites stored one-hot: one point is ``(*sites, K)`` (Potts models, tokens).

    Args:
        site_shape: shape of the site grid.
        num_categories: ``K >= 2``.

    ``indices(x)`` gives the index view ``(B, N)``; ``from_indices`` the one-hot
    view and ``one_hot`` does the same after checking the indices are in range.
    A one-hot state costs ``K`` floats per site; :class:`CategoricalIndices` stores
    the same states as one integer per site.
    """

    def __init__(self, site_shape: int | Sequence[int], num_categories: int) -> None:
        self.site_shape = _as_shape(site_shape, "site_shape")
        self.num_categories = check_int(num_categories, "num_categories", minimum=2)
        self.event_shape = (*self.site_shape, self.num_categories)

    def validate(self, x: Tensor, name: str = "x") -> Tensor:
        self._check_float_batch(x, name)
        binary = (x == 0) | (x == 1)
        if not bool(binary.all()) or not bool((x.sum(-1) == 1).all()):
            raise ValueError(
                f"{name}: expected one-hot rows over the last axis (size {self.num_categories}); "
                f"convert category indices with {type(self).__name__}.one_hot"
            )
        return x

    def one_hot(self, idx: Tensor, dtype: torch.dtype = torch.float32) -> Tensor:
        """Checked index → one-hot conversion; ``idx: (B, *site_shape)`` or ``(B, N)`` integers."""
        check_tensor(idx, "indices", min_dim=1)
        flat = idx.reshape(idx.shape[0], -1) if idx.dim() > 1 else idx.reshape(idx.shape[0], 1)
        return self.from_indices(self.check_indices(flat), dtype=dtype)

    def indices(self, x):
        return x.reshape(x.shape[0], self.num_sites, self.num_categories).argmax(-1)

    def category_values(self, dtype=torch.float32, device=None):
        return torch.eye(self.num_categories, dtype=dtype, device=device)

    def from_indices(self, idx, dtype=torch.float32):
        oh = torch.nn.functional.one_hot(idx, self.num_categories).to(dtype)
        return oh.reshape(idx.shape[0], *self.event_shape)

    def __repr__(self) -> str:
        return f"Categorical(site_shape={self.site_shape}, num_categories={self.num_categories})"


class CategoricalIndices(DiscreteSpace):
    r"""``K``-valued sites stored as category indices: one point is an integer tensor ``(*sites)``.

    The index form of :class:`Categorical` (same states, same :meth:`enumerate` order): a batch
    ``(B, *sites)`` of int64 costs ``8 B N`` bytes whatever ``K`` is, where the one-hot form costs
    ``4 B N K`` (a ``(64, 50)`` batch over ``K = 10^4`` is 25.6 kB here, 128 MB one-hot). Energies
    take the indices directly (embedding lookups), so kernels that need :math:`\nabla_x E`
    (Gibbs-with-Gradients, Langevin) do not apply; Gibbs, block Gibbs and Metropolis–Hastings do.

    Args:
        site_shape: shape of the site grid (``D`` for a fixed-length token string).
        num_categories: ``K >= 2``.
    """

    def __init__(self, site_shape: int | Sequence[int], num_categories: int) -> None:
        self.site_shape = self.event_shape = _as_shape(site_shape, "site_shape")
        self.num_categories = check_int(num_categories, "num_categories", minimum=2)

    def validate(self, x: Tensor, name: str = "x") -> Tensor:
        """Check ``x: (B, *site_shape)`` is an integer tensor with values in ``[0, K)`` (one host sync)."""
        check_tensor(x, name, min_dim=1 + len(self.event_shape))
        if x.is_floating_point() or x.is_complex() or x.dtype == torch.bool:
            raise TypeError(
                f"{name}: expected an integer tensor of category indices; got dtype {x.dtype} "
                "(one-hot rows belong to the Categorical space; take .argmax(-1) for indices)"
            )
        self._check_event_shape(x, name)
        self.check_indices(x.reshape(x.shape[0], self.num_sites), name)
        return x

    def random(self, n, *, generator=None, device=None, dtype=torch.int64):
        """``n`` uniformly random states, integer ``dtype`` (default int64)."""
        _check_integer_dtype(dtype)
        return super().random(n, generator=generator, device=device, dtype=dtype)

    def enumerate(self, chunk_size: int = 1 << 16, *, device=None, dtype=torch.int64) -> Iterator[Tensor]:
        """As :meth:`DiscreteSpace.enumerate`, as integer ``dtype`` (default int64)."""
        _check_integer_dtype(dtype)
        return super().enumerate(chunk_size, device=device, dtype=dtype)

    def indices(self, x):
        return x.reshape(x.shape[0], self.num_sites).long()

    def from_indices(self, idx, dtype=torch.int64):
        return idx.to(dtype).reshape(idx.shape[0], *self.event_shape)

    def category_values(self, dtype=torch.int64, device=None):
        return torch.arange(self.num_categories, dtype=dtype, device=device)

    def __repr__(self) -> str:
        return f"CategoricalIndices(site_shape={self.site_shape}, num_categories={self.num_categories})"


def _check_integer_dtype(dtype: torch.dtype) -> None:
    if dtype.is_floating_point or dtype.is_complex or dtype == torch.bool:
        raise TypeError(f"dtype: expected an integer dtype for category indices (e.g. torch.int64); got {dtype}")
