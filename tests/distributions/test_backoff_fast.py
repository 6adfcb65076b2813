"""BackoffNGram's fast scoring: cuckoo-table lookups and the packed scorer against the binary search
and the per-window scorer they replace (bit-identical results)."""

from __future__ import annotations

import pytest
import torch

from ebms.distributions import BackoffNGram, _backoff_hash, _backoff_tables
from ebms.sequences import Sequences


def _plain_token_log_probs(lm: BackoffNGram, x: Sequences) -> torch.Tensor:
    """The scorer as it was: every window searched with ``_tables.find``, dense per order."""
    n, (B, T), V = lm.order, x.tokens.shape, lm.vocab_size
    lead = n - 1
    y = torch.cat([x.tokens.masked_fill(~x.mask(), 0), x.tokens.new_zeros(B, 1)], 1)
    z = torch.cat([y.new_full((B, max(n - 2, 0)), -1), y.new_zeros(B, min(lead, 1)), y], 1)
    cols = torch.arange(lead + T + 1)
    inside = cols < (x.lengths + lead + 1).unsqueeze(1)
    flat = z[inside]
    at = (cols >= lead).expand(B, -1)[inside].nonzero().squeeze(1)
    rows = [flat]
    for m in range(2, n + 1):
        prev, nxt = rows[-1][:-1], flat[m - 1 :]
        live = (prev >= 0) & (nxt >= 0)
        row = torch.full_like(prev, -1)
        row[live] = _backoff_tables.find(lm._table("keys", m), prev[live] * V + nxt[live])
        rows.append(row)
    tail = [torch.zeros(at.numel(), dtype=lm.log_probs_1.dtype)]
    for j in range(n - 1, 0, -1):
        tail.insert(0, tail[0] + lm._gather(j, "backoffs", rows[j - 1][at - j], 0.0))
    out = lm.log_probs_1[flat[at]] + tail[0]
    for m in range(2, n + 1):
        e = rows[m - 1][at - m + 1]
        out = torch.where(e >= 0, lm._gather(m, "log_probs", e, 0.0) + tail[m - 1], out)
    keep = torch.arange(T + 1) <= x.lengths.unsqueeze(1)
    return torch.zeros(B, T + 1, dtype=out.dtype).masked_scatter_(keep, out)


def _corpus(n: int, V: int, seed: int, max_len: int = 12) -> list[list[int]]:
    g = torch.Generator().manual_seed(seed)
    lengths = torch.randint(0, max_len + 1, (n,), generator=g).tolist()
    # a skewed law, so that long n-grams repeat and higher orders hold many rows
    law = torch.arange(1, V, dtype=torch.float64).reciprocal()
    return [(torch.multinomial(law, L, replacement=True, generator=g) + 1).tolist() if L else [] for L in lengths]


@pytest.mark.parametrize("n_keys", [1, 2, 3, 17, 1000, 50_000])
def test_cuckoo_lookup_finds_every_key_and_only_the_keys(n_keys):
    g = torch.Generator().manual_seed(n_keys)
    keys = torch.unique(torch.randint(0, 10 * n_keys + 5, (n_keys,), generator=g))
    table = _backoff_hash.build(keys)
    assert table is not None and table.slots.numel() >= 2 * keys.numel()
    queries = torch.cat([keys, torch.randint(-5, 12 * n_keys + 10, (3 * n_keys + 10,), generator=g),
                         torch.tensor([-1, 0, 2**62, -(2**62)])])
    found, row = _backoff_hash.lookup(keys, table, queries)
    want = _backoff_tables.find(keys, queries)
    assert torch.equal(found, want >= 0)
    assert torch.equal(row[found], want[found])
    assert bool(found[: keys.numel()].all())


def test_cuckoo_lookup_of_an_empty_table_or_no_queries():
    assert _backoff_hash.build(torch.zeros(0, dtype=torch.long)) is None
    found, _ = _backoff_hash.lookup(torch.zeros(0, dtype=torch.long), None, torch.tensor([0, 5, -1]))
    assert not bool(found.any())
    keys = torch.tensor([3, 9])
    found, row = _backoff_hash.lookup(keys, _backoff_hash.build(keys), torch.zeros(0, dtype=torch.long))
    assert found.shape == row.shape == (0,)


def _sharing(n_keys, both, bits):
    """``n_keys`` sorted keys whose first slot (and second, when ``both``) under the first multipliers is 0."""
    a, b = _backoff_hash._MULTIPLIERS[0]
    probe = _backoff_hash.CuckooTable(bits, a, b, torch.empty(0))
    pool = torch.arange(1, 200_000)
    h1, h2 = probe.home(pool)
    keep = (h1 == 0) & (h2 == 0) if both else h1 == 0
    return pool[keep][:n_keys]


def test_keys_sharing_their_first_slot_all_settle():
    keys = _sharing(40, both=False, bits=7)  # 40 keys: 2**7 slots, all claiming slot 0 first
    assert keys.numel() == 40
    table = _backoff_hash.build(keys)
    assert table is not None
    found, row = _backoff_hash.lookup(keys, table, keys)
    assert bool(found.all()) and torch.equal(row, torch.arange(keys.numel()))


def test_three_keys_sharing_both_slots_make_the_build_try_other_multipliers():
    keys = _sharing(3, both=True, bits=3)  # 3 keys: 2**3 slots, and only 2 slots between them
    assert keys.numel() == 3
    table = _backoff_hash.build(keys)
    assert table is not None and table.a != _backoff_hash._MULTIPLIERS[0][0]
    found, row = _backoff_hash.lookup(keys, table, torch.cat([keys, keys + 1]))
    assert torch.equal(found, torch.tensor([True] * 3 + [False] * 3)) and torch.equal(row[:3], torch.arange(3))


@pytest.mark.parametrize("order", [1, 2, 3, 4, 6])
@pytest.mark.parametrize("smoothing", ["modified_kneser_ney", "witten_bell", "add_k"])
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_token_log_probs_equal_the_plain_scorer_bit_for_bit(order, smoothing, dtype):
    V = 9
    train = Sequences.from_lists(_corpus(300, V, seed=order))
    kw = {"discounts": [[0.5, 0.9, 1.2]] * order} if smoothing == "modified_kneser_ney" else {}
    lm = BackoffNGram.fit(train, V, order, smoothing=smoothing, **kw).to(dtype)
    test = _corpus(60, V, seed=100 + order, max_len=15) + [[], [1], [V - 1], []]
    tokens = Sequences.from_lists(test)
    tokens.tokens[tokens.tokens == 0] = 5  # padding holds any id
    got = lm.token_log_probs(tokens)
    want = _plain_token_log_probs(lm, tokens)
    assert got.dtype == dtype
    assert torch.equal(got, want)


@pytest.mark.parametrize("lengths", [[0], [1], [0, 0, 0], [1, 0, 2]])
def test_short_sentences_equal_the_plain_scorer(lengths):
    lm = BackoffNGram.fit(Sequences.from_lists(_corpus(80, 6, seed=3)), 6, 4, discounts=[0.6, 0.7, 0.8, 0.9])
    batch = Sequences.from_lists([[2 + (i % 3) for i in range(L)] for L in lengths])
    assert torch.equal(lm.token_log_probs(batch), _plain_token_log_probs(lm, batch))


def test_empty_batch_scores_to_an_empty_table():
    lm = BackoffNGram.fit(Sequences.from_lists(_corpus(40, 6, seed=4)), 6, 3, discounts=[0.5, 0.6, 0.7])
    empty = Sequences(torch.zeros(0, 4, dtype=torch.long), torch.zeros(0, dtype=torch.long))
    out = lm.token_log_probs(empty)
    assert out.shape == (0, 5) and out.dtype == torch.float64
    assert lm.log_prob(empty).shape == (0,)


def test_a_model_without_higher_ngrams_scores_unigrams():
    lm = BackoffNGram.uniform(7, 4)
    batch = Sequences.from_lists([[1, 2, 3], []])
    assert torch.equal(lm.token_log_probs(batch), _plain_token_log_probs(lm, batch))


def test_the_lookup_tables_follow_new_tables_after_load_state_dict():
    V = 8
    a = BackoffNGram.fit(Sequences.from_lists(_corpus(200, V, seed=5)), V, 3, discounts=[0.5, 0.7, 0.9])
    b = BackoffNGram.fit(Sequences.from_lists(_corpus(200, V, seed=6)), V, 3, discounts=[0.5, 0.7, 0.9])
    batch = Sequences.from_lists(_corpus(30, V, seed=7))
    a.token_log_probs(batch)  # builds a's lookup tables
    a.load_state_dict(b.state_dict())
    assert torch.equal(a.token_log_probs(batch), b.token_log_probs(batch))
    a.keys_3.copy_(b.keys_3)  # an in-place write is seen too (the fingerprint holds each buffer's version)
    assert torch.equal(a.token_log_probs(batch), _plain_token_log_probs(a, batch))


def test_bad_tokens_are_refused_with_the_check_vocabulary_message():
    lm = BackoffNGram.fit(Sequences.from_lists(_corpus(40, 6, seed=8)), 6, 3, discounts=[0.5, 0.6, 0.7])
    with pytest.raises(ValueError, match=r"x: expected token ids in \[1, 5\].*sequence 1 has 0 at position 1"):
        lm.token_log_probs(Sequences.from_lists([[2, 3], [4, 0, 2]]))
    with pytest.raises(ValueError, match=r"x: .*sequence 0 has 6 at position 0"):
        lm.token_log_probs(Sequences.from_lists([[6]]))
