"""Feature-based linear-chain CRF (CRFsuite's model) and its trainer.

Model (Lafferty, McCallum & Pereira, 2001; Sha & Pereira, 2003, "Shallow parsing with conditional
random fields"): a token ``t`` carries attributes ``a`` with values ``x_t(a)`` (see
:mod:`ebms.structured.features`); the score of tags ``y`` is

    score(y | x) = sum_t sum_a x_t(a) W[a, y_t] + sum_{t>=2} A[y_{t-1}, y_t],

with no start/end potentials (CRFsuite's ``crf1d`` has state and transition features only; the
template's ``__BOS__``/``__EOS__`` attributes play that role). ``p(y | x) = exp(score) / Z(x)``.
Only the attribute-tag pairs (and tag bigrams) passed as ``observed`` have weights; the others are
held at exactly 0, as CRFsuite does by default.

Training objective (CRFsuite ``train_lbfgs.c``; every weight, state and transition, is penalised):

    F(W, A) = sum_i -log p(y_i | x_i) + c1 ||w||_1 + c2 ||w||_2^2,     w = (W, A),

minimised by L-BFGS (OWL-QN when ``c1 > 0``, :class:`ebms.train.owlqn.OWLQN`), full batch, with
liblbfgs' stopping rules: ``||grad|| / max(1, ||w||) < epsilon``, or relative decrease of ``F``
over the last ``period`` iterations below ``delta``, or ``max_iterations``. Minibatch ``"sgd"`` /
``"adam"`` minimise ``F / N`` by stochastic steps on ``mean_i -log p + (c2 / N) ||w||^2`` followed
by the L1 proximal step ``w <- sign(w) max(|w| - lr c1 / N, 0)``.

Cost: emissions by one ``embedding_bag`` over the tokens (``O(tokens * F * C)``), or in a
full-batch pass one CSR product ``X @ W`` (gradient ``X^T G``), the forward-backward of
:class:`ebms.structured.LinearChainCRF` on length-sorted buckets (``O(tokens * C^2)``), so padding
stays small. Memory: the parameters are the ``K`` observed weights only (so are the optimiser's
history and every checkpoint); a pass builds the dense ``(A, C)`` weights once and its gradient.
"""

from __future__ import annotations

import math
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ebms._checks import check_bool_mask, check_int, check_positive, check_shape, check_tensor
from ebms.structured.features import EncodedCorpus
from ebms.structured.linear_chain import LinearChainCRF
from ebms.train.owlqn import OWLQN

__all__ = ["BucketedCorpus", "FeatureCRF", "FitResult", "fit_feature_crf"]


class FeatureCRF(nn.Module):
    """Linear-chain CRF over sparse attribute vectors (see the module docstring).

    Args:
        n_attributes: ``A``, attribute ids are ``0..A-1`` (``0`` is padding).
        n_tags: ``C``.
        observed: optional ``(A, C)`` bool mask of the state weights that exist.
        observed_transitions: optional ``(C, C)`` bool mask of the transition weights that exist.
        dtype: parameter dtype (float64 by default, as CRFsuite).

    Only the weights that exist are parameters: ``state_values (K,)`` holds the ``K`` observed
    state weights (row-major order of the mask) and ``transition_values (K_t,)`` the observed
    transitions, so optimiser state, checkpoints and snapshots cost ``K`` numbers, not ``A C``
    (on CoNLL-2000: 452,610 against 7.7 million). :attr:`state_weights` and :attr:`transitions`
    are the dense ``(A, C)`` and ``(C, C)`` views (differentiable; non-observed entries are
    exactly 0); :meth:`set_weights` writes dense values. Parameters start at 0 (CRFsuite's
    initial point).
    """

    def __init__(self, n_attributes: int, n_tags: int, *, observed: Tensor | None = None,
                 observed_transitions: Tensor | None = None,
                 dtype: torch.dtype = torch.float64) -> None:
        super().__init__()
        check_int(n_attributes, "n_attributes", minimum=1)
        check_int(n_tags, "n_tags", minimum=1)
        self.n_attributes, self.n_tags = n_attributes, n_tags
        obs = check_bool_mask(observed, (n_attributes, n_tags), "observed")
        obs_t = check_bool_mask(observed_transitions, (n_tags, n_tags), "observed_transitions")
        self.state_mask: Tensor | None
        self.transition_mask: Tensor | None
        self.register_buffer("state_mask", None if obs is None else obs.clone())
        self.register_buffer("transition_mask", None if obs_t is None else obs_t.clone())
        k = n_attributes * n_tags if obs is None else int(obs.sum())
        k_t = n_tags * n_tags if obs_t is None else int(obs_t.sum())
        self.state_values = nn.Parameter(torch.zeros(k, dtype=dtype))
        self.transition_values = nn.Parameter(torch.zeros(k_t, dtype=dtype))
        self.register_load_state_dict_pre_hook(_dense_checkpoint_to_compact)

    @staticmethod
    def _index(mask: Tensor | None) -> Tensor | None:
        return None if mask is None else mask.reshape(-1).nonzero().squeeze(1)

    def _dense(self, values: Tensor, mask: Tensor | None, shape: tuple[int, int]) -> Tensor:
        if mask is None:
            return values.view(shape)
        idx = self._index(mask)
        assert idx is not None
        return values.new_zeros(shape[0] * shape[1]).index_copy(0, idx, values).view(shape)

    def effective_weights(self) -> tuple[Tensor, Tensor]:
        """``(W (A, C), transitions (C, C))`` with non-observed entries exactly 0 (differentiable)."""
        return (self._dense(self.state_values, self.state_mask, (self.n_attributes, self.n_tags)),
                self._dense(self.transition_values, self.transition_mask, (self.n_tags, self.n_tags)))

    @property
    def state_weights(self) -> Tensor:
        """Dense state weights ``W (A, C)`` (a new tensor each call; see :meth:`set_weights`)."""
        return self.effective_weights()[0]

    @property
    def transitions(self) -> Tensor:
        """Dense transition weights ``(C, C)`` (a new tensor each call; see :meth:`set_weights`)."""
        return self.effective_weights()[1]

    @torch.no_grad()
    def set_weights(self, state_weights: Tensor | None = None, transitions: Tensor | None = None) -> None:
        """Copy dense ``(A, C)`` / ``(C, C)`` values into the parameters (observed entries only)."""
        for dense, values, mask, shape, name in (
                (state_weights, self.state_values, self.state_mask, (self.n_attributes, self.n_tags),
                 "state_weights"),
                (transitions, self.transition_values, self.transition_mask, (self.n_tags, self.n_tags),
                 "transitions")):
            if dense is None:
                continue
            check_tensor(dense, name, floating=True)
            check_shape(dense, shape, name)
            idx = self._index(mask)
            flat = dense.reshape(-1).to(values.dtype)
            values.copy_(flat if idx is None else flat[idx])

    def _check_inputs(self, ids: Tensor, weights: Tensor, lengths: Tensor) -> None:
        check_tensor(ids, "ids")
        if ids.dtype != torch.long:
            raise TypeError(f"ids: expected a long tensor; got dtype {ids.dtype}")
        if ids.dim() != 3 or 0 in ids.shape:
            raise ValueError(f"ids: expected a non-empty shape (B, T, F); got {tuple(ids.shape)}")
        lo, hi = int(ids.min()), int(ids.max())
        if lo < 0 or hi >= self.n_attributes:
            raise ValueError(f"ids: expected values in [0, {self.n_attributes - 1}] "
                             f"(n_attributes = {self.n_attributes}); got min {lo}, max {hi}")
        check_tensor(weights, "weights", floating=True)
        check_shape(weights, tuple(ids.shape), "weights (as ids)")
        check_tensor(lengths, "lengths")
        check_shape(lengths, (ids.shape[0],), "lengths (B = ids.shape[0])")

    def emissions(self, ids: Tensor, weights: Tensor) -> Tensor:
        """Node potentials ``(..., C)`` of tokens ``ids, weights (..., F)`` (no input checks)."""
        return _emit(self.effective_weights()[0], ids, weights)

    def forward(self, ids: Tensor, weights: Tensor, lengths: Tensor) -> LinearChainCRF:
        """Distribution over tags of ``ids, weights (B, T, F)`` with ``lengths (B,)``."""
        self._check_inputs(ids, weights, lengths)
        _, a = self.effective_weights()
        return LinearChainCRF(self.emissions(ids, weights), a, lengths)

    @torch.no_grad()
    def decode(self, ids: Tensor, weights: Tensor, lengths: Tensor, *,
               batch_size: int = 1024) -> Tensor:
        """Viterbi tags ``(N, T)`` (``-1`` beyond each length), in length-sorted batches."""
        self._check_inputs(ids, weights, lengths)
        check_int(batch_size, "batch_size", minimum=1)
        out = torch.full(ids.shape[:2], -1, dtype=torch.long)
        order = torch.argsort(lengths, stable=True)
        for chunk in order.split(batch_size):
            t = int(lengths[chunk].max())
            tags = self(ids[chunk, :t], weights[chunk, :t], lengths[chunk]).argmax
            out[chunk, :t] = tags
        return out


def _dense_checkpoint_to_compact(module: nn.Module, state_dict: dict[str, Any], prefix: str,
                                 *args: Any) -> None:
    """Read checkpoints written before the compact layout: dense ``state_weights (A, C)`` and
    ``transitions (C, C)`` become the observed values (the masks come with the checkpoint)."""
    for dense_key, values_key, mask_key in (("state_weights", "state_values", "state_mask"),
                                            ("transitions", "transition_values", "transition_mask")):
        dense = state_dict.get(prefix + dense_key)
        if dense is None or prefix + values_key in state_dict:
            continue
        mask = state_dict.get(prefix + mask_key, getattr(module, mask_key))
        flat = state_dict.pop(prefix + dense_key).reshape(-1)
        if mask is not None and mask.numel() == flat.numel():
            flat = flat[mask.reshape(-1).nonzero().squeeze(1)]
        state_dict[prefix + values_key] = flat


@dataclass
class FitResult:
    """Outcome of :func:`fit_feature_crf`.

    Attributes:
        iterations: iterations (L-BFGS) or epochs (SGD/Adam) run.
        loss: final objective ``F`` (L-BFGS) or last epoch's mean minibatch objective.
        stop_reason: ``"epsilon"``, ``"delta"``, ``"max_iterations"`` or ``"linesearch"``.
        seconds: wall time of the loop.
        cpu_seconds: process CPU time of the loop (what CRFsuite's own log reports).
        evaluations: function+gradient passes over the training set (L-BFGS).
        log: one dict per iteration (loss, grad_norm, param_norm, step, evaluations, seconds
            and cpu_seconds since the start,
            active features).
    """

    iterations: int
    loss: float
    stop_reason: str
    seconds: float
    evaluations: int = 0
    cpu_seconds: float = 0.0
    log: list[dict[str, float]] = field(default_factory=list)


def _emit(w: Tensor, ids: Tensor, weights: Tensor) -> Tensor:
    """``sum_f weights[..., f] * w[ids[..., f]]``: ``(..., C)``."""
    flat = ids.reshape(-1, ids.shape[-1])
    em = F.embedding_bag(flat, w, per_sample_weights=weights.reshape(flat.shape).to(w.dtype),
                         mode="sum")
    return em.view(*ids.shape[:-1], w.shape[1])


def _buckets(lengths: Tensor, size: int) -> list[Tensor]:
    order = torch.argsort(lengths, stable=True)
    return list(order.split(size))


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

    def __init__(self, rows: Callable[[Tensor], tuple[Tensor, Tensor]], lengths: Tensor, tags: Tensor,
                 n_attributes: int, bucket_size: int, dtype: torch.dtype) -> None:
        r_parts, c_parts, v_parts = [], [], []
        self.buckets: list[tuple[int, int, int, Tensor, Tensor]] = []
        start = 0
        for b in _buckets(lengths, bucket_size):
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
        r, c, v = torch.cat(r_parts), torch.cat(c_parts), torch.cat(v_parts)
        del r_parts, c_parts, v_parts
        with warnings.catch_warnings():  # CSR support is labelled beta; the ops used are stable
            warnings.simplefilter("ignore", UserWarning)
            self.x = _csr(r, c, v, (start, n_attributes))
            self.xt = _csr(c, r, v, (n_attributes, start))

    def nll(self, w: Tensor, a: Tensor) -> Tensor:
        """``sum_i -log p(y_i | x_i)`` with state weights ``w (A, C)``, transitions ``a (C, C)``."""
        shapes = [(n, t) for _, n, t, _, _ in self.buckets]
        ems = _SparseEmit.apply(w, self.x, self.xt, shapes)
        total = w.new_zeros(())
        for em_b, (_, _, _, ln, y) in zip(ems, self.buckets):
            total = total - LinearChainCRF(em_b, a, ln).log_prob(y).sum()
        return total


def _csr(rows: Tensor, cols: Tensor, values: Tensor, shape: tuple[int, int]) -> Tensor:
    """CSR matrix of the entries ``(rows, cols, values)`` (repeated entries are summed)."""
    coo = torch.sparse_coo_tensor(torch.stack([rows, cols]), values, shape, check_invariants=False)
    return coo.coalesce().to_sparse_csr()


def corpus_from_padded(ids: Tensor, weights: Tensor, lengths: Tensor, tags: Tensor, n_attributes: int,
                       bucket_size: int, dtype: torch.dtype) -> BucketedCorpus:
    """The full-batch corpus of padded ``ids, weights (N, T, F)``."""
    return BucketedCorpus(lambda b: (ids[b], weights[b]), lengths, tags, n_attributes, bucket_size, dtype)


def _nll(model: FeatureCRF, rows: Callable[[Tensor], tuple[Tensor, Tensor]], lengths: Tensor,
         tags: Tensor, buckets: list[Tensor]) -> Tensor:
    """``sum_i -log p(y_i | x_i)`` over the sentences in ``buckets``."""
    w, a = model.effective_weights()
    total = w.new_zeros(())
    for b in buckets:
        ln = lengths[b]
        t = int(ln.max())
        ids, weights = rows(b)
        crf = LinearChainCRF(_emit(w, ids[:, :t], weights[:, :t]), a, ln)
        total = total - crf.log_prob(tags[b, :t]).sum()
    return total


def _l2(model: FeatureCRF) -> Tensor:
    return (model.state_values ** 2).sum() + (model.transition_values ** 2).sum()


def fit_feature_crf(model: FeatureCRF, ids: Tensor | EncodedCorpus, weights: Tensor | None,
                    lengths: Tensor | None, tags: Tensor, *, method: str = "lbfgs", c1: float = 0.0, c2: float = 1.0,
                    max_iterations: int = 100, epsilon: float = 1e-5, period: int = 10,
                    delta: float = 1e-5, history: int = 6, lr: float = 0.05,
                    batch_size: int = 32, bucket_size: int = 1024, progress: bool = True,
                    callback: Callable[[dict[str, float]], None] | None = None,
                    generator: torch.Generator | None = None) -> FitResult:
    """Train ``model`` in place on ``ids, weights (N, T, F)``, ``lengths (N,)``, ``tags (N, T)``.

    ``ids`` may instead be an :class:`~ebms.structured.features.EncodedCorpus` (attribute vectors
    without padding, from :meth:`~ebms.structured.features.AttributeVocabulary.encode_flat`), with
    ``weights`` and ``lengths`` ``None``: every pass then pads one bucket at a time, so a corpus
    with a few very long sentences (CoNLL-2002 Spanish: 1,238 tokens) never costs ``N T F``.

    Args:
        method: ``"lbfgs"`` (full batch; OWL-QN when ``c1 > 0``), ``"sgd"`` or ``"adam"``.
        c1, c2: L1 and squared-L2 coefficients of the objective (module docstring).
        max_iterations: L-BFGS iterations, or epochs for SGD/Adam.
        epsilon, period, delta: L-BFGS stopping rules (liblbfgs' ``epsilon``, ``past``, ``delta``).
        history: L-BFGS memory ``m``.
        lr, batch_size: step size and sentences per minibatch (SGD/Adam).
        bucket_size: sentences per length-sorted bucket in a full-batch pass.
        progress: show a tqdm bar.
        callback: called with each iteration's log dict.
        generator: shuffles the minibatch order (SGD/Adam).
    """
    from tqdm.auto import tqdm

    if method not in ("lbfgs", "sgd", "adam"):
        raise ValueError(f"method: expected 'lbfgs', 'sgd' or 'adam'; got {method!r}")
    rows: Callable[[Tensor], tuple[Tensor, Tensor]]
    if isinstance(ids, EncodedCorpus):
        if weights is not None or lengths is not None:
            raise ValueError("weights, lengths: expected None with an EncodedCorpus (it holds both)")
        corpus_in, lengths = ids, ids.lengths
        check_tensor(tags, "tags")
        t_max = int(lengths.max()) if len(corpus_in) else 0
        if tags.dim() != 2 or tags.shape[0] != len(corpus_in) or tags.shape[1] < t_max:
            raise ValueError(f"tags: expected shape ({len(corpus_in)}, >= {t_max}); got {tuple(tags.shape)}")
        if corpus_in.ids.numel() and int(corpus_in.ids.max()) >= model.n_attributes:
            raise ValueError(f"ids: expected attribute ids below n_attributes = {model.n_attributes}")

        def rows(b: Tensor) -> tuple[Tensor, Tensor]:
            return corpus_in.padded(b)[:2]
    else:
        if weights is None or lengths is None:
            raise ValueError("weights, lengths: expected tensors with padded ids (N, T, F)")
        model._check_inputs(ids, weights, lengths)
        check_tensor(tags, "tags")
        check_shape(tags, tuple(ids.shape[:2]), "tags (as ids.shape[:2])")
        pad_ids, pad_w = ids, weights

        def rows(b: Tensor) -> tuple[Tensor, Tensor]:
            return pad_ids[b], pad_w[b]
    c1 = check_positive(c1, "c1", allow_zero=True)
    c2 = check_positive(c2, "c2", allow_zero=True)
    check_int(max_iterations, "max_iterations", minimum=1)
    check_int(period, "period", minimum=0)
    check_int(bucket_size, "bucket_size", minimum=1)
    check_int(batch_size, "batch_size", minimum=1)
    n = int(lengths.shape[0])
    params: list[Tensor] = [model.state_values, model.transition_values]
    log: list[dict[str, float]] = []
    bar = tqdm(total=max_iterations, desc=f"feature-crf {method}", disable=not progress,
               dynamic_ncols=True)
    t0, c0 = time.perf_counter(), time.process_time()

    def record(entry: dict[str, float]) -> None:
        if "active_features" not in entry:
            entry["active_features"] = float(sum(int((p != 0).sum()) for p in params))
        entry["seconds"] = time.perf_counter() - t0
        entry["cpu_seconds"] = time.process_time() - c0
        log.append(entry)
        bar.update(1)
        bar.set_postfix(loss=f"{entry['loss']:.4g}")
        if callback is not None:
            callback(entry)

    try:
        if method == "lbfgs":
            return _fit_lbfgs(model, BucketedCorpus(rows, lengths, tags, model.n_attributes, bucket_size,
                                             model.state_values.dtype), params, record, log, (t0, c0),
                              c1=c1, c2=c2, max_iterations=max_iterations, epsilon=epsilon,
                              period=period, delta=delta, history=history, bucket_size=bucket_size)
        buckets = _buckets(lengths, batch_size)
        opt: torch.optim.Optimizer = (torch.optim.SGD(params, lr=lr) if method == "sgd"
                                      else torch.optim.Adam(params, lr=lr))
        loss_sum = 0.0
        for epoch in range(max_iterations):
            loss_sum = 0.0
            for j in torch.randperm(len(buckets), generator=generator).tolist():
                b = buckets[j]
                opt.zero_grad()
                loss = _nll(model, rows, lengths, tags, [b]) / len(b) + c2 / n * _l2(model)
                loss.backward()
                opt.step()
                if c1:
                    with torch.no_grad():
                        for p in params:
                            p.copy_(p.sign() * (p.abs() - lr * c1 / n).clamp_min(0))
                loss_sum += float(loss.detach()) * len(b)
            record({"iteration": float(epoch + 1), "loss": loss_sum / n})
        return FitResult(max_iterations, loss_sum / n, "max_iterations",
                         time.perf_counter() - t0, 0, time.process_time() - c0, log)
    finally:
        bar.close()


def _fit_lbfgs(model: FeatureCRF, corpus: BucketedCorpus, params: list[Tensor], record: Callable[[dict[str, float]], None],
               log: list[dict[str, float]], clocks: tuple[float, float], *, c1: float, c2: float,
               max_iterations: int, epsilon: float, period: int, delta: float, history: int,
               bucket_size: int) -> FitResult:
    # The model's parameters are already compact (observed weights only): L-BFGS works on them.
    opt = OWLQN(params, l1=c1, history=history)

    def closure() -> Tensor:
        opt.zero_grad()
        loss = corpus.nll(*model.effective_weights())
        if c2:
            loss = loss + c2 * _l2(model)
        loss.backward()
        return loss

    losses: list[float] = []
    evaluations, reason = 0, "max_iterations"
    for k in range(1, max_iterations + 1):
        opt.step(closure)
        info: dict[str, Any] = opt.info
        if k == 1:
            losses.append(float(info.get("start_loss", math.nan)))
        evaluations += int(info["evaluations"])
        if info["linesearch_failed"]:
            reason = "linesearch"
            break
        losses.append(float(info["loss"]))
        record({"iteration": float(k), "loss": info["loss"], "grad_norm": info["grad_norm"],
                "param_norm": info["param_norm"], "step": info["step"],
                "evaluations": float(info["evaluations"]),
                "active_features": float(sum(int((p != 0).sum()) for p in params))})
        f = info["loss"]
        if info["grad_norm"] / max(1.0, info["param_norm"]) <= epsilon:
            reason = "epsilon"
            break
        if period and k >= period and (losses[k - period] - f) / f < delta:
            reason = "delta"
            break
    return FitResult(len(log), float(opt.info["loss"]), reason, time.perf_counter() - clocks[0],
                     evaluations, time.process_time() - clocks[1], log)
