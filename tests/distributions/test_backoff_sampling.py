"""BackoffNGram.sample without V-wide rows: the law the sampler's tables imply equals the model's
row for every history (enumeration), draws match the exact sentence probabilities (chi-square),
the exact fallbacks keep the law, the inverse CDF is exact at rounding ties, the tables follow the
model, edge cases.

Statistical checks use a fixed generator and Pearson's statistic against its chi-square quantile
``1 - 1e-4`` (z = 3.7 one-sided): each fails a correct sampler with probability 1e-4 at its seed.
"""

from __future__ import annotations

import itertools
import math

import pytest
import scipy.stats
import torch

from ebms.distributions import _backoff_sampling as bs
from ebms.distributions.backoff import BackoffNGram
from ebms.sequences import Sequences

V = 6  # ids 1..5 are words; id 1 (<unk>) never occurs in the corpus
CORPUS = [[2, 3], [2, 2, 3], [3], [2, 4, 3], [], [4, 4, 2, 3, 2], [3, 3, 3, 2], [5, 2, 3], [4, 5], [2, 4, 4, 3],
          [3, 5, 5], [2]]
DISCOUNTS = {"modified_kneser_ney": [(0.5, 0.75, 1.0), (0.6, 0.9, 1.2), (0.7, 1.0, 1.5)],
             "kneser_ney": [0.5, 0.6, 0.7]}


def fitted(order: int, smoothing: str, **kw) -> BackoffNGram:
    if smoothing in DISCOUNTS:
        kw["discounts"] = DISCOUNTS[smoothing][:order]
    if smoothing == "add_k":
        kw["k"] = 0.5
    return BackoffNGram.fit(Sequences.from_lists(CORPUS), V, order, smoothing=smoothing, **kw)


def unnormalised() -> BackoffNGram:
    """Order 2, rows off 1 (a file with few digits): the sampler draws the normalised rows, as the old one."""
    lm = fitted(2, "modified_kneser_ney")
    ids, lp, bow = zip(*(lm.ngrams(m) for m in (1, 2)))
    lp = [lp[0] + 0.01, lp[1] - 0.05 * (ids[1][:, 1] % 3)]
    return BackoffNGram(V, list(ids), lp, list(bow), tolerance=None)


def all_listed() -> BackoffNGram:
    """Order 2, V = 3: after id 1 every outcome is listed (no backoff branch); after id 2 only ``</s>``."""
    grams = [torch.arange(3).unsqueeze(1), torch.tensor([[0, 1], [0, 2], [1, 0], [1, 1], [1, 2], [2, 0]])]
    uni = torch.tensor([0.3, 0.3, 0.4]).log()
    big = torch.tensor([0.4, 0.4, 0.2, 0.3, 0.5, 0.6]).log()
    bows = [torch.tensor([math.log(0.2 / 0.3), 0.0, math.log(0.4 / 0.7)]), torch.zeros(6)]
    return BackoffNGram(3, grams, [uni, big], bows)


MODELS = {f"{s}-{n}": (lambda s=s, n=n: fitted(n, s)) for s in ("modified_kneser_ney", "kneser_ney",
                                                                "witten_bell", "add_k") for n in (1, 2, 3)}
MODELS["pruned-3"] = lambda: fitted(3, "modified_kneser_ney", prune=[0, 1])
MODELS["unnormalised-2"] = unnormalised
MODELS["all-listed-2"] = all_listed


def prefixes(vocab: int, longest: int) -> list[list[int]]:
    return [list(p) for n in range(longest + 1) for p in itertools.product(range(1, vocab), repeat=n)]


def histories(lm: BackoffNGram, pre: list[list[int]]) -> torch.Tensor:
    """The sampler's history ``(B, n-1)`` after each prefix: its last ``n - 1`` symbols of ``-1.. <s> y``."""
    top = lm.order - 1
    return torch.tensor([([-1] * top + [0] + p)[len(p) + 1 :] if top else [] for p in pre],
                        dtype=torch.long).reshape(len(pre), top)


def implied_law(lm: BackoffNGram, hist: torch.Tensor) -> torch.Tensor:
    """``(B, V)`` law of the two-stage procedure, read from the sampler's tables alone: level by level,
    ``pi(c) * listed(c) + (1 - pi(c)) * (lower law off S(c), renormalised)``."""
    tabs, Vm = lm._sampler_tables(), lm.vocab_size
    ctx = bs._contexts(lm, hist)

    def segment(seg: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        law = torch.zeros(seg.numel(), Vm, dtype=torch.float64)
        member = torch.zeros(seg.numel(), Vm, dtype=torch.bool)
        for b, s in enumerate(seg.tolist()):
            a, c = int(tabs.start[s]), int(tabs.count[s])
            f = tabs.frac[a : a + c]
            law[b, tabs.word[a : a + c]] = torch.diff(f, prepend=f.new_zeros(1))
            member[b, tabs.word[a : a + c]] = True
        return law, member

    q, _ = segment(torch.zeros(hist.shape[0], dtype=torch.long))
    for j in range(1, hist.shape[1] + 1):
        valid = ctx[:, j - 1] >= 0
        seg = torch.where(valid, tabs.offsets[j] + ctx[:, j - 1], 0)
        listed, member = segment(seg)
        pi = tabs.listed[seg].unsqueeze(1)
        rest = q.masked_fill(member, 0.0)
        rest = rest / rest.sum(1, keepdim=True).clamp(min=1e-300)
        q = torch.where(valid.unsqueeze(1), pi * listed + (1 - pi) * rest, q)
    return q


@pytest.mark.parametrize("name", sorted(MODELS))
def test_the_tables_imply_the_model_row_after_every_history(name):
    lm = MODELS[name]()
    pre = prefixes(lm.vocab_size, lm.order - 1)
    want = torch.softmax(lm.next_log_probs(Sequences.from_lists(pre)), -1)
    torch.testing.assert_close(implied_law(lm, histories(lm, pre)), want, rtol=0, atol=1e-12)
    if name.startswith(("modified", "kneser", "witten", "add")):  # fitted: the rows are exp(log p(w | h))
        torch.testing.assert_close(want, lm.next_log_probs(Sequences.from_lists(pre)).exp(), rtol=0, atol=1e-12)


@pytest.mark.parametrize("name", sorted(MODELS))
def test_exact_law_of_every_restart_level_matches_the_tables(name):
    # a row restarting at level k: the tables' fresh law of level k, then each backoff loop above it
    lm = MODELS[name]()
    top, tabs = lm.order - 1, lm._sampler_tables()
    pre = prefixes(lm.vocab_size, top)
    hist = histories(lm, pre)
    ctx = bs._contexts(lm, hist)
    fresh = [implied_law(lm, torch.where(torch.arange(top) < top - k, -1, hist)) for k in range(top + 1)]
    for k in range(top + 1):
        want = fresh[k].clone()
        for i in range(k + 1, top + 1):
            at = ctx[:, i - 1] >= 0
            member = bs._listed_mask(tabs, tabs.offsets[i] + ctx[:, i - 1].clamp(min=0), lm.vocab_size)
            lower = fresh[i - 1].masked_fill(member, 0.0)
            moved = want.masked_fill(member, 0.0) + (want * member).sum(1, keepdim=True) * lower / lower.sum(
                1, keepdim=True).clamp(min=1e-300)
            want = torch.where(at.unsqueeze(1), moved, want)
        got = bs.exact_law(lm, tabs, hist, ctx, torch.full((hist.shape[0],), k))
        torch.testing.assert_close(got, want, rtol=0, atol=1e-12)


def chi_square(lm: BackoffNGram, draws: Sequences, longest: int = 3) -> tuple[float, float]:
    """Pearson's statistic of the draws' sentences (cells of expected count >= 5 among the sentences
    up to ``longest`` tokens, the rest pooled) and its 1 - 1e-4 quantile."""
    n = draws.batch_size
    cells = prefixes(lm.vocab_size, longest)
    p = _sentence_probs(lm, cells)
    keep = n * p >= 5
    index = {tuple(c): i for i, c in enumerate(cells)}
    counts = torch.zeros(len(cells), dtype=torch.float64)
    other = 0
    for s in draws.tolist():
        i = index.get(tuple(s))
        if i is None or not keep[i]:
            other += 1
        else:
            counts[i] += 1
    expected = torch.cat([n * p[keep], (n * (1 - p[keep].sum())).reshape(1)])
    observed = torch.cat([counts[keep], torch.tensor([float(other)], dtype=torch.float64)])
    assert float(expected.min()) >= 5  # the chi-square approximation holds
    stat = float(((observed - expected) ** 2 / expected).sum())
    return stat, float(scipy.stats.chi2.ppf(1 - 1e-4, df=expected.numel() - 1))


def _sentence_probs(lm: BackoffNGram, cells: list[list[int]]) -> torch.Tensor:
    """Exact probability of each sentence under the normalised rows (= ``log_prob`` for a normalised model)."""
    out = []
    for c in cells:
        pre = [c[:i] for i in range(len(c) + 1)]
        rows = torch.softmax(lm.next_log_probs(Sequences.from_lists(pre)), -1)
        out.append(float(rows[torch.arange(len(pre)), torch.tensor([*c, 0])].prod()))
    return torch.tensor(out, dtype=torch.float64)


@pytest.mark.parametrize("name", ["modified_kneser_ney-1", "modified_kneser_ney-2", "modified_kneser_ney-3",
                                  "kneser_ney-3", "witten_bell-2", "add_k-3", "pruned-3", "unnormalised-2"])
def test_draws_match_exact_sentence_probabilities(name):
    lm = MODELS[name]()
    draws = lm.sample(20_000, torch.Generator().manual_seed(0))
    assert bool((draws.tokens[draws.mask()] >= 1).all())
    stat, limit = chi_square(lm, draws)
    assert stat < limit, (stat, limit)


def test_normalised_rows_give_log_prob_itself():
    lm = fitted(3, "modified_kneser_ney")
    cells = prefixes(V, 2)
    torch.testing.assert_close(_sentence_probs(lm, cells), lm.log_prob(Sequences.from_lists(cells)).exp(),
                               rtol=1e-12, atol=0)


@pytest.mark.parametrize("order", [2, 3])
def test_rows_rejected_past_the_cap_are_finished_on_their_exact_law(monkeypatch, order):
    # MAX_TRIES = 1: every row rejected once is drawn by exact_law from its restart level
    lm = fitted(order, "modified_kneser_ney")
    calls = []
    real = bs._exact_draw

    def counted(model, tabs, hist, ctx, level, generator):
        calls.append(int((level < hist.shape[1]).sum()))
        return real(model, tabs, hist, ctx, level, generator)

    monkeypatch.setattr(bs, "MAX_TRIES", 1)
    monkeypatch.setattr(bs, "_exact_draw", counted)
    draws = lm.sample(20_000, torch.Generator().manual_seed(1))
    assert sum(calls) > 500  # the fallback carried a real share of the tokens
    stat, limit = chi_square(lm, draws)
    assert stat < limit, (stat, limit)


def test_contexts_flagged_slow_are_drawn_on_the_model_row(monkeypatch):
    monkeypatch.setattr(bs, "MAX_EXPECTED_TRIES", 0.0)  # every context with a backoff branch is flagged
    lm = fitted(2, "witten_bell")
    tabs = lm._sampler_tables()
    assert tabs.any_exact and bool(tabs.exact[1:].all())
    draws = lm.sample(20_000, torch.Generator().manual_seed(2))
    stat, limit = chi_square(lm, draws)
    assert stat < limit, (stat, limit)


def test_rejection_is_rare_at_this_size_and_the_exact_path_unused():
    lm = fitted(2, "modified_kneser_ney")
    assert not lm._sampler_tables().any_exact


# --- the inverse CDF ------------------------------------------------------------------------------


def brute_force(tabs: bs.SamplerTables, seg: torch.Tensor, u: torch.Tensor) -> torch.Tensor:
    out = []
    for s, v in zip(seg.tolist(), u.tolist()):
        a, c = int(tabs.start[s]), int(tabs.count[s])
        k = next(a + i for i in range(c) if float(tabs.frac[a + i]) > v)
        out.append(int(tabs.word[k]))
    return torch.tensor(out)


def synthetic() -> bs.SamplerTables:
    """1,100 segments: 1,095 of one entry, then five with zero-probability entries and shares down to
    1e-16, whose keys ``segment + frac`` (segment ids near 1,100: a resolution of 2e-13) collide."""
    counts = torch.tensor([1] * 1095 + [7, 1, 12, 5, 9])
    segs = torch.arange(counts.numel()).repeat_interleave(counts)
    probs = torch.ones(segs.numel(), dtype=torch.float64)
    tail = torch.rand(34, generator=torch.Generator().manual_seed(5), dtype=torch.float64) ** 8
    tail[::4] = 0.0
    tail[[1, 10, 11, 21]] = torch.tensor([1e-16, 3e-16, 1e-15, 2e-14], dtype=torch.float64)
    probs[1095:] = tail
    start = torch.cumsum(counts, 0) - counts
    local = bs.segment_cumsum(probs, start, counts)
    frac = local / local[start + counts - 1][segs]
    frac[start + counts - 1] = 1.0
    index = torch.arange(segs.numel())
    last = torch.full((counts.numel(),), -1).scatter_reduce(0, segs[probs > 0], index[probs > 0], "amax")
    n = counts.numel()
    return bs.SamplerTables((0,), segs.double() + frac, frac, index, start, counts, last,
                            torch.ones(n, dtype=torch.float64), torch.zeros(n, dtype=torch.bool), False, ())


def test_segment_draw_is_the_exact_inverse_cdf_even_at_rounding_ties():
    tabs = synthetic()
    seg = torch.arange(1095, 1100).repeat_interleave(tabs.count[1095:])
    at_steps = tabs.frac[tabs.start[1095] - 1 : -1].clone()  # u exactly at each step: segment + u equals a key
    at_steps[tabs.start[1095:] - tabs.start[1095]] = 0.0
    g = torch.Generator().manual_seed(6)
    near = at_steps + torch.tensor([-1e-16, 1e-16], dtype=torch.float64).repeat(at_steps.numel() // 2 + 1)[
        : at_steps.numel()]
    u = torch.cat([at_steps, near.clamp(0, 1 - 2**-53), torch.rand(300, generator=g, dtype=torch.float64)])
    seg = torch.cat([seg, seg, torch.randint(1090, 1100, (300,), generator=g)])
    seg, u = seg[u < 1], u[u < 1]  # draws are in [0, 1) (a step at 1: zero-probability entries at a segment's end)
    got = bs.segment_draw(tabs, seg, u)
    assert got.tolist() == brute_force(tabs, seg, u).tolist()


def test_zero_probability_words_are_never_drawn():
    lm = all_listed()
    with torch.no_grad():
        lm.log_probs_2[3] = -math.inf  # "1 1" impossible; the row after 1 renormalises over </s> and 2
    draws = lm.sample(5_000, torch.Generator().manual_seed(3))
    pairs = {(a, b) for s in draws.tolist() for a, b in zip(s, s[1:])}
    assert (1, 1) not in pairs


# --- tables follow the model ------------------------------------------------------------------------


def test_tables_are_cached_and_rebuilt_when_a_buffer_changes():
    lm = fitted(3, "modified_kneser_ney")
    first = lm._sampler_tables()
    lm.sample(3, torch.Generator().manual_seed(0))
    assert lm._sampler_tables() is first
    other = BackoffNGram.fit(Sequences.from_lists(CORPUS), V, 3, discounts=[(0.3, 0.6, 0.9), (0.4, 0.7, 1.0),
                                                                          (0.45, 0.8, 1.2)])
    lm.load_state_dict(other.state_dict())  # same n-grams, other values: copied in place
    assert lm._sampler_tables() is not first
    pre = prefixes(V, 2)
    torch.testing.assert_close(implied_law(lm, histories(lm, pre)),
                               torch.softmax(other.next_log_probs(Sequences.from_lists(pre)), -1), rtol=0, atol=1e-12)
    again = lm._sampler_tables()
    with torch.no_grad():
        lm.backoffs_1.add_(0.1)  # an in-place edit bumps the buffer's version
    assert lm._sampler_tables() is not again
    lm.float()
    assert lm._sampler_tables().key.dtype == torch.float64 and lm.sample(4).batch_size == 4


# --- edge cases -----------------------------------------------------------------------------------


def test_a_certain_end_gives_empty_sentences_and_max_length_zero_refuses_longer_ones():
    ends = BackoffNGram(3, [torch.arange(3).unsqueeze(1)], [torch.tensor([0.0, -math.inf, -math.inf])])
    y = ends.sample(4, torch.Generator().manual_seed(0), max_length=0)
    assert y.tokens.shape == (4, 0) and y.lengths.tolist() == [0] * 4
    one = BackoffNGram(3, [torch.arange(3).unsqueeze(1), torch.tensor([[0, 2], [2, 0]])],
                       [torch.tensor([0.5, 0.25, 0.25]).log(), torch.zeros(2)],
                       [torch.tensor([-math.inf, 0.0, -math.inf]), torch.zeros(2)])
    y = one.sample(6, torch.Generator().manual_seed(0))
    assert y.tolist() == [[2]] * 6
    with pytest.raises(ValueError, match=r"max_length: 6 of 6 draws had not ended after 0 tokens; raise max_length"):
        one.sample(6, torch.Generator().manual_seed(0), max_length=0)


def test_the_count_of_unfinished_draws_is_reported():
    # after <s>: </s> or 2 with probability 1/2 each; after 2 always 2: half the draws never end
    grams = [torch.arange(3).unsqueeze(1), torch.tensor([[0, 0], [0, 2], [2, 2]])]
    lm = BackoffNGram(3, grams, [torch.tensor([0.5, 0.25, 0.25]).log(), torch.tensor([0.5, 0.5, 1.0]).log()],
                      [torch.tensor([-math.inf, 0.0, -math.inf]), torch.zeros(3)])
    with pytest.raises(ValueError, match=r"max_length: (\d+) of 400 draws had not ended after 5 tokens") as err:
        lm.sample(400, torch.Generator().manual_seed(4), max_length=5)
    k = int(str(err.value).split(":")[1].split()[0])
    assert abs(k - 200) <= 4 * math.sqrt(400 * 0.25)  # z = 4


def test_generator_decides_the_draws_and_n_is_checked():
    lm = fitted(3, "witten_bell")
    a = lm.sample(64, torch.Generator().manual_seed(9))
    assert a.equal(lm.sample(64, torch.Generator().manual_seed(9)))
    assert not a.equal(lm.sample(64, torch.Generator().manual_seed(10)))
    with pytest.raises(ValueError, match=r"n: expected an int >= 1; got 0"):
        lm.sample(0)
    with pytest.raises(ValueError, match=r"max_length: expected an int >= 0; got -1"):
        lm.sample(2, max_length=-1)
