"""The task registry: what the command line trains, routed by ``data.name``.

A task is one kind of job: a toy density, a file of points, binary images, CoNLL tagging,
connected-digit recognition, ... . Each is a :class:`Task` registered under the ``data.name``
values it serves (a point file is selected by ``data.path`` instead). A task declares

* its config section: a dataclass of the keys only it reads (:attr:`Task.section`,
  :attr:`Task.settings_type`, with their rules in :attr:`Task.rules`), the further sections it
  shares with other tasks (:attr:`Task.more_sections`: a language kind's ``[trf]``, ``[ngram]``),
  the keys it renamed (:attr:`Task.moved`, :meth:`Task.kind_moves`: an old spelling is a one-line
  error naming the new key, and a run folder's ``config.toml`` written before the move is read
  in the new spelling, :func:`stored_spelling`), and defaults
  for shared keys (:attr:`Task.defaults`); the role of each key (whether it changes the trained
  weights, only the evaluation, or says where files are) is a row of the one table
  :data:`ebms.cli.run.KEY_ROLES`, which decides what a checkpoint's identity holds;
* the ``model.kind`` and ``objective.kind`` values it takes;
* its builders: :meth:`~Task.load` (data), :meth:`~Task.build_model`,
  :meth:`~Task.build_objective`, the training data (:meth:`~Task.training_data`), and its
  evaluation (:meth:`~Task.report`), samples and plots.

``ebms train``, ``eval`` and ``sample`` ask :func:`task_for` which task serves a config and call
these; everything else (seeding, the :class:`~ebms.train.Trainer`, checkpoints, resume,
``eval.json``) is shared. :class:`StructuredTask` is the base of conditional tasks ``p(y | x)``
judged by a test figure (F1, label error rate).
"""

from __future__ import annotations

import abc
import importlib
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, Generic, TypeVar, cast

import torch
from torch import Tensor, nn

from ebms.cli._config_rules import Rule
from ebms.cli._config_schema import Config, ConfigError

__all__ = [
    "BUILTIN_TASK_MODULES",
    "Section",
    "StructuredTask",
    "Task",
    "TaskData",
    "TaskReport",
    "check_batch_size",
    "default_task",
    "moved_message",
    "register",
    "registered",
    "section_readers",
    "stored_identity",
    "stored_spelling",
    "task_for",
    "task_names",
    "task_rules",
    "task_sections",
]

#: modules whose import registers the packaged tasks (in this order: their sections' order).
BUILTIN_TASK_MODULES = ("ebms.cli.continuous", "ebms.cli.images", "ebms.cli.tagging", "ebms.cli.speech",
                        "ebms.cli.language", "ebms.cli._language_trf", "ebms.cli._language_hf",
                        "ebms.cli._generation_text",
                        "ebms.cli.generation", "ebms.cli._generation_control", "ebms.cli.vision", "ebms.cli.jrf",
                        "ebms.cli.textclass")

S = TypeVar("S")


@dataclass(frozen=True)
class Section:
    """A config section that tasks share beside their own (a language kind's ``[trf]``): its dataclass
    and the constraint of each of its keys."""

    settings_type: type
    rules: dict[str, Rule]


class Task(abc.ABC, Generic[S]):
    """One kind of job: its config section, data, model, objective and evaluation.

    Subclasses set the class attributes and implement the abstract methods; :func:`register`
    makes the command line route to them. ``S`` is the section's dataclass
    (:meth:`settings` returns it typed).
    """

    #: ``data.name`` values this task serves.
    data_names: ClassVar[tuple[str, ...]] = ()
    #: how a message names one of its data sets, e.g. ``"a toy set"``.
    what: ClassVar[str] = "a task"
    #: the name of its config section (``""``: none) and the dataclass of its keys.
    section: ClassVar[str] = ""
    settings_type: ClassVar[type | None] = None
    #: the constraint of each key of its section (every key needs one; see ``ebms.cli.config.RULES``).
    rules: ClassVar[dict[str, Rule]] = {}
    #: keys it took over from the shared sections: old dotted key -> key of its section.
    moved: ClassVar[dict[str, str]] = {}
    #: further sections it reads beside its own, by name (shared with other tasks: ``[trf]`` is read by
    #: every TRF kind).
    more_sections: ClassVar[dict[str, Section]] = {}
    #: ``model.kind`` values it serves (with each data name: its registry keys), ``objective.kind`` values its
    #: family accepts; the first of each is the default when the user sets ``data.name`` alone.
    model_kinds: ClassVar[tuple[str, ...]] = ()
    objective_kinds: ClassVar[tuple[str, ...]] = ()
    #: further defaults (dotted key -> value) for shared keys the user did not set.
    defaults: ClassVar[dict[str, Any]] = {}
    #: a conditional task ``p(y | x)``: no unconditional samples.
    conditional: ClassVar[bool] = False
    #: ``ebms eval --ais`` applies (log Z of a model of binary data, a TRF's per-length log Z).
    supports_ais: ClassVar[bool] = False
    #: what ``ebms sample`` writes beside the samples' tensor: ``"png"`` (:meth:`plot`) or ``"txt"``
    #: (:meth:`sample_text`, also printed).
    sample_format: ClassVar[str] = "png"

    #: the commands applying a trained run of this task to new input (``"score"``, ``"tag"``, ``"decode"``,
    #: ``"classify"``; ``ebms rescore`` takes runs that serve ``"score"``), each served by :meth:`applier`.
    applies: ClassVar[tuple[str, ...]] = ()

    def settings(self, cfg: Config) -> S:
        """This task's section of ``cfg``."""
        return cast(S, cfg.sections[self.section])

    def sections(self) -> dict[str, Section]:
        """Every section it reads, by name: its own (:attr:`section`), then :attr:`more_sections`."""
        own = {self.section: Section(self.settings_type, self.rules)} if self.section and self.settings_type else {}
        return {**own, **self.more_sections}

    def kind_moves(self) -> dict[str, str]:
        """Keys its ``model.kind`` reads in another section than they used to (issue 25): old dotted key -> new
        (``{"language.chains": "trf.chains"}``); none by default."""
        return {}

    def describe(self, cfg: Config) -> str:
        """The data of ``cfg`` in words, e.g. ``data.name='rings' (a toy set)``."""
        return f"data.name={cfg.data.name!r} ({self.what})"

    def default_settings(self) -> dict[str, Any]:
        """Values this task gives the shared keys a config did not set (applied by
        :func:`~ebms.cli.config.load_config`): its first model and objective kind, then :attr:`defaults`."""
        out: dict[str, Any] = {}
        if self.model_kinds:
            out["model.kind"] = self.model_kinds[0]
        if self.objective_kinds:
            out["objective.kind"] = self.objective_kinds[0]
        return {**out, **self.defaults}

    def check_names(self, cfg: Config) -> None:
        """Check the name-valued keys of this task's section (called for every task, served or not)."""

    def check(self, cfg: Config) -> None:
        """Check the combinations of a config this task serves, before anything is built."""

    def check_inputs(self, cfg: Config) -> None:
        """Check, when ``ebms train`` starts and before anything is loaded or written, that the optional
        inputs the config names explicitly are there (e.g. an out-of-distribution set listed in
        ``vision.ood``), so a missing one stops the run before training, not after it. ``eval`` and
        ``sample`` of a trained run do not call it (an evaluation says itself what it cannot read)."""

    def fitted(self, cfg: Config) -> bool:
        """``build_model`` returns the model already estimated (counts, closed form): ``ebms train`` saves
        it as the step-0 checkpoint and writes :meth:`write_model_files` instead of running the Trainer."""
        return False

    def write_model_files(self, run_dir: Path, cfg: Config, model: nn.Module, data: Any) -> list[Path]:
        """Files a :meth:`fitted` model leaves in its run folder beside the checkpoint (e.g. an ARPA file)."""
        return []

    @abc.abstractmethod
    def load(self, cfg: Config) -> Any:
        """The data set, deterministic given ``cfg``. A task with :meth:`run_files` also takes
        ``stored`` (keyword): those files as a trained run kept them, to use instead of fitting them."""

    def load_applied(self, cfg: Config, stored: dict[str, bytes]) -> Any | None:
        """What :meth:`applier` and :meth:`build_model` need, from a trained run's stored files (:meth:`run_files`)
        and ``cfg`` alone, without reading the training data (``ebms score/tag/decode/classify`` of a run folder
        copied without its data, and without the cost of loading it); ``None`` (the default, and for a run whose
        files predate what this needs): the applier takes :meth:`load`'s data."""
        return None

    def run_files(self, cfg: Config, data: Any) -> dict[str, bytes]:
        """Files a run keeps beside its checkpoints because its weights only make sense with them (a
        vocabulary, a tag list, word classes, a base run's identity): ``{file name: bytes}`` of the
        data :meth:`load` returned and the model built on it. ``ebms train`` writes them into the run
        folder and records each one's sha256 in every checkpoint (``file.<name>``); resuming, ``eval``
        and ``sample`` check them and pass them to :meth:`load` as ``stored``
        (:mod:`ebms.train.run_files`). Default: none."""
        return {}

    @abc.abstractmethod
    def build_model(self, cfg: Config, data: Any) -> nn.Module:
        """The configured model (called with the global RNG seeded from ``run.seed``)."""

    @abc.abstractmethod
    def build_objective(self, cfg: Config, data: Any) -> Callable[..., Any]:
        """``objective(model, batch, generator=g) -> LossOutput`` for the trainer."""

    def build_optimizer(self, cfg: Config, data: Any) -> Callable[[list[dict[str, Any]]], torch.optim.Optimizer] | None:
        """An optimizer factory when the task needs its own (e.g. OWL-QN with an L1 weight); ``None``
        uses ``train.optimizer``."""
        return None

    @abc.abstractmethod
    def training_data(self, cfg: Config, data: Any) -> Any:
        """What the trainer draws batches from: tensors sharing dim 0, or ``(n, generator) -> batch``."""

    @abc.abstractmethod
    def report(self, cfg: Config, model: nn.Module, data: Any, step: int, *, use_ais: bool = False) -> Any:
        """The test figures of a trained model: an object with ``lines()`` and fields for ``eval.json``."""

    def sampler(self, cfg: Config, data: Any) -> Any:
        """The sampler ``ebms sample`` runs (``None`` for a conditional task)."""
        return None

    def sample(self, cfg: Config, model: nn.Module, data: Any, *, n: int | None = None, steps: int | None = None,
               seed: int | None = None) -> Tensor:
        """Fresh samples of the model, ``(n, *event)``."""
        raise ConfigError(f"sample: data.name={cfg.data.name!r} is a conditional task (p(y|x)); "
                          f"it has no unconditional samples: use `ebms eval` for its test figures")

    def sample_text(self, x: Tensor, data: Any) -> list[str]:
        """Samples ``x`` as lines of text (tasks with :attr:`sample_format` ``"txt"``)."""
        raise ConfigError(f"sample: {type(self).__name__} draws no samples written as text")

    def plot(self, x: Tensor, data: Any, title: str, ax: Any = None) -> Any:
        """A figure of samples ``x`` (the task's :meth:`sample`)."""
        raise ConfigError(f"sample: {type(self).__name__} draws no samples to plot")

    def write_plots(self, run_dir: Path, cfg: Config, model: nn.Module, data: Any) -> list[Path]:
        """The plots ``ebms train``/``demo`` write after training; returns their paths."""
        return []

    def applier(self, command: str, cfg: Config, model: nn.Module, data: Any) -> Any:
        """The object of :mod:`ebms.apply` that applies a trained run to new input for ``command`` (one of
        :attr:`applies`; ``ebms <command>`` and :class:`ebms.runs.Run`'s method of that name call it), built from
        the trained ``model`` and what the run stored (its vocabularies, feature maps, normalisers in ``data``)."""
        raise NotImplementedError(f"{type(self).__name__} lists {command!r} in applies but builds no applier")

    def callbacks(self, cfg: Config, data: Any) -> list[Any]:
        """The trainer's callbacks for this task (e.g. sample grids during training); none by default."""
        return []


@dataclass
class TaskData:
    """What a :class:`StructuredTask`'s :meth:`~StructuredTask.load` returns.

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


class StructuredTask(Task[S]):
    """A conditional task ``p(y | x)``: :meth:`load` returns :class:`TaskData`, and
    :meth:`evaluate` the test figures (``{"f1": ...}``) that :meth:`report` wraps."""

    what = "a structured task"
    conditional = True

    @abc.abstractmethod
    def load(self, cfg: Config) -> TaskData:
        """Training tensors and the test set; deterministic given ``cfg``."""

    @abc.abstractmethod
    def evaluate(self, cfg: Config, model: nn.Module, data: TaskData) -> dict[str, float]:
        """Test-set figures of a trained model (model in eval mode, no gradients needed)."""

    def training_data(self, cfg: Config, data: TaskData) -> Any:
        check_batch_size(cfg, data.size, f"training examples of {cfg.data.name}")
        return data.train

    def report(self, cfg: Config, model: nn.Module, data: TaskData, step: int, *, use_ais: bool = False) -> TaskReport:
        with torch.no_grad():
            return TaskReport(step=step, task=cfg.data.name, figures=self.evaluate(cfg, model, data))


#: the registry :func:`task_for` routes by: tasks by their ``(data.name, model.kind)`` pairs.
KIND_TASKS: dict[tuple[str, str], Task[Any]] = {}
#: tasks that list no model kinds (they take any ``model.kind``), by ``data.name``.
TASKS: dict[str, Task[Any]] = {}
#: the task a config with ``data.path`` set goes to (a file of the user's own points).
PATH_TASK: list[Task[Any]] = []
_loaded = False


def register(task: Task[Any], *, path: bool = False) -> Task[Any]:
    """Serve each ``(data.name, model.kind)`` pair of ``task`` (a name with any kind when it lists no kinds;
    with ``path``, configs that set ``data.path``).

    Raises:
        TypeError: ``task`` is not a :class:`Task`.
        ValueError: it names no ``data.name``, or a pair (or name) another task serves already.
    """
    if not isinstance(task, Task):
        raise TypeError(f"task: expected a Task instance; got {type(task).__name__}")
    if path:
        PATH_TASK[:] = [task]
        return task
    if not task.data_names:
        raise ValueError(f"task: {type(task).__name__} names no data.name values (data_names is empty)")
    table: dict[Any, Task[Any]] = KIND_TASKS if task.model_kinds else TASKS
    keys = [(n, k) for n in task.data_names for k in task.model_kinds] if task.model_kinds else list(task.data_names)
    for key in keys:
        other = table.get(key)
        if other is not None and type(other) is not type(task):
            served = "data.name {!r} with model.kind {!r}".format(*key) if task.model_kinds else f"data.name {key!r}"
            raise ValueError(f"task: {served} is already served by {type(other).__name__}")
    table.update(dict.fromkeys(keys, task))
    return task


def _load_builtin() -> None:
    global _loaded
    if not _loaded:
        _loaded = True
        for module in BUILTIN_TASK_MODULES:
            importlib.import_module(module)


def registered() -> list[Task[Any]]:
    """Every registered task once: the packaged ones in the order of :data:`BUILTIN_TASK_MODULES`
    (whatever order they were imported in; the point-file task first), then any other."""
    _load_builtin()
    out: list[Task[Any]] = list(PATH_TASK)
    for task in [*TASKS.values(), *KIND_TASKS.values()]:
        if all(task is not t for t in out):
            out.append(task)
    order = {m: i for i, m in enumerate(BUILTIN_TASK_MODULES)}
    return sorted(out, key=lambda t: order.get(type(t).__module__, len(order)))


def task_names() -> list[str]:
    """Every ``data.name`` some task serves."""
    _load_builtin()
    return sorted({*TASKS, *(name for name, _ in KIND_TASKS)})


def default_task(name: str) -> Task[Any] | None:
    """The task serving ``data.name = name`` with a ``model.kind`` of none of its tasks (unset, unknown):
    the first serving it in :func:`registered` order, whose first model kind is the name's default."""
    return next((t for t in registered() if name in t.data_names), None)


def task_for(cfg: Config) -> Task[Any] | None:
    """The task serving ``cfg``: the point-file task when ``data.path`` is set, else the one registered
    under ``(data.name, model.kind)``, else :func:`default_task` (``None`` for an unknown name)."""
    _load_builtin()
    if cfg.data.path is not None and PATH_TASK:
        return PATH_TASK[0]
    return KIND_TASKS.get((cfg.data.name, cfg.model.kind)) or default_task(cfg.data.name)


def section_readers(section: str, name: str | None = None) -> tuple[list[str], list[str]]:
    """The ``data.name`` values of the tasks reading ``section``, and their model kinds when another
    task is their names' :func:`default_task` or serves ``name`` (``[]`` otherwise)."""
    tasks = [t for t in registered() if section in t.sections()]
    names = sorted({n for t in tasks for n in t.data_names})
    kinds = list(dict.fromkeys(k for t in tasks for k in t.model_kinds))
    defaults = {default_task(n) for n in names}
    other = name in names and any(name in t.data_names and t not in tasks for t in registered())
    return names, (kinds if other or not any(t in defaults for t in tasks) else [])


def task_sections() -> dict[str, type]:
    """Every task's section name with its dataclass (:meth:`Task.sections`), in registration order."""
    return {name: s.settings_type for t in registered() for name, s in t.sections().items()}


def task_rules() -> dict[str, Rule]:
    """The rules of every task section's keys, as dotted keys."""
    return {f"{name}.{k}": r for t in registered() for name, s in t.sections().items() for k, r in s.rules.items()}


def moved_message(key: str, kind: str | None = None) -> str | None:
    """The one-line error for a key spelled as before it moved; ``None`` when ``key`` never existed. A key
    renamed by data set (issue 10: ``data.scale``) names its new key(s); one moved by model kind (issue 25:
    ``language.chains``) the home of ``kind`` (the run's ``model.kind``), else every home with its kinds."""
    renamed: dict[str, set[str]] = {}  # new key -> the data names of the tasks that read it
    homes: dict[str, list[str]] = {}  # new key -> the model kinds that read it there
    for t in registered():
        if key in t.moved:
            renamed.setdefault(f"{t.section}.{t.moved[key]}", set()).update(t.data_names)
        if (new := t.kind_moves().get(key)) is not None:
            homes.setdefault(new, []).extend(t.model_kinds)
    if renamed:
        return f"{key}: renamed; use " + (next(iter(renamed)) if len(renamed) == 1 else " or ".join(
            f"{new} (data.name = {', '.join(sorted(names))})" for new, names in renamed.items()))
    mine = next((new for new, kinds in homes.items() if kind in kinds), None)
    if mine is not None:
        return f"{key}: moved to {mine} (model.kind={kind!r}); [{key.split('.')[0]}] keeps only the keys every kind reads"
    if not homes:
        return None
    where = " or ".join(f"{new} (model.kind = {', '.join(kinds)})" for new, kinds in homes.items())
    return f"{key}: moved to {where}" + ("" if kind is None else f"; model.kind={kind!r} does not read it")


def stored_identity(identity: dict[str, Any], task: Task[Any] | None) -> dict[str, Any]:
    """Flat dotted settings (a checkpoint's identity, a run's config) written before keys moved by model kind
    (:meth:`Task.kind_moves`), in today's spelling: an old key is renamed to where ``task`` reads it, or dropped
    where it reads it nowhere (it was written at its default: training refused any other value)."""
    moves = {} if task is None else task.kind_moves()
    old = {key for t in registered() for key in t.kind_moves()}
    return {moves.get(k, k): v for k, v in identity.items() if k not in old or k in moves}


def stored_spelling(table: dict[str, Any]) -> dict[str, Any]:
    """A run folder's config table (its ``config.toml``) in today's spelling (:func:`stored_identity`). A
    config from the user is not migrated: an old spelling is an error naming the new one (:func:`moved_message`)."""
    sections = {name: t for name, t in table.items() if isinstance(t, dict)}
    registered()
    task = KIND_TASKS.get((str(sections.get("data", {}).get("name")), str(sections.get("model", {}).get("kind"))))
    out = {name: t for name, t in table.items() if not isinstance(t, dict)}
    for dotted, v in stored_identity({f"{n}.{k}": v for n, t in sections.items() for k, v in t.items()}, task).items():
        out.setdefault(dotted.split(".", 1)[0], {})[dotted.split(".", 1)[1]] = v
    return out


def check_batch_size(cfg: Config, n: int, what: str) -> None:
    """``train.batch_size`` must not exceed the ``n`` training examples (the trainer drops the
    last partial batch, so a larger batch would train on nothing)."""
    if cfg.train.batch_size > n:
        raise ConfigError(f"train.batch_size: expected at most the {n} {what}; got {cfg.train.batch_size}")
