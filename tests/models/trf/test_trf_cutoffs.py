"""Per-template feature cutoffs of ``DiscreteFeatures.fit`` (the source's PTB cutoffs): the kept features
equal a brute-force count over every window of every template filtered by each template's minimum, the
merged chunk counts equal the former per-chunk re-unique, and ``source_cutoffs`` of the PTB groups."""

from __future__ import annotations

from collections import Counter

import pytest
import torch
from torch import Tensor

from ebms.models.trf import DiscreteFeatures, Template, feature_templates
from ebms.models.trf.templates import source_cutoffs
from ebms.sequences import Sequences

V, N_CLASSES = 6, 3
ALL = ("w", "c", "ws", "cs", "wsh", "csh", "cpw", "tied")


def corpus_and_classes() -> tuple[list[list[int]], Tensor]:
    g = torch.Generator().manual_seed(0)
    lengths = torch.randint(1, 13, (60,), generator=g).tolist()
    sents = [torch.randint(1, V, (n,), generator=g).tolist() for n in lengths]
    classes = torch.tensor([0, 0, 1, 2, 0, 1])  # entry 0 (the boundary) unused
    return sents, classes



def brute_force(sents: list[list[int]], templates: tuple[Template, ...], classes: Tensor, *, bos: bool,
                eos: bool, boundaries: str = "all") -> Counter[tuple[str, tuple[int, ...]]]:
    """Count every window: padded sentence ``<s> x </s>`` (word 0 at both ends, class -1); a window exists
    when every slot is inside (``<s>`` only with ``bos``, ``</s>`` only with ``eos`` and at the current
    slot), its current slot is a token or ``</s>``, and it holds a real token. With ``boundaries="source"``
    (the source's feature tables) only n-gram templates (one gap-free pattern) reach a boundary, and no
    window holds both."""
    out: Counter[tuple[str, tuple[int, ...]]] = Counter()
    for x in sents:
        T = len(x)
        y = [0, *x, 0]
        for t in templates:
            for offs in t.offsets:
                for cur in range(1, T + 2):
                    slots = [cur + o for o in offs]
                    if slots[0] < (0 if bos else 1) or (cur == T + 1 and not eos):
                        continue
                    if not any(1 <= s <= T for s in slots):
                        continue
                    at_bos, at_eos = slots[0] == 0, slots[-1] == T + 1
                    if boundaries == "source" and (at_bos or at_eos) and (
                            (at_bos and at_eos) or len(t.offsets) > 1 or any(b - a > 1 for a, b in zip(offs, offs[1:]))):
                        continue
                    vals = tuple(y[s] if layer == "w" else (int(classes[y[s]]) if 1 <= s <= T else -1)
                                 for s, layer in zip(slots, t.layers))
                    out[(str(t), vals)] += 1
    return out


def kept(feats: DiscreteFeatures) -> dict[tuple[str, tuple[int, ...]], int]:
    return {k: int(c) for k, c in zip(feats.decode(range(feats.num_features)), feats.observed_counts.tolist())}


@pytest.mark.parametrize("boundaries", ["all", "source"])
@pytest.mark.parametrize(("bos", "eos"), [(True, True), (True, False), (False, True)])
def test_kept_features_are_the_brute_force_counts_at_or_above_their_templates_cut(bos: bool, eos: bool,
                                                                                   boundaries: str) -> None:
    sents, classes = corpus_and_classes()
    templates = feature_templates(ALL, order=4)
    truth = brute_force(sents, templates, classes, bos=bos, eos=eos, boundaries=boundaries)
    g = torch.Generator().manual_seed(1)
    for cuts in (source_cutoffs(templates), tuple(torch.randint(0, 5, (len(templates),), generator=g).tolist())):
        feats = DiscreteFeatures.fit(Sequences.from_lists(sents), V, templates, classes=classes, bos=bos, eos=eos,
                                     boundaries=boundaries, min_count=list(cuts), chunk_size=7)
        cut = {str(t): c for t, c in zip(templates, cuts)}
        want = {k: c for k, c in truth.items() if c >= cut[k[0]]}
        assert kept(feats) == want
        assert 0 < feats.num_features < len(truth)  # some cut, some kept


def test_an_int_min_count_is_the_same_cut_for_every_template() -> None:
    sents, classes = corpus_and_classes()
    corpus, templates = Sequences.from_lists(sents), feature_templates(ALL, order=3)
    truth = brute_force(sents, templates, classes, bos=True, eos=True)
    for m in (0, 1, 3):
        a = DiscreteFeatures.fit(corpus, V, templates, classes=classes, eos=True, min_count=m)
        b = DiscreteFeatures.fit(corpus, V, templates, classes=classes, eos=True, min_count=[m] * len(templates))
        assert torch.equal(a.keys, b.keys) and torch.equal(a.observed_counts, b.observed_counts)
        assert kept(a) == {k: c for k, c in truth.items() if c >= m}
    every = DiscreteFeatures.fit(corpus, V, templates, classes=classes, eos=True)
    assert every.num_features == len(truth)  # the default keeps every observed feature


def reunique_reference(feats: DiscreteFeatures, corpus: Sequences, chunk_size: int) -> tuple[Tensor, Tensor]:
    """The former fit: the growing set of found keys re-uniqued with every chunk."""
    found, counts = torch.zeros(0, dtype=torch.long), torch.zeros(0, dtype=torch.float64)
    for start in range(0, corpus.batch_size, chunk_size):
        keys, valid = feats._window_keys(corpus[start: start + chunk_size])
        found, inverse = torch.unique(torch.cat([found, keys[valid]]), return_inverse=True)
        add = torch.cat([counts, torch.ones(int(valid.sum()), dtype=torch.float64)])
        counts = torch.zeros(found.numel(), dtype=torch.float64).index_add_(0, inverse, add)
    return found, counts


@pytest.mark.parametrize("merge_at", [1 << 20, 50])
@pytest.mark.parametrize("chunk_size", [1, 7, 10_000])
def test_merged_chunk_counts_equal_the_per_chunk_reunique(chunk_size: int, merge_at: int,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(DiscreteFeatures, "_merge_at", merge_at)  # 50: intermediate merges on the way
    sents, classes = corpus_and_classes()
    corpus, templates = Sequences.from_lists(sents), feature_templates(ALL, order=4)
    feats = DiscreteFeatures.fit(corpus, V, templates, classes=classes, eos=True, chunk_size=chunk_size)
    keys, counts = reunique_reference(feats, corpus, chunk_size)
    assert torch.equal(feats.keys, keys) and torch.equal(feats.observed_counts, counts)


def test_source_cutoffs_of_the_ptb_groups() -> None:
    templates = feature_templates(("w", "c", "ws", "cs", "wsh", "csh", "tied"), order=4)
    got = {str(t): c for t, c in zip(templates, source_cutoffs(templates))}
    assert got == {
        "w0": 1, "w-1 w0": 1, "w-2 w-1 w0": 1, "w-3 w-2 w-1 w0": 2,  # "0002"
        "c0": 1, "c-1 c0": 1, "c-2 c-1 c0": 1, "c-3 c-2 c-1 c0": 1,  # "0000"
        "w-2 w0": 2, "w-3 w-1 w0": 2, "w-3 w0": 2, "w-3 w-2 w0": 2,  # word skips "2"
        "c-2 c0": 1, "c-3 c-1 c0": 1, "c-3 c0": 1, "c-3 c-2 c0": 1,  # class skips "0"
        "w-4 w0": 2, "w-5 w0": 2, "c-4 c0": 1, "c-5 c0": 1,
        "w[-9:-6] w0": 2, "c[-9:-6] c0": 1,  # tied
    }
    assert len(got) == len(templates)
    assert source_cutoffs(feature_templates(("w", "cpw"), order=5)) == (1, 1, 1, 2, 2, 1, 1, 1, 1)


def test_bad_min_counts_are_refused_with_their_reason() -> None:
    sents, _ = corpus_and_classes()
    corpus, templates = Sequences.from_lists(sents), feature_templates(("w",), order=2)
    with pytest.raises(ValueError, match=r"min_count: expected an int or one per template \(2\); got 3 values"):
        DiscreteFeatures.fit(corpus, V, templates, min_count=[1, 1, 1])
    with pytest.raises(ValueError, match=r"min_count\[1\]: expected an int >= 0; got -1"):
        DiscreteFeatures.fit(corpus, V, templates, min_count=(1, -1))
    with pytest.raises(TypeError, match=r"min_count: expected an int; got 1.5"):
        DiscreteFeatures.fit(corpus, V, templates, min_count=1.5)
    with pytest.raises(TypeError, match=r"templates: expected a sequence of Template; got str"):
        source_cutoffs(["w0"])  # type: ignore[list-item]
