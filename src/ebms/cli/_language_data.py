"""Private: the corpora of the language task, read and encoded once per run (see :mod:`ebms.cli.language`).

``data.name = "ptb"`` (Mikolov's splits, :func:`ebms.data.text.ptb`), ``"tiny-shakespeare"`` (one
sentence per non-blank line, :func:`ebms.data.text.tiny_shakespeare`) or ``"text"`` (the user's
files ``language.train_path`` / ``valid_path`` / ``test_path``, :func:`ebms.data.text.read_sentences`).
The vocabulary is built on the training sentences (:class:`ebms.data.text.Vocabulary`,
``language.min_count``, ``language.max_vocab``); every split is encoded with it, so an unseen token
is ``<unk>`` (id 1).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ebms.cli.config import Config, ConfigError
from ebms.data.mnist import ChecksumError
from ebms.data.text import MAX_TEXT_BYTES, Vocabulary, ptb, read_sentences, tiny_shakespeare
from ebms.errors import DataError
from ebms.sequences import Sequences

__all__ = ["LanguageData", "load_language_data"]

#: the held-out splits, in the order ``eval`` reports them.
HELD_OUT = ("valid", "test")


@dataclass
class LanguageData:
    """Encoded sentences of one run.

    Attributes:
        vocab: the training vocabulary (``len(vocab)`` = ``V``).
        train: the training sentences no longer than ``max_length``, ``(N, T)``.
        held_out: ``"valid"`` / ``"test"`` sentences (those the data set has), at most ``data.n_test`` each.
        max_length: ``L``, the longest sentence the models handle (TRF lengths, Transformer positions):
            ``language.max_length``, else the longest training sentence.
        dropped: training sentences left out for being longer than ``language.max_length``.
        name: ``data.name``.
        cache: objects built from the data once per process (word classes), keyed by their settings.
    """

    vocab: Vocabulary
    train: Sequences
    held_out: dict[str, Sequences]
    max_length: int
    dropped: int = 0
    name: str = ""
    cache: dict[Any, Any] = field(default_factory=dict, repr=False)

    @property
    def size(self) -> int:
        return self.train.batch_size


def _ptb(cfg: Config, split: str) -> list[list[str]]:
    words = ptb(split, cfg.data.root)
    s = cfg.sections["language"]
    if s.lower:
        words = [[w.lower() for w in sent] for sent in words]
    return words if s.level == "word" else [list(" ".join(sent)) for sent in words]


def _shakespeare(cfg: Config, split: str) -> list[list[str]]:
    s = cfg.sections["language"]
    return tiny_shakespeare(split, cfg.data.root, level=s.level, form="lines", lower=s.lower)


def _text(cfg: Config, split: str) -> list[list[str]] | None:
    s = cfg.sections["language"]
    key = f"language.{split}_path"
    path = {"train": s.train_path, "valid": s.valid_path, "test": s.test_path}[split]
    if path is None:
        if split == "train":
            raise ConfigError("language.train_path: data.name='text' reads your own files; expected a text file "
                              "(one sentence per line) for training; got none: set language.train_path=FILE")
        return None
    limit = MAX_TEXT_BYTES if cfg.data.max_mb is None else cfg.data.max_mb << 20
    try:
        return read_sentences(path, level=s.level, lower=s.lower, sentence_split=s.sentence_split, max_bytes=limit)
    except (FileNotFoundError, IsADirectoryError) as e:
        raise ConfigError(f"{key}: {e}") from None
    except DataError as e:
        if "; pass encoding=" not in str(e):
            raise
        raise DataError(f"{key}: {str(e).split('; pass encoding=')[0]}; expected UTF-8 text: convert the file (e.g. "
                        f"iconv -f latin1 -t utf-8)") from None


READERS: dict[str, Callable[[Config, str], list[list[str]] | None]] = {
    "ptb": _ptb, "tiny-shakespeare": _shakespeare, "text": _text,
}


def _read(cfg: Config, split: str) -> list[list[str]] | None:
    try:
        return READERS[cfg.data.name](cfg, split)
    except FileNotFoundError as e:
        where = "ptb" if cfg.data.name == "ptb" else "tinyshakespeare"
        raise ConfigError(f"data.root: {str(e).split(': no such file')[0]}: not found; set data.root to the folder "
                          f"holding it, or EBMS_DATA to the folder holding {where}/") from None
    except ChecksumError as e:
        raise ChecksumError(f"data.root: {str(e).split('; pass verify=False')[0]}; to train on a copy of your own, use "
                            f"data.name=text with language.train_path, valid_path and test_path") from None


def load_language_data(cfg: Config) -> LanguageData:
    """Read, build the vocabulary, encode (see the module docstring).

    Raises:
        ConfigError: a missing file (naming the key that names it), a vocabulary or length limit
            that leaves no training sentence.
        ebms.errors.DataError: a file that is not text (named by the reader).
    """
    s = cfg.sections["language"]
    train = _read(cfg, "train")
    assert train is not None
    if s.limit is not None:
        train = train[: s.limit]
    try:
        vocab = Vocabulary.build(train, level=s.level, min_count=s.min_count, max_size=s.max_vocab)
    except (TypeError, ValueError) as e:
        raise ConfigError(f"language: the training text gives no vocabulary ({e})") from None
    held = {}
    for split in HELD_OUT:
        sents = _read(cfg, split)
        if sents:
            held[split] = vocab.encode(sents[: cfg.data.n_test])
    encoded = vocab.encode(train)
    L = int(encoded.lengths.max()) if s.max_length is None else s.max_length
    keep = encoded.lengths <= L
    if not bool(keep.any()):
        raise ConfigError(f"language.max_length: every training sentence is longer than {L} tokens; raise it "
                          f"(the shortest has {int(encoded.lengths.min())})")
    kept = encoded[keep.nonzero().squeeze(1)].canonical() if not bool(keep.all()) else encoded
    return LanguageData(vocab, kept, held, L, int((~keep).sum()), cfg.data.name)

