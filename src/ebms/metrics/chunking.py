"""Chunk-level precision, recall and F1 with the definition of the CoNLL ``conlleval`` script.

A chunk is a maximal run of tokens read from the tags with conlleval's boundary
rules (see :func:`ebms.data.conll.bio_to_spans`: IOB1, IOB2 and IOBES are all
accepted; an ``I-`` after ``O`` or after another type starts a new chunk). A
predicted chunk is correct only when its type, first and last token all equal
those of a true chunk. Chunks never cross sentence boundaries. With ``C``
correct, ``P`` predicted and ``T`` true chunks::

    precision = 100 C / P,   recall = 100 C / T,   F1 = 2 precision recall / (precision + recall)

in **percent**, as conlleval prints them (0 where the denominator is 0).
Token accuracy is the percentage of tokens whose prefix and type (``O`` included) are
both equal (so ``B`` and ``B-``, both untyped, are the same tag, as in conlleval). Per-type scores use the chunks of each type.
Cost: O(total tokens).

On IOB1/IOB2 tags the counts equal those of ``conlleval`` (version 2004-01-26); the
script has no ``S-`` rules, so for IOBES tags the boundary rules are extended to read
``S-`` as a single-token chunk and ``E-`` as a chunk's last token.

Untyped tags: a bare prefix (``B``, ``I``, ``E``, ``S``, or the same with an empty type,
``B-``) has the type ``""``, as conlleval reads it (everything after the first ``-``, empty
when there is none; :func:`ebms.data.conll.parse_tag`); its chunks follow the same boundary
rules, a change between ``""`` and a named type included, and are scored under the key ``""``
of ``per_type``. seqeval reads such tags the same way and names the type ``"_"``; the counts
agree.

Reference:
    Tjong Kim Sang & Buchholz (2000), "Introduction to the CoNLL-2000 Shared Task: Chunking"
    (the ``conlleval`` evaluation script distributed with the shared task).

Example:
    >>> r = conlleval([["B-NP", "I-NP", "O"]], [["B-NP", "B-NP", "O"]])
    >>> r.n_correct, r.n_pred, r.n_true, round(r.f1, 2)
    (0, 2, 1, 0.0)
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field

from ebms.data.conll import bio_to_spans, parse_tag

__all__ = ["ChunkScores", "TypeScores", "conlleval"]


def _prf(correct: int, pred: int, true: int) -> tuple[float, float, float]:
    p = 100.0 * correct / pred if pred else 0.0
    r = 100.0 * correct / true if true else 0.0
    f = 2.0 * p * r / (p + r) if p + r > 0 else 0.0
    return p, r, f


@dataclass(frozen=True)
class TypeScores:
    """Scores of one chunk type (percent) and its counts (``n_pred``: chunks found by the prediction)."""

    precision: float
    recall: float
    f1: float
    n_correct: int
    n_pred: int
    n_true: int


@dataclass(frozen=True)
class ChunkScores:
    """Result of :func:`conlleval`; all scores in percent.

    Attributes:
        precision, recall, f1: overall chunk scores.
        accuracy: token accuracy (full tag string equal).
        n_tokens, n_correct_tags: token counts.
        n_correct, n_pred, n_true: correct, predicted and true chunks.
        per_type: :class:`TypeScores` per chunk type (union of true and predicted types), sorted by name.
    """

    precision: float
    recall: float
    f1: float
    accuracy: float
    n_tokens: int
    n_correct_tags: int
    n_correct: int
    n_pred: int
    n_true: int
    per_type: dict[str, TypeScores] = field(default_factory=dict)

    def report(self) -> str:
        """The summary in conlleval's text layout."""
        lines = [
            f"processed {self.n_tokens} tokens with {self.n_true} phrases; "
            f"found: {self.n_pred} phrases; correct: {self.n_correct}."
        ]
        if self.n_tokens > 0:
            lines.append(
                f"accuracy: {self.accuracy:6.2f}%; precision: {self.precision:6.2f}%; "
                f"recall: {self.recall:6.2f}%; FB1: {self.f1:6.2f}"
            )
        for kind, s in self.per_type.items():
            lines.append(
                f"{kind:>17}: precision: {s.precision:6.2f}%; recall: {s.recall:6.2f}%; FB1: {s.f1:6.2f}  {s.n_pred}"
            )
        return "\n".join(lines) + "\n"


def _check_sentences(tags: object, name: str) -> list[list[str]]:
    if isinstance(tags, str) or not isinstance(tags, Sequence):
        raise TypeError(f"{name}: expected a list of sentences (lists of tag strings); got {type(tags).__name__}")
    out = []
    for i, sent in enumerate(tags):
        if isinstance(sent, str) or not isinstance(sent, Sequence):
            raise TypeError(
                f"{name}: expected a list of sentences (lists of tag strings); sentence {i} is "
                f"{type(sent).__name__} {sent!r}"
            )
        out.append(list(sent))
    return out


def conlleval(true_tags: Sequence[Sequence[str]], pred_tags: Sequence[Sequence[str]]) -> ChunkScores:
    """Chunk precision/recall/F1 (percent) of ``pred_tags`` against ``true_tags``, as conlleval computes them.

    Args:
        true_tags: gold tags, one list of strings per sentence (IOB1, IOB2 or IOBES; a prefix
            without a type, ``B``/``I``/``E``/``S``, has the type ``""``).
        pred_tags: predicted tags, same number of sentences and the same length for each.

    Returns:
        A :class:`ChunkScores`; ``.report()`` gives conlleval's text.

    Raises:
        ValueError: a different number of sentences, a sentence of a different length (named by
            index) or a malformed tag (named, with its sentence and argument).
        TypeError: arguments that are not lists of sentences.
    """
    gold = _check_sentences(true_tags, "true_tags")
    pred = _check_sentences(pred_tags, "pred_tags")
    if len(gold) != len(pred):
        raise ValueError(f"pred_tags: expected {len(gold)} sentences like true_tags; got {len(pred)}")
    n_tok = n_ok_tags = 0
    correct: Counter[str] = Counter()
    found: Counter[str] = Counter()
    truth: Counter[str] = Counter()
    for i, (g, p) in enumerate(zip(gold, pred)):
        if len(g) != len(p):
            raise ValueError(f"pred_tags: sentence {i} has {len(p)} tags; true_tags has {len(g)}")
        spans = []
        for name, seq in (("true_tags", g), ("pred_tags", p)):
            try:
                spans.append(bio_to_spans(seq))
            except (ValueError, TypeError) as err:
                raise ValueError(f"{name}: sentence {i}: {err}") from err
        g_spans, p_spans = spans
        truth.update(k for k, _, _ in g_spans)
        found.update(k for k, _, _ in p_spans)
        correct.update(k for k, _, _ in set(g_spans) & set(p_spans))
        n_tok += len(g)
        n_ok_tags += sum(a == b or parse_tag(a) == parse_tag(b) for a, b in zip(g, p))
    per_type = {
        k: TypeScores(*_prf(correct[k], found[k], truth[k]), correct[k], found[k], truth[k])
        for k in sorted(set(truth) | set(found))
    }
    nc, npred, ntrue = sum(correct.values()), sum(found.values()), sum(truth.values())
    p_all, r_all, f_all = _prf(nc, npred, ntrue)
    acc = 100.0 * n_ok_tags / n_tok if n_tok else 0.0
    return ChunkScores(p_all, r_all, f_all, acc, n_tok, n_ok_tags, nc, npred, ntrue, per_type)
