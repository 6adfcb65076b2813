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
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor

from ebms._checks import check_in_range, check_int
from ebms.structured.ctc import (
    CTCDecoding,
    _check_lengths,
    _check_log_probs,
    _check_targets,
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


def _mul(x: Tensor, m: Tensor) -> Tensor:
    """``x (B, S)`` times a :meth:`DenominatorGraph.transition_matrix` (dense or CSR)."""
    if m.layout == torch.sparse_csr:
        return (m @ x.t()).t()
    return x @ m


class _DenScaled(torch.autograd.Function):
    """Scaled forward-backward of the den graph in probability space (log scales kept aside).

    Forward: ``a_t = (a_{t-1} E) * exp(lp_t(sym) - m_t)``, ``r_t = sum_s a_t(s)``, ``a_t / r_t``
    kept, with ``m_t = max_v lp_t(v)``; ``log Z = sum_{t<L} (log r_t + m_t) + log(a_{L-1} .
    exp(final))``. Every row runs all ``max L`` frames and is read at its own length. Backward:
    the scaled ``beta`` recursion with ``E^T`` started at each row's last frame;
    ``gamma_t(s) = a_t(s) b_t(s) / sum_s a_t b_t`` needs no scales, and
    ``d log Z / d lp_t(v) = sum_{s : sym(s) = v} gamma_t(s)``.
    """

    @staticmethod
    def forward(ctx, log_probs: Tensor, lengths: Tensor, graph: DenominatorGraph) -> Tensor:  # type: ignore[override]
        t, b, v = log_probs.shape
        dt, dev = log_probs.dtype, log_probs.device
        tab = graph.tables(dt, dev)
        fwd = graph.transition_matrix(dt, dev, transpose=False)
        steps = int(lengths.max()) if b else 0
        lp = log_probs[:steps]
        m = lp.max(-1, keepdim=True).values  # (T, B, 1)
        m = torch.where(torch.isneginf(m), 0.0, m)
        em = (lp - m).exp().index_select(2, tab["state_symbol"])  # (T, B, S)
        alphas = log_probs.new_zeros(steps + 1, b, graph.n_states)
        alphas[0, :, graph.start] = 1.0
        norms = log_probs.new_zeros(steps, b, 1)
        tiny = torch.finfo(dt).tiny
        for step in range(steps):
            a = _mul(alphas[step], fwd) * em[step]
            r = a.sum(-1, keepdim=True)
            torch.div(a, r.clamp_min(tiny), out=alphas[step + 1])
            norms[step] = r
        frames = torch.arange(steps, device=dev).unsqueeze(1) < lengths.unsqueeze(0)  # (T, B)
        log_c = torch.where(frames, (norms.log() + m).squeeze(-1), 0.0).sum(0)
        fmax = tab["final"].max()
        fin = (tab["final"] - fmax).exp()
        last = alphas.gather(0, lengths.view(1, b, 1).expand(1, b, graph.n_states))[0]
        out = log_c + (last * fin).sum(-1).log() + fmax
        ctx.save_for_backward(alphas, em, lengths, out)
        ctx.graph = graph
        ctx.shape = (t, b, v)
        return out

    @staticmethod
    def backward(ctx, grad_out: Tensor):  # type: ignore[override]
        alphas, em, lengths, out = ctx.saved_tensors
        graph: DenominatorGraph = ctx.graph
        t, b, v = ctx.shape
        dt, dev = alphas.dtype, alphas.device
        tab = graph.tables(dt, dev)
        bwd = graph.transition_matrix(dt, dev, transpose=True)
        steps = em.shape[0]
        fin = (tab["final"] - tab["final"].max()).exp()
        fin = (fin / fin.sum()).expand(b, -1)
        tiny = torch.finfo(dt).tiny
        gam = alphas[1:].clone()  # gamma_t before normalisation: alpha_t * beta_t
        beta = fin
        for step in range(steps - 1, -1, -1):
            beta = torch.where((lengths == step + 1).unsqueeze(1), fin, beta)
            gam[step].mul_(beta)
            nb = _mul(beta * em[step], bwd)
            beta = nb / nb.sum(-1, keepdim=True).clamp_min(tiny)
        frames = torch.arange(steps, device=dev).view(steps, 1, 1) < lengths.view(1, b, 1)
        gam = gam / gam.sum(-1, keepdim=True).clamp_min(tiny)
        scale = torch.where(torch.isfinite(out), grad_out, 0.0).view(1, b, 1)
        gam = torch.where(frames, gam * scale, 0.0)
        occ = alphas.new_zeros(t, b, v)
        occ[:steps].index_add_(2, tab["state_symbol"], gam)
        return occ, None, None


def _den_arcs(log_probs: Tensor, lengths: Tensor, graph: DenominatorGraph) -> Tensor:
    """Log-space forward over the padded incoming-arc table, differentiated by autograd."""
    _, b, _ = log_probs.shape
    tab = graph.tables(log_probs.dtype, log_probs.device)
    em = log_probs.index_select(2, tab["state_symbol"])  # (T, B, S)
    alpha = log_probs.new_full((b, graph.n_states), NEG_INF)
    alpha[:, graph.start] = 0.0
    src, w = tab["in_src"], tab["in_weight"]
    for step in range(int(lengths.max()) if b else 0):
        cand = alpha[:, src] + w  # (B, S, D)
        dead = torch.isneginf(cand).all(-1)
        tot = torch.logsumexp(torch.where(dead.unsqueeze(-1), 0.0, cand), -1)
        new = torch.where(dead, NEG_INF, tot) + em[step]
        alpha = torch.where((step < lengths).unsqueeze(1), new, alpha)
    end = alpha + tab["final"]
    dead = torch.isneginf(end).all(-1)
    tot = torch.logsumexp(torch.where(dead.unsqueeze(-1), 0.0, end), -1)
    return torch.where(dead, NEG_INF, tot)


def den_log_partition(log_probs: Tensor, input_lengths: Tensor | None, graph: DenominatorGraph,
                      *, method: str = "scaled") -> Tensor:
    """``log Z_den(x) = log sum_pi exp(log p_LM(B(pi)) + sum_t lp_t(pi_t))`` for each sequence.

    Args:
        log_probs: ``(T, B, V)`` log-softmax outputs (time-major); ``V = graph.n_symbols``.
        input_lengths: ``(B,)`` ints in ``[0, T]`` (ragged); ``None`` means ``T``.
        graph: the :class:`DenominatorGraph`.
        method: ``"scaled"`` (default): probability-space forward with per-frame renormalisation
            and a hand-written forward-backward gradient (``gamma_den``), the transition matrix
            dense up to 512 states and sparse CSR above; ``"arcs"``: log-space forward over
            the padded incoming arcs (``logsumexp``), differentiated by autograd. Both are
            vectorised over batch and states and loop over time only: ``O(T B A)``.

    Returns:
        ``(B,)`` in the dtype of ``log_probs``.
    """
    if not isinstance(graph, DenominatorGraph):
        raise TypeError(f"graph: expected a DenominatorGraph; got {type(graph).__name__}")
    t, b, v = _check_log_probs(log_probs, graph.blank)
    _check_graph(graph, v, graph.blank)
    if method not in ("scaled", "arcs"):
        raise ValueError(f"method: expected 'scaled' or 'arcs'; got {method!r}")
    lengths = _check_lengths(input_lengths, "input_lengths", b, t, "T = log_probs.shape[0]",
                             log_probs.device)
    if method == "arcs":
        return _den_arcs(log_probs, lengths, graph)
    return _DenScaled.apply(log_probs, lengths, graph)


def ctc_crf_log_likelihood(log_probs: Tensor, targets: Tensor, input_lengths: Tensor | None,
                           target_lengths: Tensor | None, graph: DenominatorGraph, *,
                           blank: int = 0) -> Tensor:
    """``log p(y | x) = log p_LM(y) + log p_CTC(y | x) - log Z_den(x)``, shape ``(B,)``.

    Arguments as :func:`ebms.structured.ctc.ctc_log_likelihood` plus the graph; ``-inf`` where
    ``y`` cannot be aligned to the frames.
    """
    _, _, v = _check_log_probs(log_probs, blank)
    _check_graph(graph, v, blank)
    ctc = ctc_log_likelihood(log_probs, targets, input_lengths, target_lengths, blank=blank)
    lm = graph.lm.log_prob(targets, target_lengths).to(log_probs.dtype)
    return lm + ctc - den_log_partition(log_probs, input_lengths, graph)


def ctc_crf_loss(log_probs: Tensor, targets: Tensor, input_lengths: Tensor | None,
                 target_lengths: Tensor | None, graph: DenominatorGraph, *, blank: int = 0,
                 ctc_weight: float = 0.0, reduction: str = "mean",
                 numerator: str = "ebms") -> Tensor:
    """CTC-CRF loss ``log Z_den - (1 + ctc_weight) log p_CTC`` per utterance (``log p_LM(y)``
    dropped: a constant).

    ``ctc_weight`` is the auxiliary CTC weight ``lambda >= 0``. ``reduction`` follows
    :func:`ebms.structured.ctc.ctc_loss`: ``"none"`` ``(B,)``, ``"sum"``, or ``"mean"`` (each
    loss divided by its target length, clamped to 1, then averaged over the batch), so that with
    ``LabelNGram.zeros`` this equals ``ctc_loss`` for every reduction.

    ``numerator="ebms"`` (default) computes ``log p_CTC`` with
    :func:`ebms.structured.ctc.ctc_log_likelihood` (exact derivative with respect to
    ``log_probs``); ``"torch"`` uses ``torch.nn.functional.ctc_loss`` (several times faster on CPU),
    whose gradient with respect to ``log_probs`` adds ``(1 + ctc_weight) exp(log_probs)``: a term
    that vanishes once composed with ``log_softmax``, so gradients with respect to the logits
    are the same, but ``gradcheck`` with respect to ``log_probs`` then fails. An unreachable
    target (too few frames) gives an infinite loss.
    """
    if numerator not in ("ebms", "torch"):
        raise ValueError(f"numerator: expected 'ebms' or 'torch'; got {numerator!r}")
    if reduction not in ("mean", "sum", "none"):
        raise ValueError(f"reduction: expected 'mean', 'sum' or 'none'; got {reduction!r}")
    lam = check_in_range(ctc_weight, "ctc_weight", 0.0, math.inf)
    _, _, v = _check_log_probs(log_probs, blank)
    _check_graph(graph, v, blank)
    if numerator == "torch":
        t, b, _ = log_probs.shape
        il = _check_lengths(input_lengths, "input_lengths", b, t, "T = log_probs.shape[0]",
                            log_probs.device)
        labels, lens = _check_targets(targets, target_lengths, b, v, blank, log_probs.device)
        ctc = -F.ctc_loss(log_probs, labels, il, lens, blank=blank, reduction="none")
    else:
        ctc = ctc_log_likelihood(log_probs, targets, input_lengths, target_lengths, blank=blank)
    loss = den_log_partition(log_probs, input_lengths, graph) - (1.0 + lam) * ctc
    return reduce_sequence_loss(loss, reduction, targets, target_lengths)


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
    t, b, v = _check_log_probs(log_probs, blank)
    _check_graph(graph, v, blank)
    check_int(beam, "beam", minimum=1)
    if method not in ("beam", "viterbi"):
        raise ValueError(f"method: expected 'beam' or 'viterbi'; got {method!r}")
    lengths = _check_lengths(input_lengths, "input_lengths", b, t, "T = log_probs.shape[0]",
                             log_probs.device)
    with torch.no_grad():
        if method == "viterbi":
            return _viterbi(log_probs.detach(), lengths, graph)
        return _beam(log_probs, lengths, graph, beam)
