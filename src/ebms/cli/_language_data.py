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

**Subword units** (``language.level = "subword"``, :mod:`ebms.data.subword`): the text is read as words, a
tokenizer of ``language.subword_units`` units (``language.subword_model``: BPE or unigram) is fitted on the
training words, or ``language.tokenizer`` names a ``tokenizer.json`` to use, and every sentence becomes its
units; the vocabulary (:class:`~ebms.data.subword.SubwordVocabulary`) holds the units of the training text.
The run keeps the tokenizer as the run file :data:`TOKENIZER_FILE` (its sha256 in ``vocab.json`` and in every
checkpoint), so ``eval``, ``sample``, a resume, a residual run and ``ebms score`` split text as training did;
:attr:`LanguageData.words` counts the held-out words, the denominator of a per-word perplexity.

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
from ebms.data.subword import SubwordTokenizer, SubwordVocabulary
from ebms.data.text import MAX_TEXT_BYTES, Vocabulary, ptb, read_sentences, tiny_shakespeare
from ebms.errors import CheckpointError, DataError
from ebms.sequences import Sequences
from ebms.train.run_files import dump_json, fingerprint, stored_json, stored_vocabulary

__all__ = ["DEFAULT_MAX_LENGTH", "HELD_OUT", "TOKENIZER_FILE", "VOCAB_FILE", "LanguageData", "applied_language_data",
           "language_files", "load_language_data", "read_split", "vocabulary_file"]

#: the held-out splits, in the order ``eval`` reports them.
HELD_OUT = ("valid", "test")
#: the run file holding the vocabulary, ``L`` and the training fingerprint (module docstring).
VOCAB_FILE = "vocab.json"
VOCAB_FORMAT = "ebms-language-vocabulary"
#: the run file holding a subword run's tokenizer (``tokenizers``' JSON).
TOKENIZER_FILE = "tokenizer.json"
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
        words: the words of each held-out split of a subword run (``language.level = "subword"``): with the
            sentences, the denominator of a per-word perplexity. Empty at other levels.
    """

    vocab: Vocabulary
    train: Sequences
    held_out: dict[str, Sequences]
    max_length: int
    dropped: int = 0
    name: str = ""
    cache: dict[Any, Any] = field(default_factory=dict, repr=False)
    stored: dict[str, Any] | None = field(default=None, repr=False)
    words: dict[str, int] = field(default_factory=dict)

    @property
    def size(self) -> int:
        return self.train.batch_size


def _ptb(cfg: Config, split: str) -> list[list[str]]:
    words = ptb(split, cfg.data.root)
    s = cfg.sections["language"]
    if s.lower:
        words = [[w.lower() for w in sent] for sent in words]
    return words if s.level != "char" else [list(" ".join(sent)) for sent in words]


def _reading(s: Any) -> str:
    """The level the text is read at: ``"char"``, else words (subword units are split from words)."""
    return "char" if s.level == "char" else "word"


def _shakespeare(cfg: Config, split: str) -> list[list[str]]:
    s = cfg.sections["language"]
    return tiny_shakespeare(split, cfg.data.root, level=_reading(s), form="lines", lower=s.lower)


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
        return read_sentences(path, level=_reading(s), lower=s.lower, sentence_split=s.sentence_split, max_bytes=limit)
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


def read_split(cfg: Config, split: str) -> list[list[str]] | None:
    """The sentences of ``split`` (``"train"``, ``"valid"``, ``"test"``) as the run reads them (``None``: a split
    ``data.name = "text"`` names no file for); the missing file's key in a :class:`ConfigError`."""
    return _read(cfg, split)


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


def _tokenizer(cfg: Config, train: list[list[str]]) -> SubwordTokenizer:
    """The subword tokenizer of a new run: ``language.tokenizer``'s file, or one fitted on the training words."""
    s = cfg.sections["language"]
    try:
        if s.tokenizer is None:
            return SubwordTokenizer.train(train, s.subword_units, model=s.subword_model)
        try:
            return SubwordTokenizer.from_file(s.tokenizer)
        except (FileNotFoundError, ValueError) as e:
            raise ConfigError(f"language.tokenizer: {e}; expected a tokenizer.json file of the tokenizers library "
                              f"(a transformers fast tokenizer's), or drop the key to fit one on the training text"
                              ) from None
    except ConfigError:
        raise
    except ImportError as e:
        raise ConfigError(f"language.level: {e}") from None
    except ValueError as e:
        raise ConfigError(f"language: the training text gives no subword units ({e})") from None


def _build_vocabulary(cfg: Config, train: list[list[str]]) -> Vocabulary:
    s = cfg.sections["language"]
    if s.level == "subword":
        tok = _tokenizer(cfg, train)
        try:
            return SubwordVocabulary.build(tok, train, min_count=s.min_count)
        except ValueError as e:
            key = "language.tokenizer" if s.tokenizer is not None else "language.subword_units"
            raise ConfigError(f"{key}: the training text's units make no vocabulary ({e})") from None
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
        vocab = _stored_vocabulary(cfg, payload, stored or {})
    elif vocab is None:
        vocab = _build_vocabulary(cfg, train)
    held, words = {}, {}
    for split in HELD_OUT:
        sents = _read(cfg, split)
        if sents:
            held[split] = _encode(vocab, sents[: cfg.data.n_test], split)
            if isinstance(vocab, SubwordVocabulary):
                words[split] = sum(len(x) for x in sents[: cfg.data.n_test])
    encoded = _encode(vocab, train, "train")
    if payload is not None:
        L = int(payload["max_length"])
    else:
        L = _default_length(cfg, encoded) if s.max_length is None else s.max_length
    keep = encoded.lengths <= L
    if not bool(keep.any()):
        raise ConfigError(f"language.max_length: every training sentence is longer than {L} tokens; raise it "
                          f"(the shortest has {int(encoded.lengths.min())})")
    kept = encoded[keep.nonzero().squeeze(1)].canonical() if not bool(keep.all()) else encoded
    data = LanguageData(vocab, kept, held, L, int((~keep).sum()), cfg.data.name, stored=payload, words=words)
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
    vocab = _stored_vocabulary(cfg, payload, stored)
    return LanguageData(vocab, Sequences.from_lists([]), {}, int(payload["max_length"]), name=cfg.data.name,
                        stored=payload)


def _encode(vocab: Vocabulary, sentences: list[list[str]], split: str) -> Sequences:
    """``sentences`` (tokens; words of a subword run, split into units first) encoded with ``vocab``."""
    if not isinstance(vocab, SubwordVocabulary):
        return vocab.encode(sentences)
    try:
        return vocab.encode(vocab.split(sentences))
    except ValueError as e:  # a unit that is a boundary marker (a tokenizer file's special token in the text)
        raise DataError(f"language.tokenizer: the {split} text splits into a unit the vocabulary reserves ({e})"
                        ) from None


def _stored_vocabulary(cfg: Config, payload: dict[str, Any], stored: Mapping[str, bytes]) -> Vocabulary:
    """The vocabulary of a trained run's :data:`VOCAB_FILE`; a subword run's with its :data:`TOKENIZER_FILE`."""
    s = cfg.sections["language"]
    vocab = stored_vocabulary(payload, VOCAB_FILE, level=_reading(s))
    sub = payload.get("subword")
    if s.level != "subword":
        if sub is not None:
            raise CheckpointError(f"{VOCAB_FILE}: a vocabulary of subword units; language.level={s.level!r}; train "
                                  f"the run again (--overwrite)")
        return vocab
    if TOKENIZER_FILE not in stored:
        raise CheckpointError(f"{TOKENIZER_FILE}: missing for language.level='subword'; train the run again "
                              f"(--overwrite)")
    try:
        return SubwordVocabulary.restore(vocab, sub, stored[TOKENIZER_FILE])
    except ImportError as e:
        raise ConfigError(f"language.level: {e}") from None
    except ValueError as e:
        raise CheckpointError(f"{TOKENIZER_FILE} and {VOCAB_FILE}: {e}; train the run again (--overwrite)") from None


def _train_fingerprint(data: LanguageData) -> str:
    return fingerprint(data.train.tokens, data.train.lengths)


def vocabulary_file(data: LanguageData, **extra: Any) -> bytes:
    """The run file :data:`VOCAB_FILE` of ``data`` (``extra``: further fitted maps, e.g. ``classes``)."""
    v = data.vocab
    if isinstance(v, SubwordVocabulary):
        extra = {"subword": v.record(), **extra}
    payload = {"format": VOCAB_FORMAT, "version": 1, "level": v.level, "tokens": list(v.tokens),
               "counts": None if v.counts is None else list(v.counts), "max_length": data.max_length,
               "train_sha256": _train_fingerprint(data), **extra}
    return dump_json(payload)


def language_files(data: LanguageData, **extra: Any) -> dict[str, bytes]:
    """The run files of a language run: :data:`VOCAB_FILE` (:func:`vocabulary_file`, ``extra`` as there) and, for
    subword units, :data:`TOKENIZER_FILE`."""
    files = {VOCAB_FILE: vocabulary_file(data, **extra)}
    if isinstance(data.vocab, SubwordVocabulary):
        files[TOKENIZER_FILE] = data.vocab.tokenizer.to_bytes()
    return files
