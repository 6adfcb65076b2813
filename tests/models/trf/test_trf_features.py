"""Feature templates and the discrete feature energy: Table 3.2 verbatim, hand-counted features for
every template group, energy = -λ·f, local scores = energy differences, padding, errors."""

from __future__ import annotations

import pytest
import torch

from ebms.models.trf import DiscreteFeatures, Template, feature_templates
from ebms.sequences import Sequences

SENT = [1, 2, 3, 1, 2]  # classes 1 -> 0, 2 -> 1, 3 -> 0: class sequence 0 1 0 0 1
LONG = [1, 2, 3, 1, 2, 3, 1, 2]
CLASSES = torch.tensor([0, 0, 1, 0, 0])  # entry 0 (the boundary) unused; V = 5


def observed(feats: DiscreteFeatures, sentence: list[int]) -> dict[tuple[str, tuple[int, ...]], int]:
    counts = feats.counts(Sequences.from_lists([sentence]))
    ids = counts.nonzero().squeeze(1)
    return {key: int(counts[i]) for key, i in zip(feats.decode(ids), ids.tolist())}


def test_order_four_templates_are_table_3_2():
    table = {
        "w": ["w0", "w-1 w0", "w-2 w-1 w0", "w-3 w-2 w-1 w0"],
        "c": ["c0", "c-1 c0", "c-2 c-1 c0", "c-3 c-2 c-1 c0"],
        "ws": ["w-2 w0", "w-3 w-1 w0", "w-3 w0", "w-3 w-2 w0"],
        "cs": ["c-2 c0", "c-3 c-1 c0", "c-3 c0", "c-3 c-2 c0"],
        "wsh": ["w-4 w0", "w-5 w0"],
        "csh": ["c-4 c0", "c-5 c0"],
        "cpw": ["c-1 w0", "c-2 c-1 w0", "c-3 c-2 c-1 w0"],
        "tied": ["w[-9:-6] w0", "c[-9:-6] c0"],
    }
    for group, names in table.items():
        assert [str(t) for t in feature_templates((group,), order=4)] == names
    tied = feature_templates(("tied",))[0]
    assert tied.offsets == ((-6, 0), (-7, 0), (-8, 0), (-9, 0)) and tied.span == 9


HAND = {  # group, order, sentence -> {(template, values): count}; <s> is word 0 / class -1
    ("w", 2, "s"): {("w0", (1,)): 2, ("w0", (2,)): 2, ("w0", (3,)): 1, ("w-1 w0", (0, 1)): 1,
                    ("w-1 w0", (1, 2)): 2, ("w-1 w0", (2, 3)): 1, ("w-1 w0", (3, 1)): 1},
    ("c", 2, "s"): {("c0", (0,)): 3, ("c0", (1,)): 2, ("c-1 c0", (-1, 0)): 1, ("c-1 c0", (0, 1)): 2,
                    ("c-1 c0", (1, 0)): 1, ("c-1 c0", (0, 0)): 1},
    ("ws", 3, "s"): {("w-2 w0", (0, 2)): 1, ("w-2 w0", (1, 3)): 1, ("w-2 w0", (2, 1)): 1, ("w-2 w0", (3, 2)): 1},
    ("cs", 3, "s"): {("c-2 c0", (-1, 1)): 1, ("c-2 c0", (0, 0)): 1, ("c-2 c0", (1, 0)): 1, ("c-2 c0", (0, 1)): 1},
    ("wsh", 2, "s"): {("w-2 w0", (0, 2)): 1, ("w-2 w0", (1, 3)): 1, ("w-2 w0", (2, 1)): 1, ("w-2 w0", (3, 2)): 1,
                      ("w-3 w0", (0, 3)): 1, ("w-3 w0", (1, 1)): 1, ("w-3 w0", (2, 2)): 1},
    ("csh", 2, "s"): {("c-2 c0", (-1, 1)): 1, ("c-2 c0", (0, 0)): 1, ("c-2 c0", (1, 0)): 1, ("c-2 c0", (0, 1)): 1,
                      ("c-3 c0", (-1, 0)): 1, ("c-3 c0", (0, 0)): 1, ("c-3 c0", (1, 1)): 1},
    ("cpw", 3, "s"): {("c-1 w0", (-1, 1)): 1, ("c-1 w0", (0, 2)): 2, ("c-1 w0", (1, 3)): 1, ("c-1 w0", (0, 1)): 1,
                      ("c-2 c-1 w0", (-1, 0, 2)): 1, ("c-2 c-1 w0", (0, 1, 3)): 1, ("c-2 c-1 w0", (1, 0, 1)): 1,
                      ("c-2 c-1 w0", (0, 0, 2)): 1},
    ("tied", 4, "l"): {("w[-9:-6] w0", (0, 3)): 1, ("w[-9:-6] w0", (1, 1)): 1, ("w[-9:-6] w0", (2, 2)): 1,
                       ("w[-9:-6] w0", (0, 1)): 1, ("w[-9:-6] w0", (1, 2)): 1, ("w[-9:-6] w0", (0, 2)): 1,
                       ("c[-9:-6] c0", (-1, 0)): 2, ("c[-9:-6] c0", (0, 0)): 1, ("c[-9:-6] c0", (1, 1)): 1,
                       ("c[-9:-6] c0", (0, 1)): 1, ("c[-9:-6] c0", (-1, 1)): 1},
}


@pytest.mark.parametrize("case", list(HAND), ids=[c[0] for c in HAND])
def test_features_match_a_hand_count_for_every_template_group(case):
    group, order, which = case
    sentence = SENT if which == "s" else LONG
    corpus = Sequences.from_lists([sentence])
    feats = DiscreteFeatures.fit(corpus, 5, feature_templates((group,), order), classes=CLASSES)
    assert observed(feats, sentence) == HAND[case]
    assert feats.num_features == len(HAND[case])  # only observed features exist
    torch.testing.assert_close(feats.observed_counts, feats.counts(corpus))


def test_boundaries_eos_adds_end_windows_and_no_bos_drops_start_windows():
    corpus = Sequences.from_lists([SENT])
    bigrams = feature_templates(("w",), order=2)
    with_eos = observed(DiscreteFeatures.fit(corpus, 5, bigrams, eos=True), SENT)
    assert with_eos == {**HAND[("w", 2, "s")], ("w-1 w0", (2, 0)): 1}  # (2 </s>), and no (</s>) unigram
    no_bos = observed(DiscreteFeatures.fit(corpus, 5, bigrams, bos=False), SENT)
    assert no_bos == {k: v for k, v in HAND[("w", 2, "s")].items() if k != ("w-1 w0", (0, 1))}


def test_source_boundaries_match_the_source_feature_tables_on_a_two_word_sentence():
    # SPMILM trf-feature.cpp on "1 2" with the table w[1:3] and the skip table w[1]-[1]w[1]: the n-grams
    # 1, 2, 1 2; <s> variants of the shorter orders at the head (<s> 1, <s> 1 2); </s> variants at the
    # tail (2 </s>, 1 2 </s>); never <s> 1 2 </s>; the one-order skip table has no boundary variants,
    # and "1 2" holds no skip bigram at distance 2.
    sent = [1, 2]
    templates = (*feature_templates(("w",), order=3), *feature_templates(("ws",), order=3))
    corpus = Sequences.from_lists([sent])
    source = observed(DiscreteFeatures.fit(corpus, 5, templates, eos=True, boundaries="source"), sent)
    assert source == {("w0", (1,)): 1, ("w0", (2,)): 1, ("w-1 w0", (1, 2)): 1, ("w-1 w0", (0, 1)): 1,
                      ("w-2 w-1 w0", (0, 1, 2)): 1, ("w-1 w0", (2, 0)): 1, ("w-2 w-1 w0", (1, 2, 0)): 1}
    every = observed(DiscreteFeatures.fit(corpus, 5, templates, eos=True), sent)
    assert every == {**source, ("w-2 w0", (0, 2)): 1, ("w-2 w0", (1, 0)): 1}  # <s> _ 2, 1 _ </s>
    one = observed(DiscreteFeatures.fit(Sequences.from_lists([[3]]), 5, templates, eos=True), [3])
    assert ("w-2 w-1 w0", (0, 3, 0)) in one  # "all": <s> 3 </s> is a window
    one = observed(DiscreteFeatures.fit(Sequences.from_lists([[3]]), 5, templates, eos=True, boundaries="source"), [3])
    assert one == {("w0", (3,)): 1, ("w-1 w0", (0, 3)): 1, ("w-1 w0", (3, 0)): 1}


def corpus_and_features(eos: bool = False, bos: bool = True,
                        boundaries: str = "all") -> tuple[Sequences, DiscreteFeatures]:
    g = torch.Generator().manual_seed(0)
    lengths = torch.randint(1, 9, (40,), generator=g)
    tokens = torch.randint(1, 7, (40, 8), generator=g)
    corpus = Sequences(tokens, lengths)
    classes = torch.tensor([0, 0, 1, 2, 0, 1, 2])
    feats = DiscreteFeatures.fit(corpus, 7, feature_templates(("w", "c", "ws", "cs", "wsh", "csh", "cpw", "tied"), 3),
                                 classes=classes, bos=bos, eos=eos, boundaries=boundaries)
    with torch.no_grad():
        feats.weight.copy_(torch.randn(feats.num_features, generator=g))
    return corpus, feats


@pytest.mark.parametrize(("bos", "eos", "boundaries"), [(True, False, "all"), (False, True, "all"),
                                                        (True, True, "all"), (True, True, "source")])
def test_energy_is_minus_weights_dot_counts_and_its_gradient_is_minus_counts(bos, eos, boundaries):
    corpus, feats = corpus_and_features(eos=eos, bos=bos, boundaries=boundaries)
    e = feats(corpus)
    per_sentence = torch.stack([feats.counts(corpus[i]) for i in range(corpus.batch_size)])
    torch.testing.assert_close(e.double(), -(per_sentence * feats.weight.detach().double()).sum(1), atol=1e-5, rtol=1e-6)
    e.sum().backward()
    torch.testing.assert_close(feats.weight.grad.double(), -feats.counts(corpus))


@pytest.mark.parametrize(("bos", "eos", "boundaries"), [(True, False, "all"), (False, True, "all"),
                                                        (True, True, "all"), (True, True, "source")])
def test_energy_computes_the_keys_of_present_windows_only_and_the_same_ones(bos, eos, boundaries):
    corpus, feats = corpus_and_features(eos=eos, bos=bos, boundaries=boundaries)
    x = corpus.pad_to(20)  # mostly padding, as the TRF's chains are (padded to the longest length)
    keys, valid = feats._window_keys(x)
    at, present = feats._present_window_keys(x)
    order = at.argsort()
    at, present = at[order], present[order]
    assert torch.equal(at, valid.flatten().nonzero().squeeze(1))
    assert torch.equal(present, keys.flatten()[at])
    idx, found = feats.table(keys.flatten()[at])  # the energy from the full block, summed the same way
    block = feats.weight.new_zeros(valid.numel()).index_put((at,), feats.weight[idx] * found)
    assert torch.equal(feats(x), -block.view(x.batch_size, -1).sum(1))
    empty = Sequences(torch.zeros(0, 5, dtype=torch.long), torch.zeros(0, dtype=torch.long))
    assert feats(empty).shape == (0,)


def test_the_last_batch_lookups_are_reused_only_for_the_same_sentences_and_follow_the_weights():
    corpus, feats = corpus_and_features(eos=True)
    x = corpus.pad_to(10)
    first = feats(x)
    memo = feats._last
    with torch.no_grad():
        feats.weight.mul_(-2.0)  # an optimizer step: the ids stay, the energies move
    again = feats(x)
    assert feats._last is memo  # looked up once
    fresh = feats.__class__.__new__(feats.__class__)  # the same features without a memo
    fresh.__dict__.update(feats.__dict__)
    fresh._last = None
    assert torch.equal(again, fresh(x)) and torch.equal(again, -2.0 * first)
    tokens = x.tokens.clone()
    tokens[0, 0] = 1 + int(tokens[0, 0]) % 6  # another sentence in the same tensor shape
    y = Sequences(tokens, x.lengths)
    assert feats._last is memo and not torch.equal(feats(y), again) and feats._last is not memo
    fresh._last = None
    assert torch.equal(feats(y), fresh(y))


@pytest.mark.parametrize(("bos", "eos", "boundaries"), [(True, False, "all"), (False, True, "all"),
                                                        (True, True, "all"), (True, True, "source")])
def test_token_logits_are_energy_differences_of_the_substituted_sentences(bos, eos, boundaries):
    corpus, feats = corpus_and_features(eos=eos, bos=bos, boundaries=boundaries)
    g = torch.Generator().manual_seed(1)
    x = corpus[:20]
    pos = (torch.rand(20, generator=g) * x.lengths).long()
    cand = torch.randint(1, 7, (20, 5), generator=g)
    s = feats.token_logits(x, pos, cand)
    tok = x.tokens.unsqueeze(1).expand(20, 5, -1).clone()
    tok.scatter_(2, pos.view(20, 1, 1).expand(20, 5, 1), cand.unsqueeze(2))
    full = -feats(Sequences(tok.view(100, -1), x.lengths.repeat_interleave(5))).view(20, 5)
    diff = (s - full).detach()
    torch.testing.assert_close(diff, diff[:, :1].expand_as(diff), atol=1e-5, rtol=0)
    absent = cand.clone()
    absent[:, 1::2] = -1  # absent entries score 0 and leave the others alone
    s_absent = feats.token_logits(x, pos, absent).detach()
    assert bool((s_absent[:, 1::2] == 0).all())
    torch.testing.assert_close(s_absent[:, ::2], s[:, ::2].detach())


def test_energy_ignores_padding_and_unseen_ngrams_score_zero():
    corpus, feats = corpus_and_features()
    padded = Sequences(torch.cat([corpus.tokens.masked_fill(~corpus.mask(), 6), torch.full((40, 3), 5)], 1),
                       corpus.lengths)
    torch.testing.assert_close(feats(padded), feats(corpus))
    fresh = DiscreteFeatures.fit(Sequences.from_lists([[1, 2]]), 7, feature_templates(("w",), 2))
    with torch.no_grad():
        fresh.weight.fill_(1.0)
    assert fresh(Sequences.from_lists([[3, 4], [1, 2]])).tolist() == [0.0, -4.0]  # (1)(2)(<s> 1)(1 2)


def test_fit_in_chunks_and_min_count():
    corpus, _ = corpus_and_features()
    templates = feature_templates(("w",), 2)
    a = DiscreteFeatures.fit(corpus, 7, templates, chunk_size=3)
    b = DiscreteFeatures.fit(corpus, 7, templates)
    assert torch.equal(a.keys, b.keys) and torch.equal(a.observed_counts, b.observed_counts)
    c = DiscreteFeatures.fit(corpus, 7, templates, min_count=3)
    assert bool((c.observed_counts >= 3).all()) and c.num_features == int((b.observed_counts >= 3).sum())
    assert sum(b.template_sizes()) == b.num_features


def test_default_templates_follow_the_classes_argument():
    corpus, _ = corpus_and_features()
    words_only = DiscreteFeatures.fit(corpus, 7)
    assert all(not t.uses_classes for t in words_only.templates)
    with_classes = DiscreteFeatures.fit(corpus, 7, classes=torch.zeros(7, dtype=torch.long))
    assert any(t.uses_classes for t in with_classes.templates) and len(with_classes.templates) == 23


def test_errors_name_the_argument():
    corpus = Sequences.from_lists([[1, 2]])
    with pytest.raises(ValueError, match="groups: unknown template group 'x'; expected some of w, c"):
        feature_templates(("x",))
    with pytest.raises(ValueError, match="order"):
        feature_templates(("w",), order=0)
    with pytest.raises(ValueError, match="offsets: expected increasing offsets ending at 0"):
        Template(("w", "w"), ((0, -1),))
    with pytest.raises(ValueError, match="layers: expected a non-empty tuple of 'w'/'c'"):
        Template(("x",), ((0,),))
    with pytest.raises(ValueError, match=r"classes: class templates \(c0\) need a class per token"):
        DiscreteFeatures.fit(corpus, 3, feature_templates(("c",), 1))
    with pytest.raises(ValueError, match=r"classes: expected a LongTensor \(3,\)"):
        DiscreteFeatures.fit(corpus, 3, classes=torch.zeros(4, dtype=torch.long))
    with pytest.raises(ValueError, match="x: token ids must be below the vocabulary size 3; got 5 at sequence 0"):
        DiscreteFeatures.fit(corpus, 3)(Sequences.from_lists([[5]]))
    with pytest.raises(ValueError, match="keys: expected sorted distinct keys"):
        DiscreteFeatures(feature_templates(("w",), 1), torch.tensor([2, 1]), 3)
    with pytest.raises(ValueError, match=r"templates: the feature keys need \d+ bits, more than int64 holds"):
        DiscreteFeatures(feature_templates(("w",), 5), torch.zeros(0, dtype=torch.long), 10**6)
    with pytest.raises(TypeError, match="corpus: expected an ebms.sequences.Sequences; got list"):
        DiscreteFeatures.fit([[1, 2]], 3)
    with pytest.raises(ValueError, match="boundaries: expected 'all' or 'source'; got 'ngram'"):
        DiscreteFeatures.fit(corpus, 3, boundaries="ngram")


@pytest.mark.parametrize(("bos", "eos", "boundaries"), [(True, True, "source"), (True, False, "all"), (False, True, "all")])
def test_single_token_energies_equal_the_energy_of_the_one_token_sentences_as_weights_move(bos, eos, boundaries):
    corpus, feats = corpus_and_features(eos=eos, bos=bos, boundaries=boundaries)
    ones = Sequences(torch.arange(1, 7)[:, None])
    g = torch.Generator().manual_seed(3)
    for _ in range(3):  # the cache holds feature ids, not energies: new weights give new energies
        assert torch.equal(feats.single_token_energies(), feats(ones))
        with torch.no_grad():
            feats.weight.add_(torch.randn(feats.num_features, generator=g))
    feats.single_token_energies().sum().backward()
    grad = feats.weight.grad.clone()
    feats.weight.grad = None
    feats(ones).sum().backward()
    assert torch.equal(grad, feats.weight.grad)
    feats.load_state_dict(feats.state_dict())  # loading drops the cache (the keys may change)
    assert feats._single_ids is None and torch.equal(feats.single_token_energies(), feats(ones))
