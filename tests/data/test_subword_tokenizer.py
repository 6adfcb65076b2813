"""The subword adapter (ebms.data.subword): round trips, sizes, stored bytes, determinism, the vocabulary of units."""

from __future__ import annotations

import builtins
import random
from pathlib import Path

import pytest

pytest.importorskip("tokenizers")

from ebms.data.subword import (  # noqa: E402
    INSTALL,
    UNK_WORD,
    WORD_START,
    SubwordTokenizer,
    SubwordVocabulary,
    tokenizers_module,
)
from ebms.data.text import Vocabulary  # noqa: E402

WORDS = "the cat sat on mat dog log a and cats dogs at mall house tree river running jumped quickly".split()


def _sentences(n: int = 300, seed: int = 0) -> list[list[str]]:
    r = random.Random(seed)
    return [[r.choice(WORDS) for _ in range(r.randint(1, 9))] for _ in range(n)]


@pytest.fixture(scope="module", params=["bpe", "unigram"])
def tok(request: pytest.FixtureRequest) -> SubwordTokenizer:
    return SubwordTokenizer.train(_sentences(), 60, model=request.param)


def test_words_round_trip_through_units(tok: SubwordTokenizer) -> None:
    sents = _sentences(50, seed=1) + [["the", "<unk>", "cats"]]
    for s in sents:
        units = tok.units(s)
        assert tok.decode(units) == " ".join(s)
        assert sum(u.startswith(WORD_START) for u in units) == len(s)  # each word's first unit is marked, once
        assert all(u.split() == [u] for u in units)


def test_the_unk_word_is_one_unit_never_split_and_never_trained_on(tok: SubwordTokenizer) -> None:
    assert tok.units(["<unk>"]) == [UNK_WORD]
    assert "<" not in tok.tokenizer.get_vocab()  # training skipped the word <unk>


def test_bpe_has_the_requested_number_of_units_on_enough_text() -> None:
    for size in (40, 60, 80):
        assert SubwordTokenizer.train(_sentences(), size).size == size
    small = SubwordTokenizer.train([["ab"]], 500)
    assert small.size < 500  # a tiny text has fewer units to offer


def test_more_units_give_fewer_units_per_sentence() -> None:
    sents = _sentences(100, seed=3)
    counts = [sum(len(u) for u in SubwordTokenizer.train(_sentences(), n).split(sents)) for n in (30, 50, 80)]
    assert counts[0] > counts[1] > counts[2] >= sum(len(s) for s in sents)


@pytest.mark.parametrize("model", ["bpe", "unigram"])
def test_training_is_deterministic(model: str) -> None:
    a = [SubwordTokenizer.train(_sentences(), 60, model=model).to_bytes() for _ in range(4)]
    assert all(x == a[0] for x in a)


def test_stored_bytes_load_the_same_tokenizer(tok: SubwordTokenizer, tmp_path: Path) -> None:
    again = SubwordTokenizer.from_bytes(tok.to_bytes(), scheme="words")
    assert again == tok and again.to_bytes() == tok.to_bytes() and again.sha256() == tok.sha256()
    sents = _sentences(30, seed=4)
    assert again.split(sents) == tok.split(sents)
    (tmp_path / "tokenizer.json").write_bytes(tok.to_bytes())
    text = SubwordTokenizer.from_file(tmp_path / "tokenizer.json")
    assert text.scheme == "text" and text != tok  # same file, other scheme


def test_a_text_tokenizer_splits_the_sentence_as_one_string(tmp_path: Path) -> None:
    tk = tokenizers_module()
    t = tk.Tokenizer(tk.models.WordLevel({"the": 0, "cat": 1, "[UNK]": 2}, unk_token="[UNK]"))
    t.pre_tokenizer = tk.pre_tokenizers.Whitespace()
    t.decoder = tk.decoders.WordPiece()
    t.save(str(tmp_path / "tokenizer.json"))
    tok = SubwordTokenizer.from_file(tmp_path / "tokenizer.json")
    assert tok.split([["the", "cat"], ["cat", "zebra"]]) == [["the", "cat"], ["cat", "[UNK]"]]
    assert tok.decode(["the", "cat"]) == "the cat" and tok.decode(["the", "never-seen"]) == "the never-seen"


def test_bad_inputs_are_refused_with_the_argument_named(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="^size: "):
        SubwordTokenizer.train(_sentences(), 1)
    with pytest.raises(ValueError, match="^model: expected 'bpe' or 'unigram'"):
        SubwordTokenizer.train(_sentences(), 50, model="wordpiece")
    with pytest.raises(TypeError, match="^sentences: expected lists of words; got a str"):
        SubwordTokenizer.train(["the cat"], 50)
    with pytest.raises(ValueError, match="^sentences: no word"):
        SubwordTokenizer.train([["<unk>"], []], 50)
    with pytest.raises(FileNotFoundError):
        SubwordTokenizer.from_file(tmp_path / "none.json")
    with pytest.raises(ValueError, match="^not a tokenizer file"):
        SubwordTokenizer.from_bytes(b"{}")


def test_a_missing_tokenizers_package_is_one_line(monkeypatch: pytest.MonkeyPatch) -> None:
    real = builtins.__import__

    def fake(name: str, *args: object, **kwargs: object) -> object:
        if name == "tokenizers":
            raise ImportError("no tokenizers")
        return real(name, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(builtins, "__import__", fake)
    with pytest.raises(ImportError, match=r"^subword units need the tokenizers package: pip install 'ebms\[subword\]'$"):
        tokenizers_module()
    assert "\n" not in INSTALL


def test_the_vocabulary_of_units_counts_the_training_units(tok: SubwordTokenizer) -> None:
    sents = _sentences()
    v = SubwordVocabulary.build(tok, sents)
    plain = Vocabulary.build(tok.split(sents))
    assert v.tokens == plain.tokens and v.counts == plain.counts and v.level == "word"
    assert v == SubwordVocabulary(tok, plain.tokens[2:], counts=plain.counts) and v != plain
    x = v.encode(v.split([["the", "cats"], ["dogs"]]))
    assert v.to_text(x) == ["the cats", "dogs"]
    assert v.unknown(["never-seen", v.tokens[2]]) == 1
    other = SubwordTokenizer.train(_sentences(seed=9), 50)
    assert SubwordVocabulary(other, plain.tokens[2:], counts=plain.counts) != v  # another tokenizer


def test_a_models_ids_swap_zero_and_its_boundary(tmp_path: Path) -> None:
    tk = tokenizers_module()
    t = tk.Tokenizer(tk.models.WordLevel({"a": 0, "b": 1, "eos": 2, "c": 3}, unk_token="eos"))
    t.pre_tokenizer = tk.pre_tokenizers.Whitespace()
    v = SubwordVocabulary.fixed(SubwordTokenizer(t), 5, boundary_id=2)
    assert v.tokens == ("eos", "b", "a", "c", "<id 4>") and len(v) == 5
    assert v.encode(v.split([["a", "c", "b"]])).tokens.tolist() == [[2, 3, 1]]
    with pytest.raises(ValueError, match="^size: the tokenizer has ids up to 3"):
        SubwordVocabulary.fixed(SubwordTokenizer(t), 3, boundary_id=2)
