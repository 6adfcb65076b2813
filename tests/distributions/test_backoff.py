"""BackoffNGram: hand-computed Kneser-Ney tables, a dictionary reference for every smoothing, order
1-5 and pruning, normalisation of every seen context, agreement with the dense NGram where the two
define the same model, sampling frequencies, errors.

The reference (:func:`reference`) is written from the textbook recursion over Python dicts, with no
tensor code shared with the module.
"""

from __future__ import annotations

import math
import random
import re as _re
from collections import Counter, defaultdict
from functools import cache

import pytest
import torch

from ebms.distributions import NGram
from ebms.distributions.backoff import BackoffNGram
from ebms.sequences import Sequences

SMALL = [[2, 3], [2, 2, 3], [3], [2, 4, 3], [], [4, 4, 2, 3, 2], [3, 3, 3, 2]]  # V = 5: <unk> = 1 unseen
KN_DISCOUNTS = {"modified_kneser_ney": [(0.5, 0.75, 1.0), (0.6, 0.9, 1.2), (0.7, 1.0, 1.5), (0.55, 1.1, 1.3),
                                        (0.8, 1.2, 1.6)],
                "kneser_ney": [0.5, 0.6, 0.7, 0.65, 0.8]}


def _fit(sents, V, order, smoothing, **kw):
    if smoothing in KN_DISCOUNTS and "discounts" not in kw:
        kw["discounts"] = KN_DISCOUNTS[smoothing][:order]
    return BackoffNGram.fit(Sequences.from_lists(sents), V, order, smoothing=smoothing, **kw)


def _prefixes(sents, extra=()):
    rows = {tuple(s[:i]) for s in sents for i in range(len(s) + 1)} | {tuple(e) for e in extra}
    return sorted(rows)


# --- the reference: textbook recursion over dicts ---------------------------------------------


def reference(sents, V, n, smoothing, discounts=None, k=1.0, prune=None):
    """``prob(w, h)`` by the definitions (h: tuple of the last <= n-1 symbols, <s> = 0 first)."""
    raw = [Counter() for _ in range(n)]
    for s in sents:
        z = [0, *s, 0]
        for m in range(1, n + 1):
            for end in range(1, len(z)):
                if end - m + 1 >= 0:
                    raw[m - 1][tuple(z[end - m + 1 : end + 1])] += 1
    kn = "kneser_ney" in smoothing
    counts = [dict(c) for c in raw]
    if kn:
        for m in range(1, n):
            cont = Counter(g[1:] for g in raw[m])
            counts[m - 1] = {g: (c if m > 1 and g[0] == 0 else cont[g]) for g, c in raw[m - 1].items()}
        if discounts is None:
            discounts = []
            for m in range(1, n + 1):
                t = [sum(1 for a in counts[m - 1].values() if a == j) for j in range(1, 5)]
                y = t[0] / (t[0] + 2 * t[1])
                discounts.append([j - (j + 1) * y * t[j] / t[j - 1] for j in (1, 2, 3)]
                                 if smoothing == "modified_kneser_ney" else [y] * 3)
        discounts = [[float(d)] * 3 if isinstance(d, (int, float)) else list(d) for d in discounts]
    thresholds = (list(prune) + [prune[-1]] * n)[:n] if prune else [0] * n
    by_context = [defaultdict(dict) for _ in range(n)]
    for m in range(1, n + 1):
        for g, a in counts[m - 1].items():
            by_context[m - 1][g[:-1]][g[-1]] = (a, raw[m - 1][g], m == 1 or raw[m - 1][g] > thresholds[m - 1])

    @cache
    def prob(w, h):
        lower = prob(w, h[1:]) if h else 1.0 / V
        if smoothing == "add_k":
            return add_k(w, h, lower)
        succ = by_context[len(h)].get(h, {})
        if not succ:
            return lower
        if kn:
            d = [0.0, *discounts[len(h)]]
            total = sum(a for a, _, _ in succ.values())
            alpha = {x: (a - d[min(a, 3)]) / total for x, (a, _, keep) in succ.items() if keep}
        else:
            total = sum(a for a, _, _ in succ.values()) + len(succ)
            alpha = {x: a / total for x, (a, _, keep) in succ.items() if keep}
        return alpha.get(w, 0.0) + (1.0 - sum(alpha.values())) * lower

    def add_k(w, h, lower):
        succ = by_context[len(h)].get(h, {})
        total = sum(r for _, r, _ in succ.values()) + k * V
        if not h:
            return (raw[0].get((w,), 0) + k) / total
        kept = {x: (r + k) / total for x, (_, r, keep) in succ.items() if keep}
        if w in kept:
            return kept[w]
        if not kept:
            return lower
        return (1 - sum(kept.values())) / (1 - sum(prob(x, h[1:]) for x in kept)) * lower

    return prob, discounts


def _history(prefix, n):
    return tuple([0, *prefix][-(n - 1):]) if n > 1 else ()


# --- hand-computed Kneser-Ney -----------------------------------------------------------------

HAND = [[2, 3], [2, 2, 3], [3]]  # a = 2, b = 3; V = 4 (</s>, <unk>, a, b)


def test_modified_kneser_ney_bigram_matches_hand_computation():
    # Unigram continuation counts: a {<s>, a} = 2, b {a, <s>} = 2, </s> {b} = 1, <unk> 0; S = 5.
    # D = (0.5, 0.75, 1.0): alpha(a) = alpha(b) = 1.25 / 5, alpha(</s>) = 0.5 / 5, gamma = (0.5 + 2 * 0.75) / 5.
    uni = [0.1 + 0.4 / 4, 0.4 / 4, 0.25 + 0.4 / 4, 0.25 + 0.4 / 4]  # </s>, <unk>, a, b
    # Bigram raw counts, D = (0.6, 0.9, 1.2): context <s>: a 2, b 1 -> alpha 1.1/3, 0.4/3, gamma 1.5/3;
    # context a: b 2, a 1 (the same numbers); context b: </s> 3 -> alpha 1.8/3, gamma 1.2/3.
    after_start = [0.5 * uni[0], 0.5 * uni[1], 1.1 / 3 + 0.5 * uni[2], 0.4 / 3 + 0.5 * uni[3]]
    after_a = [0.5 * uni[0], 0.5 * uni[1], 0.4 / 3 + 0.5 * uni[2], 1.1 / 3 + 0.5 * uni[3]]
    after_b = [0.6 + 0.4 * uni[0], 0.4 * uni[1], 0.4 * uni[2], 0.4 * uni[3]]
    lm = _fit(HAND, 4, 2, "modified_kneser_ney", discounts=[(0.5, 0.75, 1.0), (0.6, 0.9, 1.2)])
    got = lm.next_log_probs(Sequences.from_lists([[], [2], [3], [3, 2]])).exp()
    want = torch.tensor([after_start, after_a, after_b, after_a], dtype=torch.float64)
    torch.testing.assert_close(got, want, rtol=0, atol=1e-15)
    assert lm.log_prob(Sequences.from_lists([[2, 3]])).item() == pytest.approx(
        math.log(after_start[2] * after_a[3] * after_b[0]), abs=1e-14)


def test_modified_kneser_ney_trigram_matches_hand_computation():
    # Trigram raw counts: <s> a b 1, <s> a a 1, a a b 1, a b </s> 2, <s> b </s> 1.
    # Bigram adjusted counts: <s> a 2 and <s> b 1 (raw: they start with <s>); a b {<s>, a} = 2,
    # b </s> {a, <s>} = 2, a a {<s>} = 1. Unigrams as in the bigram test.
    uni = [0.2, 0.1, 0.35, 0.35]
    d2, d3 = (0.6, 0.9, 1.2), (0.7, 1.0, 1.5)
    p2_a = [0.5 * uni[0], 0.5 * uni[1], 0.4 / 3 + 0.5 * uni[2], 1.1 / 3 + 0.5 * uni[3]]  # after a: b 2, a 1
    p2_b = [(2 - 0.9) / 2 + 0.45 * uni[0], 0.45 * uni[1], 0.45 * uni[2], 0.45 * uni[3]]  # after b: </s> 2
    p2_s = [0.5 * uni[0], 0.5 * uni[1], 1.1 / 3 + 0.5 * uni[2], 0.4 / 3 + 0.5 * uni[3]]  # after <s>
    # context <s> a: b 1, a 1 -> alpha 0.3/2 each, gamma 1.4/2; a b: </s> 2 -> alpha 1/2, gamma 1/2;
    # a a: b 1 -> alpha 0.3, gamma 0.7; <s> b: </s> 1 -> alpha 0.3, gamma 0.7.
    p3_sa = [0.7 * x for x in p2_a]
    p3_sa[2] += 0.15
    p3_sa[3] += 0.15
    p3_ab_end = 0.5 + 0.5 * p2_b[0]
    p3_aa_b = 0.3 + 0.7 * p2_a[3]
    lm = _fit(HAND, 4, 3, "modified_kneser_ney", discounts=[(0.5, 0.75, 1.0), d2, d3])
    torch.testing.assert_close(lm.next_log_probs(Sequences.from_lists([[2]])).exp()[0],
                               torch.tensor(p3_sa, dtype=torch.float64), rtol=0, atol=1e-15)
    got = lm.log_prob(Sequences.from_lists([[2, 3], [2, 2, 3], [3, 2]]))
    want = [p2_s[2] * p3_sa[3] * p3_ab_end,
            p2_s[2] * p3_sa[2] * p3_aa_b * p3_ab_end,
            p2_s[3] * (0.7 * p2_b[2]) * p2_a[0]]  # <s> b a: backs off from <s> b (weight 0.7); b a unseen
    torch.testing.assert_close(got, torch.tensor(want, dtype=torch.float64).log(), rtol=0, atol=1e-14)
    assert lm.num_ngrams == (4, 5, 5)


def test_estimated_discounts_follow_chen_goodman_formula():
    # Zipfian words (p ~ 1 / rank^2, V = 60) give n-grams of adjusted count 1, 2, 3 at every order.
    sents = _zipf_corpus(300, seed=3)
    for smoothing in ("modified_kneser_ney", "kneser_ney"):
        prob, discounts = reference(sents, 60, 4, smoothing)
        lm = BackoffNGram.fit(Sequences.from_lists(sents), 60, 4, smoothing=smoothing)
        assert lm.discounts is not None and len(lm.discounts) == 4
        torch.testing.assert_close(torch.tensor(lm.discounts), torch.tensor(discounts), rtol=0, atol=1e-12)
        if smoothing == "kneser_ney":
            assert all(d[0] == d[1] == d[2] for d in lm.discounts)
        _assert_matches_reference(lm, prob, sents[:60], 60, 4)


def _zipf_corpus(n, seed, V=60):
    rng = random.Random(seed)
    return [rng.choices(range(V), [0] + [1 / i**2 for i in range(1, V)], k=rng.randrange(0, 9)) for _ in range(n)]


def _random_corpus(n, seed, V=7):
    rng = random.Random(seed)
    weights = [0, 1, 8, 5, 3, 2, 1][:V]
    return [rng.choices(range(V), weights, k=rng.randrange(0, 9)) for _ in range(n)]


def _assert_matches_reference(lm, prob, sents, V, n):
    prefixes = _prefixes(sents, [(1, 1, 1), (V - 1, V - 2, 1, V - 1)])  # plus unseen contexts
    got = lm.next_log_probs(Sequences.from_lists(prefixes)).exp()
    want = torch.tensor([[prob(w, _history(p, n)) for w in range(V)] for p in prefixes], dtype=torch.float64)
    torch.testing.assert_close(got, want, rtol=1e-12, atol=1e-15)


# --- every smoothing, every order, pruning -----------------------------------------------------


@pytest.mark.parametrize("order", [1, 2, 3, 4, 5])
@pytest.mark.parametrize("smoothing", ["modified_kneser_ney", "kneser_ney", "witten_bell", "add_k"])
@pytest.mark.parametrize("prune", [None, (0, 1)], ids=["full", "pruned"])
def test_every_seen_context_sums_to_one_and_matches_reference(order, smoothing, prune):
    if prune and order == 1:
        prune = (0,)
    kw: dict = {"k": 0.5} if smoothing == "add_k" else {}
    if smoothing in KN_DISCOUNTS:
        kw["discounts"] = KN_DISCOUNTS[smoothing][:order]
    lm = BackoffNGram.fit(Sequences.from_lists(SMALL), 5, order, smoothing=smoothing, prune=prune, **kw)
    prefixes = _prefixes(SMALL, [(1, 1), (4, 4, 4, 4, 4)])  # plus unseen contexts
    total = lm.next_log_probs(Sequences.from_lists(prefixes)).logsumexp(-1)
    torch.testing.assert_close(total, torch.zeros_like(total), rtol=0, atol=1e-13)
    prob, _ = reference(SMALL, 5, order, smoothing, discounts=kw.get("discounts"), k=kw.get("k", 1.0), prune=prune)
    _assert_matches_reference(lm, prob, SMALL, 5, order)


def test_pruning_drops_rare_ngrams_and_keeps_their_mass_in_the_backoff():
    sents = _zipf_corpus(300, seed=3)
    full = BackoffNGram.fit(Sequences.from_lists(sents), 60, 3)
    pruned = BackoffNGram.fit(Sequences.from_lists(sents), 60, 3, prune=[0, 1, 2])
    assert pruned.num_ngrams[0] == full.num_ngrams[0] and all(
        p < f for p, f in zip(pruned.num_ngrams[1:], full.num_ngrams[1:]))
    assert pruned.discounts == full.discounts  # discounts come from the unpruned counts
    raw = Counter(tuple([0, *s, 0][i : i + 3]) for s in sents for i in range(len(s) + 0))
    ids, _, _ = pruned.ngrams(3)
    assert all(raw[tuple(g)] > 2 for g in ids.tolist())
    prefixes = _prefixes(sents)
    total = pruned.next_log_probs(Sequences.from_lists(prefixes)).logsumexp(-1)
    torch.testing.assert_close(total, torch.zeros_like(total), rtol=0, atol=1e-13)


# --- scoring ------------------------------------------------------------------------------------


@pytest.mark.parametrize("order", [1, 2, 3, 5])
def test_token_log_probs_follow_the_chain_rule_and_ignore_padding(order, device):
    lm = _fit(SMALL, 5, order, "modified_kneser_ney").to(device)
    sents = [[2, 3, 3, 1], [], [4], [1, 1, 1, 1, 1, 2]]
    tokens = torch.full((4, 7), 3)  # padding: any id, even out of range
    tokens[:, 6] = 99
    for i, s in enumerate(sents):
        tokens[i, : len(s)] = torch.tensor(s, dtype=torch.long)
    batch = Sequences(tokens.to(device), torch.tensor([len(s) for s in sents], device=device))
    tl = lm.token_log_probs(batch)
    assert tl.shape == (4, 8) and tl.dtype == torch.float64 and tl.device == batch.device
    for i, s in enumerate(sents):
        rows = lm.next_log_probs(Sequences.from_lists([s[:t] for t in range(len(s) + 1)], device=device))
        want = rows[torch.arange(len(s) + 1), torch.tensor([*s, 0])]
        torch.testing.assert_close(tl[i, : len(s) + 1], want, rtol=0, atol=1e-14)
        assert bool((tl[i, len(s) + 1 :] == 0).all())
    torch.testing.assert_close(lm.log_prob(batch), tl.sum(-1))


def test_empty_sentence_scores_the_end_after_the_start():
    lm = _fit(SMALL, 5, 3, "witten_bell")
    empty = Sequences.from_lists([[]])
    assert lm.log_prob(empty).item() == pytest.approx(lm.next_log_probs(empty)[0, 0].item(), abs=0)


# --- the dense NGram --------------------------------------------------------------------------


@pytest.mark.parametrize("order", [1, 2, 3, 4])
def test_witten_bell_equals_dense_ngram_where_histories_hold_one_start(order):
    # The dense table keeps <s> <s> as a history of its own (n >= 3); every other history agrees.
    sents = _random_corpus(60, seed=1, V=5)
    dense = NGram.fit(sents, 5, order, smoothing="witten_bell")
    sparse = BackoffNGram.fit(Sequences.from_lists(sents), 5, order, smoothing="witten_bell")
    test = Sequences.from_lists(_random_corpus(30, seed=2, V=5) + sents[:10])
    a, b = _dense_token_log_probs(dense, test), sparse.token_log_probs(test)
    t = torch.arange(test.max_length + 1)
    same = (t >= order - 2) & (t <= test.lengths.unsqueeze(1))
    torch.testing.assert_close(a[same], b[same], rtol=0, atol=1e-12)
    if order >= 3:  # the first token's history is <s> <s> in the dense model: it differs there
        assert not torch.allclose(a[:, 0], b[:, 0])


def _dense_token_log_probs(dense, seqs):
    out = torch.zeros(seqs.batch_size, seqs.max_length + 1, dtype=torch.float64)
    for i, s in enumerate(seqs.tolist()):
        hist = [0] * (dense.order - 1)
        for t, w in enumerate([*s, 0]):
            out[i, t] = dense.table[(*hist[len(hist) - dense.order + 1 :], w)] if dense.order > 1 else dense.table[w]
            hist.append(w)
    return out


@pytest.mark.parametrize("order", [1, 2, 3])
def test_add_k_equals_dense_ngram_on_unigrams_and_on_seen_ngrams(order):
    # The dense add-k never backs off (an unseen n-gram gets k / (c(h) + kV)); the backoff model
    # gives it the lower order's share, so only seen n-grams (and order 1) coincide.
    sents = _random_corpus(40, seed=4, V=5)
    dense = NGram.fit(sents, 5, order, smoothing="add_k", k=0.5)
    sparse = BackoffNGram.fit(Sequences.from_lists(sents), 5, order, smoothing="add_k", k=0.5)
    ids, lp, _ = sparse.ngrams(order)
    torch.testing.assert_close(lp, dense.table[tuple(ids.T)], rtol=0, atol=1e-13)
    if order == 1:
        torch.testing.assert_close(sparse.next_log_probs(Sequences.from_lists([[2]]))[0], dense.table)


# --- sampling -----------------------------------------------------------------------------------


def test_sample_frequencies_match_sentence_probabilities():
    lm = _fit(HAND, 4, 2, "modified_kneser_ney", discounts=[(0.5, 0.75, 1.0), (0.6, 0.9, 1.2)])
    n = 4000
    draws = lm.sample(n, torch.Generator().manual_seed(0), max_length=200)
    assert draws.batch_size == n and bool((draws.tokens[draws.mask()] >= 1).all())
    freq = Counter(tuple(s) for s in draws.tolist())
    for sent in [(), (2,), (3,), (2, 3), (3, 3), (1,)]:
        p = lm.log_prob(Sequences.from_lists([list(sent)])).exp().item()
        se = math.sqrt(p * (1 - p) / n)
        assert abs(freq[sent] / n - p) <= 4 * se, sent  # z = 4: each check fails with prob ~6e-5


def test_sample_is_reproducible_and_refuses_draws_longer_than_max_length():
    lm = _fit(SMALL, 5, 3, "witten_bell")
    a = lm.sample(50, torch.Generator().manual_seed(1))
    b = lm.sample(50, torch.Generator().manual_seed(1))
    assert a.equal(b)
    never_ends = BackoffNGram(3, [torch.arange(3).unsqueeze(1)], [torch.tensor([-math.inf, 0.0, -math.inf])])
    with pytest.raises(ValueError, match=r"max_length: 5 of 5 draws had not ended after 3 tokens"):
        never_ends.sample(5, max_length=3)


# --- constructor, ngrams(), errors --------------------------------------------------------------


def test_constructor_rebuilds_a_fitted_model_from_its_ngrams():
    lm = _fit(SMALL, 5, 3, "modified_kneser_ney")
    parts = [lm.ngrams(m) for m in (1, 2, 3)]
    perm = [torch.randperm(p[0].shape[0], generator=torch.Generator().manual_seed(m)) for m, p in enumerate(parts)]
    again = BackoffNGram(5, [p[0][i] for p, i in zip(parts, perm)], [p[1][i] for p, i in zip(parts, perm)],
                         [p[2][i] for p, i in zip(parts, perm)])
    test = Sequences.from_lists(SMALL + [[1, 4, 1]])
    torch.testing.assert_close(again.log_prob(test), lm.log_prob(test), rtol=0, atol=0)
    assert "order=3" in repr(again) and set(again.state_dict()) >= {"keys_2", "log_probs_3", "backoffs_1"}


@pytest.mark.parametrize("kwargs, message", [
    ({"order": 0}, r"order: expected an int >= 1; got 0"),
    ({"smoothing": "good_turing"}, r"smoothing: expected one of 'modified_kneser_ney', .*; got 'good_turing'"),
    ({"k": 0.0}, r"k: expected a finite number > 0; got 0.0"),
    ({"smoothing": "witten_bell", "discounts": [0.5, 0.5]}, r"discounts: only Kneser-Ney smoothing takes discounts"),
    ({"discounts": [0.5]}, r"discounts: expected one entry per order \(2\)"),
    ({"discounts": [0.5, (0.5, 0.6)]}, r"discounts\[1\]: expected None, one number or three \(D1, D2, D3\+\)"),
    ({"smoothing": "kneser_ney", "discounts": [0.5, (0.5, 0.6, 0.7)]}, r"discounts\[1\]: expected None or one number for"),
    ({"discounts": [0.5, (0.5, 2.5, 1.0)]}, r"discounts\[1\]: D2 must be in \[0, 2\]"),
    ({"discounts": [0.5, -0.1]}, r"discounts\[1\]: expected a finite number >= 0; got -0.1"),
    ({"prune": [1, 1]}, r"prune: unigrams are never pruned, so prune\[0\] must be 0; got 1"),
    ({"prune": [0, 2, 1]}, r"prune: expected 1 to 2 count thresholds"),
    ({"order": 3, "prune": [0, 2, 1]}, r"prune: thresholds must be non-decreasing .*; got \[0, 2, 1\]"),
    ({"prune": [0, -1]}, r"prune\[1\]: expected an int >= 0; got -1"),
])
def test_fit_argument_errors_name_the_argument(kwargs, message):
    kw = {"order": 2, "discounts": [0.5, 0.5], **kwargs}
    order = kw.pop("order")
    with pytest.raises((ValueError, TypeError), match=message):
        BackoffNGram.fit(Sequences.from_lists(SMALL), 5, order, **kw)


def test_fit_refuses_boundary_and_out_of_range_tokens():
    with pytest.raises(ValueError, match=r"corpus: expected token ids in \[1, 4\] .* sequence 1 has 0 at position 1"):
        BackoffNGram.fit(Sequences.from_lists([[2], [3, 0]]), 5, 2, discounts=[0.5, 0.5])
    with pytest.raises(ValueError, match=r"corpus: expected token ids in \[1, 4\] .* has 5 at position 0"):
        BackoffNGram.fit([[5]], 5, 2, discounts=[0.5, 0.5])
    lm = _fit(SMALL, 5, 2, "witten_bell")
    with pytest.raises(ValueError, match=r"x: expected token ids in \[1, 4\]"):
        lm.log_prob(Sequences.from_lists([[7]]))
    with pytest.raises(TypeError, match=r"x: expected an ebms.sequences.Sequences .*; got Tensor"):
        lm.log_prob(torch.tensor([[1, 2]]))  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"order: expected at most the model's order 2; got 3"):
        lm.ngrams(3)


def test_tiny_corpus_asks_for_explicit_discounts_naming_the_order():
    with pytest.raises(ValueError, match=_re.escape(
            "discounts: cannot estimate the Kneser-Ney discounts of order 1 from the counts (order 1: counts-of-counts "
            "t1, t2, t3 = 1, 2, 0, the estimate needs t1, t2, t3 > 0)") + r".*" + _re.escape(
            "pass discounts= with values for those orders, e.g. discounts=[(0.5, 1.0, 1.5), None] (KenLM's fallback")):
        BackoffNGram.fit(Sequences.from_lists(HAND), 4, 2)


@pytest.mark.parametrize("order, failing, example", [
    (1, "order 1", "[(0.5, 1.0, 1.5)]"),
    (2, "orders 1, 2", "[(0.5, 1.0, 1.5), (0.5, 1.0, 1.5)]"),
    (3, "orders 1, 3", "[(0.5, 1.0, 1.5), None, (0.5, 1.0, 1.5)]"),
])
def test_frequent_ngrams_of_a_small_vocabulary_name_every_failing_order_and_the_fix_works(order, failing, example):
    # 3 words, every n-gram seen many times: no adjusted count of 1 at order 1 whatever the order (a lower
    # order cannot help); the message names the failing orders, and the suggested discounts fit a law.
    corpus = Sequences.from_lists([[2, 3, 4] * 20, [4, 3, 2] * 20, [3, 3, 2, 2, 4, 4] * 10] * 3)
    with pytest.raises(ValueError, match=_re.escape(f"of {failing} from the counts") + ".*" +
                       _re.escape(f"e.g. discounts={example}")):
        BackoffNGram.fit(corpus, 5, order)
    lm = BackoffNGram.fit(corpus, 5, order, discounts=eval(example))  # the suggestion, as written
    total = lm.next_log_probs(Sequences.from_lists([[], [2], [3, 4]])).exp().sum(-1)
    torch.testing.assert_close(total, torch.ones(3, dtype=torch.float64), rtol=0, atol=1e-12)


def test_explicit_unigram_discounts_with_estimated_bigram_discounts_match_hand_computation():
    # a = 2, b = 3, V = 4. Bigram raw counts: <s> a 4, a b 3, b </s> 4, <s> b 2, a </s> 2, a a 1, b a 1:
    # t1 = 2, t2 = 2, t3 = 1, t4 = 2, Y = 2 / (2 + 4) = 1/3: D1 = 1 - 2 Y t2/t1 = 1/3, D2 = 2 - 3 Y t3/t2 = 1.5,
    # D3+ = 3 - 4 Y t4/t3 = 1/3. Unigrams, D = (0.5, 0.75, 1.0) given: continuation counts a 3 {<s>, a, b},
    # b 2, </s> 2, <unk> 0 (sum 7): alpha a 2/7, b and </s> 1.25/7, gamma 2.5/7, so p = alpha + gamma / 4.
    corpus = [[2, 3]] * 3 + [[3], [2, 2], [3, 2]]
    lm = BackoffNGram.fit(Sequences.from_lists(corpus), 4, 2, discounts=[(0.5, 0.75, 1.0), None])
    assert lm.discounts is not None and lm.discounts[0] == [0.5, 0.75, 1.0]
    assert lm.discounts[1] == pytest.approx([1 / 3, 1.5, 1 / 3], abs=1e-15)
    uni = [7.5 / 28, 2.5 / 28, 10.5 / 28, 7.5 / 28]  # </s>, <unk>, a, b
    # after <s>: a 4, b 2 (total 6): alpha a (4 - 1/3)/6 = 11/18, b (2 - 1.5)/6 = 1/12, gamma (1/3 + 1.5)/6 = 11/36
    after_start = [11 / 36 * uni[0], 11 / 36 * uni[1], 11 / 18 + 11 / 36 * uni[2], 1 / 12 + 11 / 36 * uni[3]]
    # after a: b 3, a 1, </s> 2 (total 6): alpha 4/9, 1/9, 1/12; gamma (1/3 + 1/3 + 1.5)/6 = 13/36
    after_a = [1 / 12 + 13 / 36 * uni[0], 13 / 36 * uni[1], 1 / 9 + 13 / 36 * uni[2], 4 / 9 + 13 / 36 * uni[3]]
    # after b: </s> 4, a 1 (total 5): alpha 11/15, 2/15; gamma (1/3 + 1/3)/5 = 2/15
    after_b = [11 / 15 + 2 / 15 * uni[0], 2 / 15 * uni[1], 2 / 15 + 2 / 15 * uni[2], 2 / 15 * uni[3]]
    got = lm.next_log_probs(Sequences.from_lists([[], [2], [3]])).exp()
    torch.testing.assert_close(got, torch.tensor([after_start, after_a, after_b], dtype=torch.float64),
                               rtol=0, atol=1e-15)


@pytest.mark.parametrize("build, message", [
    (lambda: BackoffNGram(3, [torch.tensor([[0], [1]])], [torch.zeros(2)]),
     r"ngrams\[0\] row 0: expected every id 0..2 exactly once among the unigrams; id 2 appears 0 times"),
    (lambda: BackoffNGram(3, [torch.arange(3)[:, None], torch.tensor([[1, 2], [2, 1], [1, 2]])],
                          [torch.zeros(3), torch.zeros(3)]), r"ngrams\[1\] row 2: the 2-gram \[1, 2\] appears twice"),
    (lambda: BackoffNGram(3, [torch.arange(3)[:, None], torch.tensor([[1, 2]]), torch.tensor([[2, 1, 0]])],
                          [torch.zeros(3), torch.zeros(1), torch.zeros(1)]),
     r"ngrams\[2\] row 0: the 3-gram \[2, 1, 0\] has no entry for its context \[2, 1\]"),
    (lambda: BackoffNGram(3, [torch.arange(3)[:, None], torch.tensor([[1, 2]]), torch.tensor([[1, 0, 1]])],
                          [torch.zeros(3), torch.zeros(1), torch.zeros(1)]),
     r"ngrams\[2\] row 0: id 0 \(<s>/</s>\) inside the 3-gram \[1, 0, 1\]"),
    (lambda: BackoffNGram(3, [torch.arange(3)[:, None]], [torch.tensor([0.0, math.nan, 0.0])]),
     r"log_probs\[0\]: expected no NaN or \+inf entries"),
    (lambda: BackoffNGram(3, [torch.arange(3)[:, None]], [torch.zeros(2)]),
     r"log_probs\[0\]: expected a float tensor \(3,\); got torch.float32 \(2,\)"),
    (lambda: BackoffNGram(3, [torch.arange(3)[:, None].float()], [torch.zeros(3)]),
     r"ngrams\[0\]: expected an int64 tensor \(N, 1\); got torch.float32 \(3, 1\)"),
    (lambda: BackoffNGram(3, [torch.tensor([[0], [1], [3]])], [torch.zeros(3)]),
     r"ngrams\[0\]: expected ids in \[0, 2\]; got 0..3"),
    (lambda: BackoffNGram(3, [], []), r"ngrams, log_probs: expected one tensor per order"),
])
def test_constructor_errors_name_the_row(build, message):
    with pytest.raises(ValueError, match=message):
        build()


def test_tables_are_buffers_that_follow_dtype_conversion():
    lm = _fit(SMALL, 5, 3, "modified_kneser_ney")
    test = Sequences.from_lists(SMALL)
    low = lm.float()
    assert low.log_probs_1.dtype == torch.float32 and low.keys_2.dtype == torch.int64
    assert low.log_prob(test).dtype == torch.float32
    torch.testing.assert_close(low.log_prob(test).double(), _fit(SMALL, 5, 3, "modified_kneser_ney").log_prob(test),
                               rtol=1e-6, atol=1e-5)
