r"""Block Gibbs: resample whole blocks of conditionally independent variables at once.

Two kinds of model are supported, chosen from what the energy offers (its
:mod:`ebms.capabilities`, resolved once per class or object):

* **Bipartite latent-variable models** (RBMs,
  :class:`~ebms.capabilities.SupportsBipartiteSampling`): the state is the visible layer ``v`` and
  the energy is its free energy. The energy defines ``sample_hidden(v, generator) -> h`` drawing
  :math:`h \sim p(h \mid v)` and ``sample_visible(h, generator) -> v`` drawing
  :math:`v \sim p(v \mid h)`. One sweep is :math:`h \sim p(h\mid v)`, then
  :math:`v \sim p(v\mid h)`; it leaves the marginal :math:`p(v)` invariant.
* **Colourable models** (Ising/Potts lattices, any model whose sites split into sets with no
  interactions inside a set): ``blocks`` is a list of ``LongTensor`` flat site indices (or
  ``energy.blocks()`` supplies it, :class:`~ebms.capabilities.SupportsBlocks`, e.g. the two
  colours of a checkerboard). One sweep resamples each block in turn from its conditionals, all
  sites of the block in parallel. The conditionals come from ``energy.all_conditional_logits``
  when offered (:class:`~ebms.capabilities.SupportsAllConditionalLogits`, one call per block),
  otherwise from energy differences (see :mod:`ebms.samplers._discrete`). Correct only when no two sites of a
  block interact; the sampler cannot check that for a generic energy.

Each sweep is a product of exact conditional draws, so each leaves the target invariant
(Geman & Geman, 1984; for RBMs Hinton, 2002, "Training products of experts by minimizing
contrastive divergence"). ``sweeps`` sweeps make one ``step``; the energy of the new state is
evaluated once per step (not per sweep), so ``sweeps > 1`` amortises it.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor

from ebms._checks import check_int
from ebms.capabilities import SupportsBipartiteSampling, SupportsBlocks, supports
from ebms.energy import EnergyLike, evaluate
from ebms.samplers._base import ChainState, StepInfo, batch_where
from ebms.samplers._discrete import DiscreteSampler, all_site_logits, nonfinite_rows, resolve_space, sample_categorical
from ebms.spaces import DiscreteSpace

__all__ = ["BlockGibbs"]


class BlockGibbs(DiscreteSampler):
    """Block Gibbs sampler for bipartite (RBM-like) or colourable discrete models.

    Args:
        blocks: flat site indices of each block, or ``None`` to use ``energy.blocks()``
            (ignored for bipartite energies).
        sweeps: sweeps per step (>= 1).
        space: the discrete space; ``None`` means ``energy.space``.

    Cost per sweep: bipartite, two layer conditionals (two ``B x D x H`` products for an RBM);
    colourable, one ``all_conditional_logits`` call per block.
    """

    def __init__(
        self,
        blocks: Sequence[Tensor] | None = None,
        *,
        sweeps: int = 1,
        space: DiscreteSpace | None = None,
    ) -> None:
        super().__init__(space=space)
        self.sweeps = check_int(sweeps, "sweeps", minimum=1)
        self.blocks = None if blocks is None else [torch.as_tensor(b, dtype=torch.long).flatten() for b in blocks]

    @staticmethod
    def is_bipartite(energy: EnergyLike) -> bool:
        """Whether ``energy`` offers :class:`~ebms.capabilities.SupportsBipartiteSampling` (bipartite mode)."""
        return supports(energy, SupportsBipartiteSampling)

    def _blocks(self, energy: EnergyLike, space: DiscreteSpace, *, check: bool = False) -> list[Tensor]:
        """The blocks (configured, else ``energy.blocks()``); ``check`` tests they partition the sites
        (done once, in :meth:`init`, not in every sweep)."""
        blocks = self.blocks
        if blocks is None:
            if not supports(energy, SupportsBlocks):
                raise TypeError(
                    "blocks: the energy has neither sample_hidden/sample_visible nor blocks(); "
                    "pass blocks=[site indices, ...] (sets of non-interacting sites)"
                )
            blocks = [torch.as_tensor(b, dtype=torch.long).flatten() for b in energy.blocks()]
        if not check:
            return blocks
        covered = torch.cat(blocks)
        if covered.numel() != space.num_sites or not torch.equal(
            covered.sort().values.cpu(), torch.arange(space.num_sites)
        ):
            raise ValueError(
                f"blocks: expected a partition of the {space.num_sites} sites (each exactly once); "
                f"got {covered.numel()} indices"
            )
        return blocks

    def init(self, energy: EnergyLike, x0: Tensor) -> ChainState:
        """As :meth:`Sampler.init`, and checks the blocks partition the sites (colouring mode)."""
        if not self.is_bipartite(energy):
            self._blocks(energy, resolve_space(self.discrete_space, energy), check=True)
        return super().init(energy, x0)

    def sweep(
        self,
        energy: EnergyLike,
        x: Tensor,
        generator: torch.Generator | None = None,
        *,
        nonfinite: Tensor | None = None,
    ) -> Tensor:
        """One sweep from ``x: (B, *event)``; returns the new states (no energy evaluation).

        ``nonfinite``: optional bool ``(B,)`` accumulator, or-ed in place with the chains whose block
        conditionals were not finite (colouring mode; bipartite models draw from closed-form layers).
        """
        if supports(energy, SupportsBipartiteSampling):
            h = energy.sample_hidden(x, generator)
            return energy.sample_visible(h, generator)
        space = resolve_space(self.discrete_space, energy)
        idx = space.indices(x)
        for b in self._blocks(energy, space):
            b = b.to(x.device)
            logits = all_site_logits(energy, space, x, sites=b)  # (B, |b|, K)
            if nonfinite is not None:
                nonfinite |= nonfinite_rows(logits)
            idx[:, b] = sample_categorical(logits, generator)
            x = space.from_indices(idx, dtype=x.dtype)
        return x

    def step(self, energy, state: ChainState, *, generator=None):
        x = state.x
        bad = torch.zeros(x.shape[0], dtype=torch.bool, device=x.device)
        with torch.no_grad():
            for _ in range(self.sweeps):
                x = self.sweep(energy, x, generator, nonfinite=bad)
            e = evaluate(energy, x)
        # a chain that met a NaN / -inf energy (or lands on one) stays where it was
        bad = bad | torch.isnan(e) | torch.isneginf(e)
        x, e = batch_where(bad, state.x, x), torch.where(bad, state.energy, e)
        ok = ~bad
        info = StepInfo(accept_prob=ok.to(e.dtype), accepted=ok, energy=e, nonfinite=bad)
        return state.replace(x=x, energy=e, t=state.t + 1), info

    def __repr__(self) -> str:
        return (
            f"BlockGibbs(sweeps={self.sweeps}, blocks={'energy.blocks()' if self.blocks is None else len(self.blocks)})"
        )
