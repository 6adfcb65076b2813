"""The training loop: progress, metrics log, checkpoint/resume, divergence guard, data parallel."""

from __future__ import annotations

import json
import logging
import math
import numbers
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import Tensor, nn
from tqdm.auto import tqdm

from ebms._checks import check_int, check_positive
from ebms.errors import RunFolderError
from ebms.objectives import LossOutput
from ebms.train import _snapshot
from ebms.train._data import Batch, StreamBatches, TensorBatches, mix_seed, to_device
from ebms.train._interrupt import DeferredInterrupt
from ebms.train._log import MetricsLog, jsonable
from ebms.train._snapshot import Snapshot
from ebms.train.callbacks import Callback
from ebms.train.checkpoint import CheckpointStore
from ebms.train.distributed import DistributedContext
from ebms.train.guard import ADVICE, DivergenceGuard, TrainingDiverged
from ebms.train.protocols import ReportsStep, needs_closure, sets_gradients

__all__ = ["TrainResult", "Trainer", "needs_closure"]

#: salt of the global-RNG seed a fresh fit sets (kept apart from the trainer generator's seed)
_GLOBAL_RNG_SALT = 7

logger = logging.getLogger("ebms.train")

OptimizerSpec = torch.optim.Optimizer | Callable[[list[dict[str, Any]]], torch.optim.Optimizer] | None
HEALTH = ("loss", "e_pos", "e_neg", "gap", "grad_norm")
#: where an in-memory run (``run_dir=None``) names itself in error messages
IN_MEMORY = "<in-memory run>"


@dataclass(frozen=True)
class TrainResult:
    """What :meth:`Trainer.fit` returns.

    Attributes:
        step: steps completed (the optimizer step counter).
        metrics: the last step's flat metrics (``loss``, ``grad_norm``, ``lr``, objective metrics).
        stop_reason: why training ended before ``steps`` (early stopping), else ``None``.
        checkpoint: the exit checkpoint's JSON record (``None`` on non-zero ranks).
        restores: divergence restores performed during this fit.
    """

    step: int
    metrics: dict[str, float]
    stop_reason: str | None
    checkpoint: Path | None
    restores: int


class Trainer:
    r"""Run an objective on a model for ``steps`` optimizer steps, reproducibly.

    One step: draw a batch, ``out = objective(model, batch, generator=g)``,
    ``out.loss.backward()``, average gradients over ranks, check health with the
    :class:`DivergenceGuard` (restore + smaller learning rate on failure), clip
    (``grad_clip``), ``optimizer.step()``, log, run callbacks, checkpoint.
    An objective declaring ``sets_gradients = True``
    (:class:`~ebms.train.protocols.GradientObjective`) fills ``.grad`` itself and
    gets no ``backward()``.

    **Optimizer.** ``optimizer`` is either a ready ``torch.optim.Optimizer``
    covering exactly the trainable parameters of ``model`` and ``objective``, or
    a factory called with parameter groups ``[{"params": model params},
    {"params": objective params}]`` (the second only when the objective has
    trainable parameters, e.g. a learned log Z), e.g.
    ``lambda groups: torch.optim.Adam(groups, lr=1e-3)`` — the default.
    Quasi-Newton optimizers (:func:`needs_closure`: ``torch.optim.LBFGS``,
    :class:`ebms.train.owlqn.OWLQN`) get a closure over the step's batch, so
    one trainer step is one L-BFGS iteration with its line search; give them
    the whole training set as the batch for full-batch training.

    **Data.** A tensor ``(N, *event)`` or tuple of tensors sharing ``N``
    (shuffled each epoch from ``seed``; last partial batch dropped), or a
    callable ``(batch_size, generator) -> batch`` drawing from the trainer's
    generator (``batch_size=None``: the callable picks each batch's size and
    is called with ``None``). ``batch_size`` is per process; under
    ``torchrun`` each global batch has ``world_size * batch_size`` rows.

    **Randomness.** One ``torch.Generator`` on ``device`` (seed ``seed`` on rank
    0, a derived seed on other ranks, or the ``generator`` given) feeds the
    objective and data streams. A fresh fit with a run folder also seeds
    torch's global RNG (CPU and devices) from ``seed`` and the rank, so modules
    that draw from it (dropout) repeat from run to run. Checkpoints also store
    torch's global CPU/CUDA, Python and NumPy RNG states, so a resumed run
    reproduces the uninterrupted one bit for bit.

    **In memory** (``run_dir=None``): for library calls that train a model
    and return it (:func:`ebms.models.fit_feature_crf`,
    :class:`ebms.models.RBMEstimator`). Nothing is written (no metrics log,
    no checkpoints; ``checkpoint_every`` and ``keep_checkpoints`` are unused),
    ``fit`` cannot resume or overwrite, and torch's global RNG is left as the
    caller has it. The divergence guard still works (its snapshots are in
    memory).

    **Cost per step.** The loss, the gradient norm and the metrics are turned
    into host numbers (one device sync, plus a pass over the gradients for
    the norm) only on steps that need them: every step when the guard is on
    or callbacks are given (they receive the step's metrics), else only on
    log steps, checkpoint steps and the last step. :attr:`metrics` holds
    the last numbers computed.

    **Files** (rank 0): ``run_dir/metrics.jsonl`` — one JSON object per logged
    step ``{"step", "loss", "grad_norm", "lr", "metrics": {...}, "time": {...}}``
    (wall-clock values only under ``"time"``) and event lines
    ``{"event": "diverged" | "resume" | "eval" | "sample" | "stop", ...}``;
    ``run_dir/checkpoints/`` (see :mod:`ebms.train.checkpoint`).

    **A run folder is never lost by accident.** ``fit()`` into a folder that
    already holds checkpoints or metrics raises :class:`~ebms.errors.RunFolderError`
    unless ``resume`` continues it or ``overwrite=True`` deletes it. A resume
    uses the newest checkpoint that verifies (a missing or damaged ``latest``
    pointer or record is skipped with a warning) and refuses, with
    :class:`~ebms.errors.CheckpointError`, a checkpoint whose ``identity``
    (the settings it was trained under) differs from this trainer's.

    **Ctrl-C.** In the main thread of a single process the first SIGINT is
    deferred to the end of the current step: that step is completed, logged and
    passed to the callbacks, a checkpoint is written, a ``stop`` event is
    logged, and ``KeyboardInterrupt`` is raised. Resuming then gives the same
    step lines as an uninterrupted run. A second SIGINT stops at once without
    saving (the last checkpoint stands). Under ``torchrun`` SIGINT is not
    deferred and not saved.

    Args:
        objective: ``nn.Module`` (or callable) returning a ``LossOutput``.
        model: the energy ``nn.Module`` (passed unwrapped to the objective).
        data: tensor data or a stream (see above).
        optimizer: optimizer or factory (see above).
        steps: total optimizer steps (a resumed run continues up to it).
        batch_size: rows per step per process (``None``: a data stream picks them).
        run_dir: output folder, or ``None`` to train in memory (see above).
        seed: base seed.
        log_every: write a metrics line every this many steps.
        checkpoint_every: checkpoint every this many steps (``None``: at exit only).
        keep_checkpoints: most recent checkpoints kept on disk.
        grad_clip: clip the global gradient norm to this value (``None``: off).
        lr_schedule: optional ``step -> multiplier`` (e.g.
            :class:`ebms.samplers.schedules.CosineAnnealing`); the learning
            rate at step ``t`` is ``initial_lr * lr_schedule(t)`` per group.
            ``initial_lr`` is kept in the optimizer state (checkpointed), and
            the divergence guard lowers it too.
        callbacks: :class:`~ebms.train.Callback` objects, run in order.
        guard: divergence handling; ``None`` disables it.
        progress: show a tqdm bar (rank 0).
        device: default ``cuda:<local_rank>`` when CUDA is available, else CPU.
        config: JSON-able user configuration stored in every checkpoint.
        identity: flat ``{setting: JSON value}`` saying what this run trains
            (model, data, objective settings); stored in every checkpoint and
            compared key by key on resume. The classes of the model and the
            objective are always part of it (``trainer.model_class``,
            ``trainer.objective_class``).
        distributed: default :meth:`DistributedContext.from_env`.
        generator: use this ``torch.Generator`` (on ``device``, in its current
            state) instead of a new one seeded from ``seed``: for library calls
            that own a generator and must continue its stream (its state is
            still checkpointed and restored).

    Example::

        trainer = Trainer(objective, model, data, steps=1000, batch_size=128, run_dir="runs/demo")
        result = trainer.fit(resume="auto")   # continues from runs/demo/checkpoints if present
    """

    def __init__(
        self,
        objective: Callable[..., Any],
        model: nn.Module,
        data: Batch | Callable[[Any, torch.Generator], Batch],
        *,
        optimizer: OptimizerSpec = None,
        steps: int,
        batch_size: int | None,
        run_dir: str | Path | None,
        seed: int = 0,
        log_every: int = 10,
        checkpoint_every: int | None = 1000,
        keep_checkpoints: int | None = 3,
        grad_clip: float | None = None,
        lr_schedule: Callable[[int], float] | None = None,
        callbacks: Sequence[Callback] = (),
        guard: DivergenceGuard | None = DivergenceGuard(),  # noqa: B008 (frozen dataclass, safe to share)
        progress: bool = True,
        device: str | torch.device | None = None,
        config: Mapping[str, Any] | None = None,
        identity: Mapping[str, Any] | None = None,
        distributed: DistributedContext | None = None,
        generator: torch.Generator | None = None,
    ) -> None:
        if not isinstance(model, nn.Module):
            raise TypeError(f"model: expected a torch.nn.Module; got {type(model).__name__}")
        if not callable(objective):
            raise TypeError(f"objective: expected an nn.Module returning LossOutput; got {type(objective).__name__}")
        self.steps = check_int(steps, "steps", minimum=1)
        self.batch_size = None if batch_size is None else check_int(batch_size, "batch_size", minimum=1)
        self.seed = check_int(seed, "seed", minimum=0)
        self.log_every = check_int(log_every, "log_every", minimum=1)
        self.checkpoint_every = None if checkpoint_every is None else check_int(checkpoint_every, "checkpoint_every", minimum=1)
        self.grad_clip = None if grad_clip is None else check_positive(grad_clip, "grad_clip")
        if lr_schedule is not None and not callable(lr_schedule):
            raise TypeError(f"lr_schedule: expected a callable step -> multiplier or None; got {type(lr_schedule).__name__}")
        self.lr_schedule = lr_schedule
        if guard is not None and not isinstance(guard, DivergenceGuard):
            raise TypeError(f"guard: expected a DivergenceGuard or None; got {type(guard).__name__}")
        self.guard = guard
        self.callbacks = list(callbacks)
        for i, cb in enumerate(self.callbacks):
            if not isinstance(cb, Callback):
                raise TypeError(f"callbacks[{i}]: expected an object with on_step_end/on_fit_start/on_fit_end: "
                                f"an ebms.train.Callback (subclass it; its hooks are no-ops); got {cb!r}")
        try:
            self.user_config = json.loads(json.dumps(dict(config or {}), allow_nan=False))
        except (TypeError, ValueError) as err:
            raise ValueError(f"config: expected a JSON-serialisable mapping; {err}") from None
        try:
            user_identity = json.loads(json.dumps(dict(identity or {}), allow_nan=False))
        except (TypeError, ValueError) as err:
            raise ValueError(f"identity: expected a flat JSON-serialisable mapping; {err}") from None
        self.identity: dict[str, Any] = {
            "trainer.model_class": type(model).__qualname__,
            "trainer.objective_class": type(objective).__qualname__,
            **user_identity,
        }
        self.progress = bool(progress)
        self.dist = distributed if distributed is not None else DistributedContext.from_env()
        self.device = torch.device(device) if device is not None else self.dist.default_device()
        self.dist.setup(self.device)
        self.run_dir = None if run_dir is None else Path(run_dir)
        self.model = model.to(self.device)
        self.objective = objective.to(self.device) if isinstance(objective, nn.Module) else objective
        if generator is None:
            self.generator = torch.Generator(device=self.device)
            self.generator.manual_seed(self.seed if self.dist.rank == 0 else mix_seed(self.seed, self.dist.rank))
        elif not isinstance(generator, torch.Generator) or generator.device != self.device:
            got = f"one on {generator.device}" if isinstance(generator, torch.Generator) else type(generator).__name__
            raise TypeError(f"generator: expected a torch.Generator on {self.device} or None; got {got}")
        else:
            self.generator = generator
        if isinstance(data, (Tensor, tuple)):
            if self.batch_size is None:
                raise ValueError("batch_size: expected an int >= 1 with tensor data (None is for a data stream "
                                 "that picks its batch sizes); got None")
            self._batches: TensorBatches | StreamBatches = TensorBatches(
                data, self.batch_size, seed=self.seed, rank=self.dist.rank, world_size=self.dist.world_size
            )
        elif callable(data):
            self._batches = StreamBatches(data, self.batch_size, self.generator)
        else:
            raise TypeError(f"data: expected a Tensor, a tuple of Tensors or a callable (batch_size, generator); got {type(data).__name__}")
        self.optimizer = self._build_optimizer(optimizer)
        self._closure = needs_closure(self.optimizer)
        self._sets_gradients = sets_gradients(self.objective)
        if self._closure:
            n = self._batches.n if isinstance(self._batches, TensorBatches) else None
            if n is None or self.batch_size is None or self.batch_size * self.dist.world_size != n:
                raise ValueError(
                    f"batch_size: a quasi-Newton optimizer ({type(self.optimizer).__name__}) steps on the whole "
                    f"training set (its line search compares losses of one fixed objective, and OWL-QN carries "
                    f"the last gradient over to the next step); expected batch_size = "
                    f"{'the number of rows of data' if n is None else n // max(self.dist.world_size, 1)} "
                    f"with tensor data; got {self.batch_size}"
                    + (" and a data stream" if n is None else "")
                )
        for i, group in enumerate(self.optimizer.param_groups):
            lr = group.get("lr")
            lr_f = float(lr) if isinstance(lr, (int, float, Tensor)) and not isinstance(lr, bool) else math.nan
            if lr is not None and not (math.isfinite(lr_f) and lr_f >= 0):
                raise ValueError(
                    f"optimizer: parameter group {i} has lr={lr!r}; expected a finite number >= 0 "
                    "(`ebms train`: train.lr)"
                )
        for group in self.optimizer.param_groups:  # the schedule scales this; saved with the optimizer state
            group.setdefault("initial_lr", group["lr"])
        self._params = [p for g in self.optimizer.param_groups for p in g["params"]]
        self.store = None if self.run_dir is None else CheckpointStore(self.run_dir / "checkpoints", keep=keep_checkpoints)
        self._log = MetricsLog(None if self.run_dir is None else self.run_dir / "metrics.jsonl", enabled=self.is_main)
        self.step = 0
        self.metrics: dict[str, float] = {}
        self._stop_reason: str | None = None
        self._snapshot: Snapshot | None = None
        self._pending: Snapshot | None = None
        self._retries = 0
        self._restores = 0
        self._guard_history: dict[str, list[float]] = {}
        self._saved_step: int | None = None
        self._resume_offset: int | None = None
        self._restored_from: Path | None = None
        self._t0 = time.time()

    # ------------------------------------------------------------------ setup

    def _build_optimizer(self, spec: OptimizerSpec) -> torch.optim.Optimizer:
        named = [(f"model.{n}", p) for n, p in self.model.named_parameters() if p.requires_grad]
        seen = {id(p) for _, p in named}
        obj = []
        if isinstance(self.objective, nn.Module):
            obj = [(f"objective.{n}", p) for n, p in self.objective.named_parameters() if p.requires_grad and id(p) not in seen]
        if not named and not obj:
            raise ValueError("model/objective: no trainable parameters (requires_grad=True) to optimise")
        if isinstance(spec, torch.optim.Optimizer):
            held = {id(p) for g in spec.param_groups for p in g["params"]}
            ours = {id(p) for _, p in named + obj}
            missing = [n for n, p in named + obj if id(p) not in held]
            if missing or held - ours:
                raise ValueError(
                    f"optimizer: expected exactly the trainable parameters of model and objective; "
                    f"missing {missing}, {len(held - ours)} foreign parameter(s). Pass a factory "
                    "(groups -> optimizer) to have the trainer build it"
                )
            return spec
        groups = [{"params": [p for _, p in part]} for part in (named, obj) if part]
        if spec is None:
            return torch.optim.Adam(groups, lr=1e-3)
        if not callable(spec):
            raise TypeError(f"optimizer: expected an Optimizer or a factory (groups -> Optimizer); got {type(spec).__name__}")
        built = spec(groups)
        if not isinstance(built, torch.optim.Optimizer):
            raise TypeError(f"optimizer factory: expected a torch.optim.Optimizer; got {type(built).__name__}")
        return built

    @property
    def is_main(self) -> bool:
        """Rank 0 (or a single process): writes logs and checkpoints."""
        return self.dist.is_main

    def log_event(self, kind: str, **fields: Any) -> None:
        """Append ``{"event": kind, "step": ..., **fields, "time": ...}`` to metrics.jsonl (rank 0)."""
        self._log.write({"event": kind, "step": self.step, **fields, "time": self._time()})

    def request_stop(self, reason: str) -> None:
        """Ask the loop to stop after the current step (used by :class:`EarlyStopping`)."""
        self._stop_reason = reason

    def _time(self) -> dict[str, float]:
        now = time.time()
        return {"wall": now, "elapsed_s": now - self._t0}

    # ------------------------------------------------------------------ loop

    def fit(self, *, resume: bool | str | Path = False, overwrite: bool = False) -> TrainResult:
        """Train until ``steps`` (or early stop); checkpoint at exit.

        Args:
            resume: ``False`` start fresh; ``True`` continue from the newest
                valid checkpoint in ``run_dir`` (error if none); ``"auto"``
                continue when ``run_dir`` holds checkpoints, else start fresh;
                a path continues from that checkpoint record.
            overwrite: with ``resume=False``, delete the checkpoints and the
                metrics log already in ``run_dir`` and start again. Without it,
                a fresh start into a folder holding a run is refused.

        Raises:
            ValueError: ``resume`` or ``overwrite`` in an in-memory run (``run_dir=None``).
            RunFolderError: a fresh start into a folder that holds a run
                (checkpoints or metrics) without ``overwrite``.
            CheckpointError: no valid checkpoint to resume from, or one from
                another run.
            TrainingDiverged: the guard ran out of retries.
            KeyboardInterrupt: after Ctrl-C, once the state is saved (see the class docstring).
        """
        if resume is not True and resume is not False and not isinstance(resume, (str, Path)):
            raise ValueError(f"resume: expected False, True, 'auto' or a checkpoint path; got {resume!r}")
        if overwrite and resume is not False:
            raise ValueError(f"overwrite: deletes the run to start again; it cannot be combined with resume={resume!r}")
        with DeferredInterrupt(enabled=not self.dist.enabled) as interrupt:
            truncate = self._open_run(resume, overwrite)
            result = self._fit(interrupt, truncate)
            if interrupt.requested:  # Ctrl-C during the last step: the run is complete and saved
                raise KeyboardInterrupt
            return result

    def _open_run(self, resume: bool | str | Path, overwrite: bool) -> int | None:
        """Resume or check the folder for a fresh start; the offset metrics.jsonl is cut to."""
        if self.store is None or self.run_dir is None:
            if resume is not False or overwrite:
                what = f"resume={resume!r}" if resume is not False else "overwrite=True"
                raise ValueError(f"{what}: an in-memory run (run_dir=None) keeps nothing to resume or overwrite; "
                                 "give the Trainer a run_dir")
            return None
        if resume is True or (isinstance(resume, (str, Path)) and resume != "auto"):
            self.restore(None if resume is True else resume)
        elif resume == "auto" and self.store.has_any():
            self.restore()
        elif self._restored_from is None and self.step == 0:  # a fresh start (not after restore())
            # modules that draw from torch's global RNG (dropout) repeat too: seeded here, restored on resume
            torch.manual_seed(mix_seed(self.seed, self.dist.rank, _GLOBAL_RNG_SALT))
            log = self.run_dir / "metrics.jsonl"
            has_log = log.is_file() and log.stat().st_size > 0
            if self.store.has_any() or has_log:
                if not overwrite:
                    what = "checkpoints" if self.store.has_any() else "a metrics log but no checkpoint yet"
                    raise RunFolderError(
                        f"run_dir: {str(self.run_dir)!r} already holds a run ({what}); continue it with "
                        "resume=True (`ebms train --resume`), delete it with overwrite=True (`--overwrite`), "
                        "or use another run_dir (`run.name`)"
                    )
                if self.is_main:
                    self.store.clear()
                return 0
            return None
        if self._restored_from is not None:
            return self._resume_offset
        return None

    def _fit(self, interrupt: DeferredInterrupt, truncate: int | None) -> TrainResult:
        resumed_from, self._restored_from = self._restored_from, None  # also set by a direct restore()
        if self.dist.enabled:
            steps = [int(x) for x in self.dist.gather_tensor(torch.tensor([self.step], device=self.device))]
            if len(set(steps)) > 1:
                raise RuntimeError(f"distributed: ranks resumed at different steps {steps}; is run_dir shared by all ranks?")
        self.dist.broadcast_(_snapshot.sync_tensors(self))
        self._t0 = time.time()
        # a resumed run drops what was logged after its checkpoint (those steps are re-run exactly)
        self._log.open(truncate_to=truncate)
        if resumed_from is not None:
            self.log_event("resume", checkpoint=str(resumed_from))
        stopped_before = self._stop_reason  # a resumed run that had stopped early stays stopped
        self._restores, self._snapshot, self._pending = 0, None, None
        for cb in self.callbacks:
            cb.on_fit_start(self)
        bar = tqdm(total=self.steps, initial=self.step, desc="train", disable=not (self.progress and self.is_main), dynamic_ncols=True)
        at_boundary = True  # between two complete steps: the state, the log and the callbacks agree
        try:
            while self.step < self.steps and self._stop_reason is None:
                at_boundary = False
                if self._one_step():
                    self._after_step(bar)
                at_boundary = True
                if interrupt.requested:
                    raise KeyboardInterrupt
        except KeyboardInterrupt:
            saved = at_boundary and not self.dist.enabled
            reason = "interrupted" if saved else "interrupted during a step (not saved)"
            self.log_event("stop", reason=reason)
            if saved and self.step != self._saved_step and self.store is not None:
                self.save_checkpoint()
            self._log.close()
            raise
        except BaseException:
            self._log.close()
            raise
        finally:
            bar.close()
        if self._stop_reason is not None and stopped_before is None:
            self.log_event("stop", reason=self._stop_reason)
        if self.store is None:
            path = None
        else:
            path = self.save_checkpoint() if self.step != self._saved_step else self.store.latest()
        for cb in self.callbacks:
            cb.on_fit_end(self)
        self._log.close()
        return TrainResult(self.step, dict(self.metrics), self._stop_reason, path if self.is_main else None, self._restores)

    def _one_step(self) -> bool:
        """One attempted step; ``False`` when the guard rejected it (state restored)."""
        if self._snapshot_due():
            self._pending = _snapshot.capture(self)
        batch = to_device(self._batches.next(), self.device)
        if self._closure:
            return self._quasi_newton_step(batch)
        loss, raw = self._evaluate(batch)
        health = self._health_due()
        grads: list[Tensor] = []
        norm = None
        if health or self.grad_clip is not None:
            grads = [p.grad for p in self._params if p.grad is not None]
            norm = self._grad_norm(grads) if grads else torch.zeros((), device=self.device)
        host = None
        if health:
            assert norm is not None
            host = self._health(loss, raw, norm)
            if not self._healthy(*host):
                return False
        if self.grad_clip is not None and grads and norm is not None:
            coef = (self.grad_clip / (norm + 1e-6)).clamp(max=1.0)
            for g in grads:
                g.mul_(coef.to(g.dtype))
        self._apply_lr_schedule()
        self.optimizer.step()
        self._finish_step(host)
        return True

    def _evaluate(self, batch: Batch) -> tuple[Tensor, dict[str, Any]]:
        """Objective, backward (unless the objective sets its gradients) and rank-averaged gradients on
        ``batch``. Gradients are set to ``None`` first (``zero_grad(set_to_none=True)``, without the
        optimizer's profiling context)."""
        for p in self._params:
            p.grad = None
        out = self.objective(self.model, batch, generator=self.generator)
        loss, metrics = self._check_output(out)
        if not self._sets_gradients:
            loss.backward()
        self.dist.average_gradients(self._params)
        return loss, metrics

    def _health_due(self) -> bool:
        """Whether the step about to finish needs host numbers (see "Cost per step")."""
        if self.guard is not None or self.callbacks:
            return True
        step = self.step + 1
        at_ckpt = self.checkpoint_every is not None and self.store is not None and step % self.checkpoint_every == 0
        return step % self.log_every == 0 or step >= self.steps or at_ckpt

    @staticmethod
    def _grad_norm(grads: list[Tensor]) -> Tensor:
        return torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(g.detach().float()) for g in grads]))

    def _health(self, loss: Tensor, raw: dict[str, Any], norm: Tensor) -> tuple[float, dict[str, float], float]:
        """Loss, metrics and gradient norm as host numbers (averaged over ranks), for the guard and the log."""
        metrics = self._metric_numbers(raw)
        if self.dist.enabled:
            keys = sorted(metrics)
            vec = torch.tensor([metrics[k] for k in keys], dtype=torch.float64, device=self.device)
            vec = self.dist.mean(torch.cat([loss.detach().double().reshape(1), vec]))
            loss_f, *vals = vec.tolist()
            return loss_f, dict(zip(keys, vals)), float(norm)
        loss_f, gnorm = torch.stack([loss.detach().double().reshape(()), norm.double()]).tolist()
        return loss_f, metrics, gnorm

    def _healthy(self, loss_f: float, metrics: dict[str, float], gnorm: float) -> bool:
        """The divergence guard's verdict; on failure the last good state is restored (``False``),
        otherwise the snapshot taken before this step becomes the last good one."""
        if self.guard is None:
            return True
        reason = self.guard.check(loss_f, metrics, gnorm, self._guard_history)
        if reason is not None:
            self._recover(reason)
            return False
        self.guard.record(self._guard_history, loss_f, metrics)
        if self._pending is not None:
            self._snapshot, self._pending, self._retries = self._pending, None, 0
        return True

    def _apply_lr_schedule(self) -> None:
        if self.lr_schedule is not None:
            scale = float(self.lr_schedule(self.step))
            if not (math.isfinite(scale) and scale >= 0):
                raise ValueError(f"lr_schedule: expected a finite multiplier >= 0 at step {self.step}; got {scale}")
            for g in self.optimizer.param_groups:
                g["lr"] = g["initial_lr"] * scale

    def _finish_step(self, host: tuple[float, dict[str, float], float] | None) -> None:
        """Count the step; with its ``host`` numbers (loss, metrics, grad norm), record them."""
        self.step += 1
        if host is None:
            return
        loss_f, metrics, gnorm = host
        lr = float(self.optimizer.param_groups[0]["lr"])
        self._record = {"step": self.step, "loss": loss_f, "grad_norm": gnorm, "lr": lr, "metrics": metrics}
        if len(self.optimizer.param_groups) > 1:
            self._record["lr_groups"] = [float(g["lr"]) for g in self.optimizer.param_groups]
        self.metrics = {**metrics, "loss": loss_f, "grad_norm": gnorm, "lr": lr}

    def _quasi_newton_step(self, batch: Batch) -> bool:
        """One L-BFGS-type iteration on ``batch``.

        The objective is evaluated only through the optimizer's closure (start point and
        line-search trials); the guard and the log see the last evaluation (for
        :class:`~ebms.train.owlqn.OWLQN`, the accepted point). No ``grad_clip``: a line search
        needs the true gradient.
        """
        last: dict[str, Any] = {}

        def closure() -> Tensor:
            with torch.enable_grad():
                loss, metrics = self._evaluate(batch)
            last.update(loss=loss.detach(), metrics=metrics)
            return loss.detach()

        self._apply_lr_schedule()
        self.optimizer.step(closure)  # type: ignore[arg-type]
        if not last:  # the optimizer reused its cached point and found it stationary
            closure()
        grads = [p.grad for p in self._params if p.grad is not None]
        norm = self._grad_norm(grads) if grads else torch.zeros((), device=self.device)
        loss_f, metrics, gnorm = self._health(last["loss"], last["metrics"], norm)
        info = self.optimizer.info if isinstance(self.optimizer, ReportsStep) else None
        if info is not None and "loss" in info:
            # the optimizer's own account of the point it kept: its full objective (OWL-QN: with
            # the L1 term) there, not the last line-search trial, which may have been rejected
            metrics = {**metrics, "smooth_loss": loss_f}
            loss_f = float(info["loss"])
            gnorm = float(info.get("grad_norm", gnorm))
        failed = info is not None and bool(info.get("linesearch_failed", False))
        if not self._healthy(loss_f, metrics, gnorm):
            return False
        self._finish_step((loss_f, metrics, gnorm))
        if failed:  # no trial step decreased the objective: converged to rounding, or a bad direction
            self.log_event("linesearch_failed", loss=loss_f)
            self.request_stop(f"line search found no decrease at step {self.step} (loss {loss_f:.6g}): "
                              f"converged to numerical precision, or the objective is not smooth")
        return True

    def _after_step(self, bar: Any) -> None:
        if self.step % self.log_every == 0:
            self._log.write({**self._record, "time": self._time()})
            bar.set_postfix({k: f"{self.metrics[k]:.4g}" for k in HEALTH if k in self.metrics}, refresh=False)
        bar.update(1)
        for cb in self.callbacks:
            cb.on_step_end(self, self.step, self.metrics)
        if self.checkpoint_every is not None and self.store is not None and self.step % self.checkpoint_every == 0:
            self.save_checkpoint()
        if self.dist.enabled:  # every rank stops at the same step, whichever asked
            flag = torch.tensor([float(self._stop_reason is not None)], device=self.device)
            if float(self.dist.mean(flag)) > 0 and self._stop_reason is None:
                self._stop_reason = "stop requested on another rank"

    def _check_output(self, out: Any) -> tuple[Tensor, dict[str, Any]]:
        """The loss and the raw metrics (numbers or one-element tensors; made host numbers only on
        steps that need them, :meth:`_metric_numbers`)."""
        if not isinstance(out, LossOutput) or not isinstance(out.loss, Tensor) or not isinstance(out.metrics, Mapping):
            raise TypeError(f"objective: expected a LossOutput(loss, metrics, negatives); got {type(out).__name__}")
        loss, metrics = out.loss, out.metrics
        if loss.dim() != 0:
            raise ValueError(f"objective: expected LossOutput.loss to be a 0-d tensor; got shape {tuple(loss.shape)}")
        if not loss.requires_grad and not self._sets_gradients:
            raise ValueError("objective: LossOutput.loss does not require grad (computed under no_grad or detached?)")
        raw: dict[str, Any] = {}
        for k, v in metrics.items():
            if isinstance(v, Tensor) and v.numel() == 1:
                raw[k] = v.detach().clone()  # the value now, not after the optimizer step (a parameter's)
            elif isinstance(v, numbers.Real):
                raw[k] = v
            else:
                raise TypeError(f"objective: metric {k!r} must be a number; got {v!r}")
        return loss, raw

    @staticmethod
    def _metric_numbers(raw: Mapping[str, Any]) -> dict[str, float]:
        return {str(k): float(v.detach()) if isinstance(v, Tensor) else float(v) for k, v in raw.items()}

    # ------------------------------------------------------------------ divergence

    def _snapshot_due(self) -> bool:
        if self._pending is not None or self.guard is None:
            return False
        if self._snapshot is None:
            return True
        if self._snapshot.step == self.step:
            return False
        every = self.guard.snapshot_every
        at_ckpt = self.checkpoint_every is not None and self.step % self.checkpoint_every == 0
        return at_ckpt or (every is not None and self.step % every == 0)

    def _recover(self, reason: str) -> None:
        assert self.guard is not None
        failed = self.step + 1
        self._retries += 1
        if self._snapshot is None or self._retries > self.guard.max_retries:
            self.log_event("diverged", failed_step=failed, reason=reason, action="stop")
            if self._snapshot is None:
                msg = (
                    f"training diverged at step {failed}: {reason}; no earlier healthy state to restore "
                    "(the first step after the start or resume failed). Check the data, the initialisation "
                    f"and the objective, or {ADVICE}"
                )
            else:
                lr = float(self.optimizer.param_groups[0]["lr"])
                start_lr = lr / self.guard.lr_factor ** (self._retries - 1)
                msg = (
                    f"training diverged at step {failed}: {reason}; gave up after {self.guard.max_retries} "
                    f"restore(s) to step {self._snapshot.step} (lr {start_lr:.3g} lowered to {lr:.3g}, "
                    f"grad_clip={self.grad_clip}). To fix: {ADVICE}"
                )
            raise TrainingDiverged(msg)
        self._pending = None
        _snapshot.apply(self, self._snapshot, IN_MEMORY if self.run_dir is None else str(self.run_dir))
        self._log.rewind(self._snapshot.log_offset)  # the undone steps leave the log too
        factor = self.guard.lr_factor**self._retries
        for g in self.optimizer.param_groups:
            g["lr"] = g["lr"] * factor
            g["initial_lr"] = g["initial_lr"] * factor
        self.optimizer.zero_grad(set_to_none=True)
        self._restores += 1
        lr = float(self.optimizer.param_groups[0]["lr"])
        self.log_event(
            "diverged", failed_step=failed, reason=reason, action="restore",
            retry=self._retries, max_retries=self.guard.max_retries, lr=lr,
        )
        logger.warning(
            "step %d diverged (%s): restored step %d, lr -> %.3g (retry %d/%d)",
            failed, reason, self.step, lr, self._retries, self.guard.max_retries,
        )

    # ------------------------------------------------------------------ checkpoints

    def save_checkpoint(self) -> Path | None:
        """Checkpoint the current state (collective under torchrun; rank 0 writes).

        Returns the JSON record's path on rank 0, else ``None``.
        """
        if self.store is None:
            raise ValueError("save_checkpoint: an in-memory run (run_dir=None) writes no checkpoints; give the "
                             "Trainer a run_dir")
        tensors, meta = _snapshot.checkpoint_payload(self)
        meta["trainer"]["metrics_offset"] = self._log.offset()
        meta["metrics"] = jsonable(self.metrics)
        self._saved_step = self.step
        path = self.store.save(self.step, tensors, meta, identity=self.identity) if self.is_main else None
        self.dist.barrier()  # no rank reads `latest` before rank 0 has committed
        if path is not None:
            logger.info("checkpoint %s", path)
        return path

    def restore(self, which: int | str | Path | None = None) -> Path:
        """Load a checkpoint (default: the newest valid one in ``run_dir``) into this trainer.

        The next :meth:`fit` continues from it (same as ``fit(resume=which)``).
        Returns the record's path.

        Raises:
            CheckpointError: no valid checkpoint, a damaged one (when named), or
                one whose identity or batch size, seed, world size or data
                differ from this trainer's.
        """
        if self.store is None:
            raise ValueError("restore: an in-memory run (run_dir=None) has no checkpoints; give the Trainer a run_dir")
        ckpt = self.store.load(which, identity=self.identity)
        _snapshot.apply_checkpoint(self, ckpt)
        self._saved_step = self.step
        self._resume_offset = int(ckpt.meta["trainer"].get("metrics_offset", 0))
        self._restored_from = ckpt.path
        self._stop_reason = ckpt.meta["trainer"].get("stop_reason")
        self.metrics = {}
        for k, v in (ckpt.meta.get("metrics") or {}).items():
            try:
                self.metrics[k] = float(v)  # "nan"/"inf" strings included
            except (TypeError, ValueError):
                continue
        return ckpt.path

    def config_dict(self) -> dict[str, Any]:
        """Settings a resume must agree with (plus informational ones), stored in checkpoints."""
        return {
            "steps": self.steps, "batch_size": self.batch_size, "seed": self.seed,
            "world_size": self.dist.world_size, "data": self._batches.describe(),
            "log_every": self.log_every, "checkpoint_every": self.checkpoint_every,
            "grad_clip": self.grad_clip, "optimizer": type(self.optimizer).__name__,
            "user": self.user_config,
        }
