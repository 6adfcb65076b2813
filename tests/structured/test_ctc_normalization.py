"""CTC losses read ``log_probs`` as log-probabilities: unnormalised frames are an error naming the
argument (they used to give a "loss" that is no negative log-likelihood, without a word), padding
past ``input_lengths`` is not read, ``normalized=False`` applies ``log_softmax`` first, and
CTC-CRF's plain loss, invariant to per-frame shifts, takes any scores."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from ebms.structured import CTCLoss
from ebms.structured.ctc import ctc_log_likelihood, ctc_loss
from ebms.structured.ctc_crf import ctc_crf_log_likelihood, ctc_crf_loss
from ebms.structured.den_graph import DenominatorGraph
from ebms.structured.ngram import LabelNGram

UNNORMALISED = r"log_probs: expected log-probabilities normalised over the last axis \(logsumexp 0 within"


def _case(t=10, b=3, v=5, s=3, seed=0, dtype=torch.float64):
    g = torch.Generator().manual_seed(seed)
    logits = torch.randn(t, b, v, generator=g, dtype=dtype) * 2
    targets = torch.randint(1, v, (b, s), generator=g)
    il = torch.tensor([t, t - 2, t - 4])
    tl = torch.tensor([s, s - 1, 1])
    return logits, targets, il, tl


def _graph(v=5):
    return DenominatorGraph.from_ngram(LabelNGram.fit([[1, 2], [3, 1, 4], [2]], v, 2))


@pytest.mark.parametrize(
    ("what", "make"),
    [
        ("logits", lambda x: x),
        ("probabilities", lambda x: x.softmax(-1)),
        ("a temperature after log_softmax", lambda x: x.log_softmax(-1) / 2.0),
        ("log(softmax + 1e-3)", lambda x: torch.log(x.softmax(-1) + 1e-3)),
    ],
)
def test_ctc_loss_refuses_unnormalised_log_probs_naming_the_argument(what, make):
    logits, targets, il, tl = _case()
    with pytest.raises(ValueError, match=UNNORMALISED + r".*; got logsumexp .* at frame \d+ of sequence \d+; apply log_softmax"):
        ctc_loss(make(logits), targets, il, tl)
    with pytest.raises(ValueError, match=UNNORMALISED):
        CTCLoss()(make(logits), targets, il, tl)
    with pytest.raises(ValueError, match=UNNORMALISED):
        ctc_loss(make(logits)[:, 0], targets[0], int(il[0]), int(tl[0]))  # unbatched (T, V)


def test_the_message_names_the_worst_frame():
    logits, targets, il, tl = _case()
    lp = logits.log_softmax(-1)
    lp[4, 1, 2] += 0.5  # frame 4 of sequence 1 sums to more than one
    with pytest.raises(ValueError, match=r"at frame 4 of sequence 1;"):
        ctc_loss(lp, targets, il, tl)


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32, torch.float16, torch.bfloat16])
@pytest.mark.parametrize("v", [2, 30, 5000])
def test_log_softmax_outputs_pass_in_every_dtype(dtype, v):
    g = torch.Generator().manual_seed(v)
    for scale in (0.01, 1.0, 100.0):
        x = torch.randn(6, 2, v, generator=g, dtype=torch.float64) * scale
        targets = torch.randint(1, v, (2, 2), generator=g)
        for lp in (x.to(dtype).log_softmax(-1), x.log_softmax(-1).to(dtype)):  # computed in dtype, or cast to it
            if dtype in (torch.float32, torch.float64):
                assert torch.isfinite(ctc_loss(lp, targets, [6, 6], [2, 2]))
            else:  # half types take ebms's own recursion (method="dp")
                assert torch.isfinite(ctc_loss(lp, targets, [6, 6], [2, 2], method="dp"))


def test_the_tolerance_follows_the_dtype():
    from ebms.structured._ctc_inputs import normalization_tolerance

    assert normalization_tolerance(torch.float64, 30) == pytest.approx(math.sqrt(2.0**-52))
    assert normalization_tolerance(torch.float32, 30) == pytest.approx(math.sqrt(2.0**-23))
    eps = 2.0**-7
    assert normalization_tolerance(torch.bfloat16, 50000) == pytest.approx(4 * eps * (1 + math.log(50000)))


def test_padding_frames_past_input_lengths_are_not_read():
    logits, targets, il, tl = _case()
    lp = logits.log_softmax(-1)
    padded = lp.clone()
    for b, n in enumerate(il.tolist()):
        padded[n:, b] = 0.0  # zero padding: not normalised, never read
    got = ctc_loss(padded, targets, il, tl, reduction="none")
    torch.testing.assert_close(got, F.ctc_loss(lp, targets, il, tl, reduction="none"), rtol=1e-12, atol=0)


def test_normalized_false_applies_log_softmax_and_its_gradient():
    logits, targets, il, tl = _case()
    a = logits.clone().requires_grad_()
    b = logits.clone().requires_grad_()
    loss_a = ctc_loss(a, targets, il, tl, normalized=False)
    loss_b = ctc_loss(b.log_softmax(-1), targets, il, tl)
    torch.testing.assert_close(loss_a, loss_b, rtol=1e-12, atol=0)
    loss_a.backward()
    loss_b.backward()
    torch.testing.assert_close(a.grad, b.grad, rtol=1e-10, atol=1e-12)
    module = CTCLoss(normalized=False)
    assert repr(module) == "CTCLoss(blank=0, reduction='mean', zero_infinity=False, normalized=False)"
    torch.testing.assert_close(module(logits, targets, il, tl), loss_b.detach(), rtol=1e-12, atol=0)


def test_normalized_must_be_a_bool():
    logits, targets, il, tl = _case()
    with pytest.raises(TypeError, match=r"normalized: expected a bool; got 'no'"):
        ctc_loss(logits, targets, il, tl, normalized="no")
    with pytest.raises(TypeError, match=r"normalized: expected a bool; got 0"):
        CTCLoss(normalized=0)
    with pytest.raises(TypeError, match=r"normalized: expected a bool; got None"):
        ctc_crf_loss(logits, targets, il, tl, _graph(), normalized=None)


def test_ctc_log_likelihood_is_the_semiring_total_of_any_scores():
    # documented: no normalisation check (the building block of CTC-CRF and best_alignment)
    logits, targets, il, tl = _case()
    shift = torch.arange(10, dtype=torch.float64).reshape(10, 1, 1)  # c_t added to every entry of frame t
    got = ctc_log_likelihood(logits.log_softmax(-1) + shift, targets, il, tl)
    want = ctc_log_likelihood(logits.log_softmax(-1), targets, il, tl)
    frames = torch.tensor([sum(range(n)) for n in il.tolist()], dtype=torch.float64)
    torch.testing.assert_close(got, want + frames, rtol=1e-12, atol=1e-12)


def test_ctc_crf_plain_loss_is_invariant_to_per_frame_shifts_so_takes_any_scores():
    logits, targets, il, tl = _case()
    graph = _graph()
    scores = logits + 3.0  # not normalised; log_softmax(scores) == log_softmax(logits)
    torch.testing.assert_close(ctc_crf_loss(scores, targets, il, tl, graph, reduction="none"),
                               ctc_crf_loss(logits.log_softmax(-1), targets, il, tl, graph, reduction="none"),
                               rtol=1e-10, atol=1e-10)
    torch.testing.assert_close(ctc_crf_log_likelihood(scores, targets, il, tl, graph),
                               ctc_crf_log_likelihood(logits.log_softmax(-1), targets, il, tl, graph),
                               rtol=1e-10, atol=1e-10)


def test_ctc_crf_loss_checks_normalisation_where_it_reads_log_probabilities():
    logits, targets, il, tl = _case()
    graph = _graph()
    with pytest.raises(ValueError, match=UNNORMALISED):
        ctc_crf_loss(logits, targets, il, tl, graph, ctc_weight=0.5)  # the auxiliary CTC term
    with pytest.raises(ValueError, match=UNNORMALISED):
        ctc_crf_loss(logits, targets, il, tl, graph, numerator="torch")  # torch's gradient assumes log_softmax
    got = ctc_crf_loss(logits, targets, il, tl, graph, ctc_weight=0.5, normalized=False)
    want = ctc_crf_loss(logits.log_softmax(-1), targets, il, tl, graph, ctc_weight=0.5)
    torch.testing.assert_close(got, want, rtol=1e-12, atol=0)


def test_long_inputs_are_checked_on_evenly_spaced_frames():
    from ebms.structured._ctc_inputs import CHECKED_FRAMES, check_normalized

    g = torch.Generator().manual_seed(3)
    logits = torch.randn(200, 2, 7, generator=g, dtype=torch.float64)
    il = torch.tensor([200, 150])
    lp = logits.log_softmax(-1)
    check_normalized(lp, il)  # normalised: passes
    with pytest.raises(ValueError, match=r"got logsumexp .* at frame \d+ of sequence \d;"):
        check_normalized(logits, il)  # logits are off in every frame
    one_off = lp.clone()
    one_off[0, 1] += 1.0  # the first frame is always read
    with pytest.raises(ValueError, match=r"got logsumexp 1 at frame 0 of sequence 1;"):
        check_normalized(one_off, il)
    wrong_axis = logits.log_softmax(0)  # normalised over time instead of the classes
    with pytest.raises(ValueError, match=UNNORMALISED):
        check_normalized(wrong_axis, il)
    assert CHECKED_FRAMES == 32
