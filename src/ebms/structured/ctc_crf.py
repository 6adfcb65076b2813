"""CTC-CRF: a globally normalised CRF over CTC paths with a label n-gram edge potential.

Model (Xiang & Ou, 2019, "CRF-based single-stage acoustic modeling with CTC topology", ICASSP;
monograph Eq. 4.21-4.25). With ``lp_t = log_softmax`` acoustic outputs and a fixed label n-gram
(the *denominator LM*), a frame labelling ``pi`` has potential

    phi(pi, x) = log p_LM(B(pi)) + sum_t lp_t(pi_t),        p(pi | x) = exp(phi) / Z_den(x),

and since every ``pi`` with ``B(pi) = y`` carries the same ``log p_LM(y)``,

    log p(y | x) = log p_LM(y) + log p_CTC(y | x) - log Z_den(x).

``log p_CTC`` is the CTC forward on the same ``lp`` (:mod:`ebms.structured.ctc`);
``log Z_den = log sum_pi exp(phi(pi, x))`` runs over the :class:`DenominatorGraph`. The gradient
with respect to the pre-softmax logits is ``gamma_num - gamma_den`` (occupancies).

Loss (the CAT toolkit's convention): ``-(log p_CTC - log Z_den) - ctc_weight * log p_CTC`` per
utterance. The constant ``log p_LM(y)`` is dropped from the loss (it has no gradient), so with
``LabelNGram.zeros`` (``Z_den = 1``) the loss equals the CTC loss; the full log-likelihood,
``log p_LM(y)`` included, is :func:`ctc_crf_log_likelihood`.

Normalisation: the CRF is normalised globally, so adding a constant ``c_t`` to every entry of
frame ``t`` adds ``c_t`` to every path's potential and cancels between ``log p_CTC`` and
``log Z_den``: :func:`ctc_crf_log_likelihood` and the loss with ``ctc_weight = 0`` take any
per-frame scores and give the same values as for their ``log_softmax``. The auxiliary CTC term
(``ctc_weight > 0``) and ``numerator="torch"`` (torch's gradient assumes a ``log_softmax``) do
read ``log_probs`` as log-probabilities, so :func:`ctc_crf_loss` then checks the frames are
normalised (as :func:`ebms.structured.ctc.ctc_loss`); ``normalized=False`` applies
``log_softmax(-1)`` first.
"""

from __future__ import annotations

import math
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor

from ebms._checks import check_in_range, check_int
from ebms.sequences import Sequences
from ebms.structured._ctc_inputs import check_log_probs, check_normalized, lengths_tensor, prepare
from ebms.structured._den_partition import den_arcs, den_scaled
from ebms.structured.ctc import (
    CTCDecoding,
    _normalize_scores,
    _pack,
    ctc_log_likelihood,
    reduce_sequence_loss,
)
from ebms.structured.den_graph import DenominatorGraph

__all__ = ["ctc_crf_decode", "ctc_crf_log_likelihood", "ctc_crf_loss", "den_log_partition"]

NEG_INF = float("-inf")


def _check_graph(graph: DenominatorGraph, v: int, blank: int) -> None:
    if not isinstance(graph, DenominatorGraph):
        raise TypeError(f"graph: expected a DenominatorGraph; got {type(graph).__name__}")
    if graph.n_symbols != v:
        raise ValueError(f"log_probs: expected V = {graph.n_symbols} symbols (the graph's "
                         f"n_labels, blank included); got V = {v}")
    if blank != graph.blank:
        raise ValueError(f"blank: the denominator graph uses blank {graph.blank}; got {blank}")


def den_log_partition(log_probs: Tensor, input_lengths: Any, graph: DenominatorGraph,
                      *, method: str = "scaled") -> Tensor:
    """``log Z_den(x) = log sum_pi exp(log p_LM(B(pi)) + sum_t lp_t(pi_t))`` for each sequence.

    Args:
        log_probs: ``(T, B, V)`` log-softmax outputs (time-major); ``V = graph.n_symbols``.
        input_lengths: ``(B,)`` ints in ``[0, T]`` (tensor, list or tuple; ragged); ``None``
            means ``T``.
        graph: the :class:`DenominatorGraph`.
        method: ``"scaled"`` (default): probability-space forward with per-frame renormalisation
            and a hand-written forward-backward gradient (``gamma_den``), the transition matrix
            dense up to 512 states and sparse CSR above, checked entry by entry for underflow
            (a sequence that underflows is recomputed in float64, then in log space: exact at
            every scale; see :mod:`ebms.structured._den_partition`); ``"arcs"``: log-space
            forward over the padded incoming arcs (``logsumexp``), differentiated by autograd.
            Both are vectorised over batch and states and loop over time only: ``O(T B A)``.

    Returns:
        ``(B,)`` in the dtype of ``log_probs``.
    """
    if not isinstance(graph, DenominatorGraph):
        raise TypeError(f"graph: expected a DenominatorGraph; got {type(graph).__name__}")
    lp = check_log_probs(log_probs, graph.blank, allow_unbatched=False)
    t, b, v = lp.shape
    _check_graph(graph, v, graph.blank)
    if method not in ("scaled", "arcs"):
        raise ValueError(f"method: expected 'scaled' or 'arcs'; got {method!r}")
    lengths = lengths_tensor(input_lengths, "input_lengths", b, t, "T = log_probs.shape[0]",
                             lp.device)
    if method == "arcs":
        return den_arcs(lp, lengths, graph)
    return den_scaled(lp, lengths, graph)


def ctc_crf_log_likelihood(log_probs: Tensor, targets: Tensor, input_lengths: Any,
                           target_lengths: Any, graph: DenominatorGraph, *,
                           blank: int = 0) -> Tensor:
    """``log p(y | x) = log p_LM(y) + log p_CTC(y | x) - log Z_den(x)``, shape ``(B,)``.

    Arguments as :func:`ebms.structured.ctc.ctc_log_likelihood` (every input form of
    ``torch.nn.functional.ctc_loss``, unbatched ``(T, V)`` giving ``()``) plus the graph;
    ``-inf`` where ``y`` cannot be aligned to the frames. ``log_probs`` need not be normalised
    per frame: the value is that of its ``log_softmax`` (module docstring).
    """
    _check_graph(graph, check_log_probs(log_probs, blank).shape[2], blank)
    x = prepare(log_probs, targets, input_lengths, target_lengths, blank)
    ctc = ctc_log_likelihood(x.log_probs, x.labels, x.input_lengths, x.target_lengths, blank=blank)
    lm = graph.lm.log_prob(Sequences(x.labels, x.target_lengths)).to(x.log_probs.dtype)
    out = lm + ctc - den_log_partition(x.log_probs, x.input_lengths, graph)
    return out[0] if x.unbatched else out


def ctc_crf_loss(log_probs: Tensor, targets: Tensor, input_lengths: Any,
                 target_lengths: Any, graph: DenominatorGraph, *, blank: int = 0,
                 ctc_weight: float = 0.0, reduction: str = "mean",
                 numerator: str = "ebms", normalized: bool = True) -> Tensor:
    """CTC-CRF loss ``log Z_den - (1 + ctc_weight) log p_CTC`` per utterance (``log p_LM(y)``
    dropped: a constant).

    ``ctc_weight`` is the auxiliary CTC weight ``lambda >= 0``. ``reduction`` follows
    :func:`ebms.structured.ctc.ctc_loss`: ``"none"`` ``(B,)``, ``"sum"``, or ``"mean"`` (each
    loss divided by its target length, clamped to 1, then averaged over the batch), so that with
    ``LabelNGram.zeros`` this equals ``ctc_loss`` for every reduction. Inputs take every form of
    :func:`ebms.structured.ctc.ctc_loss`.

    ``numerator="ebms"`` (default) computes ``log p_CTC`` with
    :func:`ebms.structured.ctc.ctc_log_likelihood` (torch's fused kernel for the value, the exact
    derivative with respect to ``log_probs``); ``"torch"`` uses ``torch.nn.functional.ctc_loss``
    as is, whose gradient with respect to ``log_probs`` adds ``(1 + ctc_weight) exp(log_probs)``:
    a term that vanishes once composed with ``log_softmax``, so gradients with respect to the
    logits are the same, but ``gradcheck`` with respect to ``log_probs`` then fails. An
    unreachable target (too few frames) gives an infinite loss.

    ``normalized=True`` (default): with ``ctc_weight > 0`` or ``numerator="torch"``, the frames
    of ``log_probs`` within ``input_lengths`` must be normalised (``ValueError`` naming
    ``log_probs`` otherwise; see the module docstring for why the plain CRF loss needs no
    check); ``normalized=False``: ``log_probs`` are scores and ``log_softmax(-1)`` is applied first.
    """
    if numerator not in ("ebms", "torch"):
        raise ValueError(f"numerator: expected 'ebms' or 'torch'; got {numerator!r}")
    if reduction not in ("mean", "sum", "none"):
        raise ValueError(f"reduction: expected 'mean', 'sum' or 'none'; got {reduction!r}")
    lam = check_in_range(ctc_weight, "ctc_weight", 0.0, math.inf)
    log_probs = _normalize_scores(log_probs, normalized)
    _check_graph(graph, check_log_probs(log_probs, blank).shape[2], blank)
    x = prepare(log_probs, targets, input_lengths, target_lengths, blank)
    if normalized and (lam > 0 or numerator == "torch"):
        check_normalized(x.log_probs, x.input_lengths)
    if numerator == "torch":
        ctc = -F.ctc_loss(x.log_probs, x.labels, x.input_lengths, x.target_lengths, blank=blank,
                          reduction="none")
    else:
        ctc = ctc_log_likelihood(x.log_probs, x.labels, x.input_lengths, x.target_lengths,
                                 blank=blank)
    loss = den_log_partition(x.log_probs, x.input_lengths, graph) - (1.0 + lam) * ctc
    out = reduce_sequence_loss(loss, reduction, x.target_lengths)
    return out[0] if x.unbatched and reduction == "none" else out


def _viterbi(log_probs: Tensor, lengths: Tensor, graph: DenominatorGraph) -> CTCDecoding:
    t, b, _ = log_probs.shape
    tab = graph.tables(log_probs.dtype, log_probs.device)
    sym, src, w = tab["state_symbol"], tab["in_src"], tab["in_weight"]
    em = log_probs.index_select(2, sym)
    delta = log_probs.new_full((b, graph.n_states), NEG_INF)
    delta[:, graph.start] = 0.0
    steps = int(lengths.max())
    back = torch.zeros(steps, b, graph.n_states, dtype=torch.long, device=log_probs.device)
    keep = torch.arange(graph.n_states, device=log_probs.device).expand(b, -1)
    for step in range(steps):
        best, arg = (delta[:, src] + w).max(-1)
        act = (step < lengths).unsqueeze(1)
        delta = torch.where(act, best + em[step], delta)
        came = src.unsqueeze(0).expand(b, -1, -1).gather(2, arg.unsqueeze(-1)).squeeze(-1)
        back[step] = torch.where(act, came, keep)
    score, state = (delta + tab["final"]).max(-1)
    frames = []
    for step in range(steps - 1, -1, -1):
        frames.append(torch.where(step < lengths, sym[state], -1))
        state = back[step].gather(1, state.unsqueeze(1)).squeeze(1)
    path = torch.stack(frames[::-1], 1).tolist() if steps else [[] for _ in range(b)]
    seqs = []
    for row in path:
        out, prev = [], None
        for p in row:
            if p >= 0 and p != prev and p != graph.blank:
                out.append(p)
            prev = p
        seqs.append(out)
    return _pack(seqs, score.detach(), log_probs.device)


def _lae(a: float, b: float) -> float:
    if a == NEG_INF:
        return b
    if b == NEG_INF:
        return a
    return max(a, b) + math.log1p(math.exp(-abs(a - b)))


def _beam(log_probs: Tensor, lengths: Tensor, graph: DenominatorGraph, beam: int) -> CTCDecoding:
    lm, v = graph.lm, graph.n_symbols
    n = lm.order
    table = lm.table.reshape(-1).tolist()
    frames = log_probs.detach().double().cpu().transpose(0, 1).tolist()

    def lmw(prefix: tuple[int, ...], w: int) -> float:
        hist = ((0,) * (n - 1) + prefix)[len(prefix):] if n > 1 else ()
        idx = w
        for j, x in enumerate(hist):
            idx += x * v ** (n - 1 - j)
        return table[idx]

    seqs, scores = [], []
    for i in range(len(frames)):
        beams: dict[tuple[int, ...], list[float]] = {(): [0.0, NEG_INF]}
        for frame in frames[i][: int(lengths[i])]:
            nxt: dict[tuple[int, ...], list[float]] = {}
            for prefix, (pb, pnb) in beams.items():
                here = nxt.setdefault(prefix, [NEG_INF, NEG_INF])
                here[0] = _lae(here[0], _lae(pb, pnb) + frame[graph.blank])
                if prefix:
                    here[1] = _lae(here[1], pnb + frame[prefix[-1]])
                for c in range(1, v):
                    grown = nxt.setdefault(prefix + (c,), [NEG_INF, NEG_INF])
                    base = pb if prefix and prefix[-1] == c else _lae(pb, pnb)
                    grown[1] = _lae(grown[1], base + lmw(prefix, c) + frame[c])
            ranked = sorted(nxt.items(), key=lambda kv: _lae(*kv[1]), reverse=True)
            beams = dict(ranked[:beam])
        done = {p: _lae(*s) + lmw(p, 0) for p, s in beams.items()}
        best = max(done, key=done.__getitem__)
        seqs.append(list(best))
        scores.append(done[best])
    dev = log_probs.device
    return _pack(seqs, torch.tensor(scores, dtype=log_probs.dtype, device=dev), dev)


def ctc_crf_decode(log_probs: Tensor, input_lengths: Tensor | None, graph: DenominatorGraph, *,
                   beam: int = 8, method: str = "beam", blank: int = 0) -> CTCDecoding:
    """Decode with the denominator n-gram.

    * ``method="beam"`` (default): prefix beam search whose hypotheses carry the n-gram history;
      it maximises ``log p_LM(y) + log sum_{pi : B(pi) = y} prod_t p_t(pi_t)``, i.e. the CTC-CRF
      ``log p(y | x) + log Z_den(x)`` (the same argmax as ``p(y | x)``), ``</s>`` included.
      Exact when ``beam`` keeps every prefix. Cost ``O(T beam V)`` Python steps per sequence.
    * ``method="viterbi"``: the single best path ``pi`` through the den graph (max semiring,
      exact, vectorised over batch and states), collapsed by ``B``; its score is
      ``max_pi phi(pi, x)``.

    Returns a :class:`~ebms.structured.ctc.CTCDecoding` with the maximised score in ``scores``.
    """
    t, b, v = check_log_probs(log_probs, blank, allow_unbatched=False).shape
    _check_graph(graph, v, blank)
    check_int(beam, "beam", minimum=1)
    if method not in ("beam", "viterbi"):
        raise ValueError(f"method: expected 'beam' or 'viterbi'; got {method!r}")
    lengths = lengths_tensor(input_lengths, "input_lengths", b, t, "T = log_probs.shape[0]",
                             log_probs.device)
    with torch.no_grad():
        if method == "viterbi":
            return _viterbi(log_probs.detach(), lengths, graph)
        return _beam(log_probs, lengths, graph, beam)
