"""WordVocabulary: word and character ids for neural taggers."""

from __future__ import annotations

from ebms.data.conll import Sentence
from ebms.data.vocab import MAX_WORD_CHARS, WordVocabulary


def _sentences(*words: str) -> list[Sentence]:
    return [Sentence(((w, "X", "O"),)) for w in words]


def test_word_vocabulary_maps_digits_and_rare_words() -> None:
    vocab = WordVocabulary(_sentences("the", "the", "1999", "2001", "rare"), min_count=2)
    assert vocab.words[:2] == ["<pad>", "<unk>"] and set(vocab.words[2:]) == {"the", "0000"}
    (words, chars) = vocab.encode([Sentence((("1984", "X", "O"), ("rare", "X", "O")))], chars=True)
    assert words.tolist() == [[vocab.word_index["0000"], WordVocabulary.UNK]]
    assert chars.shape == (1, 2, 4) and int(chars[0, 1, 0]) == vocab.char_index["r"]


def test_ids_do_not_depend_on_the_order_of_the_sentences() -> None:
    words = ("b", "a", "b", "c", "a", "c", "c")
    assert WordVocabulary(_sentences(*words)).words == WordVocabulary(_sentences(*reversed(words))).words
    assert WordVocabulary(_sentences(*words)).words == ["<pad>", "<unk>", "c", "a", "b"]  # by count, then name


def test_encode_pads_with_zero_and_cuts_long_words() -> None:
    vocab = WordVocabulary(_sentences("x" * 30, "x" * 30))
    (words,) = vocab.encode([Sentence((("y", "X", "O"),)), Sentence((("x" * 30, "X", "O"), ("y", "X", "O")))],
                            chars=False)
    assert words.tolist() == [[WordVocabulary.UNK, WordVocabulary.PAD], [2, WordVocabulary.UNK]]
    _, chars = vocab.encode(_sentences("x" * 30), chars=True)
    assert chars.shape == (1, 1, MAX_WORD_CHARS)
