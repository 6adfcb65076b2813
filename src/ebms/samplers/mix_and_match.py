r"""Mix-and-match: a product of black-box experts sampled by MH-within-Gibbs with a cloze proposal.

The target is an energy-based model whose energy is a weighted sum of experts (Mireshghallah,
Goyal & Berg-Kirkpatrick 2022; monograph §4.4.2, Eq. 4.36)

.. math::  p(X) = \frac{e^{-E(X)}}{\sum_{X'} e^{-E(X')}}, \qquad E(X) = \sum_{i=1}^{k} \alpha_i E_i(X),

lower energy = better for every expert (a fluency expert such as the negative pseudo-log-likelihood
of a masked LM, a constraint or discriminator expert such as :math:`-\log p(+\mid X)`, a Hamming
distance to a source sentence). :class:`ProductOfExperts` is that sum.

:class:`MixAndMatch` is the sampler. One step updates one position ``i`` of every chain:

1. mask position ``i`` (token ``mask_id`` when given) and read the cloze law
   :math:`q(\cdot \mid X_{\setminus i})` from the proposal, ``(B, V)`` log-probabilities;
2. draw :math:`\bar X_i \sim q(\cdot \mid X_{\setminus i})`, :math:`\bar X = (X_{\setminus i}, \bar X_i)`;
3. accept with (the monograph's l.6052–6058, bars restored: :math:`\bar X_{\setminus i} = X_{\setminus i}`)

   .. math::  \min\Big\{1, \frac{e^{-E(\bar X)}\, q(X_i \mid X_{\setminus i})}
              {e^{-E(X)}\, q(\bar X_i \mid X_{\setminus i})}\Big\}.

The proposal ignores the current token, so this is a Metropolis independence sampler within Gibbs
(the monograph's footnote 9): each site kernel satisfies detailed balance with respect to
:math:`p`, whatever :math:`q` is, as long as :math:`q` puts mass on every token :math:`p` does.
The positions are visited in ``positions`` order (``scan="systematic"``: step ``t`` updates
``positions[t mod n]``; one epoch is ``n`` steps, and the monograph asks for more than 8 epochs)
or one uniformly drawn position per step (``scan="random"``, a reversible chain). Positions at or
after a chain's length are left alone (the chain keeps its length).

Cost per step: one proposal call and one energy call on ``B`` sentences (the current energy is
cached in the state). Shapes: states are :class:`~ebms.sequences.Sequences` ``(B, T)``; the
proposal returns ``(B, V)``; energies ``(B,)``.

References:
    Mireshghallah, F., Goyal, K. & Berg-Kirkpatrick, T. (2022). "Mix and match: learning-free
    controllable text generation using energy language models." ACL.
    Ou (2024), "Energy-Based Models with Applications to Speech and Language Processing", §4.4.2.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch
from torch import Tensor, nn

from ebms._checks import check_int, check_positive
from ebms.distributions import sample_categorical
from ebms.energy import EnergyLike
from ebms.samplers._base import ChainState, Sampler, StepInfo, batch_where, evaluate_states, mh_accept
from ebms.samplers._discrete import _declared_space
from ebms.sequences import Sequences
from ebms.spaces import TokenSequences

__all__ = ["MixAndMatch", "ProductOfExperts", "mix_and_match_log_ratio"]

#: a cloze proposal: ``(x, i) -> (B, V)`` log-probabilities of the token at position ``i`` given the rest
ClozeProposal = Callable[[Sequences, int], Tensor]
SCANS = ("systematic", "random")


class ProductOfExperts(nn.Module):
    r""":math:`E(X) = \sum_i \alpha_i E_i(X)` (Eq. 4.36): a weighted sum of expert energies, ``(B,)``.

    Args:
        experts: energies ``x -> (B,)`` (lower = better), on tensors or :class:`Sequences`.
        weights: the :math:`\alpha_i`, one finite number ``>= 0`` per expert (default all 1).

    :meth:`terms` returns every weighted term, ``(k, B)``, to see which expert a sample pays for.
    """

    def __init__(self, experts: Sequence[EnergyLike], weights: Sequence[float] | None = None) -> None:
        super().__init__()
        experts = list(experts)
        if not experts:
            raise ValueError("experts: expected at least one expert energy; got none")
        for i, e in enumerate(experts):
            if not callable(e):
                raise TypeError(f"experts[{i}]: expected a callable x -> (B,); got {type(e).__name__}")
        weights = [1.0] * len(experts) if weights is None else list(weights)
        if len(weights) != len(experts):
            raise ValueError(f"weights: expected one weight per expert ({len(experts)}); got {len(weights)}")
        self.weights = [check_positive(w, f"weights[{i}]", allow_zero=True) for i, w in enumerate(weights)]
        self.experts = nn.ModuleList([e for e in experts if isinstance(e, nn.Module)])
        self._experts = experts

    def terms(self, x: Any) -> Tensor:
        """Every weighted term :math:`\\alpha_i E_i(x)`, ``(k, B)`` (a zero weight gives zeros, not ``0 * inf``)."""
        rows = []
        for w, e in zip(self.weights, self._experts):
            v = evaluate_states(e, x)
            rows.append(torch.zeros_like(v) if w == 0 else w * v)
        return torch.stack(rows)

    def forward(self, x: Any) -> Tensor:
        return self.terms(x).sum(0)

    def extra_repr(self) -> str:
        return f"weights={self.weights}"


def mix_and_match_log_ratio(energy_x: Tensor, energy_prop: Tensor, log_q_x: Tensor, log_q_prop: Tensor) -> Tensor:
    r"""The log acceptance ratio of one mix-and-match move, ``(B,)``:
    :math:`[E(X) - E(\bar X)] + [\log q(X_i \mid X_{\setminus i}) - \log q(\bar X_i \mid X_{\setminus i})]`.

    Arguments are ``(B,)``: the energies of the current and proposed sentences and the cloze
    log-probabilities of the current and proposed token at the updated position.
    """
    return (energy_x - energy_prop) + (log_q_x - log_q_prop)


class MixAndMatch(Sampler):
    r"""MH-within-Gibbs over positions with a cloze (masked-LM) proposal (module docstring).

    Args:
        proposal: ``proposal(x, i) -> (B, V)`` log-probabilities (normalised over the last axis, or
            logits: they are log-softmaxed) of the token at position ``i`` given the other tokens of
            ``x``. It must not read ``x``'s token at ``i`` (set ``mask_id`` to blank it first).
        positions: the positions to update (default: every position of the padded width, read from
            the first state); the prompt is left out by not listing it.
        scan: ``"systematic"`` (step ``t`` updates ``positions[t mod n]``) or ``"random"``.
        mask_id: when given, position ``i`` holds this token id while the proposal reads ``x``.
        space: a :class:`~ebms.spaces.TokenSequences` the starts are checked against (vocabulary and
            lengths); ``None``: ``energy.space`` when the energy declares one, else no check.

    Example:
        >>> import torch
        >>> from ebms.sequences import Sequences
        >>> from ebms.samplers.mix_and_match import MixAndMatch, ProductOfExperts
        >>> flat = lambda x, i: torch.zeros(x.batch_size, 3)          # uniform proposal over 3 tokens
        >>> count_twos = lambda x: (x.tokens == 2).sum(1).float()     # an expert: fewer 2s is better
        >>> x0 = Sequences(torch.full((4, 5), 2), torch.full((4,), 5))
        >>> g = torch.Generator().manual_seed(0)
        >>> x = MixAndMatch(flat).sample(ProductOfExperts([count_twos], [3.0]), x0, steps=50, generator=g)
        >>> x.tokens.shape
        torch.Size([4, 5])
    """

    uses_grad = False
    accepts_sequences = True

    def __init__(self, proposal: ClozeProposal, *, positions: Sequence[int] | None = None,
                 scan: str = "systematic", mask_id: int | None = None, space: TokenSequences | None = None) -> None:
        super().__init__()
        if space is not None and not isinstance(space, TokenSequences):
            raise TypeError(f"space: expected an ebms.spaces.TokenSequences or None; got {type(space).__name__}")
        self.token_space = space
        if not callable(proposal):
            raise TypeError(f"proposal: expected a callable (x, i) -> (B, V) log-probabilities; got "
                            f"{type(proposal).__name__}")
        if scan not in SCANS:
            raise ValueError(f"scan: expected one of {', '.join(SCANS)}; got {scan!r}")
        if positions is not None:
            positions = [check_int(p, "positions", minimum=0) for p in positions]
            if not positions:
                raise ValueError("positions: expected at least one position to update; got none")
        if mask_id is not None:
            check_int(mask_id, "mask_id", minimum=0)
        self.proposal, self.positions, self.scan, self.mask_id = proposal, positions, scan, mask_id

    def _check_x0(self, energy: EnergyLike, x0: Any) -> Sequences:
        if not isinstance(x0, Sequences):
            raise TypeError(f"x0: MixAndMatch works on token sequences; expected Sequences (tokens (B, T), "
                            f"lengths (B,)); got {type(x0).__name__}")
        space = _declared_space(self.token_space, energy)
        if isinstance(space, TokenSequences):
            x0 = space.validate(x0, "x0")
        width = x0.tokens.shape[1]
        if self.positions is not None and max(self.positions) >= width:
            raise ValueError(f"positions: expected positions below the padded width {width} of x0; got "
                             f"{max(self.positions)}")
        return Sequences(x0.tokens.detach().clone(), x0.lengths.clone(), validate=False)

    def position(self, state: ChainState, generator: torch.Generator | None) -> int:
        """The position step ``state.t`` updates (a draw from ``generator`` for the random scan)."""
        positions = self.positions if self.positions is not None else list(range(state.x.tokens.shape[1]))
        if self.scan == "systematic":
            return positions[state.t % len(positions)]
        return positions[int(torch.randint(len(positions), (1,), generator=generator))]

    def _log_q(self, x: Sequences, i: int) -> Tensor:
        """The proposal's log-probabilities at ``i`` (normalised), ``(B, V)``."""
        seen = x
        if self.mask_id is not None:
            tokens = x.tokens.clone()
            tokens[:, i] = self.mask_id
            seen = Sequences(tokens, x.lengths, validate=False)
        lq = self.proposal(seen, i)
        if not isinstance(lq, Tensor) or lq.dim() != 2 or lq.shape[0] != x.batch_size:
            shape = tuple(lq.shape) if isinstance(lq, Tensor) else type(lq).__name__
            raise ValueError(f"proposal(x, {i}): expected (B={x.batch_size}, V) log-probabilities; got {shape}")
        if not lq.is_floating_point():
            raise TypeError(f"proposal(x, {i}): expected floating log-probabilities; got dtype {lq.dtype}")
        if int(x.tokens.max()) >= lq.shape[1]:
            raise ValueError(f"proposal(x, {i}): gives {lq.shape[1]} tokens but x holds token id {int(x.tokens.max())}")
        return lq.log_softmax(-1)

    def step(self, energy: EnergyLike, state: ChainState, *, generator: torch.Generator | None = None
             ) -> tuple[ChainState, StepInfo]:
        """Update one position of every chain (one proposal call, one energy call)."""
        x = state.x
        i = self.position(state, generator)
        with torch.no_grad():
            lq = self._log_q(x, i)
            new = sample_categorical(lq, generator)
            old = x.tokens[:, i]
            inside = i < x.lengths
            tokens = x.tokens.clone()
            tokens[:, i] = torch.where(inside, new, old)
            prop = Sequences(tokens, x.lengths, validate=False)
            lq_old, lq_new = lq.gather(1, old.unsqueeze(1)).squeeze(1), lq.gather(1, new.unsqueeze(1)).squeeze(1)
            e_prop = evaluate_states(energy, prop).detach()
            finite = torch.isfinite(e_prop) & torch.isfinite(lq_new)
            log_ratio = mix_and_match_log_ratio(state.energy, e_prop, lq_old.to(e_prop.dtype), lq_new.to(e_prop.dtype))
            bad = ~finite & (e_prop != float("inf"))
            log_ratio = torch.where(finite, log_ratio, torch.full_like(log_ratio, -float("inf")))
            log_ratio = torch.where(inside, log_ratio, torch.zeros_like(log_ratio))  # beyond the length: no move
            accepted, accept_prob = mh_accept(log_ratio, generator)
            accepted = accepted & inside
        x_out = batch_where(accepted, prop, x)
        e_out = torch.where(accepted, e_prop, state.energy)
        info = StepInfo(accept_prob=accept_prob, accepted=accepted, energy=e_out, nonfinite=bad & inside)
        return state.replace(x=x_out, energy=e_out, t=state.t + 1), info

    def _stuck_hint(self) -> str:
        return "the proposal gives the chains' tokens probability 0 or the energy is NaN there: check both"

    def __repr__(self) -> str:
        return f"MixAndMatch(positions={self.positions}, scan={self.scan!r}, mask_id={self.mask_id})"
