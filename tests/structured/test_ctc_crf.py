"""CTC-CRF: against CTC, brute-force enumeration of all frame paths, gradcheck, decoding, errors."""

from __future__ import annotations

import itertools

import pytest
import torch
import torch.nn.functional as F
from _ctc_paths import collapse

import ebms.structured.den_graph as dg
from ebms.sequences import Sequences
from ebms.structured.ctc import ctc_log_likelihood, ctc_loss
from ebms.structured.ctc_crf import (
    ctc_crf_decode,
    ctc_crf_log_likelihood,
    ctc_crf_loss,
    den_log_partition,
)
from ebms.structured.den_graph import DenominatorGraph
from ebms.structured.ngram import LabelNGram

METHODS = ["scaled", "arcs"]


def _graph(v, order, seed=0):
    g = torch.Generator().manual_seed(seed)
    corpus = [torch.randint(1, v, (int(torch.randint(0, 4, (1,), generator=g)),),
                            generator=g).tolist() for _ in range(6)]
    return DenominatorGraph.from_ngram(LabelNGram.fit(corpus, v, order))


def _case(t, b, v, s, seed, dtype=torch.float64):
    g = torch.Generator().manual_seed(seed)
    logits = torch.randn(t, b, v, generator=g, dtype=dtype)
    targets = torch.randint(1, v, (b, s), generator=g)
    input_lengths = torch.randint(max(1, t // 2), t + 1, (b,), generator=g)
    input_lengths[0] = t
    target_lengths = torch.randint(0, s + 1, (b,), generator=g)
    target_lengths[0] = s
    return logits, targets, input_lengths, target_lengths


def _lm_score(lm, y):
    return float(lm.log_prob(Sequences(torch.tensor([list(y) + [1]]), torch.tensor([len(y)])))[0])


def _enumerate(log_probs, length, lm):
    """{label sequence: [phi(pi) for every pi collapsing to it]} for one utterance."""
    v = log_probs.shape[-1]
    out: dict[tuple[int, ...], list[torch.Tensor]] = {}
    for path in itertools.product(range(v), repeat=length):
        y = collapse(path)
        phi = _lm_score(lm, y) + sum(log_probs[t, path[t]] for t in range(length))
        out.setdefault(y, []).append(torch.as_tensor(phi, dtype=torch.float64))
    return out


# (a) all-zero den LM: CTC-CRF is CTC ------------------------------------------------------
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_zero_lm_ctc_crf_loss_equals_ctc(dtype, reduction):
    logits, targets, il, tl = _case(12, 5, 5, 4, seed=1, dtype=dtype)
    targets[1, :2] = 3  # a repeated label
    lp = logits.log_softmax(-1)
    graph = DenominatorGraph.from_ngram(LabelNGram.zeros(5, 2))
    got = ctc_crf_loss(lp, targets, il, tl, graph, reduction=reduction)
    tol = 1e-10 if dtype == torch.float64 else 1e-4
    torch.testing.assert_close(got, ctc_loss(lp, targets, il, tl, reduction=reduction),
                               atol=tol, rtol=tol)
    torch.testing.assert_close(got, F.ctc_loss(lp, targets, il, tl, reduction=reduction),
                               atol=tol, rtol=tol)
    z = den_log_partition(lp, il, DenominatorGraph.from_ngram(LabelNGram.zeros(5, 3)))
    torch.testing.assert_close(z, torch.zeros_like(z), atol=tol, rtol=0)


def test_zero_lm_gradient_equals_ctc_gradient():
    logits, targets, il, tl = _case(10, 4, 4, 3, seed=2)
    graph = DenominatorGraph.from_ngram(LabelNGram.zeros(4, 2))
    x1 = logits.clone().requires_grad_()
    ctc_crf_loss(x1.log_softmax(-1), targets, il, tl, graph, reduction="sum").backward()
    x2 = logits.clone().requires_grad_()
    F.ctc_loss(x2.log_softmax(-1), targets, il, tl, reduction="sum").backward()
    torch.testing.assert_close(x1.grad, x2.grad, atol=1e-10, rtol=1e-8)


# (b) numerator = CTC + log p_LM(y) --------------------------------------------------------
@pytest.mark.parametrize("order", [2, 3])
def test_log_likelihood_is_lm_plus_ctc_minus_log_z(order):
    logits, targets, il, tl = _case(9, 4, 4, 3, seed=3)
    lp = logits.log_softmax(-1)
    graph = _graph(4, order)
    num = ctc_crf_log_likelihood(lp, targets, il, tl, graph) + den_log_partition(lp, il, graph)
    want = ctc_log_likelihood(lp, targets, il, tl) + graph.lm.log_prob(Sequences(targets, tl))
    torch.testing.assert_close(num, want, atol=1e-12, rtol=0)


def test_loss_uses_cat_convention_with_auxiliary_ctc_weight():
    logits, targets, il, tl = _case(9, 3, 4, 3, seed=4)
    lp = logits.log_softmax(-1)
    graph = _graph(4, 2)
    ctc = ctc_log_likelihood(lp, targets, il, tl)
    logz = den_log_partition(lp, il, graph)
    got = ctc_crf_loss(lp, targets, il, tl, graph, ctc_weight=0.1, reduction="none")
    torch.testing.assert_close(got, logz - 1.1 * ctc, atol=1e-12, rtol=0)
    ll = ctc_crf_log_likelihood(lp, targets, il, tl, graph)
    plain = ctc_crf_loss(lp, targets, il, tl, graph, reduction="none")
    torch.testing.assert_close(plain, graph.lm.log_prob(Sequences(targets, tl)) - ll, atol=1e-12, rtol=0)


# (c) log Z against enumeration of all V^T frame paths ------------------------------------
@pytest.mark.parametrize("method", METHODS)
@pytest.mark.parametrize("v,order", [(3, 2), (4, 2), (3, 3), (4, 3), (3, 1)])
def test_log_partition_equals_enumeration(method, v, order):
    logits, _, il, _ = _case(5 if v == 3 else 4, 3, v, 1, seed=5 + v + order)
    il[2] = 0  # an empty input: log Z = log p(</s> | <s>)
    lp = logits.log_softmax(-1)
    graph = _graph(v, order, seed=v * order)
    got = den_log_partition(lp, il, graph, method=method)
    for b in range(lp.shape[1]):
        paths = _enumerate(lp[:, b], int(il[b]), graph.lm)
        want = torch.logsumexp(torch.stack([p for ps in paths.values() for p in ps]), 0)
        assert got[b].item() == pytest.approx(want.item(), abs=1e-10)


def test_scaled_and_arcs_agree_on_sparse_trigram():
    logits, _, il, _ = _case(8, 2, 12, 1, seed=6)
    lp = logits.log_softmax(-1)
    lm = LabelNGram.fit([[1, 2, 3], [11, 5, 5]], 12, 3)
    old = dg._DENSE_MAX
    try:
        dg._DENSE_MAX = 16
        graph = DenominatorGraph.from_ngram(lm)
        assert graph.transition_matrix(lp.dtype, lp.device).layout == torch.sparse_csr
        a = den_log_partition(lp, il, graph)
        x = lp.clone().requires_grad_()
        den_log_partition(x, il, graph).sum().backward()
    finally:
        dg._DENSE_MAX = old
    y = lp.clone().requires_grad_()
    b = den_log_partition(y, il, graph, method="arcs")
    b.sum().backward()
    torch.testing.assert_close(a, b.detach(), atol=1e-10, rtol=0)
    torch.testing.assert_close(x.grad, y.grad, atol=1e-10, rtol=0)


def test_peaky_and_minus_inf_inputs_stay_finite():
    logits, _, il, _ = _case(20, 3, 5, 1, seed=7)
    lp = (40.0 * logits).log_softmax(-1)
    lp[3, 0, 2] = float("-inf")
    graph = _graph(5, 3)
    x = lp.clone().requires_grad_()
    z = den_log_partition(x, il, graph)
    z.sum().backward()
    assert bool(torch.isfinite(z).all()) and bool(torch.isfinite(x.grad).all())
    torch.testing.assert_close(z, den_log_partition(lp, il, graph, method="arcs"), atol=1e-9,
                               rtol=0)


# (d) gradcheck -----------------------------------------------------------------------------
@pytest.mark.parametrize("method", METHODS)
@pytest.mark.parametrize("order", [2, 3])
def test_den_log_partition_gradcheck(method, order):
    logits, _, il, _ = _case(6, 3, 4, 1, seed=8)
    x = logits.log_softmax(-1).detach().requires_grad_()
    graph = _graph(4, order)
    assert torch.autograd.gradcheck(lambda a: den_log_partition(a, il, graph, method=method),
                                    (x,))


# (e) logit gradient = gamma_num - gamma_den ---------------------------------------------
@pytest.mark.parametrize("order", [2, 3])
def test_logit_gradient_is_numerator_minus_denominator_occupancy(order):
    t, v = 4, 3
    logits, targets, _, _ = _case(t, 1, v, 2, seed=9 + order)
    targets[0] = torch.tensor([1, 2])
    graph = _graph(v, order)
    x = logits.clone().requires_grad_()
    ll = ctc_crf_log_likelihood(x.log_softmax(-1), targets, None, None, graph)
    (grad,) = torch.autograd.grad(ll.sum(), x)
    lp = logits.log_softmax(-1)[:, 0]
    phis, hits = [], []
    for path in itertools.product(range(v), repeat=t):
        phis.append(_lm_score(graph.lm, collapse(path)) + sum(lp[i, path[i]] for i in range(t)))
        hits.append(F.one_hot(torch.tensor(path), v).double())
    phi, hit = torch.stack(phis), torch.stack(hits)  # (P,), (P, T, V)
    on = torch.tensor([collapse(p) == (1, 2) for p in itertools.product(range(v), repeat=t)])
    den = (phi.softmax(0)[:, None, None] * hit).sum(0)
    num_w = torch.where(on, phi, float("-inf")).softmax(0)
    num = (num_w[:, None, None] * hit).sum(0)
    torch.testing.assert_close(grad[:, 0], num - den, atol=1e-10, rtol=0)


# (g) decoding ------------------------------------------------------------------------------
@pytest.mark.parametrize("order", [2, 3])
def test_beam_decode_with_full_beam_is_exact_label_argmax(order):
    logits, _, il, _ = _case(4, 3, 3, 1, seed=10 + order)
    lp = (2.0 * logits).log_softmax(-1)
    graph = _graph(3, order, seed=order)
    out = ctc_crf_decode(lp, il, graph, beam=10_000)
    for b in range(3):
        paths = _enumerate(lp[:, b], int(il[b]), graph.lm)
        totals = {y: torch.logsumexp(torch.stack(ps), 0).item() for y, ps in paths.items()}
        best = max(totals, key=totals.__getitem__)
        assert out.sequences()[b] == list(best)
        assert out.scores[b].item() == pytest.approx(totals[best], abs=1e-10)


@pytest.mark.parametrize("order", [1, 2, 3])
def test_viterbi_decode_is_exact_best_single_path(order):
    logits, _, il, _ = _case(5, 3, 3, 1, seed=20 + order)
    lp = (2.0 * logits).log_softmax(-1)
    graph = _graph(3, order, seed=order)
    out = ctc_crf_decode(lp, il, graph, method="viterbi")
    for b in range(3):
        paths = _enumerate(lp[:, b], int(il[b]), graph.lm)
        best_y, best = max(((y, max(float(p) for p in ps)) for y, ps in paths.items()),
                           key=lambda kv: kv[1])
        assert out.sequences()[b] == list(best_y)
        assert out.scores[b].item() == pytest.approx(best, abs=1e-10)


def test_small_beam_decode_returns_valid_labels():
    logits, _, il, _ = _case(15, 2, 6, 1, seed=30)
    out = ctc_crf_decode(logits.log_softmax(-1), il, _graph(6, 2), beam=2)
    assert out.labels.shape[0] == 2
    for seq in out.sequences():
        assert all(1 <= c < 6 for c in seq)


# (h) bad inputs ----------------------------------------------------------------------------
def test_bad_inputs_name_the_argument():
    logits, targets, il, tl = _case(6, 2, 4, 2, seed=11)
    lp = logits.log_softmax(-1)
    graph = _graph(4, 2)
    with pytest.raises(ValueError, match="blank: the denominator graph uses blank 0; got 2"):
        ctc_crf_loss(lp, targets, il, tl, graph, blank=2)
    with pytest.raises(ValueError, match=r"blank: expected an int in \[0, 4\)"):
        ctc_crf_loss(lp, targets, il, tl, graph, blank=7)
    bad = targets.clone()
    bad[0, 0] = 0
    with pytest.raises(ValueError, match="targets: expected no blank"):
        ctc_crf_loss(lp, bad, il, tl, graph)
    with pytest.raises(ValueError, match=r"input_lengths: expected values in \[0, 6\]"):
        ctc_crf_loss(lp, targets, il + 5, tl, graph)
    with pytest.raises(ValueError, match=r"input_lengths: expected values in \[0, 6\]"):
        den_log_partition(lp, il + 5, graph)
    with pytest.raises(ValueError, match=r"log_probs: expected non-empty T, B and V"):
        ctc_crf_loss(lp[:, :0], targets[:0], il[:0], tl[:0], graph)
    with pytest.raises(ValueError, match="log_probs: expected V = 5 symbols"):
        ctc_crf_loss(lp, targets, il, tl, _graph(5, 2))
    with pytest.raises(ValueError, match="log_probs: expected V = 5 symbols"):
        ctc_crf_decode(lp, il, _graph(5, 2))
    with pytest.raises(TypeError, match="graph: expected a DenominatorGraph"):
        den_log_partition(lp, il, graph.lm)
    with pytest.raises(ValueError, match="reduction: expected"):
        ctc_crf_loss(lp, targets, il, tl, graph, reduction="avg")
    with pytest.raises(ValueError, match="ctc_weight: expected a number"):
        ctc_crf_loss(lp, targets, il, tl, graph, ctc_weight=-0.5)
    with pytest.raises(ValueError, match="method: expected 'scaled' or 'arcs'"):
        den_log_partition(lp, il, graph, method="dense")
    with pytest.raises(ValueError, match="beam: expected an int >= 1"):
        ctc_crf_decode(lp, il, graph, beam=0)
    with pytest.raises(ValueError, match="method: expected 'beam' or 'viterbi'"):
        ctc_crf_decode(lp, il, graph, method="greedy")


def test_torch_numerator_gives_same_loss_and_logit_gradient():
    logits, targets, il, tl = _case(12, 4, 5, 4, seed=12)
    graph = _graph(5, 3)
    grads, losses = [], []
    for numerator in ("ebms", "torch"):
        x = logits.clone().requires_grad_()
        loss = ctc_crf_loss(x.log_softmax(-1), targets, il, tl, graph, ctc_weight=0.3,
                            numerator=numerator)
        loss.backward()
        grads.append(x.grad)
        losses.append(loss.detach())
    torch.testing.assert_close(losses[0], losses[1], atol=1e-10, rtol=0)
    torch.testing.assert_close(grads[0], grads[1], atol=1e-10, rtol=0)
    bad = targets.clone()
    bad[0, 0] = 0
    with pytest.raises(ValueError, match="targets: expected no blank"):
        ctc_crf_loss(logits.log_softmax(-1), bad, il, tl, graph, numerator="torch")
    with pytest.raises(ValueError, match="numerator: expected 'ebms' or 'torch'"):
        ctc_crf_loss(logits.log_softmax(-1), targets, il, tl, graph, numerator="cuda")


def test_impossible_frame_gives_minus_inf_and_zero_gradient():
    logits, _, il, _ = _case(6, 2, 4, 1, seed=13)
    lp = logits.log_softmax(-1)
    lp[2, 1] = float("-inf")  # no symbol possible at frame 2 for sequence 1
    for method in METHODS:
        x = lp.clone().requires_grad_()
        z = den_log_partition(x, torch.tensor([6, 6]), _graph(4, 2), method=method)
        z.sum().backward()
        assert torch.isneginf(z[1]) and torch.isfinite(z[0])
        assert bool(torch.isfinite(x.grad).all()) and float(x.grad[:, 1].abs().sum()) == 0.0


def test_float32_long_sequences_match_float64():
    g = torch.Generator().manual_seed(14)
    logits = 5.0 * torch.randn(150, 3, 31, generator=g, dtype=torch.float64)
    corpus = [torch.randint(1, 31, (8,), generator=g).tolist() for _ in range(50)]
    graph = DenominatorGraph.from_ngram(LabelNGram.fit(corpus, 31, 3))  # 1861 states: CSR
    il = torch.tensor([150, 120, 77])
    grads = []
    for dtype in (torch.float64, torch.float32):
        x = logits.to(dtype).detach().requires_grad_()
        z = den_log_partition(x.log_softmax(-1), il, graph)
        z.sum().backward()
        grads.append((z.detach().double(), x.grad.double()))
    torch.testing.assert_close(grads[1][0], grads[0][0], atol=0, rtol=1e-5)
    torch.testing.assert_close(grads[1][1], grads[0][1], atol=1e-4, rtol=0)


# (g) exact at every scale: the scaled den recursion against the log-space one ------------------
def _only_one_two_lm():
    """A bigram allowing only ``<s> 1 2 </s>``: the den graph is as narrow as one CTC path."""
    table = torch.full((3, 3), float("-inf"), dtype=torch.float64)
    table[0, 1] = table[1, 2] = table[2, 0] = 0.0
    return DenominatorGraph.from_ngram(LabelNGram(3, 2, table))


def test_den_partition_exact_where_the_scaled_recursion_underflows():
    # the CTC repro through a den graph: the only path has weight e^{-800}
    lp = torch.tensor([[[0.0, -400, 0]], [[0.0, -300, -400]]], dtype=torch.float64).log_softmax(-1)
    graph = _only_one_two_lm()
    from ebms.structured._den_partition import _DenScaled

    raw, ok = _DenScaled.apply(lp, torch.tensor([2]), graph)
    assert not bool(ok[0]) and torch.isneginf(raw[0])  # the unchecked recursion underflows
    exact = lp[0, 0, 1] + lp[1, 0, 2]
    want = torch.zeros_like(lp)
    want[0, 0, 1] = want[1, 0, 2] = 1.0
    for dtype in (torch.float64, torch.float32):
        x = lp.detach().to(dtype).requires_grad_()
        z = den_log_partition(x, None, graph)
        torch.testing.assert_close(z[0], exact.to(dtype), rtol=1e-12 if dtype == torch.float64 else 1e-6, atol=0)
        (g,) = torch.autograd.grad(z.sum(), x)
        torch.testing.assert_close(g, want.to(dtype), rtol=0, atol=1e-6)
    # the backward's own check: an underflowing beta sends the gradient to the log-space recursion
    x = lp.detach().clone().requires_grad_()
    out, _ = _DenScaled.apply(x, torch.tensor([2]), graph)
    (g,) = torch.autograd.grad(out.sum(), x, allow_unused=True)
    torch.testing.assert_close(g, want, rtol=0, atol=1e-12)


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
@pytest.mark.parametrize("order", [2, 3])
@pytest.mark.parametrize("scale", [1.0, 10.0, 30.0, 100.0])
def test_den_partition_and_gradient_exact_over_logit_scales(scale, order, dtype):
    g = torch.Generator().manual_seed(int(scale) + order)
    graph = _graph(6, order, seed=order)
    lp = (scale * torch.randn(60, 4, 6, generator=g, dtype=torch.float64)).log_softmax(-1)
    il = [60, 55, 31, 1]
    ref = lp.clone().requires_grad_()
    z_ref = den_log_partition(ref, il, graph, method="arcs")  # log space, float64
    (g_ref,) = torch.autograd.grad(z_ref.sum(), ref)
    x = lp.to(dtype).requires_grad_()
    z = den_log_partition(x, il, graph)
    (gx,) = torch.autograd.grad(z.sum(), x)
    # float64: rounding only; float32: T steps of relative rounding eps32 on |log Z|
    rtol = 1e-12 if dtype == torch.float64 else 60 * torch.finfo(torch.float32).eps
    torch.testing.assert_close(z.double(), z_ref, rtol=rtol, atol=0)
    torch.testing.assert_close(gx.double(), g_ref, rtol=0, atol=1e-10 if dtype == torch.float64 else 1e-4)


def test_den_partition_narrow_lm_over_scales_and_second_derivative():
    graph = _only_one_two_lm()
    for scale in (1.0, 30.0, 100.0):
        g = torch.Generator().manual_seed(int(scale))
        lp = (scale * torch.randn(30, 3, 3, generator=g, dtype=torch.float64)).log_softmax(-1)
        ref = lp.clone().requires_grad_()
        z_ref = den_log_partition(ref, [30, 20, 2], graph, method="arcs")
        (g_ref,) = torch.autograd.grad(z_ref.sum(), ref)
        x = lp.clone().requires_grad_()
        z = den_log_partition(x, [30, 20, 2], graph)
        (gx,) = torch.autograd.grad(z.sum(), x)
        torch.testing.assert_close(z, z_ref, rtol=1e-12, atol=0)
        torch.testing.assert_close(gx, g_ref, rtol=0, atol=1e-10)
    lp = torch.randn(4, 2, 3, dtype=torch.float64).log_softmax(-1).requires_grad_()
    assert torch.autograd.gradgradcheck(lambda y: den_log_partition(y, None, _graph(3, 2)), (lp,))
