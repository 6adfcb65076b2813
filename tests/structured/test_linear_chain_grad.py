"""Every LinearChainCRF result is differentiable in every potential, in every requires-grad combination.

References: central finite differences (float64) and a brute-force enumeration of all C^L tag
sequences written with plain torch ops (differentiated by autograd), also at potentials x 1e3.
Edge cases: lengths 0 and 1, ragged batches, an empty batch, T = 0, float32, and the k-best bound.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable

import pytest
import torch

from ebms.structured.linear_chain import LinearChainCRF, bio_allowed_transitions

NAMES = ("emissions", "transitions", "start", "end")
COMBOS = list(itertools.product((False, True), repeat=4))  # requires_grad of each potential
K = 3
RESULTS = ("log_partition", "score", "log_prob", "marginals", "pair_marginals", "entropy",
           "max_score", "kbest")
# (T, C, lengths): ragged with a length-1 sequence; with a length-0 sequence; all of length 1.
CONFIGS = {"ragged": (4, 3, [4, 2, 1]), "with_empty": (4, 3, [3, 0, 4]), "all_one": (1, 3, [1, 1])}


def prefixed(what: str) -> Callable[[str], str]:
    """An ``assert_close`` message that names the result and potential being compared."""
    return lambda m: f"{what}: {m}"


def potentials(t: int, c: int, b: int, seed: int = 0, scale: float = 1.0,
               dtype: torch.dtype = torch.float64) -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    shapes = [(b, t, c), (c, c), (c,), (c,)]
    return [scale * torch.randn(s, generator=g, dtype=torch.float64).to(dtype) for s in shapes]


def gold_tags(lengths: list[int], t: int, c: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(1)
    return torch.randint(0, c, (len(lengths), t), generator=g)


def result(name: str, p: list[torch.Tensor], lengths: torch.Tensor, tags: torch.Tensor) -> torch.Tensor:
    crf = LinearChainCRF(p[0], p[1], lengths, start=p[2], end=p[3])
    if name in ("score", "log_prob"):
        return getattr(crf, name)(tags)
    if name == "kbest":
        return crf.kbest(K)[1]
    return getattr(crf, name)


def weighted(x: torch.Tensor) -> torch.Tensor:
    """A fixed random linear functional of the finite entries (kbest slots may be -inf)."""
    w = torch.randn(x.shape, generator=torch.Generator().manual_seed(2), dtype=torch.float64).to(x.dtype)
    return (w * torch.where(torch.isfinite(x), x, torch.zeros((), dtype=x.dtype))).sum()


def finite_differences(name: str, p: list[torch.Tensor], lengths, tags, eps: float = 1e-6):
    grads = []
    for i, x in enumerate(p):
        gx = torch.zeros_like(x)
        for j in range(x.numel()):
            hi = [q.clone() for q in p]
            lo = [q.clone() for q in p]
            hi[i].view(-1)[j] += eps
            lo[i].view(-1)[j] -= eps
            f_hi = weighted(result(name, hi, lengths, tags))
            f_lo = weighted(result(name, lo, lengths, tags))
            gx.view(-1)[j] = (f_hi - f_lo) / (2 * eps)
        grads.append(gx)
    return grads


def autograd(name: str, p: list[torch.Tensor], combo, lengths, tags):
    """Gradients w.r.t. the potentials flagged in ``combo`` (no allow_unused: each must be reached)."""
    leaves = [x.detach().clone().requires_grad_(flag) for x, flag in zip(p, combo)]
    out = result(name, leaves, lengths, tags)
    if not any(combo):
        assert not out.requires_grad
        return {}
    assert out.requires_grad
    wanted = [x for x in leaves if x.requires_grad]
    grads = torch.autograd.grad(weighted(out), wanted)
    return {i: g for i, g in zip([i for i, f in enumerate(combo) if f], grads)}


@pytest.mark.parametrize("config", list(CONFIGS))
@pytest.mark.parametrize("name", RESULTS)
def test_every_result_matches_finite_differences_for_every_requires_grad_combination(name, config) -> None:
    t, c, ln = CONFIGS[config]
    p = potentials(t, c, len(ln))
    lengths, tags = torch.tensor(ln), gold_tags(ln, t, c)
    fd = finite_differences(name, p, lengths, tags)
    for combo in COMBOS:
        got = autograd(name, p, combo, lengths, tags)
        for i, g in got.items():
            torch.testing.assert_close(g, fd[i], rtol=1e-6, atol=1e-6,
                                       msg=prefixed(f"{name} d/d{NAMES[i]} combo {combo}"))


def test_entropy_gradient_in_transitions_alone_is_not_lost() -> None:
    # The reported case: plain emissions, learned transitions (how pytorch-crf users train).
    em, tr, _, _ = potentials(4, 3, 2, seed=3)
    tr = tr.requires_grad_()
    assert torch.autograd.gradcheck(lambda a: LinearChainCRF(em, a).entropy, (tr,))
    assert torch.autograd.gradcheck(lambda a: LinearChainCRF(em, a).marginals, (tr,))
    st = torch.randn(3, dtype=torch.float64, requires_grad=True)  # only start: used to raise
    assert torch.autograd.gradcheck(lambda s: LinearChainCRF(em, tr.detach(), start=s).pair_marginals, (st,))
    assert torch.autograd.gradcheck(lambda s: LinearChainCRF(em, tr.detach(), start=s).kbest(4)[1], (st,))


# --- brute force -------------------------------------------------------------------------------
def brute(p: list[torch.Tensor], lengths: list[int], tags: torch.Tensor, t: int) -> dict[str, torch.Tensor]:
    """Every result by enumerating all C^L sequences of each batch element (plain torch ops)."""
    em, tr, st, en = p
    c = em.shape[2]
    out: dict[str, list[torch.Tensor]] = {n: [] for n in RESULTS}
    for i, n in enumerate(lengths):
        if n == 0:
            seqs = torch.zeros(1, 0, dtype=torch.long)
            score = em.new_zeros(1)
        else:
            seqs = torch.cartesian_prod(*[torch.arange(c)] * n).reshape(-1, n)
            score = (em[i, torch.arange(n), seqs].sum(1) + tr[seqs[:, :-1], seqs[:, 1:]].sum(1)
                     + st[seqs[:, 0]] + en[seqs[:, -1]])
        log_z = torch.logsumexp(score, 0)
        logp = score - log_z
        prob = logp.exp()
        node = em.new_zeros(t, c)
        pair = em.new_zeros(max(t - 1, 0), c, c)
        for s in range(n):
            node = node.index_put((torch.full_like(seqs[:, s], s), seqs[:, s]), prob, accumulate=True)
        for s in range(n - 1):
            pair = pair.index_put((torch.full_like(seqs[:, s], s), seqs[:, s], seqs[:, s + 1]), prob,
                                  accumulate=True)
        y = tags[i, :n]
        gold = score[(seqs == y).all(1)][0] if n else score[0]
        top = score.sort(descending=True).values[:K]
        out["log_partition"].append(log_z)
        out["score"].append(gold)
        out["log_prob"].append(gold - log_z)
        out["marginals"].append(node)
        out["pair_marginals"].append(pair)
        out["entropy"].append(-(prob * logp).sum())
        out["max_score"].append(score.max())
        out["kbest"].append(top)
    kk = max(len(x) for x in out["kbest"])
    out["kbest"] = [torch.cat([x, x.new_full((kk - len(x),), float("-inf"))]) for x in out["kbest"]]
    res = {k: torch.stack(v) for k, v in out.items()}
    res["kbest"] = res["kbest"].t()
    return res


@pytest.mark.parametrize("scale", [1.0, 1e3])
@pytest.mark.parametrize("config", ["ragged", "with_empty"])
def test_values_and_gradients_equal_brute_force_enumeration(scale, config) -> None:
    t, c, ln = CONFIGS[config]
    p = potentials(t, c, len(ln), seed=4, scale=scale)
    lengths, tags = torch.tensor(ln), gold_tags(ln, t, c)
    atol = 1e-9 * scale
    for name in RESULTS:
        leaves = [x.clone().requires_grad_() for x in p]
        ours = result(name, leaves, lengths, tags)
        ref_leaves = [x.clone().requires_grad_() for x in p]
        ref = brute(ref_leaves, ln, tags, t)[name]
        torch.testing.assert_close(ours, ref, rtol=1e-9, atol=atol, msg=prefixed(name))
        g = torch.autograd.grad(weighted(ours), leaves)
        g_ref = torch.autograd.grad(weighted(ref), ref_leaves, allow_unused=True)
        for i, (a, b) in enumerate(zip(g, g_ref)):
            b = torch.zeros_like(a) if b is None else b
            torch.testing.assert_close(a, b, rtol=1e-7, atol=1e-7,
                                       msg=prefixed(f"{name} d/d{NAMES[i]} at scale {scale}"))


@pytest.mark.parametrize("name", RESULTS)
def test_float32_values_and_gradients_agree_with_float64(name) -> None:
    t, c, ln = CONFIGS["ragged"]
    p64 = potentials(t, c, len(ln), seed=5)
    lengths, tags = torch.tensor(ln), gold_tags(ln, t, c)
    for combo in [(True, True, True, True), (False, True, False, False), (False, False, True, False)]:
        g64 = autograd(name, p64, combo, lengths, tags)
        g32 = autograd(name, [x.float() for x in p64], combo, lengths, tags)
        for i in g64:
            torch.testing.assert_close(g32[i].double(), g64[i], rtol=1e-4, atol=1e-5)
    v32 = result(name, [x.float() for x in p64], lengths, tags)
    assert v32.dtype == torch.float32
    torch.testing.assert_close(v32.double(), result(name, p64, lengths, tags), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("shape", [(0, 4, 3), (2, 0, 3)])
def test_empty_batch_and_zero_length_give_empty_results_with_zero_gradients(shape) -> None:
    b, t, c = shape
    em = torch.zeros(shape, requires_grad=True)
    tr = torch.zeros(c, c, requires_grad=True)
    crf = LinearChainCRF(em, tr, start=torch.zeros(c), end=torch.zeros(c))
    tags = torch.zeros(b, t, dtype=torch.long)
    assert crf.log_partition.shape == (b,) and (crf.log_partition == 0).all()
    assert (crf.log_prob(tags) == 0).all() and (crf.entropy == 0).all() and (crf.max_score == 0).all()
    assert crf.marginals.shape == (b, t, c) and crf.pair_marginals.shape == (b, max(t - 1, 0), c, c)
    assert crf.argmax.shape == (b, t) and crf.sample(3).shape == (3, b, t)
    k_tags, k_scores = crf.kbest(5)
    assert k_tags.shape == (min(b, 1), b, t) and (k_scores == 0).all()  # one (empty) path, or none
    total = crf.log_partition.sum() + crf.entropy.sum() + crf.marginals.sum() + k_scores.sum()
    g_em, g_tr = torch.autograd.grad(total, (em, tr))
    assert (g_em == 0).all() and (g_tr == 0).all()


def test_kbest_with_k_far_above_the_number_of_paths_returns_every_path_fast() -> None:
    em, tr, st, en = potentials(3, 2, 2, seed=6)
    crf = LinearChainCRF(em, tr, torch.tensor([3, 2]), start=st, end=en)
    t0 = time.perf_counter()
    tags, scores = crf.kbest(10**6)
    assert time.perf_counter() - t0 < 5.0
    assert tags.shape == (8, 2, 3) and scores.shape == (8, 2)  # 2^3 sequences for the longest
    assert torch.isfinite(scores[:, 0]).all() and torch.isfinite(scores[:4, 1]).all()
    assert torch.isneginf(scores[4:, 1]).all() and (tags[4:, 1] == -1).all()
    assert len({tuple(x) for x in tags[:, 0].tolist()}) == 8
    ref = brute(list(potentials(3, 2, 2, seed=6)), [3, 2], torch.zeros(2, 3, dtype=torch.long), 3)
    torch.testing.assert_close(scores[:K], ref["kbest"])


def test_kbest_bound_counts_only_allowed_sequences() -> None:
    allowed, allowed_start = bio_allowed_transitions(["O", "B-X", "I-X"])
    em, tr, _, _ = potentials(3, 3, 1, seed=7)
    crf = LinearChainCRF(em, tr, allowed=allowed, allowed_start=allowed_start)
    # Allowed: no I-X first, no O -> I-X. Count by enumeration.
    seqs = list(itertools.product(range(3), repeat=3))
    n = sum(s[0] != 2 and all(not (a == 0 and b == 2) for a, b in zip(s, s[1:])) for s in seqs)
    tags, scores = crf.kbest(10**9)
    assert tags.shape[0] == n == 13 and torch.isfinite(scores).all()
    none = LinearChainCRF(em, tr, allowed=torch.zeros(3, 3, dtype=torch.bool))
    with pytest.raises(ValueError, match=r"allowed: no tag sequence is allowed for batch elements \[0\]"):
        none.kbest(2)


def test_results_read_without_grad_are_recomputed_with_grad() -> None:
    em, tr, _, _ = potentials(4, 3, 2, seed=8)
    tr = tr.requires_grad_()
    crf = LinearChainCRF(em, tr)
    with torch.no_grad():
        h0 = crf.entropy
    assert not h0.requires_grad
    (g,) = torch.autograd.grad(crf.entropy.sum(), tr)  # not the cached detached value
    assert g.abs().max() > 1e-3


@pytest.mark.parametrize("scale", [1.0, 1e3])
def test_float32_values_equal_float64_brute_force_at_every_scale(scale) -> None:
    t, c, ln = CONFIGS["with_empty"]
    p = potentials(t, c, len(ln), seed=9, scale=scale)
    lengths, tags = torch.tensor(ln), gold_tags(ln, t, c)
    ref = brute(p, ln, tags, t)
    # Each result is (a difference of) sums of at most T * C float32 terms of size <= a few x
    # scale, so its absolute rounding error is a small multiple of u * T * C * scale (u = 2^-24);
    # 8 allows for the log-sum-exp and, for the entropy, the cancellation log Z - E[score].
    atol = 8 * 2.0**-24 * t * c * scale
    for name in RESULTS:
        ours = result(name, [x.float() for x in p], lengths, tags)
        assert ours.dtype == torch.float32
        torch.testing.assert_close(ours.double(), ref[name], rtol=1e-5, atol=atol,
                                   msg=prefixed(f"{name} at scale {scale}"))


def test_forward_function_gives_the_semiring_one_for_empty_sequences() -> None:
    from ebms.structured.linear_chain import linear_chain_forward
    from ebms.structured.semiring import KMaxSemiring, LogSemiring, MaxSemiring

    em, tr, st, en = potentials(4, 3, 3, seed=10)
    ln = torch.tensor([3, 0, 4])
    crf = LinearChainCRF(em, tr, ln, start=st, end=en)
    torch.testing.assert_close(linear_chain_forward(em, tr, ln, LogSemiring(), st, en)[0], crf.log_partition)
    torch.testing.assert_close(linear_chain_forward(em, tr, ln, MaxSemiring(), st, en)[0], crf.max_score)
    torch.testing.assert_close(linear_chain_forward(em, tr, ln, KMaxSemiring(3), st, en), crf.kbest(3)[1])
    assert linear_chain_forward(em[:0], tr, None, KMaxSemiring(2)).shape == (2, 0)
