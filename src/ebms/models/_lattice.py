r"""Pairwise discrete models shared by :class:`~ebms.models.ising.IsingModel` and
:class:`~ebms.models.potts.PottsModel`.

Both models have the energy

.. math::  E(x) = -\beta \Big[\sum_{i \sim j} J_{ij}\,\langle x_i, x_j\rangle + \sum_i \langle h_i, x_i\rangle\Big]
           = -\beta \Big[\tfrac12 \langle x, J x\rangle + \langle h, x\rangle\Big],

each edge counted once, with ``x`` viewed as ``(B, N, C)``: ``C = 1`` for spins (``<x_i, x_j> = x_i x_j``)
and ``C = K`` for one-hot Potts states (``<x_i, x_j> = [x_i = x_j]``). Everything a sampler needs follows
from the *local field* :math:`m_i = \sum_j J_{ij} x_j + h_i` ``(B, N, C)``: the input gradient is
:math:`-\beta m` and, because :math:`J_{ii} = 0`, the single-site conditional is linear in :math:`m_i`.

The couplings come in two storage forms with the same interface (``matvec``, ``pair_energy``,
``site_field``, ``matrix``, ``colouring``):

* :class:`LatticeCouplings` — a 2-D square lattice with one coupling per edge (right and down neighbour
  of each site, two ``(H, W)`` tensors); ``J x`` costs ``O(B N C)`` through ``torch.roll``.
* :class:`DenseCouplings` — any symmetric ``(N, N)`` matrix with zero diagonal; ``J x`` is a matmul.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor, nn

from ebms._checks import check_exactly_one, check_finite, check_int, check_positive, check_tensor
from ebms._precision import full_precision
from ebms.energy import Energy
from ebms.spaces import DiscreteSpace

__all__ = ["DenseCouplings", "LatticeCouplings", "PairwiseEnergy", "greedy_colouring", "resolve_beta"]

_BOUNDARIES = ("periodic", "free")


def resolve_beta(beta: float | None, temperature: float | None) -> float:
    """Inverse temperature from ``beta`` or ``temperature = 1 / beta`` (at most one given; default 1)."""
    if beta is None and temperature is None:
        return 1.0
    if check_exactly_one(beta=beta, temperature=temperature) == "beta":
        return check_positive(beta, "beta")
    return 1.0 / check_positive(temperature, "temperature")


def _real_tensor(value: Any, name: str, *, number_dtype: torch.dtype | None = None) -> Tensor:
    """``value`` as a finite floating tensor (a copy).

    A float64 tensor stays float64, so that a float64 model built from it (and ``.double()``) holds
    exactly the given values; other tensors take torch's default dtype. Numbers and lists take
    ``number_dtype`` (default: torch's default dtype).
    """
    if not isinstance(value, Tensor):
        t = torch.as_tensor(value)
        if t.dtype == torch.bool or t.is_complex():
            raise TypeError(f"{name}: expected a real tensor; got dtype {t.dtype}")
        return check_finite(torch.as_tensor(value, dtype=number_dtype or torch.get_default_dtype()).clone(), name)
    if value.dtype == torch.bool or value.is_complex():
        raise TypeError(f"{name}: expected a real tensor; got dtype {value.dtype}")
    dtype = torch.float64 if value.dtype == torch.float64 else torch.get_default_dtype()
    return check_finite(value.detach().to(dtype).clone(), name)


def couplings_dtype(couplings: LatticeCouplings | DenseCouplings) -> torch.dtype:
    """Floating dtype the couplings are stored in (a number field is stored in it too)."""
    return couplings.weight.dtype if isinstance(couplings, DenseCouplings) else couplings.right.dtype


def couplings_module(couplings: Tensor | LatticeCouplings | DenseCouplings,
                     learn_couplings: bool) -> LatticeCouplings | DenseCouplings:
    """``couplings`` as a module: a prepared one as is (it keeps its own ``learnable`` setting, so
    ``learn_couplings`` must be False), a symmetric matrix as :class:`DenseCouplings`."""
    if not isinstance(couplings, (LatticeCouplings, DenseCouplings)):
        return DenseCouplings(couplings, learnable=learn_couplings)
    if learn_couplings:
        raise ValueError("learn_couplings: expected False with a prepared couplings module (set learnable= on the "
                         f"module instead); got True with {type(couplings).__name__}")
    return couplings


def greedy_colouring(adjacency: Tensor) -> list[Tensor]:
    """Partition the vertices of a graph into independent sets (Welsh–Powell greedy colouring).

    Vertices are coloured in order of decreasing degree, each with the smallest colour none of its
    already coloured neighbours has; at most ``max degree + 1`` colours.

    Args:
        adjacency: boolean ``(N, N)``, symmetric, no self-loops.

    Returns:
        one ``LongTensor`` of vertex indices per colour, sorted.
    """
    adj = adjacency.detach().cpu().bool()
    n = adj.shape[0]
    colour = torch.full((n,), -1, dtype=torch.long)
    for v in torch.argsort(adj.sum(1), descending=True, stable=True).tolist():
        used = set(colour[adj[v]].tolist())
        c = 0
        while c in used:
            c += 1
        colour[v] = c
    return [torch.nonzero(colour == c).flatten() for c in range(int(colour.max()) + 1)]


def _axis_colours(size: int, wraps: bool) -> Tensor:
    """A proper colouring of a path (or a cycle when ``wraps``) of ``size`` sites with colours {0, 1, 2}."""
    c = torch.arange(size) % 2
    if wraps and size % 2 == 1:
        c[-1] = 2
    return c


class LatticeCouplings(nn.Module):
    r"""Per-edge couplings of an ``H x W`` square lattice; sites are numbered row-major, ``i = r W + c``.

    ``right[r, c]`` couples site ``(r, c)`` with ``(r, c + 1)``, ``down[r, c]`` with ``(r + 1, c)``.
    With ``boundary="periodic"`` the last column (row) couples to the first; along a side shorter than
    3 the wrap-around edge would repeat an edge or be a self-loop, so it is left out there. Edges that are
    absent are held at zero by a fixed mask (and get zero gradient when learnable).

    Args:
        height, width: lattice size.
        coupling: a number for every edge, or a pair ``(right, down)`` of ``(H, W)`` tensors.
        boundary: ``"periodic"`` or ``"free"``.
        learnable: store the couplings as ``nn.Parameter`` s.

    Cost: ``matvec`` (``J x``) is four rolls, ``O(B N C)``; ``site_field`` gathers 4 neighbours, ``O(B C)``.
    """

    mask_right: Tensor
    mask_down: Tensor
    neighbours: Tensor

    def __init__(
        self,
        height: int,
        width: int,
        coupling: float | tuple[Tensor, Tensor] = 1.0,
        *,
        boundary: str = "periodic",
        learnable: bool = False,
    ) -> None:
        super().__init__()
        H, W = check_int(height, "height", minimum=1), check_int(width, "width", minimum=1)
        if boundary not in _BOUNDARIES:
            raise ValueError(f"boundary: expected one of {_BOUNDARIES}; got {boundary!r}")
        self.site_shape, self.boundary = (H, W), boundary
        self.wrap_rows = boundary == "periodic" and H >= 3  # vertical wrap-around edge (last row -> first)
        self.wrap_cols = boundary == "periodic" and W >= 3
        mask_r, mask_d = torch.ones(H, W), torch.ones(H, W)
        if not self.wrap_cols:
            mask_r[:, W - 1] = 0
        if not self.wrap_rows:
            mask_d[H - 1, :] = 0
        self.register_buffer("mask_right", mask_r)
        self.register_buffer("mask_down", mask_d)
        if isinstance(coupling, (tuple, list)):
            if len(coupling) != 2:
                raise ValueError(f"coupling: expected a number or a pair (right, down); got {len(coupling)} items")
            right, down = (_real_tensor(c, f"coupling[{k}]") for k, c in enumerate(coupling))
            for k, t in enumerate((right, down)):
                if tuple(t.shape) != (H, W):
                    raise ValueError(f"coupling[{k}]: expected shape ({H}, {W}); got {tuple(t.shape)}")
        else:
            t = _real_tensor(coupling, "coupling")
            if t.numel() != 1:
                raise ValueError(f"coupling: expected a number or a pair (right, down); got shape {tuple(t.shape)}")
            v = float(t)
            right, down = torch.full((H, W), float(v)), torch.full((H, W), float(v))
        right, down = right * mask_r, down * mask_d
        if learnable:
            self.right, self.down = nn.Parameter(right), nn.Parameter(down)
        else:
            self.register_buffer("right", right)
            self.register_buffer("down", down)
        # neighbour table (N, 4): right, left, down, up (flat indices; absent edges have zero weight)
        r, c = torch.meshgrid(torch.arange(H), torch.arange(W), indexing="ij")
        nb = torch.stack([r * W + (c + 1) % W, r * W + (c - 1) % W, ((r + 1) % H) * W + c, ((r - 1) % H) * W + c], -1)
        self.register_buffer("neighbours", nb.reshape(H * W, 4))

    @property
    def num_sites(self) -> int:
        return self.site_shape[0] * self.site_shape[1]

    def edges(self) -> tuple[Tensor, Tensor]:
        """Effective ``(right, down)`` couplings, ``(H, W)`` each, zero on absent edges."""
        return self.right * self.mask_right, self.down * self.mask_down

    def _edge_weights(self, dtype: torch.dtype) -> Tensor:
        """Coupling to each entry of the neighbour table, ``(N, 4)``."""
        jr, jd = (e.to(dtype) for e in self.edges())
        w = torch.stack([jr, jr.roll(1, 1), jd, jd.roll(1, 0)], -1)
        return w.reshape(self.num_sites, 4)

    def matvec(self, x3: Tensor) -> Tensor:
        """``J x`` for ``x3: (B, N, C)``, returns ``(B, N, C)``."""
        B, C = x3.shape[0], x3.shape[-1]
        x = x3.reshape(B, *self.site_shape, C)
        jr, jd = (e.to(x.dtype).unsqueeze(-1) for e in self.edges())
        out = jr * x.roll(-1, 2) + (jr * x).roll(1, 2) + jd * x.roll(-1, 1) + (jd * x).roll(1, 1)
        return out.reshape(B, -1, C)

    def pair_energy(self, x3: Tensor) -> Tensor:
        r""":math:`\sum_{i\sim j} J_{ij} \langle x_i, x_j\rangle`, each edge once; ``(B,)``."""
        B, C = x3.shape[0], x3.shape[-1]
        x = x3.reshape(B, *self.site_shape, C)
        jr, jd = (e.to(x.dtype) for e in self.edges())
        return (jr * (x * x.roll(-1, 2)).sum(-1)).sum((1, 2)) + (jd * (x * x.roll(-1, 1)).sum(-1)).sum((1, 2))

    def site_field(self, x3: Tensor, site: int | Tensor) -> Tensor:
        """``(J x)_site`` for one site (``int``) or one per chain (``LongTensor (B,)``): ``(B, C)``."""
        w = self._edge_weights(x3.dtype)
        if isinstance(site, Tensor):
            B, C = x3.shape[0], x3.shape[-1]
            xs = x3.gather(1, self.neighbours[site].unsqueeze(-1).expand(B, 4, C))
            return (xs * w[site].unsqueeze(-1)).sum(1)
        return (x3[:, self.neighbours[site]] * w[site].unsqueeze(-1)).sum(1)

    def matrix(self) -> Tensor:
        """The dense symmetric coupling matrix ``(N, N)`` (for tests and reporting)."""
        jr, jd = self.edges()
        nb = self.neighbours
        i = torch.arange(self.num_sites, device=nb.device).repeat(2)
        j = torch.cat([nb[:, 0], nb[:, 2]])
        v = torch.cat([jr.reshape(-1), jd.reshape(-1)])
        J = torch.zeros(self.num_sites, self.num_sites, dtype=v.dtype, device=v.device)
        J = J.index_put((i, j), v, accumulate=True)
        return J.index_put((j, i), v, accumulate=True)

    def colouring(self) -> list[Tensor]:
        """Independent sets of sites: the checkerboard when the lattice is bipartite, else 3 colours.

        A periodic side of odd length makes the lattice non-bipartite; each axis then gets a proper
        3-colouring ``a(r)``, ``b(c)`` of its cycle and site ``(r, c)`` gets ``(a(r) + b(c)) mod 3``.
        """
        H, W = self.site_shape
        a, b = _axis_colours(H, self.wrap_rows), _axis_colours(W, self.wrap_cols)
        q = 3 if bool((a == 2).any() or (b == 2).any()) else 2
        colour = ((a.unsqueeze(1) + b.unsqueeze(0)) % q).reshape(-1)
        return [torch.nonzero(colour == k).flatten() for k in range(q) if bool((colour == k).any())]

    def extra_repr(self) -> str:
        return f"site_shape={self.site_shape}, boundary={self.boundary!r}"


class DenseCouplings(nn.Module):
    r"""Couplings given as a symmetric ``(N, N)`` matrix with zero diagonal.

    Args:
        matrix: the coupling matrix; checked to be square, finite, symmetric and zero on the diagonal.
        learnable: learn the couplings of the edges present (nonzero entries) in ``matrix``; the
            effective matrix is the symmetrised parameter times that fixed edge pattern, so it stays
            symmetric and the graph (and its colouring) stays the same.

    Cost: ``matvec`` is one ``(B C, N) x (N, N)`` product; ``site_field`` is ``O(B N C)``.
    """

    edge_mask: Tensor

    def __init__(self, matrix: Tensor, *, learnable: bool = False) -> None:
        super().__init__()
        check_tensor(matrix, "couplings")
        J = _real_tensor(matrix, "couplings")
        if J.dim() != 2 or J.shape[0] != J.shape[1] or J.shape[0] < 1:
            raise ValueError(f"couplings: expected a square matrix (N, N); got shape {tuple(J.shape)}")
        asym = float((J - J.T).abs().max())
        if asym > 1e-6 * max(1.0, float(J.abs().max())):
            raise ValueError(f"couplings: expected a symmetric matrix; got max |J - J^T| = {asym:.4g}")
        diag = float(J.diagonal().abs().max())
        if diag != 0.0:
            raise ValueError(f"couplings: expected a zero diagonal (no self-couplings); got max |J_ii| = {diag:.4g}")
        J = 0.5 * (J + J.T)
        self.site_shape = (J.shape[0],)
        self.register_buffer("edge_mask", (J != 0).to(J.dtype))
        if learnable:
            self.weight = nn.Parameter(J)
        else:
            self.register_buffer("weight", J)
        self.learnable = learnable

    @property
    def num_sites(self) -> int:
        return self.site_shape[0]

    def matrix(self) -> Tensor:
        """The effective coupling matrix ``(N, N)``."""
        if not self.learnable:
            return self.weight
        return 0.5 * (self.weight + self.weight.T) * self.edge_mask

    def matvec(self, x3: Tensor) -> Tensor:
        """``J x`` for ``x3: (B, N, C)``, returns ``(B, N, C)`` (as ``x^T J``: one ``(B C, N) x (N, N)`` product)."""
        return (x3.transpose(1, 2) @ self.matrix().to(x3.dtype)).transpose(1, 2)

    def pair_energy(self, x3: Tensor) -> Tensor:
        r""":math:`\tfrac12 \langle x, J x\rangle`; ``(B,)``."""
        return 0.5 * (x3 * self.matvec(x3)).sum((1, 2))

    def site_field(self, x3: Tensor, site: int | Tensor) -> Tensor:
        """``(J x)_site`` for one site (``int``) or one per chain (``LongTensor (B,)``): ``(B, C)``."""
        rows = self.matrix().to(x3.dtype)[site]
        if isinstance(site, Tensor):
            return torch.einsum("bn,bnc->bc", rows, x3)
        return torch.einsum("n,bnc->bc", rows, x3)

    def colouring(self) -> list[Tensor]:
        """Greedy colouring of the coupling graph (:func:`greedy_colouring`)."""
        return greedy_colouring(self.edge_mask.bool())


class PairwiseEnergy(Energy):
    r"""Shared body of the Ising and Potts models: :math:`E = -\beta(\tfrac12\langle x,Jx\rangle + \langle h,x\rangle)`.

    Subclasses set ``space`` and ``_channels`` (``C``) and define the conditional logits.
    ``field`` is stored as ``(N, C)``.
    """

    space: DiscreteSpace
    field: Tensor

    def __init__(
        self, couplings: LatticeCouplings | DenseCouplings, field: Tensor, beta: float, learn_field: bool
    ) -> None:
        super().__init__()
        self.couplings = couplings
        self.beta = beta
        self.lattice_shape: tuple[int, int] | None = (
            couplings.site_shape if isinstance(couplings, LatticeCouplings) else None  # type: ignore[assignment]
        )
        if learn_field:
            self.field = nn.Parameter(field)
        else:
            self.register_buffer("field", field)
        self._blocks: list[Tensor] | None = None

    @property
    def temperature(self) -> float:
        """``1 / beta``."""
        return 1.0 / self.beta

    @property
    def num_sites(self) -> int:
        return self.couplings.num_sites

    def _flat(self, x: Tensor, name: str = "x") -> Tensor:
        """Cheap shape check (no host sync) and the ``(B, N, C)`` view."""
        ev = self.space.event_shape
        if not isinstance(x, Tensor) or not x.is_floating_point():
            got = x.dtype if isinstance(x, Tensor) else type(x).__name__
            raise TypeError(f"{name}: expected a floating-point tensor; got {got}")
        if x.dim() != 1 + len(ev) or tuple(x.shape[1:]) != ev:
            raise ValueError(f"{name}: expected shape (B, {', '.join(map(str, ev))}); got {tuple(x.shape)}")
        return x.reshape(x.shape[0], self.num_sites, -1)

    def check_input(self, x: Tensor, name: str = "x") -> Tensor:
        """Full validation of ``x`` against :attr:`space` (shape, dtype and values; one host sync)."""
        return self.space.validate(x, name)

    def forward(self, x: Tensor) -> Tensor:
        x3 = self._flat(x)
        h = self.field.to(x3.dtype)
        return -self.beta * (self.couplings.pair_energy(x3) + (x3 * h).sum((1, 2)))

    def _fields(self, x: Tensor) -> Tensor:
        x3 = self._flat(x)
        return self.couplings.matvec(x3) + self.field.to(x3.dtype)

    def _site_fields(self, x: Tensor, site: int | Tensor) -> Tensor:
        x3 = self._flat(x)
        self.space.check_site(site, x.shape[0])
        return self.couplings.site_field(x3, site) + self.field.to(x3.dtype)[site]

    @full_precision
    def energy_and_grad(self, x: Tensor) -> tuple[Tensor, Tensor]:
        r"""Analytic ``E(x)`` and :math:`\nabla_x E = -\beta (J x + h)` (detached), one ``J x`` product."""
        with torch.no_grad():
            x3 = self._flat(x)
            h = self.field.to(x3.dtype)
            jx = self.couplings.matvec(x3)
            e = -self.beta * (x3 * (0.5 * jx + h)).sum((1, 2))
            return e, (-self.beta * (jx + h)).reshape(x.shape)

    def coupling_matrix(self) -> Tensor:
        """The dense symmetric coupling matrix ``(N, N)`` (without ``beta``)."""
        return self.couplings.matrix()

    def blocks(self) -> list[Tensor]:
        """A partition of the sites into sets with no coupling inside a set (for block Gibbs)."""
        if self._blocks is None:
            self._blocks = self.couplings.colouring()
        return [b.to(self.field.device) for b in self._blocks]

    def edge_couplings(self) -> tuple[Tensor, Tensor]:
        """Lattice models only: the effective per-edge couplings ``(right, down)``, ``(H, W)`` each."""
        if not isinstance(self.couplings, LatticeCouplings):
            raise TypeError("edge_couplings: only lattice models have per-edge couplings; use coupling_matrix()")
        return self.couplings.edges()

    def extra_repr(self) -> str:
        return f"beta={self.beta:.4g}, space={self.space!r}"
