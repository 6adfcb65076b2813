r"""Private: the single-position substitution scores of :class:`~ebms.models.trf.DiscreteFeatures`.

``token_logits`` (padded candidates ``(B, K)``), ``token_logits_flat`` (a flat list of substitutions)
and the reference ``_token_logits_by_lookup`` they are tested against, as a mixin of the feature
energy: the windows through one position, with the substituted slot left out, are looked up once
in the context index (:mod:`ebms.models.trf._context`) and the candidates matched against their
observed features. Kept apart from :mod:`ebms.models.trf.features` (the energy, its tables and
``fit``) so that each module stays readable; the mixin reads the energy's tables and weights.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor

from ebms.sequences import Sequences

__all__ = ["SubstitutionScores"]


class SubstitutionScores:
    """Substitution scores of a :class:`~ebms.models.trf.DiscreteFeatures` (see the module docstring)."""

    context: Any
    table: Any
    weight: Tensor
    vocab_size: int
    class_ids: Tensor
    _n_class_ids: int
    sub_off: Tensor
    sub_layer: Tensor
    sub_stride: Tensor
    sub_base: Tensor
    sub_n: Tensor
    sub_cand_stride: Tensor
    sub_cand_layer: Tensor
    sub_cur: Tensor
    sub_min: Tensor
    sub_prev: Tensor
    sub_bnd: Tensor
    _padded: Callable[[Sequences], tuple[Tensor, Tensor]]  # DiscreteFeatures's: word and class ids of <s> x </s>
    _valid: Callable[..., Tensor]  # DiscreteFeatures's: which windows exist

    _context_logits = True  # private switch: False scores by the reference's per-candidate lookups

    def token_logits(self, x: Sequences, position: Tensor, candidates: Tensor) -> Tensor:
        r""":math:`\lambda^\top f` of the windows through ``position`` with each candidate there, ``(B, K)``.

        Equals :math:`-E(x^{position \to k})` up to a per-row constant (the windows that do not touch
        ``position``). ``position (B,)`` long; ``candidates (B, K)`` long, ``-1`` for absent entries (0
        returned there); ids not checked (hot path). Windows whose substituted slot reads a class are
        scored once per (row, class), the others once per (row, distinct candidate): one context lookup
        per window, then the observed features of that context (:mod:`ebms.models.trf._context`);
        bit-identical to the per-candidate lookups of ``_token_logits_by_lookup``.
        """
        if self.context is None or not self._context_logits:
            return self._token_logits_by_lookup(x, position, candidates)
        row, k = (candidates >= 0).nonzero(as_tuple=True)
        out = torch.zeros(candidates.shape, dtype=self.weight.dtype, device=candidates.device)
        if row.numel():
            out[row, k] = self._context_scores(x, position, row, candidates[row, k])
        return out

    def token_logits_flat(self, x: Sequences, position: Tensor, row: Tensor, candidates: Tensor) -> Tensor:
        r""":meth:`token_logits` of a flat list of substitutions: candidate ``candidates[n]`` at ``position[row[n]]``
        of sentence ``row[n]``, ``(N,)`` (``row``, ``candidates`` long ``(N,)``, candidates ``>= 0``; ids not checked).

        The same numbers as :meth:`token_logits` with those candidates in the rows' columns, without a
        padded ``(B, K)`` layout (ragged candidate sets, e.g. word classes of different sizes).
        """
        if row.numel() == 0:
            return torch.zeros(0, dtype=self.weight.dtype, device=candidates.device)
        if self.context is None or not self._context_logits:
            rows = Sequences(x.tokens[row], x.lengths[row], validate=False)
            return self._token_logits_by_lookup(rows, position[row], candidates[:, None])[:, 0]
        return self._context_scores(x, position, row, candidates)

    def _context_scores(self, x: Sequences, position: Tensor, row: Tensor, cand: Tensor) -> Tensor:
        """Scores ``(N,)`` of the substitutions ``(row, cand)`` through the context index."""
        assert self.context is not None
        part, valid = self._substitution_contexts(x, position)
        by_word = self.sub_cand_layer == 0
        qs = torch.arange(by_word.numel(), device=by_word.device)
        args = (self.sub_base, self.sub_cand_stride, self.weight, self.table)
        V = self.vocab_size
        targets, inverse = torch.unique(row * V + cand, return_inverse=True)
        score = self.context.fill(targets, V, part[:, by_word], valid[:, by_word], qs[by_word], *args)[inverse].sum(-1)
        if not bool(by_word.all()):
            n_cls = self._n_class_ids
            pairs, inverse = torch.unique(row * n_cls + self.class_ids[cand], return_inverse=True)
            by_cls = ~by_word
            score = score + self.context.fill(pairs, n_cls, part[:, by_cls], valid[:, by_cls], qs[by_cls],
                                              *args).sum(-1)[inverse]
        return score

    def _substitution_contexts(self, x: Sequences, position: Tensor) -> tuple[Tensor, Tensor]:
        """Keys with the substituted slot zeroed ``(B, Q)`` and whether each window exists ``(B, Q)``."""
        y, yc = self._padded(x)
        B, T = x.batch_size, x.max_length
        at = position[:, None] + 1  # (B, 1) padded coordinates
        cols = (at[:, :, None] + self.sub_off[None]).clamp(0, T + 1)  # (B, Q, S)
        Q, S = cols.shape[1:]
        word = y.gather(1, cols.view(B, -1)).view(B, Q, S)
        cls_ = yc.gather(1, cols.view(B, -1)).view(B, Q, S)
        part = (torch.where(self.sub_layer == 0, word, cls_) * self.sub_stride).sum(-1) + self.sub_base  # (B, Q)
        valid = self._valid(at + self.sub_cur, at + self.sub_min, self.sub_prev, self.sub_n, self.sub_bnd,
                            x.lengths[:, None])
        return part, valid

    def _token_logits_by_lookup(self, x: Sequences, position: Tensor, candidates: Tensor) -> Tensor:
        """The reference ``token_logits``: ``B K Q`` key lookups (one per candidate and window)."""
        B, K = candidates.shape
        part, valid = self._substitution_contexts(x, position)
        row, k = (candidates >= 0).nonzero(as_tuple=True)
        cand = candidates[row, k]
        by_word = self.sub_cand_layer == 0
        out = torch.zeros(B, K, dtype=self.weight.dtype, device=candidates.device)
        if row.numel() == 0:
            return out
        score = self._sum(part[row][:, by_word] + cand[:, None] * self.sub_cand_stride[by_word],
                          valid[row][:, by_word])
        if not bool(by_word.all()):
            n_cls = self._n_class_ids
            pairs, inverse = torch.unique(row * n_cls + self.class_ids[cand], return_inverse=True)
            r, c = pairs // n_cls, pairs % n_cls
            by_cls = ~by_word
            score = score + self._sum(part[r][:, by_cls] + c[:, None] * self.sub_cand_stride[by_cls],
                                      valid[r][:, by_cls])[inverse]
        out[row, k] = score
        return out

    def _sum(self, keys: Tensor, valid: Tensor) -> Tensor:
        """Sum of the weights of the ``keys (N, q)`` found and ``valid``, ``(N,)``."""
        idx, found = self.table(keys)
        return (self.weight[idx] * (found & valid)).sum(-1)

