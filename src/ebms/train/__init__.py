"""The training loop — nothing model-specific.

::

    trainer = Trainer(objective, model, data, steps=2000, batch_size=256, run_dir="runs/toy")
    result = trainer.fit(resume="auto")

Contract with the layers above:

* an **objective** is an ``nn.Module`` called as
  ``out = objective(model, batch, generator=g)`` returning
  ``LossOutput(loss, metrics, negatives)``; its parameters (a learned log Z)
  are optimised with the model's and its buffers (a replay buffer) are
  checkpointed;
* **data** is a tensor ``(N, *event)`` (or a tuple of tensors) shuffled per
  epoch from the seed, or a function ``(batch_size, generator) -> batch``;
* all randomness flows from the trainer's ``torch.Generator``, so a run
  resumed from a checkpoint reproduces the uninterrupted run exactly.

The trainer shows a progress bar with the health metrics (loss, e_pos, e_neg, gap,
grad_norm; a live tqdm bar on a terminal, otherwise one line per 30 s and a
summary line, no carriage returns), appends JSON lines to ``run_dir/metrics.jsonl``, writes atomic
safetensors + JSON checkpoints (:class:`CheckpointStore`), restores the last
good state and lowers the learning rate when training diverges
(:class:`DivergenceGuard`), and runs unchanged under ``torchrun``
(:class:`DistributedContext`). Callbacks add evaluation, sample pictures and
early stopping; ``ema=`` keeps a moving average of the weights (:class:`WeightAverage`). Quasi-Newton optimizers (:class:`OWLQN`, ``torch.optim.LBFGS``)
take one iteration per step through a closure over the batch. With
``run_dir=None`` the trainer runs in memory (no files): the driver behind
library calls such as :func:`ebms.fit.fit_feature_crf` and
:class:`ebms.fit.RBMEstimator`. What the trainer may be told about an
optimizer or an objective is declared, not probed: :mod:`ebms.train.protocols`.
"""

from ebms.train.callbacks import Callback, EarlyStopping, PeriodicEval, ReleaseMemory, SampleSnapshot
from ebms.train.checkpoint import Checkpoint, CheckpointStore
from ebms.train.distributed import DistributedContext
from ebms.train.ema import WeightAverage
from ebms.train.folder_lock import RunFolderLock
from ebms.train.guard import DivergenceGuard, TrainingDiverged
from ebms.train.logs import LOG_WRITERS, CSVLog, MetricsTable, TensorBoardLog, read_metrics
from ebms.train.owlqn import OWLQN
from ebms.train.protocols import (
    ClosureOptimizer,
    GradientObjective,
    OptimizerLike,
    ReportsStep,
    SecondOrderObjective,
    needs_closure,
)
from ebms.train.scaled_sgd import ScaledSGD
from ebms.train.sgd import LeanSGD
from ebms.train.trainer import Trainer, TrainResult

__all__ = [
    "LOG_WRITERS",
    "CSVLog",
    "Callback",
    "Checkpoint",
    "CheckpointStore",
    "ClosureOptimizer",
    "DistributedContext",
    "DivergenceGuard",
    "EarlyStopping",
    "GradientObjective",
    "LeanSGD",
    "MetricsTable",
    "OWLQN",
    "OptimizerLike",
    "PeriodicEval",
    "ReleaseMemory",
    "ReportsStep",
    "RunFolderLock",
    "SampleSnapshot",
    "ScaledSGD",
    "SecondOrderObjective",
    "TensorBoardLog",
    "TrainResult",
    "Trainer",
    "TrainingDiverged",
    "WeightAverage",
    "needs_closure",
    "read_metrics",
]
