"""Pieces shared by :class:`~ebms.models.trf.TRF`, :class:`~ebms.models.trf.GNELM` and :class:`~ebms.models.jrf.JRF`."""

from __future__ import annotations

import abc
import math

import torch
from torch import Tensor, nn

from ebms._checks import check_energy_output, check_tensor
from ebms.capabilities import SupportsSingleTokenEnergies, SupportsTokenLogits, supports
from ebms.sequences import Sequences
from ebms.spaces import TokenSequences


def field_energy(energy: object, x: Sequences) -> Tensor:
    """``energy(x)`` checked to be ``(B,)``, ``+inf`` for sentences holding the boundary id 0."""
    x = Sequences.coerce(x, name="x", pairs=False)
    e = check_energy_output(energy(x), x.batch_size)  # type: ignore[operator]
    boundary = (x.mask() & (x.tokens == 0)).any(1)
    return e.masked_fill(boundary, math.inf)


def token_scores(energy: object, x: Sequences, position: Tensor, candidates: Tensor) -> Tensor:
    """``-E`` of each substitution ``(B, K)`` up to a per-row constant; ``-inf`` for the boundary id
    (``-1`` entries of ``candidates`` are absent: 0 there)."""
    if supports(energy, SupportsTokenLogits):
        s = energy.token_logits(x, position, candidates)
    else:
        s = variant_scores(energy, x, position, candidates)
    return s.masked_fill(candidates == 0, -math.inf).masked_fill(candidates < 0, 0.0)


def variant_scores(energy: object, x: Sequences, position: Tensor, candidates: Tensor) -> Tensor:
    """``-E`` of ``x`` with ``position`` set to each candidate, by evaluating the ``B K`` sentences
    (absent ``-1`` candidates are not evaluated: 0 there)."""
    B, K = candidates.shape
    row, k = (candidates >= 0).nonzero(as_tuple=True)
    tok = x.tokens[row].clone()
    tok.scatter_(1, position[row, None], candidates[row, k][:, None])
    e = check_energy_output(energy(Sequences(tok, x.lengths[row], validate=False)), row.numel())  # type: ignore[operator]
    out = torch.zeros(B, K, dtype=e.dtype, device=e.device)
    out[row, k] = -e
    return out


def single_token_log_z(energy: object, vocab_size: int, device: torch.device) -> Tensor:
    """``log Z_1`` exactly: log-sum-exp of ``-E`` over the ``V - 1`` one-token sentences (``energy``'s cached
    :meth:`~ebms.capabilities.SupportsSingleTokenEnergies.single_token_energies` when it offers them)."""
    if supports(energy, SupportsSingleTokenEnergies):
        e = energy.single_token_energies()
    else:
        ones = Sequences(torch.arange(1, vocab_size, device=device)[:, None], validate=False)
        e = energy(ones)  # type: ignore[operator]
    return torch.logsumexp(-check_energy_output(e, vocab_size - 1), 0)


class LengthMixture(nn.Module, abc.ABC):
    r"""The per-length part of the TRF contract, shared by :class:`~ebms.models.trf.TRF` and
    :class:`~ebms.models.jrf.JRF`: lengths ``1..L`` with weights :math:`\pi` (buffer ``log_pi``),
    a sampling prior :math:`\pi^0` (``log_pi0``) and learned log normalisers :math:`\zeta`
    (parameter ``log_z``), so that :math:`\log p(l, x) = \log\pi_l - E(x) - \log Z_l`.

    A subclass calls :meth:`_init_lengths` in its ``__init__`` and defines ``energy(x) -> (B,)``.
    """

    log_pi: Tensor
    log_pi0: Tensor
    vocab_size: int

    def _init_lengths(self, pi: Tensor, pi0: Tensor, log_z: Tensor | None, log_z_per_token: float,
                      anchor_first: bool) -> None:
        """Register ``log_pi``/``log_pi0`` and the parameter ``log_z`` (default ``l * log_z_per_token``)."""
        L = int(pi.shape[0])
        self.register_buffer("log_pi", pi.log())
        self.register_buffer("log_pi0", pi0.log())
        if log_z is None:
            log_z = torch.arange(1, L + 1, dtype=torch.float32) * log_z_per_token
        check_tensor(log_z, "log_z", floating=True)
        if tuple(log_z.shape) != (L,):
            raise ValueError(f"log_z: expected shape ({L},) (one per length 1..{L}); got {tuple(log_z.shape)}")
        self.log_z = nn.Parameter(log_z.detach().float().clone())
        self.anchor_first = bool(anchor_first)

    @abc.abstractmethod
    def energy(self, x: Sequences) -> Tensor:
        """The sentence energy :math:`E(x)`, ``(B,)`` (defined by each subclass)."""

    @property
    def max_length(self) -> int:
        return int(self.log_pi.shape[0])

    @property
    def space(self) -> TokenSequences:
        """Where sentences live: ``TokenSequences(V, max_length)`` (id 0 allowed by the space, never by the model)."""
        return TokenSequences(self.vocab_size, self.max_length)

    @property
    def length_probs(self) -> Tensor:
        return self.log_pi.exp()

    def length_log_weights(self) -> Tensor:
        r""":math:`\log\pi^0_l - \zeta_l` at index ``l`` (``-inf`` at 0), ``(L + 1,)``, detached."""
        a = (self.log_pi0 - self.log_z).detach()
        return torch.cat([a.new_full((1,), -math.inf), a])

    def log_normalisers(self) -> Tensor:
        r""":math:`\log Z_l` as the model uses it, ``(L,)``: :math:`\zeta`, or anchored at the exact :math:`\log Z_1`."""
        if not self.anchor_first:
            return self.log_z
        source = self if supports(self, SupportsSingleTokenEnergies) else self.energy
        return single_token_log_z(source, self.vocab_size, self.log_z.device) + self.log_z - self.log_z[0]

    def log_prob(self, x: Sequences) -> Tensor:
        r""":math:`\log\pi_l - E(x) - \log Z_l`, ``(B,)`` (natural log; sentences checked)."""
        self.space.check(x, boundary=0)
        e = self.energy(x)
        idx = x.lengths - 1
        return self.log_pi[idx].to(e.dtype) - e - self.log_normalisers()[idx].to(e.dtype)

    def forward(self, x: Sequences) -> Tensor:
        r"""Joint energy :math:`E(x) - \log\pi_l + \zeta_l`, ``(B,)`` (:math:`= -` ``log_prob`` without the anchor)."""
        e = self.energy(x)
        idx = x.lengths - 1
        return e - self.log_pi[idx].to(e.dtype) + self.log_z[idx].to(e.dtype)
