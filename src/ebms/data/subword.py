r"""Subword units for the language tasks: a Hugging Face ``tokenizers`` adapter and the vocabulary over its units.

:class:`SubwordTokenizer` splits words into subword units and joins units back into text. It is
trained on the training sentences (:meth:`SubwordTokenizer.train`: byte-pair encoding, Sennrich et
al. 2016, or the unigram model, Kudo 2018, with a given number of units), or read from a
``tokenizer.json`` written by ``tokenizers`` or ``transformers`` (:meth:`SubwordTokenizer.from_file`);
:meth:`~SubwordTokenizer.to_bytes` / :meth:`~SubwordTokenizer.from_bytes` keep it in a run folder.

Two schemes say how a sentence (a list of whitespace-separated words) becomes units:

* ``"words"`` (a tokenizer :meth:`~SubwordTokenizer.train` made): each word alone, its first unit
  marked with ``▁`` (U+2581, SentencePiece's word-start marker), so units never cross a word and
  :meth:`~SubwordTokenizer.decode` restores the words exactly: ``the cats`` -> ``▁the ▁cat s``. The
  word ``<unk>`` (Penn Treebank's rare-word token) is the one unit ``▁<unk>``, never split; a character
  the training text never had is the unit ``<unk>`` (id 1 of the vocabulary).
* ``"text"`` (a tokenizer file): the words joined by one space and tokenised as one string by the
  file's own pre-tokenizer, model and decoder (GPT-2's byte-level BPE, a WordPiece, a SentencePiece
  export), no special tokens added.

:class:`SubwordVocabulary` is a :class:`~ebms.data.text.Vocabulary` whose tokens are units: id ``0``
the sentence boundary, ``1`` ``<unk>``, then the units of the encoded training text by count
(:meth:`SubwordVocabulary.build`); or, for a pretrained model, the model's own ids
(:meth:`SubwordVocabulary.fixed`). It holds its tokenizer: :meth:`~SubwordVocabulary.split` turns
sentences of words into sentences of units (then :meth:`~ebms.data.text.Vocabulary.encode` as for any
vocabulary), :meth:`~SubwordVocabulary.to_text` decodes ids back to text.

Perplexity across units. A model over units gives the probability of a sentence's units and its end;
the units of a sentence are a function of its words, so that is the probability of the words too, and
:math:`\exp(-\sum \log p / (\text{words} + \text{sentences}))` is a per-word perplexity comparable
with a word-level model's on the same text (when no unit is ``<unk>`` where the word-level model has a
word, and vice versa: each counts what it calls unknown as one outcome).

``tokenizers`` is an optional dependency (``pip install 'ebms[subword]'``), imported on first use.

Example::

    # not run
    tok = SubwordTokenizer.train([["the", "cat"], ["the", "cats"]], 40)
    tok.units(["the", "cats"])        # ['▁the', '▁cat', 's']
    vocab = SubwordVocabulary.build(tok, [["the", "cat"], ["the", "cats"]])
    vocab.encode(vocab.split([["the", "cats"]]))
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from ebms._checks import check_int
from ebms.data._text_vocab import Vocabulary
from ebms.sequences import Sequences

__all__ = ["INSTALL", "SCHEMES", "SUBWORD_MODELS", "WORD_START", "SubwordTokenizer", "SubwordVocabulary",
           "tokenizers_module"]

#: what :meth:`SubwordTokenizer.train` fits: byte-pair encoding or the unigram model.
SUBWORD_MODELS = ("bpe", "unigram")
#: how a sentence's words become units (module docstring).
SCHEMES = ("words", "text")
#: the word-start marker of the ``"words"`` scheme (SentencePiece's).
WORD_START = "\u2581"
#: the one-line message of a missing ``tokenizers``.
INSTALL = "subword units need the tokenizers package: pip install 'ebms[subword]'"
UNK = Vocabulary.UNK_TOKEN
#: decimals the unigram model's log-probabilities keep (its trainer's parallel sums differ beyond them).
SCORE_DIGITS = 9
#: the unit of the word ``<unk>`` (Penn Treebank's rare words) in the ``"words"`` scheme: a word of its own.
UNK_WORD = WORD_START + UNK


def tokenizers_module() -> Any:
    """The ``tokenizers`` module, imported on first use; ``ImportError(INSTALL)`` (one line) when missing."""
    try:
        import tokenizers
    except ImportError as err:
        raise ImportError(INSTALL) from err
    return tokenizers


def _sentences(sentences: Iterable[Sequence[str]], name: str = "sentences") -> list[list[str]]:
    out = []
    for n, s in enumerate(sentences):
        if isinstance(s, str):
            raise TypeError(f"{name}: expected lists of words; got a str at sentence {n} (split it first, e.g. "
                            f"line.split())")
        words = list(s)
        bad = next((w for w in words if not isinstance(w, str) or not w or w.split() != [w]), None)
        if bad is not None:
            raise ValueError(f"{name}: sentence {n} holds {bad!r}; a word is a non-empty string without whitespace")
        out.append(words)
    return out


class SubwordTokenizer:
    """Words <-> subword units with a ``tokenizers.Tokenizer`` (module docstring).

    Args:
        tokenizer: a ``tokenizers.Tokenizer``.
        scheme: ``"words"`` (each word alone, ``▁`` marking its first unit: what :meth:`train` makes) or
            ``"text"`` (the sentence as one string, the tokenizer's own pre-tokenizer and decoder).

    Attributes:
        tokenizer: the wrapped ``tokenizers.Tokenizer``.
        scheme: see above.
        size: the tokenizer's number of units (its vocabulary, special tokens included).

    Raises:
        TypeError: ``tokenizer`` is not a ``tokenizers.Tokenizer``.
        ValueError: an unknown ``scheme``.
    """

    def __init__(self, tokenizer: Any, *, scheme: str = "text") -> None:
        if not isinstance(tokenizer, tokenizers_module().Tokenizer):
            raise TypeError(f"tokenizer: expected a tokenizers.Tokenizer; got {type(tokenizer).__name__}")
        if scheme not in SCHEMES:
            raise ValueError(f"scheme: expected 'words' or 'text'; got {scheme!r}")
        self.tokenizer, self.scheme = tokenizer, scheme
        self._unk = tokenizer.token_to_id(UNK) if scheme == "words" else None

    @property
    def size(self) -> int:
        return int(self.tokenizer.get_vocab_size(with_added_tokens=True))

    # --- construction -------------------------------------------------------------------------
    @classmethod
    def train(cls, sentences: Iterable[Sequence[str]], size: int, *, model: str = "bpe",
              min_frequency: int = 2) -> SubwordTokenizer:
        """Fit ``size`` units to ``sentences`` (lists of words), scheme ``"words"``.

        ``bpe``: byte-pair encoding over the characters of the training words (every character seen becomes a
        unit, then merges of frequent pairs seen at least ``min_frequency`` times until ``size`` units).
        ``unigram``: the unigram model's pruning from a seed vocabulary down to ``size`` units. ``<unk>`` is
        unit 0 of both (a character the training text never had); the word ``<unk>``, which training skips, is
        the unit ``▁<unk>``.
        A small text may end with fewer units than ``size``. Deterministic: the same sentences give the same
        tokenizer (:meth:`to_bytes` equal; the unigram model's scores are rounded to :data:`SCORE_DIGITS`
        decimals, beyond which its parallel trainer differs from run to run).

        Raises:
            ValueError: ``size < 2``, an unknown ``model``, no word to train on, a word holding whitespace.
            TypeError: a sentence given as one ``str``.
        """
        check_int(size, "size", minimum=2)
        check_int(min_frequency, "min_frequency", minimum=1)
        if model not in SUBWORD_MODELS:
            raise ValueError(f"model: expected 'bpe' or 'unigram'; got {model!r}")
        lines = [" ".join(w for w in s if w != UNK) for s in _sentences(sentences)]
        lines = [x for x in lines if x]
        if not lines:
            raise ValueError("sentences: no word to train subword units on (empty, or <unk> only)")
        tk = tokenizers_module()
        tok = tk.Tokenizer(tk.models.BPE(unk_token=UNK) if model == "bpe" else tk.models.Unigram())
        tok.pre_tokenizer = tk.pre_tokenizers.Metaspace(replacement=WORD_START, prepend_scheme="always", split=True)
        tok.decoder = tk.decoders.Metaspace(replacement=WORD_START, prepend_scheme="always", split=True)
        if model == "bpe":
            trainer = tk.trainers.BpeTrainer(vocab_size=size, min_frequency=min_frequency, special_tokens=[UNK],
                                             show_progress=False)
        else:
            trainer = tk.trainers.UnigramTrainer(vocab_size=size, special_tokens=[UNK], unk_token=UNK,
                                                 show_progress=False)
        tok.train_from_iterator(lines, trainer, length=len(lines))
        if model == "unigram":  # its trainer sums in parallel (scores differ in the last bits from run to run) and
            spec = json.loads(tok.to_str())  # orders pieces of equal score by thread timing: round, then order
            pieces = [[p, round(score, SCORE_DIGITS)] for p, score in spec["model"]["vocab"]]
            unk = pieces[spec["model"]["unk_id"]]
            spec["model"]["vocab"] = [unk, *sorted((p for p in pieces if p[0] != UNK), key=lambda p: (-p[1], p[0]))]
            spec["model"]["unk_id"] = 0
            tok = tk.Tokenizer.from_str(json.dumps(spec))
        return cls(tok, scheme="words")

    @classmethod
    def from_file(cls, path: str | os.PathLike[str]) -> SubwordTokenizer:
        """A ``tokenizer.json`` (``tokenizers``' format; a ``transformers`` fast tokenizer's file), scheme ``"text"``.

        Raises:
            FileNotFoundError: no such file. ValueError: not a tokenizer file ``tokenizers`` reads.
        """
        p = Path(path).expanduser()
        if not p.is_file():
            raise FileNotFoundError(f"{str(path)!r}: no such file")
        return cls.from_bytes(p.read_bytes(), scheme="text")

    @classmethod
    def from_bytes(cls, data: bytes, *, scheme: str = "text") -> SubwordTokenizer:
        """The tokenizer :meth:`to_bytes` wrote (``scheme`` as it had).

        Raises:
            ValueError: bytes that are not a tokenizer file ``tokenizers`` reads.
        """
        tk = tokenizers_module()
        try:
            tok = tk.Tokenizer.from_str(data.decode("utf-8"))
        except (UnicodeDecodeError, Exception) as e:  # tokenizers raises its own Exception subclass
            first = str(e).splitlines()[0] if str(e) else type(e).__name__
            raise ValueError(f"not a tokenizer file of the tokenizers library ({first[:200]})") from None
        return cls(tok, scheme=scheme)

    def to_bytes(self) -> bytes:
        """The tokenizer as UTF-8 JSON, keys sorted (the same tokenizer gives the same bytes)."""
        return json.dumps(json.loads(self.tokenizer.to_str()), sort_keys=True, ensure_ascii=False,
                          separators=(",", ":")).encode()

    def sha256(self) -> str:
        return hashlib.sha256(self.to_bytes()).hexdigest()

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, SubwordTokenizer):
            return NotImplemented
        return self.scheme == other.scheme and self.to_bytes() == other.to_bytes()

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"SubwordTokenizer(scheme={self.scheme!r}, size={self.size})"

    # --- units --------------------------------------------------------------------------------
    def split(self, sentences: Iterable[Sequence[str]]) -> list[list[str]]:
        """The units of each sentence (a list of words). Cost: one batched call of the tokenizer.

        Raises:
            TypeError, ValueError: a sentence given as a ``str``, a word holding whitespace.
        """
        sents = _sentences(sentences)
        if self.scheme == "text":
            enc = self.tokenizer.encode_batch([" ".join(s) for s in sents], add_special_tokens=False)
            return [list(e.tokens) for e in enc]
        flat = [w for s in sents for w in s if w != UNK]
        enc = self.tokenizer.encode_batch(flat, add_special_tokens=False) if flat else []
        pieces = iter(enc)
        return [[u for w in s for u in ([UNK_WORD] if w == UNK else next(pieces).tokens)] for s in sents]

    def units(self, words: Sequence[str]) -> list[str]:
        """The units of one sentence (:meth:`split`)."""
        return self.split([words])[0]

    def decode(self, units: Sequence[str]) -> str:
        """Units back to text. ``"words"``: a unit starting with ``▁`` (and ``<unk>``) starts a word, the rest
        continue it; ``"text"``: the tokenizer's decoder (a unit it does not know is written as is)."""
        if self.scheme == "words":
            words: list[str] = []
            for u in units:
                if u.startswith(WORD_START) or not words:
                    words.append(u.removeprefix(WORD_START))
                else:
                    words[-1] += u
            return " ".join(w for w in words if w)
        out: list[str] = []
        run: list[int] = []
        for u in units:
            i = self.tokenizer.token_to_id(u)
            if i is None:
                out.append(self.tokenizer.decode(run, skip_special_tokens=False) if run else "")
                out.append(u)
                run = []
            else:
                run.append(i)
        if run:
            out.append(self.tokenizer.decode(run, skip_special_tokens=False))
        return " ".join(x.strip() for x in out if x.strip())


class SubwordVocabulary(Vocabulary):
    """A :class:`~ebms.data.text.Vocabulary` of subword units with the tokenizer that makes them (module docstring).

    Build it with :meth:`build` (units of the encoded training text by count) or :meth:`fixed` (a pretrained
    model's ids). ``level`` is ``"word"`` (units are whitespace-free strings, the boundary never inside a
    sentence); :attr:`scheme` and :attr:`tokenizer` say where the units come from.

    Args:
        tokenizer: the :class:`SubwordTokenizer`.
        units: the units in id order (ids ``2, 3, ...``), as :class:`~ebms.data.text.Vocabulary` takes tokens.
        counts: optional training count per id.
    """

    tokenizer: SubwordTokenizer
    #: the model's token id of our id 0 (``None``: ids of :meth:`build`, not a model's).
    boundary_id: int | None

    def __init__(self, tokenizer: SubwordTokenizer, units: Iterable[str], *, counts: Sequence[int] | None = None
                 ) -> None:
        if not isinstance(tokenizer, SubwordTokenizer):
            raise TypeError(f"tokenizer: expected a SubwordTokenizer; got {type(tokenizer).__name__}")
        super().__init__(units, level="word", counts=counts)
        self.tokenizer, self.boundary_id = tokenizer, None

    @property
    def scheme(self) -> str:
        return self.tokenizer.scheme

    def record(self) -> dict[str, Any]:
        """What a run stores beside the units to restore this vocabulary (:meth:`restore`): the tokenizer's
        scheme, size and sha256."""
        return {"scheme": self.scheme, "units": self.tokenizer.size, "tokenizer_sha256": self.tokenizer.sha256()}

    @classmethod
    def restore(cls, vocab: Vocabulary, record: Any, tokenizer: bytes) -> SubwordVocabulary:
        """The subword vocabulary of a stored word-level ``vocab`` (its ids), its :meth:`record` and the
        tokenizer's bytes (:meth:`SubwordTokenizer.to_bytes`).

        Raises:
            ValueError: a record that is not one, or a tokenizer whose sha256 is not the recorded one.
            ImportError: ``tokenizers`` is not installed.
        """
        if not isinstance(record, dict) or record.get("scheme") not in SCHEMES:
            raise ValueError(f"expected a subword record with a scheme in {SCHEMES}; got {record!r}")
        tok = SubwordTokenizer.from_bytes(tokenizer, scheme=record["scheme"])
        if tok.sha256() != record.get("tokenizer_sha256"):
            raise ValueError("not the tokenizer the vocabulary was built with (another sha256)")
        return cls(tok, vocab.tokens[2:], counts=vocab.counts)

    @classmethod
    def build(cls, tokenizer: SubwordTokenizer, sentences: Iterable[Sequence[str]],  # type: ignore[override]
              *, min_count: int = 1) -> SubwordVocabulary:
        """The units of ``sentences`` (lists of words) split by ``tokenizer``, kept when seen ``min_count`` times,
        ids by count (:meth:`Vocabulary.build <ebms.data.text.Vocabulary.build>` over the units).

        Raises:
            ValueError: no unit, a unit holding whitespace or a boundary marker (a ``"text"`` tokenizer's).
        """
        plain = Vocabulary.build(tokenizer.split(sentences), min_count=min_count)
        return cls(tokenizer, plain.tokens[2:], counts=plain.counts)

    @classmethod
    def fixed(cls, tokenizer: SubwordTokenizer, size: int, boundary_id: int) -> SubwordVocabulary:
        """The ids of a pretrained model: our id ``i`` is the model's id ``i`` with ``0`` and ``boundary_id``
        swapped (:class:`~ebms.models.lm.HuggingFaceLM`'s convention), so id ``0`` is the model's end-of-text
        unit. ``size`` is the model's vocabulary (ids beyond the tokenizer's are named ``<id N>``, never produced).

        Raises:
            ValueError: ``size`` below the tokenizer's vocabulary, ``boundary_id`` outside it.
        """
        check_int(size, "size", minimum=2)
        check_int(boundary_id, "boundary_id", minimum=0)
        if boundary_id >= size:
            raise ValueError(f"boundary_id: expected an id in [0, {size - 1}]; got {boundary_id}")
        known = tokenizer.tokenizer.get_vocab(with_added_tokens=True)
        if max(known.values(), default=-1) >= size:
            raise ValueError(f"size: the tokenizer has ids up to {max(known.values())}; the model has {size}")
        names = [f"<id {i}>" for i in range(size)]
        for unit, i in known.items():
            names[i] = unit
        names[0], names[boundary_id] = names[boundary_id], names[0]
        self = cls.__new__(cls)
        self.level, self.tokens, self.counts = "word", tuple(names), None
        self.index = {u: i for i, u in enumerate(names)}
        self.tokenizer, self.boundary_id = tokenizer, boundary_id
        return self

    # --- units and text -----------------------------------------------------------------------
    def split(self, sentences: Iterable[Sequence[str]]) -> list[list[str]]:
        """The units of each sentence of words (:meth:`SubwordTokenizer.split`), to :meth:`encode`."""
        return self.tokenizer.split(sentences)

    def unknown(self, units: Sequence[str]) -> int:
        """How many of ``units`` are scored as ``<unk>``: not in this vocabulary, or the tokenizer's ``<unk>``
        (none for a model's ids, where every unit the tokenizer makes has its id)."""
        if self.boundary_id is not None:
            unk = getattr(self.tokenizer.tokenizer.model, "unk_token", None)
            return sum(u == unk for u in units)
        return sum(self.index.get(u, 1) == 1 for u in units)

    def to_text(self, batch: Sequences) -> list[str]:
        """Decoded sentences as text (:meth:`SubwordTokenizer.decode` of their units)."""
        return [self.tokenizer.decode(s) for s in self.decode(batch)]

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Vocabulary):
            return NotImplemented
        if not isinstance(other, SubwordVocabulary):
            return False
        return (self.tokens, self.counts, self.boundary_id) == (other.tokens, other.counts, other.boundary_id) and \
            self.tokenizer == other.tokenizer

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"SubwordVocabulary(scheme={self.scheme!r}, size={len(self)})"
