"""Sequences: validation, packing, slicing, padding, memory, and length buckets."""

from __future__ import annotations

import pytest
import torch

from ebms.sequences import Sequences, length_buckets


def test_from_lists_round_trips_and_pads_with_pad_id():
    s = Sequences.from_lists([[3, 1, 4], [1], []], pad_id=0)
    assert s.tokens.tolist() == [[3, 1, 4], [1, 0, 0], [0, 0, 0]]
    assert s.lengths.tolist() == [3, 1, 0]
    assert s.tolist() == [[3, 1, 4], [1], []]
    assert s.mask().tolist() == [[True, True, True], [True, False, False], [False, False, False]]


def test_lengths_default_to_full_width():
    s = Sequences(torch.zeros(2, 5, dtype=torch.long))
    assert s.lengths.tolist() == [5, 5]


@pytest.mark.parametrize(
    ("tokens", "lengths", "err", "match"),
    [
        (torch.zeros(2, 3), None, TypeError, "integer tensor"),
        ([[1, 2]], None, TypeError, "torch.Tensor"),
        (torch.zeros(3, dtype=torch.long), None, ValueError, r"shape \(B, T\)"),
        (torch.zeros(2, 3, dtype=torch.long), torch.tensor([1, 4]), ValueError, r"\[0, 3\]"),
        (torch.zeros(2, 3, dtype=torch.long), torch.tensor([-1, 2]), ValueError, "min -1"),
        (torch.zeros(2, 3, dtype=torch.long), torch.tensor([1, 2, 3]), ValueError, "lengths: expected shape"),
        (torch.tensor([[0, -2]]), None, ValueError, "non-negative"),
        (torch.zeros(2, 3, dtype=torch.long), torch.tensor([1.0, 2.0]), TypeError, "lengths"),
    ],
)
def test_bad_batches_are_refused_with_the_argument_named(tokens, lengths, err, match):
    with pytest.raises(err, match=match):
        Sequences(tokens, lengths)


def test_padding_is_ignored_by_equal_and_canonical():
    a = Sequences(torch.tensor([[1, 2, 9], [4, 7, 7]]), torch.tensor([2, 1]))
    b = Sequences.from_lists([[1, 2], [4]])
    assert a.equal(b)
    assert torch.equal(a.canonical().tokens, b.tokens)


def test_cat_pads_to_the_widest_and_getitem_keeps_the_batch_dimension():
    a, b = Sequences.from_lists([[1]]), Sequences.from_lists([[2, 3, 4], [5, 6]])
    c = Sequences.cat([a, b])
    assert c.tolist() == [[1], [2, 3, 4], [5, 6]] and c.max_length == 3
    assert c[1].tolist() == [[2, 3, 4]] and c[-1].tolist() == [[5, 6]]
    assert c[torch.tensor([2, 0])].tolist() == [[5, 6], [1]]
    with pytest.raises(ValueError, match="at least one batch"):
        Sequences.cat([])


def test_pad_to_widens_and_refuses_to_cut_real_tokens():
    s = Sequences.from_lists([[1, 2], [3]])
    assert s.pad_to(4).tokens.shape == (2, 4) and s.pad_to(4).tolist() == s.tolist()
    with pytest.raises(ValueError, match="longest length 2"):
        s.pad_to(1)


def test_check_vocabulary_names_the_offending_position():
    s = Sequences(torch.tensor([[1, 5], [2, 99]]), torch.tensor([2, 1]))  # 99 is padding
    s.check_vocabulary(6)
    with pytest.raises(ValueError, match="got 5 at sequence 0, position 1"):
        s.check_vocabulary(5)


def test_a_64_by_50_batch_costs_its_integers_whatever_the_vocabulary():
    s = Sequences(torch.randint(0, 10_000, (64, 50)), torch.full((64,), 50))
    assert s.nbytes == 64 * 50 * 8 + 64 * 8


def test_to_moves_and_refuses_dtype_changes():
    s = Sequences.from_lists([[1, 2]])
    assert s.to("cpu").equal(s)
    with pytest.raises(TypeError, match="stay int64"):
        s.to(torch.float32)


def test_with_tokens_keeps_lengths_and_checks_shape():
    s = Sequences.from_lists([[1, 2], [3]])
    assert s.with_tokens(s.tokens + 1).tolist() == [[2, 3], [4]]
    with pytest.raises(ValueError, match="expected shape"):
        s.with_tokens(torch.zeros(1, 2, dtype=torch.long))


@pytest.mark.parametrize("shuffle", [False, True])
def test_length_buckets_cover_every_index_once_in_similar_lengths(shuffle):
    g = torch.Generator().manual_seed(0)
    lengths = torch.randint(1, 40, (203,), generator=g)
    batches = length_buckets(lengths, 16, shuffle=shuffle, generator=g)
    assert sorted(torch.cat(batches).tolist()) == list(range(203))
    assert all(len(b) == 16 for b in batches if len(b) != 203 % 16)
    spans = [int(lengths[b].max() - lengths[b].min()) for b in batches]
    assert max(spans) <= 5  # sorted cuts: 16 of 203 lengths over 39 values span at most a few
    with pytest.raises(ValueError, match="batch_size"):
        length_buckets(lengths, 0)
