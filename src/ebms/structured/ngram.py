"""Label n-gram language model: the denominator LM of CTC-CRF.

A back-off-free, dense n-gram over the labels ``1 .. V-1`` of a CTC vocabulary of size ``V``
(id ``0`` is the CTC blank and never a label), with a sentence start ``<s>`` and end ``</s>``:

    log p_LM(y) = sum_{i=1}^{L+1} log p(y_i | y_{i-n+1} ... y_{i-1}),     y_{L+1} = </s>,

histories shorter than ``n - 1`` labels at the start being padded with ``<s>``. Everything is
stored in one dense table ``table[h_1, ..., h_{n-1}, w]`` of log-probabilities, ``V ** n``
entries: history ids ``0 = <s>`` and ``1 .. V-1`` the labels; output ids ``0 = </s>`` and
``1 .. V-1`` the labels. Every row ``table[h, :]`` is a normalised distribution over the ``V``
outcomes (the ``V - 1`` labels and ``</s>``), including rows for histories that never occur.

Smoothing (estimated from training transcripts by :meth:`LabelNGram.fit`):

* ``"witten_bell"`` (default; Witten & Bell, 1991, "The zero-frequency problem"), interpolated
  down to the uniform distribution: with ``c(h, w)`` the count of ``w`` after history ``h``,
  ``c(h) = sum_w c(h, w)`` and ``N1(h)`` the number of distinct ``w`` seen after ``h``,

      p_m(w | h) = (c(h, w) + N1(h) p_{m-1}(w | h')) / (c(h) + N1(h)),    h' = h minus its oldest,

  ``p_m = p_{m-1}`` where ``c(h) = 0``, and ``p_0(w) = 1 / V``;
* ``"add_k"`` (Lidstone): ``p(w | h) = (c(h, w) + k) / (c(h) + k V)``.

:meth:`LabelNGram.zeros` gives the all-zero table (an unnormalised constant "LM"), with which
CTC-CRF reduces to CTC. Cost of :meth:`LabelNGram.log_prob`: ``O(B S n)``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch import Tensor

from ebms._checks import check_int, check_positive, check_shape, check_tensor

__all__ = ["LabelNGram"]

_MAX_ENTRIES = 50_000_000


def _check_sizes(n_labels: int, order: int) -> None:
    check_int(n_labels, "n_labels", minimum=2)
    check_int(order, "order", minimum=1)
    if n_labels**order > _MAX_ENTRIES:
        raise ValueError(f"order: n_labels ** order = {n_labels}**{order} exceeds the dense-table "
                         f"limit {_MAX_ENTRIES}; use a lower order")


@dataclass
class LabelNGram:
    """Dense label n-gram (see the module docstring).

    Attributes:
        n_labels: ``V``, the CTC vocabulary size **blank included**; labels are ``1 .. V-1``.
        order: ``n`` (1 = unigram, 2 = bigram, ...).
        table: ``(V,) * (n-1) + (V,)`` float64 log-probabilities ``log p(w | h)``; history id 0 is
            ``<s>``, output id 0 is ``</s>``.
    """

    n_labels: int
    order: int
    table: Tensor

    def __repr__(self) -> str:
        return f"LabelNGram(n_labels={self.n_labels}, order={self.order})"

    def __post_init__(self) -> None:
        _check_sizes(self.n_labels, self.order)
        check_tensor(self.table, "table", floating=True)
        check_shape(self.table, (self.n_labels,) * self.order, "table")
        if bool(torch.isnan(self.table).any()) or bool((self.table == float("inf")).any()):
            raise ValueError("table: expected no NaN or +inf entries")

    @classmethod
    def zeros(cls, n_labels: int, order: int = 2) -> LabelNGram:
        """All weights 0: every label sequence scores 0 (an unnormalised constant LM)."""
        _check_sizes(n_labels, order)
        return cls(n_labels, order, torch.zeros((n_labels,) * order, dtype=torch.float64))

    @classmethod
    def fit(cls, transcripts: Sequence[Sequence[int]], n_labels: int, order: int = 2, *,
            smoothing: str = "witten_bell", k: float = 1.0) -> LabelNGram:
        """Estimate the n-gram from label sequences.

        Args:
            transcripts: label sequences with ids in ``[1, n_labels)`` (no blank); may be empty
                sequences (they count one ``<s> </s>``).
            n_labels: ``V``, the CTC vocabulary size including the blank 0.
            order: ``n >= 1``.
            smoothing: ``"witten_bell"`` (interpolated) or ``"add_k"``.
            k: the added count of ``"add_k"`` (``> 0``).
        """
        _check_sizes(n_labels, order)
        if smoothing not in ("witten_bell", "add_k"):
            raise ValueError(f"smoothing: expected 'witten_bell' or 'add_k'; got {smoothing!r}")
        k = check_positive(k, "k")
        if isinstance(transcripts, (str, bytes)) or not isinstance(transcripts, Sequence):
            raise TypeError(f"transcripts: expected a list of label lists; got "
                            f"{type(transcripts).__name__}")
        if len(transcripts) == 0:
            raise ValueError("transcripts: expected at least one sequence; got an empty list")
        v = n_labels
        counts = [torch.zeros((v,) * m, dtype=torch.float64) for m in range(1, order + 1)]
        for i, seq in enumerate(transcripts):
            labels = [int(x) for x in seq]
            bad = [x for x in labels if not 1 <= x < v]
            if bad:
                raise ValueError(f"transcripts: expected label ids in [1, {v - 1}] (n_labels = "
                                 f"{v} counts the blank 0); sequence {i} has {bad[0]}")
            padded = [0] * (order - 1) + labels
            outputs = labels + [0]
            for j, w in enumerate(outputs):
                hist = padded[j:j + order - 1]
                for m in range(1, order + 1):
                    counts[m - 1][tuple(hist[len(hist) - (m - 1):]) + (w,)] += 1.0
        if smoothing == "add_k":
            c = counts[-1]
            prob = (c + k) / (c.sum(-1, keepdim=True) + k * v)
            return cls(n_labels, order, prob.log())
        prob = torch.full((v,), 1.0 / v, dtype=torch.float64)
        for c in counts:
            lower = prob.unsqueeze(0) if c.dim() > 1 else prob
            total = c.sum(-1, keepdim=True)
            types = (c > 0).sum(-1, keepdim=True).to(c.dtype)
            mixed = (c + types * lower) / (total + types).clamp_min(1.0)
            prob = torch.where(total > 0, mixed, lower.expand_as(c))
        return cls(n_labels, order, prob.log())

    def log_prob(self, targets: Tensor, target_lengths: Tensor | None = None) -> Tensor:
        """``log p_LM(y)`` of each padded label sequence, ``</s>`` included.

        Args:
            targets: ``(B, S)`` integer labels in ``[1, V)`` within ``target_lengths``.
            target_lengths: ``(B,)`` ints in ``[0, S]``; ``None`` means ``S``.

        Returns:
            ``(B,)`` float64 (on ``targets``' device).
        """
        check_tensor(targets, "targets")
        if targets.is_floating_point() or targets.dtype == torch.bool:
            raise TypeError(f"targets: expected an integer tensor; got dtype {targets.dtype}")
        check_shape(targets, (None, None), "targets (padded (B, S))")
        b, s = targets.shape
        dev = targets.device
        if target_lengths is None:
            lengths = torch.full((b,), s, dtype=torch.long, device=dev)
        else:
            check_tensor(target_lengths, "target_lengths")
            if target_lengths.is_floating_point() or target_lengths.dtype == torch.bool:
                raise TypeError(f"target_lengths: expected an integer tensor; got dtype "
                                f"{target_lengths.dtype}")
            check_shape(target_lengths, (b,), "target_lengths")
            lengths = target_lengths.to(device=dev, dtype=torch.long)
            if b and (int(lengths.min()) < 0 or int(lengths.max()) > s):
                raise ValueError(f"target_lengths: expected values in [0, {s}] (S = "
                                 f"targets.shape[1]); got min {int(lengths.min())}, "
                                 f"max {int(lengths.max())}")
        pos = torch.arange(s + 1, device=dev)
        valid = pos[:s] < lengths.unsqueeze(1)
        used = targets[valid]
        if used.numel() and (int(used.min()) < 1 or int(used.max()) >= self.n_labels):
            raise ValueError(f"targets: expected labels in [1, {self.n_labels - 1}] (0 is the "
                             f"blank) within target_lengths; got min {int(used.min())}, "
                             f"max {int(used.max())}")
        y = torch.where(valid, targets.to(dev, torch.long), 0)
        n = self.order
        hist = torch.cat([y.new_zeros(b, n - 1), y], dim=1)  # (B, n-1+S)
        out = torch.cat([y, y.new_zeros(b, 1)], dim=1)  # (B, S+1); 0 = </s> at position L
        flat = out.clone()
        for j in range(n - 1):  # oldest history label first
            flat = flat + hist[:, j:j + s + 1] * self.n_labels ** (n - 1 - j)
        table = self.table.to(dev).reshape(-1)
        scores = table[flat]
        keep = pos.unsqueeze(0) <= lengths.unsqueeze(1)
        return torch.where(keep, scores, 0.0).sum(-1)
