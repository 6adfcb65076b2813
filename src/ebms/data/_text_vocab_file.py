"""Private: the vocabulary file format (``Vocabulary.save`` / ``Vocabulary.load``).

A UTF-8 text file::

    #ebms-vocabulary version=1 level=word size=5 counts=yes
    </s>	2
    <unk>	0
    a	3
    b	1
    c	1

Line ``i + 2`` holds the token of id ``i``; ``\\``, newline, carriage return and tab inside a
token are written ``\\\\``, ``\\n``, ``\\r``, ``\\t`` (so a character vocabulary can hold the
newline); with ``counts=yes`` a tab and the training count follow.
"""

from __future__ import annotations

import os
import re
import tempfile
from pathlib import Path
from typing import Any

from ebms.errors import DataError

__all__ = ["MAGIC", "read_vocabulary", "write_vocabulary"]

MAGIC = "#ebms-vocabulary"
_ESCAPES = {"\\": "\\\\", "\n": "\\n", "\r": "\\r", "\t": "\\t"}
_UNESCAPES = {v[1]: k for k, v in _ESCAPES.items()}
_NEEDS_ESCAPE = re.compile(r"[\\\n\r\t]")
_ESCAPED = re.compile(r"\\(.?)", re.S)


def _escape(token: str) -> str:
    return _NEEDS_ESCAPE.sub(lambda m: _ESCAPES[m.group()], token)


def _unescape(text: str) -> str:
    def one(m: re.Match[str]) -> str:
        if m.group(1) not in _UNESCAPES:
            raise ValueError(f"unknown escape \\{m.group(1)} (known: \\\\, \\n, \\r, \\t)")
        return _UNESCAPES[m.group(1)]
    return _ESCAPED.sub(one, text)


def write_vocabulary(vocab: Any, path: Path) -> Path:
    """Write ``vocab`` to ``path`` (through a temporary file in the same folder, then a rename)."""
    has = vocab.counts is not None
    lines = [f"{MAGIC} version=1 level={vocab.level} size={len(vocab)} counts={'yes' if has else 'no'}"]
    for i, tok in enumerate(vocab.tokens):
        lines.append(f"{_escape(tok)}\t{vocab.counts[i]}" if has else _escape(tok))
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".part", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8", newline="\n") as f:
            f.write("\n".join(lines) + "\n")
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    return path


def read_vocabulary(cls: Any, path: Path) -> Any:
    """Parse a file written by :func:`write_vocabulary` into ``cls(tokens, level=, counts=)``."""
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no such vocabulary file; write one with Vocabulary.save(path)")
    try:
        lines = path.read_bytes().decode("utf-8").split("\n")
    except UnicodeDecodeError as err:
        raise DataError(f"{path}: not a vocabulary file (not UTF-8 text: {err.reason} at byte {err.start}); "
                        "write one with Vocabulary.save") from None
    head = dict(f.split("=", 1) for f in lines[0].split()[1:] if "=" in f) if lines[0].startswith(MAGIC) else {}
    if set(head) != {"version", "level", "size", "counts"}:
        raise DataError(f"{path}: not an ebms vocabulary file: line 1 is {lines[0][:60]!r}, expected "
                        f"'{MAGIC} version=1 level=... size=... counts=...' (write one with Vocabulary.save)")
    if head["version"] != "1" or head["level"] not in ("word", "char") or head["counts"] not in ("yes", "no") \
            or not head["size"].isdigit():
        raise DataError(f"{path}: unsupported vocabulary header {lines[0][:120]!r} (this ebms reads version=1, "
                        "level=word|char, counts=yes|no and a size)")
    size, has = int(head["size"]), head["counts"] == "yes"
    body = lines[1:-1] if lines[-1] == "" else lines[1:]
    if len(body) != size:
        raise DataError(f"{path}: the header says size={size} but the file holds {len(body)} token lines "
                        "(truncated or edited?); write it again with Vocabulary.save")
    tokens, counts = [], []
    for number, line in enumerate(body, 2):
        try:
            fields = line.split("\t")
            if len(fields) != (2 if has else 1) or (has and not (fields[1].isascii() and fields[1].isdigit())):
                raise ValueError("expected 'token<TAB>count'" if has else "expected one token (no tab)")
            tokens.append(_unescape(fields[0]))
            counts.append(int(fields[1]) if has else 0)
        except ValueError as err:
            raise DataError(f"{path}: line {number} {line[:60]!r}: {err}") from None
    if tokens[:2] != [cls.BOUNDARY_TOKEN, cls.UNK_TOKEN]:
        raise DataError(f"{path}: lines 2-3 must hold '</s>' and '<unk>' (ids 0 and 1); got {tokens[:2]}")
    try:
        return cls(tokens[2:], level=head["level"], counts=counts if has else None)
    except ValueError as err:
        raise DataError(f"{path}: {err} (line = id + 2)") from None
