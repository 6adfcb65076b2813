r"""Corpus BLEU through sacreBLEU, overall and by reference-length bucket.

.. math::  \mathrm{BLEU} = 100 \cdot \mathrm{BP} \cdot \exp\Big(\frac14 \sum_{n=1}^{4} \log p_n\Big),
           \qquad \mathrm{BP} = \min\big(1, e^{1 - r / c}\big),

with :math:`p_n` the clipped n-gram precision of the whole corpus (matches summed over sentences
before dividing), ``c`` the hypothesis and ``r`` the reference length in tokens (Papineni,
Roukos, Ward & Zhu 2002, *BLEU: a method for automatic evaluation of machine translation*). The
numbers come from the ``sacrebleu`` package (Post 2018, *A call for clarity in reporting BLEU
scores*) with its defaults (``13a`` tokenisation, exponential smoothing), so they match
``sacrebleu.corpus_bleu`` on the same strings; ``sacrebleu`` is imported on first use
(``pip install sacrebleu``).

Inputs are strings (one sentence each, tokens separated by spaces) or token-id
:class:`~ebms.sequences.Sequences` with a ``vocab`` whose ``to_text(Sequences) -> list[str]``
turns them into strings (:class:`ebms.data.text.Vocabulary`). One reference per hypothesis.

:func:`bleu_by_length` is the analogue of E-ARM's Table 7 (Wang et al. 2022, *Your
autoregressive generative model can be better if you treat it as an energy-based one*): corpus
BLEU of the sentences whose reference has ``low <= L < high`` tokens, per bucket, with the
number of sentences in each. Cost: ``O(total tokens)``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ebms._checks import check_int
from ebms.data.text import Vocabulary
from ebms.sequences import Sequences

__all__ = ["LengthBucketBLEU", "bleu_by_length", "corpus_bleu"]

Corpus = Sequences | Sequence[str]


@dataclass(frozen=True)
class LengthBucketBLEU:
    """Corpus BLEU of one reference-length bucket ``[low, high)`` (``high = None``: no upper end).

    Attributes:
        low, high: the bucket's bounds in reference tokens.
        bleu: BLEU in ``[0, 100]`` of its sentences, ``None`` when the bucket is empty.
        sentences: how many sentence pairs fell in it.
    """

    low: int
    high: int | None
    bleu: float | None
    sentences: int


def _texts(corpus: Any, vocab: Any, name: str) -> list[str]:
    if isinstance(corpus, Sequences):
        if not isinstance(vocab, Vocabulary):
            raise TypeError(f"vocab: {name} are token-id Sequences, so a vocabulary with to_text(Sequences) is "
                            f"needed (ebms.data.text.Vocabulary); got {type(vocab).__name__}")
        return list(vocab.to_text(corpus))
    if isinstance(corpus, str) or not isinstance(corpus, Sequence):
        raise TypeError(f"{name}: expected a list of strings or token-id Sequences; got {type(corpus).__name__}")
    bad = next((i for i, s in enumerate(corpus) if not isinstance(s, str)), None)
    if bad is not None:
        raise TypeError(f"{name}: expected strings; got {type(corpus[bad]).__name__} at index {bad}")
    return list(corpus)


def _pairs(hypotheses: Any, references: Any, vocab: Any) -> tuple[list[str], list[str]]:
    hyps, refs = _texts(hypotheses, vocab, "hypotheses"), _texts(references, vocab, "references")
    if len(hyps) != len(refs):
        raise ValueError(f"references: expected one per hypothesis ({len(hyps)}); got {len(refs)}")
    if not hyps:
        raise ValueError("hypotheses: expected at least one sentence; got none")
    return hyps, refs


def _import_sacrebleu() -> Any:
    try:
        import sacrebleu
    except ImportError:
        raise ImportError("corpus_bleu needs the sacrebleu package: pip install sacrebleu") from None
    return sacrebleu


def _tokenizers() -> tuple[str, ...] | None:
    """sacreBLEU's tokeniser names (``None`` when this sacreBLEU does not list them where we look)."""
    _import_sacrebleu()
    try:
        from sacrebleu.metrics import bleu as sacre_bleu_module

        names = sacre_bleu_module._TOKENIZERS  # sacreBLEU 2.x's table of tokenisers
    except (ImportError, AttributeError):
        return None
    return tuple(names)


def _check_tokenize(tokenize: object) -> str:
    """``tokenize`` is one of sacreBLEU's tokenisers (a ``ValueError`` listing them otherwise)."""
    if not isinstance(tokenize, str):
        raise TypeError(f"tokenize: expected a sacreBLEU tokeniser name (a str); got {type(tokenize).__name__}")
    names = _tokenizers()
    if names is not None and tokenize not in names:
        raise ValueError(f"tokenize: expected one of sacreBLEU's tokenisers ({', '.join(map(repr, names))}); "
                         f"got {tokenize!r}")
    return tokenize


def _sacrebleu(hyps: list[str], refs: list[str], tokenize: str) -> float:
    sacrebleu = _import_sacrebleu()
    try:
        return float(sacrebleu.corpus_bleu(hyps, [refs], tokenize=tokenize).score)
    except KeyError:  # an unknown tokeniser, in a sacreBLEU whose table _tokenizers could not read
        raise ValueError(f"tokenize: {tokenize!r} is not one of this sacreBLEU's tokenisers (e.g. '13a', "
                         "'none', 'intl', 'char')") from None


def corpus_bleu(hypotheses: Corpus, references: Corpus, *, vocab: Any = None, tokenize: str = "13a") -> float:
    """Corpus BLEU in ``[0, 100]`` (see the module docstring).

    Args:
        hypotheses: system outputs, strings or token-id Sequences.
        references: one reference per hypothesis, in the same forms.
        vocab: turns Sequences into strings (``to_text``); unused for strings.
        tokenize: sacreBLEU's tokeniser (``"13a"``, its default; ``"none"`` for pre-tokenised text;
            ``"intl"``, ``"char"``, ``"zh"``, ...).

    Raises:
        TypeError: a wrong input type, or Sequences without a vocabulary.
        ValueError: no sentences, different numbers of hypotheses and references, or a
            ``tokenize`` that sacreBLEU does not have (the message lists its tokenisers).
        ImportError: sacrebleu is not installed.

    Example:
        >>> round(corpus_bleu(["the cat sat on the mat"], ["the cat sat on the mat"]), 6)
        100.0
    """
    hyps, refs = _pairs(hypotheses, references, vocab)
    return _sacrebleu(hyps, refs, _check_tokenize(tokenize))


def bleu_by_length(hypotheses: Corpus, references: Corpus,
                   buckets: Sequence[tuple[int, int | None]] = ((0, 25), (25, 50), (50, None)), *,
                   vocab: Any = None, tokenize: str = "13a") -> list[LengthBucketBLEU]:
    """Corpus BLEU per reference-length bucket (E-ARM Table 7: ``[0, 25), [25, 50), [50, inf)``).

    The length of a reference is its number of tokens: ``lengths`` of Sequences, the number of
    space-separated words of a string. A sentence pair belongs to the bucket ``[low, high)``
    holding its reference length; buckets need not cover all lengths, but must not overlap (a
    sentence counted in two rows of a table would read as two results).

    Args:
        hypotheses, references, vocab, tokenize: as :func:`corpus_bleu`.
        buckets: ``(low, high)`` pairs with ``0 <= low < high`` (``high = None``: unbounded),
            pairwise disjoint, in any order.

    Raises:
        ValueError: a malformed bucket, or two buckets that overlap (both named), and the errors
            of :func:`corpus_bleu`.

    Returns:
        One :class:`LengthBucketBLEU` per bucket, in the given order.
    """
    hyps, refs = _pairs(hypotheses, references, vocab)
    tokenize = _check_tokenize(tokenize)
    if isinstance(references, Sequences):
        lengths = [int(n) for n in references.lengths.tolist()]
    else:
        lengths = [len(r.split()) for r in refs]
    bounds = _check_buckets(buckets)
    out = []
    for low, high in bounds:
        members = [j for j, n in enumerate(lengths) if n >= low and (high is None or n < high)]
        bleu = _sacrebleu([hyps[j] for j in members], [refs[j] for j in members], tokenize) if members else None
        out.append(LengthBucketBLEU(low, high, bleu, len(members)))
    return out


def _check_buckets(buckets: object) -> list[tuple[int, int | None]]:
    """``(low, high)`` pairs, ``0 <= low < high`` (``high`` ``None``: unbounded), no two overlapping."""
    if isinstance(buckets, (str, bytes)) or not isinstance(buckets, Sequence) or not buckets:
        raise ValueError(f"buckets: expected a non-empty list of (low, high) pairs; got {buckets!r}")
    bounds: list[tuple[int, int | None]] = []
    for i, bucket in enumerate(buckets):
        if isinstance(bucket, (str, bytes)) or not isinstance(bucket, Sequence) or len(bucket) != 2:
            raise ValueError(f"buckets[{i}]: expected a pair (low, high); got {bucket!r}")
        low, high = check_int(bucket[0], f"buckets[{i}] low", minimum=0), bucket[1]
        if high is not None and check_int(high, f"buckets[{i}] high", minimum=0) <= low:
            raise ValueError(f"buckets[{i}]: expected low < high; got {bucket!r}")
        bounds.append((low, high))
    order = sorted(range(len(bounds)), key=lambda k: bounds[k][0])
    for a, b in zip(order, order[1:]):  # sorted by low: only neighbours can overlap first
        high = bounds[a][1]
        if high is None or high > bounds[b][0]:
            raise ValueError(f"buckets: buckets[{a}] {tuple(bounds[a])} and buckets[{b}] {tuple(bounds[b])} overlap "
                             "(lengths in both would be counted twice); give disjoint [low, high) ranges")
    return bounds
