"""The jobs behind the command line: train a configured model, evaluate it, draw samples.

Each job works in a run folder ``<run.out_dir>/<run.name>/`` holding the
config actually used (``config.toml``), ``metrics.jsonl``, ``checkpoints/``,
plots and ``eval.json``.

Every checkpoint records the settings it was trained under
(:func:`run_identity`: the whole configuration except where things are
written, how long to train and how to evaluate). A resume compares all of them;
``eval`` and ``sample`` compare the ``model.*``, ``data.*`` and
``objective.*`` ones (:func:`model_identity`), so a checkpoint copied from
another run is refused with one line naming the differing keys.
"""

from __future__ import annotations

import json
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import torch
from torch import nn

from ebms.cli.build import (
    Dataset,
    build_data,
    build_lr_schedule,
    build_model,
    build_objective,
    build_sampler,
    check_sampler_fits_model,
    data_box,
)
from ebms.cli.config import Config, ConfigError, config_to_dict, load_config, to_toml
from ebms.cli.discrete_data import BinaryImages
from ebms.cli.tasks import StructuredTask, TaskData, TaskReport, check_batch_size, task_for
from ebms.data import PointCloud, ToyDataset
from ebms.errors import CheckpointError, RunFolderError
from ebms.estimators.grid import EDGE_TOL, grid_log_likelihood, true_log_likelihood
from ebms.train import CheckpointStore, Trainer
from ebms.train._log import jsonable
from ebms.train.checkpoint import Checkpoint, identity_differences

__all__ = [
    "EvalReport", "evaluate_run", "load_run", "model_identity", "open_run", "run_dir_of", "run_identity",
    "sample_run", "train",
]

#: seed offset for the held-out test set, so it never overlaps the training stream.
TEST_SEED_OFFSET = 1_000_003


def run_dir_of(cfg: Config) -> Path:
    return Path(cfg.run.out_dir) / cfg.run.name


OPTIMIZERS = ("adam", "sgd", "lbfgs")


def _optimizer_factory(cfg: Config):
    """``train.optimizer``: Adam, SGD, or L-BFGS (:class:`~ebms.train.owlqn.OWLQN` without an L1
    term: one trainer step is one quasi-Newton iteration with its line search, on the batch)."""
    t = cfg.train
    if t.optimizer not in OPTIMIZERS:
        from ebms.cli.build import resolve

        resolve(dict.fromkeys(OPTIMIZERS), t.optimizer, "train.optimizer")

    def make(params):
        if t.optimizer == "sgd":
            return torch.optim.SGD(params, lr=t.lr, momentum=t.momentum, weight_decay=t.weight_decay)
        if t.optimizer == "lbfgs":
            from ebms.train.owlqn import OWLQN

            return OWLQN(params)
        return torch.optim.Adam(params, lr=t.lr, weight_decay=t.weight_decay)

    return make


RUN_OUTPUTS = ("metrics.jsonl", "eval.json", "samples.png", "energy.png", "samples.safetensors")


def clear_run(run_dir: Path) -> None:
    """Remove a previous run's checkpoints, log, report and plots (keeps anything else)."""
    CheckpointStore(run_dir / "checkpoints").clear()
    for name in RUN_OUTPUTS:
        (run_dir / name).unlink(missing_ok=True)


def run_state(run_dir: Path) -> str:
    """``"empty"``, ``"checkpoints"`` (any checkpoint file) or ``"log"`` (a metrics log, no checkpoint)."""
    if CheckpointStore(run_dir / "checkpoints").has_any():
        return "checkpoints"
    log = run_dir / "metrics.jsonl"
    return "log" if log.is_file() and log.stat().st_size > 0 else "empty"


#: keys that may change when a run is resumed; every other difference would silently
#: mix two configurations in one run (the optimizer, buffers and generator come from the checkpoint).
RESUMABLE_CHANGES = (
    "train.steps", "train.log_every", "train.checkpoint_every", "run.progress", "run.out_dir", "run.name",
    "data.n_test", "eval.",
)


#: settings that say where files are, not what is trained: never part of a checkpoint's identity.
LOCATION_KEYS = ("data.path", "data.root", "data.download")


def _flat(cfg: Config) -> dict[str, Any]:
    return {f"{sec}.{key}": value for sec, table in config_to_dict(cfg).items() for key, value in table.items()}


def run_identity(cfg: Config) -> dict[str, Any]:
    """The settings a checkpoint of ``cfg`` records and a resume must match: every key but
    :data:`RESUMABLE_CHANGES` and :data:`LOCATION_KEYS` (non-finite numbers as strings)."""
    skip = (*RESUMABLE_CHANGES, *LOCATION_KEYS)
    return jsonable({k: v for k, v in _flat(cfg).items() if not k.startswith(skip)})


def model_identity(cfg: Config) -> dict[str, Any]:
    """The part of :func:`run_identity` that ``eval`` and ``sample`` check: ``model.*``, ``data.*``, ``objective.*``."""
    return {k: v for k, v in run_identity(cfg).items() if k.startswith(("model.", "data.", "objective."))}


def _changed_keys(old: Config, new: Config) -> list[str]:
    a, b = config_to_dict(old), config_to_dict(new)
    return [
        f"{sec}.{key}"
        for sec in b
        for key in b[sec]
        if a.get(sec, {}).get(key) != b[sec][key] and not f"{sec}.{key}".startswith(RESUMABLE_CHANGES)
    ]


def build_seeded_model(cfg: Config, data: Dataset) -> nn.Module:
    """The configured model for ``data``'s dimension, initial weights drawn from ``run.seed``.

    The global RNG is left as it was.
    """
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(cfg.run.seed)
        return build_model(cfg, (data.dim,))


def train(cfg: Config, *, resume: bool | str = False, overwrite: bool = False) -> Path:
    """Train the configured model; returns the run folder.

    A folder that already holds a run (checkpoints, or a metrics log) is
    continued with ``resume`` (from its newest valid checkpoint), deleted and
    started again with ``overwrite``, and otherwise refused
    (:class:`~ebms.errors.RunFolderError`); nothing is deleted without
    ``overwrite``.
    """
    run_dir = run_dir_of(cfg)
    if resume is not False and overwrite:
        raise ConfigError("--resume continues a run and --overwrite deletes it; pass one of them")
    state = run_state(run_dir)
    if state == "checkpoints" and resume is False and not overwrite:
        raise RunFolderError(
            f"run folder {str(run_dir)!r} already has checkpoints; use --resume to continue it, "
            f"--overwrite to start again, or another run.name"
        )
    if state == "log" and not overwrite:
        raise RunFolderError(
            f"run folder {str(run_dir)!r} already has a metrics log but no checkpoint to continue from "
            f"(the run stopped before its first checkpoint); use --overwrite to start again, or another run.name"
        )
    if state == "checkpoints" and not overwrite and (run_dir / "config.toml").is_file():
        changed = _changed_keys(load_config(run_dir / "config.toml"), cfg)
        if changed:
            raise ConfigError(
                f"--resume: the run in {str(run_dir)!r} was trained with other values of {', '.join(changed)}; "
                f"only {', '.join(k.rstrip('.') + ('*' if k.endswith('.') else '') for k in RESUMABLE_CHANGES)} "
                f"may change on resume (start a new run.name to change the rest)"
            )
    task = task_for(cfg)
    if task is not None:
        return _train_task(cfg, task, run_dir, clear=state != "empty" and overwrite,
                           resume=resume if state == "checkpoints" else False)
    data = build_data(cfg)
    model = build_seeded_model(cfg, data)
    init_bias = getattr(model, "init_visible_bias_from_data", None)
    if isinstance(data, BinaryImages) and init_bias is not None:  # a fresh run's start; a resume loads weights
        init_bias(data.train)  # log-odds of the pixel marginals (Hinton's practical guide)
    sampler = build_sampler(cfg, data.space if isinstance(data, BinaryImages) else None)
    check_sampler_fits_model(cfg, model)
    objective = build_objective(cfg, sampler, data)
    if isinstance(data, (PointCloud, BinaryImages)):
        if cfg.train.batch_size > data.train.shape[0]:
            raise ConfigError(
                f"train.batch_size: expected at most the {data.train.shape[0]} training points of "
                f"{cfg.data.path or cfg.data.name}; got {cfg.train.batch_size}"
            )
        source: torch.Tensor | Callable[[int, torch.Generator], torch.Tensor] = data.train
    else:
        toy = data

        def source(n: int, g: torch.Generator) -> torch.Tensor:
            return toy.sample(n, generator=g)

    _fit(cfg, run_dir, objective, model, source, _optimizer_factory(cfg),
         clear=state != "empty" and overwrite, resume=resume if state == "checkpoints" else False)
    return run_dir


def _fit(cfg: Config, run_dir: Path, objective: Any, model: nn.Module, source: Any, make_optimizer: Any, *,
         clear: bool, resume: bool | str) -> None:
    """Build the trainer (a batch size or learning rate the optimizer cannot use is a config error),
    load the checkpoint to resume from (checked against this configuration), then, only once all of
    that has succeeded, clear an overwritten run, write ``config.toml`` and train."""
    config_toml = to_toml(cfg)
    try:
        trainer = Trainer(
            objective,
            model,
            source,
            optimizer=make_optimizer,
            steps=cfg.train.steps,
            batch_size=cfg.train.batch_size,
            run_dir=run_dir,
            seed=cfg.run.seed,
            log_every=cfg.train.log_every,
            checkpoint_every=cfg.train.checkpoint_every,
            grad_clip=cfg.train.grad_clip,
            lr_schedule=build_lr_schedule(cfg),
            progress=cfg.run.progress,
            device=cfg.run.device,
            config={"config": jsonable(config_to_dict(cfg))},
            identity=run_identity(cfg),
        )
    except ValueError as e:
        if str(e).startswith("batch_size:"):
            raise ConfigError(f"train.{e}") from None
        if str(e).startswith("optimizer: parameter group"):
            raise ConfigError(f"train.lr: {e}") from None
        raise
    if resume is not False:
        trainer.restore(None if resume is True or resume == "auto" else resume)
    if clear:
        clear_run(run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / "config.toml").write_text(config_toml)
    trainer.fit(overwrite=clear)


def _seeded_task_model(cfg: Config, task: StructuredTask, data: TaskData) -> nn.Module:
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(cfg.run.seed)
        return task.build_model(cfg, data)


def _train_task(cfg: Config, task: StructuredTask, run_dir: Path, *, clear: bool, resume: bool | str) -> Path:
    """:func:`train` for a structured task: the task's data, model and objective, the shared trainer."""
    data = task.load(cfg)
    check_batch_size(cfg, data)
    model = _seeded_task_model(cfg, task, data)
    objective = task.build_objective(cfg, data)
    make_optimizer = task.build_optimizer(cfg, data) or _optimizer_factory(cfg)
    _fit(cfg, run_dir, objective, model, data.train, make_optimizer, clear=clear, resume=resume)
    return run_dir


def open_run(run_dir: str | Path, overrides: list[str] | tuple[str, ...] = ()
             ) -> tuple[Config, nn.Module, Dataset, Checkpoint]:
    """Config, trained model (newest valid checkpoint, in eval mode), dataset and checkpoint of a run folder.

    Raises:
        RunFolderError: no ``config.toml`` or no checkpoint in the folder.
        CheckpointError: every checkpoint is damaged, or the newest valid one was
            trained under other ``model.*``/``data.*``/``objective.*`` settings
            than the folder's ``config.toml`` with ``overrides``.
    """
    run_dir = Path(run_dir)
    cfg_path = run_dir / "config.toml"
    if not cfg_path.is_file():
        raise RunFolderError(f"run folder {str(run_dir)!r}: no config.toml (is it a run folder made by `ebms train`?)")
    cfg = load_config(cfg_path, overrides)
    store = CheckpointStore(run_dir / "checkpoints")
    if not store.has_any():
        raise RunFolderError(f"run folder {str(run_dir)!r}: no checkpoint yet (train first)")
    ckpt = store.load()
    _check_model_identity(ckpt, cfg, overrides)
    task = task_for(cfg)
    if task is not None:
        data: Any = task.load(cfg)
        model = _seeded_task_model(cfg, task, data)
    else:
        data = build_data(cfg)
        model = build_seeded_model(cfg, data)
        check_sampler_fits_model(cfg, model)
    state = {k[len("model/"):]: v for k, v in ckpt.tensors.items() if k.startswith("model/")}
    try:
        model.load_state_dict(state)
    except RuntimeError as e:
        raise CheckpointError(
            f"{ckpt.path}: the checkpoint's weights do not fit the model that model.* describes "
            f"({str(e).splitlines()[1].strip() if len(str(e).splitlines()) > 1 else e})"
        ) from None
    model.eval()
    return cfg, model, data, ckpt


def _check_model_identity(ckpt: Checkpoint, cfg: Config, overrides: list[str] | tuple[str, ...]) -> None:
    """Refuse a checkpoint trained under other model/data/objective settings, naming the keys."""
    expected = model_identity(cfg)
    if not ckpt.identity:
        raise CheckpointError(
            f"{ckpt.path}: the checkpoint records no settings it was trained under (written by an older ebms?); "
            "it cannot be matched to this run's config.toml"
        )
    diff = identity_differences(ckpt.identity, expected)
    if not diff:
        return
    changed = [k for k in sorted(set(ckpt.identity) & set(expected)) if ckpt.identity[k] != expected[k]]
    given = {o.split("=", 1)[0].strip() for o in overrides}
    if all(k in given for k in changed) and all(k.startswith("model.") for k in changed):
        raise CheckpointError(
            f"{ckpt.path}: the checkpoint's weights do not fit the model that model.* describes: it was trained "
            f"with {', '.join(diff)}; drop those overrides"
        )
    raise CheckpointError(
        f"{ckpt.path}: checkpoint of another run: trained with {', '.join(diff)}; "
        "use the run folder it belongs to, or train this one again (--overwrite)"
    )


def load_run(run_dir: str | Path, overrides: list[str] | tuple[str, ...] = ()) -> tuple[Config, nn.Module, Dataset, int]:
    """Config, trained model (newest valid checkpoint), dataset and step of a run folder (see :func:`open_run`)."""
    cfg, model, data, ckpt = open_run(run_dir, overrides)
    return cfg, model, data, ckpt.step


@dataclass(frozen=True)
class EvalReport:
    """Grid test NLL of the model beside the true density's NLL (nats per point).

    In more than two dimensions no exact ``log Z`` is available here: the report
    then holds the mean test and train energies (an overfitting check, not a
    likelihood) and ``model_nll`` is ``None``.
    """

    step: int
    model_nll: float | None
    model_nll_stderr: float | None
    log_z_error: float | None
    true_nll: float | None
    n_test: int
    dim: int = 2
    test_energy: float | None = None
    train_energy: float | None = None
    edge_mass: float | None = None  # model mass in the grid's outermost cells (0: nothing cut off)

    def lines(self) -> list[str]:
        if self.model_nll is None:
            return [
                f"mean energy, step {self.step}: test {self.test_energy:.4f}, train {self.train_energy:.4f} "
                f"[n_test={self.n_test}]",
                f"no exact test NLL for D={self.dim}: the grid evaluator needs 2-D data",
            ]
        out = [f"test NLL (grid-normalised), step {self.step}: {self.model_nll:.4f} ± {self.model_nll_stderr:.4f} nats"
               f"  [n={self.n_test}, grid log Z error {self.log_z_error:.1e}]"]
        if self.edge_mass is not None and self.edge_mass > EDGE_TOL:
            out.append(f"warning: {self.edge_mass:.1e} of the model's mass sits in the grid's outermost cells; "
                       "log Z misses what lies beyond, so this NLL is optimistic")
        if self.true_nll is not None:
            out.append(f"true density NLL on the same points:       {self.true_nll:.4f} nats"
                       f"  (gap {self.model_nll - self.true_nll:+.4f})")
        return out


def test_points(cfg: Config, data: Dataset) -> torch.Tensor:
    """The held-out points: the file's test split, or ``data.n_test`` fresh toy draws."""
    if isinstance(data, (PointCloud, BinaryImages)):
        return data.test
    return data.sample(cfg.data.n_test, generator=torch.Generator().manual_seed(cfg.run.seed + TEST_SEED_OFFSET))


def evaluate_run(cfg: Config, model: nn.Module, data: Dataset, step: int, *, use_ais: bool = False) -> Any:
    """:class:`EvalReport` for continuous data; for binary images a
    :class:`~ebms.cli.discrete_eval.DiscreteEvalReport` (exact log Z, or AIS with ``use_ais``)."""
    if isinstance(data, TaskData):
        task = task_for(cfg)
        assert task is not None
        with torch.no_grad():
            return TaskReport(step=step, task=cfg.data.name, figures=task.evaluate(cfg, model, data))
    if isinstance(data, BinaryImages):
        from ebms.cli.discrete_eval import evaluate_discrete

        return evaluate_discrete(cfg, model, data, step, use_ais=use_ais)
    x = test_points(cfg, data)
    if data.dim != 2:
        assert isinstance(data, PointCloud)
        with torch.no_grad():
            e_test, e_train = float(model(x).mean()), float(model(data.train).mean())
        return EvalReport(
            step=step, model_nll=None, model_nll_stderr=None, log_z_error=None, true_nll=None,
            n_test=x.shape[0], dim=data.dim, test_energy=e_test, train_energy=e_train,
        )
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # the edge mass goes into the report instead
        ll = grid_log_likelihood(model, x, data.bounds, resolution=cfg.eval.resolution)
        true = true_log_likelihood(data, x) if isinstance(data, ToyDataset) and data.has_density else None
    return EvalReport(
        step=step,
        model_nll=-ll.estimate,
        model_nll_stderr=ll.stderr,
        log_z_error=float(ll.settings.get("log_z_error", 0.0)),
        edge_mass=float(ll.settings.get("grid", {}).get("edge_mass", 0.0)),
        true_nll=None if true is None else -true.estimate,
        n_test=x.shape[0],
    )


def sample_run(cfg: Config, model: nn.Module, data: Dataset, *, n: int | None = None, steps: int | None = None,
               seed: int | None = None) -> torch.Tensor:
    """Fresh chains from a uniform start over the data box, run with the configured sampler.

    SGLD is run with its exact Langevin noise (``noise_scale = sqrt(2 step_size)``),
    so the chains target ``exp(-E)`` rather than the colder law used for training
    negatives. Objectives that need no sampler (score matching, NCE) use the
    configured ``[sampler]`` table, ULA by default.
    """
    if isinstance(data, TaskData):
        raise ConfigError(f"sample: data.name={cfg.data.name!r} is a conditional task (p(y|x)); "
                          f"it has no unconditional samples: use `ebms eval` for its test figures")
    if isinstance(data, BinaryImages):
        from ebms.cli.discrete_eval import sample_discrete

        return sample_discrete(cfg, model, data, n=n, steps=steps, seed=seed)
    n = cfg.eval.n_samples if n is None else n
    steps = cfg.eval.sample_steps if steps is None else steps
    g = torch.Generator().manual_seed(cfg.run.seed + 7 if seed is None else seed)
    box = data_box(data)
    exact = replace(cfg, sampler=replace(cfg.sampler, noise_scale=None))
    return build_sampler(exact, box).sample(model, box.random(n, generator=g), steps, generator=g)


def plot_points(x: torch.Tensor, data: Dataset, title: str, ax: Any = None) -> Any:
    """Points of ``data``'s space: a scatter in 2-D (the first two coordinates above),
    a histogram in 1-D. Returns the figure."""
    from ebms.viz import plot_samples
    from ebms.viz.figure import axes_or_new

    if isinstance(data, BinaryImages):
        from ebms.viz import image_grid

        k = min(x.shape[0], 100)
        imgs = x[:k].reshape(k, 1, *data.image_shape)
        return image_grid(imgs, ax=ax, title=title, nrow=10)
    if data.dim == 1:
        fig, ax = axes_or_new(ax, (5.0, 4.0))
        ax.hist(x[:, 0].detach().cpu().numpy(), bins=60, range=data.bounds[0], density=True)
        ax.set_title(title)
        return fig
    suffix = " (first 2 coordinates)" if data.dim > 2 else ""
    return plot_samples(x[:, :2], ax=ax, bounds=data.bounds[:2], title=title + suffix)


def write_plots(run_dir: Path, cfg: Config, model: nn.Module, data: Dataset, samples: torch.Tensor) -> list[Path]:
    """``samples.png`` (test data beside model samples) and, for 2-D data, ``energy.png``
    (energy and normalised density images)."""
    from ebms.viz import new_figure, plot_energy, save_figure

    ref = test_points(cfg, data)[: samples.shape[0]]
    fig = new_figure(figsize=(9, 4.5))
    ax_d, ax_m = fig.subplots(1, 2)
    plot_points(ref, data, f"test data ({data.name})", ax=ax_d)
    plot_points(samples, data, f"model samples ({cfg.sampler.kind})", ax=ax_m)
    out = [run_dir / "samples.png"]
    save_figure(fig, out[0])
    if data.dim != 2 or isinstance(data, BinaryImages):
        return out
    out.append(run_dir / "energy.png")
    fig = new_figure(figsize=(9, 4.5))
    ax_e, ax_p = fig.subplots(1, 2)
    plot_energy(model, data.bounds, ax=ax_e, kind="energy", title="energy E(x)")
    plot_energy(model, data.bounds, ax=ax_p, kind="density", title="density exp(-E)/Z")
    save_figure(fig, out[1])
    return out


def write_eval(run_dir: Path, report: Any, extra: dict[str, Any] | None = None) -> Path:
    path = run_dir / "eval.json"
    payload = {**report.__dict__, **(extra or {}), "time": time.time()}
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(payload, indent=2))
    tmp.replace(path)
    return path
