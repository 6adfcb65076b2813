"""Sample spaces: validation, random starts, projection, enumeration and single-position variants."""

import re
from pathlib import Path

import pytest
import torch

from ebms.sequences import Sequences
from ebms.spaces import MAX_EXACT_STATES, Box, Categorical, CategoricalIndices, Reals, TokenSequences


def test_box_random_points_lie_inside_and_project_clamps():
    b = Box(3, low=-1.0, high=2.0)
    x = b.random(1000, generator=torch.Generator().manual_seed(0))
    assert x.shape == (1000, 3) and float(x.min()) >= -1.0 and float(x.max()) <= 2.0
    y = b.project(torch.tensor([[-5.0, 0.5, 9.0]]))
    assert y.tolist() == [[-1.0, 0.5, 2.0]]


def test_reals_random_is_seeded_and_projection_is_identity():
    r = Reals((2, 2))
    a = r.random(4, generator=torch.Generator().manual_seed(1))
    b = r.random(4, generator=torch.Generator().manual_seed(1))
    assert torch.equal(a, b) and a.shape == (4, 2, 2)
    assert torch.equal(r.project(a), a)


def test_space_validation_messages_name_argument_and_value():
    b = Box(2)
    with pytest.raises(ValueError, match=r"x: expected shape \(B, 2\); got \(4, 3\)"):
        b.validate(torch.zeros(4, 3))
    with pytest.raises(ValueError, match=r"x: expected values in \[-1.0, 1.0\]; got min -3, max 0"):
        b.validate(torch.tensor([[-3.0, 0.0]]))
    with pytest.raises(ValueError, match=r"x: expected a finite tensor; got 1 NaN"):
        Reals(2).validate(torch.tensor([[float("nan"), 0.0]]))
    with pytest.raises(TypeError, match=r"x: expected a floating-point tensor; got dtype torch.int64"):
        Reals(2).validate(torch.zeros(2, 2, dtype=torch.long))
    with pytest.raises(ValueError, match=r"low, high: expected low < high; got low=1.0, high=1.0"):
        Box(2, 1.0, 1.0)
    with pytest.raises(ValueError, match=r"event_shape: expected positive ints; got \(0,\)"):
        Reals((0,))


# ---------------------------------------------------------------- index-form categorical


def test_categorical_indices_enumerate_in_the_one_hot_order_as_integers():
    idx, oh = CategoricalIndices((2, 2), 3), Categorical((2, 2), 3)
    a = torch.cat(list(idx.enumerate(chunk_size=10)))
    b = torch.cat(list(oh.enumerate()))
    assert a.dtype == torch.long and a.shape == (81, 2, 2)
    assert torch.equal(a.reshape(81, 4), oh.indices(b))
    assert torch.equal(idx.state_index(a), torch.arange(81))


def test_categorical_indices_random_and_variants_stay_integer():
    space = CategoricalIndices(5, 4)
    x = space.random(3, generator=torch.Generator().manual_seed(0))
    assert x.dtype == torch.long and x.shape == (3, 5) and space.validate(x) is x
    v = space.site_variants(x, 2)
    assert v.dtype == torch.long and v.shape == (3, 4, 5)
    assert torch.equal(v[:, :, 2], torch.arange(4).expand(3, 4))
    assert x.element_size() * x.numel() == 3 * 5 * 8


def test_categorical_indices_messages_name_argument_and_value():
    space = CategoricalIndices(3, 4)
    with pytest.raises(TypeError, match=r"x: expected an integer tensor of category indices; got dtype torch.float32"):
        space.validate(torch.zeros(2, 3))
    with pytest.raises(ValueError, match=r"x: expected shape \(B, 3\); got \(2, 4\)"):
        space.validate(torch.zeros(2, 4, dtype=torch.long))
    with pytest.raises(ValueError, match=r"x: expected category indices in \[0, 3\]; got min 0, max 4"):
        space.validate(torch.tensor([[0, 4, 1]]))
    with pytest.raises(TypeError, match=r"dtype: expected an integer dtype for category indices .*; got torch.float32"):
        space.random(2, dtype=torch.float32)
    with pytest.raises(TypeError, match=r"dtype: expected an integer dtype .*; got torch.bool"):
        space.enumerate(dtype=torch.bool)
    with pytest.raises(ValueError, match=r"num_categories: expected an int >= 2; got 1"):
        CategoricalIndices(3, 1)


def test_exact_state_limit_has_one_definition():
    src = Path(__file__).resolve().parents[1] / "src" / "ebms"
    defs = [p for p in src.rglob("*.py") if re.search(r"^MAX_EXACT_STATES\s*=", p.read_text(), re.MULTILINE)]
    assert [p.relative_to(src).as_posix() for p in defs] == ["spaces/_base.py"]
    assert MAX_EXACT_STATES == 2**25


# ---------------------------------------------------------------- token sequences


def test_token_space_enumerates_every_sequence_once_in_index_order():
    space = TokenSequences(3, 4)
    blocks = list(space.enumerate(chunk_size=20))
    assert all(b.batch_size <= 20 and b.max_length == int(b.lengths[0]) for b in blocks)  # one length, no padding
    x = Sequences.cat(blocks)
    assert space.num_states == x.batch_size == 3 + 9 + 27 + 81
    assert torch.equal(space.state_index(x), torch.arange(120))
    assert x.tolist()[:4] == [[0], [1], [2], [0, 0]] and x.tolist()[-1] == [2, 2, 2, 2]
    assert space.validate(x) is x


def test_token_space_with_min_length_zero_holds_the_empty_sequence():
    space = TokenSequences(2, 2, min_length=0)
    x = Sequences.cat(list(space.enumerate()))
    assert space.num_states == 7 and x.tolist() == [[], [0], [1], [0, 0], [0, 1], [1, 0], [1, 1]]
    assert torch.equal(space.state_index(x), torch.arange(7))
    padded = Sequences(torch.tensor([[1, 1, 1], [0, 1, 1]]), torch.tensor([0, 2]))  # padding ignored
    assert space.state_index(padded).tolist() == [0, 4]


def test_token_space_refuses_to_enumerate_beyond_the_exact_state_limit():
    big = TokenSequences(10, 8)  # 111111110 sequences
    with pytest.raises(ValueError, match=r"enumerate: TokenSequences\(vocab_size=10, min_length=1, max_length=8\) has "
                                         r"111111110 sequences, more than the exact-enumeration limit "
                                         r"MAX_EXACT_STATES = 33554432"):
        big.enumerate()
    assert big.num_states == 111111110
    with pytest.raises(ValueError, match=r"state_index: .* more than 2\^63 - 1 sequences"):
        TokenSequences(10, 30).state_index(TokenSequences(10, 30).random(1))


def test_token_space_random_draws_uniform_lengths_and_tokens():
    """4 lengths and 3 tokens, n = 12000: each count is Binomial(n, 1/4) (or (m, 1/3)), within 4.5 sd
    of its mean (failure probability < 1e-4 over the 7 counts)."""
    space = TokenSequences(3, 5, min_length=2)
    x = space.random(12000, generator=torch.Generator().manual_seed(0))
    assert x.tokens.shape == (12000, 5) and x.tokens.dtype == torch.long and space.validate(x) is x
    assert bool((x.tokens[~x.mask()] == 0).all())  # padding is token 0
    counts = torch.bincount(x.lengths - 2, minlength=4).double()
    assert float((counts - 3000).abs().max()) < 4.5 * (12000 * 0.25 * 0.75) ** 0.5
    real = x.tokens[x.mask()]
    m = real.numel()
    assert float((torch.bincount(real, minlength=3).double() - m / 3).abs().max()) < 4.5 * (m * 2 / 9) ** 0.5
    again = space.random(12000, generator=torch.Generator().manual_seed(0))
    assert torch.equal(again.tokens, x.tokens) and torch.equal(again.lengths, x.lengths)


def test_token_space_random_takes_given_lengths_and_empty_batches():
    space = TokenSequences(4, 6, min_length=0)
    assert space.random(5, lengths=3).lengths.tolist() == [3] * 5
    lens = torch.tensor([0, 6, 2], dtype=torch.int32)
    x = space.random(3, lengths=lens, generator=torch.Generator().manual_seed(1))
    assert x.lengths.tolist() == [0, 6, 2] and x.lengths.dtype == torch.long and x.tolist()[0] == []
    empty = space.random(0)
    assert empty.batch_size == 0 and empty.tokens.shape == (0, 6) and space.validate(empty) is empty


def test_token_space_messages_name_argument_and_value():
    space = TokenSequences(5, 4, min_length=2)
    with pytest.raises(TypeError, match=r"x: expected an ebms.sequences.Sequences .*; got Tensor \(wrap token ids"):
        space.validate(torch.zeros(2, 4, dtype=torch.long))
    with pytest.raises(ValueError, match=r"x.lengths: expected lengths in \[2, 4\]; got min 1, max 3"):
        space.validate(Sequences(torch.zeros(2, 4, dtype=torch.long), torch.tensor([1, 3])))
    with pytest.raises(ValueError, match=r"batch.lengths: expected lengths in \[2, 4\]; got min 5, max 5"):
        space.validate(Sequences(torch.zeros(1, 6, dtype=torch.long), torch.tensor([5])), "batch")
    with pytest.raises(ValueError, match=r"x.tokens: expected token ids in \[0, 4\] \(vocab_size 5\); got 7 at sequence 1, position 2"):
        space.validate(Sequences(torch.tensor([[1, 2, 0], [0, 1, 7]]), torch.tensor([2, 3])))
    negative = Sequences(torch.tensor([[1, -2, 0]]), torch.tensor([3]), validate=False)
    with pytest.raises(ValueError, match=r"x.tokens: expected token ids in \[0, 4\] .*; got -2 at sequence 0, position 1"):
        space.validate(negative)
    padded = Sequences(torch.tensor([[1, 2, 99, 99, 99, 99]]), torch.tensor([2]))  # wider than max_length
    assert space.validate(padded) is padded


def test_token_space_argument_checks():
    with pytest.raises(ValueError, match=r"vocab_size: expected an int >= 1; got 0"):
        TokenSequences(0, 3)
    with pytest.raises(ValueError, match=r"max_length: expected an int >= 1; got 0"):
        TokenSequences(3, 0)
    with pytest.raises(ValueError, match=r"min_length: expected an int >= 0; got -1"):
        TokenSequences(3, 2, min_length=-1)
    with pytest.raises(ValueError, match=r"min_length: expected at most max_length=2; got min_length=3"):
        TokenSequences(3, 2, min_length=3)
    with pytest.raises(TypeError, match=r"max_length: expected an int; got 2.5"):
        TokenSequences(3, 2.5)
    space = TokenSequences(3, 4)
    with pytest.raises(ValueError, match=r"n: expected an int >= 0; got -1"):
        space.random(-1)
    with pytest.raises(ValueError, match=r"lengths: expected an int in \[1, 4\] or an integer tensor \(2,\); got 0"):
        space.random(2, lengths=0)
    with pytest.raises(ValueError, match=r"lengths: expected values in \[1, 4\]; got min 1, max 5"):
        space.random(2, lengths=torch.tensor([1, 5]))
    with pytest.raises(ValueError, match=r"lengths: expected shape \(2,\); got \(3,\)"):
        space.random(2, lengths=torch.tensor([1, 2, 3]))
    with pytest.raises(TypeError, match=r"lengths: expected an integer tensor \(2,\); got dtype torch.float32"):
        space.random(2, lengths=torch.tensor([1.0, 2.0]))
    with pytest.raises(ValueError, match=r"chunk_size: expected an int >= 1; got 0"):
        space.enumerate(chunk_size=0)
    assert repr(space) == "TokenSequences(vocab_size=3, min_length=1, max_length=4)"


def test_position_variants_set_every_token_at_one_position():
    space = TokenSequences(3, 4)
    x = Sequences(torch.tensor([[2, 1, 0, 0], [1, 1, 1, 1]]), torch.tensor([2, 4]))
    v = space.position_variants(x, 1)
    assert v.tokens.shape == (6, 4) and v.lengths.tolist() == [2, 2, 2, 4, 4, 4]
    assert v.tokens.tolist() == [[2, 0, 0, 0], [2, 1, 0, 0], [2, 2, 0, 0], [1, 0, 1, 1], [1, 1, 1, 1], [1, 2, 1, 1]]
    per_chain = space.position_variants(x, torch.tensor([0, 3]))
    assert per_chain.tokens[:3, 0].tolist() == [0, 1, 2] and per_chain.tokens[3:, 3].tolist() == [0, 1, 2]
    assert torch.equal(per_chain.tokens[:3, 1:], x.tokens[:1, 1:].expand(3, 3))
    buf = torch.empty(2 * 3 * 4, dtype=torch.long)
    w = space.position_variants(x, 1, out=buf)
    assert w.tokens.data_ptr() == buf.data_ptr() and torch.equal(w.tokens, v.tokens)
    # a position in a chain's padding: its V variants differ only there, so they share its energy
    assert space.position_variants(x, 3).tolist()[:3] == [[2, 1]] * 3


def test_position_variants_messages_name_argument_and_value():
    space, x = TokenSequences(3, 4), TokenSequences(3, 4).random(2)
    with pytest.raises(ValueError, match=r"position: expected an int in \[0, 4\) \(T = x.max_length\) .*; got 4"):
        space.position_variants(x, 4)
    with pytest.raises(ValueError, match=r"position: expected an int in \[0, 4\) .*; got True"):
        space.position_variants(x, True)
    with pytest.raises(ValueError, match=r"position: expected an int or a LongTensor \(2,\); got torch.int32 \(2,\)"):
        space.position_variants(x, torch.tensor([0, 1], dtype=torch.int32))


def test_token_sequences_check_refuses_the_boundary_inside_a_sentence():
    space = TokenSequences(4, 3, min_length=1)
    ok = Sequences(torch.tensor([[1, 2, 0], [3, 0, 0]]), torch.tensor([2, 1]))  # 0s only in the padding
    assert space.check(ok, boundary=0) is ok
    bad = Sequences(torch.tensor([[1, 2, 0], [3, 0, 0]]), torch.tensor([2, 2]))
    with pytest.raises(ValueError, match=r"batch.tokens: id 0 is the sentence boundary .* sequence 1, position 1"):
        space.check(bad, "batch", boundary=0)
    with pytest.raises(ValueError, match="id 3 is the sentence boundary"):
        space.check(ok, boundary=3)
    with pytest.raises(ValueError, match=r"x.lengths: expected lengths in \[1, 3\]"):  # lengths are checked first
        space.check(Sequences(torch.tensor([[1, 2, 3, 1]]), torch.tensor([4])), boundary=0)


# --- TokenSequences.check: a batch against its space ------------------------------------------------
def test_token_sequences_check_accepts_lengths_zero_and_one_and_an_empty_batch():
    space = TokenSequences(3, 2, min_length=0)
    x = Sequences(torch.tensor([[0, 9], [2, 9], [1, 2]]), torch.tensor([0, 1, 2]))  # 9: padding
    assert space.check(x) is x and space.check(x, boundary=0) is x
    empty = Sequences(torch.zeros(0, 5, dtype=torch.long), torch.zeros(0, dtype=torch.long))
    assert space.check(empty, boundary=0) is empty
    assert TokenSequences.validate is TokenSequences.check  # the space contract's name


@pytest.mark.parametrize(
    ("x", "kwargs", "error", "message"),
    [
        ((torch.tensor([[1]]), torch.tensor([1])), {}, TypeError,
         "x: expected an ebms.sequences.Sequences (tokens (B, T), lengths (B,)); got tuple"),
        (torch.tensor([[1]]), {"name": "batch"}, TypeError,
         "batch: expected an ebms.sequences.Sequences (tokens (B, T), lengths (B,)); got Tensor "
         "(wrap token ids as Sequences(tokens, lengths))"),
        (Sequences.from_lists([[1], []]), {}, ValueError, "x.lengths: expected lengths in [1, 3]; got min 0, max 1"),
        (Sequences.from_lists([[1, 2, 3, 1]]), {"boundary": 0}, ValueError,
         "x.lengths: expected lengths in [1, 3]; got min 4, max 4"),
        (Sequences.from_lists([[1], [2, 4]]), {"name": "batch"}, ValueError,
         "batch.tokens: expected token ids in [0, 3] (vocab_size 4); got 4 at sequence 1, position 1"),
        (Sequences.from_lists([[1], [2, 4]]), {"boundary": 0}, ValueError,  # the range first, then the boundary
         "x.tokens: expected token ids in [0, 3] (vocab_size 4); got 4 at sequence 1, position 1"),
        (Sequences.from_lists([[1], [0, 2]]), {"boundary": 0}, ValueError,
         "x.tokens: id 0 is the sentence boundary and cannot occur inside a sentence; got it at sequence 1, "
         "position 0"),
    ],
)
def test_token_sequences_check_messages_are_exact(x, kwargs, error, message):
    with pytest.raises(error, match=f"^{re.escape(message)}$"):
        TokenSequences(4, 3).check(x, **kwargs)
