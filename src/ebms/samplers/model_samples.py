"""Synthetic data from a known discrete model, by long-run MCMC with a recorded seed.

(It lived in ``ebms.data`` before; data sets do not run samplers, so it moved here.)

Used to test learning: draw data from a model whose parameters are known (e.g. lattice Ising
couplings), fit a model to it, and compare the learned parameters with the true ones.

The draws are the final states of ``n`` independent chains started uniformly at random and run
for ``sweeps`` block-Gibbs sweeps (the model's own colouring, or its bipartite conditionals), so
they are independent of each other; how close they are to the model depends on ``sweeps``
relative to the chain's mixing time. Everything needed to regenerate them bit for bit
(seed, sweeps, sampler) is returned with them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch
from torch import Tensor

from ebms._checks import check_int
from ebms.energy import EnergyLike
from ebms.samplers._base import energy_dtype
from ebms.samplers._discrete import resolve_space
from ebms.samplers.block_gibbs import BlockGibbs
from ebms.spaces import DiscreteSpace

__all__ = ["ModelSamples", "model_samples"]


@dataclass(frozen=True)
class ModelSamples:
    """Draws ``x: (n, *event)`` from a model, with the settings that regenerate them."""

    x: Tensor
    settings: dict[str, Any] = field(default_factory=dict)


def model_samples(
    model: EnergyLike,
    n: int,
    *,
    sweeps: int = 1000,
    seed: int = 0,
    space: DiscreteSpace | None = None,
    chunk: int = 4096,
    progress: bool = False,
) -> ModelSamples:
    """``n`` independent draws from ``model`` by ``sweeps`` block-Gibbs sweeps from uniform starts.

    Args:
        model: a discrete energy with ``blocks()`` (Ising, Potts) or bipartite conditionals (RBM).
        n: number of draws (= independent chains).
        sweeps: block-Gibbs sweeps per chain; take many times the mixing time (near a critical
            point Ising chains mix slowly).
        seed: seed of the CPU generator driving starts and updates; recorded in ``settings``.
        space: the model's space (default ``model.space``).
        chunk: chains run together (memory bound); the result does not depend on it
            only if it is left unchanged, so it is recorded too.
        progress: show a progress bar.

    Float states (binary, spins, one-hot) are drawn in the dtype of the model's parameters.
    """
    check_int(n, "n", minimum=1)
    check_int(sweeps, "sweeps", minimum=1)
    check_int(chunk, "chunk", minimum=1)
    space = resolve_space(space, model)
    sampler = BlockGibbs(space=space)
    g = torch.Generator().manual_seed(seed)
    out = []
    for start in range(0, n, chunk):
        m = min(chunk, n - start)
        x = space.random(m, generator=g)
        if x.is_floating_point() and (dtype := energy_dtype(model)) is not None:
            x = x.to(dtype)  # float starts in the model's precision (exact: the values are 0, 1 or -1, 1)
        x = sampler.sample(model, x, sweeps, generator=g, progress=progress)
        out.append(x)
    settings = {"n": n, "sweeps": sweeps, "seed": seed, "chunk": chunk, "sampler": "BlockGibbs", "space": repr(space)}
    return ModelSamples(torch.cat(out), settings)
