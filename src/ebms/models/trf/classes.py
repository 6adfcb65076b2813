r"""Word classes by exchange clustering on bigram counts (Kneser & Ney 1993; Martin, Liermann & Ney 1998).

The class bigram model :math:`p(w \mid v) = p(c_w \mid c_v)\, p(w \mid c_w)` fitted by maximum likelihood
to the bigram counts :math:`N(v, w)` of the sentences read as ``<s> x </s>`` (the boundary id 0 is
one fixed class of its own) has log-likelihood

.. math::  \mathcal L = \sum_{c, c'} g(M_{c c'}) - \sum_c g(L_c) - \sum_c g(R_c) + \sum_w g(N_w),
           \qquad g(n) = n \log n,

with :math:`M` the class bigram counts, :math:`L_c, R_c` its row and column sums and :math:`N_w` the
count of :math:`w` as a successor. The exchange algorithm visits the words one by one, takes each
out of its class and puts it into the class with the largest :math:`\mathcal L` (its own class if
none is strictly better), updating :math:`M` in place. Each exchange therefore never lowers
:math:`\mathcal L`; passes repeat until no word moves or ``passes`` is reached.

Cost per word: :math:`O(C\,(n_{out} + n_{in}))` with :math:`n_{out}, n_{in}` the numbers of distinct
classes following and preceding it, so a pass costs at most :math:`O(V C^2)`, usually far less.
Initialisation: words by decreasing count, dealt round-robin over the classes; the visiting order
is that order, or a random permutation per pass when a generator is given.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import torch
from torch import Tensor

from ebms._checks import check_int
from ebms.sequences import Sequences

__all__ = ["WordClasses"]


def _g(n: np.ndarray) -> np.ndarray:
    return n * np.log(np.where(n > 0, n, 1.0))


def _bigrams(corpus: Sequences, V: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Distinct bigrams ``(v, w, count)`` of ``<s> x </s>`` over the corpus (boundary id 0)."""
    y = torch.nn.functional.pad(corpus.tokens * corpus.mask(), (1, 1))
    pos = torch.arange(y.shape[1] - 1)
    real = pos[None, :] <= corpus.lengths[:, None]  # pairs (y_t, y_t+1) for t = 0 .. L
    keys = (y[:, :-1] * V + y[:, 1:])[real]
    uniq, counts = torch.unique(keys, return_counts=True)
    return (uniq // V).numpy(), (uniq % V).numpy(), counts.double().numpy()


class WordClasses:
    """A hard clustering of the vocabulary: ``classes (V,)`` with values in ``[0, C)``.

    Entry 0 (the boundary id) is 0 and means nothing: the boundary has its own class in the
    clustering and in the feature templates.

    Args:
        classes: class index per token, ``LongTensor (V,)``.
        num_classes: ``C`` (at least ``classes.max() + 1``).

    Example:
        >>> from ebms.sequences import Sequences
        >>> corpus = Sequences.from_lists([[1, 2, 3], [1, 2, 4], [1, 3, 3]] * 5)
        >>> wc = WordClasses.fit(corpus, vocab_size=5, num_classes=2)
        >>> wc.classes.shape, wc.num_classes
        (torch.Size([5]), 2)
    """

    def __init__(self, classes: Tensor, num_classes: int) -> None:
        if not isinstance(classes, Tensor) or classes.dtype != torch.long or classes.dim() != 1:
            raise TypeError(f"classes: expected a LongTensor (V,); got {getattr(classes, 'dtype', type(classes))}")
        self.num_classes = check_int(num_classes, "num_classes", minimum=1)
        if classes.numel() and (int(classes.min()) < 0 or int(classes.max()) >= num_classes):
            raise ValueError(f"classes: expected values in [0, {num_classes}); got min {int(classes.min())}, "
                             f"max {int(classes.max())}")
        self.classes = classes.detach().cpu().clone()

    @property
    def vocab_size(self) -> int:
        return int(self.classes.numel())

    def members(self, c: int) -> Tensor:
        """Token ids of class ``c`` (the boundary id 0 excluded), increasing."""
        ids = (self.classes == c).nonzero().squeeze(1)
        return ids[ids > 0]

    def log_likelihood(self, corpus: Sequences) -> float:
        r"""Class-bigram log-likelihood :math:`\mathcal L` of ``corpus`` (natural log, ``</s>`` included)."""
        v, w, n = _bigrams(corpus.to("cpu"), self.vocab_size)
        cls = self.classes.numpy().copy()
        cls[0] = self.num_classes  # the boundary's own class
        C1 = self.num_classes + 1
        M = np.zeros((C1, C1))
        np.add.at(M, (cls[v], cls[w]), n)
        succ = np.bincount(w, weights=n, minlength=self.vocab_size)
        return float(_g(M).sum() - _g(M.sum(1)).sum() - _g(M.sum(0)).sum() + _g(succ).sum())

    @classmethod
    def fit(cls, corpus: Sequences, vocab_size: int, num_classes: int, *, passes: int = 10,
            generator: torch.Generator | None = None,
            callback: Callable[[int, int, int, Tensor], None] | None = None) -> WordClasses:
        """Exchange clustering of tokens ``1 .. V-1`` into ``num_classes`` classes.

        Args:
            corpus: training sentences (ids in ``[1, V)``; padding ignored).
            vocab_size: ``V``.
            num_classes: ``C >= 1``.
            passes: at most this many passes over the words (stops earlier when none moves).
            generator: when given, each pass visits the words in a random order drawn from it.
            callback: called after every exchange as ``callback(word, old_class, new_class, classes)``
                (``classes`` a fresh ``LongTensor (V,)`` copy), e.g. to trace the log-likelihood.

        Raises:
            TypeError / ValueError: a bad corpus (boundary ids inside sentences, ids out of range) or size.
        """
        V = check_int(vocab_size, "vocab_size", minimum=2)
        C = check_int(num_classes, "num_classes", minimum=1)
        check_int(passes, "passes", minimum=0)
        corpus = Sequences.coerce(corpus, name="corpus", pairs=False, expected="an ebms.sequences.Sequences")
        corpus = corpus.to("cpu").check_vocabulary(V, "corpus")
        if bool((corpus.mask() & (corpus.tokens == 0)).any()):
            raise ValueError("corpus: token id 0 is the sentence boundary and cannot occur inside a sentence")
        v, w, n = _bigrams(corpus, V)
        count = np.bincount(w, weights=n, minlength=V) + np.bincount(v, weights=n, minlength=V)
        order = np.lexsort((np.arange(1, V), -count[1:])) + 1  # by decreasing count, then id
        cls_ = np.zeros(V, dtype=np.int64)
        cls_[order] = np.arange(V - 1) % C
        cls_[0] = C  # boundary class
        M = np.zeros((C + 1, C + 1))
        np.add.at(M, (cls_[v], cls_[w]), n)
        rows, cols = M.sum(1), M.sum(0)
        out_ptr = np.concatenate([[0], np.cumsum(np.bincount(v, minlength=V))])  # v is sorted (keys v * V + w)
        by_w = np.argsort(w, kind="stable")
        in_ptr = np.concatenate([[0], np.cumsum(np.bincount(w, minlength=V))])
        self_count = np.zeros(V)
        self_count[v[v == w]] = n[v == w]
        visit = order[count[order] > 0]
        for _ in range(passes):
            if generator is not None:
                visit = visit[torch.randperm(visit.size, generator=generator).numpy()]
            moved = 0
            for word in visit.tolist():
                o = slice(out_ptr[word], out_ptr[word + 1])
                i = by_w[in_ptr[word]: in_ptr[word + 1]]
                r = np.bincount(cls_[w[o]], weights=n[o], minlength=C + 1)
                left = np.bincount(cls_[v[i]], weights=n[i], minlength=C + 1)
                new = _exchange(M, rows, cols, r, left, self_count[word], int(cls_[word]), C)
                if new != cls_[word]:
                    old, cls_[word] = int(cls_[word]), new
                    moved += 1
                    if callback is not None:
                        snapshot = torch.from_numpy(np.where(np.arange(V) == 0, 0, cls_)).long()
                        callback(word, old, new, snapshot)
            if moved == 0:
                break
        cls_[0] = 0
        return cls(torch.from_numpy(cls_).long(), C)


def _exchange(M: np.ndarray, rows: np.ndarray, cols: np.ndarray, r: np.ndarray, left: np.ndarray, s: float,
              a: int, C: int) -> int:
    """Move one word (successor class counts ``r``, predecessor counts ``left``, self bigrams ``s``) out
    of class ``a`` into the best class; updates ``M``, ``rows``, ``cols`` in place; returns the class."""
    n_out, n_in = r.sum(), left.sum()
    M[a, :] -= r
    M[:, a] -= left
    M[a, a] += s
    rows[a] -= n_out
    cols[a] -= n_in
    r, left = r.copy(), left.copy()
    r[a] -= s
    left[a] -= s
    cols_r, rows_l = np.nonzero(r)[0], np.nonzero(left)[0]
    Mw = M[:C]
    gain = ((_g(Mw[:, cols_r] + r[cols_r]) - _g(Mw[:, cols_r])).sum(1)
            + (_g(M[rows_l, :C] + left[rows_l, None]) - _g(M[rows_l, :C])).sum(0))
    d = np.arange(C)
    diag = M[d, d]
    gain -= _g(diag + r[:C]) - _g(diag) + _g(diag + left[:C]) - _g(diag)  # the (b, b) cell, counted below
    gain += _g(diag + r[:C] + left[:C] + s) - _g(diag)
    gain -= _g(rows[:C] + n_out) - _g(rows[:C]) + _g(cols[:C] + n_in) - _g(cols[:C])
    best = int(np.argmax(gain))
    new = best if gain[best] > gain[a] + 1e-9 * max(1.0, abs(gain[a])) else a
    M[new, :] += r
    M[:, new] += left
    M[new, new] += s
    rows[new] += n_out
    cols[new] += n_in
    return new
