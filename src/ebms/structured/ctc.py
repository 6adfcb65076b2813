"""Connectionist temporal classification (CTC) on the semiring machinery, plus decoders.

Model (Graves, Fernandez, Gomez & Schmidhuber, 2006, "Connectionist temporal classification";
monograph Eq. 4.17-4.18): frame labels ``pi_t`` range over the vocabulary including a blank, the
collapse map ``B`` merges repeats and then drops blanks, and

    p(pi | x) = prod_t p_t(pi_t),        p(y | x) = sum_{pi : B(pi) = y} p(pi | x).

The sum runs on the extended label ``y' = (b, y_1, b, y_2, ..., y_L, b)`` with ``N = 2L + 1``
states. Starting from ``alpha_{-1} = one`` on state 0 (an empty prefix that has emitted nothing),

    alpha_t(s) = [ alpha_{t-1}(s) (+) alpha_{t-1}(s-1) (+) skip_s alpha_{t-1}(s-2) ] (x) lp_t(y'_s)
    total      = alpha_{T-1}(2L) (+) alpha_{T-1}(2L-1)

where ``skip_s`` holds when ``y'_s`` is not blank and differs from ``y'_{s-2}``. With
:class:`~ebms.structured.semiring.LogSemiring` the total is ``log p(y | x)``; with
:class:`~ebms.structured.semiring.MaxSemiring` it is the score of the best alignment (Viterbi),
whose gradient with respect to ``log_probs`` marks that alignment. ``T < L + #repeats`` makes
``y`` unreachable: the total is ``-inf`` (as in ``torch.nn.functional.ctc_loss``), with a zero
(never NaN) gradient.

Conventions follow ``torch.nn.functional.ctc_loss``: ``log_probs`` is time-major ``(T, B, V)``;
``targets`` is padded ``(B, S)`` (entries past ``target_lengths`` are ignored). Cost
``O(T B S)`` time in ``T`` sequential vectorised steps, ``O(T B S)`` memory for autograd.
The gradient is the exact derivative with respect to ``log_probs`` (minus the posterior
occupancy); torch's kernel adds ``exp(log_probs)`` assuming normalised inputs, and the two agree
once composed with ``log_softmax``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import Tensor

from ebms._checks import check_int, check_shape, check_tensor
from ebms.structured._ctc_scaled import scaled_log_likelihood, scaled_ok
from ebms.structured.semiring import LogSemiring, MaxSemiring, Semiring

__all__ = ["CTCDecoding", "best_alignment", "ctc_log_likelihood", "ctc_loss", "greedy_decode",
           "prefix_beam_search"]

NEG_INF = float("-inf")


@dataclass
class CTCDecoding:
    """Decoded label sequences. ``labels (B, L_max)`` long, padded with ``-1``; ``lengths (B,)``;
    ``scores (B,)``: the best path's log-probability (greedy) or ``log p(y | x)`` summed over the
    alignments kept in the beam (prefix beam search; exact when nothing is pruned)."""

    labels: Tensor
    lengths: Tensor
    scores: Tensor

    def sequences(self) -> list[list[int]]:
        """The label sequences as Python lists."""
        return [row[:n].tolist() for row, n in zip(self.labels, self.lengths.tolist())]


def _check_log_probs(log_probs: Tensor, blank: int) -> tuple[int, int, int]:
    check_tensor(log_probs, "log_probs", floating=True)
    if log_probs.dim() != 3:
        raise ValueError(f"log_probs: expected shape (T, B, V) (time-major, as torch ctc_loss); "
                         f"got {tuple(log_probs.shape)}")
    t, b, v = log_probs.shape
    if t == 0 or b == 0 or v == 0:
        raise ValueError(f"log_probs: expected non-empty T, B and V; got shape {(t, b, v)}")
    check_int(blank, "blank")
    if not 0 <= blank < v:
        raise ValueError(f"blank: expected an int in [0, {v}) (V = log_probs.shape[2]); got {blank}")
    bad = torch.isnan(log_probs) | (log_probs == float("inf"))
    if bool(bad.any()):
        raise ValueError(f"log_probs: expected no NaN or +inf entries (-inf is allowed); "
                         f"got {int(bad.sum())} in shape {tuple(log_probs.shape)}")
    return t, b, v


def _check_lengths(x: Tensor | None, name: str, batch: int, high: int, what: str,
                   device: torch.device) -> Tensor:
    if x is None:
        return torch.full((batch,), high, dtype=torch.long, device=device)
    check_tensor(x, name)
    if x.is_floating_point() or x.is_complex() or x.dtype == torch.bool:
        raise TypeError(f"{name}: expected an integer tensor; got dtype {x.dtype}")
    check_shape(x, (batch,), name)
    lo, hi = int(x.min()), int(x.max())
    if lo < 0 or hi > high:
        raise ValueError(f"{name}: expected values in [0, {high}] ({what}); got min {lo}, max {hi}")
    return x.to(device=device, dtype=torch.long)


def _check_targets(targets: Tensor, target_lengths: Tensor | None, batch: int, v: int,
                   blank: int, device: torch.device) -> tuple[Tensor, Tensor]:
    check_tensor(targets, "targets")
    if targets.is_floating_point() or targets.is_complex() or targets.dtype == torch.bool:
        raise TypeError(f"targets: expected an integer tensor; got dtype {targets.dtype}")
    check_shape(targets, (batch, None), "targets (padded (B, S))")
    s = targets.shape[1]
    lengths = _check_lengths(target_lengths, "target_lengths", batch, s, "S = targets.shape[1]",
                             device)
    targets = targets.to(device=device, dtype=torch.long)
    valid = torch.arange(s, device=device) < lengths.unsqueeze(1)
    used = targets[valid]
    if bool((used == blank).any()):
        raise ValueError(f"targets: expected no blank ({blank}) within target_lengths; "
                         f"got {int((used == blank).sum())} blank entries")
    if used.numel() and (int(used.min()) < 0 or int(used.max()) >= v):
        raise ValueError(f"targets: expected labels in [0, {v}) (V = log_probs.shape[2]) within "
                         f"target_lengths; got min {int(used.min())}, max {int(used.max())}")
    return torch.where(valid, targets, blank), lengths


def _safe_sum(semiring: Semiring, cand: Tensor) -> Tensor:
    """Semiring sum over the last axis; all-``zero`` cells stay ``zero`` with a zero gradient
    (``logsumexp`` of only ``-inf`` would back-propagate NaN)."""
    dead = torch.isneginf(cand).all(dim=-1).all(dim=0)
    out = semiring.sum(torch.where(dead.unsqueeze(-1), 0.0, cand), dim=-1)
    return torch.where(dead, semiring.zero, out)


def ctc_log_likelihood(log_probs: Tensor, targets: Tensor, input_lengths: Tensor | None,
                       target_lengths: Tensor | None, *, blank: int = 0,
                       semiring: Semiring | None = None) -> Tensor:
    """Semiring total over the CTC alignments of each target (see the module docstring).

    Args:
        log_probs: ``(T, B, V)`` per-frame log-probabilities (usually ``log_softmax`` outputs).
        targets: ``(B, S)`` padded label ids in ``[0, V)`` other than ``blank``.
        input_lengths: ``(B,)`` ints in ``[0, T]``; ``None`` means ``T``.
        target_lengths: ``(B,)`` ints in ``[0, S]``; ``None`` means ``S``.
        blank: id of the blank label.
        semiring: ``LogSemiring()`` (default) gives ``log p(y | x)``; ``MaxSemiring()`` the best
            alignment's log-probability; ``KMaxSemiring(k)`` the ``k`` best alignments.

    Returns:
        ``(B,)`` for log and max, ``(k, B)`` for k-max; ``-inf`` where ``y`` is unreachable.
    """
    t, b, v = _check_log_probs(log_probs, blank)
    semiring = LogSemiring() if semiring is None else semiring
    if not isinstance(semiring, Semiring):
        raise TypeError(f"semiring: expected an ebms Semiring; got {type(semiring).__name__}")
    dev = log_probs.device
    input_lengths = _check_lengths(input_lengths, "input_lengths", b, t, "T = log_probs.shape[0]",
                                   dev)
    labels, lengths = _check_targets(targets, target_lengths, b, v, blank, dev)
    n = 2 * labels.shape[1] + 1
    ext = labels.new_full((b, n), blank)
    ext[:, 1::2] = labels
    skip = torch.zeros(b, n, dtype=torch.bool, device=dev)
    skip[:, 2:] = (ext[:, 2:] != blank) & (ext[:, 2:] != ext[:, :-2])

    emissions = log_probs.gather(2, ext.unsqueeze(0).expand(t, b, n))  # (T, B, N)
    if type(semiring) is LogSemiring and scaled_ok(emissions[: int(input_lengths.max()) if b else 0]):
        return scaled_log_likelihood(
            log_probs, ext, skip, input_lengths, lengths,
            lambda x: ctc_log_likelihood(x, targets, input_lengths, lengths, blank=blank, semiring=_LOG_SPACE),
        )
    return _log_space_total(emissions, skip, input_lengths, lengths, semiring)


class _LogSpace(LogSemiring):
    """The log semiring, forcing the log-space recursion (second derivatives of the scaled path)."""


_LOG_SPACE = _LogSpace()


def _log_space_total(emissions: Tensor, skip: Tensor, input_lengths: Tensor, lengths: Tensor,
                     semiring: Semiring) -> Tensor:
    """The semiring recursion of the module docstring on ``emissions (T, B, N)``, with autograd."""
    b, n = skip.shape
    no_skip = (~skip).unsqueeze(0)
    init = emissions.new_full((b, n), NEG_INF)
    init[:, 0] = 0.0
    alpha = semiring.lift(init)  # (size, B, N)
    pad = alpha.new_full((*alpha.shape[:2], 2), NEG_INF)
    for step in range(int(input_lengths.max())):
        shifted = torch.cat([pad, alpha], dim=-1)
        prev2 = shifted[..., :-2].masked_fill(no_skip, NEG_INF)
        cand = torch.stack([alpha, shifted[..., 1:-1], prev2], dim=-1)
        new = semiring.times(_safe_sum(semiring, cand), emissions[step])
        alpha = torch.where((step < input_lengths).view(1, b, 1), new, alpha)
    last = (2 * lengths).view(1, b, 1).expand(alpha.shape[0], b, 1)
    end = alpha.gather(2, last).squeeze(-1)
    before = alpha.gather(2, (last - 1).clamp_min(0)).squeeze(-1)
    before = before.masked_fill((lengths == 0).view(1, b), NEG_INF)
    total = _safe_sum(semiring, torch.stack([end, before], dim=-1))
    return total.squeeze(0) if semiring.size == 1 else total


def ctc_loss(log_probs: Tensor, targets: Tensor, input_lengths: Tensor | None,
             target_lengths: Tensor | None, *, blank: int = 0, reduction: str = "mean",
             zero_infinity: bool = False) -> Tensor:
    """Negative log-likelihood ``-log p(y | x)``, with ``torch.nn.functional.ctc_loss``'s rules.

    ``reduction``: ``"none"`` gives ``(B,)``; ``"sum"`` the total; ``"mean"`` divides each loss by
    its target length (clamped to at least 1) and averages over the batch. ``zero_infinity``
    replaces infinite losses (unreachable targets) and their gradients by zero. Other arguments
    as :func:`ctc_log_likelihood`.
    """
    if reduction not in ("mean", "sum", "none"):
        raise ValueError(f"reduction: expected 'mean', 'sum' or 'none'; got {reduction!r}")
    if not isinstance(zero_infinity, bool):
        raise TypeError(f"zero_infinity: expected a bool; got {zero_infinity!r}")
    loss = -ctc_log_likelihood(log_probs, targets, input_lengths, target_lengths, blank=blank)
    if zero_infinity:
        loss = torch.where(torch.isinf(loss), 0.0, loss)
    return reduce_sequence_loss(loss, reduction, targets, target_lengths)


def reduce_sequence_loss(loss: Tensor, reduction: str, targets: Tensor, target_lengths: Tensor | None) -> Tensor:
    """``torch.nn.functional.ctc_loss``'s reductions of per-sequence losses ``(B,)``: ``"none"``,
    ``"sum"``, or ``"mean"`` (each divided by its target length, at least 1, then averaged)."""
    if reduction == "none":
        return loss
    if reduction == "sum":
        return loss.sum()
    tl = targets.shape[1] if target_lengths is None else target_lengths
    denom = torch.as_tensor(tl, device=loss.device).clamp_min(1).to(loss.dtype)
    return (loss / denom).mean()


def best_alignment(log_probs: Tensor, targets: Tensor, input_lengths: Tensor | None,
                   target_lengths: Tensor | None, *, blank: int = 0) -> tuple[Tensor, Tensor]:
    """Most probable frame labelling ``pi`` with ``B(pi) = y`` (Viterbi, via the max semiring's
    gradient). Returns ``(alignment (B, T) long, -1 past each input length and for unreachable
    targets; score (B,))``, the score being ``log p(pi | x)`` (``-inf`` if unreachable)."""
    _check_log_probs(log_probs, blank)
    with torch.enable_grad():
        lp = log_probs.detach().clone().requires_grad_(True)
        score = ctc_log_likelihood(lp, targets, input_lengths, target_lengths, blank=blank,
                                   semiring=MaxSemiring())
        (grad,) = torch.autograd.grad(score.sum(), lp)
    used = grad.sum(-1).transpose(0, 1) > 0.5  # (B, T): frames on the path
    path = grad.argmax(-1).transpose(0, 1)
    return torch.where(used, path, -1), score.detach()


def greedy_decode(log_probs: Tensor, input_lengths: Tensor | None = None, *,
                  blank: int = 0) -> CTCDecoding:
    """Best path decoding: per-frame argmax, merge repeats, drop blanks. Score: the best path's
    ``sum_t max_v log_probs[t, b, v]``. Cost ``O(T B V)``."""
    t, b, _ = _check_log_probs(log_probs, blank)
    lengths = _check_lengths(input_lengths, "input_lengths", b, t, "T = log_probs.shape[0]",
                             log_probs.device)
    best, arg = log_probs.detach().max(dim=-1)  # (T, B)
    frames = torch.arange(t, device=log_probs.device).unsqueeze(1) < lengths.unsqueeze(0)
    scores = torch.where(frames, best, 0.0).sum(0)
    prev = torch.cat([arg.new_full((1, b), -1), arg[:-1]], dim=0)
    keep = (frames & (arg != blank) & (arg != prev)).transpose(0, 1)  # (B, T)
    seqs = [row[k].tolist() for row, k in zip(arg.transpose(0, 1), keep)]
    return _pack(seqs, scores, log_probs.device)


def _pack(seqs: list[list[int]], scores: Tensor, device: torch.device) -> CTCDecoding:
    width = max((len(s) for s in seqs), default=0)
    labels = torch.full((len(seqs), width), -1, dtype=torch.long, device=device)
    for i, s in enumerate(seqs):
        labels[i, :len(s)] = torch.tensor(s, dtype=torch.long)
    lengths = torch.tensor([len(s) for s in seqs], dtype=torch.long, device=device)
    return CTCDecoding(labels, lengths, scores)


def _lae(a: float, b: float) -> float:
    if a == NEG_INF:
        return b
    if b == NEG_INF:
        return a
    m = max(a, b)
    return m + math.log1p(math.exp(-abs(a - b)))


def prefix_beam_search(log_probs: Tensor, input_lengths: Tensor | None = None, *,
                       beam_width: int = 8, blank: int = 0) -> CTCDecoding:
    """Prefix beam search (Hannun et al., 2014, "First-pass large vocabulary continuous speech
    recognition using bi-directional recurrent DNNs"): keeps the ``beam_width`` label prefixes
    with the largest ``log p(prefix | x_{1..t})``, each split into paths ending in blank and not.

    Per frame, a prefix ``l`` with ``(p_b, p_nb)`` goes to ``l`` by a blank (``p_b + p_nb``) or by
    repeating its last label (``p_nb`` only), and to ``l + (v,)`` by ``v`` (``p_b`` only when
    ``v`` equals the last label, otherwise ``p_b + p_nb``). Without pruning the final scores are
    exact ``log p(l | x)``. Cost ``O(T * beam_width * V)`` Python steps per sequence.
    """
    t, b, v = _check_log_probs(log_probs, blank)
    check_int(beam_width, "beam_width", minimum=1)
    lengths = _check_lengths(input_lengths, "input_lengths", b, t, "T = log_probs.shape[0]",
                             log_probs.device)
    table = log_probs.detach().double().cpu().transpose(0, 1).tolist()  # (B, T, V)
    seqs, scores = [], []
    for i in range(b):
        beams: dict[tuple[int, ...], list[float]] = {(): [0.0, NEG_INF]}
        for frame in table[i][: int(lengths[i])]:
            nxt: dict[tuple[int, ...], list[float]] = {}
            for prefix, (pb, pnb) in beams.items():
                here = nxt.setdefault(prefix, [NEG_INF, NEG_INF])
                here[0] = _lae(here[0], _lae(pb, pnb) + frame[blank])
                for c in range(v):
                    if c == blank:
                        continue
                    grown = nxt.setdefault(prefix + (c,), [NEG_INF, NEG_INF])
                    if prefix and prefix[-1] == c:
                        here[1] = _lae(here[1], pnb + frame[c])
                        grown[1] = _lae(grown[1], pb + frame[c])
                    else:
                        grown[1] = _lae(grown[1], _lae(pb, pnb) + frame[c])
            ranked = sorted(nxt.items(), key=lambda kv: _lae(*kv[1]), reverse=True)
            beams = dict(ranked[:beam_width])
        best, (pb, pnb) = max(beams.items(), key=lambda kv: _lae(*kv[1]))
        seqs.append(list(best))
        scores.append(_lae(pb, pnb))
    dev = log_probs.device
    return _pack(seqs, torch.tensor(scores, dtype=log_probs.dtype, device=dev), dev)
