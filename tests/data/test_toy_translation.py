"""The toy translation task: determinism, the reference mapping, lengths, vocabularies."""

from __future__ import annotations

import itertools
import math

import pytest
import torch

from ebms.data.toy_translation import NOUNS, target_log_prob, toy_translation, toy_translation_splits, translate


def _pairs(n: int = 300, seed: int = 0, **kw: object):  # type: ignore[no-untyped-def]
    return toy_translation(n, generator=torch.Generator().manual_seed(seed), **kw)  # type: ignore[arg-type]


def _synonym(word: str) -> str | None:
    return next((row[3] + word[len(row[2]):] for row in NOUNS if word.startswith(row[2])), None)


def test_toy_translation_is_determined_by_the_generator() -> None:
    a, b, c = _pairs(seed=3), _pairs(seed=3), _pairs(seed=4)
    assert a.source.equal(b.source) and a.target.equal(b.target)
    assert not a.source.equal(c.source)


def test_targets_are_the_reference_translation_of_the_sources() -> None:
    p = _pairs(500)
    sources, targets = p.source_vocab.decode(p.source), p.target_vocab.decode(p.target)
    assert all(translate(s) == t for s, t in zip(sources, targets))


def test_translate_reorders_and_inflects_a_known_sentence() -> None:
    src = "the big dogs not see a cat with some small mice and kings like the old king".split()
    assert translate(src) == ["di", "hunden", "grose", "un", "kata", "qi", "museni", "lites", "kon", "vidanne",
                              "ka", "kungen", "de", "kunga", "gamn", "aman"]


def test_target_lengths_lie_in_range_and_cover_it() -> None:
    p = _pairs(600, min_len=4, max_len=12)
    lengths = p.target.lengths
    assert int(lengths.min()) == 4 and int(lengths.max()) == 12
    assert set(lengths.tolist()) == set(range(4, 13))
    extra = p.source.lengths - p.target.lengths  # one "not" per negated clause
    not_id = p.source_vocab.index["not"]
    assert torch.equal(extra, ((p.source.tokens == not_id) & p.source.mask()).sum(1))


def test_ids_follow_the_text_contract() -> None:
    p = _pairs(200)
    for seqs, vocab in ((p.source, p.source_vocab), (p.target, p.target_vocab)):
        real = seqs.tokens[seqs.mask()]
        assert int(real.min()) >= 2 and int(real.max()) < len(vocab)
        assert vocab.tokens[:2] == ("</s>", "<unk>")


def test_synonyms_change_only_nouns_and_keep_the_length() -> None:
    a, b = _pairs(200, seed=5), _pairs(200, seed=5, synonym_prob=0.5)
    assert torch.equal(a.target.lengths, b.target.lengths) and a.source.equal(b.source)
    ta, tb = a.target_vocab.decode(a.target), b.target_vocab.decode(b.target)
    differ = [(x, y) for s, r in zip(ta, tb) for x, y in zip(s, r) if x != y]
    assert differ and all(y == _synonym(x) for x, y in differ)  # the other stem, the same suffixes
    assert all(translate(s) == t for s, t in zip(b.source_vocab.decode(b.source), ta))


@pytest.mark.parametrize("p", [0.0, 0.2, 0.5, 1.0])
def test_target_log_prob_sums_to_one_over_every_synonym_choice(p: float) -> None:
    # enumeration: the nouns of the canonical target each keep or swap their stem; nothing else varies
    pairs = _pairs(20, seed=7)
    for src in pairs.source_vocab.decode(pairs.source)[:6]:
        canonical = translate(src)
        nouns = [i for i, w in enumerate(canonical) if _synonym(w) is not None]
        total = 0.0
        for swap in itertools.product((False, True), repeat=len(nouns)):
            t = list(canonical)
            for i, s in zip(nouns, swap):
                if s:
                    t[i] = _synonym(t[i])  # type: ignore[assignment]
            lp = target_log_prob(src, t, p)
            expect = sum(math.log(p) if s else math.log1p(-p) for s in swap) if 0 < p < 1 else \
                (0.0 if all(s == (p == 1.0) for s in swap) else -math.inf)
            assert lp == pytest.approx(expect, abs=1e-12) if math.isfinite(expect) else lp == -math.inf
            total += math.exp(lp)
        assert total == pytest.approx(1.0, abs=1e-12)


def test_target_log_prob_of_drawn_pairs_counts_their_synonyms() -> None:
    p = 0.3
    pairs = _pairs(200, seed=8, synonym_prob=p)
    for src, tgt in zip(pairs.source_vocab.decode(pairs.source), pairs.target_vocab.decode(pairs.target)):
        canonical = translate(src)
        swapped = sum(a != b for a, b in zip(canonical, tgt))
        kept = sum(_synonym(w) is not None for w in canonical) - swapped
        assert target_log_prob(src, tgt, p) == pytest.approx(swapped * math.log(p) + kept * math.log(1 - p))


def test_target_log_prob_is_minus_infinity_off_the_support_and_checks_its_input() -> None:
    src = "the dog sees a cat".split()
    assert target_log_prob(src, translate(src), 0.0) == 0.0
    for bad in (["de", "hund", "un", "kata"], ["de", "hund", "un", "kata", "vidan"], ["di", "hund", "un", "kata", "vida"],
                ["de", "hund", "un", "waua", "vida"]):  # short, wrong verb, wrong determiner, a synonym of another noun
        assert target_log_prob(src, bad, 0.2) == -math.inf
    with pytest.raises(ValueError, match="synonym_prob"):
        target_log_prob(src, translate(src), 1.5)
    with pytest.raises(ValueError):
        target_log_prob(["sees", "the", "dog"], ["de"], 0.2)


def test_splits_use_fixed_distinct_seeds() -> None:
    s1, s2 = toy_translation_splits(50, 20, 30, seed=1), toy_translation_splits(50, 20, 30, seed=1)
    assert (len(s1.train), len(s1.valid), len(s1.test)) == (50, 20, 30)
    assert s1.test.source.equal(s2.test.source) and s1.target_vocab is s1.test.target_vocab
    assert not s1.train.source[:20].equal(s1.valid.source)


def test_translate_rejects_ungrammatical_sentences() -> None:
    with pytest.raises(ValueError, match="clause 0 .*expected a verb at position 2; got 'cat'"):
        translate("the dog cat".split())
    with pytest.raises(ValueError, match="agreeing with a plural subject"):
        translate("dogs sees cats".split())
    with pytest.raises(ValueError, match="singular noun after 'a'"):
        translate("a dogs see cats".split())
    with pytest.raises(ValueError, match="expected a noun at position 0; got the end"):
        translate([])


def test_arguments_are_checked() -> None:
    with pytest.raises(ValueError, match="min_len: expected an int >= 3; got 2"):
        toy_translation(3, min_len=2)
    with pytest.raises(ValueError, match="max_len: expected an int >= 10; got 9"):
        toy_translation(3, min_len=10, max_len=9)
    with pytest.raises(ValueError, match=r"synonym_prob: expected a number in \[0, 1\]; got 1.5"):
        toy_translation(3, synonym_prob=1.5)
    with pytest.raises(TypeError, match="n: expected an int"):
        toy_translation(2.0)  # type: ignore[arg-type]


def test_long_targets_up_to_sixty_tokens() -> None:
    p = _pairs(100, min_len=50, max_len=60)
    assert int(p.target.lengths.min()) >= 50 and int(p.target.lengths.max()) <= 60
    sources, targets = p.source_vocab.decode(p.source), p.target_vocab.decode(p.target)
    assert all(translate(s) == t for s, t in zip(sources, targets))
