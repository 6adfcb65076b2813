"""The context index of DiscreteFeatures: ``token_logits`` through it equals, bit for bit, the reference's
per-candidate lookups (``_token_logits_by_lookup``) on random corpora, every template group, both
boundary settings, both weight dtypes, light and heavy contexts, edge positions and shapes, and after
loading a state dict; the index lists exactly the observed features by context."""

from __future__ import annotations

import pytest
import torch
from torch import Tensor

from ebms.models.trf import TRF, DiscreteFeatures, feature_templates
from ebms.models.trf._context import ContextIndex
from ebms.models.trf.templates import DEFAULT_GROUPS
from ebms.sequences import Sequences

V, N_CLASSES = 14, 4
GROUPS = (*DEFAULT_GROUPS, "tied")


def corpus(seed: int, n: int = 80, max_len: int = 12) -> Sequences:
    g = torch.Generator().manual_seed(seed)
    lengths = torch.randint(1, max_len + 1, (n,), generator=g).tolist()
    return Sequences.from_lists([torch.randint(1, V, (k,), generator=g).tolist() for k in lengths])


def model(groups: tuple[str, ...], *, bos: bool, eos: bool, dtype: torch.dtype, seed: int = 0,
          boundaries: str = "all") -> DiscreteFeatures:
    g = torch.Generator().manual_seed(100 + seed)
    classes = torch.randint(0, N_CLASSES, (V,), generator=g)
    feats = DiscreteFeatures.fit(corpus(seed), V, feature_templates(groups, 4), classes=classes, bos=bos, eos=eos,
                                 boundaries=boundaries)
    feats = feats.to(dtype)
    with torch.no_grad():
        feats.weight.copy_(torch.randn(feats.num_features, generator=g, dtype=torch.float64).to(dtype))
    return feats


def queries(seed: int, B: int, K: int, T: int) -> tuple[Sequences, Tensor, Tensor]:
    g = torch.Generator().manual_seed(200 + seed)
    x = corpus(300 + seed, n=B, max_len=T)
    pos = torch.randint(0, x.max_length + 1, (B,), generator=g)  # up to one beyond the longest sentence
    pos[0] = 0
    if B > 1:
        pos[1] = x.lengths[1] - 1  # the last token
    if B > 2:
        pos[2] = x.lengths[2]  # just beyond the sentence's end
    cand = torch.randint(-1, V, (B, K), generator=g)  # -1: absent; 0 (the boundary id) included
    if K > 2:
        cand[:, -1] = cand[:, 0]  # a repeated candidate
    return x, pos, cand


def assert_same(feats: DiscreteFeatures, x: Sequences, pos: Tensor, cand: Tensor) -> Tensor:
    new = feats.token_logits(x, pos, cand)
    ref = feats._token_logits_by_lookup(x, pos, cand)
    assert new.dtype == ref.dtype == feats.weight.dtype and new.shape == cand.shape
    assert torch.equal(new, ref)
    assert bool((new[cand < 0] == 0).all())
    return new


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
@pytest.mark.parametrize("bos,eos,boundaries", [(True, False, "all"), (True, True, "all"), (False, True, "all"),
                                                (False, False, "all"), (True, True, "source")])
def test_context_path_equals_per_candidate_lookups_for_every_group(bos, eos, boundaries, dtype):
    feats = model(GROUPS, bos=bos, eos=eos, dtype=dtype, boundaries=boundaries)
    assert feats.context is not None
    for seed, (B, K) in enumerate([(20, 9), (1, 5), (7, 1), (1, 1)]):
        x, pos, cand = queries(seed, B, K, T=12)
        assert_same(feats, x, pos, cand)


@pytest.mark.parametrize("group", GROUPS)
def test_context_path_equals_lookups_for_each_group_alone_with_light_and_heavy_contexts(group):
    feats = model((group,), bos=True, eos=True, dtype=torch.float64, seed=1)
    x, pos, cand = queries(5, 25, 8, T=12)
    first = assert_same(feats, x, pos, cand)
    for ratio in (0.0, 1e9):  # every context scored by lookups, then every context by its list
        feats.context.ratio = ratio
        assert torch.equal(assert_same(feats, x, pos, cand), first)


def with_direct_rows(feats: DiscreteFeatures, budget: int) -> None:
    """Rebuild ``feats``'s context index with direct rows for every list (as long as ``budget`` lasts)."""
    radix = {"w": feats.vocab_size, "c": feats._n_class_ids}
    feats.context = ContextIndex(feats.keys, feats.template_base, [t.layers for t in feats.templates], feats._strides,
                                 [len(t.offsets) for t in feats.templates], radix, dense_bytes=budget, dense_min=1)


@pytest.mark.parametrize("group", GROUPS)
@pytest.mark.parametrize("budget", [1 << 30, 4 * V * 3, 0])  # every list, the three longest, none
def test_heavy_contexts_read_from_direct_rows_equal_the_lookups(group, budget):
    feats = model((group,), bos=True, eos=True, dtype=torch.float64, seed=1)
    x, pos, cand = queries(5, 25, 8, T=12)
    first = assert_same(feats, x, pos, cand)
    with_direct_rows(feats, budget)
    ci = feats.context
    have = ci.dense_start >= 0
    assert ci.dense.numel() * 4 <= budget and int(have.sum()) == {0: 0, 1 << 30: ci.n_contexts}.get(budget, int(have.sum()))
    lengths = ci.offsets[1:] - ci.offsets[:-1]
    if bool(have.any()) and not bool(have.all()):  # the rows went to the longest lists
        assert int(lengths[have].min()) >= int(lengths[~have].max())
    for ratio in (0.0, 2.0):  # every context heavy (direct rows where built), then the default split
        feats.context.ratio = ratio
        assert torch.equal(assert_same(feats, x, pos, cand), first)


def test_direct_rows_map_each_value_to_its_feature_and_the_rest_to_minus_one():
    feats = model(GROUPS, bos=True, eos=True, dtype=torch.float64, seed=3)
    with_direct_rows(feats, 1 << 30)
    ci = feats.context
    assert bool((ci.dense_start >= 0).all())  # dense_min 1 and room for all: every context has a row
    for c in torch.randint(0, ci.n_contexts, (40,), generator=torch.Generator().manual_seed(0)).tolist():
        lo, hi = int(ci.offsets[c]), int(ci.offsets[c + 1])
        start, values = int(ci.dense_start[c]), ci.values[lo:hi].long()
        row = ci.dense[start: start + int(values.max()) + 1]  # up to the largest listed value
        expect = torch.full_like(row, -1)
        expect[values] = ci.feature[lo:hi]
        assert torch.equal(row, expect)


def test_context_path_is_exact_on_word_only_templates_and_all_absent_candidates():
    words = tuple(t for t in feature_templates(("w", "ws", "wsh", "tied"), 4) if not t.uses_classes)
    feats = DiscreteFeatures.fit(corpus(7), V, words, eos=True)
    with torch.no_grad():
        feats.weight.normal_(generator=torch.Generator().manual_seed(1))
    x, pos, cand = queries(8, 12, 6, T=12)
    assert_same(feats, x, pos, cand)
    none = torch.full((12, 3), -1)
    assert torch.equal(feats.token_logits(x, pos, none), torch.zeros(12, 3))


def test_context_path_gradient_equals_the_reference_gradient_to_rounding():
    feats = model(GROUPS, bos=True, eos=True, dtype=torch.float64, seed=2)
    x, pos, cand = queries(9, 10, 6, T=12)
    w = torch.randn(cand.shape, generator=torch.Generator().manual_seed(3), dtype=torch.float64)
    (g_new,) = torch.autograd.grad((feats.token_logits(x, pos, cand) * w).sum(), feats.weight)
    (g_ref,) = torch.autograd.grad((feats._token_logits_by_lookup(x, pos, cand) * w).sum(), feats.weight)
    # the same terms accumulated into each feature in another order: equal to rounding (1e-12 relative)
    torch.testing.assert_close(g_new, g_ref, rtol=1e-12, atol=1e-12)


def test_index_lists_every_observed_feature_once_per_slot_by_its_context():
    feats = model(("w", "cs", "cpw", "tied"), bos=True, eos=False, dtype=torch.float64, seed=3)
    ctx = feats.context
    slots = sum(len(t.layers) for t, n in zip(feats.templates, feats.template_sizes()) for _ in range(n))
    assert ctx.values.numel() == ctx.feature.numel() == slots == int(ctx.offsets[-1])
    # every feature appears once per slot of its template, and its key is its context plus value * stride
    assert torch.equal(torch.bincount(ctx.feature.long(), minlength=feats.num_features),
                       torch.tensor([len(feats.templates[t].layers) for t in
                                     (torch.searchsorted(feats.template_base, feats.keys, right=True) - 1).tolist()]))
    assert ctx.nbytes > 0


def test_loading_a_state_dict_rebuilds_the_context_index():
    feats = model(GROUPS, bos=True, eos=True, dtype=torch.float64, seed=4)
    stale = model(GROUPS, bos=True, eos=True, dtype=torch.float64, seed=5)
    other = model(GROUPS, bos=True, eos=True, dtype=torch.float64, seed=4)  # same keys and classes
    other.context = stale.context  # an index of other keys: loading must rebuild it from the loaded keys
    other.keys.zero_()
    with torch.no_grad():
        other.weight.zero_()
    assert set(other.state_dict()) == {"weight", "class_ids", "keys", "observed_counts", "template_base"}
    other.load_state_dict(feats.state_dict())
    assert other.context is not stale.context and other.context.values.numel() == feats.context.values.numel()
    x, pos, cand = queries(10, 15, 7, T=12)
    assert torch.equal(assert_same(other, x, pos, cand), feats.token_logits(x, pos, cand))


def test_loading_the_same_keys_and_classes_keeps_the_table_and_the_index():
    # a resume: building them again would hold two of each at once (hundreds of MB at PTB scale)
    feats = model(GROUPS, bos=True, eos=True, dtype=torch.float64, seed=4)
    other = model(GROUPS, bos=True, eos=True, dtype=torch.float64, seed=4)
    table, context = other.table, other.context
    with torch.no_grad():
        other.weight.zero_()
    other.load_state_dict(feats.state_dict())
    assert other.table is table and other.context is context and torch.equal(other.weight, feats.weight)
    x, pos, cand = queries(10, 15, 7, T=12)
    assert torch.equal(assert_same(other, x, pos, cand), feats.token_logits(x, pos, cand))
    classes = feats.state_dict()
    classes["class_ids"] = classes["class_ids"].flip(0)  # other classes, same keys: rebuilt
    other.load_state_dict(classes)
    assert other.table is not table and other.context is not context


@pytest.mark.parametrize("context", [True, False], ids=["context", "lookups"])
def test_flat_scores_equal_the_padded_scores_entry_by_entry(context):
    feats = model(GROUPS, bos=True, eos=True, dtype=torch.float32, seed=6, boundaries="source")
    feats._context_logits = context
    x, pos, cand = queries(10, 15, 7, T=12)
    padded = feats.token_logits(x, pos, cand)
    row, k = (cand >= 0).nonzero(as_tuple=True)
    assert torch.equal(feats.token_logits_flat(x, pos, row, cand[row, k]), padded[row, k])
    empty = torch.zeros(0, dtype=torch.long)
    assert feats.token_logits_flat(x, pos, empty, empty).shape == (0,)
    trf = TRF(feats, torch.ones(x.max_length + 2), V)  # the TRF adds -inf at the boundary id 0
    row, k = (cand >= 0).nonzero(as_tuple=True)
    assert torch.equal(trf.token_logits_flat(x, pos, row, cand[row, k]), trf.token_logits(x, pos, cand)[row, k])
