"""Training of the feature CRF (:class:`ebms.models.FeatureCRF`) as CRFsuite trains it.

Training objective (CRFsuite ``train_lbfgs.c``; every weight, state and transition, is penalised):

    F(W, A) = sum_i -log p(y_i | x_i) + c1 ||w||_1 + c2 ||w||_2^2,     w = (W, A),

minimised by L-BFGS (OWL-QN when ``c1 > 0``, :class:`ebms.train.owlqn.OWLQN`), full batch, with
liblbfgs' stopping rules: ``||grad|| / max(1, ||w||) < epsilon``, or relative decrease of ``F``
over the last ``period`` iterations below ``delta``, or ``max_iterations``. Minibatch ``"sgd"`` /
``"adam"`` minimise ``F / N`` by stochastic steps on ``mean_i -log p + (c2 / N) ||w||^2`` followed
by the L1 proximal step ``w <- sign(w) max(|w| - lr c1 / N, 0)``.

:func:`fit_feature_crf` is a thin driver: the loss is the objective
:class:`ebms.objectives.feature_crf.FeatureCRFLikelihood` (the same one the command line trains),
run by :class:`ebms.train.Trainer` in memory (no run folder); L-BFGS / OWL-QN take one trainer
step per iteration through the trainer's closure path, SGD / Adam one step per minibatch.

Cost: a full-batch pass is one CSR product ``X @ W`` (gradient ``X^T G``) and the forward-backward
of :class:`ebms.structured.LinearChainCRF` on length-sorted buckets (``O(tokens * C^2)``), so
padding stays small; a minibatch pass gathers its emissions by one ``embedding_bag``. Memory: the
parameters are the ``K`` observed weights only (so are the optimiser's history and every
checkpoint); a pass builds the dense ``(A, C)`` weights once and its gradient.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import Tensor

from ebms._checks import check_int, check_positive, check_shape, check_tensor
from ebms.models.feature_crf import FeatureCRF
from ebms.objectives.feature_crf import FeatureCRFLikelihood
from ebms.structured.features import EncodedCorpus
from ebms.train import Callback, DistributedContext, Trainer
from ebms.train.owlqn import OWLQN

__all__ = ["FitResult", "fit_feature_crf"]


@dataclass
class FitResult:
    """Outcome of :func:`fit_feature_crf`.

    Attributes:
        iterations: iterations (L-BFGS) or epochs (SGD/Adam) run.
        loss: final objective ``F`` (L-BFGS) or last epoch's mean minibatch objective.
        stop_reason: ``"epsilon"``, ``"delta"``, ``"max_iterations"`` or ``"linesearch"``.
        seconds: wall time of the loop (L-BFGS: after the full-batch design matrix is built, as
            CRFsuite's iteration log starts after its feature generation).
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


class _Log:
    """The per-iteration log of a fit: clocks, active features, the user's callback."""

    def __init__(self, params: list[Tensor], callback: Callable[[dict[str, float]], None] | None) -> None:
        self.params, self.callback = params, callback
        self.entries: list[dict[str, float]] = []
        self.t0, self.c0 = time.perf_counter(), time.process_time()

    def record(self, entry: dict[str, float]) -> None:
        if "active_features" not in entry:
            entry["active_features"] = float(sum(int((p != 0).sum()) for p in self.params))
        entry["seconds"] = time.perf_counter() - self.t0
        entry["cpu_seconds"] = time.process_time() - self.c0
        self.entries.append(entry)
        if self.callback is not None:
            self.callback(entry)

    def result(self, loss: float, reason: str, evaluations: int = 0, iterations: int | None = None) -> FitResult:
        return FitResult(len(self.entries) if iterations is None else iterations, loss, reason,
                         time.perf_counter() - self.t0, evaluations, time.process_time() - self.c0, self.entries)


class _QuasiNewtonLog(Callback):
    """After each OWL-QN iteration: log it and apply liblbfgs' stopping rules (module docstring)."""

    def __init__(self, log: _Log, *, epsilon: float, period: int, delta: float) -> None:
        self.log, self.epsilon, self.period, self.delta = log, epsilon, period, delta
        self.losses: list[float] = []  # F before the first iteration, then after each one
        self.evaluations, self.reason, self.final = 0, "max_iterations", math.nan

    def on_step_end(self, trainer: Trainer, step: int, metrics: dict[str, float]) -> None:
        assert isinstance(trainer.optimizer, OWLQN)
        info: dict[str, Any] = trainer.optimizer.info
        if step == 1:
            self.losses.append(float(info.get("start_loss", math.nan)))
        self.evaluations += int(info["evaluations"])
        self.final = float(info["loss"])
        if info["linesearch_failed"]:  # the trainer stops after this step itself
            self.reason = "linesearch"
            return
        f = float(info["loss"])
        self.losses.append(f)
        params = self.log.params
        self.log.record({"iteration": float(step), "loss": info["loss"], "grad_norm": info["grad_norm"],
                         "param_norm": info["param_norm"], "step": info["step"],
                         "evaluations": float(info["evaluations"]),
                         "active_features": float(sum(int((p != 0).sum()) for p in params))})
        if info["grad_norm"] / max(1.0, info["param_norm"]) <= self.epsilon:
            self.reason = "epsilon"
        elif self.period and step >= self.period and (self.losses[step - self.period] - f) / f < self.delta:
            self.reason = "delta"
        else:
            return
        trainer.request_stop(f"converged ({self.reason})")


class _Minibatches:
    """Data stream of a SGD/Adam fit: length-sorted buckets of sentence ids, in a new random order
    (from ``generator``; ``None``: torch's global RNG) every epoch. Called as ``(None, g)``."""

    def __init__(self, buckets: list[Tensor], generator: torch.Generator | None) -> None:
        self.buckets, self.generator = buckets, generator
        self.order: list[int] = []
        self.size = 0  # sentences in the batch handed out last

    def __call__(self, batch_size: Any, g: torch.Generator) -> Tensor:
        if not self.order:
            self.order = torch.randperm(len(self.buckets), generator=self.generator).tolist()[::-1]
        b = self.buckets[self.order.pop()]
        self.size = len(b)
        return b


class _L1Proximal(Callback):
    """After each SGD/Adam step: ``w <- sign(w) max(|w| - strength, 0)`` (ISTA's step for an L1 term)."""

    def __init__(self, params: list[Tensor], strength: float) -> None:
        self.params, self.strength = params, strength

    def on_step_end(self, trainer: Trainer, step: int, metrics: dict[str, float]) -> None:
        with torch.no_grad():
            for p in self.params:
                p.copy_(p.sign() * (p.abs() - self.strength).clamp_min(0))


class _EpochLog(Callback):
    """Logs the size-weighted mean minibatch objective of every epoch."""

    def __init__(self, log: _Log, stream: _Minibatches, *, n: int, per_epoch: int) -> None:
        self.log, self.stream, self.n, self.per_epoch = log, stream, n, per_epoch
        self.loss_sum, self.last = 0.0, 0.0

    def on_step_end(self, trainer: Trainer, step: int, metrics: dict[str, float]) -> None:
        self.loss_sum += metrics["loss"] * self.stream.size
        if step % self.per_epoch == 0:
            self.last = self.loss_sum / self.n
            self.log.record({"iteration": float(step // self.per_epoch), "loss": self.last})
            self.loss_sum = 0.0


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

    The loss is :class:`~ebms.objectives.feature_crf.FeatureCRFLikelihood` (``reduction="sum"``,
    ``l2=c2`` for L-BFGS; ``"mean"``, ``l2=c2/N`` for SGD/Adam), run by an in-memory
    :class:`~ebms.train.Trainer` (no files, no divergence guard): with ``"lbfgs"`` one trainer step
    per OWL-QN iteration over the whole set, else one step per minibatch (an L1 term is then the
    proximal step of the module docstring, after each step).

    Args:
        method: ``"lbfgs"`` (full batch; OWL-QN when ``c1 > 0``), ``"sgd"`` or ``"adam"``.
        c1, c2: L1 and squared-L2 coefficients of the objective (module docstring).
        max_iterations: L-BFGS iterations, or epochs for SGD/Adam.
        epsilon, period, delta: L-BFGS stopping rules (liblbfgs' ``epsilon``, ``past``, ``delta``).
        history: L-BFGS memory ``m``.
        lr, batch_size: step size and sentences per minibatch (SGD/Adam).
        bucket_size: sentences per length-sorted bucket in a full-batch pass.
        progress: show the trainer's tqdm bar (one tick per trainer step).
        callback: called with each iteration's log dict.
        generator: shuffles the minibatch order (SGD/Adam).
    """
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
        model.check_inputs(ids, weights, lengths)
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
    if method == "lbfgs":  # the design matrix is built before the loop's clocks start (CRFsuite's features too)
        objective = FeatureCRFLikelihood(rows, lengths, tags, model.n_attributes, l2=c2, reduction="sum",
                                         bucket_size=bucket_size)
        objective.full_batch_corpus(model.state_values.dtype)
    log = _Log(params, callback)
    common: dict[str, Any] = dict(run_dir=None, guard=None, progress=progress, log_every=1,
                                  device=model.state_values.device, distributed=DistributedContext())
    if method == "lbfgs":
        monitor = _QuasiNewtonLog(log, epsilon=epsilon, period=period, delta=delta)
        Trainer(objective, model, torch.arange(n), optimizer=lambda groups: OWLQN(groups, l1=c1, history=history),
                steps=max_iterations, batch_size=n, callbacks=[monitor], **common).fit()
        return log.result(monitor.final, monitor.reason, monitor.evaluations)
    objective = FeatureCRFLikelihood(rows, lengths, tags, model.n_attributes, l2=c2 / n, reduction="mean")
    stream = _Minibatches(list(torch.argsort(lengths, stable=True).split(batch_size)), generator)
    epochs = _EpochLog(log, stream, n=n, per_epoch=len(stream.buckets))
    callbacks: list[Callback] = ([_L1Proximal(params, lr * c1 / n)] if c1 else []) + [epochs]

    def make(groups: list[dict[str, Any]]) -> torch.optim.Optimizer:
        return torch.optim.SGD(groups, lr=lr) if method == "sgd" else torch.optim.Adam(groups, lr=lr)

    Trainer(objective, model, stream, optimizer=make, steps=max_iterations * len(stream.buckets), batch_size=None,
            callbacks=callbacks, **common).fit()
    return log.result(epochs.last, "max_iterations", iterations=max_iterations)
