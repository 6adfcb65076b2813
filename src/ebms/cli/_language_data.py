"""Private: the corpora of the language task, read and encoded once per run (see :mod:`ebms.cli.language`).

``data.name = "ptb"`` (Mikolov's splits, :func:`ebms.data.text.ptb`), ``"tiny-shakespeare"`` (one
sentence per non-blank line, :func:`ebms.data.text.tiny_shakespeare`) or ``"text"`` (the user's
files ``language.train_path`` / ``valid_path`` / ``test_path``, :func:`ebms.data.text.read_sentences`).
The vocabulary is built on the training sentences (:class:`ebms.data.text.Vocabulary`,
``language.min_count``, ``language.max_vocab``); every split is encoded with it, so an unseen token
is ``<unk>`` (id 1).

**A run keeps its vocabulary.** :func:`vocabulary_file` is the run file ``vocab.json``: the
tokens in id order with their training counts, the length bound ``L`` and the sha256 of the
training sentences as encoded (:func:`~ebms.train.run_files.fingerprint`); the task adds word
classes where it fitted some. ``eval``, ``sample``, a resume and a residual run load with it
(``stored``): the ids are the trained ones, never rebuilt from the files as they are now, and
training text that no longer encodes to the recorded sentences is refused with one line naming
its key (``language.train_path``, or ``data.root`` for PTB and Tiny Shakespeare): restore the
file, or train a new run. (Using the stored ids on the edited text instead would train on, or
evaluate with, other data than the run says.)

**Lengths.** ``L`` is ``language.max_length``, else the longest training sentence; for the kinds
whose cost grows with ``L`` (``bounded_length`` of the kind's task: positions, attention, per-length normalisers,
back-propagation through whole sentences) an unset ``language.max_length`` may not exceed
:data:`DEFAULT_MAX_LENGTH`: a longer sentence (a file of running text read one line per sentence,
say) is refused with one line naming the key and the bound, rather than building a model of that
size.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from ebms.cli.config import Config, ConfigError
from ebms.data.mnist import ChecksumError
from ebms.data.text import MAX_TEXT_BYTES, Vocabulary, ptb, read_sentences, tiny_shakespeare
from ebms.errors import DataError
from ebms.sequences import Sequences
from ebms.train.run_files import dump_json, fingerprint, stored_json, stored_vocabulary

__all__ = ["DEFAULT_MAX_LENGTH", "VOCAB_FILE", "LanguageData", "applied_language_data", "load_language_data",
           "vocabulary_file"]

#: the held-out splits, in the order ``eval`` reports them.
HELD_OUT = ("valid", "test")
#: the run file holding the vocabulary, ``L`` and the training fingerprint (module docstring).
VOCAB_FILE = "vocab.json"
VOCAB_FORMAT = "ebms-language-vocabulary"
#: the largest ``L`` an unset ``language.max_length`` gives the kinds whose size or cost grows with it:
#: Transformer and Electric positions (attention ``L^2``), a TRF's per-length normalisers and sampler, an
#: LSTM's back-propagation through whole sentences (``bounded_length`` of their task).
DEFAULT_MAX_LENGTH = 1024


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
        stored: the run file :data:`VOCAB_FILE` this data was loaded with (``None``: built now).
    """

    vocab: Vocabulary
    train: Sequences
    held_out: dict[str, Sequences]
    max_length: int
    dropped: int = 0
    name: str = ""
    cache: dict[Any, Any] = field(default_factory=dict, repr=False)
    stored: dict[str, Any] | None = field(default=None, repr=False)

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


def _train_key(cfg: Config) -> str:
    return "language.train_path" if cfg.data.name == "text" else "data.root"


def _default_length(cfg: Config, encoded: Sequences) -> int:
    """``L`` of an unset ``language.max_length``: the longest training sentence, refused above
    :data:`DEFAULT_MAX_LENGTH` for the kinds whose size or cost grows with it (their task's
    ``bounded_length``)."""
    from ebms.cli.language import LanguageTask
    from ebms.cli.tasks import task_for

    longest, task = int(encoded.lengths.max()), task_for(cfg)
    if isinstance(task, LanguageTask) and task.bounded_length and longest > DEFAULT_MAX_LENGTH:
        n_long = int((encoded.lengths > DEFAULT_MAX_LENGTH).sum())
        raise ConfigError(f"language.max_length: unset, it would be the longest training sentence, {longest} tokens, "
                          f"above the default bound of {DEFAULT_MAX_LENGTH} for model.kind={cfg.model.kind!r} (its "
                          f"size and cost grow with it; {n_long} training sentence(s) are longer); set "
                          f"language.max_length=N to leave longer training sentences out, or cut running text into "
                          f"sentences with language.sentence_split=true")
    return longest


def _build_vocabulary(cfg: Config, train: list[list[str]]) -> Vocabulary:
    s = cfg.sections["language"]
    try:
        vocab = Vocabulary.build(train, level=s.level, min_count=s.min_count, max_size=s.max_vocab)
    except (TypeError, ValueError) as e:
        raise ConfigError(f"language: the training text gives no vocabulary ({e})") from None
    if len(vocab) <= 2:
        key = "language.max_vocab" if s.max_vocab is not None and s.max_vocab <= 2 else "language.min_count"
        raise ConfigError(f"{key}: no training token is kept (language.min_count={s.min_count}, language.max_vocab="
                          f"{s.max_vocab}), so every token would be <unk> and the model would learn nothing; lower "
                          f"language.min_count or raise language.max_vocab")
    return vocab


def load_language_data(cfg: Config, stored: Mapping[str, bytes] | None = None, *,
                       vocab: Vocabulary | None = None) -> LanguageData:
    """Read, build the vocabulary (or take it), encode (see the module docstring).

    Args:
        cfg: the run's configuration.
        stored: the run files of a trained run (:func:`~ebms.train.run_files.read_run_files`): the
            vocabulary and ``L`` of its :data:`VOCAB_FILE` are used, and the training text must
            encode to the sentences it was trained on.
        vocab: a vocabulary to encode with instead of building one (a residual run takes its base's).

    Raises:
        ConfigError: a missing file (naming the key that names it), a vocabulary that keeps no
            token, a length limit that leaves no training sentence, an unset ``language.max_length``
            above :data:`DEFAULT_MAX_LENGTH` for a kind whose cost grows with it.
        ebms.errors.DataError: a file that is not text (named by the reader); training text that
            changed since the run in ``stored`` was trained.
        ebms.errors.CheckpointError: a stored vocabulary file this run cannot use.
    """
    s = cfg.sections["language"]
    payload = None if not stored else stored_json(stored, VOCAB_FILE, VOCAB_FORMAT)
    train = _read(cfg, "train")
    assert train is not None
    if s.limit is not None:
        train = train[: s.limit]
    if payload is not None:
        vocab = stored_vocabulary(payload, VOCAB_FILE, level=s.level)
    elif vocab is None:
        vocab = _build_vocabulary(cfg, train)
    held = {}
    for split in HELD_OUT:
        sents = _read(cfg, split)
        if sents:
            held[split] = vocab.encode(sents[: cfg.data.n_test])
    encoded = vocab.encode(train)
    if payload is not None:
        L = int(payload["max_length"])
    else:
        L = _default_length(cfg, encoded) if s.max_length is None else s.max_length
    keep = encoded.lengths <= L
    if not bool(keep.any()):
        raise ConfigError(f"language.max_length: every training sentence is longer than {L} tokens; raise it "
                          f"(the shortest has {int(encoded.lengths.min())})")
    kept = encoded[keep.nonzero().squeeze(1)].canonical() if not bool(keep.all()) else encoded
    data = LanguageData(vocab, kept, held, L, int((~keep).sum()), cfg.data.name, stored=payload)
    if payload is not None and payload.get("train_sha256") != _train_fingerprint(data):
        key = _train_key(cfg)
        where = s.train_path if cfg.data.name == "text" else f"the {cfg.data.name} training split under data.root"
        raise DataError(f"{key}: {where} is not the training text this run was trained on (its sentences, encoded "
                        f"with the run's stored {VOCAB_FILE}, differ from the ones recorded there); a run keeps "
                        f"its vocabulary and training data: restore the file, or train a new run")
    return data


def applied_language_data(cfg: Config, stored: Mapping[str, bytes]) -> LanguageData:
    """The vocabulary and ``L`` of a trained run's :data:`VOCAB_FILE`, no sentence and no text read: what a model
    applied to new text is built from (``ebms score``; :meth:`~ebms.cli.tasks.Task.load_applied`)."""
    payload = stored_json(stored, VOCAB_FILE, VOCAB_FORMAT)
    vocab = stored_vocabulary(payload, VOCAB_FILE, level=cfg.sections["language"].level)
    return LanguageData(vocab, Sequences.from_lists([]), {}, int(payload["max_length"]), name=cfg.data.name,
                        stored=payload)


def _train_fingerprint(data: LanguageData) -> str:
    return fingerprint(data.train.tokens, data.train.lengths)


def vocabulary_file(data: LanguageData, **extra: Any) -> bytes:
    """The run file :data:`VOCAB_FILE` of ``data`` (``extra``: further fitted maps, e.g. ``classes``)."""
    v = data.vocab
    payload = {"format": VOCAB_FORMAT, "version": 1, "level": v.level, "tokens": list(v.tokens),
               "counts": None if v.counts is None else list(v.counts), "max_length": data.max_length,
               "train_sha256": _train_fingerprint(data), **extra}
    return dump_json(payload)
