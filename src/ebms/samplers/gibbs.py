r"""Single-site Gibbs sampling for any discrete energy (systematic or random scan).

Algorithm 2 of the monograph (Gibbs sampler, systematic scan): starting from :math:`x^{(0)}`,
for :math:`t = 1, \dots, T` and for :math:`i = 1, \dots, n`, draw

.. math::  x^{(t)}_i \sim p\big(x_i \mid x^{(t)}_1, \dots, x^{(t)}_{i-1},\, x^{(t-1)}_{i+1}, \dots, x^{(t-1)}_n\big),

using each new value at once. One pass over the sites is a *sweep*. For a discrete site with
``K`` values the full conditional is a softmax over the ``K`` variants of the current state,

.. math::  p(x_i = k \mid x_{\setminus i}) = \frac{\exp(-E(x^{(i \to k)}))}{\sum_{k'} \exp(-E(x^{(i \to k')}))},

so a generic energy needs one batched call of ``B*K`` rows per site update, and an energy that
offers ``conditional_logits(x, site)`` (:class:`~ebms.capabilities.SupportsConditionalLogits`:
Ising local fields, Potts, RBMs) none (see :func:`ebms.samplers._discrete.site_logits`). Each site update :math:`B_i` is a Metropolis–Hastings
move with acceptance 1 and leaves :math:`p` invariant; so does any product or random choice of them
(the composition principle, monograph §2.2). A *random scan* picks each update's site uniformly
at random, independently for every chain.

Token sequences (:class:`~ebms.sequences.Sequences` states over a
:class:`~ebms.spaces.TokenSequences` space) are updated position by position at fixed lengths: the
conditional of position ``t`` of a chain of length ``L > t`` is the softmax over the ``V`` tokens of
``-E`` of the ``V`` variants, all ``B*V`` of them evaluated in one energy call
(:meth:`~ebms.spaces.TokenSequences.position_variants`). Positions ``t >= L`` are padding and stay
as they are; a random scan draws each chain's position uniformly from its own ``[0, L)``. Each
length class is then sampled from its conditional :math:`p(x \mid |x| = L)`; moves between lengths
need a trans-dimensional kernel.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Literal

import torch
from torch import Tensor

from ebms._checks import check_int
from ebms.capabilities import SupportsConditionalLogits, supports
from ebms.energy import EnergyLike, evaluate
from ebms.samplers._base import ChainState, StepInfo, batch_where, evaluate_states, num_chains
from ebms.samplers._discrete import (
    DiscreteSampler,
    check_site_logits,
    resolve_space,
    resolve_token_space,
    sample_categorical,
)
from ebms.sequences import Sequences
from ebms.spaces import DiscreteSpace, TokenSequences

__all__ = ["Gibbs"]

_SCANS = ("systematic", "random")


def set_sites(flat: Tensor, site: int | Tensor, k: Tensor, values: Tensor) -> None:
    """Set ``site`` (int, or ``LongTensor (B,)`` per chain) of every chain to ``values[k]``, in place."""
    new = values[k]  # (B,) or (B, K)
    if isinstance(site, Tensor):
        index = site.reshape(-1, 1, *([1] * (new.dim() - 1))).expand(-1, 1, *new.shape[1:])
        flat.scatter_(1, index, new.unsqueeze(1))
    else:
        flat[:, site] = new


def _update_sites(
    sites: Sequence[int] | Sequence[Tensor],
    conditional: Callable[[int | Tensor], Tensor],
    write: Callable[[int | Tensor, Tensor], None],
    generator: torch.Generator | None,
    nonfinite: Tensor | None,
) -> None:
    """The single-site update loop shared by tensor and token states.

    For each site ``s`` (an int, or a ``LongTensor (B,)`` with one site per chain): draw one category
    per chain from ``softmax(conditional(s))`` (logits ``(B, K)``) and ``write(s, k)`` it. When
    ``nonfinite`` (bool ``(B,)``) is given, it is or-ed in place with the chains whose conditionals
    were not finite at some update: the sum of every update's largest logit is finite exactly
    when each was (see :func:`~ebms.samplers._discrete.nonfinite_rows`), one add per update.
    """
    top: Tensor | None = None
    for s in sites:
        logits = conditional(s)
        if nonfinite is not None:
            m = logits.amax(-1)  # a fresh tensor: it can serve as the accumulator
            top = m if top is None else top.add_(m)
        write(s, sample_categorical(logits, generator))
    if nonfinite is not None and top is not None:
        nonfinite |= ~torch.isfinite(top)


class Gibbs(DiscreteSampler):
    r"""Single-site Gibbs sampler (monograph Algorithm 2) with systematic or random scan.

    * ``scan="systematic"``: one sweep updates sites ``0, 1, ..., N-1`` in order (flat site
      order of ``space.site_shape``).
    * ``scan="random"``: one sweep is ``N`` updates, each at a site drawn uniformly at random,
      independently per chain (so a sweep visits each site once *on average*).

    One :meth:`step` is ``sweeps`` sweeps; ``info.accept_prob`` is 1 (every draw is exact).

    * **Cost per sweep:** ``N`` conditional evaluations: ``N`` calls of
      ``energy.conditional_logits`` when the energy defines it, otherwise ``N`` energy calls of
      ``B*K`` rows (the ``K`` variants of every chain). The energy of the new state is evaluated
      once per step, not per sweep. No host syncs inside :meth:`step`.
    * **State:** chains are updated on a copy of the float state (the value written in place
      for Binary/Spins, the one-hot row set for Categorical); ``state.x`` is never mutated. The
      generic path evaluates the variants from one buffer reused across site updates, so the
      energy must not keep a reference to its input.
    * **Randomness:** per update, the random-scan sites (one ``randint`` per sweep) and one
      uniform per chain, all from ``generator``.
    * **Mixing:** single-site moves mix slowly near phase transitions and for strongly coupled
      sites; :class:`~ebms.samplers.block_gibbs.BlockGibbs` updates whole colour classes at once.
    * **Token sequences** (``Sequences`` states, ``space=TokenSequences(...)`` or ``energy.space``):
      sites are the positions ``0 .. T-1`` of the padded width ``T``, each with ``V`` values; a sweep
      costs ``T`` energy calls of ``B*V`` sequences (systematic scan) and leaves lengths and padding
      unchanged. A random scan draws each update's position uniformly in ``[0, L)`` for a chain of
      length ``L`` (``updates`` defaults to ``T``). Energies take ``Sequences`` and return ``(B,)``;
      ``conditional_logits`` is not used for them.

    References:
        Geman & Geman (1984), "Stochastic relaxation, Gibbs distributions, and the Bayesian
        restoration of images", IEEE TPAMI 6(6).
        Ou (2024), "Energy-Based Models with Applications to Speech and Language Processing",
        §2.2 (Algorithm 2; Gibbs as Metropolis–Hastings with acceptance 1).

    Args:
        scan: ``"systematic"`` or ``"random"``.
        sweeps: sweeps per step (>= 1).
        updates: random scan only: single-site updates per sweep (default ``N``); e.g. to compare
            with one-proposal-per-step kernels at equal numbers of site updates.
        space: the discrete space (or :class:`~ebms.spaces.TokenSequences`); ``None`` means
            ``energy.space``.

    Example:
        >>> import torch
        >>> from ebms.energy import from_fn
        >>> from ebms.spaces import Spins
        >>> from ebms.samplers.gibbs import Gibbs
        >>> space = Spins(8)
        >>> ring = from_fn(lambda s: -(s * s.roll(1, -1)).sum(-1))   # 1-D Ising ring, J = 1
        >>> g = torch.Generator().manual_seed(0)
        >>> x = Gibbs(space=space).sample(ring, space.random(100, generator=g), steps=20, generator=g)
        >>> x.shape
        torch.Size([100, 8])

        Token sequences (energies ``Sequences -> (B,)``; here a unigram table):

        >>> from ebms.spaces import TokenSequences
        >>> tokens = TokenSequences(5, max_length=6)
        >>> table = torch.randn(5, generator=g)
        >>> unigram = lambda s: (table[s.tokens] * s.mask()).sum(-1)
        >>> y = Gibbs(space=tokens).sample(unigram, tokens.random(10, generator=g), steps=3, generator=g)
        >>> y.tokens.shape, y.lengths.shape
        (torch.Size([10, 6]), torch.Size([10]))
    """

    accepts_sequences = True

    def __init__(
        self,
        scan: Literal["systematic", "random"] = "systematic",
        *,
        sweeps: int = 1,
        updates: int | None = None,
        space: DiscreteSpace | TokenSequences | None = None,
    ) -> None:
        super().__init__(space=space)
        if scan not in _SCANS:
            raise ValueError(f"scan: expected one of {_SCANS}; got {scan!r}")
        self.scan = scan
        self.sweeps = check_int(sweeps, "sweeps", minimum=1)
        if updates is not None:
            check_int(updates, "updates", minimum=1)
            if scan != "random":
                raise ValueError(f"updates: only a random scan can stop part-way through the sites; got scan={scan!r}")
        self.updates = updates

    def sweep(
        self,
        energy: EnergyLike,
        x: Tensor | Sequences,
        *,
        generator: torch.Generator | None = None,
        space: DiscreteSpace | TokenSequences | None = None,
        nonfinite: Tensor | None = None,
    ) -> Tensor | Sequences:
        """One sweep from ``x: (B, *event)`` (or ``Sequences``); returns new states (``x`` itself is not modified).

        ``nonfinite``: optional bool ``(B,)`` accumulator, or-ed in place with the chains whose
        conditionals were not finite at some update (the rule of :func:`~ebms.samplers._discrete.nonfinite_rows`).
        """
        if isinstance(x, Sequences):
            tokens = resolve_token_space(space or self.token_space or self.discrete_space, energy)
            return self._sweep_tokens(energy, x, tokens, generator, nonfinite)
        space = resolve_space(self.discrete_space if space is None else space, energy)
        B, N, K = x.shape[0], space.num_sites, space.num_categories
        values = space.category_values(x.dtype, x.device)  # what a site holds for each category
        flat = x.detach().reshape(B, N, *values.shape[1:]).clone()  # contiguous copy
        cur = flat.view(x.shape)  # the chains' state, updated in place through `flat`
        # closed-form conditionals (resolved once per sweep, not per site update)
        closed = energy.conditional_logits if supports(energy, SupportsConditionalLogits) else None
        buf = flat.new_empty((0,) if closed is not None else (B, K, *flat.shape[1:]))  # the variants, reused per site
        if self.scan == "systematic":
            sites: list[int] | list[Tensor] = list(range(N))
        else:
            n = N if self.updates is None else self.updates
            sites = list(torch.randint(N, (n, B), generator=generator, device=x.device).unbind(0))

        def conditional(s: int | Tensor) -> Tensor:
            if closed is not None:
                return check_site_logits(closed(cur, s), (B, K))
            v = space.site_variants(cur, s, out=buf).view(B * K, *space.event_shape)
            return -evaluate(energy, v).reshape(B, K)

        with torch.no_grad():
            _update_sites(sites, conditional, lambda s, k: set_sites(flat, s, k, values), generator, nonfinite)
        return cur

    def _sweep_tokens(
        self,
        energy: EnergyLike,
        x: Sequences,
        space: TokenSequences,
        generator: torch.Generator | None,
        nonfinite: Tensor | None,
    ) -> Sequences:
        """One sweep over the positions of token sequences (lengths and padding unchanged)."""
        B, T, V = x.batch_size, x.max_length, space.vocab_size
        tokens = x.tokens.clone()  # updated in place; `cur` shares it
        cur, lengths = x.with_tokens(tokens), x.lengths
        values = torch.arange(V, device=x.device)
        buf = tokens.new_empty(B * V * T)  # the B*V variants, reused per position
        if T == 0:
            sites: list[int] | list[Tensor] = []
        elif self.scan == "systematic":
            sites = list(range(T))
        else:  # one uniform position in [0, L) per chain (modulo bias below 2^-50 for L < 2^12)
            n = T if self.updates is None else self.updates
            draws = torch.randint(1 << 62, (n, B), generator=generator, device=x.device)
            sites = list((draws % lengths.clamp(min=1)).unbind(0))

        def conditional(s: int | Tensor) -> Tensor:
            return -evaluate_states(energy, space.position_variants(cur, s, out=buf)).reshape(B, V)

        def write(s: int | Tensor, k: Tensor) -> None:
            # a chain whose length is at most s has padding there: it keeps what it holds
            old = tokens[:, s] if isinstance(s, int) else tokens.gather(1, s[:, None]).squeeze(1)
            set_sites(tokens, s, torch.where(lengths > s, k, old), values)

        with torch.no_grad():
            _update_sites(sites, conditional, write, generator, nonfinite)
        return cur

    def step(
        self, energy: EnergyLike, state: ChainState, *, generator: torch.Generator | None = None
    ) -> tuple[ChainState, StepInfo]:
        """``sweeps`` sweeps of every chain; returns ``(state, info)`` with ``accept_prob == 1``."""
        x = state.x
        space: DiscreteSpace | TokenSequences
        if isinstance(x, Sequences):
            space = resolve_token_space(self.token_space or self.discrete_space, energy)
        else:
            space = resolve_space(self.discrete_space, energy)
        bad = torch.zeros(num_chains(x), dtype=torch.bool, device=x.device)
        for _ in range(self.sweeps):
            x = self.sweep(energy, x, generator=generator, space=space, nonfinite=bad)
        with torch.no_grad():
            e = evaluate_states(energy, x).detach()
        # a chain that met a NaN / -inf energy stays where it was (like a rejected MH proposal)
        x, e = batch_where(bad, state.x, x), torch.where(bad, state.energy, e)
        ok = ~bad
        info = StepInfo(accept_prob=ok.to(e.dtype), accepted=ok, energy=e, nonfinite=bad)
        return state.replace(x=x, energy=e, t=state.t + 1), info

    def __repr__(self) -> str:
        return f"Gibbs(scan={self.scan!r}, sweeps={self.sweeps}, space={self.token_space or self.discrete_space!r})"
