"""Exact-distribution checks for discrete samplers and models (imported by bare name from tests).

The invariance test of a kernel: start ``S`` independent chains, run them, and compare the
empirical distribution of the final states with the exact distribution obtained by enumerating
the space. The tolerance is derived from the sample size, not tuned:

* for ``S`` independent exact draws, ``E[TV] <= 1/2 * sum_s sqrt(p_s (1 - p_s) / S)`` (Jensen on each
  cell's binomial count), and
* TV moves by at most ``1/S`` when one draw changes, so McDiarmid gives
  ``P(TV > E[TV] + t) <= exp(-2 S t^2)``; ``t = sqrt(log(1/delta) / (2 S))`` with ``delta = 1e-4``.

A correct sampler run long enough from an independent start fails with probability < 1e-4 (plus
its remaining burn-in bias, which the tests make negligible by running many sweeps).
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from ebms.spaces import DiscreteSpace


def exact_probs(energy, space: DiscreteSpace) -> Tensor:
    """``p(s)`` for every state in ``space.enumerate()`` order, float64 ``(K**N,)``."""
    with torch.no_grad():
        e = torch.cat([energy(x).double() for x in space.enumerate()])
    return torch.softmax(-e, 0)


def empirical_probs(x: Tensor, space: DiscreteSpace) -> Tensor:
    """Histogram of the states ``x: (S, *event)`` over ``space.enumerate()`` order, float64."""
    counts = torch.bincount(space.state_index(x), minlength=space.num_states).double()
    return counts / x.shape[0]


def tv_distance(p: Tensor, q: Tensor) -> float:
    return 0.5 * float((p - q).abs().sum())


def tv_threshold(p: Tensor, samples: int, delta: float = 1e-4) -> float:
    """Upper bound on ``E[TV]`` for ``samples`` exact draws plus the McDiarmid deviation at level ``delta``."""
    mean_bound = 0.5 * float(torch.sqrt(p * (1 - p) / samples).sum())
    return mean_bound + math.sqrt(math.log(1 / delta) / (2 * samples))


def assert_matches_exact(x: Tensor, energy, space: DiscreteSpace, delta: float = 1e-4) -> tuple[float, float]:
    """Assert the final states ``x: (S, *event)`` of ``S`` independent chains are draws from ``exp(-E)/Z``.

    Returns ``(tv, threshold)`` so a test can also check that a *wrong* target is rejected.
    """
    p = exact_probs(energy, space)
    tv = tv_distance(empirical_probs(x, space), p)
    thr = tv_threshold(p, x.shape[0], delta)
    assert tv < thr, f"TV distance {tv:.4f} to the exact distribution exceeds the sample-size bound {thr:.4f}"
    return tv, thr
