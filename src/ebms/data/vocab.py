"""Word and character ids for neural taggers, built from training sentences.

:class:`WordVocabulary` maps words (digits normalised to ``0``, case kept) and characters to
integer ids: ``0`` is padding, ``1`` the unknown word, then the words seen at least
``min_count`` times by decreasing count (ties alphabetically), so the ids do not depend on the
order of the sentences. Rare words train ``<unk>``, which is what unseen test words get.

Example::

    vocab = WordVocabulary(train_sentences)
    words, chars = vocab.encode(test_sentences, chars=True)   # (N, T), (N, T, L) int64
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Sequence

import torch
from torch import Tensor

from ebms.data.conll import Sentence

__all__ = ["MAX_WORD_CHARS", "MIN_WORD_COUNT", "WordVocabulary"]

#: a training word needs this many occurrences to get its own id (rarer ones train ``<unk>``).
MIN_WORD_COUNT = 2
#: characters kept per word for a character encoder.
MAX_WORD_CHARS = 20
_DIGIT = re.compile(r"\d")


class WordVocabulary:
    """Word and character ids: ``0`` padding, ``1`` unknown, then by decreasing training count.

    Words are normalised by mapping every digit to ``0``; case is kept. Building costs one pass
    over the training words.

    Args:
        sentences: the training sentences.
        min_count: occurrences a word needs for its own id.

    Attributes:
        words: id -> word (``words[0] = "<pad>"``, ``words[1] = "<unk>"``).
        chars: id -> character, the same way (every training character gets an id).
        word_index, char_index: the inverse maps.
    """

    PAD, UNK = 0, 1

    def __init__(self, sentences: Sequence[Sentence], *, min_count: int = MIN_WORD_COUNT) -> None:
        words = Counter(self.normalise(w) for s in sentences for w in s.words)
        chars = Counter(c for s in sentences for w in s.words for c in w)
        kept = sorted((w for w, n in words.items() if n >= min_count), key=lambda w: (-words[w], w))
        self.words = ["<pad>", "<unk>", *kept]
        self.chars = ["<pad>", "<unk>", *sorted(chars, key=lambda c: (-chars[c], c))]
        self.word_index = {w: i for i, w in enumerate(self.words)}
        self.char_index = {c: i for i, c in enumerate(self.chars)}

    @staticmethod
    def normalise(word: str) -> str:
        """``word`` with every digit replaced by ``0``."""
        return _DIGIT.sub("0", word)

    def encode(self, sentences: Sequence[Sentence], *, chars: bool) -> tuple[Tensor, ...]:
        """``words (N, T)`` and, with ``chars``, ``chars (N, T, L)`` (``L <= MAX_WORD_CHARS``); padded with 0."""
        t = max((len(s) for s in sentences), default=0)
        w = torch.zeros(len(sentences), t, dtype=torch.long)
        for i, s in enumerate(sentences):
            w[i, : len(s)] = torch.tensor([self.word_index.get(self.normalise(x), self.UNK) for x in s.words])
        if not chars:
            return (w,)
        length = min(MAX_WORD_CHARS, max((len(x) for s in sentences for x in s.words), default=0))
        c = torch.zeros(len(sentences), t, length, dtype=torch.long)
        for i, s in enumerate(sentences):
            for j, x in enumerate(s.words):
                c[i, j, : min(len(x), length)] = torch.tensor([self.char_index.get(ch, self.UNK) for ch in x[:length]])
        return w, c
