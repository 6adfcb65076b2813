"""Sequences: validation, packing, slicing, padding, memory, and length buckets."""

from __future__ import annotations

import re

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


# --- ids are integers; indexing stays in the batch ------------------------------------------------


@pytest.mark.parametrize("row, where, shown", [
    ([1, 2.7], "seqs[1][1]", "2.7 (float)"),
    ([2.0], "seqs[1][0]", "2.0 (float)"),
    (torch.tensor([1.5]), "seqs[1][0]", "tensor(1.5000) (Tensor)"),
])
def test_from_lists_refuses_float_ids_instead_of_truncating_them(row, where, shown):
    with pytest.raises(TypeError, match=rf"^{re.escape(where)}: expected an integer token id; got "
                                        rf"{re.escape(shown)}; ids are never rounded"):
        Sequences.from_lists([[3], row])


def test_from_lists_accepts_integer_types_and_names_a_row_that_is_not_a_list():
    import numpy as np

    s = Sequences.from_lists([np.array([1, 2]), torch.tensor([3]), (4, np.int32(5))])
    assert s.tolist() == [[1, 2], [3], [4, 5]]
    with pytest.raises(TypeError, match=r"^seqs\[1\]: expected a list of integer token ids; got int 5$"):
        Sequences.from_lists([[1], 5])
    with pytest.raises(TypeError, match=r"^seqs\[0\]: expected a list of integer token ids; got str"):
        Sequences.from_lists(["12"])
    with pytest.raises(TypeError, match=r"^seqs: expected lists of integer token ids; got Tensor"):
        Sequences.from_lists(torch.ones(2, 2, dtype=torch.long))


@pytest.mark.parametrize("index", [3, -4, 10])
def test_integer_index_out_of_range_raises_instead_of_an_empty_batch(index):
    s = Sequences.from_lists([[1, 2], [3], [4, 5]])
    with pytest.raises(IndexError, match=rf"^index: sequence {index} is out of range for a batch of 3 "
                                         r"\(valid: -3 to 2\)$"):
        s[index]


def test_integer_indices_of_every_kind_keep_the_batch_dimension_and_iteration_ends():
    import itertools

    import numpy as np

    s = Sequences.from_lists([[1, 2], [3], [4, 5]])
    for i, want in [(0, [[1, 2]]), (-1, [[4, 5]]), (-3, [[1, 2]]), (np.int64(1), [[3]]), (torch.tensor(2), [[4, 5]])]:
        got = s[i]
        assert got.tokens.shape == (1, 2) and got.tolist() == want
    assert s[1:10].tolist() == [[3], [4, 5]] and s[5:7].batch_size == 0  # slices clip, as Python's do
    assert s[torch.tensor([2, 0])].tolist() == [[4, 5], [1, 2]]
    assert s[torch.tensor([False, True, True])].tolist() == [[3], [4, 5]]
    with pytest.raises(IndexError):
        s[torch.tensor([3])]
    # iteration falls back on __getitem__ until IndexError: three rows, then it stops
    assert [x.tolist() for x in itertools.islice(iter(s), 10)] == [[[1, 2]], [[3]], [[4, 5]]]
    with pytest.raises(TypeError, match=r"^index: expected an int, a slice, an index tensor or a bool mask"):
        s[None]


def test_with_tokens_refuses_float_tokens_and_another_device():
    s = Sequences.from_lists([[1, 2], [3]])
    with pytest.raises(TypeError, match=r"^tokens: expected an int64 tensor of token ids; got torch.float32$"):
        s.with_tokens(torch.ones(2, 2))
    with pytest.raises(TypeError, match=r"^tokens: expected an int64 tensor of token ids; got torch.int32$"):
        s.with_tokens(torch.ones(2, 2, dtype=torch.int32))
    with pytest.raises(TypeError, match=r"got list"):
        s.with_tokens([[1, 2], [3, 4]])  # type: ignore[arg-type]


# --- Sequences.coerce: the one batch converter ---------------------------------------------------
PAIR_FORMS = "Sequences or a (tokens (B, T), lengths (B,)) tuple"


def test_coerce_returns_a_sequences_batch_itself():
    s = Sequences.from_lists([[1, 2], [3]])
    assert Sequences.coerce(s) is s
    assert Sequences.coerce(s, pairs=False, tensors=True, empty=False) is s


@pytest.mark.parametrize("dtype", [torch.int64, torch.int32])
def test_coerce_wraps_a_tokens_lengths_pair_of_either_integer_width(dtype):
    s = Sequences.coerce((torch.tensor([[3, 1], [2, 9]], dtype=dtype), torch.tensor([2, 1], dtype=dtype)))
    assert s.tokens.dtype == torch.long and s.lengths.dtype == torch.long
    assert s.tolist() == [[3, 1], [2]]


@pytest.mark.parametrize("dtype", [torch.int64, torch.int32])
def test_coerce_reads_an_integer_matrix_as_full_length_when_tensors_are_accepted(dtype):
    s = Sequences.coerce(torch.tensor([[3, 1, 4]], dtype=dtype), name="x", tensors=True)
    assert s.tokens.dtype == torch.long and s.lengths.tolist() == [3] and s.tolist() == [[3, 1, 4]]
    blank = Sequences.coerce(torch.zeros(2, 0, dtype=dtype), tensors=True)  # T = 0: two empty sentences
    assert blank.lengths.tolist() == [0, 0] and blank.tolist() == [[], []]


def test_coerce_keeps_lengths_zero_and_one_and_an_empty_batch():
    s = Sequences.coerce((torch.tensor([[0, 0], [5, 0]]), torch.tensor([0, 1])))
    assert s.tolist() == [[], [5]]
    empty = Sequences.coerce((torch.zeros(0, 3, dtype=torch.long), torch.zeros(0, dtype=torch.long)))
    assert empty.batch_size == 0 and empty.max_length == 3


@pytest.mark.parametrize(
    ("batch", "kwargs", "message"),
    [
        (torch.tensor([[1, 2]]), {}, rf"batch: expected {PAIR_FORMS}; got Tensor "
                                     r"(wrap token ids as Sequences(tokens, lengths))"),
        ([[1, 2]], {}, f"batch: expected {PAIR_FORMS}; got list"),
        ((torch.tensor([[1]]), torch.tensor([1]), torch.tensor([1])), {}, f"batch: expected {PAIR_FORMS}; got tuple"),
        ((torch.tensor([[1]]), torch.tensor([1])), {"name": "x", "pairs": False},
         "x: expected an ebms.sequences.Sequences (tokens (B, T), lengths (B,)); got tuple"),
        ([[1]], {"name": "x", "pairs": False, "tensors": True},
         "x: expected Sequences or an integer tensor (B, T); got list"),
        ([[1]], {"tensors": True}, f"batch: expected {PAIR_FORMS} or an integer tensor (B, T); got list"),
        ("12", {"name": "src", "pairs": False, "expected": "an ebms.sequences.Sequences"},
         "src: expected an ebms.sequences.Sequences; got str"),
        (torch.ones(1, 2), {"name": "x", "tensors": True},
         "x: expected Sequences or an integer tensor (B, T) of token ids; got torch.float32 tensor of shape (1, 2)"),
        (torch.ones(1, 2, dtype=torch.bool), {"name": "x", "tensors": True},
         "x: expected Sequences or an integer tensor (B, T) of token ids; got torch.bool tensor of shape (1, 2)"),
        (torch.tensor([1, 2]), {"name": "x", "tensors": True},
         "x: expected Sequences or an integer tensor (B, T) of token ids; got torch.int64 tensor of shape (2,)"),
        ((torch.ones(1, 2), torch.tensor([2])), {},
         "tokens: expected an integer tensor (token ids, not one-hot); got dtype torch.float32"),
    ],
)
def test_coerce_refuses_other_forms_naming_the_accepted_ones(batch, kwargs, message):
    with pytest.raises(TypeError, match=f"^{re.escape(message)}$"):
        Sequences.coerce(batch, **kwargs)


def test_coerce_refuses_a_malformed_pair_with_the_constructors_message():
    with pytest.raises(ValueError, match=r"^lengths: expected values in \[0, 2\] \(T = tokens.shape\[1\]\); "
                                         r"got min 1, max 3$"):
        Sequences.coerce((torch.tensor([[1, 2], [3, 4]]), torch.tensor([1, 3])))
    with pytest.raises(ValueError, match=r"^lengths: expected shape \(2,\) to match tokens \(2, 2\); got \(1,\)$"):
        Sequences.coerce((torch.tensor([[1, 2], [3, 4]]), torch.tensor([1])))


def test_coerce_refuses_an_empty_batch_only_when_asked():
    empty = Sequences.from_lists([])
    assert Sequences.coerce(empty) is empty
    with pytest.raises(ValueError, match=r"^batch: expected at least one sentence; got an empty batch "
                                         r"Sequences\(batch=0, max_length=0, device=cpu\)$"):
        Sequences.coerce(empty, empty=False)
    with pytest.raises(ValueError, match=r"^x: expected at least one sentence; got an empty batch"):
        Sequences.coerce(torch.zeros(0, 4, dtype=torch.long), name="x", tensors=True, empty=False)


# --- Sequences.check_vocabulary: the one token-range check ----------------------------------------
def test_check_vocabulary_looks_at_real_tokens_only():
    s = Sequences(torch.tensor([[1, 4, 0], [2, 99, -5]]), torch.tensor([3, 1]), validate=False)  # 99, -5: padding
    assert s.check_vocabulary(5) is s
    assert s.check_vocabulary(5, boundary=3) is s
    assert Sequences.from_lists([]).check_vocabulary(2, boundary=0).batch_size == 0
    assert Sequences.from_lists([[], [1]]).check_vocabulary(2, boundary=0).lengths.tolist() == [0, 1]


@pytest.mark.parametrize(
    ("rows", "kwargs", "message"),
    [
        ([[1, 2], [7]], {}, "tokens: token ids must be below the vocabulary size 5; got 7 at sequence 1, position 0"),
        ([[1, 2], [5]], {"name": "x"}, "x: token ids must be below the vocabulary size 5; got 5 at sequence 1, "
                                       "position 0"),
        ([[1, 0]], {"name": "x", "boundary": 0},
         "x: expected token ids in [1, 4] (id 0 is the boundary); got 0 at sequence 0, position 1"),
        ([[1], [3, 4]], {"name": "x", "boundary": 4, "where": "sequence"},
         "x: expected token ids in [0, 3] (id 4 is the boundary) within lengths; sequence 1 has 4 at position 1"),
        ([[1], [2]], {"name": "prefix", "boundary": 2, "where": "row"},
         "prefix: expected token ids in [0, 4] other than the boundary id 2 within lengths; row 1 has 2 at "
         "position 0"),
        ([[9]], {"name": "x", "boundary": 0, "where": "sequence", "expected": "expected ids below 5"},
         "x: expected ids below 5; sequence 0 has 9 at position 0"),
    ],
)
def test_check_vocabulary_names_the_rule_and_the_first_offending_token(rows, kwargs, message):
    with pytest.raises(ValueError, match=f"^{re.escape(message)}$"):
        Sequences.from_lists(rows).check_vocabulary(5, **kwargs)


def test_check_vocabulary_refuses_negative_ids_and_an_unknown_locator():
    negative = Sequences(torch.tensor([[1, -2]]), torch.tensor([2]), validate=False)
    with pytest.raises(ValueError, match=r"^x: token ids must be non-negative; got -2 at sequence 0, position 1$"):
        negative.check_vocabulary(5, "x")
    with pytest.raises(ValueError, match=r"^x: expected token ids in \[1, 4\] \(id 0 is the boundary\); got -2 at "):
        negative.check_vocabulary(5, "x", boundary=0)
    with pytest.raises(ValueError, match=r"^where: expected one of \('at', 'sequence', 'row'\); got 'col'$"):
        negative.check_vocabulary(5, where="col")
