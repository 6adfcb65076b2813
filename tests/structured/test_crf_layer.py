"""The pytorch-crf-compatible CRF layer against brute-force enumeration (and pytorch-crf if installed).

The cases follow pytorch-crf's own test suite (init, forward with and without mask, batched loss,
reductions, batch_first, decode, error cases) and torch-struct's linear-chain distribution tests
(probabilities sum to one, entropy, argmax, k-best, path count), written here against an
independent enumeration of all C^L tag sequences in float64.
"""

from __future__ import annotations

import itertools
import math

import pytest
import torch
from torch import nn

from ebms.structured.crf_layer import CRF


def make_crf(num_tags: int = 5, batch_first: bool = False, seed: int = 0) -> CRF:
    torch.manual_seed(seed)
    crf = CRF(num_tags, batch_first=batch_first).double()
    with torch.no_grad():  # wider than the default init, so the three parameters matter
        for p in crf.parameters():
            p.uniform_(-2.0, 2.0)
    return crf


def make_inputs(crf: CRF, t: int = 3, b: int = 2, seed: int = 1) -> tuple[torch.Tensor, torch.Tensor]:
    """Emissions and tags in the layer's layout (time-major unless batch_first)."""
    g = torch.Generator().manual_seed(seed)
    em = torch.randn(t, b, crf.num_tags, generator=g, dtype=torch.float64)
    tags = torch.randint(0, crf.num_tags, (t, b), generator=g)
    if crf.batch_first:
        return em.transpose(0, 1), tags.t()
    return em, tags


def path_score(crf: CRF, em: torch.Tensor, tag) -> torch.Tensor:
    """Score of one sequence ``tag`` (length L) with emissions ``em (L, C)``, term by term."""
    s = crf.start_transitions[tag[0]] + crf.end_transitions[tag[-1]]
    for a, b in zip(tag, tag[1:]):
        s = s + crf.transitions[a, b]
    for row, y in zip(em, tag):
        s = s + row[y]
    return s


def enum_llh(crf: CRF, em: torch.Tensor, tags: torch.Tensor, lengths) -> torch.Tensor:
    """``(B,)`` log-likelihoods by enumeration; ``em (B, T, C)``, ``tags (B, T)`` batch-first."""
    out = []
    for e, y, n in zip(em, tags, lengths):
        n = int(n)
        if n == 0:
            out.append(em.new_zeros(()))
            continue
        scores = torch.stack([path_score(crf, e[:n], s)
                              for s in itertools.product(range(crf.num_tags), repeat=n)])
        out.append(path_score(crf, e[:n], y[:n].tolist()) - torch.logsumexp(scores, 0))
    return torch.stack(out)


@torch.no_grad()
def enum_best(crf: CRF, em: torch.Tensor, n: int) -> list[int]:
    if n == 0:
        return []
    best = max(itertools.product(range(crf.num_tags), repeat=n),
               key=lambda s: path_score(crf, em[:n], s).item())
    return list(best)


MASK_BF = torch.tensor([[1, 1, 1], [1, 1, 0]], dtype=torch.uint8)  # (B, T), lengths 3 and 2


# --- init ----------------------------------------------------------------------------------------
def test_init_creates_three_parameters_of_the_right_shapes() -> None:
    crf = CRF(10)
    assert crf.num_tags == 10 and not crf.batch_first
    for name, shape in (("start_transitions", (10,)), ("end_transitions", (10,)),
                        ("transitions", (10, 10))):
        p = getattr(crf, name)
        assert isinstance(p, nn.Parameter) and p.shape == shape
        assert float(p.detach().abs().max()) <= 0.1  # uniform in [-0.1, 0.1]
    assert repr(crf) == "CRF(num_tags=10)"
    assert CRF(10, batch_first=True).batch_first
    assert {n for n, _ in crf.named_parameters()} == {"start_transitions", "end_transitions", "transitions"}


@pytest.mark.parametrize(("args", "exc", "msg"), [
    ((0,), ValueError, r"num_tags: expected an int >= 1; got 0"),
    ((2.0,), TypeError, r"num_tags: expected an int"),
    ((3, 1), TypeError, r"batch_first: expected a bool; got int"),
])
def test_init_rejects_bad_arguments_by_name(args, exc, msg) -> None:
    with pytest.raises(exc, match=msg):
        CRF(*args)


# --- forward -------------------------------------------------------------------------------------
@pytest.mark.parametrize("batch_first", [False, True])
def test_forward_with_mask_equals_enumeration_and_backpropagates(batch_first) -> None:
    crf = make_crf(batch_first=batch_first)
    em, tags = make_inputs(crf)
    mask = MASK_BF if batch_first else MASK_BF.t()
    llh = crf(em, tags, mask=mask)
    em_bf, tags_bf = (em, tags) if batch_first else (em.transpose(0, 1), tags.t())
    assert llh.shape == ()
    torch.testing.assert_close(llh, enum_llh(crf, em_bf, tags_bf, [3, 2]).sum())
    llh.backward()
    assert all(p.grad is not None for p in crf.parameters())


def test_forward_without_mask_equals_an_all_ones_mask() -> None:
    crf = make_crf()
    em, tags = make_inputs(crf)
    torch.testing.assert_close(crf(em, tags), crf(em, tags, mask=torch.ones_like(tags).byte()))
    torch.testing.assert_close(crf(em, tags), crf(em, tags, mask=torch.ones_like(tags).bool()))


def test_batched_loss_equals_the_sum_of_single_sequence_losses() -> None:
    crf = make_crf()
    em, tags = make_inputs(crf, b=10)
    total = sum(crf(em[:, i : i + 1], tags[:, i : i + 1]) for i in range(10))
    torch.testing.assert_close(crf(em, tags), total)


@pytest.mark.parametrize("reduction", ["none", "sum", "mean", "token_mean"])
def test_reductions_equal_enumeration(reduction) -> None:
    crf = make_crf()
    em, tags = make_inputs(crf)
    llh = crf(em, tags, mask=MASK_BF.t(), reduction=reduction)
    ref = enum_llh(crf, em.transpose(0, 1), tags.t(), [3, 2])
    want = {"none": ref, "sum": ref.sum(), "mean": ref.mean(), "token_mean": ref.sum() / 5}[reduction]
    assert llh.shape == want.shape
    torch.testing.assert_close(llh, want)


def test_batch_first_gives_the_same_loss_and_paths() -> None:
    crf = make_crf()
    crf_bf = make_crf(batch_first=True)
    crf_bf.load_state_dict(crf.state_dict())
    em, tags = make_inputs(crf)
    torch.testing.assert_close(crf(em, tags, reduction="none"),
                               crf_bf(em.transpose(0, 1), tags.t(), reduction="none"))
    assert crf.decode(em) == crf_bf.decode(em.transpose(0, 1))


def test_lengths_can_replace_mask() -> None:
    crf = make_crf(batch_first=True)
    em, tags = make_inputs(crf)
    by_mask = crf(em, tags, MASK_BF, reduction="none")
    torch.testing.assert_close(crf(em, tags, lengths=torch.tensor([3, 2]), reduction="none"), by_mask)
    torch.testing.assert_close(crf(em, tags, lengths=[3, 2], reduction="none"), by_mask)
    assert crf.decode(em, lengths=[3, 2]) == crf.decode(em, MASK_BF)


def test_gradients_equal_those_of_enumeration_for_every_parameter() -> None:
    crf = make_crf(batch_first=True)
    em, tags = make_inputs(crf, t=4, b=3)
    em.requires_grad_()
    ln = [4, 1, 3]
    ours = torch.autograd.grad(crf(em, tags, lengths=ln), [em, *crf.parameters()])
    ref = torch.autograd.grad(enum_llh(crf, em, tags, ln).sum(), [em, *crf.parameters()])
    for a, b in zip(ours, ref):
        torch.testing.assert_close(a, b)


def test_training_only_the_layer_parameters_reaches_all_three() -> None:
    # pytorch-crf users' setup: plain emissions, learned start/end/transitions.
    crf = make_crf(batch_first=True)
    em, tags = make_inputs(crf, t=4, b=3)
    crf(em, tags, lengths=[4, 2, 1]).backward()
    ref = torch.autograd.grad(enum_llh(crf, em, tags, [4, 2, 1]).sum(), list(crf.parameters()))
    for p, r in zip(crf.parameters(), ref):
        torch.testing.assert_close(p.grad, r)


def test_empty_sequences_have_log_likelihood_zero_and_decode_to_empty_lists() -> None:
    crf = make_crf(batch_first=True)
    em, tags = make_inputs(crf, t=3, b=3)
    mask = torch.tensor([[1, 1, 0], [0, 0, 0], [1, 0, 0]], dtype=torch.bool)
    llh = crf(em, tags, mask, reduction="none")
    torch.testing.assert_close(llh, enum_llh(crf, em, tags, [2, 0, 1]))
    assert llh[1] == 0
    assert crf.decode(em, mask)[1] == []
    none = torch.zeros(3, 3, dtype=torch.bool)
    assert crf(em, tags, none, reduction="token_mean").item() == 0.0  # no tokens: mean of nothing
    assert crf(em[:0], tags[:0], reduction="mean").item() == 0.0  # no sequences
    assert crf.decode(em[:0]) == []


def test_half_or_double_emissions_run_in_the_promoted_dtype() -> None:
    crf = CRF(4)  # float32 parameters
    em = torch.randn(3, 2, 4, dtype=torch.float64)
    tags = torch.zeros(3, 2, dtype=torch.long)
    assert crf(em, tags).dtype == torch.float64
    assert crf(em.to(torch.bfloat16), tags).dtype == torch.float32


# --- decode --------------------------------------------------------------------------------------
@pytest.mark.parametrize("batch_first", [False, True])
def test_decode_with_mask_equals_the_enumerated_best_path(batch_first) -> None:
    crf = make_crf(batch_first=batch_first)
    em, _ = make_inputs(crf)
    mask = MASK_BF if batch_first else MASK_BF.t()
    paths = crf.decode(em, mask=mask)
    em_bf = em if batch_first else em.transpose(0, 1)
    for e, path, n in zip(em_bf, paths, [3, 2]):
        assert len(path) == n and all(type(y) is int for y in path)
        assert path == enum_best(crf, e, n)


def test_decode_without_mask_and_batched_equal_masked_and_single() -> None:
    crf = make_crf()
    em, _ = make_inputs(crf)
    assert crf.decode(em) == crf.decode(em, mask=em.new_ones(em.shape[:2]).byte())
    mask = MASK_BF.t()
    single = [crf.decode(em[:, i : i + 1], mask=mask[:, i : i + 1])[0] for i in range(2)]
    assert crf.decode(em, mask=mask) == single


# --- errors: one line naming the argument ---------------------------------------------------------
def _bad_calls():
    em, tags = torch.randn(3, 2, 4), torch.zeros(3, 2, dtype=torch.long)
    return [
        (dict(emissions=torch.randn(1, 2)), ValueError, r"emissions: expected 3 dimensions \(T, B, C\); got shape \(1, 2\)"),
        (dict(emissions=torch.randn(3, 2, 3)), ValueError,
         r"emissions: expected the last dimension to be num_tags = 4; got shape \(3, 2, 3\)"),
        (dict(emissions=em.long()), TypeError, r"emissions: expected a floating-point tensor"),
        (dict(tags=torch.zeros(2, 2, dtype=torch.long)), ValueError,
         r"tags: expected shape \(3, 2\) \(the first two dimensions of emissions\); got \(2, 2\)"),
        (dict(tags=tags.float()), TypeError, r"tags: expected an integer tensor; got dtype torch.float32"),
        (dict(tags=torch.full((3, 2), 4)), ValueError, r"tags: expected values in \[0, 3\] within each length"),
        (dict(mask=torch.ones(2, 2, dtype=torch.bool)), ValueError,
         r"mask: expected shape \(3, 2\) \(the first two dimensions of emissions\); got \(2, 2\)"),
        (dict(mask=torch.tensor([[1, 1], [0, 1], [1, 1]], dtype=torch.uint8)), ValueError,
         r"mask: expected a left-aligned prefix per sequence \(ones, then zeros\); got gaps in batch elements \[0\]"),
        (dict(mask=torch.ones(3, 2)), TypeError, r"mask: expected a bool or 0/1 integer tensor; got dtype torch.float32"),
        (dict(mask=torch.full((3, 2), 2)), ValueError, r"mask: expected values 0 and 1 only"),
        (dict(mask=torch.ones(3, 2, dtype=torch.bool), lengths=[3, 3]), ValueError,
         r"mask, lengths: expected at most one of them; got both"),
        (dict(lengths=[4, 1]), ValueError, r"lengths: expected values in \[0, 3\]"),
        (dict(reduction="foo"), ValueError,
         r"reduction: expected one of 'none', 'sum', 'mean', 'token_mean'; got 'foo'"),
    ], em, tags


@pytest.mark.parametrize("i", range(13))
def test_bad_inputs_raise_one_line_errors_naming_the_argument(i) -> None:
    cases, em, tags = _bad_calls()
    kw, exc, msg = cases[i]
    args = {"emissions": em, "tags": tags, **kw}
    crf = CRF(4)
    with pytest.raises(exc, match=msg) as info:
        crf(args.pop("emissions"), args.pop("tags"), **args)
    assert "\n" not in str(info.value)
    if "tags" not in kw and "reduction" not in kw:  # decode checks the same arguments
        d = {k: v for k, v in {"emissions": em, **kw}.items()}
        with pytest.raises(exc, match=msg):
            crf.decode(d.pop("emissions"), **d)


# --- torch-struct-style distribution checks ------------------------------------------------------
@torch.no_grad()
def test_distribution_probabilities_sum_to_one_and_match_enumeration() -> None:
    crf = make_crf(num_tags=3, batch_first=True)
    em, _ = make_inputs(crf, t=4, b=3)
    ln = [4, 2, 3]
    dist = crf.distribution(em, lengths=ln)
    for i, n in enumerate(ln):
        seqs = torch.tensor(list(itertools.product(range(3), repeat=n)))
        full = torch.zeros(len(seqs), 3, 4, dtype=torch.long)
        full[:, i, :n] = seqs
        logp = torch.stack([dist.log_prob(full[j])[i] for j in range(len(seqs))])
        assert math.isclose(float(logp.exp().sum()), 1.0, rel_tol=1e-12)
        torch.testing.assert_close(dist.entropy[i], -(logp.exp() * logp).sum())
        assert seqs[logp.argmax()].tolist() == dist.argmax[i, :n].tolist()
        top = logp.sort(descending=True).values[:5]
        torch.testing.assert_close(dist.kbest(5)[1][:, i] - dist.log_partition[i], top)
    # path count: k-best with a huge k returns every sequence of the longest one (3^4)
    assert dist.kbest(10**6)[0].shape[0] == 81


# --- direct comparison with pytorch-crf ----------------------------------------------------------
@pytest.mark.parametrize("batch_first", [False, True])
def test_matches_pytorch_crf_on_loss_gradients_and_decode(batch_first) -> None:
    torchcrf = pytest.importorskip("torchcrf")
    ours = make_crf(num_tags=6, batch_first=batch_first, seed=3)
    theirs = torchcrf.CRF(6, batch_first=batch_first).double()
    theirs.load_state_dict(ours.state_dict())  # same parameter names
    g = torch.Generator().manual_seed(4)
    t, b = 7, 5
    em = torch.randn(t, b, 6, generator=g, dtype=torch.float64)
    tags = torch.randint(0, 6, (t, b), generator=g)
    mask = (torch.arange(t)[:, None] < torch.tensor([7, 3, 1, 5, 7])).to(torch.uint8)
    if batch_first:
        em, tags, mask = em.transpose(0, 1), tags.t(), mask.t()
    for reduction in ("none", "sum", "mean", "token_mean"):
        a = ours(em, tags, mask, reduction=reduction)
        b_ = theirs(em, tags, mask, reduction=reduction)
        torch.testing.assert_close(a, b_)
    ga = torch.autograd.grad(ours(em, tags, mask), list(ours.parameters()))
    gb = torch.autograd.grad(theirs(em, tags, mask), list(theirs.parameters()))
    for x, y in zip(ga, gb):
        torch.testing.assert_close(x, y)
    assert ours.decode(em, mask) == theirs.decode(em, mask)
    assert ours.decode(em) == theirs.decode(em)
