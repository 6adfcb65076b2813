r"""The Potts model: ``K``-valued sites that prefer to agree with their neighbours.

.. math::  E(x) = -\beta\Big[\sum_{i \sim j} J_{ij}\, [x_i = x_j] + \sum_i h_i[x_i]\Big],
           \qquad p(x) \propto \exp(-E(x)),

each edge counted once. States are one-hot (``space = Categorical(site_shape, K)``), so
:math:`[x_i = x_j] = \langle x_i, x_j\rangle` and the energy is a quadratic form in the one-hot input.
With the local field :math:`m_{ik} = \sum_j J_{ij} x_{jk} + h_{ik}`,

.. math::  p(x_i = k \mid x_{\setminus i}) = \mathrm{softmax}_k(\beta\, m_{ik}), \qquad
           \nabla_x E = -\beta\, m .

``K = 2`` is an Ising model with couplings :math:`J/2` (up to a constant).

References: R. B. Potts (1952), "Some generalized order-disorder transformations"; F. Y. Wu (1982),
"The Potts model".
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch
from torch import Tensor

from ebms._checks import check_int
from ebms.models._lattice import (
    DenseCouplings,
    LatticeCouplings,
    PairwiseEnergy,
    _real_tensor,
    couplings_dtype,
    couplings_module,
    resolve_beta,
)
from ebms.spaces import Categorical

__all__ = ["PottsModel"]


def _category_field(field: Any, site_shape: tuple[int, ...], n: int, k: int, dtype: torch.dtype) -> Tensor:
    """``field`` as ``(N, K)``: a number (stored in ``dtype``, the couplings'), ``(K,)`` (same for every
    site), ``(N, K)`` or ``(*site_shape, K)``."""
    h = _real_tensor(field, "field", number_dtype=dtype)
    if h.dim() == 0:
        return h.expand(n, k).clone()
    if tuple(h.shape) == (k,):
        return h.expand(n, k).clone()
    if tuple(h.shape) not in {(n, k), (*site_shape, k)}:
        shapes = " or ".join(sorted({f"({k},)", f"({n}, {k})", str((*site_shape, k))}))
        raise ValueError(f"field: expected a number or shape {shapes}; got {tuple(h.shape)}")
    return h.reshape(n, k)


class PottsModel(PairwiseEnergy):
    r"""Potts model on a lattice or on any graph given by a symmetric coupling matrix.

    Build it with :meth:`lattice` (per-edge couplings on an ``H x W`` grid, ``O(B N K)`` per energy) or
    from a coupling matrix ``PottsModel(J, num_categories=K)`` (``O(B N^2 K)``).

    Args:
        couplings: symmetric ``(N, N)`` tensor with zero diagonal, or a prepared
            :class:`~ebms.models._lattice.LatticeCouplings` / ``DenseCouplings``. Float64 tensors are
            stored in float64 (a number ``field`` then too); other values in torch's default dtype.
        num_categories: ``K >= 2``.
        field: :math:`h`, a number, ``(K,)`` (shared by all sites), ``(N, K)`` or ``(*site_shape, K)``.
        beta: inverse temperature ``> 0`` (default 1); give ``beta`` or ``temperature``, not both.
        temperature: ``T = 1 / beta``.
        learn_couplings: make the couplings ``nn.Parameter`` s (matrix input only).
        learn_field: make the field an ``nn.Parameter``.

    Shapes: ``x: (B, *site_shape, K)`` one-hot → ``(B,)``. Convert category indices with
    ``model.space.one_hot(idx)`` (checks the range).

    Example:
        >>> import torch
        >>> from ebms.models.potts import PottsModel
        >>> model = PottsModel.lattice(5, 5, 3, coupling=1.0, beta=1.0)
        >>> x = model.space.random(4, generator=torch.Generator().manual_seed(0))
        >>> model(x).shape, model.conditional_logits(x, 7).shape
        (torch.Size([4]), torch.Size([4, 3]))
    """

    def __init__(
        self,
        couplings: Tensor | LatticeCouplings | DenseCouplings,
        num_categories: int,
        *,
        field: float | Tensor = 0.0,
        beta: float | None = None,
        temperature: float | None = None,
        learn_couplings: bool = False,
        learn_field: bool = False,
    ) -> None:
        b = resolve_beta(beta, temperature)
        k = check_int(num_categories, "num_categories", minimum=2)
        couplings = couplings_module(couplings, learn_couplings)
        site_shape = tuple(couplings.site_shape)
        h = _category_field(field, site_shape, couplings.num_sites, k, couplings_dtype(couplings))
        super().__init__(couplings, h, b, learn_field)
        self.num_categories = k
        self.space = Categorical(site_shape, k)

    @classmethod
    def lattice(
        cls,
        height: int,
        width: int,
        num_categories: int,
        coupling: float | tuple[Tensor, Tensor] = 1.0,
        *,
        field: float | Tensor = 0.0,
        beta: float | None = None,
        temperature: float | None = None,
        boundary: str = "periodic",
        learn_couplings: bool = False,
        learn_field: bool = False,
    ) -> PottsModel:
        """Potts model on an ``height x width`` square lattice; ``space = Categorical((height, width), K)``.

        ``coupling``, ``boundary`` and ``learn_couplings`` are as in
        :meth:`ebms.models.ising.IsingModel.lattice`; the rest as in the constructor.
        """
        lat = LatticeCouplings(height, width, coupling, boundary=boundary, learnable=learn_couplings)
        return cls(lat, num_categories, field=field, beta=beta, temperature=temperature, learn_field=learn_field)

    def local_fields(self, x: Tensor) -> Tensor:
        r""":math:`m_{ik} = \sum_j J_{ij} x_{jk} + h_{ik}`, ``(B, N, K)`` (without ``beta``)."""
        return self._fields(x)

    def conditional_logits(self, x: Tensor, site: int | Tensor) -> Tensor:
        r"""Logits :math:`\beta m_{site,k}` of :math:`p(x_{site} = k \mid \text{rest})`, ``(B, K)``.

        ``site`` is a flat site index or a ``LongTensor (B,)``; a lattice site costs ``O(B K)``.
        """
        return self.beta * self._site_fields(x, site)

    def all_conditional_logits(self, x: Tensor) -> Tensor:
        """Every site's conditional logits given the rest, ``(B, N, K)``: one ``J x`` product."""
        return self.beta * self._fields(x)


if TYPE_CHECKING:  # mypy checks that PottsModel offers what docs/capabilities.md lists for it
    from ebms.capabilities import (
        HasSpace,
        SupportsAllConditionalLogits,
        SupportsBlocks,
        SupportsConditionalLogits,
        SupportsEnergyAndGrad,
    )

    def _offers(
        m: PottsModel,
    ) -> tuple[SupportsEnergyAndGrad, HasSpace, SupportsConditionalLogits, SupportsAllConditionalLogits, SupportsBlocks]:
        return m, m, m, m, m
