"""A tiny token-sequence target with its exact distribution, and the TV check (imported by bare name).

Target: ``V = 3`` tokens, lengths ``1..4`` (120 sequences), energy

    E(x) = sum_{t < L} u[t, x_t] + sum_{1 <= t < L} W[x_{t-1}, x_t] + c[L]

(position-dependent unigram, bigram interaction, length term), ``p(x) ∝ exp(-E(x))``, enumerated
exactly with :meth:`TokenSequences.enumerate`.

Tolerance (derived, not tuned). For ``S`` independent exact draws with empirical frequencies
``p̂``, each count is binomial, so ``E|p̂_s - p_s| <= sqrt(p_s (1 - p_s) / S)`` (Jensen) and
``E[TV] <= 1/2 sum_s sqrt(p_s (1 - p_s) / S)``. Changing one draw moves TV by at most ``1/S``, so
McDiarmid's inequality gives ``P(TV > E[TV] + t) <= exp(-2 S t^2)``; writing ``t = z / (2 sqrt(S))``
this is ``exp(-z^2 / 2)``, a sub-Gaussian tail with standard deviation ``1 / (2 sqrt(S))``. With
``z = 4.3`` a correct sampler fails with probability below ``exp(-9.2) ≈ 1e-4``.

Kernels keep lengths fixed, so the chains start with lengths drawn from the exact length marginal
``p(L)`` and uniform tokens; run long enough (2-3x the number of sweeps/steps after which the TV
stops falling on this target, measured once), their final states are independent draws from
``p``.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from ebms.sequences import Sequences
from ebms.spaces import TokenSequences

V, MIN_LENGTH, MAX_LENGTH = 3, 1, 4
Z_VALUE = 4.3  # failure probability <= exp(-Z^2 / 2) ~ 1e-4 for exact draws


def token_space(min_length: int = MIN_LENGTH) -> TokenSequences:
    return TokenSequences(V, MAX_LENGTH, min_length=min_length)


class TokenEnergy:
    """``E(Sequences) -> (B,)``: position-dependent unigram + bigram + length terms (padding ignored)."""

    def __init__(self, scale: float = 1.0, seed: int = 3) -> None:
        g = torch.Generator().manual_seed(seed)
        self.unigram = torch.randn(MAX_LENGTH, V, generator=g) * scale  # u[t, v]
        self.bigram = torch.randn(V, V, generator=g) * scale  # W[v, w]
        self.length = torch.tensor([0.4, 0.0, 0.6, -0.2, 0.3]) * scale  # c[L], L = 0..4
        self.calls: list[int] = []  # rows of every call

    def __call__(self, x: Sequences) -> Tensor:
        self.calls.append(x.batch_size)
        T = x.max_length
        real = x.mask()
        tok = x.tokens * real  # padding -> token 0, then masked out
        e = (self.unigram[torch.arange(T), tok] * real).sum(1)
        if T > 1:
            e = e + (self.bigram[tok[:, :-1], tok[:, 1:]] * real[:, 1:]).sum(1)
        return e + self.length[x.lengths]


def exact_probs(energy, space: TokenSequences) -> Tensor:
    """``p(x)`` of every sequence in ``space.enumerate()`` order, float64."""
    with torch.no_grad():
        e = torch.cat([energy(x).double() for x in space.enumerate()])
    return torch.softmax(-e, 0)


def length_marginal(p: Tensor, space: TokenSequences) -> Tensor:
    """``p(L)`` for ``L = 0 .. max_length``, float64."""
    lengths = torch.cat([x.lengths for x in space.enumerate()])
    return torch.zeros(space.max_length + 1, dtype=torch.float64).index_add_(0, lengths, p)


def starts(space: TokenSequences, p_length: Tensor, chains: int, generator: torch.Generator) -> Sequences:
    """Chains with lengths drawn from ``p_length`` and uniform tokens."""
    lengths = torch.multinomial(p_length.float(), chains, replacement=True, generator=generator)
    return space.random(chains, generator=generator, lengths=lengths)


def tv_and_bound(x: Sequences, p: Tensor, space: TokenSequences) -> tuple[float, float]:
    """TV distance of the states ``x`` to ``p`` and the sample-size bound (module docstring)."""
    S = x.batch_size
    p_hat = torch.bincount(space.state_index(x), minlength=space.num_states).double() / S
    tv = 0.5 * float((p_hat - p).abs().sum())
    bound = 0.5 * float(torch.sqrt(p * (1 - p) / S).sum()) + Z_VALUE / (2 * math.sqrt(S))
    return tv, bound


def assert_matches_exact(x: Sequences, p: Tensor, space: TokenSequences) -> tuple[float, float]:
    tv, bound = tv_and_bound(x, p, space)
    assert tv < bound, f"TV distance {tv:.4f} to the exact distribution exceeds the sample-size bound {bound:.4f}"
    return tv, bound
