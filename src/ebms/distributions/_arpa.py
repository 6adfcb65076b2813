r"""ARPA files of :class:`~ebms.distributions.BackoffNGram` (private).

The ARPA back-off format (Doug Paul's, as SRILM and KenLM write it)::

    \data\
    ngram 1=<count>
    ngram 2=<count>

    \1-grams:
    <log10 p>   <w>         [<log10 backoff>]
    ...
    \2-grams:
    <log10 p>   <w1> <w2>   [<log10 backoff>]
    ...
    \end\

Fields are separated by ASCII whitespace (spaces, tabs), as KenLM reads them; the backoff is
optional (0) and absent at the highest order. ``<s>`` is a unigram with probability ``-99`` (it is
never an outcome) and the backoff weight of the sentence start; ``</s>`` is never a context.
Inside ebms both are id 0 (``<s>`` as the first word of an n-gram, ``</s>`` as the last) and logs
are natural: values are converted here, at the file boundary.

Whitespace inside a token (the space of a character-level model, a tab or newline token) cannot
stand in a field, so each whitespace character (``str.isspace``) is written ``<U+hhhh>``, its code
point in upper-case hex (at least four digits): the space token is the word ``<U+0020>``, ``"a b"``
is ``a<U+0020>b``. Reading turns ``<U+hhhh>`` of a whitespace code point back into the character;
a token that already holds such a spelling cannot be written (it would read back as another
token). To query such a file with KenLM, spell the tokens the same way
(``" ".join(t.replace(" ", "<U+0020>") for t in tokens)``).

The file is read as UTF-8 (gzip, bzip2 and xz compression are recognised by their first bytes),
line by line. Errors are :class:`~ebms.errors.DataError` naming the file and the line (and the
byte offset of a byte that is not UTF-8 or is NUL).
"""

from __future__ import annotations

import bz2
import gzip
import lzma
import math
import os
import re
from collections.abc import Callable, Iterator, Sequence
from typing import IO, Any, NoReturn

import torch
from torch import Tensor

from ebms.distributions._backoff_tables import MAX_LOG_PROB
from ebms.distributions._kneser_ney import Tables
from ebms.errors import DataError

LN10 = math.log(10.0)
_COUNT = re.compile(r"ngram\s+(\d+)\s*=\s*(\d+)")
_FIELD_SPACE = re.compile(r"[ \t\n\r\f\v]+")
_ASCII_SPACE = " \t\n\r\f\v"
_ESCAPED = re.compile(r"<U\+([0-9A-F]{4,6})>")
_COMPRESSED: dict[bytes, Callable[..., Any]] = {
    b"\x1f\x8b": gzip.open, b"BZh": bz2.open, b"\xfd7zXZ\x00": lzma.open}
#: the largest log10 probability read: a probability of at most 1 + 1e-6 (``MAX_LOG_PROB`` in natural logs)
_MAX_LOG10 = MAX_LOG_PROB / LN10


def _is_escape(hit: re.Match[str]) -> bool:
    code = int(hit[1], 16)
    return code <= 0x10FFFF and chr(code).isspace()


def escape_word(word: str) -> str:
    """``word`` as an ARPA field: each whitespace character written ``<U+hhhh>`` (module docstring)."""
    if word.isascii() and not any(ch in _ASCII_SPACE for ch in word):
        return word
    return "".join(f"<U+{ord(ch):04X}>" if ch.isspace() else ch for ch in word)


def unescape_word(field: str) -> str:
    """The token an ARPA field stands for (``<U+hhhh>`` of a whitespace code point -> that character)."""
    if "<U+" not in field:
        return field
    return _ESCAPED.sub(lambda hit: chr(int(hit[1], 16)) if _is_escape(hit) else hit[0], field)


def check_words(words: object, vocab_size: int | None, name: str = "words") -> list[str]:
    """Distinct non-empty strings, ``words[0] == "</s>"``, no ``<s>`` (``V`` of them if given), none
    holding the ``<U+hhhh>`` spelling of a whitespace character (it could not be told apart)."""
    words = getattr(words, "tokens", words)  # an ebms.data.text.Vocabulary gives its tokens
    if isinstance(words, (str, bytes)) or not isinstance(words, Sequence):
        raise TypeError(f"{name}: expected a list of word strings (id order, words[0] = '</s>') or a Vocabulary; "
                        f"got {type(words).__name__}")
    words = list(words)
    if vocab_size is not None and len(words) != vocab_size:
        raise ValueError(f"{name}: expected {vocab_size} words (one per id); got {len(words)}")
    if not words or words[0] != "</s>":
        raise ValueError(f"{name}: id 0 is the sentence boundary, so words[0] must be '</s>'; got "
                         f"{words[0] if words else None!r}")
    seen: set[str] = set()
    for i, w in enumerate(words):
        if not isinstance(w, str) or not w or w == "<s>" or (i and w == "</s>"):
            raise ValueError(f"{name}: words[{i}] must be a non-empty string other than '<s>' and '</s>'; "
                             f"got {w!r}")
        hit = next((h for h in _ESCAPED.finditer(w) if _is_escape(h)), None) if "<U+" in w else None
        if hit is not None:
            raise ValueError(f"{name}: words[{i}] = {w!r} holds {hit[0]!r}, the ARPA spelling of the whitespace "
                             f"character {chr(int(hit[1], 16))!r}, so it would read back as another token; "
                             "rename that token")
        if "\0" in w:
            raise ValueError(f"{name}: words[{i}] = {w!r} holds a NUL character, which a text file cannot carry")
        if w in seen:
            raise ValueError(f"{name}: {w!r} appears twice (words[{i}])")
        seen.add(w)
    return words


def write_arpa(path: str | os.PathLike[str], words: list[str], tables: Tables, digits: int) -> None:
    """Write ``tables`` (natural logs) as ARPA (log10, ``digits`` significant digits)."""
    V, order = len(words), len(tables.log_probs)
    fmt = f"{{:.{digits}g}}".format
    sizes = [V + 1] + [int(k.numel()) for k in tables.keys[1:] if k is not None]
    with open(path, "w", encoding="utf-8") as fh:
        fh.write("\\data\\\n" + "".join(f"ngram {m}={n}\n" for m, n in enumerate(sizes, 1)))
        words = [escape_word(w) for w in words]
        names = ["<s>", *words[1:]]  # row -> name as a context (row 0 of order 1 is <s>)
        for m in range(1, order + 1):
            lp = [fmt(v) for v in (tables.log_probs[m - 1] / LN10).tolist()]
            bo = [fmt(v) for v in (tables.backoffs[m - 1] / LN10).tolist()] if m < order else None
            if m == 1:
                grams = list(words)  # row 0 is </s> as an outcome; <s> gets its own line
                start = "-99\t<s>" + (f"\t{bo[0]}" if bo is not None and bo[0] not in ("0", "-0") else "") + "\n"
                if bo is not None:
                    bo[0] = ""
            else:
                key = tables.keys[m - 1]
                assert key is not None
                parent = torch.div(key, V, rounding_mode="floor")
                grams = [f"{names[p]} {words[w]}" for p, w in zip(parent.tolist(), (key - parent * V).tolist())]
                start = ""
            fh.write(f"\n\\{m}-grams:\n{start}")
            if bo is None:
                fh.writelines(f"{p}\t{g}\n" for p, g in zip(lp, grams))
            else:
                fh.writelines(f"{p}\t{g}\t{b}\n" if b not in ("", "0", "-0") else f"{p}\t{g}\n"
                              for p, g, b in zip(lp, grams, bo))
            if m > 1:
                names = grams
        fh.write("\n\\end\\\n")


def read_arpa(path: str | os.PathLike[str], words: list[str] | None) -> tuple[
        list[str], list[Tensor], list[Tensor], list[Tensor], list[list[int]], int]:
    """Parse an ARPA file: ``(words, ngrams (N_m, m), log_probs, backoffs (natural), line numbers, the line
    of <s>)`` (0 when the file lists no ``<s>``).

    With ``words`` ``None`` the vocabulary is the file's: ``</s>``, ``<unk>`` (when listed), then
    the other unigrams in file order.

    Raises:
        FileNotFoundError: the file cannot be opened.
        ebms.errors.DataError: anything malformed (naming the file and the line).
    """
    where = os.fspath(path)
    try:
        fh = open(path, "rb")  # noqa: SIM115 (closed below)
    except OSError as err:
        raise FileNotFoundError(f"{where}: cannot read the ARPA file ({err.strerror})") from None
    with fh:
        magic = fh.read(6)
        fh.seek(0)
        opener = next((op for sig, op in _COMPRESSED.items() if magic.startswith(sig)), None)
        if opener is None:
            return _Parser(where, fh, words).parse()
        parser = _Parser(where, opener(fh, "rb"), words)
        try:
            return parser.parse()
        except (OSError, EOFError, lzma.LZMAError) as err:  # a corrupt or truncated compressed stream
            raise DataError(f"{where}:{parser.no + 1}: the compressed file is corrupt or truncated ({err})") from None


class _Parser:
    def __init__(self, where: str, fh: IO[bytes], words: list[str] | None) -> None:
        self.where, self.lines, self.no, self.offset = where, self._decoded(fh), 0, 0
        self.words = words
        self.index: dict[str, int] = {w: i for i, w in enumerate(words)} if words is not None else {}
        self.seen: set[int] = set()
        self.start_line = 0

    def fail(self, message: str, no: int | None = None) -> NoReturn:
        raise DataError(f"{self.where}:{self.no if no is None else no}: {message}")

    def _decoded(self, fh: IO[bytes]) -> Iterator[str]:
        """The file's lines as text; a NUL byte or a byte sequence that is not UTF-8 raises."""
        for raw in fh:
            self.no += 1
            if b"\0" in raw:
                at = self.offset + raw.index(b"\0")
                self.fail(f"a NUL byte at byte offset {at}: not an ARPA text file (a "
                          "binary model such as KenLM's build_binary output? give the ARPA text file)")
            if self.no == 1 and raw.startswith(b"\xef\xbb\xbf"):  # a UTF-8 byte-order mark
                raw, self.offset = raw[3:], 3
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError as err:
                self.fail(f"not UTF-8 text: byte 0x{raw[err.start]:02x} at byte offset {self.offset + err.start} "
                          f"({err.reason}); ARPA files are read as UTF-8: convert the file "
                          "(e.g. iconv -f latin1 -t utf-8)")
            self.offset += len(raw)
            yield line

    def next_line(self) -> str | None:
        for line in self.lines:
            return line.strip(_ASCII_SPACE)
        return None

    def next_nonblank(self, what: str) -> str:
        while (s := self.next_line()) is not None:
            if s:
                return s
        raise DataError(f"{self.where}: the file ends before {what} (after line {self.no})")

    def parse(self) -> tuple[list[str], list[Tensor], list[Tensor], list[Tensor], list[list[int]], int]:
        while (s := self.next_line()) != "\\data\\":
            if s is None:
                raise DataError(f"{self.where}: not an ARPA file: no '\\data\\' line")
        counts: list[int] = []
        while (s := self.next_nonblank("the n-gram sections")).startswith("ngram"):
            hit = _COUNT.fullmatch(s)
            if hit is None or int(hit[1]) != len(counts) + 1:
                self.fail(f"expected 'ngram {len(counts) + 1}=<count>'; got {s[:80]!r}")
            counts.append(int(hit[2]))
        if not counts:
            self.fail(f"expected 'ngram 1=<count>' after '\\data\\'; got {s[:80]!r}")
        order, out = len(counts), []
        for m in range(1, order + 1):
            if s != f"\\{m}-grams:":
                hint = "" if s.startswith("\\") else f"more {m - 1}-grams than the {counts[m - 2]} announced, or "
                self.fail(f"{hint}expected the section header '\\{m}-grams:'; got {s[:80]!r}")
            section = self.section(m, order, counts[m - 1])
            out.append(self.vocabulary(section) if m == 1 else section)
            s = self.next_nonblank("'\\end\\'" if m == order else f"the '\\{m + 1}-grams:' section")
        if s != "\\end\\":
            hint = "" if s.startswith("\\") else f"more {order}-grams than the {counts[-1]} announced, or "
            self.fail(f"{hint}expected '\\end\\' after the {order}-grams; got {s[:80]!r}")
        assert self.words is not None
        ngrams = [torch.tensor(ids, dtype=torch.long).reshape(len(lp), m) for m, (ids, lp, _, _) in enumerate(out, 1)]
        lps = [torch.tensor(lp, dtype=torch.float64) * LN10 for _, lp, _, _ in out]
        bows = [torch.tensor(bo, dtype=torch.float64) * LN10 for _, _, bo, _ in out]
        return self.words, ngrams, lps, bows, [no for *_, no in out], self.start_line

    def section(self, m: int, order: int, count: int) -> tuple[list[int], list[float], list[float], list[int]]:
        ids: list[int] = []
        lps: list[float] = []
        bows: list[float] = []
        nos: list[int] = []
        for i in range(count):
            s = self.next_line()
            if not s or s.startswith("\\"):
                self.fail(f"the {m}-grams section has {i} entries; '\\data\\' announced {count}",
                          None if s is not None else self.no)
            parts = s.split() if s.isascii() else _FIELD_SPACE.split(s)
            if len(parts) != m + 1 and (len(parts) != m + 2 or m == order):
                self.fail(f"expected a {m}-gram line: log10 probability, {m} word(s)"
                          f"{', optional log10 backoff' if m < order else ''}; got {s[:80]!r}")
            try:
                lp, bo = float(parts[0]), float(parts[m + 1]) if len(parts) == m + 2 else 0.0
            except ValueError:
                self.fail(f"expected numbers for the log10 probability and backoff; got {s[:80]!r}")
            if math.isnan(lp) or math.isnan(bo) or lp == math.inf or bo == math.inf:
                self.fail(f"expected log10 values that are not NaN or +inf; got {s[:80]!r}")
            if lp > _MAX_LOG10:
                self.fail(f"the log10 probability {parts[0]} is above 0 (a probability above 1); an ARPA "
                          f"probability is at most 1 (log10 <= 0): the file is not a normalised model")
            if m == 1:
                ids.append(self.unigram(unescape_word(parts[1])))
            else:
                ids.extend(self.word_id(unescape_word(w), j, m) for j, w in enumerate(parts[1 : m + 1]))
            lps.append(lp)
            bows.append(bo)
            nos.append(self.no)
        return ids, lps, bows, nos

    def unigram(self, w: str) -> int:
        if w in ("<s>", "</s>"):
            key = -1 if w == "<s>" else 0
        elif w in self.index:
            key = self.index[w]
        elif self.words is not None:
            self.fail(f"the word {w!r} is not in the vocabulary ({len(self.words)} words)")
        else:
            key = self.index[w] = -2 - len(self.index)  # file order; final ids in vocabulary()
        if key in self.seen:
            self.fail(f"the unigram {w!r} is listed twice")
        self.seen.add(key)
        if key == -1:
            self.start_line = self.no
        return key

    def word_id(self, w: str, j: int, m: int) -> int:
        if (w == "<s>" and j == 0) or (w == "</s>" and j == m - 1):
            return 0
        if w in ("<s>", "</s>"):
            self.fail(f"{w!r} may only {'begin' if w == '<s>' else 'end'} an n-gram; got it as word {j + 1} of {m}")
        i = self.index.get(w)
        if i is None:
            self.fail(f"the word {w!r} has no unigram entry")
        return i

    def vocabulary(self, unigrams: tuple[list[int], list[float], list[float], list[int]]) -> tuple[
            list[int], list[float], list[float], list[int]]:
        """Fix the ids (the file's order when no words were given) and fold ``<s>``'s backoff into row 0."""
        ids, lps, bows, nos = unigrams
        if self.words is None:
            order = sorted(self.index, key=lambda w: (w != "<unk>", -self.index[w]))
            self.words = ["</s>", *order]
            remap = {self.index[w]: i for i, w in enumerate(order, 1)}
            ids = [remap.get(v, v) for v in ids]
            self.index = {w: i for i, w in enumerate(self.words)}
        if 0 not in ids:
            raise DataError(f"{self.where}: the unigrams do not list '</s>'")
        start_bow = bows[ids.index(-1)] if -1 in ids else 0.0
        keep = [i for i, v in enumerate(ids) if v != -1]
        ids, nos = [ids[i] for i in keep], [nos[i] for i in keep]
        lps, bows = [lps[i] for i in keep], [bows[i] for i in keep]
        bows[ids.index(0)] = start_bow
        listed = set(ids)
        missing = [w for i, w in enumerate(self.words) if i not in listed]
        if missing:
            raise DataError(f"{self.where}: {len(missing)} vocabulary word(s) have no unigram entry (e.g. "
                             f"{missing[0]!r}); an ARPA file must list every word")
        return ids, lps, bows, nos
