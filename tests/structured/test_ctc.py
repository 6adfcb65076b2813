"""CTC: against torch.nn.functional.ctc_loss, brute-force enumeration of alignments, decoders."""

from __future__ import annotations

import itertools
import math

import pytest
import torch
import torch.nn.functional as F
from _ctc_paths import collapse

from ebms.structured.ctc import (
    best_alignment,
    ctc_log_likelihood,
    ctc_loss,
    greedy_decode,
    prefix_beam_search,
)
from ebms.structured.semiring import KMaxSemiring, MaxSemiring


def _random_case(seed, dtype, blank=0, t=12, b=6, v=5, s=5):
    g = torch.Generator().manual_seed(seed)
    logits = torch.randn(t, b, v, generator=g, dtype=dtype)
    labels = [c for c in range(v) if c != blank]
    idx = torch.randint(0, len(labels), (b, s), generator=g)
    targets = torch.tensor(labels)[idx]
    targets[0, : min(3, s)] = labels[0]  # repeated labels
    targets[1, 1] = targets[1, 0]
    input_lengths = torch.randint(t // 2, t + 1, (b,), generator=g)
    input_lengths[0] = t
    target_lengths = torch.randint(0, s + 1, (b,), generator=g)
    target_lengths[0], target_lengths[1], target_lengths[2] = min(3, s), s, 0  # repeats, full, empty
    return logits, targets, input_lengths, target_lengths


def _enumerate(lp, blank=0):
    """log p(y) for every label sequence y, and the best alignment per y, for one item (T, V)."""
    t, v = lp.shape
    total, best = {}, {}
    for path in itertools.product(range(v), repeat=t):
        y = collapse(path, blank)
        score = float(sum(lp[i, p] for i, p in enumerate(path)))
        total[y] = total.get(y, 0.0) + math.exp(score)
        if score > best.get(y, (-math.inf,))[0]:
            best[y] = (score, path)
    return total, best


@pytest.mark.parametrize("dtype,tol", [(torch.float64, 1e-5), (torch.float32, 1e-4)])
@pytest.mark.parametrize("reduction", ["none", "sum", "mean"])
@pytest.mark.parametrize("blank", [0, 3])
def test_ctc_loss_equals_torch_ctc_loss(dtype, tol, reduction, blank):
    logits, targets, il, tl = _random_case(1, dtype, blank=blank)
    lp = logits.log_softmax(-1)
    ours = ctc_loss(lp, targets, il, tl, blank=blank, reduction=reduction)
    ref = F.ctc_loss(lp, targets, il, tl, blank=blank, reduction=reduction)
    torch.testing.assert_close(ours, ref, atol=tol, rtol=tol)


@pytest.mark.parametrize("reduction", ["none", "sum", "mean"])
def test_ctc_gradient_equals_torch_through_log_softmax(reduction):
    logits, targets, il, tl = _random_case(2, torch.float64)
    grads = []
    for fn in (ctc_loss, F.ctc_loss):
        x = logits.clone().requires_grad_(True)
        loss = fn(x.log_softmax(-1), targets, il, tl, reduction=reduction)
        (loss.sum() if reduction == "none" else loss).backward()
        grads.append(x.grad)
    torch.testing.assert_close(grads[0], grads[1], atol=1e-7, rtol=1e-6)


def test_ctc_log_likelihood_gradient_passes_gradcheck():
    logits, targets, il, tl = _random_case(3, torch.float64, t=5, b=3, v=3, s=2)
    il = torch.tensor([5, 4, 3])  # every target reachable (finite differences need finite values)
    lp = logits.log_softmax(-1).requires_grad_(True)
    assert torch.isfinite(ctc_log_likelihood(lp, targets, il, tl)).all()
    assert torch.autograd.gradcheck(lambda x: ctc_log_likelihood(x, targets, il, tl), (lp,))


def test_unreachable_target_matches_torch_inf_and_zero_infinity():
    lp = torch.randn(4, 3, 4, dtype=torch.float64).log_softmax(-1).requires_grad_(True)
    targets = torch.tensor([[1, 1, 1], [1, 2, 3], [2, 2, 0]])
    il = torch.tensor([4, 2, 4])  # item 0 needs 5 frames (two repeats), item 1 needs 3
    tl = torch.tensor([3, 3, 2])
    ours = ctc_loss(lp, targets, il, tl, reduction="none")
    ref = F.ctc_loss(lp, targets, il, tl, reduction="none")
    assert torch.isinf(ours[:2]).all() and torch.isinf(ref[:2]).all()
    torch.testing.assert_close(ours[2], ref[2])
    for reduction in ("none", "sum", "mean"):
        z = ctc_loss(lp, targets, il, tl, reduction=reduction, zero_infinity=True)
        zr = F.ctc_loss(lp, targets, il, tl, reduction=reduction, zero_infinity=True)
        torch.testing.assert_close(z, zr)
        (g,) = torch.autograd.grad(z.sum(), lp)
        assert torch.isfinite(g).all() and (g[:, :2] == 0).all()


def test_log_likelihood_equals_sum_over_enumerated_alignments():
    g = torch.Generator().manual_seed(4)
    t, v = 4, 3
    lp = torch.randn(t, 1, v, generator=g, dtype=torch.float64).log_softmax(-1)
    total, best = _enumerate(lp[:, 0])
    assert abs(sum(total.values()) - 1.0) < 1e-12
    for y in [(), (1,), (1, 1), (1, 2), (2, 2, 1), (1, 1, 1), (2, 1, 2, 1)]:
        targets = torch.tensor([list(y) + [1] * (4 - len(y))])
        tl = torch.tensor([len(y)])
        il = torch.tensor([t])
        ll = ctc_log_likelihood(lp, targets, il, tl)
        mx = ctc_log_likelihood(lp, targets, il, tl, semiring=MaxSemiring())
        k2 = ctc_log_likelihood(lp, targets, il, tl, semiring=KMaxSemiring(2))
        if y not in total:  # (1, 1, 1) and (2, 1, 2, 1) need more frames
            assert ll.item() == -math.inf and mx.item() == -math.inf
            continue
        assert abs(ll.exp().item() - total[y]) < 1e-12
        assert abs(mx.item() - best[y][0]) < 1e-12
        scores = sorted((float(sum(lp[i, 0, p] for i, p in enumerate(path)))
                         for path in itertools.product(range(v), repeat=t)
                         if collapse(path) == y), reverse=True)
        torch.testing.assert_close(k2[:, 0], torch.tensor((scores + [-math.inf])[:2],
                                                          dtype=torch.float64))
        align, score = best_alignment(lp, targets, il, tl)
        assert tuple(align[0].tolist()) == best[y][1]
        assert abs(score.item() - best[y][0]) < 1e-12


def test_zero_input_length_gives_probability_one_only_for_empty_target():
    lp = torch.randn(3, 2, 3, dtype=torch.float64).log_softmax(-1)
    ll = ctc_log_likelihood(lp, torch.tensor([[1], [1]]), torch.tensor([0, 0]),
                            torch.tensor([0, 1]))
    assert ll.tolist() == [0.0, -math.inf]


def test_best_alignment_pads_past_input_length_and_collapses_to_target():
    logits, targets, il, tl = _random_case(5, torch.float64)
    align, score = best_alignment(logits.log_softmax(-1), targets, il, tl)
    for b in range(targets.shape[0]):
        n = int(il[b])
        assert (align[b, n:] == -1).all()
        assert collapse(align[b, :n].tolist()) == tuple(targets[b, : int(tl[b])].tolist())
        lp = logits.log_softmax(-1)[:, b]
        assert abs(float(sum(lp[i, p] for i, p in enumerate(align[b, :n].tolist())))
                   - score[b].item()) < 1e-10


def test_greedy_decode_collapses_repeats_and_drops_blanks():
    frames = [0, 1, 1, 0, 1, 2, 2, 0, 3]  # -> 1 1 2 3
    lp = torch.full((9, 2, 4), -5.0)
    for i, c in enumerate(frames):
        lp[i, 0, c] = -0.1
        lp[i, 1, c] = -0.1
    out = greedy_decode(lp, torch.tensor([9, 5]))
    assert out.sequences() == [[1, 1, 2, 3], [1, 1]]
    assert out.labels.tolist() == [[1, 1, 2, 3], [1, 1, -1, -1]]
    torch.testing.assert_close(out.scores, torch.tensor([-0.9, -0.5]))


def test_prefix_beam_search_without_pruning_finds_most_probable_labelling():
    g = torch.Generator().manual_seed(6)
    t, v = 4, 3
    for _trial in range(3):
        # peaked-but-ambiguous frames so that best labelling != greedy path in some trials
        lp = (2.0 * torch.randn(t, 1, v, generator=g, dtype=torch.float64)).log_softmax(-1)
        total, _ = _enumerate(lp[:, 0])
        y_best = max(total, key=total.get)
        out = prefix_beam_search(lp, beam_width=v ** t)
        assert tuple(out.sequences()[0]) == y_best
        assert abs(out.scores[0].item() - math.log(total[y_best])) < 1e-10


def test_prefix_beam_search_beats_greedy_where_alignments_add_up():
    # frames: greedy path is "blank, blank" (0.6^2 = .36), but label 1 totals
    # 0.4*0.4 + 2*0.6*0.4 = .64 -> the most probable labelling is (1,).
    p = torch.tensor([[0.6, 0.4, 0.0], [0.6, 0.4, 0.0]], dtype=torch.float64).clamp_min(1e-30)
    lp = p.log().unsqueeze(1)
    assert greedy_decode(lp).sequences() == [[]]
    out = prefix_beam_search(lp, beam_width=4)
    assert out.sequences() == [[1]]
    assert abs(out.scores[0].item() - math.log(0.64)) < 1e-9


def test_ctc_validation_errors_name_the_argument():
    lp = torch.randn(4, 2, 3).log_softmax(-1)
    tg = torch.tensor([[1, 2], [2, 1]])
    il, tl = torch.tensor([4, 4]), torch.tensor([2, 2])
    cases = [
        (dict(log_probs=torch.randn(4, 2, 3, 1)), ValueError, "log_probs: expected shape (T, B, V)"),
        (dict(log_probs=torch.zeros(4, 2, 3, dtype=torch.long)), TypeError, "log_probs"),
        (dict(log_probs=torch.full((4, 2, 3), float("nan"))), ValueError, "log_probs: expected no NaN"),
        (dict(log_probs=torch.zeros(4, 0, 3)), ValueError, "log_probs: expected non-empty"),
        (dict(targets=torch.tensor([[1, 0], [2, 1]])), ValueError, "targets: expected no blank"),
        (dict(targets=torch.tensor([[1, 3], [2, 1]])), ValueError, "targets: expected labels in [0, 3)"),
        (dict(targets=torch.tensor([[1, -1], [2, 1]])), ValueError, "targets: expected labels"),
        (dict(targets=tg.float()), TypeError, "targets: expected an integer tensor"),
        (dict(targets=tg[:1]), ValueError, "targets (padded (B, S))"),
        (dict(input_lengths=torch.tensor([5, 4])), ValueError, "input_lengths: expected values in [0, 4]"),
        (dict(input_lengths=torch.tensor([-1, 4])), ValueError, "input_lengths"),
        (dict(input_lengths=torch.tensor([4])), ValueError, "input_lengths: expected shape"),
        (dict(target_lengths=torch.tensor([3, 2])), ValueError, "target_lengths: expected values in [0, 2]"),
        (dict(target_lengths=torch.tensor([2.0, 2.0])), TypeError, "target_lengths"),
        (dict(blank=3), ValueError, "blank: expected an int in [0, 3)"),
        (dict(reduction="avg"), ValueError, "reduction"),
        (dict(zero_infinity=1), TypeError, "zero_infinity"),
    ]
    for kw, exc, msg in cases:
        args = dict(log_probs=lp, targets=tg, input_lengths=il, target_lengths=tl)
        args.update(kw)
        with pytest.raises(exc, match=msg.replace("(", r"\(").replace(")", r"\)")
                           .replace("[", r"\[").replace("]", r"\]")):
            ctc_loss(**args)
    # padding beyond target_lengths is ignored (may hold the blank or anything)
    ctc_loss(lp, torch.tensor([[1, 0], [2, -7]]), il, torch.tensor([1, 1]))
    with pytest.raises(TypeError, match="semiring"):
        ctc_log_likelihood(lp, tg, il, tl, semiring="max")
    with pytest.raises(ValueError, match="beam_width"):
        prefix_beam_search(lp, beam_width=0)
    with pytest.raises(ValueError, match="input_lengths"):
        greedy_decode(lp, torch.tensor([9, 1]))


def test_none_lengths_mean_full_lengths():
    logits, targets, _, _ = _random_case(7, torch.float64)
    lp = logits.log_softmax(-1)
    t, b = lp.shape[:2]
    full = ctc_log_likelihood(lp, targets, torch.full((b,), t), torch.full((b,), targets.shape[1]))
    torch.testing.assert_close(ctc_log_likelihood(lp, targets, None, None), full)
    torch.testing.assert_close(ctc_loss(lp, targets, None, None),
                               F.ctc_loss(lp, targets, torch.full((b,), t),
                                          torch.full((b,), targets.shape[1])))


def test_torch_kernel_path_equals_ebms_recursion():
    g = torch.Generator().manual_seed(3)
    t, b, v = 9, 5, 4
    lp = torch.randn(t, b, v, generator=g, dtype=torch.float64).mul(3).log_softmax(-1)
    targets = torch.tensor([[1, 1, 2], [3, 2, 1], [2, 0, 0], [1, 2, 1], [3, 3, 3]])
    tl = torch.tensor([3, 3, 1, 0, 3])  # repeats, an empty target, one unreachable in 4 frames (3, 3, 3)
    il = torch.tensor([9, 6, 1, 4, 4])
    out, grads = [], []
    for method in ("torch", "dp"):
        x = lp.clone().requires_grad_()
        ll = ctc_log_likelihood(x, targets, il, tl, method=method)
        ll.sum().backward()
        out.append(ll)
        grads.append(x.grad)
    assert torch.isneginf(out[0][4]) and torch.isneginf(out[1][4])
    torch.testing.assert_close(out[0], out[1], rtol=0, atol=1e-12)
    torch.testing.assert_close(grads[0], grads[1], rtol=0, atol=1e-12)
    assert bool((grads[0][:, 4] == 0).all())  # an unreachable target has a zero gradient, never NaN
    assert bool((grads[0][6:, 1] == 0).all())  # frames past input_lengths carry no gradient


def test_method_argument_is_checked():
    lp = torch.randn(3, 1, 3).log_softmax(-1)
    with pytest.raises(ValueError, match="method: expected one of"):
        ctc_log_likelihood(lp, torch.tensor([[1]]), None, None, method="fast")
    with pytest.raises(ValueError, match="method: 'torch' needs the log semiring"):
        ctc_log_likelihood(lp, torch.tensor([[1]]), None, None, semiring=MaxSemiring(), method="torch")
    with pytest.raises(ValueError, match="method: 'torch' needs"):
        ctc_log_likelihood(lp.half(), torch.tensor([[1]]), None, None, method="torch")


def test_ctc_second_derivative_passes_gradgradcheck():
    g = torch.Generator().manual_seed(0)
    lp = torch.randn(5, 2, 3, generator=g, dtype=torch.float64).log_softmax(-1).requires_grad_()
    targets, il, tl = torch.tensor([[1, 2], [2, 2]]), torch.tensor([5, 5]), torch.tensor([2, 2])
    assert torch.autograd.gradgradcheck(lambda x: ctc_log_likelihood(x, targets, il, tl), (lp,))
