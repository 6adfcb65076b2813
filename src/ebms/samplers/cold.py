r"""COLD decoding: Langevin dynamics on a continuous relaxation of a sequence, then guided discretisation.

Qin, Welleck, Khashabi & Choi (2022); monograph §4.4.2, Eq. 4.37. Constraints
:math:`f_i(\tilde y)` (higher = better satisfied) define :math:`p(\tilde y) \propto \exp U(\tilde y)`,
:math:`U = \sum_i \lambda_i f_i`, over *soft sequences* :math:`\tilde y = (\tilde y_1, \dots, \tilde y_T)`,
:math:`\tilde y_t \in \mathbb R^{V}` logits. In ``ebms``'s sign convention the energy is
:math:`E(\tilde y) = -U(\tilde y)` (:func:`ebms.energy.potential_to_energy` converts a potential).

1. **Langevin** (:func:`cold_langevin`): :math:`\tilde y^{(n+1)} = \tilde y^{(n)} - \eta\,\nabla_{\tilde y}
   E(\tilde y^{(n)}) + \sigma_n \varepsilon^{(n)}`, :math:`\varepsilon \sim \mathcal N(0, I)`, with the noise
   scale :math:`\sigma_n` annealed by a schedule (COLD's: large early, small late), as in Eq. 2.23 with
   the step and the noise decoupled.
2. **Guided discretisation** (:func:`guided_discretise`, "top-k filtering"): the plain
   :math:`y_t = \arg\max_v \tilde y_t(v)` loses fluency (tip 18); instead a language model proposes
   its top-``k`` tokens :math:`\mathcal V^k_t` given the already discretised :math:`y_{<t}`, and
   :math:`y_t = \arg\max_{v \in \mathcal V^k_t} \tilde y_t(v)`.

:func:`cold_decode` runs both. Shapes: ``B`` sequences, ``T`` positions, ``V`` tokens; soft logits
``(B, T, V)``, energies ``(B,)``, tokens ``(B, T)``.

References:
    Qin, L., Welleck, S., Khashabi, D. & Choi, Y. (2022). "COLD decoding: energy-based constrained
    text generation with Langevin dynamics." NeurIPS.
    Ou (2024), "Energy-Based Models with Applications to Speech and Language Processing", §4.4.2.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch
from torch import Tensor

from ebms._checks import check_int, check_positive, check_tensor

__all__ = ["ColdResult", "cold_decode", "cold_langevin", "guided_discretise", "noise_schedule"]

#: the energy of soft logits: ``(B, T, V) -> (B,)``, lower = better (``-U``)
SoftEnergy = Callable[[Tensor], Tensor]
#: next-token logits of a language model given discretised prefixes: ``(B, t) int64 -> (B, V)``
NextLogits = Callable[[Tensor], Tensor]


@dataclass(frozen=True)
class ColdResult:
    """What :func:`cold_decode` returns.

    Attributes:
        tokens: the discretised sequences ``(B, T)`` int64.
        logits: the soft sequences after the last Langevin step ``(B, T, V)``.
        energy: the mean soft energy after each Langevin step ``(steps,)``.
    """

    tokens: Tensor
    logits: Tensor
    energy: Tensor


def noise_schedule(steps: int, levels: Sequence[float] = (1.0, 0.5, 0.1, 0.05, 0.01),
                   at: Sequence[float] = (0.0, 0.05, 0.3, 0.6, 0.9)) -> list[float]:
    """COLD's piecewise-constant noise scales: ``levels[j]`` from step ``at[j] * steps`` on, ``(steps,)``.

    ``at`` starts at 0 and increases; the default halves the noise early and ends near zero (the
    paper's 1, 0.5, 0.1, 0.05, 0.01 at iterations 0, 50, 500, 1000, 1500 of 2000, compressed).
    """
    steps = check_int(steps, "steps", minimum=0)
    if len(levels) != len(at) or not levels:
        raise ValueError(f"levels, at: expected two non-empty lists of one length; got {len(levels)} and {len(at)}")
    if at[0] != 0 or any(b <= a for a, b in zip(at, at[1:])):
        raise ValueError(f"at: expected increasing fractions starting at 0; got {list(at)}")
    for j, v in enumerate(levels):
        check_positive(v, f"levels[{j}]", allow_zero=True)
    out, j = [], 0
    for n in range(steps):
        while j + 1 < len(at) and n >= at[j + 1] * steps:
            j += 1
        out.append(float(levels[j]))
    return out


def _check_logits(y: object, name: str) -> Tensor:
    y = check_tensor(y, name, floating=True)
    if y.dim() != 3:
        raise ValueError(f"{name}: expected soft logits (B, T, V); got shape {tuple(y.shape)}")
    return y


def cold_langevin(energy: SoftEnergy, init: Tensor, *, step_size: float, noise: Sequence[float],
                  generator: torch.Generator | None = None) -> tuple[Tensor, Tensor]:
    r"""``len(noise)`` Langevin steps :math:`\tilde y \leftarrow \tilde y - \eta \nabla E(\tilde y) + \sigma_n \varepsilon`.

    Args:
        energy: ``(B, T, V) -> (B,)``, differentiable in its input (lower = better).
        init: the starting soft logits ``(B, T, V)`` (e.g. a language model's logits along a draw).
        step_size: :math:`\eta > 0`.
        noise: :math:`\sigma_n \ge 0` of each step (:func:`noise_schedule`).
        generator: the only source of the noise.

    Returns:
        ``(logits (B, T, V), mean energy after each step (steps,))``. The energy's parameters get no
        gradient (only the input is differentiated).
    """
    y = _check_logits(init, "init").detach().clone()
    eta = check_positive(step_size, "step_size")
    sigmas = [check_positive(s, f"noise[{n}]", allow_zero=True) for n, s in enumerate(noise)]
    trace = []
    for sigma in sigmas:
        y.requires_grad_(True)
        with torch.enable_grad():
            e = energy(y)
            if not isinstance(e, Tensor) or tuple(e.shape) != (y.shape[0],):
                shape = tuple(e.shape) if isinstance(e, Tensor) else type(e).__name__
                raise ValueError(f"energy(y): expected shape ({y.shape[0]},); got {shape}")
            (grad,) = torch.autograd.grad(e.sum(), y)
        with torch.no_grad():
            y = y.detach() - eta * grad
            if sigma:
                y = y + sigma * torch.randn(y.shape, generator=generator, dtype=y.dtype, device=y.device)
        trace.append(e.detach().mean())
    if not trace:
        return y.detach(), y.new_zeros(0)
    return y.detach(), torch.stack(trace)


def guided_discretise(logits: Tensor, next_logits: NextLogits | None = None, *, top_k: int = 1,
                      prefix: Tensor | None = None, allowed: Tensor | None = None) -> Tensor:
    r"""Tokens ``(B, T)`` from soft logits ``(B, T, V)``: :math:`y_t = \arg\max_{v \in \mathcal V^k_t} \tilde y_t(v)`.

    Args:
        logits: the soft sequence :math:`\tilde y`.
        next_logits: the language model's next-token logits given ``(B, t)`` tokens (the prompt
            ``prefix`` and the ``y_{<t}`` already chosen; ``t`` may be 0), ``(B, V)``; ``None``: the
            plain argmax (:math:`\mathcal V^k_t` = every allowed token).
        top_k: ``k``, the size of the model's candidate set (``k = V`` is the plain argmax).
        prefix: ``(B, P)`` tokens before position 1 (a prompt), fed to ``next_logits`` only.
        allowed: bool ``(V,)``: tokens that may appear at all (both in the candidates and the argmax).

    Ties go to the lowest token id. Cost: ``T`` calls of ``next_logits``.
    """
    logits = _check_logits(logits, "logits")
    B, T, V = logits.shape
    k = check_int(top_k, "top_k", minimum=1)
    if allowed is not None:
        allowed = check_tensor(allowed, "allowed")
        if allowed.dtype != torch.bool or tuple(allowed.shape) != (V,):
            raise ValueError(f"allowed: expected a bool tensor ({V},); got {allowed.dtype} {tuple(allowed.shape)}")
    prefix = logits.new_zeros(B, 0, dtype=torch.long) if prefix is None else check_tensor(prefix, "prefix")
    if prefix.dim() != 2 or prefix.shape[0] != B or prefix.dtype != torch.long:
        raise ValueError(f"prefix: expected int64 tokens ({B}, P); got {prefix.dtype} {tuple(prefix.shape)}")
    out = prefix
    neg = torch.tensor(-float("inf"), dtype=logits.dtype, device=logits.device)
    for t in range(T):
        score = logits[:, t]
        if allowed is not None:
            score = torch.where(allowed, score, neg)
        if next_logits is not None and k < V:
            with torch.no_grad():
                lm = next_logits(out)
            if not isinstance(lm, Tensor) or tuple(lm.shape) != (B, V):
                shape = tuple(lm.shape) if isinstance(lm, Tensor) else type(lm).__name__
                raise ValueError(f"next_logits(prefix): expected shape ({B}, {V}); got {shape}")
            if allowed is not None:
                lm = torch.where(allowed, lm, torch.tensor(-float("inf"), dtype=lm.dtype, device=lm.device))
            cand = lm.topk(min(k, V), -1).indices
            keep = torch.zeros(B, V, dtype=torch.bool, device=logits.device).scatter_(1, cand, True)
            score = torch.where(keep, score, neg)
        out = torch.cat([out, score.argmax(-1, keepdim=True)], 1)
    return out[:, prefix.shape[1]:]


def cold_decode(energy: SoftEnergy, init: Tensor, *, step_size: float, noise: Sequence[float],
                next_logits: NextLogits | None = None, top_k: int = 1, prefix: Tensor | None = None,
                allowed: Tensor | None = None, generator: torch.Generator | None = None) -> ColdResult:
    """COLD: :func:`cold_langevin` from ``init`` on ``energy``, then :func:`guided_discretise` (module docstring)."""
    y, trace = cold_langevin(energy, init, step_size=step_size, noise=noise, generator=generator)
    tokens = guided_discretise(y, next_logits, top_k=top_k, prefix=prefix, allowed=allowed)
    return ColdResult(tokens=tokens, logits=y, energy=trace)
