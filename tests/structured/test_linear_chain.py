"""LinearChainCRF against brute-force enumeration of all C^L tag sequences."""

from __future__ import annotations

import math

import pytest
import torch

from ebms.structured import (
    KMaxSemiring,
    LinearChainCRF,
    LogSemiring,
    MaxSemiring,
    bio_allowed_transitions,
    linear_chain_forward,
)

# (T, C, lengths, with start/end): lengths 1-6, 1-5 tags, ragged batches.
CASES = [
    (1, 1, [1], False),
    (1, 5, [1], True),
    (3, 2, [3, 1, 2], True),
    (4, 3, [4, 2, 3, 1], False),
    (6, 2, [6, 3], True),
    (5, 4, [5, 2], True),
    (6, 3, [6, 4, 1], False),
    (3, 5, [3, 2], True),
    (6, 5, [6, 5], True),
]


def make(case, seed: int = 0, allowed=None, allowed_start=None, allowed_end=None):
    t, c, lengths, with_ends = case
    g = torch.Generator().manual_seed(seed)
    b = len(lengths)
    em = torch.randn(b, t, c, generator=g, dtype=torch.float64)
    tr = torch.randn(c, c, generator=g, dtype=torch.float64)
    st = torch.randn(c, generator=g, dtype=torch.float64) if with_ends else None
    en = torch.randn(c, generator=g, dtype=torch.float64) if with_ends else None
    ln = torch.tensor(lengths)
    crf = LinearChainCRF(em, tr, ln, start=st, end=en, allowed=allowed,
                         allowed_start=allowed_start, allowed_end=allowed_end)
    return crf, (em, tr, st, en, ln, allowed, allowed_start, allowed_end)


def enumerate_one(args, i: int) -> tuple[torch.Tensor, torch.Tensor]:
    """All allowed sequences ``(N, L)`` of batch element ``i`` and their scores, independently."""
    em, tr, st, en, ln, allowed, a_start, a_end = args
    length, c = int(ln[i]), em.shape[2]
    seqs = torch.cartesian_prod(*[torch.arange(c)] * length).reshape(-1, length)
    score = em[i, torch.arange(length), seqs].sum(1) + tr[seqs[:, :-1], seqs[:, 1:]].sum(1)
    if st is not None:
        score = score + st[seqs[:, 0]] + en[seqs[:, -1]]
    keep = torch.ones(len(seqs), dtype=torch.bool)
    if allowed is not None:
        keep &= allowed[seqs[:, :-1], seqs[:, 1:]].all(1)
    if a_start is not None:
        keep &= a_start[seqs[:, 0]]
    if a_end is not None:
        keep &= a_end[seqs[:, -1]]
    return seqs[keep], score[keep]


def pad(seqs: torch.Tensor, t: int) -> torch.Tensor:
    return torch.cat([seqs, seqs.new_full((len(seqs), t - seqs.shape[1]), -1)], 1)


@pytest.mark.parametrize("case", CASES)
def test_log_partition_and_log_prob_equal_enumeration(case) -> None:
    crf, args = make(case)
    t = case[0]
    for i in range(len(case[2])):
        seqs, score = enumerate_one(args, i)
        assert torch.allclose(crf.log_partition[i], torch.logsumexp(score, 0))
        # log_prob of every sequence, padded with junk beyond the length, normalises to 1.
        tags = pad(seqs, t).masked_fill(pad(seqs, t) < 0, 7)
        full = torch.zeros(len(tags), *crf.emissions.shape[:2], dtype=torch.long)
        full[:, i] = tags
        lp = torch.stack([crf.log_prob(full[n])[i] for n in range(len(tags))])
        torch.testing.assert_close(lp, score - torch.logsumexp(score, 0))
        assert math.isclose(lp.exp().sum().item(), 1.0, rel_tol=1e-12)


@pytest.mark.parametrize("case", CASES)
def test_node_and_pair_marginals_equal_enumeration(case) -> None:
    crf, args = make(case, seed=1)
    t, c = case[0], case[1]
    for i in range(len(case[2])):
        seqs, score = enumerate_one(args, i)
        p = torch.softmax(score, 0)
        length = seqs.shape[1]
        node = torch.zeros(t, c, dtype=torch.float64)
        pair = torch.zeros(max(t - 1, 0), c, c, dtype=torch.float64)
        for s in range(length):
            node[s].index_add_(0, seqs[:, s], p)
        for s in range(length - 1):
            pair[s].view(-1).index_add_(0, seqs[:, s] * c + seqs[:, s + 1], p)
        torch.testing.assert_close(crf.marginals[i], node)
        torch.testing.assert_close(crf.pair_marginals[i], pair)


@pytest.mark.parametrize("case", CASES)
def test_argmax_and_kbest_equal_top_of_enumeration(case) -> None:
    crf, args = make(case, seed=2)
    k = 5
    tags, scores = crf.kbest(k)
    n_paths = case[1] ** max(case[2])  # K = min(k, largest number of sequences in the batch)
    assert tags.shape == (min(k, n_paths), *crf.emissions.shape[:2])
    for i in range(len(case[2])):
        seqs, score = enumerate_one(args, i)
        top = score.sort(descending=True).values[:k]
        n = len(top)
        torch.testing.assert_close(crf.max_score[i], top[0])
        torch.testing.assert_close(crf.score(crf.argmax)[i], top[0])
        torch.testing.assert_close(scores[:n, i], top)
        assert torch.isneginf(scores[n:, i]).all() and (tags[n:, i] == -1).all()
        got = {tuple(tags[j, i].tolist()) for j in range(n)}
        assert len(got) == n  # k distinct sequences
        for j in range(n):  # each decoded path has the score reported for it
            full = tags[j].clone()
            full[:, :] = tags[j, i]
            torch.testing.assert_close(crf.score(full.clamp_min(0))[i], scores[j, i])
        assert (tags[:, i, int(args[4][i]):] == -1).all()


@pytest.mark.parametrize("case", CASES)
def test_entropy_equals_enumeration(case) -> None:
    crf, args = make(case, seed=3)
    for i in range(len(case[2])):
        _, score = enumerate_one(args, i)
        logp = torch.log_softmax(score, 0)
        torch.testing.assert_close(crf.entropy[i], -(logp.exp() * logp).sum())


def exact_vs_empirical_tv(crf, args, draws: torch.Tensor, i: int) -> tuple[float, float]:
    """TV between sample frequencies and the enumerated law, and its bound from the sample size.

    E[TV] <= 1/2 sum_s sqrt(p_s (1 - p_s) / n) (Jensen per cell); TV changes by <= 1/n per draw,
    so McDiarmid gives P(TV > E[TV] + sqrt(log(1/delta) / (2n))) <= delta, delta = 1e-6
    (z about 4.9 in normal terms).
    """
    seqs, score = enumerate_one(args, i)
    p = torch.softmax(score, 0)
    length, c = seqs.shape[1], crf.emissions.shape[2]
    weights = c ** torch.arange(length - 1, -1, -1)
    code = {int(v): j for j, v in enumerate((seqs * weights).sum(1))}
    y = draws[:, i, :length]
    assert (y >= 0).all() and (draws[:, i, length:] == -1).all()
    idx = torch.tensor([code[int(v)] for v in (y * weights).sum(1)])  # fails if disallowed
    n = draws.shape[0]
    emp = torch.bincount(idx, minlength=len(seqs)).double() / n
    tv = 0.5 * (emp - p).abs().sum().item()
    bound = 0.5 * torch.sqrt(p * (1 - p) / n).sum().item() + math.sqrt(math.log(1e6) / (2 * n))
    return tv, bound


@pytest.mark.parametrize("case", [CASES[2], CASES[3], CASES[7]])
def test_sample_frequencies_match_enumeration(case) -> None:
    crf, args = make(case, seed=4)
    n = 20000
    draws = crf.sample(n, generator=torch.Generator().manual_seed(5))
    assert draws.shape == (n, *crf.emissions.shape[:2])
    for i in range(len(case[2])):
        tv, bound = exact_vs_empirical_tv(crf, args, draws, i)
        assert tv < bound, (tv, bound)


def test_allowed_masks_restrict_every_quantity_to_allowed_sequences() -> None:
    tags = ["O", "B-PER", "I-PER", "B-LOC", "I-LOC"]
    allowed, allowed_start = bio_allowed_transitions(tags)
    allowed_end = torch.tensor([True, True, True, False, True])
    case = (5, 5, [5, 3, 1], True)
    crf, args = make(case, seed=6, allowed=allowed, allowed_start=allowed_start,
                     allowed_end=allowed_end)
    tagged, scores = crf.kbest(4)
    draws = crf.sample(20000, generator=torch.Generator().manual_seed(7))
    for i in range(3):
        seqs, score = enumerate_one(args, i)
        torch.testing.assert_close(crf.log_partition[i], torch.logsumexp(score, 0))
        logp = torch.log_softmax(score, 0)
        torch.testing.assert_close(crf.entropy[i], -(logp.exp() * logp).sum())
        top = score.sort(descending=True).values[:4]
        torch.testing.assert_close(scores[: len(top), i], top)
        assert torch.isneginf(scores[len(top):, i]).all()
        torch.testing.assert_close(crf.max_score[i], score.max())
        tv, bound = exact_vs_empirical_tv(crf, args, draws, i)
        assert tv < bound, (tv, bound)
    lp = crf.log_prob(torch.tensor([[0, 2, 2, 0, 0]] * 3))  # O -> I-PER; length 1 keeps only O
    assert torch.isneginf(lp[:2]).all() and torch.isfinite(lp[2])
    assert torch.isfinite(crf.entropy).all() and torch.isfinite(crf.marginals).all()


def test_bio_allowed_transitions_encodes_bio_rules() -> None:
    allowed, start = bio_allowed_transitions(["O", "B-X", "I-X", "B-Y", "I-Y"])
    assert start.tolist() == [True, True, False, True, False]
    assert allowed[:, 2].tolist() == [False, True, True, False, False]
    assert allowed[:, 4].tolist() == [False, False, False, True, True]
    assert allowed[:, [0, 1, 3]].all()
    with pytest.raises(ValueError, match=r"tags: expected 'O', 'B-<type>' or 'I-<type>'; got 'X'"):
        bio_allowed_transitions(["O", "X"])
    with pytest.raises(ValueError, match=r"tags: expected a non-empty list"):
        bio_allowed_transitions([])


@pytest.mark.parametrize("case", [CASES[2], CASES[5]])
def test_forward_function_matches_distribution_for_each_semiring(case) -> None:
    crf, (em, tr, st, en, ln, *_) = make(case, seed=8)
    log_z = linear_chain_forward(em, tr, ln, LogSemiring(), start=st, end=en)
    best = linear_chain_forward(em, tr, ln, MaxSemiring(), start=st, end=en)
    top = linear_chain_forward(em, tr, ln, KMaxSemiring(3), start=st, end=en)
    torch.testing.assert_close(log_z[0], crf.log_partition)
    torch.testing.assert_close(best[0], crf.max_score)
    torch.testing.assert_close(top, crf.kbest(3)[1])


def test_log_partition_and_entropy_pass_gradcheck() -> None:
    g = torch.Generator().manual_seed(9)
    em = torch.randn(3, 4, 3, generator=g, dtype=torch.float64, requires_grad=True)
    tr = torch.randn(3, 3, generator=g, dtype=torch.float64, requires_grad=True)
    st = torch.randn(3, generator=g, dtype=torch.float64, requires_grad=True)
    en = torch.randn(3, generator=g, dtype=torch.float64, requires_grad=True)
    ln = torch.tensor([4, 2, 1])
    assert torch.autograd.gradcheck(
        lambda *p: LinearChainCRF(p[0], p[1], ln, start=p[2], end=p[3]).log_partition,
        (em, tr, st, en))
    assert torch.autograd.gradcheck(
        lambda *p: LinearChainCRF(p[0], p[1], ln, start=p[2], end=p[3]).entropy, (em, tr, st, en))
    # The gradient of log Z with respect to the emissions is the node marginals.
    crf = LinearChainCRF(em, tr, ln, start=st, end=en)
    (grad,) = torch.autograd.grad(crf.log_partition.sum(), em)
    torch.testing.assert_close(grad, crf.marginals.detach())


def _crf(**kw):
    base = dict(emissions=torch.zeros(2, 3, 4), transitions=torch.zeros(4, 4))
    base.update(kw)
    return LinearChainCRF(**base)


@pytest.mark.parametrize(("kw", "exc", "msg"), [
    (dict(emissions=[[0.0]]), TypeError, r"emissions: expected a torch.Tensor; got list"),
    (dict(emissions=torch.zeros(2, 3, 4, dtype=torch.long)), TypeError,
     r"emissions: expected a floating-point tensor; got dtype torch.int64"),
    (dict(emissions=torch.zeros(2, 3)), ValueError, r"emissions: expected shape \(B, T, C\); got \(2, 3\)"),
    (dict(emissions=torch.zeros(2, 3, 0)), ValueError,
     r"emissions: expected at least one tag \(C = shape\[2\] >= 1\); got shape \(2, 3, 0\)"),
    (dict(emissions=torch.full((2, 3, 4), float("nan"))), ValueError,
     r"emissions: expected a finite tensor; got 24 NaN"),
    (dict(transitions=torch.zeros(3, 3)), ValueError,
     r"transitions \(C = emissions.shape\[2\] = 4\): expected shape \(4, 4\); got \(3, 3\)"),
    (dict(transitions=torch.zeros(4, 4, dtype=torch.float64)), TypeError,
     r"transitions: expected dtype torch.float32"),
    (dict(start=torch.zeros(3)), ValueError, r"start \(C = .*expected shape \(4,\); got \(3,\)"),
    (dict(end=torch.tensor([0.0, float("inf"), 0, 0])), ValueError, r"end: expected a finite"),
    (dict(lengths=torch.tensor([3, 4])), ValueError,
     r"lengths: expected values in \[0, 3\] \(T = emissions.shape\[1\]\); got min 3, max 4"),
    (dict(lengths=torch.tensor([-1, 2])), ValueError, r"lengths: expected values in \[0, 3\].*min -1"),
    (dict(lengths=torch.tensor([3.0, 2.0])), TypeError, r"lengths: expected an integer tensor"),
    (dict(lengths=torch.tensor([3])), ValueError, r"lengths: expected shape \(2,\); got \(1,\)"),
    (dict(allowed=torch.ones(4, 4)), TypeError, r"allowed: expected a bool tensor of shape \(4, 4\); got dtype"),
    (dict(allowed=torch.ones(4, 3, dtype=torch.bool)), ValueError,
     r"allowed: expected a bool tensor of shape \(4, 4\); got shape \(4, 3\)"),
    (dict(allowed_start=torch.ones(3, dtype=torch.bool)), ValueError,
     r"allowed_start: expected a bool tensor of shape \(4,\); got shape \(3,\)"),
])
def test_invalid_arguments_raise_errors_naming_them(kw, exc, msg) -> None:
    with pytest.raises(exc, match=msg):
        _crf(**kw)


def test_invalid_call_arguments_raise_errors_naming_them() -> None:
    crf = _crf(lengths=torch.tensor([3, 1]))
    with pytest.raises(ValueError, match=r"tags: expected values in \[0, 3\] within each length; got min 0, max 4"):
        crf.log_prob(torch.tensor([[0, 4, 0], [1, 9, 9]]))
    with pytest.raises(ValueError, match=r"tags: expected values in \[0, 3\].*got min -1"):
        crf.log_prob(torch.tensor([[0, 0, 0], [-1, 0, 0]]))
    crf.log_prob(torch.tensor([[0, 1, 2], [3, 99, -5]]))  # beyond the length: ignored
    with pytest.raises(ValueError, match=r"tags: expected shape \(2, 3\); got \(2, 2\)"):
        crf.log_prob(torch.zeros(2, 2, dtype=torch.long))
    with pytest.raises(TypeError, match=r"tags: expected an integer tensor"):
        crf.log_prob(torch.zeros(2, 3))
    with pytest.raises(ValueError, match=r"k: expected an int >= 1; got 0"):
        crf.kbest(0)
    with pytest.raises(ValueError, match=r"n: expected an int >= 1; got 0"):
        crf.sample(0)
    none_allowed = _crf(allowed=torch.zeros(4, 4, dtype=torch.bool), lengths=torch.tensor([3, 1]))
    with pytest.raises(ValueError, match=r"allowed: no tag sequence is allowed for batch elements \[0\]"):
        _ = none_allowed.log_partition
    with pytest.raises(ValueError, match=r"lengths: expected values in \[0, 3\]"):
        linear_chain_forward(torch.zeros(2, 3, 4), torch.zeros(4, 4), torch.tensor([4, 1]), LogSemiring())


def _log_space_log_z(em, tr, ln, st, en):
    return linear_chain_forward(em, tr, ln, LogSemiring(), start=st, end=en)[0]


@pytest.mark.parametrize("scale", [1.0, 100.0])  # 100: spread too large, log-space fallback
def test_log_partition_and_its_gradient_equal_the_log_space_recursion(scale) -> None:
    g = torch.Generator().manual_seed(3)
    em = (scale * torch.randn(4, 7, 5, generator=g)).requires_grad_()
    tr = torch.randn(5, 5, generator=g).requires_grad_()
    st, en = torch.randn(5, generator=g), torch.randn(5, generator=g).requires_grad_()
    ln = torch.tensor([7, 3, 1, 5])
    z = LinearChainCRF(em, tr, ln, start=st, end=en).log_partition
    ref = _log_space_log_z(em, tr, ln, st, en)
    torch.testing.assert_close(z, ref, rtol=1e-5, atol=1e-4)
    w = torch.randn(4, generator=g)
    got = torch.autograd.grad((z * w).sum(), (em, tr, en))
    want = torch.autograd.grad((ref * w).sum(), (em, tr, en))
    for a, b in zip(got, want):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5)


def test_log_partition_second_derivative_equals_the_log_space_recursion() -> None:
    g = torch.Generator().manual_seed(4)
    em = torch.randn(2, 4, 3, generator=g, dtype=torch.float64, requires_grad=True)
    tr = torch.randn(3, 3, generator=g, dtype=torch.float64, requires_grad=True)
    ln = torch.tensor([4, 2])
    assert torch.autograd.gradgradcheck(lambda e, t: LinearChainCRF(e, t, ln).log_partition, (em, tr))


def test_max_score_gradient_is_the_indicator_of_the_viterbi_path() -> None:
    g = torch.Generator().manual_seed(5)
    em = torch.randn(2, 5, 4, generator=g, dtype=torch.float64, requires_grad=True)
    tr = torch.randn(4, 4, generator=g, dtype=torch.float64)
    crf = LinearChainCRF(em, tr, torch.tensor([5, 3]))
    (grad,) = torch.autograd.grad(crf.max_score.sum(), em)
    tags = crf.argmax
    want = torch.nn.functional.one_hot(tags.clamp(min=0), 4).double() * (tags >= 0)[..., None]
    torch.testing.assert_close(grad, want)
