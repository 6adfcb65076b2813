"""Pieces shared by the per-length log-normaliser estimators of :mod:`ebms.estimators.sequence_log_z`.

* the target: a sentence energy ``E(Sequences) -> (B,)``, or a model offering ``energy`` (a TRF /
  GN-ELM, :class:`~ebms.samplers.trans_dimensional.TransDimensionalTarget`), and its
  :class:`~ebms.spaces.TokenSequences`;
* the length-conditional proposal :math:`q(x \\mid l)` (``conditional_on_length``, ``sample(n,
  lengths=, generator=)``, ``log_prob(x)``) and checked draws from it; for
  ``LengthConditionalLM(BackoffNGram)`` its log-probabilities come from :func:`ngram_log_q_terms`
  (``O(B T n)`` table lookups, no ``(B, V)`` next-word rows), and single-position substitutions
  rescore only the ``2n - 1`` tokens around the position (at PTB scale, V = 10,000, order 4: the
  annealed class-kernel step went from impractical to ~860 position-moves/s on one thread);
* :class:`AnnealedSentenceEnergy`, :math:`\\beta E(x) - (1 - \\beta)\\log q(x \\mid l)`, the energy
  the within-length kernels run on;
* per-length summaries of log weights.
"""

from __future__ import annotations

import math
import weakref
from collections.abc import Iterable
from typing import Any

import torch
from torch import Tensor

from ebms._checks import check_energy_output, check_int
from ebms.capabilities import (
    HasLengthConditioning,
    HasSpace,
    NormalisedModel,
    SupportsTokenLogits,
    TransDimensionalTarget,
    supports,
)
from ebms.distributions import BackoffNGram
from ebms.estimators._base import Estimate
from ebms.estimators.importance import log_mean_weight
from ebms.sequences import Sequences
from ebms.spaces import TokenSequences


def resolve_target(model: Any, space: TokenSequences | None) -> tuple[Any, TokenSequences]:
    """``(E, space)``: the model's ``energy`` (TRF / GN-ELM) or the callable itself, and its token space."""
    energy = model.energy if supports(model, TransDimensionalTarget) else model
    if not callable(energy):
        raise TypeError(f"model: expected a TRF/GNELM or a sentence energy E(Sequences) -> (B,); "
                        f"got {type(model).__name__}")
    found = space if space is not None else (model.space if supports(model, HasSpace) else None)
    if not isinstance(found, TokenSequences):
        raise TypeError("space: expected an ebms.spaces.TokenSequences (vocabulary and length range) passed as "
                        f"space= or set as model.space; got {type(found).__name__}")
    return energy, found


def resolve_lengths(lengths: int | Iterable[int] | None, space: TokenSequences) -> tuple[int, ...]:
    """The sorted distinct lengths to estimate, each in ``[max(1, min_length), max_length]`` of ``space``."""
    lo, hi = max(1, space.min_length), space.max_length
    if lengths is None:
        return tuple(range(lo, hi + 1))
    if isinstance(lengths, Tensor):
        if lengths.dtype.is_floating_point or lengths.dtype == torch.bool or lengths.dim() > 1:
            raise TypeError(f"lengths: expected an int, integers or a 1-D integer tensor; got {lengths.dtype} "
                            f"{tuple(lengths.shape)}")
        lengths = [int(v) for v in lengths.reshape(-1).tolist()]
    items = [lengths] if isinstance(lengths, int) else list(lengths)
    out = sorted({check_int(v, "lengths", minimum=0) for v in items})
    if not out:
        raise ValueError("lengths: expected at least one length; got none")
    bad = [v for v in out if not lo <= v <= hi]
    if bad:
        raise ValueError(f"lengths: expected lengths in [{lo}, {hi}] (the space {space!r}); got {bad[:5]}")
    return tuple(out)


def check_proposal(proposal: Any) -> Any:
    """A length-conditional proposal: ``conditional_on_length`` true, ``sample`` and ``log_prob``."""
    if not isinstance(proposal, NormalisedModel):
        raise TypeError(f"proposal: expected an object with sample(n, lengths=, generator=) and log_prob(x); "
                        f"got {type(proposal).__name__}")
    declared = proposal.conditional_on_length if isinstance(proposal, HasLengthConditioning) else None
    if declared is not True:
        raise ValueError(
            "proposal: expected a length-conditional law q(x | l) (conditional_on_length=True: log_prob gives "
            "log q(x | l), sample(n, lengths=...) draws from it), e.g. NGram.fit(corpus, V, end=False) or "
            f"NGram.uniform(V, end=False); got {type(proposal).__name__} with conditional_on_length={declared!r}"
        )
    return proposal


def draw(proposal: Any, lengths: Tensor, generator: torch.Generator | None) -> Sequences:
    """``len(lengths)`` draws from :math:`q(\\cdot \\mid l)`, checked to have the requested lengths."""
    n = lengths.shape[0]
    x = proposal.sample(n, generator=generator, lengths=lengths)
    if not isinstance(x, Sequences) or x.batch_size != n:
        got = f"{x.batch_size} sequences" if isinstance(x, Sequences) else type(x).__name__
        raise ValueError(f"proposal.sample({n}, lengths=...): expected Sequences with {n} rows; got {got}")
    if not torch.equal(x.lengths.cpu(), lengths.cpu()):
        raise ValueError(f"proposal.sample({n}, lengths=...): expected sentences of the requested lengths; got "
                         f"lengths {x.lengths[:5].tolist()} for requested {lengths[:5].tolist()}")
    return x


_NORMALISED: weakref.WeakKeyDictionary[Any, bool] = weakref.WeakKeyDictionary()


def _sums_to_one(lm: BackoffNGram) -> bool:
    """Whether the n-gram's next-word laws sum to 1 (to 1e-6) after the empty prefix and 16 random
    histories (checked once per model): the condition of :func:`ngram_log_q_terms`."""
    if lm not in _NORMALISED:
        g = torch.Generator().manual_seed(0)
        V, w = lm.vocab_size, max(lm.order - 1, 1)
        tok = torch.cat([torch.zeros(1, w, dtype=torch.long), torch.randint(1, max(V, 2), (16, w), generator=g)])
        lengths = torch.cat([torch.zeros(1, dtype=torch.long), torch.full((16,), w)])
        with torch.no_grad():
            lse = torch.logsumexp(lm.next_log_probs(Sequences(tok.clamp(max=V - 1), lengths)).double(), 1)
        _NORMALISED[lm] = bool((lse.abs() < 1e-6).all())
    return _NORMALISED[lm]


def fast_ngram(proposal: Any) -> Any:
    """The backoff n-gram inside ``LengthConditionalLM(BackoffNGram)`` when its next-word laws sum to 1
    (then scored without ``(B, V)`` rows), else ``None``."""
    from ebms.estimators._seq_proposal import LengthConditionalLM

    if not isinstance(proposal, LengthConditionalLM) or not proposal.ngram or proposal.boundary != 0:
        return None
    lm = proposal.lm
    return lm if isinstance(lm, BackoffNGram) and _sums_to_one(lm) else None


def ngram_log_q_terms(lm: Any, x: Sequences, first: Tensor | None = None) -> Tensor:
    r"""Per-position terms :math:`\log p(x_t \mid h_t) - \log(1 - p(\texttt{</s>} \mid h_t))` of
    :math:`\log q(x \mid l)` (:class:`LengthConditionalLM` of a normalised backoff n-gram), float64
    ``(B, T)``, 0 past each length.

    Two ``token_log_probs`` calls: the sentences, and every history window (its last ``n - 1``
    tokens, or the whole prefix) followed by ``</s>``; ``O(B T n)`` lookups instead of the
    ``O(B T V)`` of scoring every outcome. Equals :meth:`LengthConditionalLM.log_prob`'s terms when
    the n-gram's next-word laws sum to 1 (Kneser-Ney tables do, to rounding). With ``first (B,)``
    only the terms at ``t >= first`` are kept, and the denominator at ``t = first`` (its history
    does not read ``x_first``) is left out as well.
    """
    B, T = x.tokens.shape
    real = x.mask()
    if T == 0 or B == 0:
        return torch.zeros(B, T, dtype=torch.float64, device=x.device)
    tok = x.tokens.masked_fill(~real, 0)
    num = lm.token_log_probs(Sequences(tok, x.lengths, validate=False))[:, :T].double()
    w = lm.order - 1
    if first is not None:
        real = real & (torch.arange(T, device=x.device) > first[:, None])
        num = num.masked_fill(torch.arange(T, device=x.device) < first[:, None], 0.0)
    b, t = real.nonzero(as_tuple=True)
    if w == 0:
        end = lm.token_log_probs(Sequences(tok[:1, :0], x.lengths.new_zeros(1), validate=False))[0, 0].double()
        den = end.expand(b.shape[0])
    else:
        start = (t - w).clamp(min=0)
        cols = start[:, None] + torch.arange(w, device=x.device)
        win_len = torch.minimum(t, torch.full_like(t, w))
        win = tok[b[:, None], cols.clamp(max=T - 1)]
        win = win.masked_fill(torch.arange(w, device=x.device) >= win_len[:, None], 0)
        lp = lm.token_log_probs(Sequences(win, win_len, validate=False)).double()
        den = lp.gather(1, win_len[:, None]).squeeze(1)
    out = num.masked_fill(~x.mask(), 0.0)
    out[b, t] = out[b, t] - torch.log(-torch.expm1(den))
    return out


def proposal_log_prob(proposal: Any, x: Sequences) -> Tensor:
    """:math:`\\log q(x \\mid |x|)`, float64 ``(B,)`` (:func:`ngram_log_q_terms` for a backoff n-gram)."""
    lm = fast_ngram(proposal)
    if lm is not None and isinstance(x, Sequences):
        if bool((x.mask() & (x.tokens <= 0)).any()):
            proposal.log_prob(x)  # raises its message for boundary / negative ids
        return ngram_log_q_terms(lm, x).sum(1)
    lq = proposal.log_prob(x)
    if not isinstance(lq, Tensor) or tuple(lq.shape) != (x.batch_size,):
        got = tuple(lq.shape) if isinstance(lq, Tensor) else type(lq).__name__
        raise ValueError(f"proposal.log_prob(x): expected shape ({x.batch_size},); got {got}")
    return lq.detach().double()


def energy_of(energy: Any, x: Sequences) -> Tensor:
    """:math:`E(x)`, float64 ``(B,)``, without gradients."""
    with torch.no_grad():
        return check_energy_output(energy(x), x.batch_size).detach().double()


def boundary_rows(x: Sequences) -> Tensor:
    """``(B,)`` bool: sentences holding the boundary id 0 inside their length (zero density)."""
    return (x.mask() & (x.tokens == 0)).any(1)


class AnnealedSentenceEnergy:
    r"""The energy of :math:`f_\beta(x) = q(x \mid l)^{1-\beta} e^{-\beta E(x)}` at fixed lengths.

    ``__call__(x) = β E(x) - (1 - β) log q(x | |x|)``, float64 ``(B,)``; ``+inf`` for sentences
    holding the boundary id (which kernels such as :class:`~ebms.samplers.Gibbs` do propose), which
    are never passed to ``E`` or ``q``. ``space`` is the sentence space, so kernels find it;
    ``beta`` may be changed between calls (one object serves every temperature).
    """

    def __init__(self, energy: Any, proposal: Any, space: TokenSequences, beta: float = 0.0) -> None:
        self.target, self.proposal, self.space, self.beta = energy, proposal, space, float(beta)

    def parts(self, x: Sequences) -> tuple[Tensor, Tensor]:
        """``(E(x), log q(x | |x|))`` float64; ``(+inf, -inf)`` on boundary rows."""
        bad = boundary_rows(x)
        if not bool(bad.any()):
            return energy_of(self.target, x), proposal_log_prob(self.proposal, x)
        e = torch.full((x.batch_size,), math.inf, dtype=torch.float64, device=x.device)
        lq = torch.full((x.batch_size,), -math.inf, dtype=torch.float64, device=x.device)
        good = ~bad
        if bool(good.any()):
            y = x[good]
            e[good], lq[good] = energy_of(self.target, y), proposal_log_prob(self.proposal, y)
        return e, lq

    def __call__(self, x: Sequences) -> Tensor:
        e, lq = self.parts(x)
        b = self.beta
        out = -(1.0 - b) * lq if b < 1.0 else torch.zeros_like(e)
        if b > 0.0:
            out = out + b * e
        return out.masked_fill(boundary_rows(x), math.inf)


class AnnealedTokenEnergy(AnnealedSentenceEnergy):
    r""":class:`AnnealedSentenceEnergy` plus single-position substitution scores (``token_logits``), for
    kernels such as :class:`~ebms.samplers.trans_dimensional.TransDimensional`: the model's own
    (local, e.g. n-gram features) times :math:`\beta`, plus :math:`(1-\beta)\log q` of each variant
    sentence (one proposal call over ``B K`` sentences). Candidate 0 scores :math:`-\infty`, absent
    candidates (``-1``) 0.
    """

    def __init__(self, energy: Any, proposal: Any, space: TokenSequences, token_logits: Any,
                 beta: float = 0.0) -> None:
        super().__init__(energy, proposal, space, beta)
        self._token_logits = token_logits
        self._ngram = fast_ngram(proposal)

    def _local_log_q(self, x: Sequences, position: Tensor, candidates: Tensor, real: Tensor) -> Tensor:
        """:math:`\\log q` of each real variant up to a per-row constant, ``(B, K)`` (0 elsewhere): only the
        ``2n - 1`` tokens around ``position`` (an n-gram's terms that read it) are scored."""
        B, K = candidates.shape
        T = x.max_length
        n = self._ngram.order
        row, k = real.nonzero(as_tuple=True)
        out = torch.zeros(B, K, dtype=torch.float64, device=x.device)
        if row.numel() == 0:
            return out
        pos, length = position[row], x.lengths[row]
        start = (pos - (n - 1)).clamp(min=0)
        cols = start[:, None] + torch.arange(2 * n - 1, device=x.device)
        win_len = torch.minimum(length, pos + n) - start
        tok = x.tokens[row[:, None], cols.clamp(max=T - 1)]
        tok = tok.masked_fill(torch.arange(2 * n - 1, device=x.device) >= win_len[:, None], 0)
        tok.scatter_(1, (pos - start)[:, None], candidates[row, k][:, None])
        out[row, k] = ngram_log_q_terms(self._ngram, Sequences(tok, win_len, validate=False), pos - start).sum(1)
        return out

    def token_logits(self, x: Sequences, position: Tensor, candidates: Tensor) -> Tensor:
        B, K = candidates.shape
        T = x.max_length
        b = self.beta
        real = candidates > 0
        out = torch.zeros(B, K, dtype=torch.float64, device=x.device)
        if b < 1.0 and self._ngram is not None:
            out = out + (1.0 - b) * self._local_log_q(x, position, candidates, real)
        elif b < 1.0:
            tok = x.tokens.unsqueeze(1).expand(B, K, T).clone()
            tok.scatter_(2, position.view(B, 1, 1).expand(B, K, 1), candidates.clamp(min=1).unsqueeze(2))
            v = Sequences(tok.view(B * K, T), x.lengths.repeat_interleave(K), validate=False)
            out = out + (1.0 - b) * proposal_log_prob(self.proposal, v).view(B, K)
        if b > 0.0:
            with torch.no_grad():
                s = self._token_logits(x, position, candidates).detach().double()
            out = out + b * s.masked_fill(~real, 0.0)
        return out.masked_fill(candidates == 0, -math.inf).masked_fill(candidates < 0, 0.0)


def annealed_energy(model: Any, energy: Any, proposal: Any, space: TokenSequences) -> AnnealedSentenceEnergy:
    """The annealed energy of ``model``, with substitution scores when ``model`` offers ``token_logits``."""
    if supports(model, SupportsTokenLogits):
        return AnnealedTokenEnergy(energy, proposal, space, model.token_logits)
    return AnnealedSentenceEnergy(energy, proposal, space)


def per_length(log_w: Tensor, row_lengths: Tensor, lengths: tuple[int, ...], name: str,
               settings: dict[str, Any], sign: float = 1.0) -> dict[int, tuple[Estimate, Tensor]]:
    """``{length: (Estimate, its log weights)}`` from the log weights of each length's rows (lengths
    with fewer than 2 rows are left out): ``sign * log mean w``, delta-method stderr and Kish ESS
    (:func:`~ebms.estimators.importance.log_mean_weight`)."""
    out = {}
    rl = row_lengths.to(log_w.device)
    for n in lengths:
        lw = log_w[rl == n]
        if lw.shape[0] < 2:
            continue
        value, se, ess = log_mean_weight(lw, f"{name} at length {n}")
        out[n] = (Estimate(estimate=sign * value, stderr=se, ess=ess,
                           settings={**settings, "length": n, "n": int(lw.shape[0])}), lw)
    return out
