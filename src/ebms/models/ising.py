r"""The Ising model: spins :math:`x_i \in \{-1, +1\}` with pairwise couplings and a field.

.. math::  E(x) = -\beta\Big[\sum_{i \sim j} J_{ij}\, x_i x_j + \sum_i h_i x_i\Big],
           \qquad p(x) \propto \exp(-E(x)),

each edge :math:`i \sim j` counted once (monograph Eq. 2.10, with per-edge :math:`J_{ij}` and per-site
:math:`h_i`; :math:`\beta = 1/T`). With the local field :math:`m_i = \sum_j J_{ij} x_j + h_i`,

.. math::  p(x_i = +1 \mid x_{\setminus i}) = \sigma(2 \beta m_i), \qquad \nabla_x E = -\beta\, m .

References: E. Ising (1925), "Beitrag zur Theorie des Ferromagnetismus"; S. Geman & D. Geman (1984),
"Stochastic relaxation, Gibbs distributions, and the Bayesian restoration of images".
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch
from torch import Tensor

from ebms.models._lattice import (
    DenseCouplings,
    LatticeCouplings,
    PairwiseEnergy,
    _real_tensor,
    couplings_dtype,
    couplings_module,
    resolve_beta,
)
from ebms.spaces import Spins

__all__ = ["IsingModel"]


def _spin_field(field: Any, site_shape: tuple[int, ...], n: int, dtype: torch.dtype) -> Tensor:
    """``field`` as ``(N, 1)``: a number (stored in ``dtype``, the couplings'), ``(N,)`` or ``site_shape``."""
    h = _real_tensor(field, "field", number_dtype=dtype)
    if h.numel() == 1 and h.dim() == 0:
        return h.expand(n, 1).clone()
    if tuple(h.shape) not in {(n,), site_shape}:
        shapes = " or ".join(sorted({f"({n},)", str(site_shape)}))
        raise ValueError(f"field: expected a number or shape {shapes}; got {tuple(h.shape)}")
    return h.reshape(n, 1)


class IsingModel(PairwiseEnergy):
    r"""Ising model on a lattice or on any graph given by a symmetric coupling matrix.

    Build it with :meth:`lattice` (per-edge couplings on an ``H x W`` grid; ``O(B N)`` per energy,
    the fast path for large lattices and for learning couplings) or from a coupling matrix
    ``IsingModel(J)`` (dense ``(N, N)``; ``O(B N^2)``).

    Args:
        couplings: symmetric ``(N, N)`` tensor with zero diagonal, or a prepared
            :class:`~ebms.models._lattice.LatticeCouplings` / ``DenseCouplings``. Float64 tensors are
            stored in float64 (a number ``field`` then too); other values in torch's default dtype.
        field: :math:`h`, a number or ``(N,)`` (or the lattice shape).
        beta: inverse temperature ``> 0`` (default 1); give ``beta`` or ``temperature``, not both.
        temperature: ``T = 1 / beta``.
        learn_couplings: make the couplings ``nn.Parameter`` s (matrix input only; a prepared
            couplings module keeps its own ``learnable`` setting and ``True`` here is an error).
        learn_field: make the field an ``nn.Parameter``.

    Shapes: ``x: (B, *site_shape)`` with values in {-1, +1} (``space = Spins(site_shape)``) → ``(B,)``.
    Category ``0`` is spin ``-1`` and category ``1`` is ``+1`` in the conditional logits.

    Example:
        >>> import torch
        >>> from ebms.models.ising import IsingModel
        >>> model = IsingModel.lattice(8, 8, coupling=1.0, temperature=2.5)
        >>> x = model.space.random(4, generator=torch.Generator().manual_seed(0))
        >>> model(x).shape, model.all_conditional_logits(x).shape
        (torch.Size([4]), torch.Size([4, 64, 2]))
    """

    def __init__(
        self,
        couplings: Tensor | LatticeCouplings | DenseCouplings,
        *,
        field: float | Tensor = 0.0,
        beta: float | None = None,
        temperature: float | None = None,
        learn_couplings: bool = False,
        learn_field: bool = False,
    ) -> None:
        b = resolve_beta(beta, temperature)
        couplings = couplings_module(couplings, learn_couplings)
        site_shape = tuple(couplings.site_shape)
        h = _spin_field(field, site_shape, couplings.num_sites, couplings_dtype(couplings))
        super().__init__(couplings, h, b, learn_field)
        self.space = Spins(site_shape)

    @classmethod
    def lattice(
        cls,
        height: int,
        width: int,
        coupling: float | tuple[Tensor, Tensor] = 1.0,
        *,
        field: float | Tensor = 0.0,
        beta: float | None = None,
        temperature: float | None = None,
        boundary: str = "periodic",
        learn_couplings: bool = False,
        learn_field: bool = False,
    ) -> IsingModel:
        """Ising model on an ``height x width`` square lattice (4 neighbours per site).

        Args:
            height, width: lattice size; ``space = Spins((height, width))``.
            coupling: one number for all edges, or per-edge ``(right, down)`` tensors of shape ``(H, W)``
                (``right[r, c]`` couples ``(r, c)`` and ``(r, c+1)``, ``down[r, c]`` couples ``(r, c)``
                and ``(r+1, c)``).
            boundary: ``"periodic"`` (torus) or ``"free"`` (border edges absent, held at zero).
            field, beta, temperature, learn_field: as in the constructor.
            learn_couplings: learn one coupling per edge.
        """
        lat = LatticeCouplings(height, width, coupling, boundary=boundary, learnable=learn_couplings)
        return cls(lat, field=field, beta=beta, temperature=temperature, learn_field=learn_field)

    def local_fields(self, x: Tensor) -> Tensor:
        r""":math:`m_i = \sum_j J_{ij} x_j + h_i` for every site, ``(B, N)`` (without ``beta``)."""
        return self._fields(x).squeeze(-1)

    def conditional_logits(self, x: Tensor, site: int | Tensor) -> Tensor:
        r"""Logits of :math:`p(x_{site} \mid \text{rest})` over (-1, +1): :math:`(-\beta m, \beta m)`, ``(B, 2)``.

        ``site`` is a flat site index or a ``LongTensor (B,)``; a lattice site costs ``O(B)``.
        """
        m = self.beta * self._site_fields(x, site)  # (B, 1)
        return torch.cat([-m, m], -1)

    def all_conditional_logits(self, x: Tensor) -> Tensor:
        """Every site's conditional logits given the rest, ``(B, N, 2)``: one ``J x`` product."""
        m = self.beta * self._fields(x)  # (B, N, 1)
        return torch.cat([-m, m], -1)


if TYPE_CHECKING:  # mypy checks that IsingModel offers what docs/capabilities.md lists for it
    from ebms.capabilities import (
        HasSpace,
        SupportsAllConditionalLogits,
        SupportsBlocks,
        SupportsConditionalLogits,
        SupportsEnergyAndGrad,
    )

    def _offers(
        m: IsingModel,
    ) -> tuple[SupportsEnergyAndGrad, HasSpace, SupportsConditionalLogits, SupportsAllConditionalLogits, SupportsBlocks]:
        return m, m, m, m, m
