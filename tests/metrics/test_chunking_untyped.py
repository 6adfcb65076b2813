"""conlleval on untyped tags: ``B``, ``I`` (and ``B-``, ``I-``) have the type ``""``, as conlleval.pl reads
them (the type is what follows the first ``-``, empty without one) and as seqeval reads them (it names
the type ``"_"``). They used to be refused as malformed tags."""

from __future__ import annotations

import random

from ebms.metrics import conlleval


def _counts(r):
    return r.n_correct, r.n_pred, r.n_true


def test_untyped_chunks_by_hand():
    # chunks: ""(0,2) ""(3,4) PER(4,5) ""(5,6) ""(6,8): an I after O starts a chunk, and so does the
    # change of type from PER to "" (conlleval's rules, unchanged for the empty type)
    gold = [["B", "I", "O", "I", "B-PER", "I", "B-", "I-"]]
    pred = [["B", "I", "O", "B", "B-PER", "I", "B", "I"]]
    r = conlleval(gold, pred)
    assert _counts(r) == (5, 5, 5) and r.f1 == 100.0
    assert set(r.per_type) == {"", "PER"}
    assert _counts(r.per_type[""]) == (4, 4, 4)
    # token accuracy compares prefix and type: "B-" and "B" are the same untyped tag, "I" and "B" are not
    assert r.accuracy == 100.0 * 7 / 8
    assert f"{'':>17}: precision: 100.00%; recall: 100.00%; FB1: 100.00  4" in r.report()


def test_untyped_and_typed_chunks_do_not_match_each_other():
    r = conlleval([["B", "I", "O"]], [["B-NP", "I-NP", "O"]])
    assert _counts(r) == (0, 1, 1)
    assert _counts(r.per_type[""]) == (0, 0, 1) and _counts(r.per_type["NP"]) == (0, 1, 0)
    # "B-NP I" is NP(0,1) then ""(1,2): the type changes
    assert _counts(conlleval([["B-NP", "I"]], [["B-NP", "B"]])) == (2, 2, 2)


def test_counts_equal_seqevals_on_mixed_untyped_and_typed_tags():
    """Reference: seqeval 1.2.2 (default, conlleval-compatible mode) on these 40 sentences:
    148 true, 143 predicted, 94 correct entities (89/93/62 of type "_", 59/50/32 of PER),
    F1 0.6460481099656357."""
    rng = random.Random(23)
    tags = ["O", "B", "I", "B-PER", "I-PER", "B-", "I-"]
    gold = [[rng.choice(tags) for _ in range(rng.randint(1, 9))] for _ in range(40)]
    pred = [[rng.choice(tags) if rng.random() < 0.4 else t for t in s] for s in gold]
    r = conlleval(gold, pred)
    assert _counts(r) == (94, 143, 148)
    assert _counts(r.per_type[""]) == (62, 93, 89) and _counts(r.per_type["PER"]) == (32, 50, 59)
    assert abs(r.f1 - 64.60481099656357) < 1e-9
