"""What ``torch.nn.CTCLoss`` users expect: every input form, the module, torch's own test cases.

The cases ported from PyTorch's CTC tests (test_nn.py: ``test_ctc_loss`` gradcheck grid,
``test_CTCLoss_empty_target``, ``test_CTCLoss_no_batch_dim``, ``test_CTCLoss_lengthchecks``,
``test_CTCLoss_typechecks``, ``test_CTCLoss_zero_infinity``; common_nn's ``CTCLoss`` criterion
variants: lengths as int lists / tensors, 1-D targets, int32 targets, blank = 14) are rewritten
here, compared with torch and with the independent reference of ``_ctc_reference``.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from _ctc_reference import reference_batch

from ebms.structured.ctc import ctc_log_likelihood, ctc_loss
from ebms.structured.ctc_layer import CTCLoss


def _criterion_case(seed=0):
    """common_nn's CTCLoss case: T=50, B=3, V=15, blank=14, padded targets of width 30."""
    g = torch.Generator().manual_seed(seed)
    lp = torch.randn(50, 3, 15, generator=g, dtype=torch.float64).log_softmax(2)
    targets = torch.randint(0, 14, (3, 30), generator=g)
    return lp, targets, [50, 50, 50], [30, 25, 20]


FORMS = ["lengths_intlists", "lengths_tensors", "lengths_tuples", "1d_target",
         "1d_target_lengths_intlists", "2d_int_target_lengths_intlists", "2d_int_target_lengths_tensors"]


def _form(name, targets, il, tl):
    if name == "lengths_tensors":
        return targets, torch.tensor(il), torch.tensor(tl)
    if name == "lengths_tuples":
        return targets, tuple(il), tuple(tl)
    if name.startswith("1d_target"):
        flat = torch.cat([targets[i, :n] for i, n in enumerate(tl)])
        return flat, (il if "intlists" in name else torch.tensor(il)), (tl if "intlists" in name else torch.tensor(tl))
    if name.startswith("2d_int"):
        return targets.int(), (il if "intlists" in name else torch.tensor(il, dtype=torch.int32)), \
            (tl if "intlists" in name else torch.tensor(tl, dtype=torch.int32))
    return targets, il, tl


@pytest.mark.parametrize("reduction", ["none", "sum", "mean"])
@pytest.mark.parametrize("form", FORMS)
def test_every_torch_input_form_gives_torchs_loss_and_the_reference(form, reduction):
    lp, targets, il, tl = _criterion_case()
    tg, a, b = _form(form, targets, il, tl)
    ours = CTCLoss(blank=14, reduction=reduction)(lp, tg, a, b)
    ref_t = torch.nn.CTCLoss(blank=14, reduction=reduction)(lp, tg, a, b)
    torch.testing.assert_close(ours, ref_t, rtol=1e-12, atol=1e-12)
    ref, _ = reference_batch(lp, [targets[i, :n].tolist() for i, n in enumerate(tl)], il, blank=14)
    per = -ref
    want = {"none": per, "sum": per.sum(), "mean": (per / torch.tensor(tl)).mean()}[reduction]
    torch.testing.assert_close(ours, want, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("input_length,vary,zero", [(150, False, "none"), (150, True, "none"),
                                                    (50, True, "some"), (50, True, "all")])
def test_torch_gradcheck_grid_through_log_softmax(input_length, vary, zero):
    # test_nn's test_ctc_loss grid (B=64, V=101, S=15, a 10-dim input tiled to (T, B, V))
    g = torch.Generator().manual_seed(input_length + vary)
    b, v, s = 64, 101, 15
    targets = torch.randint(1, v, (b, s), generator=g)
    x = torch.randn(10, dtype=torch.float64, generator=g).requires_grad_()
    tile = torch.randn(input_length * b * v // 10 + 1, generator=g, dtype=torch.float64)
    il = [int(torch.randint(input_length // 2, input_length + 1, (), generator=g)) if vary and i else input_length
          for i in range(b)]
    tl = [int(torch.randint(s // 2, s + 1, (), generator=g)) if vary else s for _ in range(b)]
    if zero == "all":
        tl = [0] * b
    elif zero == "some":
        for i in torch.randint(0, b, (10,), generator=g).tolist():
            tl[i] = 0

    def after_softmax(fn):
        def f(y):
            full = (y[:, None] * tile[None, :]).view(-1)[: input_length * b * v].view(input_length, b, v)
            return fn(full.log_softmax(2), targets, il, tl)
        return f

    assert torch.autograd.gradcheck(after_softmax(ctc_loss), (x,))
    (go,) = torch.autograd.grad(after_softmax(ctc_loss)(x), x)
    (gt,) = torch.autograd.grad(after_softmax(F.ctc_loss)(x), x)
    torch.testing.assert_close(go, gt, rtol=1e-10, atol=1e-12)


def test_empty_targets_score_the_all_blank_path():
    g = torch.Generator().manual_seed(1)
    lp = torch.randn(50, 3, 15, generator=g, dtype=torch.float64).log_softmax(2)
    loss = ctc_loss(lp, torch.zeros(0, dtype=torch.long), [50, 50, 50], [0, 0, 0], reduction="none")
    assert (loss >= 0).all()
    torch.testing.assert_close(loss, -lp.sum(0)[:, 0])
    targets = torch.randint(1, 15, (9,), generator=g)
    loss = ctc_loss(lp, targets, [50, 50, 50], [0, 9, 0], reduction="none")
    torch.testing.assert_close(loss[[0, 2]], -lp.sum(0)[[0, 2], 0])
    torch.testing.assert_close(loss, F.ctc_loss(lp, targets, [50, 50, 50], [0, 9, 0], reduction="none"))


@pytest.mark.parametrize("reduction", ["none", "sum", "mean"])
def test_unbatched_input_equals_a_batch_of_one(reduction):
    g = torch.Generator().manual_seed(2)
    logits = torch.randn(40, 3, generator=g, dtype=torch.float64)
    targets = torch.randint(1, 3, (12,), generator=g)
    out, grads = [], []
    for lp_shape, tg, il, tl in [((40, 1, 3), targets[None], [40], [12]), ((40, 3), targets, 40, 12),
                                 ((40, 3), targets, torch.tensor(40), torch.tensor(12))]:
        x = logits.clone().requires_grad_()
        loss = CTCLoss(reduction=reduction)(x.log_softmax(-1).reshape(lp_shape), tg, il, tl)
        (gx,) = torch.autograd.grad(loss.sum(), x)
        out.append(loss.reshape(-1) if lp_shape == (40, 1, 3) else loss)
        grads.append(gx)
    want = F.ctc_loss(logits.log_softmax(-1), targets, torch.tensor(40), torch.tensor(12), reduction=reduction)
    assert out[1].shape == want.shape == ()
    for o, gx in zip(out, grads):
        torch.testing.assert_close(o.reshape(()), want)
        torch.testing.assert_close(gx, grads[0])


def test_zero_infinity_zeroes_impossible_losses_and_their_gradients():
    g = torch.Generator().manual_seed(3)
    logits = torch.randn(10, 4, 5, generator=g, dtype=torch.float64)
    targets = torch.randint(1, 5, (4, 12), generator=g)
    il, tl = [10, 10, 4, 10], [3, 12, 5, 4]  # items 1 and 2 cannot fit
    for reduction in ("none", "sum", "mean"):
        grads = []
        for loss_fn in (CTCLoss(reduction=reduction, zero_infinity=True),
                        torch.nn.CTCLoss(reduction=reduction, zero_infinity=True)):
            x = logits.clone().requires_grad_()
            loss = loss_fn(x.log_softmax(-1), targets, il, tl)
            grads.append((loss.detach(), torch.autograd.grad(loss.sum(), x)[0]))
        torch.testing.assert_close(grads[0][0], grads[1][0])
        torch.testing.assert_close(grads[0][1], grads[1][1])
        assert torch.isfinite(grads[0][1]).all() and (grads[0][1][:, 1:3] == 0).all()


def test_ctc_loss_module_repr_and_arguments():
    m = CTCLoss(blank=2, reduction="sum", zero_infinity=True)
    assert repr(m) == "CTCLoss(blank=2, reduction='sum', zero_infinity=True)"
    assert list(m.parameters()) == []
    for kw, exc, msg in [(dict(blank=-1), ValueError, "blank"), (dict(reduction="avg"), ValueError, "reduction"),
                         (dict(zero_infinity="yes"), TypeError, "zero_infinity"),
                         (dict(method="fast"), ValueError, "method")]:
        with pytest.raises(exc, match=msg):
            CTCLoss(**kw)


BAD = [  # (override, exception, message start); torch's lengthchecks / typechecks and more
    (dict(input_lengths=[51, 50, 50]), ValueError, r"input_lengths: expected values in \[0, 50\]"),
    (dict(input_lengths=[-1, 50, 50]), ValueError, r"input_lengths: expected values in \[0, 50\]"),
    (dict(input_lengths=[50, 50]), ValueError, r"input_lengths: expected shape \(3,\)"),
    (dict(input_lengths=[50.0, 50, 50]), TypeError, "input_lengths: expected ints"),
    (dict(input_lengths=torch.tensor([50.0, 50, 50])), TypeError, "input_lengths: expected integers"),
    (dict(input_lengths="50"), TypeError, "input_lengths: expected an integer tensor"),
    (dict(target_lengths=[31, 25, 20]), ValueError, r"target_lengths: expected values in \[0, 30\]"),
    (dict(target_lengths=[30, 25, -1]), ValueError, "target_lengths: expected values"),
    (dict(target_lengths=[True, 1, 1]), TypeError, "target_lengths: expected ints"),
    (dict(targets=torch.full((3, 30), 15)), ValueError, r"targets: expected labels in \[0, 15\)"),
    (dict(targets=torch.full((3, 30), 14)), ValueError, r"targets: expected no blank \(14\)"),
    (dict(targets=torch.ones(3, 30)), TypeError, "targets: expected an integer tensor"),
    (dict(targets=torch.ones(3, 30, 1, dtype=torch.long)), ValueError, "targets: expected shape"),
    (dict(targets=torch.ones(70, dtype=torch.long)), ValueError, "target_lengths: expected to sum to"),
    (dict(blank=15), ValueError, r"blank: expected an int in \[0, 15\)"),
    (dict(blank=-1), ValueError, "blank: expected an int"),
    (dict(log_probs=torch.full((50, 3, 15), float("nan"))), ValueError, "log_probs: expected no NaN"),
    (dict(log_probs=torch.full((50, 3, 15), float("inf"))), ValueError, "log_probs: expected no NaN or [+]inf"),
    (dict(log_probs=torch.zeros(50, 3, 15, dtype=torch.long)), TypeError, "log_probs: expected a floating"),
    (dict(log_probs=torch.zeros(50, 3, 15, 1)), ValueError, r"log_probs: expected shape \(T, B, V\)"),
]


@pytest.mark.parametrize("override,exc,msg", BAD)
def test_bad_input_is_one_line_naming_the_argument(override, exc, msg):
    lp, targets, il, tl = _criterion_case()
    args = dict(log_probs=lp, targets=targets, input_lengths=il, target_lengths=tl, blank=14)
    args.update(override)
    with pytest.raises(exc, match="^" + msg) as info:
        ctc_loss(**args)
    assert "\n" not in str(info.value)


def test_concatenated_targets_need_lengths_when_batched():
    lp = torch.randn(5, 2, 3).log_softmax(-1)
    with pytest.raises(ValueError, match="target_lengths: required with 1-D"):
        ctc_loss(lp, torch.tensor([1, 2]), [5, 5], None)
    one = ctc_log_likelihood(lp[:, :1], torch.tensor([1, 2]), [5], None)
    torch.testing.assert_close(one, ctc_log_likelihood(lp[:, :1], torch.tensor([[1, 2]]), [5], [2]))
