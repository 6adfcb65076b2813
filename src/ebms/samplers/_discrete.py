r"""Shared pieces of the discrete kernels: space resolution, single-site conditionals, categorical draws.

A *single-site conditional* is :math:`p(x_i = k \mid x_{\setminus i}) \propto \exp(-E(x^{(i \to k)}))`,
where :math:`x^{(i\to k)}` is ``x`` with site ``i`` set to category ``k``. Kernels ask for its
*logits* ``(B, K)`` (any per-row constant may be added) through :func:`site_logits`:

* an energy that knows its conditionals in closed form (Ising local fields, Potts, RBMs) offers
  :class:`~ebms.capabilities.SupportsConditionalLogits` (``conditional_logits(x, site) -> (B, K)``)
  and, for block updates, :class:`~ebms.capabilities.SupportsAllConditionalLogits`
  (``all_conditional_logits(x) -> (B, N, K)``: every site's conditional given the rest, all at once);
* any other energy gets the generic form: the ``K`` variants of every chain evaluated in *one*
  batched energy call of ``B*K`` rows (``B*N*K`` rows, chunked, for all sites).

Energies may also declare their space (:class:`~ebms.capabilities.HasSpace`, ``energy.space``); a
sampler built without ``space=`` uses it. Capabilities are resolved with
:func:`~ebms.capabilities.supports` (once per class or object), so per-step code stays cheap.

Token sequences (:class:`~ebms.spaces.TokenSequences`, states :class:`~ebms.sequences.Sequences`) are
discrete too: a *position* is a site with ``V`` categories, present in the chains whose length
exceeds it. The kernels that say so (:attr:`~ebms.samplers._base.Sampler.accepts_sequences`) take
them, at fixed lengths.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from ebms._checks import check_tensor
from ebms.capabilities import HasSpace, SupportsAllConditionalLogits, SupportsConditionalLogits, supports
from ebms.distributions import sample_categorical
from ebms.energy import EnergyLike, evaluate
from ebms.samplers._base import Sampler
from ebms.sequences import Sequences
from ebms.spaces import DiscreteSpace, TokenSequences

__all__ = [
    "DiscreteSampler",
    "all_site_logits",
    "check_site_logits",
    "nonfinite_rows",
    "resolve_space",
    "resolve_token_space",
    "sample_categorical",
    "site_logits",
]


def _declared_space(space: object, energy: EnergyLike) -> object:
    """``space`` if given, else the space the energy declares as ``energy.space`` (or ``None``)."""
    if space is not None:
        return space
    return energy.space if supports(energy, HasSpace) else None


def resolve_space(space: DiscreteSpace | TokenSequences | None, energy: EnergyLike) -> DiscreteSpace:
    """``space`` if given, else ``energy.space``; a clear error when neither is a discrete space."""
    found = _declared_space(space, energy)
    if not isinstance(found, DiscreteSpace):
        raise TypeError(
            "space: expected an ebms.spaces.DiscreteSpace (Binary, Spins, Categorical or CategoricalIndices) "
            f"passed to the sampler or set as energy.space; got {type(found).__name__}"
        )
    return found


def resolve_token_space(space: DiscreteSpace | TokenSequences | None, energy: EnergyLike) -> TokenSequences:
    """The :class:`~ebms.spaces.TokenSequences` of ``space=`` or ``energy.space``, for ``Sequences`` states."""
    found = _declared_space(space, energy)
    if not isinstance(found, TokenSequences):
        raise TypeError(
            "space: Sequences states need an ebms.spaces.TokenSequences (the vocabulary and length range) "
            f"passed to the sampler or set as energy.space; got {type(found).__name__}"
        )
    return found


def _check_logits(logits: Tensor, shape: tuple[int, ...], name: str) -> Tensor:
    if tuple(logits.shape) != shape:
        raise ValueError(f"{name}: expected shape {shape}; got {tuple(logits.shape)}")
    return logits


def check_site_logits(logits: Tensor, shape: tuple[int, int]) -> Tensor:
    """``logits`` from ``energy.conditional_logits(x, site)`` after checking they are ``(B, K)`` (no host sync)."""
    return _check_logits(logits, shape, "conditional_logits(x, site)")


def site_logits(energy: EnergyLike, space: DiscreteSpace, x: Tensor, site: int | Tensor) -> Tensor:
    r"""Logits of :math:`p(x_{site} = k \mid \text{rest})`, ``(B, K)``.

    ``site`` is one flat site index or a ``LongTensor (B,)`` (one per chain). Uses
    ``energy.conditional_logits`` when offered (:class:`~ebms.capabilities.SupportsConditionalLogits`),
    else ``-E`` of the ``K`` variants (one call, ``B*K`` rows).
    """
    B, K = x.shape[0], space.num_categories
    if supports(energy, SupportsConditionalLogits):
        return check_site_logits(energy.conditional_logits(x, site), (B, K))
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
    ``energy.all_conditional_logits(x) -> (B, N, K)`` when offered
    (:class:`~ebms.capabilities.SupportsAllConditionalLogits`); otherwise evaluates the
    ``B*n*K`` single-site variants, ``max_rows`` rows per energy call.
    """
    B, N, K = x.shape[0], space.num_sites, space.num_categories
    if supports(energy, SupportsAllConditionalLogits):
        logits = _check_logits(energy.all_conditional_logits(x), (B, N, K), "all_conditional_logits(x)")
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


class DiscreteSampler(Sampler):
    """Base of the discrete kernels: configuration holds an optional space; no gradients.

    States are float tensors (Binary, Spins, one-hot Categorical), integer tensors
    (:class:`~ebms.spaces.CategoricalIndices`) or, for kernels with ``accepts_sequences``,
    :class:`~ebms.sequences.Sequences` (:class:`~ebms.spaces.TokenSequences`).

    Args:
        space: the :class:`~ebms.spaces.DiscreteSpace` or :class:`~ebms.spaces.TokenSequences`;
            ``None`` means ``energy.space``. A token space is kept as :attr:`token_space`
            (``space`` is then ``None``: it holds tensor spaces only).

    ``state.step_size`` is unused by most discrete kernels and kept at 1.
    """

    uses_grad = False

    def __init__(self, *, space: DiscreteSpace | TokenSequences | None = None) -> None:
        token_space = None
        if isinstance(space, TokenSequences):
            if not self.accepts_sequences:
                raise TypeError(
                    f"space: {type(self).__name__} works on fixed-shape tensor states; got {space!r} "
                    "(token sequences: use Gibbs or MetropolisHastings)"
                )
            token_space, space = space, None
        elif space is not None and not isinstance(space, DiscreteSpace):
            raise TypeError(
                "space: expected an ebms.spaces.DiscreteSpace (Binary, Spins, Categorical or CategoricalIndices)"
                f"{' or TokenSequences' if self.accepts_sequences else ''}; got {type(space).__name__}"
            )
        super().__init__(step_size=1.0, space=space)
        self.token_space: TokenSequences | None = token_space

    def _stuck_hint(self) -> str:
        return "the energy is NaN or -inf at every proposed state"

    @property
    def discrete_space(self) -> DiscreteSpace | None:
        """The configured tensor space (``None``: use ``energy.space``)."""
        return self.space  # type: ignore[return-value]

    def _check_x0(self, energy: EnergyLike, x0: Any) -> Tensor | Sequences:
        if isinstance(x0, Sequences) and self.accepts_sequences:
            return resolve_token_space(self.token_space or self.discrete_space, energy).validate(x0, "x0")
        if isinstance(x0, Tensor):
            if self.token_space is not None:
                raise TypeError(
                    f"x0: expected Sequences states for the space {self.token_space!r}; got a Tensor "
                    "(wrap token ids as Sequences(tokens, lengths))"
                )
            if self.space is None:  # the base class validates a configured space
                check_tensor(x0, "x0", min_dim=1)
                resolve_space(None, energy).validate(x0, "x0")
        return super()._check_x0(energy, x0)
