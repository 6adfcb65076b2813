"""Private: reading sentences from text (:func:`read_sentences`, :func:`iter_sentences`, the splitter).

Public names are re-exported by :mod:`ebms.data.text`, whose docstring describes the formats.
"""

from __future__ import annotations

import codecs
import io
import os
import re
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import TextIO, cast

from ebms._checks import check_int
from ebms.data._limits import check_max_bytes, file_size
from ebms.errors import DataError, LimitExceeded

__all__ = [
    "ABBREVIATIONS",
    "LEVELS",
    "MAX_SENTENCE_CHARS",
    "MAX_TEXT_BYTES",
    "check_level",
    "iter_sentences",
    "read_sentences",
    "sentences_from_lines",
    "split_sentences",
    "tokenize",
]

#: Token levels: ``"word"`` (whitespace-separated tokens) and ``"char"`` (characters, space included).
LEVELS = ("word", "char")
#: Default ``max_bytes`` of :func:`read_sentences`: the largest file read whole, 1 GiB (use
#: :func:`iter_sentences` beyond it).
MAX_TEXT_BYTES = 1 << 30
#: Default ``max_sentence_chars`` of the readers: the longest line (or, with the splitter, the longest
#: pending sentence) in characters, 16 Mi. A longer one is most likely running text or a binary file,
#: and one sentence of that length costs gigabytes once tokenised.
MAX_SENTENCE_CHARS = 1 << 24
_READER = "read_sentences"

# A candidate sentence end: terminators, optional closing quotes or brackets, then whitespace.
_END = re.compile(r"[.!?]+[\"'\u201d\u2019)\]]*\s+")
_OPENERS = "\"'\u201c\u2018([-"
_TAIL = ".!?\"'\u201d\u2019)] "
#: Words whose final period does not end a sentence (compared in lower case, without the period).
ABBREVIATIONS = frozenset({"mr", "mrs", "ms", "dr", "prof", "st", "jr", "sr", "vs", "e.g", "i.e", "cf", "fig"})


def check_level(level: object) -> str:
    if level not in LEVELS:
        raise ValueError(f"level: expected 'word' or 'char'; got {level!r}")
    return str(level)


def tokenize(text: str, level: str, lower: bool = False) -> list[str]:
    """Tokens of one sentence: ``text.split()`` (word) or the characters of the text with runs of
    whitespace collapsed to one space and the ends stripped (char)."""
    if lower:
        text = text.lower()
    words = text.split()
    return words if level == "word" else list(" ".join(words))


def sentences_from_lines(lines: Iterable[str], level: str, lower: bool) -> list[list[str]]:
    """One sentence per non-blank line; equal word strings are shared (about 5x less memory)."""
    if level == "char":
        return [chars for line in lines if (chars := tokenize(line, level, lower))]
    shared: dict[str, str] = {}
    keep = shared.setdefault
    out = []
    for line in lines:
        words = (line.lower() if lower else line).split()
        if words:
            out.append([keep(w, w) for w in words])
    return out


def _check_limit(max_sentence_chars: object) -> int:
    """``max_sentence_chars`` as an int >= 1, the default :data:`MAX_SENTENCE_CHARS` read at call time."""
    return MAX_SENTENCE_CHARS if max_sentence_chars is None else check_int(
        max_sentence_chars, "max_sentence_chars", minimum=1)


def check_line(line: str, number: int, where: str, limit: int) -> None:
    """The one check every line read goes through: at most ``limit`` characters (the line break not
    counted) and no NUL character.

    Raises:
        ebms.errors.LimitExceeded: a longer line (naming the file, the line and the limit).
        ebms.errors.DataError: a NUL character (a binary file, or a text in UTF-16/32 read as UTF-8).
    """
    if "\0" in line:
        raise DataError(f"{where}: line {number} holds a NUL character (column {line.index(chr(0)) + 1}): not a text "
                        "file in this encoding (a binary file, or UTF-16/UTF-32 text: pass encoding= the file's "
                        "encoding)")
    if len(line.rstrip("\r\n")) > limit:
        raise LimitExceeded(f"{where}: line {number} is longer than {limit} characters (the limit "
                            f"max_sentence_chars={limit}); is it running text? pass sentence_split=True, or break it "
                            "into lines (or raise max_sentence_chars)")


class _Splitter:
    """Incremental sentence splitter over lines of running text (see :func:`split_sentences`)."""

    def __init__(self, where: str, limit: int | None = None) -> None:
        self.buf, self.scan_from, self.where = "", 0, where
        self.limit = MAX_SENTENCE_CHARS if limit is None else limit

    def feed(self, line: str) -> list[str]:
        line = line.strip()
        if not line:
            return self.flush()
        if self.buf:
            self.buf += " "
        self.buf += line
        out, start = [], 0
        for m in _END.finditer(self.buf, self.scan_from):
            if self._ends(m):
                out.append(self.buf[start:m.end()].strip())
                start = m.end()
        self.buf = self.buf[start:]
        if len(self.buf) > self.limit:
            raise LimitExceeded(f"{self.where}: a sentence runs past {self.limit} characters (the limit "
                                f"max_sentence_chars={self.limit}) without an end the splitter recognises; put one "
                                "sentence per line and pass sentence_split=False")
        # candidates in the trailing run of terminators wait for the next line
        self.scan_from = len(self.buf.rstrip(_TAIL))
        return out

    def _ends(self, m: re.Match[str]) -> bool:
        nxt = self.buf[m.end()]
        if not (nxt.isupper() or nxt.isdigit() or nxt in _OPENERS):
            return False
        if self.buf[m.start()] == "." and (m.start() + 1 == len(self.buf) or self.buf[m.start() + 1] != "."):
            word = self.buf[: m.start()].rsplit(None, 1)[-1].lstrip(_OPENERS) if m.start() else ""
            if (len(word) == 1 and word.isalpha()) or word.lower() in ABBREVIATIONS:
                return False
        return True

    def flush(self) -> list[str]:
        text, self.buf, self.scan_from = self.buf.strip(), "", 0
        return [text] if text else []


def split_sentences(text: str) -> list[str]:
    """Split running text into sentences with a simple rule-based splitter.

    Rules: a blank line (paragraph break) always ends a sentence; line breaks inside a paragraph
    are spaces. Inside a paragraph a sentence ends after a run of ``.``, ``!`` or ``?`` (with
    any closing quotes or brackets) followed by whitespace, when the next character is an
    upper-case letter, a digit or an opening quote/bracket/dash. A single period after one
    letter (an initial, ``J. Smith``) or after a word in :data:`ABBREVIATIONS` (``Mr.``,
    ``e.g.``) does not end a sentence. Nothing else is known (no other abbreviations, no
    lower-case sentence starts): for serious work split with a dedicated tool and give one
    sentence per line. Cost: linear in the text.

    Example:
        >>> split_sentences("Mr. Smith came. He left!\\nDid he?  Yes.\\n\\nnew paragraph")
        ['Mr. Smith came.', 'He left!', 'Did he?', 'Yes.', 'new paragraph']
    """
    if not isinstance(text, str):
        raise TypeError(f"text: expected a str; got {type(text).__name__}")
    splitter, out = _Splitter("text"), []
    for line in text.split("\n"):
        out += splitter.feed(line)
    return out + splitter.flush()


def _check_source(source: object, encoding: str, who: str) -> tuple[str, Path | None]:
    """``(name for messages, path or None for an open stream)``; raises on a missing file."""
    try:
        codecs.lookup(encoding)
    except (LookupError, TypeError):
        raise ValueError(f"encoding: unknown text encoding {encoding!r}; use a Python codec name such as "
                         "'utf-8' or 'latin-1'") from None
    if isinstance(source, io.TextIOBase):
        return str(getattr(source, "name", "<stream>")), None
    if not isinstance(source, (str, os.PathLike)):
        raise TypeError(f"path: expected a file path or an open text stream; got {type(source).__name__}"
                        + (" (open binary files in text mode: open(path, encoding=...))"
                           if isinstance(source, (bytes, io.IOBase)) else ""))
    path = Path(source).expanduser()
    if path.is_dir():
        raise IsADirectoryError(f"{path}: is a folder; {who} reads one text file (one sentence per line)")
    if not path.exists():
        raise FileNotFoundError(f"{path}: no such file; {who} reads a text file (one sentence per line): "
                                "check the path")
    return str(path), path


def _lines(stream: TextIO, where: str, limit: int) -> Iterator[str]:
    """The stream's lines, each through :func:`check_line` (read at most ``limit + 2`` characters at a
    time, so memory stays bounded), a leading BOM dropped."""
    number = 0
    while True:
        try:
            line = stream.readline(limit + 2)  # the longest line accepted, plus "\r\n"
        except UnicodeDecodeError as err:
            raise DataError(f"{where}: not valid {err.encoding} text after line {number} ({err.reason}); pass "
                            "encoding= the file's encoding (e.g. encoding='latin-1')") from None
        if not line:
            return
        number += 1
        if number == 1:
            line = line.lstrip("\ufeff")
        check_line(line, number, where, limit)
        yield line


def _iterate(source: object, path: Path | None, where: str, level: str, lower: bool, sentence_split: bool,
             encoding: str, limit: int) -> Iterator[list[str]]:
    stream: TextIO = open(path, encoding=encoding) if path is not None else cast(TextIO, source)  # noqa: SIM115
    count = 0
    try:
        if sentence_split:
            splitter = _Splitter(where, limit)
            for line in _lines(stream, where, limit):
                for text in splitter.feed(line):
                    count += 1
                    yield tokenize(text, level, lower)
            for text in splitter.flush():
                count += 1
                yield tokenize(text, level, lower)
        else:
            for line in _lines(stream, where, limit):
                tokens = tokenize(line, level, lower)
                if tokens:
                    count += 1
                    yield tokens
    finally:
        if path is not None:
            stream.close()
    if count == 0:
        raise DataError(f"{where}: no sentences (the file is empty or holds only blank lines); give a text file "
                        "with one sentence per line")


def iter_sentences(path: str | os.PathLike[str] | TextIO, *, level: str = "word", lower: bool = False,
                   sentence_split: bool = False, encoding: str = "utf-8",
                   max_sentence_chars: int | None = None) -> Iterator[list[str]]:
    """Stream the sentences of a text file, one token list at a time (files larger than memory).

    The file is read line by line as the iterator advances and closed when it ends (or is
    closed); memory is one line (one pending sentence with ``sentence_split``), at most
    ``max_sentence_chars`` characters. Arguments as in :func:`read_sentences`; ``path``
    may also be an open text stream (``sys.stdin``, ``gzip.open(p, "rt")``), which is left open.
    The argument checks and the missing-file check happen at the call; decoding errors and the
    empty-file error when iteration reaches them.

    Yields:
        ``list[str]``: the tokens of one sentence (never empty).
    """
    level = check_level(level)
    limit = _check_limit(max_sentence_chars)
    where, file = _check_source(path, encoding, "iter_sentences")
    return _iterate(path, file, where, level, bool(lower), bool(sentence_split), encoding, limit)


def read_sentences(path: str | os.PathLike[str] | TextIO, *, level: str = "word", lower: bool = False,
                   sentence_split: bool = False, encoding: str = "utf-8",
                   max_bytes: int = MAX_TEXT_BYTES, max_sentence_chars: int | None = None) -> list[list[str]]:
    """Read a text file into sentences (lists of tokens).

    Formats: one sentence per line (blank lines are skipped), or with ``sentence_split=True``
    running text cut by :func:`split_sentences`. Tokens: ``level="word"`` splits on whitespace
    (the text is assumed tokenised, as PTB is); ``level="char"`` gives the characters with each
    run of whitespace collapsed to one space (a token) and the ends stripped. ``lower`` lower-cases
    first. A leading byte-order mark is dropped.

    Args:
        path: a text file, or an open text stream.
        level: ``"word"`` or ``"char"``.
        lower: lower-case the text.
        sentence_split: the file is running text; split it into sentences.
        encoding: the file's encoding (a Python codec name).
        max_bytes: the largest file read whole (default :data:`MAX_TEXT_BYTES`, 1 GiB);
            :func:`iter_sentences` streams larger ones.
        max_sentence_chars: the longest line (with ``sentence_split``, the longest sentence) in
            characters; ``None``: :data:`MAX_SENTENCE_CHARS` (16 Mi). Both readers check every line
            the same way, before it is tokenised.

    Returns:
        The sentences in file order, each a non-empty ``list[str]``.

    Raises:
        FileNotFoundError: no such file (``IsADirectoryError`` for a folder).
        ebms.errors.DataError: an empty file, text that is not valid in ``encoding``, or a line
            holding a NUL character (each message names the file and the line).
        ebms.errors.LimitExceeded: a file above ``max_bytes``, a line above ``max_sentence_chars``.
        ValueError: a bad ``level``, ``encoding`` or limit.
    """
    level = check_level(level)
    check_max_bytes(max_bytes)
    limit = _check_limit(max_sentence_chars)
    where, file = _check_source(path, encoding, "read_sentences")
    if file is not None:
        file_size(file, max_bytes, _READER)
    if file is not None and not sentence_split:
        try:
            text = file.read_bytes().decode(encoding)
        except UnicodeDecodeError as err:
            bad = file.read_bytes()[: err.start].count(b"\n") + 1
            raise DataError(f"{where}: line {bad} is not valid {encoding} ({err.reason}); pass encoding= the "
                            "file's encoding (e.g. encoding='latin-1')") from None
        lines = text.lstrip("\ufeff").replace("\r\n", "\n").replace("\r", "\n").split("\n")
        if "\0" in text or max(map(len, lines)) > limit:  # locate the first bad line, through the one check
            for number, line in enumerate(lines, 1):
                check_line(line, number, where, limit)
        out = sentences_from_lines(lines, level, bool(lower))
        if not out:
            raise DataError(f"{where}: no sentences (the file is empty or holds only blank lines); give a text "
                            "file with one sentence per line")
        return out
    return list(_iterate(path, file, where, level, bool(lower), bool(sentence_split), encoding, limit))
