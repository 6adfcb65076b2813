"""Tests for ebms.structured.features: templates, vocabulary, encoding, observed pairs."""

from __future__ import annotations

import pytest
import torch

from ebms.structured.features import (
    FEATURE_SETS,
    AttributeVocabulary,
    chunking_features,
    ner_features,
    observed_pairs,
    observed_transitions,
    to_attributes,
)

SENT = [("He", "PRP", "B-NP"), ("reckons", "VBZ", "B-VP"), ("the", "DT", "B-NP")]


def test_chunking_features_equal_the_crfsuite_template_written_by_hand():
    got = chunking_features(SENT)
    first = {"w[0]=He", "w[1]=reckons", "w[2]=the", "w[0]|w[1]=He|reckons",
             "pos[0]=PRP", "pos[1]=VBZ", "pos[2]=DT", "pos[0]|pos[1]=PRP|VBZ",
             "pos[1]|pos[2]=VBZ|DT", "pos[0]|pos[1]|pos[2]=PRP|VBZ|DT", "__BOS__"}
    middle = {"w[-1]=He", "w[0]=reckons", "w[1]=the", "w[-1]|w[0]=He|reckons",
              "w[0]|w[1]=reckons|the", "pos[-1]=PRP", "pos[0]=VBZ", "pos[1]=DT",
              "pos[-1]|pos[0]=PRP|VBZ", "pos[0]|pos[1]=VBZ|DT", "pos[-1]|pos[0]|pos[1]=PRP|VBZ|DT"}
    last = {"w[-2]=He", "w[-1]=reckons", "w[0]=the", "w[-1]|w[0]=reckons|the",
            "pos[-2]=PRP", "pos[-1]=VBZ", "pos[0]=DT", "pos[-2]|pos[-1]=PRP|VBZ",
            "pos[-1]|pos[0]=VBZ|DT", "pos[-2]|pos[-1]|pos[0]=PRP|VBZ|DT", "__EOS__"}
    assert [set(d) for d in got] == [first, middle, last]
    assert all(v == 1.0 for d in got for v in d.values())


def test_ner_features_follow_the_tutorial_with_pycrfsuite_names():
    got = ner_features([("La", "DA", "O"), ("Coruña", "NC", "B-LOC")])
    assert got[0] == {
        "bias": 1.0, "word.lower():la": 1.0, "word[-3:]:La": 1.0, "word[-2:]:La": 1.0,
        "word.isupper()": 0.0, "word.istitle()": 1.0, "word.isdigit()": 0.0, "postag:DA": 1.0,
        "postag[:2]:DA": 1.0, "BOS": 1.0, "+1:word.lower():coruña": 1.0,
        "+1:word.istitle()": 1.0, "+1:word.isupper()": 0.0, "+1:postag:NC": 1.0,
        "+1:postag[:2]:NC": 1.0}
    assert got[1]["EOS"] == 1.0 and got[1]["-1:word.lower():la"] == 1.0
    assert set(FEATURE_SETS) == {"crfsuite-chunking", "crfsuite-ner"}


def test_to_attributes_equals_pycrfsuite_item_sequence():
    pycrfsuite = pytest.importorskip("pycrfsuite")
    item = {"a": "x", "b": 2.5, "c": True, "d": False, "e": {"f": 1.0, "g": "h"}}
    assert to_attributes(item) == pycrfsuite.ItemSequence([item]).items()[0]


def test_vocabulary_ids_are_first_seen_order_with_padding_zero():
    xs = [[{"b": 1.0, "a": 1.0}], [{"a": 1.0, "c": 2.0}]]
    v = AttributeVocabulary.fit(xs, [["X"], ["Y"]])
    assert v.attributes == ["<pad>", "b", "a", "c"] and len(v) == 4
    assert v.tags == ["X", "Y"]
    assert AttributeVocabulary.fit(xs, min_count=2).attributes == ["<pad>", "a"]


def test_encode_pads_with_id_zero_weight_zero_and_drops_unknown_and_zero_values():
    v = AttributeVocabulary.fit([[{"a": 1.0, "b": 1.0}]])
    ids, w, lengths = v.encode([[{"a": 2.0, "zz": 1.0, "b": 0.0}, {"b": 1.0}], [{"a": 1.0}]])
    assert ids.shape == (2, 2, 1) and w.shape == (2, 2, 1) and ids.dtype == torch.long
    assert lengths.tolist() == [2, 1]
    assert ids[:, :, 0].tolist() == [[1, 2], [1, 0]]
    assert w[:, :, 0].tolist() == [[2.0, 1.0], [1.0, 0.0]]


def test_observed_pairs_and_transitions_mark_exactly_the_training_pairs():
    xs = [[{"a": 1.0}, {"b": 1.0}], [{"a": 1.0}]]
    v = AttributeVocabulary.fit(xs, [["X", "Y"], ["Y"]])
    ids, _, lengths = v.encode(xs)
    tags = v.encode_tags([["X", "Y"], ["Y"]])
    obs = observed_pairs(ids, tags, lengths, len(v), 2)
    assert obs.tolist() == [[False, False], [True, True], [False, True]]
    assert observed_transitions(tags, lengths, 2).tolist() == [[False, True], [False, False]]


def test_fit_rejects_mismatched_corpora_naming_the_argument():
    with pytest.raises(ValueError, match=r"tag_seqs: expected 1 sentences"):
        AttributeVocabulary.fit([[{"a": 1.0}]], [["X"], ["Y"]])
    with pytest.raises(ValueError, match=r"tag_seqs\[0\]: expected 1 tags"):
        AttributeVocabulary.fit([[{"a": 1.0}]], [["X", "Y"]])
    with pytest.raises(ValueError, match="min_count"):
        AttributeVocabulary.fit([[{"a": 1.0}]], min_count=0)
    with pytest.raises(TypeError, match="feature_seqs"):
        AttributeVocabulary.fit(iter([]))


def test_bad_items_tags_and_rows_are_named():
    v = AttributeVocabulary.fit([[{"a": 1.0}]], [["X"]])
    with pytest.raises(ValueError, match=r"tag_seqs\[0\]\[0\]: expected one of \['X'\]; got 'Q'"):
        v.encode_tags([["Q"]])
    with pytest.raises(ValueError, match="tag_seqs: this vocabulary was fit without tags"):
        AttributeVocabulary.fit([[{"a": 1.0}]]).encode_tags([["X"]])
    with pytest.raises(TypeError, match=r"item\['a'\]: expected a str, number, bool or dict"):
        to_attributes({"a": [1]})
    with pytest.raises(ValueError, match=r"sentence\[0\]: expected a tuple of at least 2 fields"):
        chunking_features([("onlyword",)])
    with pytest.raises(ValueError, match=r"ids: expected shape \(N, T, F\)"):
        observed_pairs(torch.zeros(2, 3, dtype=torch.long), torch.zeros(2, 3, dtype=torch.long),
                       torch.ones(2, dtype=torch.long), 1, 1)
    with pytest.raises(ValueError, match="tags: expected shape"):
        observed_transitions(torch.zeros(2, dtype=torch.long), torch.ones(2, dtype=torch.long), 1)
