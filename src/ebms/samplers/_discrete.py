r"""Shared pieces of the discrete kernels: space resolution, single-site conditionals, categorical draws.

A *single-site conditional* is :math:`p(x_i = k \mid x_{\setminus i}) \propto \exp(-E(x^{(i \to k)}))`,
where :math:`x^{(i\to k)}` is ``x`` with site ``i`` set to category ``k``. Kernels ask for its
*logits* ``(B, K)`` (any per-row constant may be added) through :func:`site_logits`:

* an energy that knows its conditionals in closed form (Ising local fields, Potts, RBMs) defines
  ``conditional_logits(x, site) -> (B, K)`` and, for block updates, ``all_conditional_logits(x) ->
  (B, N, K)`` (every site's conditional given the rest, all at once);
* any other energy gets the generic form: the ``K`` variants of every chain evaluated in *one*
  batched energy call of ``B*K`` rows (``B*N*K`` rows, chunked, for all sites).

Energies may also carry their space as ``energy.space``; a sampler built without ``space=`` uses it.
"""

from __future__ import annotations

import torch
from torch import Tensor

from ebms.energy import EnergyLike, evaluate
from ebms.samplers._base import Sampler
from ebms.spaces import DiscreteSpace

__all__ = [
    "DiscreteSampler",
    "all_site_logits",
    "resolve_space",
    "nonfinite_rows",
    "sample_categorical",
    "site_logits",
]


def resolve_space(space: DiscreteSpace | None, energy: EnergyLike) -> DiscreteSpace:
    """``space`` if given, else ``energy.space``; a clear error when neither is a discrete space."""
    if space is None:
        space = getattr(energy, "space", None)
    if not isinstance(space, DiscreteSpace):
        raise TypeError(
            "space: expected an ebms.spaces.DiscreteSpace (Binary, Spins or Categorical) passed to the sampler "
            f"or set as energy.space; got {type(space).__name__}"
        )
    return space


def _check_logits(logits: Tensor, shape: tuple[int, ...], name: str) -> Tensor:
    if tuple(logits.shape) != shape:
        raise ValueError(f"{name}: expected shape {shape}; got {tuple(logits.shape)}")
    return logits


def site_logits(energy: EnergyLike, space: DiscreteSpace, x: Tensor, site: int | Tensor) -> Tensor:
    r"""Logits of :math:`p(x_{site} = k \mid \text{rest})`, ``(B, K)``.

    ``site`` is one flat site index or a ``LongTensor (B,)`` (one per chain). Uses
    ``energy.conditional_logits`` when present, else ``-E`` of the ``K`` variants (one call, ``B*K`` rows).
    """
    B, K = x.shape[0], space.num_categories
    fn = getattr(energy, "conditional_logits", None)
    if fn is not None:
        return _check_logits(fn(x, site), (B, K), "conditional_logits(x, site)")
    variants = space.site_variants(x, site).reshape(B * K, *space.event_shape)
    with torch.no_grad():
        return -evaluate(energy, variants).reshape(B, K)


def all_site_logits(
    energy: EnergyLike,
    space: DiscreteSpace,
    x: Tensor,
    *,
    sites: Tensor | None = None,
    max_rows: int = 1 << 16,
) -> Tensor:
    r"""Conditional logits of many sites, each given all the others at ``x``: ``(B, n, K)``.

    ``sites`` is a ``LongTensor (n,)`` of flat site indices (default: all ``N``). Uses
    ``energy.all_conditional_logits(x) -> (B, N, K)`` when present; otherwise evaluates the
    ``B*n*K`` single-site variants, ``max_rows`` rows per energy call.
    """
    B, N, K = x.shape[0], space.num_sites, space.num_categories
    fn = getattr(energy, "all_conditional_logits", None)
    if fn is not None:
        logits = _check_logits(fn(x), (B, N, K), "all_conditional_logits(x)")
        return logits if sites is None else logits[:, sites]
    site_list = list(range(N)) if sites is None else sites.tolist()
    per_call = max(1, max_rows // max(1, B * K))
    out = []
    with torch.no_grad():
        for start in range(0, len(site_list), per_call):
            chunk = site_list[start : start + per_call]
            v = torch.stack([space.site_variants(x, i) for i in chunk], 1)  # (B, n, K, *event)
            e = evaluate(energy, v.reshape(-1, *space.event_shape)).reshape(B, len(chunk), K)
            out.append(-e)
    return torch.cat(out, 1)


def nonfinite_rows(logits: Tensor) -> Tensor:
    """Rows (first axis) whose conditional logits cannot be sampled: a NaN or ``+inf`` anywhere
    (a NaN or ``-inf`` energy), or every category at ``-inf``. ``(B,)`` bool, no host sync.

    These are exactly the rows where the largest logit of some site is not finite (``amax``
    propagates NaN), so kernels that update site after site may instead add up each update's
    ``logits.amax(-1)`` and test the running sum once.
    """
    top = logits.amax(-1).reshape(logits.shape[0], -1)
    return ~torch.isfinite(top).all(1)


def sample_categorical(logits: Tensor, generator: torch.Generator | None) -> Tensor:
    """One draw per row from ``softmax(logits)`` over the last axis; ``LongTensor logits.shape[:-1]``.

    Inverse CDF with one uniform per row, scaled to the CDF's last value so float rounding can
    never land on a zero-probability category (its CDF step is flat). Rows with NaN or all-``-inf``
    logits give an arbitrary category; kernels detect them with :func:`nonfinite_rows` and keep
    those chains where they were. Two categories take a cheaper path: category 1 iff
    ``u < sigmoid(l_1 - l_0)``.
    """
    if logits.shape[-1] == 2:
        p1 = torch.sigmoid(logits[..., 1] - logits[..., 0])
        u = torch.rand(p1.shape, generator=generator, device=p1.device, dtype=p1.dtype)
        return (u < p1).long()
    cdf = torch.softmax(logits, -1).cumsum(-1)
    u = torch.rand(cdf.shape[:-1] + (1,), generator=generator, device=cdf.device, dtype=cdf.dtype)
    return torch.searchsorted(cdf, u * cdf[..., -1:], right=True).squeeze(-1).clamp_(max=logits.shape[-1] - 1)


class DiscreteSampler(Sampler):
    """Base of the discrete kernels: configuration holds an optional space, states are float tensors.

    Args:
        space: the :class:`~ebms.spaces.DiscreteSpace`; ``None`` means ``energy.space``.

    ``state.step_size`` is unused by most discrete kernels and kept at 1.
    """

    uses_grad = False

    def __init__(self, *, space: DiscreteSpace | None = None) -> None:
        if space is not None and not isinstance(space, DiscreteSpace):
            raise TypeError(
                f"space: expected an ebms.spaces.DiscreteSpace (Binary, Spins or Categorical); got {type(space).__name__}"
            )
        super().__init__(step_size=1.0, space=space)

    def _stuck_hint(self) -> str:
        return "the energy is NaN or -inf at every proposed state"

    @property
    def discrete_space(self) -> DiscreteSpace | None:
        """The configured space (``None``: use ``energy.space``)."""
        return self.space  # type: ignore[return-value]

    def init(self, energy: EnergyLike, x0: Tensor):
        if self.space is None:  # the base class validates a configured space
            resolve_space(None, energy).validate(x0, "x0")
        return super().init(energy, x0)
