"""The training loop: progress, metrics log, checkpoint/resume, divergence guard, data parallel."""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import torch
from torch import Tensor, nn

from ebms._checks import check_bool, check_int, check_positive
from ebms._precision import autocast, check_precision
from ebms.train import _fsdp, _loop, _recovery, _run_folder, _setup, _snapshot
from ebms.train._data import Batch, StreamBatches, TensorBatches, to_device
from ebms.train._interrupt import DeferredInterrupt
from ebms.train._log import MetricsLog
from ebms.train._loop import TrainResult
from ebms.train._setup import OptimizerSpec
from ebms.train._snapshot import Snapshot
from ebms.train._step import apply_lr_schedule, check_output, finish_step, grad_norm, metric_numbers, quasi_newton_step
from ebms.train.callbacks import Callback
from ebms.train.checkpoint import CheckpointStore
from ebms.train.distributed import DistributedContext
from ebms.train.ema import WeightAverage
from ebms.train.guard import DivergenceGuard
from ebms.train.protocols import differentiates_twice, needs_closure, sets_gradients, unanchored_metrics

__all__ = ["TrainResult", "Trainer", "needs_closure"]

class Trainer:
    r"""Run an objective on a model for ``steps`` optimizer steps, reproducibly.

    One step: draw a batch, ``out = objective(model, batch, generator=g)``,
    ``out.loss.backward()``, average gradients over ranks, check health with the
    :class:`DivergenceGuard` (restore + smaller learning rate on failure), clip
    (``grad_clip``), ``optimizer.step()``, log, run callbacks, checkpoint.
    An objective declaring ``sets_gradients = True``
    (:class:`~ebms.train.protocols.GradientObjective`) fills ``.grad`` itself and
    gets no ``backward()``.

    **Optimizer.** ``optimizer`` is either a ready optimizer (a
    ``torch.optim.Optimizer``, or any :class:`~ebms.train.protocols.OptimizerLike`
    such as :class:`~ebms.train.LeanSGD`, which skips ``torch.optim``'s per-step
    hooks) covering exactly the trainable parameters of ``model`` and ``objective``,
    or a factory called with parameter groups ``[{"params": model params},
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
    and return it (:func:`ebms.fit.fit_feature_crf`,
    :class:`ebms.fit.RBMEstimator`). Nothing is written (no metrics log,
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
    saving (the last checkpoint stands). SIGTERM (``kill``, schedulers; still on
    its default handler) is handled the same way. Under ``torchrun`` neither is
    deferred and nothing is saved.

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
        keep_checkpoints: most recent checkpoints kept on disk (``None``, the default: every one; no
            checkpoint is deleted unless asked).
        grad_clip: clip the global gradient norm to this value (``None``: off).
        lr_schedule: optional ``step -> multiplier`` (e.g.
            :class:`ebms.samplers.schedules.CosineAnnealing`); the learning
            rate at step ``t`` is ``initial_lr * lr_schedule(t)`` per group.
            ``initial_lr`` is kept in the optimizer state (checkpointed), and
            the divergence guard lowers it too.
        callbacks: :class:`~ebms.train.Callback` objects, run in order.
        guard: divergence handling; ``None`` disables it.
        progress: show a progress bar (rank 0): live on a terminal; written to a file or
            pipe, a line every ``TQDM_MININTERVAL`` (default 30) seconds and a summary line.
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
        ema: keep a moving average of the model's weights with this decay in
            ``(0, 1)`` (:class:`~ebms.train.ema.WeightAverage`, :attr:`ema`),
            updated after each accepted step, checkpointed under ``ema/`` and
            restored with the rest of the state; part of the identity
            (``trainer.ema``). ``None`` (default): none.
        precision: ``"fp32"`` (default: the tensors' own dtypes) or ``"bf16"``: each step's objective
            (energies, samplers inside it) runs under ``torch.autocast`` with bfloat16 products;
            parameters, gradients, optimizer state and chain states stay float32, energies and
            gradients leave every evaluation in float32 (:mod:`ebms._precision`). Part of the
            identity (``trainer.precision``). Faster only on hardware with
            bfloat16 arithmetic (AVX-512 BF16/AMX CPUs, GPUs); an AVX2-only CPU emulates it, many
            times slower (``benchmarks/precision.py``).
        compile: compile the model's ``forward`` in place (``nn.Module.compile``; state-dict keys
            unchanged): what objectives differentiate (CD's and NCE's energies)
            runs compiled; refused for objectives differentiated twice (score matching:
            :class:`~ebms.train.protocols.SecondOrderObjective`). Samplers' analytic gradients
            stay eager; compile an energy for a sampler with :func:`ebms.energy.compiled`. Part of
            the identity (``trainer.compile``).
        shard: under ``torchrun``, ``"ddp"`` (default: every rank holds the whole energy, gradients
            averaged) or ``"fsdp"``: the energy is wrapped with FSDP2's ``fully_shard``, so parameters,
            gradients and optimizer state are split over the ranks between evaluations
            (:mod:`ebms.train._fsdp`); checkpoints still hold whole tensors. Same loss curve as
            ``"ddp"`` up to float rounding. Not with ``ema`` or a quasi-Newton optimizer.

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
        keep_checkpoints: int | None = None,
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
        ema: float | None = None,
        precision: str = "fp32",
        compile: bool = False,
        shard: str = "ddp",
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
        self._unanchored = unanchored_metrics(objective)  # metrics the guard does not watch
        self.callbacks = _setup.check_callbacks(callbacks)
        self.user_config = _setup.json_settings(config, "config", "a JSON-serialisable mapping")
        user_identity = _setup.json_settings(identity, "identity", "a flat JSON-serialisable mapping")
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
        self.shard = _fsdp.check_shard(shard)
        if self.shard == "fsdp":
            _fsdp.shard_model(self.model, self.dist, self.device, ema=ema is not None)
        #: the moving average of the model's weights (``ema=``), else ``None``
        self.ema = None if ema is None else WeightAverage(self.model, ema)
        if self.ema is not None:
            self.identity["trainer.ema"] = self.ema.decay
        self.precision = check_precision(precision)
        self.compile = check_bool(compile, "compile")
        self.identity["trainer.precision"] = self.precision
        self.identity["trainer.compile"] = self.compile
        if self.compile and differentiates_twice(objective):
            raise ValueError(f"compile: {type(objective).__name__} differentiates the energy twice (its loss holds an "
                             f"input gradient made with create_graph=True), which torch.compile cannot (no double "
                             f"backward in AOTAutograd); train it with compile=False")
        if self.compile:
            self.model.compile()
        self.objective = objective.to(self.device) if isinstance(objective, nn.Module) else objective
        self.generator = _setup.make_generator(generator, self.device, self.seed, self.dist.rank)
        self._batches: TensorBatches | StreamBatches = _setup.make_batches(
            data, self.batch_size, self.seed, self.dist, self.generator
        )
        self.optimizer = _setup.build_optimizer(self.model, self.objective, optimizer)
        self._closure = needs_closure(self.optimizer)
        self._sets_gradients = sets_gradients(self.objective)
        _setup.check_optimizer(self.optimizer, self._closure, self._batches, self.batch_size, self.dist.world_size)
        self._params = [p for g in self.optimizer.param_groups for p in g["params"]]
        if self.shard == "fsdp":
            _fsdp.hook_optimizer(self.optimizer, self._closure)
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
        self._saved_path: Path | None = None  # the record of that checkpoint (its state: a snapshot's tensors)
        self._resume_offset: int | None = None
        self._restored_from: Path | None = None
        self._record: dict[str, Any] = {}  # the last step's log line (without its time)
        self._t0 = time.time()

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
            truncate = _run_folder.open_run(self, resume, overwrite)
            result = _loop.run(self, interrupt, truncate)
            if interrupt.requested:  # Ctrl-C during the last step: the run is complete and saved
                raise KeyboardInterrupt
            return result

    def _one_step(self) -> bool:
        """One attempted step; ``False`` when the guard rejected it (state restored)."""
        if self.guard is not None and _recovery.snapshot_due(self):
            self._pending = _snapshot.capture(self, on_disk=_recovery.checkpoint_of_now(self))
        batch = to_device(self._batches.next(), self.device)
        if self._closure:
            return quasi_newton_step(self, batch)
        try:
            loss, raw = self._evaluate(batch)
        except (ValueError, RuntimeError) as exc:
            # an objective that fails on weights a previous step made non-finite (a sampler refusing
            # its non-finite start energies, say) is the divergence the guard exists for, not a bug
            if self.guard is None or all(bool(torch.isfinite(p).all()) for p in self._params):
                raise
            first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
            _recovery.recover(self, f"the objective failed on non-finite weights ({first[:200]})")
            return False
        health = self._health_due()
        grads: list[Tensor] = []
        norm = None
        if health or self.grad_clip is not None:
            grads = [p.grad for p in self._params if p.grad is not None]
            if self.shard == "fsdp":
                norm = _fsdp.grad_norm(grads, self.dist) if grads else torch.zeros((), device=self.device)
                grads = _fsdp.local_grads(grads)
            else:
                norm = grad_norm(grads) if grads else torch.zeros((), device=self.device)
        host = None
        if health:
            assert norm is not None
            host = self._health(loss, raw, norm)
            if not _recovery.healthy(self, *host):
                return False
        if self.grad_clip is not None and grads and norm is not None:
            coef = (self.grad_clip / (norm + 1e-6)).clamp(max=1.0)
            for g in grads:
                g.mul_(coef.to(g.dtype))
        if self.lr_schedule is not None:
            apply_lr_schedule(self)
        self.optimizer.step()
        finish_step(self, host)
        return True

    def _evaluate(self, batch: Batch) -> tuple[Tensor, dict[str, Any]]:
        """Objective, backward (unless the objective sets its gradients) and rank-averaged gradients on
        ``batch``. Gradients are set to ``None`` first (``zero_grad(set_to_none=True)``, without the
        optimizer's profiling context)."""
        for p in self._params:
            p.grad = None
        with autocast(self.precision, self.device.type):
            out = self.objective(self.model, batch, generator=self.generator)
        loss, metrics = check_output(out, self._sets_gradients)
        if not self._sets_gradients:
            loss.backward()
        if self.dist.enabled:
            self.dist.average_gradients(self._params)
        return loss, metrics

    def _health_due(self) -> bool:
        """Whether the step about to finish needs host numbers (see "Cost per step")."""
        if self.guard is not None or self.callbacks:
            return True
        step = self.step + 1
        at_ckpt = self.checkpoint_every is not None and self.store is not None and step % self.checkpoint_every == 0
        return step % self.log_every == 0 or step >= self.steps or at_ckpt

    def _health(self, loss: Tensor, raw: dict[str, Any], norm: Tensor) -> tuple[float, dict[str, float], float]:
        """Loss, metrics and gradient norm as host numbers (averaged over ranks), for the guard and the log."""
        metrics = metric_numbers(raw)
        if self.dist.enabled:
            keys = sorted(metrics)
            vec = torch.tensor([metrics[k] for k in keys], dtype=torch.float64, device=self.device)
            vec = self.dist.mean(torch.cat([loss.detach().double().reshape(1), vec]))
            loss_f, *vals = vec.tolist()
            return loss_f, dict(zip(keys, vals)), float(norm)
        loss_f, gnorm = torch.stack([loss.detach().double().reshape(()), norm.double()]).tolist()
        return loss_f, metrics, gnorm

    # ------------------------------------------------------------------ checkpoints

    def save_checkpoint(self) -> Path | None:
        """Checkpoint the current state (collective under torchrun; rank 0 writes).

        Returns the JSON record's path on rank 0, else ``None``.
        """
        return _run_folder.save_checkpoint(self)

    def restore(self, which: int | str | Path | None = None) -> Path:
        """Load a checkpoint (default: the newest valid one in ``run_dir``) into this trainer.

        The next :meth:`fit` continues from it (same as ``fit(resume=which)``).
        Returns the record's path.

        Raises:
            CheckpointError: no valid checkpoint, a damaged one (when named), or
                one whose identity or batch size, seed, world size or data
                differ from this trainer's.
        """
        return _run_folder.restore(self, which)

    def config_dict(self) -> dict[str, Any]:
        """Settings a resume must agree with (plus informational ones), stored in checkpoints."""
        return {
            "steps": self.steps, "batch_size": self.batch_size, "seed": self.seed,
            "world_size": self.dist.world_size, "data": self._batches.describe(),
            "log_every": self.log_every, "checkpoint_every": self.checkpoint_every,
            "grad_clip": self.grad_clip, "optimizer": type(self.optimizer).__name__,
            "user": self.user_config,
        }
