"""Private: :class:`Vocabulary`, token <-> id maps for language data (re-exported by ebms.data.text)."""

from __future__ import annotations

import os
from array import array
from collections import Counter
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import TextIO

import torch
from torch import Tensor

from ebms._checks import check_int
from ebms.data._text_read import check_level, iter_sentences
from ebms.data._text_vocab_file import read_vocabulary, write_vocabulary
from ebms.sequences import Sequences

__all__ = ["Vocabulary"]


def _has_space(token: str) -> bool:
    """``token`` holds a whitespace character (``str.split`` would cut it)."""
    return token.split() != [token]

class Vocabulary:
    r"""Token ids of language data: ``0`` the sentence boundary, ``1`` ``<unk>``, then by count.

    Id ``0`` is ``</s>`` as an outcome and ``<s>`` in histories (the ``boundary=0`` convention of
    :class:`ebms.distributions.NGram`); it never appears inside a sentence. Id ``1`` is
    ``<unk>``, an ordinary token (PTB's own ``<unk>`` maps to it). Ids ``2, 3, ...`` are the
    training tokens by decreasing count, ties by string, so the ids do not depend on the order
    of the sentences. ``len(vocab)`` is ``V``, the size every model takes.

    Args:
        tokens: the ordinary tokens in id order (ids ``2, 3, ...``): non-empty, distinct, not
            ``</s>``, ``<s>`` or ``<unk>``; single characters when ``level="char"``.
        level: ``"word"`` or ``"char"`` (decides :meth:`to_text`'s separator).
        counts: optional training count per id (length ``V``): ``counts[0]`` the number of
            sentences, ``counts[1]`` the tokens mapped to ``<unk>``.

    Attributes:
        tokens: id -> token, ``V`` entries (``tokens[0] = "</s>"``, ``tokens[1] = "<unk>"``).
        index: token -> id (also ``"<s>" -> 0`` at word level).
        counts: ``tuple[int, ...]`` of length ``V``, or ``None``.

    Example:
        >>> v = Vocabulary.build([["a", "b", "a"], ["c", "a"]], min_count=1)
        >>> v.tokens, v.encode([["a", "z"]]).tolist()
        (('</s>', '<unk>', 'a', 'b', 'c'), [[2, 1]])
    """

    BOUNDARY, UNK = 0, 1
    BOUNDARY_TOKEN, START_TOKEN, UNK_TOKEN = "</s>", "<s>", "<unk>"

    def __init__(self, tokens: Iterable[str], *, level: str = "word", counts: Sequence[int] | None = None) -> None:
        self.level = check_level(level)
        self.tokens: tuple[str, ...] = (self.BOUNDARY_TOKEN, self.UNK_TOKEN, *tokens)
        reserved = {self.BOUNDARY_TOKEN: 0, self.START_TOKEN: 0, self.UNK_TOKEN: 1}
        self.index: dict[str, int] = dict(reserved) if level == "word" else {}
        for i, tok in enumerate(self.tokens[2:], 2):
            if not isinstance(tok, str) or not tok:
                raise ValueError(f"tokens: expected non-empty strings; got {tok!r} for id {i}")
            if level == "word" and _has_space(tok):
                raise ValueError(f"tokens: a word-level token is a string without whitespace (to_text joins tokens "
                                 f"with spaces); got {tok!r} for id {i}")
            if "\0" in tok:
                raise ValueError(f"tokens: a NUL character cannot be a token (it is not text); got {tok!r} for id {i}")
            if level == "char" and len(tok) != 1:
                raise ValueError(f"tokens: level='char' takes single characters; got {tok!r} for id {i}")
            if tok in reserved:
                raise ValueError(f"tokens: {tok!r} is reserved (id {reserved[tok]}); got it again for id {i}")
            if tok in self.index:
                raise ValueError(f"tokens: {tok!r} appears twice (ids {self.index[tok]} and {i})")
            self.index[tok] = i
        self.counts: tuple[int, ...] | None = None
        if counts is not None:
            counts = tuple(counts)
            if len(counts) != len(self.tokens):
                raise ValueError(f"counts: expected one count per id ({len(self.tokens)}); got {len(counts)}")
            for i, c in enumerate(counts):
                check_int(c, f"counts[{i}]", minimum=0)
            self.counts = counts

    # --- construction -------------------------------------------------------------------------
    @classmethod
    def build(cls, sentences: Iterable[Sequence[str]], *, level: str = "word", min_count: int = 1,
              max_size: int | None = None) -> Vocabulary:
        """Count the tokens of ``sentences`` and keep the frequent ones.

        A token gets its own id when it occurs at least ``min_count`` times; then only the
        ``max_size - 2`` most frequent (ties by string) are kept, so ``len(vocab) <= max_size``
        counting ``</s>`` and ``<unk>``. Everything dropped (and any literal ``<unk>``) counts
        toward ``<unk>``. Cost: one pass, memory one counter (the sentences may be a stream).

        Raises:
            ValueError: ``min_count < 1``, ``max_size < 2``, no tokens, a boundary marker
                (``</s>``, ``<s>``) inside a sentence, an empty token, a token holding whitespace
                at ``level="word"`` (it could not round-trip through :meth:`to_text`) or a NUL
                character, or a multi-character token at ``level="char"``.
            TypeError: a sentence given as one ``str`` at ``level="word"``, or a token that is
                not a ``str``.
        """
        level = check_level(level)
        check_int(min_count, "min_count", minimum=1)
        if max_size is not None:
            check_int(max_size, "max_size", minimum=2)
        counter: Counter[str] = Counter()
        n = 0
        for s in sentences:
            if level == "word" and isinstance(s, str):
                raise TypeError(f"sentences: expected lists of tokens; got a str at sentence {n} "
                                "(split it first, e.g. line.split(), or use level='char')")
            counter.update(s)
            n += 1
        if not counter:
            raise ValueError(f"sentences: no tokens to build a vocabulary from ({n} sentences)")
        for marker in (cls.BOUNDARY_TOKEN, cls.START_TOKEN):
            if level == "word" and marker in counter:
                raise ValueError(f"sentences: {marker!r} occurs {counter[marker]} times inside sentences; it is "
                                 "the boundary (id 0), never a token: remove the markers (one sentence per line)")
        wrong = next((t for t in counter if not isinstance(t, str)), None)
        if wrong is not None:
            raise TypeError(f"sentences: expected tokens that are strings; got {wrong!r} ({type(wrong).__name__}, "
                            f"{counter[wrong]} times)")
        if level == "char":
            bad = next((t for t in counter if len(t) != 1), None)
            if bad is not None:
                raise ValueError(f"sentences: level='char' takes single characters; got the token {bad!r} "
                                 "(read the text with level='char')")
        else:
            bad = next((t for t in counter if not t or _has_space(t)), None)
            if bad is not None:
                raise ValueError(f"sentences: a word-level token is a non-empty string without whitespace; got "
                                 f"{bad!r} ({counter[bad]} times): split each line with str.split(), or use "
                                 "level='char'")
        bad = next((t for t in counter if "\0" in t), None)
        if bad is not None:
            raise ValueError(f"sentences: the token {bad!r} holds a NUL character ({counter[bad]} times): not text")
        unk = counter.pop(cls.UNK_TOKEN, 0)
        kept = sorted((t for t, c in counter.items() if c >= min_count), key=lambda t: (-counter[t], t))
        if max_size is not None:
            kept = kept[: max_size - 2]
        unk += sum(counter.values()) - sum(counter[t] for t in kept)
        return cls(kept, level=level, counts=(n, unk, *(counter[t] for t in kept)))

    @classmethod
    def from_file(cls, path: str | os.PathLike[str] | TextIO, *, level: str = "word", lower: bool = False,
                  sentence_split: bool = False, encoding: str = "utf-8", min_count: int = 1,
                  max_size: int | None = None, max_sentence_chars: int | None = None) -> Vocabulary:
        """:meth:`build` over :func:`~ebms.data.text.iter_sentences` (a file larger than memory).

        Arguments as in those two; the file is streamed, so memory is the counter only.
        """
        check_int(min_count, "min_count", minimum=1)
        sentences = iter_sentences(path, level=level, lower=lower, sentence_split=sentence_split, encoding=encoding,
                                   max_sentence_chars=max_sentence_chars)
        return cls.build(sentences, level=level, min_count=min_count, max_size=max_size)

    # --- lookup -------------------------------------------------------------------------------
    def __len__(self) -> int:
        return len(self.tokens)

    def __contains__(self, token: object) -> bool:
        return token in self.index

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Vocabulary):
            return NotImplemented
        return (self.level, self.tokens, self.counts) == (other.level, other.tokens, other.counts)

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"Vocabulary(level={self.level!r}, size={len(self)})"

    # --- encoding -----------------------------------------------------------------------------
    def _ids(self, sentences: Iterable[Sequence[str]]) -> tuple[Tensor, list[int]]:
        """``(all ids concatenated (N,) int64, lengths)``; ids gathered in a packed array (8 bytes each)."""
        get, flat, lengths = self.index.get, array("q"), []
        for n, s in enumerate(sentences):
            if self.level == "word" and isinstance(s, str):
                raise TypeError(f"sentences: expected lists of tokens; got a str at sentence {n} "
                                "(split it first, e.g. line.split())")
            ids = [get(t, 1) for t in s]
            if ids and not isinstance(s[0], str) and 1 in ids:  # e.g. ids given again: each would become <unk>
                bad = next(t for t in s if not isinstance(t, str))
                raise TypeError(f"sentences: sentence {n} holds {bad!r} ({type(bad).__name__}), not a token string; "
                                "encode takes token strings (ids need no encoding)")
            flat.extend(ids)
            lengths.append(len(ids))
        out = torch.frombuffer(flat, dtype=torch.long).clone() if flat else torch.zeros(0, dtype=torch.long)
        self._refuse_markers(out, lengths)
        return out, lengths

    def _refuse_markers(self, flat: Tensor, lengths: list[int]) -> None:
        if self.level != "word" or not bool((flat == 0).any()):
            return
        k = int((flat == 0).nonzero()[0])
        ends = torch.tensor(lengths).cumsum(0)
        n = int(torch.searchsorted(ends, k, right=True))
        pos = k - (int(ends[n - 1]) if n else 0)
        raise ValueError(f"sentences: sentence {n}, position {pos} is a boundary marker (</s> or <s>, id 0), "
                         "which never appears inside a sentence; remove the markers (one sentence per line)")

    def encode(self, sentences: Iterable[Sequence[str]], *, device: torch.device | str | None = None) -> Sequences:
        """Token lists -> a :class:`~ebms.sequences.Sequences` batch ``(B, T)`` (unknown -> ``1``, padding ``0``).

        At ``level="char"`` a sentence may be a ``str``. Cost: one dict lookup per token.
        """
        ids, lengths = self._ids(sentences)
        lens = torch.tensor(lengths, dtype=torch.long)
        width = max(lengths, default=0)
        tokens = torch.zeros(len(lengths), width, dtype=torch.long)
        tokens.masked_scatter_(torch.arange(width) < lens[:, None], ids)  # row-major, no index tensor
        out = Sequences(tokens, lens, validate=False)
        return out.to(device) if device is not None else out

    def encode_stream(self, sentences: Iterable[Sequence[str]], *, boundary: bool = True) -> Tensor:
        """Token lists -> one ``(N,)`` int64 stream, each sentence followed by ``0`` when ``boundary``.

        The running-text layout of truncated-BPTT language models (PTB's ``<eos>`` is our id 0);
        feed it to :func:`~ebms.data.text.bptt_batches`.
        """
        ids, lengths = self._ids(sentences)
        if not boundary:
            return ids
        lens = torch.tensor(lengths, dtype=torch.long)
        out = torch.zeros(len(ids) + len(lengths), dtype=torch.long)
        ends = (lens + 1).cumsum(0) - 1  # position of each sentence's boundary
        keep = torch.ones_like(out, dtype=torch.bool)
        keep[ends] = False
        out.masked_scatter_(keep, ids)
        return out

    # --- decoding -----------------------------------------------------------------------------
    def _check_ids(self, values: Tensor, name: str) -> None:
        if values.numel() and (int(values.min()) < 0 or int(values.max()) >= len(self)):
            raise ValueError(f"{name}: token ids must be in [0, {len(self) - 1}] for this vocabulary; got "
                             f"min {int(values.min())}, max {int(values.max())}")

    def decode(self, batch: Sequences) -> list[list[str]]:
        """A :class:`~ebms.sequences.Sequences` batch -> token lists (padding dropped)."""
        batch = Sequences.coerce(batch, name="batch", pairs=False, expected="a Sequences")
        self._check_ids(batch.tokens[batch.mask()], "batch")
        toks = self.tokens
        return [[toks[i] for i in row] for row in batch.tolist()]

    def decode_stream(self, ids: Tensor) -> list[str]:
        """A ``(N,)`` id stream -> tokens (boundaries appear as ``</s>``)."""
        if not isinstance(ids, Tensor) or ids.dim() != 1:
            raise ValueError(f"ids: expected a 1-D integer tensor; got {getattr(ids, 'shape', type(ids).__name__)}")
        if ids.dtype.is_floating_point or ids.is_complex() or ids.dtype == torch.bool:
            raise TypeError(f"ids: expected a 1-D integer tensor; got dtype {ids.dtype} (ids are never rounded)")
        self._check_ids(ids, "ids")
        return [self.tokens[i] for i in ids.tolist()]

    def to_text(self, batch: Sequences) -> list[str]:
        """Decoded sentences as strings: tokens joined by a space (word) or by nothing (char)."""
        sep = " " if self.level == "word" else ""
        return [sep.join(s) for s in self.decode(batch)]

    # --- files --------------------------------------------------------------------------------
    def save(self, path: str | os.PathLike[str]) -> Path:
        """Write a UTF-8 text file: a header line, then one token per line in id order.

        Format: ``#ebms-vocabulary version=1 level=<level> size=<V> counts=<yes|no>``, then
        ``V`` lines, line ``i + 2`` holding the token of id ``i`` (``\\``, newline, carriage
        return and tab escaped as ``\\\\``, ``\\n``, ``\\r``, ``\\t``), followed by a tab and its
        count when ``counts=yes``. The file is written to a temporary name and renamed.
        """
        return write_vocabulary(self, Path(path).expanduser())

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> Vocabulary:
        """Read a file written by :meth:`save`.

        Raises:
            FileNotFoundError: no such file.
            ebms.errors.DataError: not a vocabulary file, or a damaged one (the message names
                the file and the line).
        """
        return read_vocabulary(cls, Path(path).expanduser())
