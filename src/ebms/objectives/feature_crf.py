r"""Conditional maximum likelihood of a feature-based CRF over a fixed training corpus.

A feature CRF (:class:`ebms.models.FeatureCRF`; Lafferty, McCallum & Pereira, 2001) scores tags
``y`` of a sentence ``x`` by ``sum_t sum_a x_t(a) W[a, y_t] + sum_t A[y_{t-1}, y_t]``. Trained as
CRFsuite does (Okazaki, 2007), its loss over the sentences ``i`` of a batch ``S`` is

.. math::  \mathcal L(W, A) = \rho\Big(\sum_{i \in S} -\log p(y_i \mid x_i)\Big) + \lambda_2 \lVert w\rVert_2^2,
           \qquad w = (W, A),

with ``reduction`` :math:`\rho` the identity (``"sum"``: CRFsuite's corpus objective, whose L1 part
OWL-QN adds) or division by ``|S|`` (``"mean"``). :class:`FeatureCRFLikelihood` is that loss as an
objective for :class:`ebms.train.Trainer`: the batch holds *sentence ids* into the corpus the
objective was built on, so the trainer shuffles and slices ids while the attributes stay in one
place.

* **The whole corpus** (every sentence once, in any order: full-batch L-BFGS / OWL-QN) goes
  through a :class:`BucketedCorpus`, built at the first such call: one CSR design matrix ``X``
  over length-sorted buckets, so each pass is two sparse products (``X @ W`` and ``X^T G``) and the
  forward-backward of :class:`ebms.structured.LinearChainCRF` per bucket. A model offering
  ``compact_weights()`` (:class:`~ebms.models.FeatureCRF`) gives its observed weights: they are
  written into an ``(A, C)`` table the corpus keeps (zero elsewhere), and ``X^T G`` goes into a
  kept table from which the observed entries are read, so a pass allocates no ``A C`` table (the
  same numbers as through the dense weights).
* **Any other batch** is padded to its own longest sentence and its emissions gathered by
  :func:`ebms.structured.features.attribute_emissions` (one ``embedding_bag``).

Both give the same loss to round-off. Cost per pass: ``O(M C)`` for the ``M`` attribute values and
``O(tokens C^2)`` for the chain, ``C`` tags.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor, nn

from ebms._checks import check_int, check_positive, check_shape, check_tensor
from ebms.capabilities import SupportsEffectiveWeights
from ebms.objectives._base import LossOutput, scalar_metrics
from ebms.structured.features import EncodedCorpus, attribute_emissions
from ebms.structured.linear_chain import LinearChainCRF

__all__ = ["BucketedCorpus", "FeatureCRFLikelihood", "corpus_from_padded"]

#: ``rows(sentence ids (n,)) -> (ids (n, >= t, F), values (n, >= t, F))``: padded attribute rows
Rows = Callable[[Tensor], tuple[Tensor, Tensor]]




def _sorted_chunks(lengths: Tensor, size: int) -> list[Tensor]:
    """Sentence ids sorted by length (stable), cut into chunks of ``size``."""
    return list(torch.argsort(lengths, stable=True).split(size))


class _SparseEmit(torch.autograd.Function):
    """Bucket emissions ``X @ W`` for a fixed CSR design matrix ``X (rows, A)``, returned as one
    ``(n, t, C)`` tensor per bucket ``(n, t)``; backward ``X^T @ G`` with ``X^T`` in CSR too."""

    @staticmethod
    def forward(ctx, w: Tensor, x: Tensor, xt: Tensor,  # type: ignore[override]
                shapes: list[tuple[int, int]]) -> tuple[Tensor, ...]:
        ctx.xt, ctx.shapes = xt, shapes
        em = x @ w
        parts = em.split([n * t for n, t in shapes])
        return tuple(p.view(n, t, -1) for p, (n, t) in zip(parts, shapes))

    @staticmethod
    def backward(ctx, *grads: Tensor):  # type: ignore[override]
        g = torch.cat([gi.reshape(n * t, -1) for gi, (n, t) in zip(grads, ctx.shapes)])
        return ctx.xt @ g, None, None, None


class _CompactSparseEmit(torch.autograd.Function):
    """:class:`_SparseEmit` with ``W (A, C)`` given by its observed values ``(K,)`` and their flat
    positions: they are written into a table the corpus keeps (zero elsewhere, written once), and the
    backward's ``X^T @ G`` goes into a kept ``(A, C)`` table too, from which the ``K`` entries are read.
    The same products as :class:`_SparseEmit` on the dense ``W``, without two ``A C`` allocations (and
    their page faults) per pass."""

    @staticmethod
    def forward(ctx, values: Tensor, index: Tensor, corpus: BucketedCorpus,  # type: ignore[override]
                n_tags: int, shapes: list[tuple[int, int]]) -> tuple[Tensor, ...]:
        ctx.corpus, ctx.index, ctx.shapes = corpus, index, shapes
        table = corpus.table("weights", index, values, n_tags)
        table.view(-1).index_copy_(0, index, values)
        em = corpus.x @ table
        parts = em.split([n * t for n, t in shapes])
        return tuple(p.view(n, t, -1) for p, (n, t) in zip(parts, shapes))

    @staticmethod
    def backward(ctx, *grads: Tensor):  # type: ignore[override]
        g = torch.cat([gi.reshape(n * t, -1) for gi, (n, t) in zip(grads, ctx.shapes)])
        out = ctx.corpus.table("gradient", ctx.index, g, g.shape[1])
        torch.mm(ctx.corpus.xt, g, out=out)
        return out.view(-1).index_select(0, ctx.index), None, None, None, None


def _csr(rows: Tensor, cols: Tensor, values: Tensor, shape: tuple[int, int]) -> Tensor:
    """CSR matrix of the entries ``(rows, cols, values)`` (repeated entries are summed)."""
    coo = torch.sparse_coo_tensor(torch.stack([rows, cols]), values, shape, check_invariants=False)
    return coo.coalesce().to_sparse_csr()


class BucketedCorpus:
    """A training set laid out for full-batch passes: sentences sorted by length and cut into
    buckets, each bucket padded to its own longest sentence; one CSR matrix ``X`` holds the
    attribute values of every (bucket row, position), so ``X @ W`` gives every bucket's
    emissions as contiguous slices (padding rows are empty).

    ``rows(b) -> (ids, values)`` gives the padded ``(n, >= t, F)`` attributes of the sentences
    ``b`` (a slice of padded tensors, or :meth:`~ebms.structured.features.EncodedCorpus.padded`),
    so the corpus is never padded to its longest sentence as a whole. Memory: ``X`` and ``X^T``,
    ``2 (16 M + 8 R)`` bytes for ``M`` attribute values on ``R`` bucket rows.
    """

    def __init__(self, rows: Rows, lengths: Tensor, tags: Tensor, n_attributes: int, bucket_size: int,
                 dtype: torch.dtype) -> None:
        r_parts, c_parts, v_parts = [], [], []
        self.buckets: list[tuple[int, int, int, Tensor, Tensor]] = []
        start = 0
        for b in _sorted_chunks(lengths, bucket_size):
            ln = lengths[b]
            n, t = len(b), int(ln.max())
            bi, bw = rows(b)
            bi, bw = bi[:, :t], bw[:, :t].to(dtype)  # (n, t, F)
            keep = (bi > 0) & (bw != 0) & (torch.arange(t)[:, None] < ln[:, None, None])
            r = start + torch.arange(n * t).view(n, t, 1).expand_as(bi)
            r_parts.append(r[keep])
            c_parts.append(bi[keep])
            v_parts.append(bw[keep])
            self.buckets.append((start, n, t, ln, tags[b, :t]))
            start += n * t
        self._tables: dict[str, tuple[tuple[Any, ...], Tensor]] = {}
        r, c, v = torch.cat(r_parts), torch.cat(c_parts), torch.cat(v_parts)
        del r_parts, c_parts, v_parts
        with warnings.catch_warnings():  # CSR support is labelled beta; the ops used are stable
            warnings.simplefilter("ignore", UserWarning)
            self.x = _csr(r, c, v, (start, n_attributes))
            self.xt = _csr(c, r, v, (n_attributes, start))

    def table(self, kind: str, index: Tensor, like: Tensor, n_tags: int) -> Tensor:
        """A kept ``(A, C)`` table (``kind``: ``"weights"``, zero but at ``index``, or ``"gradient"``),
        new when ``index`` (the object), the dtype, device or ``C`` changes."""
        key = (index, like.dtype, like.device, n_tags)
        kept = self._tables.get(kind)
        if kept is None or kept[0][0] is not index or kept[0][1:] != key[1:]:
            kept = (key, torch.zeros(self.x.shape[1], n_tags, dtype=like.dtype, device=like.device))
            self._tables[kind] = kept
        return kept[1]

    def nll(self, w: Tensor, a: Tensor, index: Tensor | None = None) -> Tensor:
        """``sum_i -log p(y_i | x_i)`` with state weights ``w (A, C)``, transitions ``a (C, C)``;
        with ``index``, ``w`` is ``(K,)``: the table's entries at those flat positions (0 elsewhere)."""
        shapes = [(n, t) for _, n, t, _, _ in self.buckets]
        if index is None:
            ems = _SparseEmit.apply(w, self.x, self.xt, shapes)
        else:
            ems = _CompactSparseEmit.apply(w, index, self, a.shape[0], shapes)
        total = w.new_zeros(())
        for em_b, (_, _, _, ln, y) in zip(ems, self.buckets):
            total = total - LinearChainCRF(em_b, a, ln).log_prob(y).sum()
        return total


def corpus_from_padded(ids: Tensor, weights: Tensor, lengths: Tensor, tags: Tensor, n_attributes: int,
                       bucket_size: int, dtype: torch.dtype) -> BucketedCorpus:
    """The full-batch corpus of padded ``ids, weights (N, T, F)``."""
    return BucketedCorpus(lambda b: (ids[b], weights[b]), lengths, tags, n_attributes, bucket_size, dtype)


class FeatureCRFLikelihood(nn.Module):
    r"""Conditional ML of a feature CRF with an L2 term (module docstring), over sentence ids.

    ``objective(model, batch)``: ``batch`` is a long tensor of sentence ids ``(B,)`` into the
    corpus (or a tuple whose first element it is, e.g. the ``(ids, tags, lengths)`` rows a
    command line feeds; the other elements are not read: the objective holds the tags and
    lengths). ``model.effective_weights()`` gives the dense ``(W (A, C), A (C, C))``; the L2 term
    runs over ``model.parameters()`` that require grad (a :class:`~ebms.models.FeatureCRF`: its
    observed weights). Deterministic: ``generator`` is not used.

    Metrics: ``nll`` (mean per sentence) and ``nll_token`` (per token) of the batch.

    Build it with :meth:`from_corpus` (an :class:`~ebms.structured.features.EncodedCorpus`: no
    padding to the longest sentence) or :meth:`from_padded` (tensors ``(N, T, F)``).

    Args:
        rows: ``rows(sentence ids) -> (ids, values)``: padded ``(n, >= t, F)`` attribute rows.
        lengths: ``(N,)`` sentence lengths.
        tags: ``(N, >= max(lengths))`` gold tag ids.
        n_attributes: ``A``.
        l2: :math:`\lambda_2 \ge 0`.
        reduction: ``"mean"`` (divide the batch's NLL by its sentences) or ``"sum"``.
        bucket_size: sentences per length-sorted bucket of a full-batch pass.
    """

    def __init__(self, rows: Rows, lengths: Tensor, tags: Tensor, n_attributes: int, *, l2: float = 0.0,
                 reduction: str = "mean", bucket_size: int = 2048) -> None:
        super().__init__()
        check_tensor(lengths, "lengths", min_dim=1)
        check_tensor(tags, "tags")
        n = int(lengths.shape[0])
        t = int(lengths.max()) if n else 0
        if tags.dim() != 2 or tags.shape[0] != n or tags.shape[1] < t:
            raise ValueError(f"tags: expected shape ({n}, >= {t}); got {tuple(tags.shape)}")
        if reduction not in ("mean", "sum"):
            raise ValueError(f"reduction: expected 'mean' or 'sum'; got {reduction!r}")
        self.rows, self.lengths, self.tags = rows, lengths, tags
        self.n_attributes = check_int(n_attributes, "n_attributes", minimum=1)
        self.l2 = check_positive(l2, "l2", allow_zero=True)
        self.reduction = reduction
        self.bucket_size = check_int(bucket_size, "bucket_size", minimum=1)
        self.corpus: BucketedCorpus | None = None  # built at the first full-batch call

    @classmethod
    def from_corpus(cls, corpus: EncodedCorpus, tags: Tensor, **kw: Any) -> FeatureCRFLikelihood:
        """Over an :class:`~ebms.structured.features.EncodedCorpus` (padded one batch at a time)."""
        return cls(lambda b: corpus.padded(b)[:2], corpus.lengths, tags, **kw)

    @classmethod
    def from_padded(cls, ids: Tensor, values: Tensor, lengths: Tensor, tags: Tensor, **kw: Any) -> FeatureCRFLikelihood:
        """Over padded attribute tensors ``ids, values (N, T, F)``."""
        check_shape(values, tuple(ids.shape), "values (as ids)")
        return cls(lambda b: (ids[b], values[b]), lengths, tags, **kw)

    def forward(self, model: SupportsEffectiveWeights, batch: Tensor | tuple[Tensor, ...], *,
                generator: torch.Generator | None = None) -> LossOutput:
        rows = batch[0] if isinstance(batch, tuple) else batch
        check_tensor(rows, "batch (sentence ids)", min_dim=1)
        n = int(self.lengths.shape[0])
        if rows.dtype != torch.long or rows.dim() != 1 or rows.numel() == 0:
            raise ValueError(f"batch: expected sentence ids, a non-empty 1-d long tensor; got {rows.dtype} "
                             f"of shape {tuple(rows.shape)}")
        low, high = int(rows.min()), int(rows.max())
        if low < 0 or high >= n:
            raise ValueError(f"batch: expected sentence ids in [0, {n - 1}] (the corpus has {n}); "
                             f"got ids from {low} to {high}")
        full = rows.numel() == n and bool((torch.bincount(rows, minlength=n) == 1).all())
        compact = getattr(model, "compact_weights", None)
        if full and callable(compact):  # a FeatureCRF: the observed weights, no dense table per pass
            values, index, a = compact()
            corpus = self.full_batch_corpus(values.dtype)
            nll = corpus.nll(values.view(self.n_attributes, -1), a) if index is None else corpus.nll(values, a, index)
        else:
            w, a = model.effective_weights()
            nll = self.full_batch_corpus(w.dtype).nll(w, a) if full else self.batch_nll(w, a, [rows])
        size = rows.numel()
        loss = nll / size if self.reduction == "mean" else nll
        if self.l2:
            loss = loss + self.l2 * sum((p * p).sum() for p in model.parameters() if p.requires_grad)
        return LossOutput(loss, scalar_metrics(nll=nll.detach() / size,
                                               nll_token=nll.detach() / self.lengths[rows].sum()))

    def full_batch_corpus(self, dtype: torch.dtype) -> BucketedCorpus:
        """The design matrix of the full-batch passes, built at the first call (a fit may build it
        before its loop, as CRFsuite generates its features before its first iteration)."""
        if self.corpus is None:
            self.corpus = BucketedCorpus(self.rows, self.lengths, self.tags, self.n_attributes, self.bucket_size,
                                         dtype)
        return self.corpus

    def batch_nll(self, w: Tensor, a: Tensor, chunks: list[Tensor]) -> Tensor:
        """``sum_i -log p(y_i | x_i)`` over the sentence ids in ``chunks``, each padded to its longest."""
        total = w.new_zeros(())
        for b in chunks:
            ln = self.lengths[b]
            t = int(ln.max())
            ids, values = self.rows(b)
            crf = LinearChainCRF(attribute_emissions(w, ids[:, :t], values[:, :t]), a, ln)
            total = total - crf.log_prob(self.tags[b, :t]).sum()
        return total

    def extra_repr(self) -> str:
        return f"n={int(self.lengths.shape[0])}, l2={self.l2}, reduction={self.reduction!r}"
