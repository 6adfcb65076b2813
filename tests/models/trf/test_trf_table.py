"""Feature-key tables of the discrete TRF: ProbeTable and BucketTable against a brute-force reference
(searchsorted on the sorted keys), engineered collisions, determinism, devices, memory, errors, and
DiscreteFeatures scoring unchanged when the table is swapped."""

from __future__ import annotations

import pytest
import torch

from ebms.models.trf import DiscreteFeatures, feature_templates
from ebms.models.trf._table import BucketTable, ProbeTable, _bucket, _multipliers, _num_buckets
from ebms.sequences import Sequences

TOP = (1 << 62) - 1
TABLES = [ProbeTable, BucketTable]


def reference(keys: torch.Tensor, query: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Index in the sorted ``keys`` (0 where absent) and presence, by binary search."""
    if keys.numel() == 0:
        return torch.zeros_like(query), torch.zeros(query.shape, dtype=torch.bool, device=query.device)
    pos = torch.searchsorted(keys, query.reshape(-1)).clamp(max=keys.numel() - 1).view(query.shape)
    found = keys[pos] == query
    return torch.where(found, pos, 0), found


def random_keys(n: int, seed: int, high: int = 1 << 62) -> torch.Tensor:
    return torch.unique(torch.randint(0, high, (n,), generator=torch.Generator().manual_seed(seed)))


def queries(keys: torch.Tensor, seed: int) -> torch.Tensor:
    """Present keys (repeated), random absent ones, neighbours of present ones, and the extremes."""
    g = torch.Generator().manual_seed(seed)
    parts = [torch.tensor([0, 1, TOP, TOP - 1, -1, -(1 << 63), (1 << 63) - 1, 1 << 62])]
    if keys.numel():
        present = keys[torch.randint(0, keys.numel(), (3 * keys.numel(),), generator=g)]
        parts += [present, present + 1, present - 1]
    parts.append(torch.randint(0, 1 << 62, (500,), generator=g))
    return torch.cat(parts)


def assert_matches(table: torch.nn.Module, keys: torch.Tensor, query: torch.Tensor) -> None:
    idx, found = table(query)
    want_idx, want_found = reference(keys, query)
    assert idx.dtype == torch.long and found.dtype == torch.bool and idx.shape == query.shape == found.shape
    assert torch.equal(found, want_found) and torch.equal(idx, want_idx)


@pytest.mark.parametrize("table_cls", TABLES)
@pytest.mark.parametrize(("n", "high"), [(1, 1 << 62), (2, 1 << 62), (37, 1 << 62), (3000, 1 << 62),
                                         (20000, 1 << 62), (5000, 6000), (100, 100)])
def test_table_matches_binary_search(table_cls, n, high):
    keys = random_keys(n, seed=n, high=high)  # high=6000: dense small keys; high=100: 0..99 nearly all
    if n <= 2:
        keys = torch.tensor([0, TOP][:n])  # the extreme keys themselves
    assert_matches(table_cls(keys), keys, queries(keys, seed=n + 1))


@pytest.mark.parametrize("table_cls", TABLES)
def test_table_of_no_keys_finds_nothing_and_any_query_shape_is_kept(table_cls):
    empty = torch.zeros(0, dtype=torch.long)
    assert_matches(table_cls(empty), empty, queries(empty, seed=0))
    keys = random_keys(500, seed=3)
    table = table_cls(keys)
    assert_matches(table, keys, torch.zeros(0, dtype=torch.long))
    assert_matches(table, keys, torch.zeros(3, 0, 2, dtype=torch.long))
    assert_matches(table, keys, queries(keys, seed=4)[:1000].view(10, 4, 25))
    assert_matches(table, keys, keys[7])  # a 0-dim query


def engineered(n_keys: int, together: int, both: bool) -> torch.Tensor:
    """``n_keys`` keys, ``together`` of which share bucket 0 as first choice (and as second if ``both``)
    under BucketTable's first attempt."""
    n = _num_buckets(n_keys, 4, 0.5, 0)
    mul = _multipliers(0)
    cand = random_keys(400_000, seed=11)
    hit = _bucket(cand, mul[0], n) == 0
    if both:
        hit &= _bucket(cand, mul[1], n) == 0
    chosen = cand[hit][:together]
    assert chosen.numel() == together
    rest = cand[~hit][: n_keys - together]
    return torch.sort(torch.cat([chosen, rest])).values


def test_keys_colliding_in_both_hashes_force_a_rebuild_and_are_all_found():
    keys = engineered(40, together=12, both=True)  # 12 keys for one bucket of 4 slots: attempt 0 must fail
    table = BucketTable(keys)
    assert table.seed >= 1
    assert_matches(table, keys, queries(keys, seed=5))


def test_keys_crowding_one_first_bucket_are_moved_to_their_second_and_found():
    keys = engineered(400, together=30, both=False)
    table = BucketTable(keys)
    assert table.seed == 0
    flagged = table.rows[:, table.width:].view(torch.int32)[:, 0] < 0
    assert bool(flagged[0])  # bucket 0 overflowed: its queries take the second probe
    assert_matches(table, keys, queries(keys, seed=6))


def test_bucket_table_construction_is_deterministic():
    keys = random_keys(50_000, seed=8)
    a, b = BucketTable(keys), BucketTable(keys)
    assert torch.equal(a.rows, b.rows) and a.seed == b.seed and a.n_buckets == b.n_buckets


@pytest.mark.parametrize("n", [8, 100, 1000, 65_537, 100_000])
def test_bucket_table_needs_no_more_memory_than_the_probe_table(n):
    keys = random_keys(n, seed=n)
    assert BucketTable(keys).nbytes <= ProbeTable(keys).nbytes


@pytest.mark.parametrize("table_cls", TABLES)
def test_table_moves_with_to_device_and_has_no_state(table_cls, device):
    keys = random_keys(2000, seed=9)
    table = table_cls(keys).to(device)
    assert table.state_dict() == {}
    assert all(buf.device.type == device.type for buf in table.buffers())
    query = queries(keys, seed=10).to(device)
    idx, found = table(query)
    assert idx.device.type == device.type and found.device.type == device.type
    assert_matches(table, keys.to(device), query)
    assert_matches(table_cls(keys.to(device)), keys.to(device), query)  # built from keys on the device


def test_tables_report_bad_keys_and_options():
    with pytest.raises(TypeError, match="keys: expected a torch.Tensor; got list"):
        BucketTable([1, 2])
    with pytest.raises(ValueError, match=r"keys: expected a 1-D int64 tensor; got torch.int32 \(3,\)"):
        ProbeTable(torch.tensor([1, 2, 3], dtype=torch.int32))
    for bad in ([2, 1], [1, 1], [-1, 2], [0, 1 << 62]):
        with pytest.raises(ValueError, match=r"keys: expected sorted distinct keys in \[0, 2\^62\)"):
            BucketTable(torch.tensor(bad))
    with pytest.raises(ValueError, match="width: expected an even int >= 2; got 3"):
        BucketTable(torch.tensor([1]), width=3)
    with pytest.raises(ValueError, match=r"load: expected a number in \(0, 1\); got 1.0"):
        BucketTable(torch.tensor([1]), load=1.0)
    with pytest.raises(TypeError, match="keys: expected an int64 tensor; got torch.float32"):
        BucketTable(torch.tensor([1]))(torch.tensor([1.0]))


def small_features(eos: bool) -> tuple[Sequences, DiscreteFeatures]:
    g = torch.Generator().manual_seed(0)
    corpus = Sequences(torch.randint(1, 12, (60, 10), generator=g), torch.randint(1, 11, (60,), generator=g))
    classes = torch.tensor([0, 0, 1, 2, 0, 1, 2, 3, 3, 1, 0, 2])
    groups = ("w", "c", "ws", "cs", "wsh", "csh", "cpw", "tied")
    feats = DiscreteFeatures.fit(corpus, 12, feature_templates(groups, 3), classes=classes, eos=eos)
    with torch.no_grad():
        feats.weight.copy_(torch.randn(feats.num_features, generator=g))
    return corpus, feats


@pytest.mark.parametrize("eos", [False, True])
def test_discrete_features_score_the_same_with_either_table(eos):
    corpus, feats = small_features(eos)
    assert isinstance(feats.table, BucketTable)
    g = torch.Generator().manual_seed(2)
    x = Sequences(torch.randint(1, 12, (30, 10), generator=g), torch.randint(1, 11, (30,), generator=g))
    pos = (torch.rand(30, generator=g) * x.lengths).long()
    cand = torch.randint(-1, 12, (30, 6), generator=g)
    new = [feats(corpus), feats(x), feats.feature_ids(x), feats.token_logits(x, pos, cand), feats.counts(x)]
    feats.table = ProbeTable(feats.keys)
    old = [feats(corpus), feats(x), feats.feature_ids(x), feats.token_logits(x, pos, cand), feats.counts(x)]
    for a, b in zip(new, old):
        assert torch.equal(a, b)


def test_discrete_features_state_dict_is_unchanged_and_loading_rebuilds_the_table():
    corpus, feats = small_features(eos=False)
    state = feats.state_dict()
    assert set(state) == {"weight", "class_ids", "keys", "observed_counts", "template_base"}
    other = DiscreteFeatures(feats.templates, feats.keys.clone(), 12, classes=torch.tensor(
        [0, 0, 1, 2, 0, 1, 2, 3, 3, 1, 0, 2]))
    other.keys.zero_()  # a stale table: loading must rebuild it from the loaded keys
    other.table = BucketTable(torch.zeros(0, dtype=torch.long))
    other.load_state_dict(state)
    assert isinstance(other.table, BucketTable) and other.table.size == feats.num_features
    assert torch.equal(other(corpus), feats(corpus))
