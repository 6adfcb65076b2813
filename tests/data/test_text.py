"""Tests for ebms.data.text: the Vocabulary (ids, cut-offs, encode/decode, files) and the batchers."""

from __future__ import annotations

import random
import re as _re

import pytest
import torch

from ebms.data.text import Vocabulary, bptt_batches, sentence_batches
from ebms.errors import DataError
from ebms.sequences import Sequences

CORPUS = [["b", "a", "c"], ["a", "b"], ["d", "a"]]  # counts: a 3, b 2, c 1, d 1


# --- ids ------------------------------------------------------------------------------------


def test_ids_are_boundary_unk_then_decreasing_count_with_ties_by_string():
    v = Vocabulary.build(CORPUS)
    assert v.tokens == ("</s>", "<unk>", "a", "b", "c", "d")
    assert v.counts == (3, 0, 3, 2, 1, 1)  # counts[0]: sentences, counts[1]: tokens folded into <unk>
    assert len(v) == 6 and v.level == "word"
    assert v.index["a"] == 2 and v.index["<s>"] == v.index["</s>"] == 0 and v.index["<unk>"] == 1
    assert "c" in v and "z" not in v
    assert repr(v) == "Vocabulary(level='word', size=6)"


def test_ids_do_not_depend_on_the_order_of_sentences_or_tokens():
    rng = random.Random(0)
    words = [f"w{rng.randrange(40)}" for _ in range(600)]
    sentences = [words[i:i + rng.randrange(1, 9)] for i in range(0, 600, 7)]
    ref = Vocabulary.build(sentences, min_count=2)
    for _ in range(3):
        shuffled = [rng.sample(s, len(s)) for s in rng.sample(sentences, len(sentences))]
        assert Vocabulary.build(shuffled, min_count=2) == ref


def test_min_count_and_max_size_fold_the_rare_tokens_into_unk():
    v = Vocabulary.build(CORPUS + [["<unk>", "a"]], min_count=2)
    assert v.tokens == ("</s>", "<unk>", "a", "b")
    assert v.counts == (4, 3, 4, 2)  # <unk>: the literal one + c + d
    v = Vocabulary.build(CORPUS, max_size=3)  # max_size counts </s> and <unk>
    assert v.tokens == ("</s>", "<unk>", "a") and v.counts == (3, 4, 3)
    assert Vocabulary.build(CORPUS, max_size=2).tokens == ("</s>", "<unk>")
    # a tie at the cut goes by string: c before d
    assert Vocabulary.build(CORPUS, max_size=5).tokens[-1] == "c"


def test_encode_pads_with_zero_and_maps_unknown_tokens_to_one():
    v = Vocabulary.build(CORPUS)
    batch = v.encode([["a", "z", "d"], [], ["<unk>"], ["c"]])
    assert batch.tokens.tolist() == [[2, 1, 5], [0, 0, 0], [1, 0, 0], [4, 0, 0]]
    assert batch.lengths.tolist() == [3, 0, 1, 1]
    assert batch.tokens.dtype == torch.long and isinstance(batch, Sequences)
    assert v.encode([]).tokens.shape == (0, 0)


def test_encode_then_decode_gives_the_sentences_back_with_unknowns_as_unk():
    v = Vocabulary.build(CORPUS)
    sents = [["a", "b", "c", "d"], ["d"], ["x", "a"]]
    assert v.decode(v.encode(sents)) == [["a", "b", "c", "d"], ["d"], ["<unk>", "a"]]
    assert v.to_text(v.encode(sents)) == ["a b c d", "d", "<unk> a"]
    assert v.decode(v.encode(sents)[1:]) == [["d"], ["<unk>", "a"]]


def test_char_level_keeps_the_space_as_a_token_and_joins_without_separators():
    v = Vocabulary.build(["ab a", "b"], level="char")  # a str is a sequence of characters
    assert v.tokens == ("</s>", "<unk>", "a", "b", " ") and v.counts == (2, 0, 2, 2, 1)
    batch = v.encode(["a b", list("ba?")])
    assert batch.tokens.tolist() == [[2, 4, 3], [3, 2, 1]]
    assert v.to_text(batch) == ["a b", "ba<unk>"]
    assert v.decode(batch)[0] == ["a", " ", "b"]
    assert "<s>" not in v  # no marker strings at character level


def test_encode_stream_puts_the_boundary_after_every_sentence():
    v = Vocabulary.build(CORPUS)
    ids = v.encode_stream([["a", "b"], [], ["d", "x"]])
    assert ids.tolist() == [2, 3, 0, 0, 5, 1, 0]
    assert v.encode_stream([["a", "b"], ["d"]], boundary=False).tolist() == [2, 3, 5]
    assert v.decode_stream(ids) == ["a", "b", "</s>", "</s>", "d", "<unk>", "</s>"]
    assert v.encode_stream([]).tolist() == []


def test_from_file_builds_the_same_vocabulary_as_build(tmp_path):
    path = tmp_path / "t.txt"
    path.write_text("b a c\n\na b\nd a\n", encoding="utf-8")
    assert Vocabulary.from_file(path) == Vocabulary.build(CORPUS)
    assert Vocabulary.from_file(path, level="char", min_count=2).tokens == ("</s>", "<unk>", " ", "a", "b")


# --- files ----------------------------------------------------------------------------------


def test_save_then_load_round_trips_words_with_counts(tmp_path):
    v = Vocabulary.build(CORPUS + [["back\\slash", "ünï"]])  # a word never holds whitespace (see the char test)
    path = v.save(tmp_path / "vocab.txt")
    assert Vocabulary.load(path) == v
    lines = path.read_text(encoding="utf-8").split("\n")
    assert lines[0] == f"#ebms-vocabulary version=1 level=word size={len(v)} counts=yes"
    assert lines[1:4] == ["</s>\t4", "<unk>\t0", "a\t3"] and "back\\\\slash\t1" in lines
    assert not list(tmp_path.glob("*.part"))


def test_save_then_load_round_trips_characters_including_newline(tmp_path):
    v = Vocabulary.build(["a\nb\r\t\\ c"], level="char")
    assert Vocabulary.load(v.save(tmp_path / "chars.txt")) == v
    bare = Vocabulary(["x", "\n"], level="char")  # no counts
    back = Vocabulary.load(bare.save(tmp_path / "bare.txt"))
    assert back == bare and back.counts is None and back.tokens[3] == "\n"


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("hello\nworld\n", r"not an ebms vocabulary file: line 1 is 'hello'"),
        ("", r"not an ebms vocabulary file: line 1 is ''"),
        ("#ebms-vocabulary version=2 level=word size=2 counts=no\n</s>\n<unk>\n", r"unsupported vocabulary header"),
        ("#ebms-vocabulary version=1 level=word size=4 counts=no\n</s>\n<unk>\na\n", r"size=4 but the file holds 3"),
        ("#ebms-vocabulary version=1 level=word size=3 counts=yes\n</s>\t1\n<unk>\t0\na\tmany\n",
         r"line 4 'a\\tmany': expected 'token<TAB>count'"),
        ("#ebms-vocabulary version=1 level=word size=3 counts=no\n</s>\n<unk>\na\\q\n", r"line 4 .*unknown escape \\q"),
        ("#ebms-vocabulary version=1 level=word size=2 counts=no\n<unk>\n</s>\n", r"lines 2-3 must hold '</s>'"),
        ("#ebms-vocabulary version=1 level=word size=4 counts=no\n</s>\n<unk>\na\na\n", r"'a' appears twice"),
        ("#ebms-vocabulary version=1 level=char size=3 counts=no\n</s>\n<unk>\nab\n", r"single characters"),
    ],
)
def test_load_refuses_a_wrong_or_damaged_file_naming_it(tmp_path, content, message):
    path = tmp_path / "v.txt"
    path.write_text(content, encoding="utf-8")
    with pytest.raises(DataError, match=r"v\.txt: .*" + message):
        Vocabulary.load(path)


def test_load_names_a_missing_or_binary_file(tmp_path):
    with pytest.raises(FileNotFoundError, match=r"nope\.txt: no such vocabulary file; write one with Vocabulary.save"):
        Vocabulary.load(tmp_path / "nope.txt")
    (tmp_path / "bin").write_bytes(b"\xff\xfe\x00")
    with pytest.raises(DataError, match=r"bin: not a vocabulary file \(not UTF-8 text"):
        Vocabulary.load(tmp_path / "bin")


# --- argument checks ------------------------------------------------------------------------


def test_build_rejects_bad_arguments_with_messages():
    with pytest.raises(ValueError, match=r"min_count: expected an int >= 1; got 0"):
        Vocabulary.build(CORPUS, min_count=0)
    with pytest.raises(ValueError, match=r"min_count: expected an int >= 1; got 0"):
        Vocabulary.from_file("unused.txt", min_count=0)
    with pytest.raises(ValueError, match=r"max_size: expected an int >= 2; got 1"):
        Vocabulary.build(CORPUS, max_size=1)
    with pytest.raises(ValueError, match=r"level: expected 'word' or 'char'; got 'words'"):
        Vocabulary.build(CORPUS, level="words")
    with pytest.raises(ValueError, match=r"sentences: no tokens to build a vocabulary from \(2 sentences\)"):
        Vocabulary.build([[], []])
    with pytest.raises(TypeError, match=r"got a str at sentence 1 \(split it first"):
        Vocabulary.build([["a"], "b c"])
    with pytest.raises(ValueError, match=r"'</s>' occurs 2 times inside sentences; it is the boundary"):
        Vocabulary.build([["a", "</s>"], ["</s>"]])
    with pytest.raises(ValueError, match=r"'<s>' occurs 1 times"):
        Vocabulary.build([["<s>", "a"]])
    with pytest.raises(ValueError, match=r"level='char' takes single characters; got the token 'ab'"):
        Vocabulary.build([["ab"]], level="char")


@pytest.mark.parametrize("token", ["a b", "tab\tin", "new\nline", "nbsp\u00a0x", " lead", ""])
def test_build_refuses_word_tokens_holding_whitespace_or_empty(token):
    # such a token cannot round-trip through to_text (joined with spaces) nor through an ARPA file
    with pytest.raises(ValueError, match=r"^sentences: a word-level token is a non-empty string without whitespace; "
                                         rf"got {_re.escape(repr(token))} \(2 times\): split each line with "
                                         r"str\.split\(\), or use level='char'$"):
        Vocabulary.build([["a", token], [token, "b"]])
    with pytest.raises(ValueError, match=r"tokens: a word-level token is a string without whitespace" if token else
                       r"tokens: expected non-empty strings"):
        Vocabulary(["a", token])
    assert Vocabulary.build([list("a b")], level="char").tokens[2:] == (" ", "a", "b")  # a character may be a space


def test_build_refuses_tokens_that_are_not_strings_or_hold_nul():
    with pytest.raises(TypeError, match=r"sentences: expected tokens that are strings; got 3 \(int, 1 times\)"):
        Vocabulary.build([["a", 3]])  # type: ignore[list-item]
    with pytest.raises(ValueError, match=r"sentences: the token 'a\\x00b' holds a NUL character \(1 times\)"):
        Vocabulary.build([["a\0b"]])
    with pytest.raises(ValueError, match=r"tokens: a NUL character cannot be a token"):
        Vocabulary(["\0"], level="char")


def test_load_refuses_a_word_vocabulary_file_holding_a_token_with_whitespace(tmp_path):
    path = tmp_path / "v.txt"
    path.write_text("#ebms-vocabulary version=1 level=word size=3 counts=no\n</s>\n<unk>\ntab\\tin\n", encoding="utf-8")
    with pytest.raises(DataError, match=r"v\.txt: tokens: a word-level token is a string without whitespace .* "
                                        r"got 'tab\\tin' for id 2 \(line = id \+ 2\)"):
        Vocabulary.load(path)


def test_encode_and_decode_reject_bad_input_with_messages():
    v = Vocabulary.build(CORPUS)
    with pytest.raises(ValueError, match=r"sentence 1, position 2 is a boundary marker \(</s> or <s>, id 0\)"):
        v.encode([["a"], ["a", "b", "<s>"]])
    with pytest.raises(ValueError, match=r"sentence 0, position 1 is a boundary marker"):
        v.encode_stream([["a", "</s>"]])
    with pytest.raises(TypeError, match=r"got a str at sentence 0"):
        v.encode(["a b"])
    with pytest.raises(ValueError, match=r"batch: token ids must be in \[0, 5\] for this vocabulary; got min 2, max 9"):
        v.decode(Sequences.from_lists([[2, 9]]))
    with pytest.raises(TypeError, match=r"batch: expected a Sequences; got list"):
        v.decode([[2]])
    with pytest.raises(ValueError, match=r"ids: expected a 1-D integer tensor"):
        v.decode_stream(torch.zeros(2, 2, dtype=torch.long))


def test_constructor_rejects_bad_tokens_and_counts_with_messages():
    with pytest.raises(ValueError, match=r"tokens: 'a' appears twice \(ids 2 and 3\)"):
        Vocabulary(["a", "a"])
    with pytest.raises(ValueError, match=r"tokens: '<unk>' is reserved \(id 1\); got it again for id 2"):
        Vocabulary(["<unk>"])
    with pytest.raises(ValueError, match=r"tokens: expected non-empty strings; got '' for id 3"):
        Vocabulary(["a", ""])
    with pytest.raises(ValueError, match=r"tokens: level='char' takes single characters; got 'ab' for id 2"):
        Vocabulary(["ab"], level="char")
    with pytest.raises(ValueError, match=r"counts: expected one count per id \(3\); got 1"):
        Vocabulary(["a"], counts=[1])
    with pytest.raises(ValueError, match=r"counts\[2\]: expected an int >= 0; got -1"):
        Vocabulary(["a"], counts=[1, 0, -1])


# --- batching -------------------------------------------------------------------------------


def _toy_batch() -> Sequences:
    lengths = [3, 1, 4, 1, 5, 9, 2, 6, 5, 3, 5]
    return Sequences.from_lists([[i + 1] * n for i, n in enumerate(lengths)])


def test_sentence_batches_hold_every_sentence_once_with_similar_lengths():
    data = _toy_batch()
    batches = sentence_batches(data, 3, generator=torch.Generator().manual_seed(0))
    seen = sorted(tuple(row) for b in batches for row in b.tolist())
    assert seen == sorted(tuple(row) for row in data.tolist())
    runs = [sorted(b.lengths.tolist()) for b in batches]
    assert sorted(r for run in runs for r in run) == sorted(data.lengths.tolist())
    for b in batches:  # trimmed to the longest, padding zero
        assert b.max_length == int(b.lengths.max()) and int(b.tokens[~b.mask()].abs().sum()) == 0
    # buckets are runs of the sorted lengths: [1 1 2] [3 3 4] [5 5 5] [6 9]
    assert sorted(runs) == [[1, 1, 2], [3, 3, 4], [5, 5, 5], [6, 9]]


def test_sentence_batches_are_reproducible_and_unshuffled_is_shortest_first():
    data = _toy_batch()
    one = sentence_batches(data, 4, generator=torch.Generator().manual_seed(3))
    two = sentence_batches(data, 4, generator=torch.Generator().manual_seed(3))
    assert [b.tolist() for b in one] == [b.tolist() for b in two]
    plain = sentence_batches(data, 4, shuffle=False)
    assert [b.lengths.tolist() for b in plain] == [[1, 1, 2, 3], [3, 4, 5, 5], [5, 6, 9]]
    with pytest.raises(TypeError, match=r"data: expected a Sequences batch"):
        sentence_batches([[1]], 2)
    with pytest.raises(ValueError, match=r"batch_size: expected an int >= 1; got 0"):
        sentence_batches(data, 0)


def test_bptt_batches_cut_the_stream_into_contiguous_rows_exactly():
    out = bptt_batches(torch.arange(21), 2, 4)  # 21 // 2 = 10 columns, id 20 dropped
    assert [(x.tolist(), y.tolist()) for x, y in out] == [
        ([[0, 1, 2, 3], [10, 11, 12, 13]], [[1, 2, 3, 4], [11, 12, 13, 14]]),
        ([[4, 5, 6, 7], [14, 15, 16, 17]], [[5, 6, 7, 8], [15, 16, 17, 18]]),
        ([[8], [18]], [[9], [19]]),
    ]
    assert len(bptt_batches(torch.arange(21), 2, 4, drop_last=True)) == 2
    assert bptt_batches(torch.arange(6, dtype=torch.int32), 3, 5)[0][0].tolist() == [[0], [2], [4]]


def test_bptt_targets_cover_every_id_but_each_rows_first_exactly_once():
    n, b, t = 1000, 7, 13
    out = bptt_batches(torch.arange(n), b, t)
    targets = torch.cat([y.reshape(-1) for _, y in out])
    cols = n // b
    expected = torch.arange(b * cols).view(b, cols)[:, 1:].reshape(-1)
    assert torch.equal(targets.sort().values, expected.sort().values)
    for x, y in out:
        assert x.shape == y.shape and x.dtype == torch.long
        assert torch.equal(y[:, :-1], x[:, 1:])


def test_bptt_batches_reject_bad_arguments_with_messages():
    with pytest.raises(ValueError, match=r"ids: a stream of 5 tokens is too short for batch_size=3 \(needs at least 6"):
        bptt_batches(torch.arange(5), 3, 2)
    with pytest.raises(ValueError, match=r"ids: expected a 1-D stream \(N,\); got shape \(2, 3\)"):
        bptt_batches(torch.zeros(2, 3, dtype=torch.long), 1, 2)
    with pytest.raises(TypeError, match=r"ids: expected an integer tensor of token ids; got torch.float32"):
        bptt_batches(torch.zeros(8), 2, 2)
    with pytest.raises(ValueError, match=r"bptt: expected an int >= 1; got 0"):
        bptt_batches(torch.arange(8), 2, 0)
    with pytest.raises(ValueError, match=r"batch_size: expected an int >= 1; got 0"):
        bptt_batches(torch.arange(8), 0, 2)


def test_continuation_pairs_cut_each_longer_sentence_after_its_prefix() -> None:
    from ebms.data.text import continuation_pairs

    x = Sequences.from_lists([[5, 6], [5, 6, 7], [1, 2, 3, 4, 5, 6], [9, 8, 7, 6]])
    prefix, cont = continuation_pairs(x, 2, 3)
    assert prefix.tolist() == [[5, 6], [1, 2], [9, 8]]  # the sentence of length 2 has no continuation
    assert cont.tolist() == [[7], [3, 4, 5], [7, 6]]  # at most 3 tokens; shorter where the sentence ends
    assert cont.lengths.tolist() == [1, 3, 2] and int(cont.tokens[0, 1:].abs().sum()) == 0
    with pytest.raises(ValueError, match="^horizon: expected an int >= 1; got 0"):
        continuation_pairs(x, 2, 0)


def test_replace_one_token_changes_exactly_one_token_of_each_sentence_to_another_id() -> None:
    from ebms.data.text import replace_one_token

    x = Sequences.from_lists([[1], [2, 3], [4, 5, 6, 7]] * 200)
    bad = replace_one_token(x, 8, generator=torch.Generator().manual_seed(0))
    assert torch.equal(bad.lengths, x.lengths) and bool((bad.tokens[~x.mask()] == 0).all())
    changed = bad.tokens != x.tokens
    assert changed.sum(1).tolist() == [1] * x.batch_size
    assert bool((bad.tokens[changed] >= 1).all() and (bad.tokens[changed] <= 7).all())
    # every other id is reached, and the position covers the whole sentence
    assert set(bad.tokens[2::3][changed[2::3]].tolist()) == set(range(1, 8)) and \
        set(changed[2::3].float().argmax(1).tolist()) == {0, 1, 2, 3}
    with pytest.raises(ValueError, match="^x: sentence 1 is empty"):
        replace_one_token(Sequences.from_lists([[1], []]), 8)
    with pytest.raises(ValueError, match="^vocab_size: expected an int >= 3; got 2"):
        replace_one_token(x, 2)


def test_batch_helpers_refuse_ids_outside_the_vocabulary_and_wrong_inputs():
    from ebms.data.text import continuation_pairs, length_windows, replace_one_token, unigram_probs

    x = Sequences.from_lists([[2, 3], [4, 7]])
    # unigram_probs used to return a longer vector than V (bincount grows to the largest id)
    with pytest.raises(ValueError, match=r"^x: token ids must be below the vocabulary size 5; got 7 at sequence 1, "
                                         r"position 1$"):
        unigram_probs(x, 5)
    assert unigram_probs(x, 8).shape == (8,)
    with pytest.raises(ValueError, match=r"^x: token ids must be below the vocabulary size 5"):
        replace_one_token(x, 5)
    for call in (lambda: unigram_probs([[2]], 5), lambda: continuation_pairs([[2, 3]], 1, 1),
                 lambda: replace_one_token(torch.ones(2, 2), 5), lambda: length_windows([[2]], 0)):
        with pytest.raises(TypeError, match=r"^x: expected a Sequences batch"):
            call()
    with pytest.raises(ValueError, match=r"^x: expected at least one sentence to draw batches from; got none"):
        length_windows(Sequences.from_lists([]), 0)
    with pytest.raises(TypeError, match=r"^seed: expected an int; got 0.5"):
        length_windows(x, 0.5)


def test_encode_refuses_ids_in_place_of_tokens_and_decode_refuses_float_ids():
    v = Vocabulary.build(CORPUS)
    # every int would have become <unk> (id 1) without a word
    with pytest.raises(TypeError, match=r"^sentences: sentence 1 holds 2 \(int\), not a token string; encode takes "
                                        r"token strings"):
        v.encode([["a"], [2, 3]])
    with pytest.raises(TypeError, match=r"^ids: expected a 1-D integer tensor; got dtype torch.float32"):
        v.decode_stream(torch.tensor([2.0, 3.0]))
    assert v.encode([["a", "zzz"]]).tolist() == [[2, 1]]  # an unknown string is still <unk>


def test_unigram_probs_counts_one_end_per_sentence_when_asked():
    from ebms.data.text import unigram_probs

    x = Sequences.from_lists([[2, 3, 3], [4]])  # tokens 2:1, 3:2, 4:1 plus add-one over ids 1..5
    p = unigram_probs(x, 6)
    want = torch.tensor([0, 1, 2, 3, 2, 1], dtype=torch.float64)
    assert torch.equal(p, want / want.sum())
    q = unigram_probs(x, 6, end=True)  # </s> twice, plus one
    want[0] = 3
    assert torch.equal(q, want / want.sum())
