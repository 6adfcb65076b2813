"""Token-level tagging scores: accuracy and F1 over the flattened token list.

Every token counts once, whatever its sentence. For a label ``c`` with ``tp_c`` tokens predicted
``c`` and truly ``c``, ``fp_c`` predicted ``c`` but not, ``fn_c`` truly ``c`` but not predicted:

    P_c = tp_c / (tp_c + fp_c),  R_c = tp_c / (tp_c + fn_c),  F1_c = 2 P_c R_c / (P_c + R_c)

(0 when a denominator is 0, as scikit-learn's ``zero_division=0``). ``average``:

* ``"micro"``: F1 from the summed ``tp, fp, fn`` over ``labels``;
* ``"macro"``: unweighted mean of ``F1_c`` over ``labels``;
* ``"weighted"``: mean of ``F1_c`` weighted by the true count (support) of ``c``.

These equal ``sklearn.metrics.f1_score`` on the flattened lists with the same ``labels`` and
``average``; the sklearn-crfsuite tutorial's NER figure is the weighted F1 over every label but
``"O"``. For chunk-level scores use :func:`ebms.metrics.chunking.conlleval`. Cost: O(tokens).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Hashable, Sequence

__all__ = ["token_accuracy", "token_f1"]


def _flatten(true_seqs: Sequence[Sequence[Hashable]],
             pred_seqs: Sequence[Sequence[Hashable]]) -> tuple[list[Hashable], list[Hashable]]:
    for name, seqs in (("true_seqs", true_seqs), ("pred_seqs", pred_seqs)):
        if isinstance(seqs, (str, bytes)) or not isinstance(seqs, Sequence):
            raise TypeError(f"{name}: expected a list of tag sequences (one list per sentence); "
                            f"got {type(seqs).__name__}")
        for i, seq in enumerate(seqs):
            # a flat list of tag strings would otherwise be scored character by character
            if isinstance(seq, (str, bytes)) or not isinstance(seq, Sequence):
                raise TypeError(f"{name}[{i}]: expected a sequence of tags (list or tuple), one per "
                                f"sentence; got {type(seq).__name__} {seq!r} (wrap a flat tag list as [tags])")
    if len(true_seqs) != len(pred_seqs):
        raise ValueError(f"pred_seqs: expected {len(true_seqs)} sequences (as true_seqs); "
                         f"got {len(pred_seqs)}")
    t: list[Hashable] = []
    p: list[Hashable] = []
    for i, (a, b) in enumerate(zip(true_seqs, pred_seqs)):
        if len(a) != len(b):
            raise ValueError(f"pred_seqs[{i}]: expected {len(a)} tags (as true_seqs[{i}]); "
                             f"got {len(b)}")
        t.extend(a)
        p.extend(b)
    if not t:
        raise ValueError("true_seqs: expected at least one token; got none")
    return t, p


def token_accuracy(true_seqs: Sequence[Sequence[Hashable]],
                   pred_seqs: Sequence[Sequence[Hashable]]) -> float:
    """Fraction of tokens whose predicted tag equals the true tag."""
    t, p = _flatten(true_seqs, pred_seqs)
    return sum(a == b for a, b in zip(t, p)) / len(t)


def token_f1(true_seqs: Sequence[Sequence[Hashable]], pred_seqs: Sequence[Sequence[Hashable]],
             *, labels: Sequence[Hashable] | None = None, average: str = "weighted") -> float:
    """Token F1 over ``labels`` (default: every label in either list), averaged as ``average``.

    Args:
        true_seqs, pred_seqs: tag sequences, pairwise of equal length.
        labels: the labels scored (e.g. every tag but ``"O"``).
        average: ``"weighted"``, ``"micro"`` or ``"macro"`` (module docstring).
    """
    if average not in ("weighted", "micro", "macro"):
        raise ValueError(f"average: expected 'weighted', 'micro' or 'macro'; got {average!r}")
    t, p = _flatten(true_seqs, pred_seqs)
    tp: Counter[Hashable] = Counter()
    n_pred: Counter[Hashable] = Counter(p)
    n_true: Counter[Hashable] = Counter(t)
    for a, b in zip(t, p):
        if a == b:
            tp[a] += 1
    if labels is None:
        labels = sorted(set(n_true) | set(n_pred), key=str)
    labels = list(labels)
    if not labels:
        raise ValueError("labels: expected at least one label; got none")

    def f1(tp_: float, pred: float, true: float) -> float:
        prec = tp_ / pred if pred else 0.0
        rec = tp_ / true if true else 0.0
        return 2 * prec * rec / (prec + rec) if prec + rec else 0.0

    if average == "micro":
        return f1(sum(tp[c] for c in labels), sum(n_pred[c] for c in labels),
                  sum(n_true[c] for c in labels))
    scores = [f1(tp[c], n_pred[c], n_true[c]) for c in labels]
    if average == "macro":
        return sum(scores) / len(scores)
    support = [n_true[c] for c in labels]
    total = sum(support)
    return sum(s * w for s, w in zip(scores, support)) / total if total else 0.0
