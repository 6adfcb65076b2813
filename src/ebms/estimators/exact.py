r"""Exact log partition function of a small discrete energy by enumeration.

.. math::  \log Z = \operatorname{logsumexp}_{x \in \mathcal X}\, -E(x),

over every state of a :class:`~ebms.spaces.DiscreteSpace` (``K ** N`` of them), streamed in
chunks of ``chunk_size`` states: one energy call per chunk, each chunk reduced to its own
logsumexp in float64, and the chunk values combined at the end (no host sync inside the loop).

Cost: ``K ** N`` energy evaluations, memory ``O(chunk_size * N)``. ``max_states`` (default
``2 ** 25``, about 33 million) guards against a run that would not finish; beyond it use
:func:`ebms.estimators.ais.ais` (or a model's own exact formula, e.g. an RBM summed over its
smaller layer).

The result is exact up to floating point: energies are evaluated in the energy's precision
(float32 by default) and accumulated in float64.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from ebms._checks import check_int
from ebms._progress import progress_bar
from ebms.capabilities import HasSpace
from ebms.energy import EnergyLike, evaluate
from ebms.estimators._base import Estimate
from ebms.estimators.likelihood import _in_energy_dtype
from ebms.spaces import DiscreteSpace

__all__ = ["exact_log_partition", "exact_log_prob"]


def _resolve(energy: EnergyLike, space: DiscreteSpace | None) -> DiscreteSpace:
    found = space if space is not None else energy.space if isinstance(energy, HasSpace) else None
    if not isinstance(found, DiscreteSpace):
        raise TypeError(
            "space: expected an ebms.spaces.DiscreteSpace (Binary, Spins or Categorical), given or set as "
            f"energy.space; got {type(found).__name__}"
        )
    return found


def _placement(energy: EnergyLike) -> tuple[torch.device, torch.dtype]:
    """Device and floating dtype of the energy's first parameter/buffer (CPU, float32 without any)."""
    if isinstance(energy, torch.nn.Module):
        for t in list(energy.parameters()) + list(energy.buffers()):
            if t.is_floating_point():
                return t.device, t.dtype
    return torch.device("cpu"), torch.float32


def exact_log_partition(
    energy: EnergyLike,
    space: DiscreteSpace | None = None,
    *,
    chunk_size: int = 1 << 16,
    max_states: int = 1 << 25,
    progress: bool = False,
) -> Estimate:
    r"""Exact :math:`\log Z = \log \sum_x \exp(-E(x))` by enumerating ``space``.

    Args:
        energy: ``E: (B, *event) -> (B,)``; states are made on the device and in the floating
            dtype of its first parameter (CPU/float32 for parameter-free energies).
        space: the discrete space; ``None`` means ``energy.space``.
        chunk_size: states per energy call.
        max_states: refuse spaces with more states than this (``ValueError`` naming ``num_states``).
        progress: show a progress bar over chunks.

    Returns:
        ``Estimate(estimate=log Z, stderr=0, exact=True, settings={"method", "num_states", "chunk_size"})``.

    Raises:
        ValueError: too many states; an energy that is NaN or ``-inf`` somewhere; every state
            with ``+inf`` energy (``Z = 0``).

    Example:
        >>> import math, torch
        >>> from ebms.energy import from_fn
        >>> from ebms.spaces import Spins
        >>> h = torch.tensor([0.5, -1.0, 2.0])
        >>> est = exact_log_partition(from_fn(lambda s: -(s * h).sum(-1)), Spins(3))
        >>> round(est.estimate - sum(math.log(2 * math.cosh(v)) for v in h.tolist()), 6)
        0.0
    """
    space = _resolve(energy, space)
    check_int(chunk_size, "chunk_size", minimum=1)
    check_int(max_states, "max_states", minimum=1)
    n = space.num_states
    if n > max_states:
        raise ValueError(
            f"space: {space!r} has num_states={n:,} (K={space.num_categories} ** N={space.num_sites}), above "
            f"max_states={max_states:,}; estimate log Z with ebms.estimators.ais.ais or raise max_states"
        )
    device, dtype = _placement(energy)
    chunks = space.enumerate(chunk_size, device=device, dtype=dtype)
    if progress:
        chunks = progress_bar(chunks, total=math.ceil(n / chunk_size), desc="enumerate", leave=False)
    parts: list[Tensor] = []
    bad = torch.zeros((), dtype=torch.bool, device=device)
    with torch.no_grad():
        for x in chunks:
            e = evaluate(energy, x).double()
            bad = bad | torch.isnan(e).any() | (e == -math.inf).any()
            parts.append(torch.logsumexp(-e, 0))
    if bool(bad):
        raise ValueError("energy(x): expected finite energies (or +inf) on every state; got NaN or -inf")
    log_z = float(torch.logsumexp(torch.stack(parts), 0))
    if log_z == -math.inf:
        raise ValueError(f"energy(x): every one of the {n:,} states has energy +inf, so Z = 0")
    settings = {"method": "enumeration", "num_states": n, "chunk_size": chunk_size}
    return Estimate(estimate=log_z, stderr=0.0, exact=True, settings=settings)


def exact_log_prob(
    energy: EnergyLike,
    space: DiscreteSpace | None,
    x: Tensor,
    *,
    log_z: float | Estimate | None = None,
    chunk_size: int = 1 << 16,
    max_states: int = 1 << 25,
) -> Tensor:
    r"""Exact :math:`\log p(x) = -E(x) - \log Z`, ``(B,)`` float64.

    Args:
        energy, space: as for :func:`exact_log_partition` (``space=None`` means ``energy.space``).
        x: states ``(B, *event)``, validated against the space; float states in another dtype than
            the energy's parameters are cast to theirs (the values 0, 1, -1 are exact in every dtype).
        log_z: a known :math:`\log Z` (number or exact :class:`Estimate`); ``None`` enumerates.
        chunk_size, max_states: passed to :func:`exact_log_partition` when ``log_z`` is ``None``.
    """
    space = _resolve(energy, space)
    space.validate(x, "x")
    if log_z is None:
        log_z = exact_log_partition(energy, space, chunk_size=chunk_size, max_states=max_states)
    if isinstance(log_z, Estimate):
        if not log_z.exact:
            raise ValueError(f"log_z: expected an exact Estimate (or a number); got a stochastic one: {log_z}")
        value = log_z.estimate
    else:
        value = float(log_z)
        if not math.isfinite(value):
            raise ValueError(f"log_z: expected a finite number; got {log_z!r}")
    with torch.no_grad():
        return -evaluate(energy, _in_energy_dtype(energy, x)).double() - value
