"""CoNLL column files (CoNLL-2000 chunking, CoNLL-2002 NER) and the IOB / IOBES tag schemes.

A column file holds one token per line, its fields separated by whitespace
(or ``sep``); a blank line ends a sentence; ``-DOCSTART-`` lines mark article
boundaries. :func:`read_conll` reads any such file (a path or an iterable of
lines) into a list of :class:`Sentence`.

:func:`load_conll2000` and :func:`load_conll2002` read the NLTK packaging of
the shared-task data straight from the zip (no extraction), or from a folder
holding the member files. Where they look: ``root`` when given (a zip file or
a folder), else ``data_root() / "conll2000"`` (resp. ``"conll2002"``); see
:mod:`ebms.data.paths`. With ``verify=True`` the zip's md5 must equal the NLTK
index value (:data:`MD5`), else :class:`~ebms.data.mnist.ChecksumError` naming
the path. The NLTK files are UTF-8 (the original CoNLL-2002 release was
latin-1; pass ``encoding="latin-1"`` for such a copy).

Resources: a zip's md5 is computed in 1 MiB blocks, a member's declared size is checked against
``max_bytes`` (:data:`MAX_CONLL_BYTES`) before it is read, and it is decompressed with that cap,
so a zip bomb stops at the limit (:class:`~ebms.errors.LimitExceeded`) whether or not
``verify`` is on.

Tag schemes (chunk = ``(type, start, end)``, ``end`` exclusive, token indices):

* IOB2/BIO: ``B-T`` begins a chunk, ``I-T`` continues it, ``O`` is outside.
* IOBES: adds ``E-T`` (last token of a multi-token chunk) and ``S-T`` (single token).

:func:`bio_to_spans` reads chunks with the boundary rules of the ``conlleval``
script, so loose IOB1 input is accepted: an ``I-T`` after ``O`` or after a
chunk of another type starts a new chunk. Cost: O(L) per sentence. :func:`to_iob2` rewrites any
of the schemes as strict IOB2, and :func:`tag_names` lists a corpus's tags with ``O`` first (the
order a tagger's tag ids follow: id 0 is ``O``).

References:
    Tjong Kim Sang & Buchholz (2000), "Introduction to the CoNLL-2000 Shared Task: Chunking".
    Tjong Kim Sang (2002), "Introduction to the CoNLL-2002 Shared Task: Language-Independent NER".
    Ratinov & Roth (2009), "Design Challenges and Misconceptions in Named Entity Recognition" (IOBES).

Example:
    >>> bio_to_spans(["B-NP", "I-NP", "O", "I-VP"])
    [('NP', 0, 2), ('VP', 3, 4)]
    >>> iob_to_iobes(["B-NP", "I-NP", "O", "B-PP"])
    ['B-NP', 'E-NP', 'O', 'S-PP']
"""

from __future__ import annotations

import hashlib
import zipfile
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from ebms.data._limits import BLOCK, check_max_bytes, check_size, file_size, read_capped
from ebms.data.mnist import ChecksumError
from ebms.data.paths import data_root
from ebms.errors import DataError

__all__ = [
    "CONLL2000_COLUMNS",
    "CONLL_NAMES",
    "MAX_CONLL_BYTES",
    "MD5",
    "Sentence",
    "bio_to_spans",
    "iob_to_iobes",
    "iobes_to_iob",
    "load_conll",
    "load_conll2000",
    "load_conll2002",
    "parse_tag",
    "read_conll",
    "spans_to_tags",
    "tag_names",
    "to_iob2",
]

#: md5 of the NLTK zips (``nltk_data`` ``index.xml``; checked in ``shared/data/README.md``).
MD5 = {"conll2000.zip": "9529b285edd5fe47271da69df1052301", "conll2002.zip": "67bb4ca75fa81544d42a159524726e78"}
CONLL2000_COLUMNS = ("word", "pos", "chunk")
#: Default ``max_bytes``: the largest zip, column file or uncompressed zip member read, 256 MiB
#: (the NLTK members are at most 3.3 MB); raise it with ``max_bytes=`` (``data.max_mb`` on the
#: command line).
MAX_CONLL_BYTES = 256 << 20
_READER = "load_conll2000/load_conll2002"
_DOCSTART = "-DOCSTART-"
_PREFIXES = ("B", "I", "E", "S")


@dataclass(frozen=True)
class Sentence:
    """One sentence of a column file.

    Attributes:
        tokens: one tuple of fields per token (all rows have the same length).
        columns: names of the fields, or ``None`` when the file was read without names.
    """

    tokens: tuple[tuple[str, ...], ...]
    columns: tuple[str, ...] | None = None

    def __len__(self) -> int:
        return len(self.tokens)

    def column(self, key: str | int) -> list[str]:
        """The values of one column, by name (needs ``columns``) or by index (negative allowed)."""
        if isinstance(key, str):
            if self.columns is None or key not in self.columns:
                raise KeyError(f"key: expected one of the column names {self.columns}; got {key!r}")
            key = self.columns.index(key)
        return [row[key] for row in self.tokens]

    @property
    def words(self) -> list[str]:
        """The first column."""
        return self.column(0)

    @property
    def tags(self) -> list[str]:
        """The last column."""
        return self.column(-1)


def read_conll(
    path_or_lines: str | Path | Iterable[str],
    *,
    columns: Sequence[str] | None = None,
    sep: str | None = None,
    docstart: str = "skip",
    encoding: str = "utf-8",
    max_bytes: int = MAX_CONLL_BYTES,
) -> list[Sentence]:
    """Read a whitespace column file into sentences.

    Args:
        path_or_lines: a file path, or an iterable of lines (``str``; trailing newlines allowed).
        columns: names for the fields; every token line must then have exactly that many.
            Without names, every line must have as many fields as the file's first token line.
        sep: field separator (``None``: any run of whitespace).
        docstart: ``"skip"`` drops ``-DOCSTART-`` lines and ends the sentence there;
            ``"keep"`` keeps them as ordinary token lines.
        encoding: text encoding when a path is given.
        max_bytes: the largest file read when a path is given (default :data:`MAX_CONLL_BYTES`).

    Returns:
        The non-empty sentences, in file order.

    Raises:
        ebms.errors.DataError: a line with the wrong number of fields (names the line number)
            or an undecodable file (names the path).
        ebms.errors.LimitExceeded: a file above ``max_bytes``.
        ValueError: a bad ``docstart`` or ``columns``.
    """
    if docstart not in ("skip", "keep"):
        raise ValueError(f"docstart: expected 'skip' or 'keep'; got {docstart!r}")
    names = tuple(columns) if columns is not None else None
    if names is not None and (not names or not all(isinstance(c, str) and c for c in names)):
        raise ValueError(f"columns: expected a non-empty sequence of non-empty strings; got {columns!r}")
    where = "<lines>"
    if isinstance(path_or_lines, (str, Path)):
        where = str(path_or_lines)
        file_size(Path(path_or_lines), check_max_bytes(max_bytes), "read_conll")
        data = Path(path_or_lines).read_bytes()
        try:
            lines: Iterable[str] = data.decode(encoding).splitlines()
        except UnicodeDecodeError as err:
            bad = data[: err.start].count(b"\n") + 1
            raise DataError(f"{where}: not valid {encoding} at line {bad} ({err.reason}); pass encoding= the file's "
                            "encoding (e.g. encoding='latin-1')") from None
        except LookupError:
            raise ValueError(f"encoding: unknown text encoding {encoding!r}; use a Python codec name such as "
                             "'utf-8' or 'latin-1'") from None
    else:
        lines = path_or_lines
    width = len(names) if names is not None else None
    sentences: list[Sentence] = []
    rows: list[tuple[str, ...]] = []

    def flush() -> None:
        if rows:
            sentences.append(Sentence(tuple(rows), names))
            rows.clear()

    for number, line in enumerate(lines, start=1):
        if not isinstance(line, str):
            raise TypeError(f"path_or_lines: expected lines of str; got {type(line).__name__} at line {number}")
        if "\0" in line:
            raise DataError(f"{where}: line {number} holds a NUL character: not a text file in this encoding (a "
                            "binary file, or UTF-16 text: pass encoding=)")
        fields = tuple(line.split(sep)) if sep is not None else tuple(line.split())
        if sep is not None:
            fields = tuple(f.strip() for f in fields)
        if not line.strip():
            flush()
            continue
        if docstart == "skip" and fields[0] == _DOCSTART:
            flush()
            continue
        if width is None:
            width = len(fields)
        if len(fields) != width:
            raise DataError(f"{where}: line {number}: expected {width} fields; got {len(fields)} in {line[:200]!r}")
        rows.append(fields)
    flush()
    return sentences


def _md5(path: Path) -> str:
    digest = hashlib.md5()
    with open(path, "rb") as f:
        while block := f.read(BLOCK):
            digest.update(block)
    return digest.hexdigest()


def _read_zip_member(cand: Path, inner: str, max_bytes: int) -> bytes | bytearray:
    """One member of a zip, its declared size checked and its bytes read with a cap (zip bombs)."""
    try:
        with zipfile.ZipFile(cand) as zf:
            try:
                info = zf.getinfo(inner)
            except KeyError as err:
                raise FileNotFoundError(f"{cand}: no member {inner} in the zip") from err
            check_size(cand, info.file_size, max_bytes, f"member {inner} (declared uncompressed size)", _READER)
            with zf.open(info) as stream:
                return read_capped(stream, max_bytes, cand, f"member {inner}", _READER)
    # zipfile raises NotImplementedError for a compression method it cannot decode (not a stub here)
    except (zipfile.BadZipFile, zipfile.LargeZipFile, NotImplementedError, EOFError) as e:
        raise DataError(f"{cand}: not a readable zip ({e})") from None


def _read_member(name: str, member: str, root: str | Path | None, verify: bool, encoding: str,
                 max_bytes: int) -> list[str]:
    """Lines of ``<name>/<member>`` from a zip (``<name>.zip``) or a folder holding the member."""
    check_max_bytes(max_bytes)
    base = Path(root).expanduser() if root is not None else data_root() / name
    candidates = [base] if base.is_file() else [base / f"{name}.zip", base / member, base / name / member]
    for cand in candidates:
        if not cand.is_file():
            continue
        file_size(cand, max_bytes, _READER)
        data: bytes | bytearray
        if zipfile.is_zipfile(cand):
            if verify:
                got, want = _md5(cand), MD5[f"{name}.zip"]
                if got != want:
                    raise ChecksumError(
                        f"{cand}: md5 {got} differs from the published {want} for {name}.zip; "
                        "pass verify=False for a modified copy"
                    )
            data = _read_zip_member(cand, f"{name}/{member}", max_bytes)
        else:
            data = cand.read_bytes()
        try:
            return data.decode(encoding).splitlines()
        except UnicodeDecodeError as err:
            raise DataError(f"{cand}: not valid {encoding} ({err}); pass encoding='latin-1'?") from None
    raise FileNotFoundError(
        f"{name}/{member}: not found; looked for {', '.join(str(c) for c in candidates)} "
        "(set root=..., or EBMS_DATA to the folder holding {name}/{name}.zip)".replace("{name}", name)
    )


def load_conll2000(
    split: str = "train", root: str | Path | None = None, *, verify: bool = True, encoding: str = "utf-8",
    max_bytes: int = MAX_CONLL_BYTES,
) -> list[Sentence]:
    """CoNLL-2000 chunking (WSJ sections 15-18 train, 20 test); columns ``word, pos, chunk``.

    Args:
        split: ``"train"`` (8,936 sentences, 211,727 tokens) or ``"test"`` (2,012 / 47,377).
        root: a ``conll2000.zip``, or a folder holding it or the extracted ``train.txt``/``test.txt``.
        verify: check the zip's md5 against :data:`MD5`.
        encoding: text encoding of the member.
        max_bytes: the largest zip or file, and the largest uncompressed member, read
            (default :data:`MAX_CONLL_BYTES`).

    Raises:
        FileNotFoundError: no zip or member file where it looked.
        ebms.errors.LimitExceeded: a file or member above ``max_bytes``.
        ebms.errors.DataError: a checksum mismatch, a damaged zip, undecodable text, or a line
            with the wrong number of fields (the message names the file).
    """
    if split not in ("train", "test"):
        raise ValueError(f"split: expected 'train' or 'test'; got {split!r}")
    lines = _read_member("conll2000", f"{split}.txt", root, verify, encoding, max_bytes)
    return read_conll(lines, columns=CONLL2000_COLUMNS)


def load_conll2002(
    lang: str = "esp",
    split: str = "train",
    root: str | Path | None = None,
    *,
    verify: bool = True,
    encoding: str = "utf-8",
    max_bytes: int = MAX_CONLL_BYTES,
) -> list[Sentence]:
    """CoNLL-2002 NER (Spanish ``esp``, Dutch ``ned``); columns ``word, pos, tag`` (IOB2, PER/ORG/LOC/MISC).

    ``-DOCSTART-`` lines (Dutch article breaks) are dropped and end the sentence.

    Args:
        lang: ``"esp"`` or ``"ned"``.
        split: ``"train"``, ``"testa"`` (development) or ``"testb"`` (test).
        root: a ``conll2002.zip``, or a folder holding it or the extracted members (``esp.train`` ...).
        verify: check the zip's md5 against :data:`MD5`.
        encoding: text encoding of the member (``"latin-1"`` for the original CoNLL release).
        max_bytes: size limit, as in :func:`load_conll2000`.

    Raises:
        FileNotFoundError, ebms.errors.LimitExceeded, ebms.errors.DataError: as in
            :func:`load_conll2000`.
    """
    if lang not in ("esp", "ned"):
        raise ValueError(f"lang: expected 'esp' or 'ned'; got {lang!r}")
    if split not in ("train", "testa", "testb"):
        raise ValueError(f"split: expected 'train', 'testa' or 'testb'; got {split!r}")
    lines = _read_member("conll2002", f"{lang}.{split}", root, verify, encoding, max_bytes)
    return read_conll(lines, columns=("word", "pos", "tag"))


#: the data sets :func:`load_conll` reads, by name.
CONLL_NAMES = ("conll2000", "conll2002-esp", "conll2002-ned")


def load_conll(name: str, split: str, root: str | Path | None = None, *,
               max_bytes: int = MAX_CONLL_BYTES) -> list[Sentence]:
    """The sentences of ``split`` of the data set ``name`` (:data:`CONLL_NAMES`): CoNLL-2000 chunking
    (:func:`load_conll2000`) or CoNLL-2002 NER in Spanish or Dutch (:func:`load_conll2002`).

    Raises:
        ValueError: an unknown ``name``; the loaders' errors otherwise.
    """
    if name not in CONLL_NAMES:
        raise ValueError(f"name: expected one of {', '.join(CONLL_NAMES)}; got {name!r}")
    if name == "conll2000":
        return load_conll2000(split, root, max_bytes=max_bytes)
    return load_conll2002(name.split("-")[1], split, root, max_bytes=max_bytes)


def parse_tag(tag: str) -> tuple[str, str]:
    """Split a tag into ``(prefix, type)``: ``"O" -> ("O", "")``, ``"B-NP" -> ("B", "NP")``, ``"B" -> ("B", "")``.

    The prefix is one of B, I, E, S; the type is non-empty and may itself contain ``-``, or the
    tag is the bare prefix (or the prefix and ``-``), an untyped chunk tag, read as type ``""``
    as conlleval and seqeval read it (writers then give the bare prefix back).

    Raises:
        ValueError: any other string (names the tag).
    """
    if not isinstance(tag, str):
        raise TypeError(f"tag: expected a str; got {type(tag).__name__} {tag!r}")
    if tag == "O":
        return "O", ""
    if tag[:1] in _PREFIXES and tag[1:] in ("", "-"):  # untyped: conlleval and seqeval read B or B- as type ""
        return tag[0], ""
    prefix, dash, kind = tag.partition("-")
    if not dash or prefix not in _PREFIXES or not kind or kind.strip() != kind:
        raise ValueError(f"tag: expected 'O', one of B-/I-/E-/S- followed by a type, or an untyped B, I, E, S; "
                         f"got {tag!r}")
    return prefix, kind


def _tag(prefix: str, kind: str) -> str:
    """The tag of ``prefix`` and chunk type ``kind`` (bare ``prefix`` for the untyped chunks, type ``""``)."""
    return f"{prefix}-{kind}" if kind else prefix


def _chunk_starts(prev: str, prev_type: str, cur: str, cur_type: str) -> bool:
    """conlleval's start-of-chunk rule for the tag ``cur`` following ``prev``."""
    if cur in ("B", "S"):
        return True
    if cur in ("I", "E") and prev in ("O", "E", "S"):
        return True
    return cur != "O" and prev_type != cur_type


def _chunk_ends(prev: str, prev_type: str, cur: str, cur_type: str) -> bool:
    """conlleval's end-of-chunk rule: does the chunk holding ``prev`` end before ``cur``."""
    if prev in ("E", "S"):
        return True
    if prev in ("B", "I") and cur in ("B", "S", "O"):
        return True
    return prev != "O" and prev_type != cur_type


def bio_to_spans(tags: Sequence[str]) -> list[tuple[str, int, int]]:
    """Chunks of one sentence as ``(type, start, end)`` with ``end`` exclusive (IOB1, IOB2 or IOBES).

    Boundaries follow conlleval: a chunk starts at ``B-``/``S-``, at ``I-``/``E-`` after ``O``,
    ``E-`` or ``S-``, and wherever the type changes; it ends after ``E-``/``S-``, before
    ``B-``/``S-``/``O``, and wherever the type changes.
    """
    spans: list[tuple[str, int, int]] = []
    prev, prev_type, start = "O", "", -1
    for i, tag in enumerate(list(tags) + ["O"]):
        cur, cur_type = parse_tag(tag)
        if start >= 0 and _chunk_ends(prev, prev_type, cur, cur_type):
            spans.append((prev_type, start, i))
            start = -1
        if _chunk_starts(prev, prev_type, cur, cur_type):
            start = i
        prev, prev_type = cur, cur_type
    return spans


def spans_to_tags(spans: Iterable[tuple[str, int, int]], length: int, *, scheme: str = "iob") -> list[str]:
    """Tags of a sentence of ``length`` tokens from non-overlapping chunks; ``scheme`` ``"iob"`` or ``"iobes"``."""
    if scheme not in ("iob", "iobes"):
        raise ValueError(f"scheme: expected 'iob' or 'iobes'; got {scheme!r}")
    tags = ["O"] * length
    for kind, start, end in spans:
        if not (0 <= start < end <= length) or any(t != "O" for t in tags[start:end]):
            raise ValueError(f"spans: expected disjoint chunks inside [0, {length}); got {(kind, start, end)!r}")
        tags[start:end] = [_tag("B", kind)] + [_tag("I", kind)] * (end - start - 1)
        if scheme == "iobes":
            if end - start == 1:
                tags[start] = _tag("S", kind)
            else:
                tags[end - 1] = _tag("E", kind)
    return tags


def iob_to_iobes(tags: Sequence[str]) -> list[str]:
    """IOB (IOB1 or IOB2) tags to IOBES, keeping the chunks conlleval reads from them."""
    return spans_to_tags(bio_to_spans(tags), len(tags), scheme="iobes")


def to_iob2(tags: Sequence[str]) -> list[str]:
    """IOB1, IOB2 or IOBES tags as strict IOB2 (``B-`` at every chunk start), keeping the chunks
    conlleval reads from them (:func:`bio_to_spans`); IOB2 input comes back unchanged."""
    return spans_to_tags(bio_to_spans(tags), len(tags), scheme="iob")


def iobes_to_iob(tags: Sequence[str]) -> list[str]:
    """IOBES tags to IOB2 (``B-`` at every chunk start), keeping the chunks conlleval reads from them
    (the same conversion as :func:`to_iob2`)."""
    return to_iob2(tags)


def tag_names(tag_seqs: Iterable[Sequence[str]]) -> list[str]:
    """The distinct tags of ``tag_seqs``, ``"O"`` first (when present), the others sorted.

    A tagger built on this list gives ``O`` id 0, so padding with 0 pads with "outside".

    Raises:
        TypeError: a sequence is a bare string rather than a sequence of tags (names it).
    """
    found: set[str] = set()
    for i, seq in enumerate(tag_seqs):
        if isinstance(seq, str):
            raise TypeError(f"tag_seqs[{i}]: expected a sequence of tags; got the string {seq!r}")
        found.update(seq)
    return sorted(found, key=lambda t: (t != "O", t))
