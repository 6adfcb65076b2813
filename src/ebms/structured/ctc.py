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

Exact at every scale: both routes below stay in log space, so no product of probabilities can
underflow, whatever the logit scale or the length.

* ``method="auto"`` (default) with the log semiring and float32/float64 input: the value comes
  from torch's fused CTC kernel (``torch.nn.functional.ctc_loss``) and the gradient is the exact
  derivative with respect to ``log_probs`` recovered from torch's backward
  (:mod:`ebms.structured._ctc_fused`: torch returns ``exp(lp) - gamma``, valid for logits
  behind a ``log_softmax``; ebms returns ``gamma``, valid for any ``log_probs``).
* ``method="dp"``, the max / k-max semirings, other dtypes and second derivatives: ebms's own
  recursion (:mod:`ebms.structured._ctc_dp`), vectorised over batch and states, autograd.

Normalisation: :func:`ctc_loss` (and :class:`~ebms.structured.CTCLoss`) read ``log_probs`` as
per-frame log-probabilities and check it: the frames within ``input_lengths`` must have
``logsumexp`` 0 within a tolerance set by the dtype
(:func:`~ebms.structured._ctc_inputs.normalization_tolerance`; read on up to 32 evenly spaced
frames per sequence, :func:`~ebms.structured._ctc_inputs.check_normalized`), else a ``ValueError``
naming ``log_probs`` (unnormalised scores would give a loss that is not a negative
log-likelihood, with no error). ``normalized=False`` takes unnormalised scores and applies
``log_softmax`` over the last axis first. :func:`ctc_log_likelihood` is the semiring total of any
per-frame scores and checks nothing: with normalised ``log_probs`` and the log semiring it is
``log p(y | x)``.

Conventions and accepted inputs follow ``torch.nn.functional.ctc_loss``: ``log_probs`` is
time-major ``(T, B, V)`` or unbatched ``(T, V)``; ``targets`` is padded ``(B, S)`` or 1-D
concatenated; lengths are tensors, lists, tuples or ints (:mod:`ebms.structured._ctc_inputs`).
Cost ``O(T B S)`` time, ``O(T B S)`` memory.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from ebms._checks import check_bool, check_choice, check_int, check_tensor
from ebms.structured._ctc_dp import dp_total
from ebms.structured._ctc_fused import FUSED_DTYPES, fused_log_likelihood
from ebms.structured._ctc_inputs import CTCInputs, check_log_probs, check_normalized, lengths_tensor, prepare
from ebms.structured.semiring import LogSemiring, MaxSemiring, Semiring

__all__ = ["CTCDecoding", "best_alignment", "ctc_log_likelihood", "ctc_loss", "greedy_decode",
           "prefix_beam_search"]

NEG_INF = float("-inf")
METHODS = ("auto", "torch", "dp")


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


def ctc_log_likelihood(log_probs: Tensor, targets: Tensor, input_lengths: Any = None,
                       target_lengths: Any = None, *, blank: int = 0,
                       semiring: Semiring | None = None, method: str = "auto") -> Tensor:
    """Semiring total over the CTC alignments of each target (see the module docstring).

    Args:
        log_probs: ``(T, B, V)`` per-frame log-probabilities (usually ``log_softmax`` outputs),
            or unbatched ``(T, V)``. Not checked for normalisation: any per-frame scores give
            their semiring total (the log-likelihood when they are normalised; :func:`ctc_loss`
            checks).
        targets: ``(B, S)`` padded label ids in ``[0, V)`` other than ``blank``, 1-D
            concatenated ``(sum(target_lengths),)``, or ``(S,)`` for unbatched input.
        input_lengths: ``(B,)`` ints in ``[0, T]`` (tensor, list or tuple; an int when
            unbatched); ``None`` means ``T``.
        target_lengths: ``(B,)`` ints; ``None`` means ``S`` (required for concatenated targets
            with ``B > 1``).
        blank: id of the blank label.
        semiring: ``LogSemiring()`` (default) gives ``log p(y | x)``; ``MaxSemiring()`` the best
            alignment's log-probability; ``KMaxSemiring(k)`` the ``k`` best alignments.
        method: ``"auto"`` (torch's fused kernel for the log semiring in float32/float64, ebms's
            recursion otherwise), ``"torch"`` (require the fused kernel) or ``"dp"`` (ebms's own
            log-space recursion, autograd). All are exact; the gradient is always the true
            derivative with respect to ``log_probs``.

    Returns:
        ``(B,)`` for log and max, ``(k, B)`` for k-max (``()`` / ``(k,)`` when unbatched);
        ``-inf`` where ``y`` is unreachable.
    """
    x = prepare(log_probs, targets, input_lengths, target_lengths, blank)
    out = _log_likelihood(x, semiring, method)
    return out[..., 0] if x.unbatched else out


def _log_likelihood(x: CTCInputs, semiring: Semiring | None, method: str) -> Tensor:
    """:func:`ctc_log_likelihood` on checked inputs (batched result)."""
    semiring = LogSemiring() if semiring is None else semiring
    if not isinstance(semiring, Semiring):
        raise TypeError(f"semiring: expected an ebms Semiring; got {type(semiring).__name__}")
    check_choice(method, "method", METHODS)
    fused = type(semiring) is LogSemiring and x.log_probs.dtype in FUSED_DTYPES
    if method == "torch" and not fused:
        raise ValueError(f"method: 'torch' needs the log semiring and float32/float64 log_probs; "
                         f"got {type(semiring).__name__} and {x.log_probs.dtype}")
    if fused and method != "dp":
        return fused_log_likelihood(x.log_probs, x.labels, x.input_lengths, x.target_lengths,
                                    x.blank, has_neginf=x.has_neginf)
    return dp_total(x.log_probs, x.labels, x.input_lengths, x.target_lengths, x.blank, semiring)


def _normalize_scores(log_probs: Any, normalized: Any) -> Any:
    """``log_probs`` unchanged when ``normalized`` (checked later, against the input lengths), else
    ``log_softmax`` over the last axis of the float tensor ``log_probs`` (unnormalised scores)."""
    check_bool(normalized, "normalized")
    if normalized:
        return log_probs
    check_tensor(log_probs, "log_probs", floating=True, min_dim=1)
    return torch.log_softmax(log_probs, dim=-1)


def ctc_loss(log_probs: Tensor, targets: Tensor, input_lengths: Any = None,
             target_lengths: Any = None, *, blank: int = 0, reduction: str = "mean",
             zero_infinity: bool = False, method: str = "auto", normalized: bool = True) -> Tensor:
    """Negative log-likelihood ``-log p(y | x)``, with ``torch.nn.functional.ctc_loss``'s rules.

    Args:
        log_probs, targets, input_lengths, target_lengths, blank, method: as
            :func:`ctc_log_likelihood` (every input form of ``torch.nn.functional.ctc_loss``).
        reduction: ``"none"`` gives ``(B,)`` (``()`` unbatched); ``"sum"`` the total; ``"mean"``
            divides each loss by its target length (clamped to at least 1) and averages over the
            batch.
        zero_infinity: replace infinite losses (unreachable targets) and their gradients by zero.
        normalized: ``True`` (default): ``log_probs`` are log-probabilities, checked: frames
            within ``input_lengths`` must have ``logsumexp`` 0 within a dtype-dependent tolerance
            (about ``3.5e-4`` in float32, ``1.5e-8`` in float64), read on up to 32 evenly spaced
            frames per sequence (a few percent of the loss's cost); ``False``: ``log_probs`` are
            unnormalised scores (logits) and ``log_softmax(-1)`` is applied first.

    Returns:
        The reduced loss. Its gradient is the exact derivative with respect to ``log_probs``
        (torch's equals it only behind a ``log_softmax``; both agree with respect to logits).

    Raises:
        ValueError: ``log_probs`` not normalised (naming the worst frame and sequence), and the
            argument checks of :func:`ctc_log_likelihood`.
    """
    if reduction not in ("mean", "sum", "none"):
        raise ValueError(f"reduction: expected 'mean', 'sum' or 'none'; got {reduction!r}")
    check_bool(zero_infinity, "zero_infinity")
    x = prepare(_normalize_scores(log_probs, normalized), targets, input_lengths, target_lengths, blank)
    if normalized:
        check_normalized(x.log_probs, x.input_lengths)
    loss = -_log_likelihood(x, None, method)
    if zero_infinity:
        loss = torch.where(torch.isinf(loss), 0.0, loss)
    out = reduce_sequence_loss(loss, reduction, x.target_lengths)
    return out[0] if x.unbatched and reduction == "none" else out


def reduce_sequence_loss(loss: Tensor, reduction: str, target_lengths: Tensor) -> Tensor:
    """``torch.nn.functional.ctc_loss``'s reductions of per-sequence losses ``(B,)``: ``"none"``,
    ``"sum"``, or ``"mean"`` (each divided by its target length ``(B,)``, at least 1, then
    averaged)."""
    if reduction == "none":
        return loss
    if reduction == "sum":
        return loss.sum()
    return (loss / target_lengths.to(loss.device).clamp_min(1).to(loss.dtype)).mean()


def best_alignment(log_probs: Tensor, targets: Tensor, input_lengths: Tensor | None,
                   target_lengths: Tensor | None, *, blank: int = 0) -> tuple[Tensor, Tensor]:
    """Most probable frame labelling ``pi`` with ``B(pi) = y`` (Viterbi, via the max semiring's
    gradient). Returns ``(alignment (B, T) long, -1 past each input length and for unreachable
    targets; score (B,))``, the score being ``log p(pi | x)`` (``-inf`` if unreachable)."""
    check_log_probs(log_probs, blank, allow_unbatched=False)
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
    t, b, _ = check_log_probs(log_probs, blank, allow_unbatched=False).shape
    lengths = lengths_tensor(input_lengths, "input_lengths", b, t, "T = log_probs.shape[0]",
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
    t, b, v = check_log_probs(log_probs, blank, allow_unbatched=False).shape
    check_int(beam_width, "beam_width", minimum=1)
    lengths = lengths_tensor(input_lengths, "input_lengths", b, t, "T = log_probs.shape[0]",
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
