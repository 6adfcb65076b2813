"""Addition sentences: every draw parses and is correct, errors are caught, the exact data law sums
to one over its enumerated support (clean and corrupted), and the corruption rate is the stated one
(a binomial check at z = 4)."""

from __future__ import annotations

import itertools
import math

import pytest
import torch

from ebms.data.addition import CHARACTERS, AdditionTask, addition_corpus, corrupted_corpus
from ebms.sequences import Sequences


def _g(seed: int = 0) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


@pytest.mark.parametrize("reverse", [False, True])
@pytest.mark.parametrize("digits", [1, 3, 18])
def test_every_generated_sentence_parses_and_is_correct(digits, reverse):
    task = AdditionTask(digits, reverse_sum=reverse)
    corpus = addition_corpus(300, digits=digits, generator=_g(), reverse_sum=reverse)
    assert len(corpus) == 300 and bool(task.is_correct(corpus).all())
    for s in corpus:  # parsed independently with Python integers
        a, rest = s.split("+")
        b, total = rest.split("=")
        assert len(a) == len(b) == digits and len(total) == digits + 1 and len(s) == task.length
        assert int(total[::-1] if reverse else total) == int(a) + int(b)
    torch.testing.assert_close(task.log_prob(corpus), torch.full((300,), -2 * digits * math.log(10.0),
                                                                 dtype=torch.float64))


def test_operands_are_uniform_and_leading_zeros_are_kept():
    corpus = addition_corpus(4000, digits=1, generator=_g(1))
    first = torch.tensor([int(s[0]) for s in corpus])
    counts = torch.bincount(first, minlength=10).double()
    # each count is Binomial(4000, 0.1): mean 400, sd 19; z = 4 per cell
    assert bool(((counts - 400).abs() < 4 * math.sqrt(4000 * 0.1 * 0.9)).all())
    assert any(s.startswith("0+") for s in corpus) and any(s.endswith("=00") for s in corpus)


def test_is_correct_catches_wrong_sums_and_malformed_sentences():
    task = AdditionTask(3)
    good = ["123+456=0579", "999+999=1998", "000+000=0000"]
    bad = ["123+456=0578", "123+456=1579", "123+456=579", "123+456=05790", "12+3456=0579", "123=456+0579",
           "", "123+456=", "+++++++=++++"]
    assert task.is_correct(good).tolist() == [True] * 3
    assert task.is_correct(bad).tolist() == [False] * len(bad)
    assert bool(torch.isinf(task.log_prob(bad)).all())
    ids = task.encode(good + bad)
    assert task.is_correct(ids).tolist() == [True] * 3 + [False] * len(bad)
    unk = Sequences.from_lists([[3, 4, 5, 12, 6, 7, 8, 13, 1, 7, 9, 11]])  # <unk> (id 1) in the sum
    assert task.is_correct(unk).tolist() == [False]


def test_exact_log_prob_sums_to_one_over_the_enumerated_support():
    task = AdditionTask(1)
    # every sentence of the right layout: 10 * 10 prefixes times 100 two-digit sums
    everything = [f"{a}+{b}={s:02d}" for a, b, s in itertools.product(range(10), range(10), range(100))]
    for eps in (0.0, 0.3, 1.0):
        p = task.log_prob(everything, error_rate=eps).exp()
        assert float(p.sum()) == pytest.approx(1.0, abs=1e-12)
        support = int((p > 0).sum())
        assert support == {0.0: 100, 0.3: 100 * 19, 1.0: 100 * 18}[eps]
    # the conditional law of the continuation given each prefix sums to one too
    prefixes, sums = [f"{a}+{b}=" for a in range(10) for b in range(10)], [f"{s:02d}" for s in range(100)]
    for prefix in prefixes[:7]:
        q = task.continuation_log_prob([prefix] * 100, sums, error_rate=0.2).exp()
        assert float(q.sum()) == pytest.approx(1.0, abs=1e-12)


def test_corruption_changes_exactly_one_digit_at_the_stated_rate():
    task, n, eps = AdditionTask(3), 4000, 0.25
    clean = addition_corpus(n, generator=_g(2))
    dirty = corrupted_corpus(n, eps, generator=_g(2))
    assert [s[:8] for s in clean] == [s[:8] for s in dirty]  # same seed: same operands
    changed = [sum(x != y for x, y in zip(a, b)) for a, b in zip(clean, dirty)]
    assert set(changed) <= {0, 1}
    wrong = int((~task.is_correct(dirty)).sum())
    assert wrong == sum(changed)
    # Binomial(4000, 0.25): sd 27.4; z = 4
    assert abs(wrong - n * eps) < 4 * math.sqrt(n * eps * (1 - eps))
    assert bool(torch.isfinite(task.log_prob(dirty, error_rate=eps)).all())
    assert bool(torch.isinf(task.log_prob(dirty, error_rate=0.0)[~task.is_correct(dirty)]).all())
    assert corrupted_corpus(50, 1.0, digits=2, generator=_g(3)) and not bool(
        AdditionTask(2).is_correct(corrupted_corpus(50, 1.0, digits=2, generator=_g(3))).any())


@pytest.mark.parametrize("digits", [1, 2, 4])
def test_disjoint_samples_are_correct_and_never_share_an_operand_pair(digits):
    task = AdditionTask(digits)
    sizes = [60, 0, 40] if digits == 1 else [700, 300]  # d = 1: all 100 pairs; d = 4: the redraw path
    groups = task.disjoint_samples(sizes, generator=_g(4))
    assert [g.batch_size for g in groups] == sizes
    prefixes = [p for g in groups for p in task.split(task.decode(g))[0]]
    assert len(set(prefixes)) == sum(sizes)
    assert all(bool(task.is_correct(g).all()) for g in groups)
    again = task.disjoint_samples(sizes, generator=_g(4))
    assert all(torch.equal(a.tokens, b.tokens) for a, b in zip(groups, again))


def test_corrupt_changes_exactly_one_sum_digit_at_the_stated_rate():
    task, n, eps = AdditionTask(2), 4000, 0.3
    (clean,) = task.disjoint_samples([n], generator=_g(5))
    dirty = task.corrupt(clean, eps, generator=_g(6))
    P = task.prefix_length
    assert torch.equal(dirty.tokens[:, :P], clean.tokens[:, :P]) and torch.equal(dirty.lengths, clean.lengths)
    changed = (dirty.tokens != clean.tokens).sum(1)
    assert set(changed.tolist()) <= {0, 1}
    assert torch.equal(changed.bool(), ~task.is_correct(dirty))
    assert abs(int(changed.sum()) - n * eps) < 4 * math.sqrt(n * eps * (1 - eps))
    assert torch.equal(task.corrupt(clean, 0.0, generator=_g(6)).tokens, clean.tokens)
    assert not bool(task.is_correct(task.corrupt(clean[:50], 1.0, generator=_g(7))).any())


def test_encode_decode_round_trip_and_the_id_layout():
    task = AdditionTask(2)
    corpus = addition_corpus(20, digits=2, generator=_g(4)) + ["1+", ""]
    ids = task.encode(corpus)
    assert task.decode(ids) == corpus and task.vocab_size == 14
    assert task.encode(["09+="]).tolist() == [[2, 11, 12, 13]]
    assert task.vocabulary.tokens[2:] == tuple(CHARACTERS)
    assert (task.length, task.prefix_length, task.continuation_length) == (9, 6, 3)


def test_split_gives_prefix_and_continuation_for_strings_and_ids():
    task = AdditionTask(3)
    assert task.split(["123+456=0579", "001+002=0003"]) == (["123+456=", "001+002="], ["0579", "0003"])
    assert task.split(["123+456="]) == (["123+456="], [""])
    c, x = task.split(task.encode(["123+456=0579", "001+002=03"]))
    assert c.tolist() == task.encode(["123+456=", "001+002="]).tolist()
    assert x.tolist() == task.encode(["0579", "03"]).tolist() and x.lengths.tolist() == [4, 2]
    assert task.continuation_log_prob(c, x).tolist() == [0.0, -math.inf]


def test_repr_and_reverse_layout():
    task = AdditionTask(3, reverse_sum=True)
    assert repr(task) == "AdditionTask(digits=3, reverse_sum=True)"
    assert task.is_correct(["123+456=9750", "123+456=0579"]).tolist() == [True, False]


# --- validation -----------------------------------------------------------------------------


@pytest.mark.parametrize(("call", "error", "message"), [
    (lambda: AdditionTask(0), ValueError, r"^digits: expected an int >= 1; got 0"),
    (lambda: AdditionTask(19), ValueError, r"^digits: expected an int in \[1, 18\]; got 19"),
    (lambda: AdditionTask(2.0), TypeError, r"^digits: expected an int; got 2.0"),
    (lambda: AdditionTask(2, reverse_sum=1), TypeError, r"^reverse_sum: expected a bool; got 1"),
    (lambda: addition_corpus(-1), ValueError, r"^n: expected an int >= 0; got -1"),
    (lambda: corrupted_corpus(3, 1.5), ValueError, r"^error_rate: expected a number in \[0, 1\]; got 1.5"),
    (lambda: AdditionTask(1).encode(["1+2=03", "1-2=03"]), ValueError,
     r"^strings: expected characters from '0123456789\+='; string 1 \('1-2=03'\) has '-' at position 1"),
    (lambda: AdditionTask(1).encode("1+2=03"), TypeError, r"^strings: expected a sequence of strings; got a single str"),
    (lambda: AdditionTask(1).encode([12]), TypeError, r"^strings: expected str items; got int at index 0"),
    (lambda: AdditionTask(1).is_correct(Sequences.from_lists([[14]])), ValueError,
     r"^x: token ids must be below the vocabulary size 14"),
    (lambda: AdditionTask(2).split(["12+34=046", "1+234=046"]), ValueError,
     r"^x: sentence 1 does not start with 'a\+b=' and 2-digit operands"),
    (lambda: AdditionTask(1).continuation_log_prob(["1+2="], ["03", "04"]), ValueError,
     r"^prefix: expected one prefix per continuation \(2\); got 1"),
    (lambda: AdditionTask(1).continuation_log_prob(["1+2=0"], ["3"]), ValueError,
     r"^prefix: row 0 is not 'a\+b=' with 1-digit operands"),
    (lambda: AdditionTask(1).log_prob(["1+2=03"], error_rate=-0.1), ValueError,
     r"^error_rate: expected a number in \[0, 1\]; got -0.1"),
    (lambda: AdditionTask(1).disjoint_samples([60, 41]), ValueError,
     r"^sizes: 101 sentences with distinct operands asked; 1-digit operands give only 100 pairs"),
    (lambda: AdditionTask(1).disjoint_samples([-1]), ValueError, r"^sizes: expected an int >= 0; got -1"),
    (lambda: AdditionTask(1).corrupt(AdditionTask(1).encode(["1+2=3"]), 0.5), ValueError,
     r"^x: row 0 is not a\+b=s with 1-digit operands"),
    (lambda: AdditionTask(1).corrupt(AdditionTask(1).encode(["1+2=03"]), 2.0), ValueError,
     r"^error_rate: expected a number in \[0, 1\]; got 2.0"),
])
def test_bad_arguments_are_named(call, error, message):
    with pytest.raises(error, match=message):
        call()
