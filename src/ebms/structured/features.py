"""Indicator attributes for feature-based CRF taggers, and their integer encoding.

An *attribute* is a named, real-valued observation of one token (``"w[0]=He": 1.0``). A
feature-based CRF pairs every attribute ``a`` with every tag ``y`` into a state feature of weight
``W[a, y]``; the node potential of tag ``y`` at token ``t`` is ``sum_a value_t(a) W[a, y]``
(Lafferty, McCallum & Pereira, 2001; Sutton & McCallum, 2012, "An introduction to conditional
random fields", section 2.5).

Attributes come as one ``dict[str, float]`` per token. :func:`to_attributes` turns mixed dicts
into that form with python-crfsuite's ``ItemSequence`` rule: a string value ``v`` under key ``k``
is the attribute ``"k:v"`` with value 1, a number or bool is the attribute ``k`` with that value,
a nested dict ``{k: {...}}`` prefixes its keys with ``"k:"``.

Templates:

* :func:`chunking_features`: CRFsuite's CoNLL-2000 benchmark template (Okazaki, 2007,
  ``example/chunking.py``): words at offsets -2..2, word bigrams (-1,0), (0,1), POS at -2..2,
  POS bigrams (-2,-1), (-1,0), (0,1), (1,2), POS trigrams (-2,-1,0), (-1,0,1), (0,1,2); a template
  whose offsets leave the sentence is skipped; ``__BOS__``/``__EOS__`` on the first/last token.
  Names read ``"w[-1]|w[0]=the|cat"``.
* :func:`ner_features`: the ``word2features`` of the sklearn-crfsuite CoNLL-2002 tutorial
  (Korobov, 2015): bias, lower-cased word, 3- and 2-letter suffixes, case and digit flags, POS
  and its 2-letter prefix, the same (lower/title/upper/POS) for the neighbours, BOS/EOS flags.

:class:`AttributeVocabulary` maps attribute names to ids ``1..A-1`` (``0`` is padding) in
first-seen order, and :meth:`~AttributeVocabulary.encode` packs a corpus into padded tensors
``ids (N, T, F)``, ``values (N, T, F)``, ``lengths (N,)``. :func:`observed_pairs` and
:func:`observed_transitions` give the attribute-tag and tag-tag pairs seen in training: CRFsuite
creates features only for those by default (``feature.possible_states = 0``,
``feature.possible_transitions = 0``). Cost: O(total attributes) time and memory.
"""

from __future__ import annotations

from array import array
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

import torch
import torch.nn.functional as F
from torch import Tensor

from ebms._checks import check_int, check_shape, check_tensor
from ebms.capabilities import supports

__all__ = [
    "FEATURE_SETS",
    "AttributeVocabulary",
    "EncodedCorpus",
    "attribute_emissions",
    "chunking_features",
    "ner_features",
    "observed_pairs",
    "observed_transitions",
    "to_attributes",
]

Attributes = dict[str, float]

# (field, offset) tuples of CRFsuite's CoNLL-2000 template.
_CHUNK_TEMPLATES: tuple[tuple[tuple[str, int], ...], ...] = (
    *((("w", i),) for i in range(-2, 3)),
    (("w", -1), ("w", 0)), (("w", 0), ("w", 1)),
    *((("pos", i),) for i in range(-2, 3)),
    *((("pos", i), ("pos", i + 1)) for i in range(-2, 2)),
    *((("pos", i), ("pos", i + 1), ("pos", i + 2)) for i in range(-2, 1)),
)


def to_attributes(item: Mapping[str, Any], prefix: str = "") -> Attributes:
    """One token's mixed dict as ``{attribute: value}`` (python-crfsuite's rule, see module doc)."""
    out: Attributes = {}
    for key, value in item.items():
        name = f"{prefix}{key}"
        if isinstance(value, str):
            out[f"{name}:{value}"] = 1.0
        elif isinstance(value, Mapping):
            out.update(to_attributes(value, prefix=f"{name}:"))
        elif isinstance(value, (bool, int, float)):
            out[name] = float(value)
        else:
            raise TypeError(f"item[{name!r}]: expected a str, number, bool or dict; "
                            f"got {type(value).__name__}")
    return out


@runtime_checkable
class _HasColumns(Protocol):
    """A sentence that gives its ``i``-th column as a list of strings (e.g. :class:`~ebms.data.conll.Sentence`)."""

    def column(self, i: int) -> list[str]: ...


def _columns(sentence: Any, names: Sequence[str]) -> list[list[str]]:
    """Columns of a :class:`~ebms.data.conll.Sentence` or of a list of token tuples."""
    if supports(sentence, _HasColumns):  # resolved once per class: this runs per sentence
        return [sentence.column(i) for i in range(len(names))]
    rows = list(sentence)
    for i, row in enumerate(rows):
        if not isinstance(row, (tuple, list)) or len(row) < len(names):
            raise ValueError(f"sentence[{i}]: expected a tuple of at least {len(names)} fields "
                             f"({', '.join(names)}); got {row!r}")
    return [[row[j] for row in rows] for j in range(len(names))]


def chunking_features(sentence: Any) -> list[Attributes]:
    """CRFsuite's CoNLL-2000 attributes of a sentence whose first two columns are word and POS.

    Args:
        sentence: a :class:`~ebms.data.conll.Sentence` or a list of ``(word, pos, ...)`` tuples.

    Returns:
        one ``{attribute: 1.0}`` dict per token, e.g. ``"w[0]=He"``, ``"pos[-1]|pos[0]=DT|NN"``.
    """
    words, pos = _columns(sentence, ("word", "pos"))
    fields = {"w": words, "pos": pos}
    n = len(words)
    out: list[Attributes] = []
    for t in range(n):
        attrs: Attributes = {}
        for template in _CHUNK_TEMPLATES:
            if all(0 <= t + off < n for _, off in template):
                name = "|".join(f"{f}[{off}]" for f, off in template)
                value = "|".join(fields[f][t + off] for f, off in template)
                attrs[f"{name}={value}"] = 1.0
        out.append(attrs)
    if n:
        out[0]["__BOS__"] = 1.0
        out[-1]["__EOS__"] = 1.0
    return out


def ner_features(sentence: Any) -> list[Attributes]:
    """The sklearn-crfsuite tutorial's ``word2features`` for a ``(word, pos, ...)`` sentence.

    Returns:
        one attribute dict per token, with python-crfsuite's naming (``"word.lower():la"``,
        ``"word.istitle()": 0.0``...).
    """
    words, pos = _columns(sentence, ("word", "pos"))
    n = len(words)
    out: list[Attributes] = []
    for t, (w, p) in enumerate(zip(words, pos)):
        item: dict[str, Any] = {
            "bias": 1.0, "word.lower()": w.lower(), "word[-3:]": w[-3:], "word[-2:]": w[-2:],
            "word.isupper()": w.isupper(), "word.istitle()": w.istitle(),
            "word.isdigit()": w.isdigit(), "postag": p, "postag[:2]": p[:2],
        }
        for side, j, edge in (("-1", t - 1, "BOS"), ("+1", t + 1, "EOS")):
            if 0 <= j < n:
                item.update({f"{side}:word.lower()": words[j].lower(),
                             f"{side}:word.istitle()": words[j].istitle(),
                             f"{side}:word.isupper()": words[j].isupper(),
                             f"{side}:postag": pos[j], f"{side}:postag[:2]": pos[j][:2]})
            else:
                item[edge] = True
        out.append(to_attributes(item))
    return out


#: Attribute extractors by name.
FEATURE_SETS: dict[str, Callable[[Any], list[Attributes]]] = {
    "crfsuite-chunking": chunking_features,
    "crfsuite-ner": ner_features,
}


@dataclass(frozen=True)
class EncodedCorpus:
    """A corpus of attribute vectors without padding (what :meth:`AttributeVocabulary.encode_flat` returns).

    Token ``j`` (tokens numbered sentence after sentence) holds the attributes
    ``ids[offsets[j]:offsets[j + 1]]`` with values ``values[...]``; sentence ``i`` holds
    ``lengths[i]`` consecutive tokens. Memory: ``16 M + 8 (tokens + N)`` bytes for ``M``
    non-zero attribute values, against ``16 N T F`` for the padded ``(N, T, F)`` tensors of
    :meth:`AttributeVocabulary.encode` (on CoNLL-2002 Spanish, where one sentence has 1,238
    tokens, that is about 110 MB against 4 GB).

    Attributes:
        ids: ``(M,)`` long attribute ids (never the padding id 0).
        values: ``(M,)`` float64 attribute values (never 0).
        offsets: ``(tokens + 1,)`` long, where each token's attributes start.
        lengths: ``(N,)`` long sentence lengths.
    """

    ids: Tensor
    values: Tensor
    offsets: Tensor
    lengths: Tensor

    def __len__(self) -> int:
        return int(self.lengths.shape[0])

    def padded(self, rows: Tensor | None = None) -> tuple[Tensor, Tensor, Tensor]:
        """``ids (B, T, F)``, ``values (B, T, F)``, ``lengths (B,)`` of the sentences ``rows``.

        ``T`` and ``F`` are the largest length and attribute count among those sentences only, so
        length-sorted batches carry little padding. ``rows=None``: every sentence, in order.
        """
        rows = torch.arange(len(self)) if rows is None else rows
        ln = self.lengths[rows]
        b, t = int(rows.shape[0]), int(ln.max()) if rows.numel() else 0
        starts = torch.cumsum(self.lengths, 0) - self.lengths  # first token of each sentence
        valid = torch.arange(t) < ln[:, None]  # (B, T)
        tokens = (starts[rows][:, None] + torch.arange(t))[valid]  # (n,)
        first, count = self.offsets[tokens], self.offsets[tokens + 1] - self.offsets[tokens]
        f = max(int(count.max()) if count.numel() else 0, 1)
        keep = torch.arange(f) < count[:, None]  # (n, F)
        where = (first[:, None] + torch.arange(f)).clamp_max(max(self.ids.shape[0] - 1, 0))
        ids = torch.zeros(b, t, f, dtype=torch.long)
        values = torch.zeros(b, t, f, dtype=self.values.dtype)
        if self.ids.numel():
            ids[valid] = torch.where(keep, self.ids[where], 0)
            values[valid] = torch.where(keep, self.values[where], 0.0)
        return ids, values, ln

    def observed_pairs(self, tags: Tensor, n_attributes: int, n_tags: int) -> Tensor:
        """``(A, C)`` bool: attribute ``a`` occurred on a token tagged ``c`` (as :func:`observed_pairs`).

        Args:
            tags: ``(N, T)`` tag ids, ``T >= max(lengths)`` (entries beyond a length are ignored).
        """
        check_tensor(tags, "tags")
        t = int(self.lengths.max()) if len(self) else 0
        if tags.dim() != 2 or tags.shape[0] != len(self) or tags.shape[1] < t:
            raise ValueError(f"tags: expected shape ({len(self)}, >= {t}); got {tuple(tags.shape)}")
        per_token = tags[torch.arange(tags.shape[1]) < self.lengths[:, None]]  # (tokens,)
        token_of = torch.repeat_interleave(torch.arange(per_token.shape[0]), self.offsets.diff())
        mask = torch.zeros(n_attributes * n_tags, dtype=torch.bool)
        mask[self.ids * n_tags + per_token[token_of]] = True
        return mask.view(n_attributes, n_tags)


class AttributeVocabulary:
    """Attribute names <-> ids (``0`` is padding) and, optionally, tag names <-> ids.

    Args:
        attributes: names in id order, without the padding entry.
        tags: tag names in id order (``None`` when unknown).

    Build one with :meth:`fit`; ``len(vocab)`` counts the padding id.
    """

    PAD = "<pad>"

    def __init__(self, attributes: Sequence[str], tags: Sequence[str] | None = None) -> None:
        self.attributes: list[str] = [self.PAD, *attributes]
        self.index: dict[str, int] = {a: i for i, a in enumerate(self.attributes)}
        if len(self.index) != len(self.attributes):
            raise ValueError("attributes: expected distinct names (and none equal to '<pad>')")
        self.tags: list[str] | None = None if tags is None else list(tags)
        self.tag_index: dict[str, int] = {} if tags is None else {t: i for i, t in enumerate(tags)}

    def __len__(self) -> int:
        return len(self.attributes)

    @classmethod
    def fit(cls, feature_seqs: Sequence[Sequence[Mapping[str, float]]],
            tag_seqs: Sequence[Sequence[str]] | None = None, *,
            min_count: int = 1) -> AttributeVocabulary:
        """Attributes seen at least ``min_count`` times (ids in first-seen order); tags likewise."""
        check_int(min_count, "min_count", minimum=1)
        _check_corpus(feature_seqs, tag_seqs)
        counts: Counter[str] = Counter()
        for seq in feature_seqs:
            for item in seq:
                counts.update(item.keys())
        attrs = [a for a, c in counts.items() if c >= min_count]  # Counter keeps first-seen order
        tags = None
        if tag_seqs is not None:
            tags = list(dict.fromkeys(t for seq in tag_seqs for t in seq))
        return cls(attrs, tags)

    def encode(self, feature_seqs: Sequence[Sequence[Mapping[str, float]]]
               ) -> tuple[Tensor, Tensor, Tensor]:
        """Padded ``ids (N, T, F)`` long, ``values (N, T, F)`` float64, ``lengths (N,)`` long.

        ``T`` is the longest sentence, ``F`` the most attributes on one token; padding has id 0
        and value 0. Unknown attributes and zero values are dropped (they add nothing to a score).
        """
        _check_corpus(feature_seqs, None)
        index = self.index
        pos_n: list[int] = []
        pos_t: list[int] = []
        pos_f: list[int] = []
        id_list: list[int] = []
        val_list: list[float] = []
        lens: list[int] = []
        f = 1
        for i, seq in enumerate(feature_seqs):
            lens.append(len(seq))
            for j, item in enumerate(seq):
                k = 0
                for a, v in item.items():
                    if v != 0 and a in index:
                        pos_n.append(i)
                        pos_t.append(j)
                        pos_f.append(k)
                        id_list.append(index[a])
                        val_list.append(float(v))
                        k += 1
                f = max(f, k)
        n, t = len(lens), max(lens, default=0)
        ids = torch.zeros(n, t, f, dtype=torch.long)
        values = torch.zeros(n, t, f, dtype=torch.float64)
        where = (torch.tensor(pos_n, dtype=torch.long), torch.tensor(pos_t, dtype=torch.long),
                 torch.tensor(pos_f, dtype=torch.long))
        ids[where] = torch.tensor(id_list, dtype=torch.long)
        values[where] = torch.tensor(val_list, dtype=torch.float64)
        lengths = torch.tensor(lens, dtype=torch.long)
        return ids, values, lengths

    def encode_flat(self, feature_seqs: Iterable[Sequence[Mapping[str, float]]], *,
                    grow: bool = False) -> EncodedCorpus:
        """The corpus as an :class:`EncodedCorpus` (no padding), reading the sentences one at a time.

        ``feature_seqs`` may be a generator: only the integer encoding is kept, never the
        attribute dicts, so memory stays at the :class:`EncodedCorpus`'s size. Unknown attributes
        and zero values are dropped; with ``grow=True`` unknown attributes are added instead
        (first-seen order), so ``AttributeVocabulary([]).encode_flat(seqs, grow=True)`` builds the
        vocabulary of ``fit(seqs)`` and the encoding in one pass.
        """
        index, names = self.index, self.attributes
        ids, values, offsets, lens = array("q"), array("d"), array("q", [0]), array("q")
        for seq in feature_seqs:
            lens.append(len(seq))
            for item in seq:
                for a, v in item.items():
                    if v == 0:
                        continue
                    k = index.get(a)
                    if k is None:
                        if not grow:
                            continue
                        k = index[a] = len(names)
                        names.append(a)
                    ids.append(k)
                    values.append(float(v))
                offsets.append(len(ids))
        def tensor(a: array, dtype: torch.dtype) -> Tensor:  # noqa: E306 - a tiny local helper
            return torch.frombuffer(a, dtype=dtype).clone() if len(a) else torch.zeros(0, dtype=dtype)

        return EncodedCorpus(tensor(ids, torch.long), tensor(values, torch.float64),
                             tensor(offsets, torch.long), tensor(lens, torch.long))

    def encode_tags(self, tag_seqs: Sequence[Sequence[str]]) -> Tensor:
        """Tag ids ``(N, T)`` long, padded with 0; unknown tags raise ``ValueError``."""
        if self.tags is None:
            raise ValueError("tag_seqs: this vocabulary was fit without tags; pass tag_seqs to fit")
        t = max((len(s) for s in tag_seqs), default=0)
        out = torch.zeros(len(tag_seqs), t, dtype=torch.long)
        for i, seq in enumerate(tag_seqs):
            for j, tag in enumerate(seq):
                if tag not in self.tag_index:
                    raise ValueError(f"tag_seqs[{i}][{j}]: expected one of {self.tags}; got {tag!r}")
                out[i, j] = self.tag_index[tag]
        return out

    def decode_tags(self, tag_ids: Tensor, lengths: Tensor) -> list[list[str]]:
        """Tag names of ``tag_ids (N, T)`` up to each length."""
        if self.tags is None:
            raise ValueError("tag_ids: this vocabulary was fit without tags")
        return [[self.tags[k] for k in row[: int(n)].tolist()] for row, n in zip(tag_ids, lengths)]


def _check_corpus(feature_seqs: Any, tag_seqs: Any) -> None:
    if not isinstance(feature_seqs, Sequence):
        raise TypeError(f"feature_seqs: expected a sequence of sentences; got "
                        f"{type(feature_seqs).__name__}")
    if tag_seqs is None:
        return
    if len(tag_seqs) != len(feature_seqs):
        raise ValueError(f"tag_seqs: expected {len(feature_seqs)} sentences (as feature_seqs); "
                         f"got {len(tag_seqs)}")
    for i, (x, y) in enumerate(zip(feature_seqs, tag_seqs)):
        if len(x) != len(y):
            raise ValueError(f"tag_seqs[{i}]: expected {len(x)} tags (as feature_seqs[{i}]); "
                             f"got {len(y)}")


def _valid(ids: Tensor, lengths: Tensor) -> Tensor:
    check_tensor(ids, "ids")
    if ids.dim() != 3:
        raise ValueError(f"ids: expected shape (N, T, F); got {tuple(ids.shape)}")
    check_tensor(lengths, "lengths")
    check_shape(lengths, (ids.shape[0],), "lengths")
    return torch.arange(ids.shape[1]) < lengths[:, None]


def observed_pairs(ids: Tensor, tags: Tensor, lengths: Tensor, n_attributes: int,
                   n_tags: int) -> Tensor:
    """``(A, C)`` bool: attribute ``a`` occurred on a token tagged ``c`` (padding id excluded)."""
    valid = _valid(ids, lengths)
    check_shape(tags, ids.shape[:2], "tags")
    a = ids[valid]  # (M, F)
    c = tags[valid].unsqueeze(-1).expand_as(a)
    keep = a > 0
    mask = torch.zeros(n_attributes * n_tags, dtype=torch.bool)
    mask[a[keep] * n_tags + c[keep]] = True
    return mask.view(n_attributes, n_tags)


def observed_transitions(tags: Tensor, lengths: Tensor, n_tags: int) -> Tensor:
    """``(C, C)`` bool: tag ``j`` was followed by tag ``k`` somewhere in training."""
    check_tensor(tags, "tags")
    if tags.dim() != 2:
        raise ValueError(f"tags: expected shape (N, T); got {tuple(tags.shape)}")
    check_shape(lengths, (tags.shape[0],), "lengths")
    both = torch.arange(1, max(tags.shape[1], 1)) < lengths[:, None]  # (N, T - 1); no tag at all: (N, 0)
    mask = torch.zeros(n_tags * n_tags, dtype=torch.bool)
    mask[tags[:, :-1][both] * n_tags + tags[:, 1:][both]] = True
    return mask.view(n_tags, n_tags)


def attribute_emissions(w: Tensor, ids: Tensor, weights: Tensor) -> Tensor:
    """Node potentials ``sum_f weights[..., f] * w[ids[..., f]]``: ``(..., C)`` for ``w (A, C)`` and
    ``ids, weights (..., F)`` (one ``embedding_bag``; no input checks)."""
    flat = ids.reshape(-1, ids.shape[-1])
    em = F.embedding_bag(flat, w, per_sample_weights=weights.reshape(flat.shape).to(w.dtype), mode="sum")
    return em.view(*ids.shape[:-1], w.shape[1])
