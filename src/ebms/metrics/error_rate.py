"""Edit-distance error rates: label error rate (LER), word error rate (WER), sentence error rate.

The Levenshtein distance (Levenshtein, 1966, "Binary codes capable of correcting deletions,
insertions and reversals") between a reference ``r`` (length ``n``) and a hypothesis ``h``
(length ``m``) is the least number of substitutions, deletions and insertions turning ``r`` into
``h``:

    D(i, 0) = i,   D(0, j) = j,
    D(i, j) = min(D(i-1, j-1) + [r_i != h_j],  D(i-1, j) + 1 (deletion),  D(i, j-1) + 1 (insertion)).

The split into substitutions / deletions / insertions follows one optimal alignment, traced back
preferring a match or substitution, then a deletion, then an insertion (the total is unique;
the split is a tie-break, though ``deletions - insertions = n - m`` always holds). The error rate
of a corpus is ``sum of errors / sum of reference lengths`` (Graves et al., 2006, label error
rate; NIST sclite's WER). Cost ``O(n m)`` per pair.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from dataclasses import dataclass

__all__ = ["ErrorRate", "edit_distance", "error_rate"]


def _as_seq(x: object, name: str) -> Sequence[Hashable]:
    if isinstance(x, (str, bytes)) or not isinstance(x, Sequence):
        raise TypeError(f"{name}: expected a sequence of labels (list or tuple); got {type(x).__name__}")
    return x


def edit_distance(ref: Sequence[Hashable], hyp: Sequence[Hashable]) -> tuple[int, int, int, int]:
    """``(errors, substitutions, deletions, insertions)`` of ``hyp`` against ``ref``.

    ``errors`` is the Levenshtein distance; the other three follow one optimal alignment (module
    docstring) and sum to it.
    """
    r, h = _as_seq(ref, "ref"), _as_seq(hyp, "hyp")
    n, m = len(r), len(h)
    d = [[0] * (m + 1) for _ in range(n + 1)]
    for i in range(n + 1):
        d[i][0] = i
    for j in range(m + 1):
        d[0][j] = j
    for i in range(1, n + 1):
        ri, row, up = r[i - 1], d[i], d[i - 1]
        for j in range(1, m + 1):
            row[j] = min(up[j - 1] + (ri != h[j - 1]), up[j] + 1, row[j - 1] + 1)
    i, j, sub, dele, ins = n, m, 0, 0, 0
    while i > 0 or j > 0:
        if i > 0 and j > 0 and d[i][j] == d[i - 1][j - 1] + (r[i - 1] != h[j - 1]):
            sub += r[i - 1] != h[j - 1]
            i, j = i - 1, j - 1
        elif i > 0 and d[i][j] == d[i - 1][j] + 1:
            dele, i = dele + 1, i - 1
        else:
            ins, j = ins + 1, j - 1
    return d[n][m], int(sub), dele, ins


@dataclass(frozen=True)
class ErrorRate:
    """Corpus error counts.

    Attributes:
        rate: ``errors / ref_length`` (a fraction; :attr:`percent` is ``100 * rate``).
        errors: total edit distance.
        ref_length: total reference labels.
        substitutions, deletions, insertions: the split of ``errors``.
        sentences: number of (reference, hypothesis) pairs.
        sentence_errors: pairs with at least one error.
    """

    rate: float
    errors: int
    ref_length: int
    substitutions: int
    deletions: int
    insertions: int
    sentences: int
    sentence_errors: int

    @property
    def percent(self) -> float:
        """The error rate in percent."""
        return 100.0 * self.rate

    @property
    def sentence_error_rate(self) -> float:
        """Fraction of pairs with at least one error."""
        return self.sentence_errors / self.sentences


def error_rate(refs: Sequence[Sequence[Hashable]], hyps: Sequence[Sequence[Hashable]]) -> ErrorRate:
    """Corpus-level error rate of ``hyps`` against ``refs`` (label lists; words for WER).

    Raises:
        ValueError: different numbers of references and hypotheses, no pairs, or references
            with no labels at all (the rate would be 0/0).
    """
    _as_seq(refs, "refs")
    _as_seq(hyps, "hyps")
    if len(refs) != len(hyps):
        raise ValueError(f"hyps: expected one hypothesis per reference ({len(refs)}); got {len(hyps)}")
    if len(refs) == 0:
        raise ValueError("refs: expected at least one reference; got an empty list")
    tot = [0, 0, 0, 0]
    length, wrong = 0, 0
    for k, (r, h) in enumerate(zip(refs, hyps)):
        counts = edit_distance(_as_seq(r, f"refs[{k}]"), _as_seq(h, f"hyps[{k}]"))
        tot = [a + b for a, b in zip(tot, counts)]
        length += len(r)
        wrong += counts[0] > 0
    if length == 0:
        raise ValueError("refs: expected at least one reference label in total; got only empty references")
    return ErrorRate(tot[0] / length, tot[0], length, tot[1], tot[2], tot[3], len(refs), int(wrong))
