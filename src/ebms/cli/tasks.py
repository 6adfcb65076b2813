"""Conditional (structured) tasks on the command line: taggers on CoNLL, speech recognisers on digits.

The unconditional jobs of :mod:`ebms.cli.run` learn a density of ``x``; a structured task learns
``p(y | x)`` and is judged by a task figure (chunk F1, label error rate). Each task is a
:class:`StructuredTask` registered under the ``data.name`` values it serves; ``ebms train`` and
``ebms eval`` route to it, and everything else — seeding, the generic
:class:`~ebms.train.Trainer` (minibatch Adam/SGD, or full-batch quasi-Newton steps), checkpoints,
resume, ``eval.json`` — is shared with the other jobs.
"""

from __future__ import annotations

import abc
import importlib
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, ClassVar

import torch
from torch import Tensor, nn

from ebms.cli.config import Config, ConfigError

__all__ = [
    "BUILTIN_TASK_MODULES",
    "StructuredTask",
    "TaskData",
    "TaskReport",
    "register",
    "task_defaults",
    "task_for",
    "task_kinds",
    "task_names",
]

#: modules whose import registers the packaged tasks.
BUILTIN_TASK_MODULES = ("ebms.cli.tagging", "ebms.cli.speech")


@dataclass
class TaskData:
    """What a task's :meth:`StructuredTask.load` returns.

    Attributes:
        train: padded tensors sharing dim 0 (inputs, targets, lengths, ...): the trainer's data.
        test: whatever :meth:`StructuredTask.evaluate` needs (tensors, sentences, ...).
        info: vocabulary sizes, tag names and anything else the model builder needs.
        name: the ``data.name`` it was loaded for.
    """

    train: tuple[Tensor, ...]
    test: Any
    info: dict[str, Any] = field(default_factory=dict)
    name: str = ""

    @property
    def size(self) -> int:
        """Number of training examples (rows of every ``train`` tensor)."""
        return int(self.train[0].shape[0]) if self.train else 0


@dataclass(frozen=True)
class TaskReport:
    """A structured task's test figures (``eval.json``), e.g. ``{"f1": 93.4, "precision": ...}``."""

    step: int
    task: str
    figures: dict[str, float]

    def lines(self) -> list[str]:
        shown = ", ".join(f"{k} {v:.4g}" if isinstance(v, float) else f"{k} {v}" for k, v in self.figures.items())
        return [f"{self.task} test, step {self.step}: {shown}"]


class StructuredTask(abc.ABC):
    """One conditional task: its data, model, objective and test figures.

    Subclasses set :attr:`data_names` and implement the four methods; :func:`register` makes
    ``ebms train`` use them when ``data.name`` is one of the names.
    """

    #: ``data.name`` values this task serves.
    data_names: tuple[str, ...] = ()
    #: ``model.kind`` and ``objective.kind`` values it accepts (listed in docs/cli.md); the first
    #: of each is the default when the user sets ``data.name`` alone.
    model_kinds: tuple[str, ...] = ()
    objective_kinds: tuple[str, ...] = ()
    #: further defaults (dotted key -> value) for keys the user did not set, e.g.
    #: ``{"model.hidden": [100]}`` where the generic default does not fit the task's model.
    defaults: ClassVar[dict[str, Any]] = {}

    def default_settings(self) -> dict[str, Any]:
        """Values this task gives the keys a config did not set (applied by
        :func:`~ebms.cli.config.load_config`): its first model and objective kind, then :attr:`defaults`.

        Returns:
            ``{"model.kind": ..., "objective.kind": ..., **defaults}`` (dotted keys).
        """
        out: dict[str, Any] = {}
        if self.model_kinds:
            out["model.kind"] = self.model_kinds[0]
        if self.objective_kinds:
            out["objective.kind"] = self.objective_kinds[0]
        return {**out, **self.defaults}

    @abc.abstractmethod
    def load(self, cfg: Config) -> TaskData:
        """Training tensors and the test set; deterministic given ``cfg``."""

    @abc.abstractmethod
    def build_model(self, cfg: Config, data: TaskData) -> nn.Module:
        """The configured model (called with the global RNG seeded from ``run.seed``)."""

    @abc.abstractmethod
    def build_objective(self, cfg: Config, data: TaskData) -> Callable[..., Any]:
        """``objective(model, batch, generator=g) -> LossOutput`` for the trainer."""

    @abc.abstractmethod
    def evaluate(self, cfg: Config, model: nn.Module, data: TaskData) -> dict[str, float]:
        """Test-set figures of a trained model (model in eval mode, no gradients needed)."""

    def build_optimizer(self, cfg: Config, data: TaskData) -> Callable[[list[dict[str, Any]]], torch.optim.Optimizer] | None:
        """An optimizer factory when the task needs its own (e.g. OWL-QN with an L1 weight); ``None``
        uses ``train.optimizer``."""
        return None


TASKS: dict[str, StructuredTask] = {}
_loaded = False


def register(task: StructuredTask) -> StructuredTask:
    """Serve ``task.data_names`` with ``task``; a name already taken by another task is an error."""
    if not isinstance(task, StructuredTask):
        raise TypeError(f"task: expected a StructuredTask instance; got {type(task).__name__}")
    if not task.data_names:
        raise ValueError(f"task: {type(task).__name__} names no data.name values (data_names is empty)")
    for name in task.data_names:
        other = TASKS.get(name)
        if other is not None and type(other) is not type(task):
            raise ValueError(f"task: data.name {name!r} is already served by {type(other).__name__}")
        TASKS[name] = task
    return task


def _load_builtin() -> None:
    global _loaded
    if not _loaded:
        for module in BUILTIN_TASK_MODULES:
            importlib.import_module(module)
        _loaded = True


def task_names() -> list[str]:
    """Every ``data.name`` a structured task serves."""
    _load_builtin()
    return sorted(TASKS)


def task_kinds() -> tuple[list[str], list[str]]:
    """Every ``model.kind`` and every ``objective.kind`` some structured task accepts."""
    _load_builtin()
    tasks = list(TASKS.values())
    return (sorted({k for t in tasks for k in t.model_kinds}), sorted({k for t in tasks for k in t.objective_kinds}))


def task_for(cfg: Config) -> StructuredTask | None:
    """The task serving ``cfg.data.name``, or ``None`` for the unconditional data sets."""
    _load_builtin()
    return TASKS.get(cfg.data.name)


def task_defaults(data_name: str) -> dict[str, Any]:
    """The defaults of the task serving ``data_name`` (``{}`` for the unconditional data sets)."""
    _load_builtin()
    task = TASKS.get(data_name)
    return {} if task is None else task.default_settings()


def check_batch_size(cfg: Config, data: TaskData) -> None:
    """``train.batch_size`` must not exceed the number of training examples (the trainer drops
    the last partial batch, so a larger batch would train on nothing)."""
    if cfg.train.batch_size > data.size:
        raise ConfigError(
            f"train.batch_size: expected at most the {data.size} training examples of {cfg.data.name}; "
            f"got {cfg.train.batch_size}"
        )
