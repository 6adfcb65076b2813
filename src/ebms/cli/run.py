"""Run folders: train the configured task into one, open a trained one again.

Each job works in a run folder ``<run.out_dir>/<run.name>/`` holding the
config actually used (``config.toml``), ``metrics.jsonl``, ``checkpoints/``,
plots and ``eval.json``. What is trained and how it is judged comes from the task
serving the config (:mod:`ebms.cli.tasks`).

Every key of every section has a role (:data:`KEY_ROLES`): what it changes decides where it is
checked. A checkpoint records what changes the trained weights and nothing else
(:func:`run_identity`: the ``model`` and ``training`` keys), so a resume compares those;
``eval`` and ``sample`` compare the ``model`` keys (:func:`model_identity`), so a checkpoint
copied from another run is refused with one line naming the differing keys. Where a run is
written, how long it trains and how it is evaluated (``vision.ood``, ``eval.*``, ...) are not
part of it: they may change on resume, and ``eval`` may set them.

A task may keep files beside the checkpoints that its weights only make sense with (a
vocabulary, a tag list, a base run's identity: :meth:`~ebms.cli.tasks.Task.run_files`). They are
written when training starts, their sha256 go into every checkpoint's identity
(``file.<name>``), and resuming, ``eval`` and ``sample`` check them and hand them back to the
task's ``load`` instead of letting it fit them again (:mod:`ebms.train.run_files`).
"""

from __future__ import annotations

import dataclasses
import importlib.util
import json
import shutil
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from torch import nn

from ebms.cli.build import build_lr_schedule, resolve, validate_config
from ebms.cli.config import Config, ConfigError, config_to_dict, load_config, to_toml
from ebms.cli.tasks import Task, stored_identity, task_for
from ebms.errors import CheckpointError, RunFolderError
from ebms.train import CheckpointStore, CSVLog, ReleaseMemory, TensorBoardLog, Trainer
from ebms.train.checkpoint import Checkpoint, identity_differences
from ebms.train.folder_lock import RunFolderLock, run_state
from ebms.train.run_files import file_identity, read_run_files, write_run_files

__all__ = ["KEY_ROLES", "ROLES", "key_role", "load_run", "model_identity", "open_run", "run_dir_of", "run_identity",
           "serving_task", "train", "write_eval"]


def run_dir_of(cfg: Config) -> Path:
    return Path(cfg.run.out_dir) / cfg.run.name


OPTIMIZERS = ("adam", "sgd", "lbfgs")


def _optimizer_factory(cfg: Config):
    """``train.optimizer``: Adam, SGD, or L-BFGS (:class:`~ebms.train.owlqn.OWLQN` without an L1
    term: one trainer step is one quasi-Newton iteration with its line search, on the batch)."""
    t = cfg.train
    if t.optimizer not in OPTIMIZERS:
        resolve(dict.fromkeys(OPTIMIZERS), t.optimizer, "train.optimizer")

    def make(params):
        if t.optimizer == "sgd":
            return torch.optim.SGD(params, lr=t.lr, momentum=t.momentum, weight_decay=t.weight_decay)
        if t.optimizer == "lbfgs":
            from ebms.train.owlqn import OWLQN

            return OWLQN(params)
        return torch.optim.Adam(params, lr=t.lr, weight_decay=t.weight_decay)

    return make


RUN_OUTPUTS = ("metrics.jsonl", "metrics.csv", "eval.json", "samples.png", "energy.png", "samples.safetensors")


def clear_run(run_dir: Path) -> None:
    """Remove a previous run's checkpoints, log, report and plots (keeps anything else)."""
    CheckpointStore(run_dir / "checkpoints").clear()
    for name in RUN_OUTPUTS:
        (run_dir / name).unlink(missing_ok=True)
    shutil.rmtree(run_dir / "tensorboard", ignore_errors=True)


def log_writers(names: list[str]) -> list[Any]:
    """The trainer's callbacks for ``run.log_to`` (after every other callback: a step's row is complete)."""
    if "tensorboard" in names and importlib.util.find_spec("tensorboard") is None:
        raise ConfigError("run.log_to: 'tensorboard' needs the tensorboard package; pip install 'ebms[tensorboard]', "
                          "or leave 'tensorboard' out")
    return [CSVLog() if name == "csv" else TensorBoardLog() for name in dict.fromkeys(names)]


def _rows(role: str, table: dict[str, str]) -> dict[str, str]:
    return {f"{section}.{key}": role for section, keys in table.items() for key in keys.split()}


#: the role of every key of every section: what the key changes decides where it is checked.
#:
#: * ``model``: the trained weights or the data they were trained on and are tested on (part of a
#:   checkpoint's identity; a resume, ``eval`` and ``sample`` must all match it);
#: * ``training``: how the weights were trained (optimizer, sampler, device; in the identity: a
#:   resume must match it, while ``eval`` and ``sample`` may set it, e.g. another sampler);
#: * ``run``: where a run is written, how long it trains and what it shows on the way (progress,
#:   logs, checkpoints, snapshots): not in the identity; may change on resume;
#: * ``eval``: how a trained model is evaluated or sampled: not in the identity; may change on
#:   resume, and ``eval``/``sample`` may set it;
#: * ``location``: where input files are and how they are read: not in the identity (a run
#:   folder and its data may move), but fixed on resume (the files' content is not recorded, so
#:   another path could mean other training data).
#:
#: Every key of :func:`~ebms.cli.config.config_keys` has a row (a test keeps it so): a new key is
#: classified where it is added. A key of a task registered outside the package counts as ``model``.
KEY_ROLES: dict[str, str] = {
    **_rows("model", {
        "run": "seed",  # the initial weights and the seeded data splits (a test split, labels kept)
        "data": "name key test_fraction",
        "model": "kind hidden activation",
        "objective": "kind k regularization buffer_size reinit_prob sigma sigmas n_projections nu noise_scale "
                     "epsilon_max tau_star cd_weight warmup_steps flow_weighting latent_dim generator_hidden "
                     "generator_sigma revision friction",
        "toy": "scale noise",
        "images": "binarize binarize_seed limit rbm_hidden",
        "tagging": "features limit embedding_dim char_dim hidden layers dropout c1 c2 beam potentials",
        "speech": "n_train max_digits test_speakers channels hidden layers dropout ctc_weight lm_order",
        "language": "level lower sentence_split limit min_count max_vocab max_length subword_units subword_model",
        "ngram": "order smoothing discounts",
        "lm": "embedding_dim hidden layers heads dropout tie_weights earm_weight earm_start earm_truncate earm_clip",
        "trf": "order features feature_cutoffs feature_boundaries trf_init classes chains trials noise_order "
               "noise_hidden feature_scaling step_clip embedding_dim hidden layers dropout",
        "residual": "base_run prefix_length horizon energy negatives embedding_dim layers heads dropout",
        "electric": "mask_rate uniform_mix positions noise_steps embedding_dim layers heads dropout",
        "generation": "digits n_train error_rate dim hidden layers heads dropout base_run energy negatives "
                      "earm_weight earm_start earm_truncate earm_clip",
        "vision": "limit val_fraction labels_per_class channels groups spectral_norm data_noise generative_weight "
                  "warmup_steps conditional informative_init kl_weight entropy_weight augment reservoir recovery_b "
                  "recovery_protocol normalize",
        "jrf": "label_fraction limit min_count embed hidden alpha noise_hidden noise_steps zeta_lr",
        "textclass": "train_size dev_size test_size min_count encoder embedding_dim hidden dropout energy nce_weight "
                     "mask_ratio noise_dim noise_steps",
    }),
    **_rows("training", {
        "run": "device",
        "sampler": "kind step_size noise_scale grad_clamp n_leapfrog sweeps scan temperature n_flips",
        "train": "batch_size lr lr_schedule lr_final sa_tc sa_beta sa_t0 optimizer momentum weight_decay grad_clip ema "
                 "precision compile shard",
        "trf": "zeta_tc zeta_beta zeta_t0 chain_groups scan",
        "tagging": "mc_samples mc_proposal",
    }),
    **_rows("run", {"run": "name out_dir progress log_to", "train": "steps log_every checkpoint_every", "trf": "workers",
                    "vision": "snapshot_every"}),
    **_rows("eval", {
        "data": "n_test",
        "eval": "resolution n_samples sample_steps ais_chains ais_temperatures reverse_ais ema",
        "trf": "logz_samples",
        "residual": "joint_samples",
        "generation": "joint_samples top_k mm_alpha mm_epochs cold_lambda cold_steps cold_step_size cold_top_k",
        "vision": "ood ood_size ece_bins",
        "textclass": "ece_bins",
    }),
    **_rows("location", {"data": "path root max_mb", "images": "download",
                         "language": "train_path valid_path test_path tokenizer", "huggingface": "path",
                         "textclass": "csv"}),
}

#: the roles of :data:`KEY_ROLES`.
ROLES = ("model", "training", "run", "eval", "location")
#: roles whose keys may change when a run is resumed (every other difference would silently mix
#: two configurations in one run: the optimizer, buffers and generator come from the checkpoint).
RESUMABLE_ROLES = ("run", "eval")


def key_role(key: str) -> str:
    """The role of the dotted ``key`` (:data:`KEY_ROLES`; ``"model"`` for a key it does not list)."""
    return KEY_ROLES.get(key, "model")


def _flat(cfg: Config) -> dict[str, Any]:
    return {f"{sec}.{key}": value for sec, table in config_to_dict(cfg).items() for key, value in table.items()}


def run_identity(cfg: Config) -> dict[str, Any]:
    """The settings a checkpoint of ``cfg`` records and a resume must match: the keys whose role
    (:data:`KEY_ROLES`) is ``model`` or ``training``, i.e. what changes the trained weights and
    nothing else (plain JSON: every number of a loaded config is finite,
    :func:`~ebms.cli.config.check_values`)."""
    return {k: v for k, v in _flat(cfg).items() if key_role(k) in ("model", "training")}


def model_identity(cfg: Config) -> dict[str, Any]:
    """The part of :func:`run_identity` that ``eval`` and ``sample`` check: the ``model`` keys."""
    return {k: v for k, v in _flat(cfg).items() if key_role(k) == "model"}


def _changed_keys(old: Config, new: Config) -> list[str]:
    a, b = config_to_dict(old), config_to_dict(new)
    return [
        f"{sec}.{key}"
        for sec in b
        for key in b[sec]
        if a.get(sec, {}).get(key) != b[sec][key] and key_role(f"{sec}.{key}") not in RESUMABLE_ROLES
    ]


def _resumable(cfg: Config) -> str:
    """The keys of ``cfg`` a resume may change, a section whose keys all may as ``section.*``."""
    out = []
    for sec, table in config_to_dict(cfg).items():
        keys = [f"{sec}.{k}" for k in table if key_role(f"{sec}.{k}") in RESUMABLE_ROLES]
        out += [f"{sec}.*"] if keys and len(keys) == len(table) else keys
    return ", ".join(out)


def serving_task(cfg: Config) -> Task[Any]:
    """The task that serves ``cfg`` (:func:`~ebms.cli.tasks.task_for`); an unknown ``data.name``
    is the one-line error of :func:`~ebms.cli.build.validate_config`."""
    task = task_for(cfg)
    if task is None:
        validate_config(cfg, device=False)
        raise ConfigError(f"data.name: unknown value {cfg.data.name!r}")
    return task


def _load(task: Task[Any], cfg: Config, stored: dict[str, bytes]) -> Any:
    """``task.load(cfg)``, or with the files a trained run kept (:meth:`Task.run_files`) when it kept some."""
    if not stored:
        return task.load(cfg)
    load: Callable[..., Any] = task.load  # tasks that keep files take them as the keyword ``stored``
    return load(cfg, stored=stored)


def build_seeded_model(cfg: Config, task: Task[Any], data: Any) -> nn.Module:
    """The task's model for ``data``, initial weights drawn from ``run.seed``; the global RNG is
    left as it was."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(cfg.run.seed)
        return task.build_model(cfg, data)


def train(cfg: Config, *, resume: bool | str = False, overwrite: bool = False, lock: RunFolderLock | None = None) -> Path:
    """Train the configured model; returns the run folder.

    A folder that already holds a run (checkpoints, or a metrics log) is
    continued with ``resume`` (from its newest valid checkpoint), deleted and
    started again with ``overwrite``, and otherwise refused
    (:class:`~ebms.errors.RunFolderError`); nothing is deleted without
    ``overwrite``. A folder another process is training into is refused too (:class:`RunFolderLock`): pass
    ``lock`` to keep holding it after this returns (``ebms train`` does, while it reports), else it is released.
    """
    run_dir = run_dir_of(cfg)
    if resume is not False and overwrite:
        raise ConfigError("--resume continues a run and --overwrite deletes it; pass one of them")
    if lock is None:
        with RunFolderLock(run_dir) as own:
            return train(cfg, resume=resume, overwrite=overwrite, lock=own)
    if run_dir.is_dir():
        lock.take()  # before reading the folder's state: a second writer is refused before it loads anything
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
        changed = _changed_keys(load_config(run_dir / "config.toml", stored=True), cfg)
        if changed:
            raise ConfigError(
                f"--resume: the run in {str(run_dir)!r} was trained with other values of {', '.join(changed)}; "
                f"only {_resumable(cfg)} may change on resume (start a new run.name to change the rest)"
            )
    task = serving_task(cfg)
    task.check_inputs(cfg)
    writers = log_writers(cfg.run.log_to)
    stored: dict[str, bytes] = {}
    if state == "checkpoints" and not overwrite:  # a resume: the run's own files, checked against its checkpoint
        ckpt = CheckpointStore(run_dir / "checkpoints").load(None if resume is True or resume == "auto" else resume)
        current = _current_spelling(ckpt, task)
        if current is not ckpt:  # recorded before keys moved: the trainer matches keys by name, so check here
            CheckpointStore.check_identity(current, run_identity(cfg))
        stored = read_run_files(run_dir, ckpt.identity)
        del ckpt, current  # the trainer loads it again to resume; its tensors must not stay in memory all run
    data = _load(task, cfg, stored)
    model = build_seeded_model(cfg, task, data)
    files = task.run_files(cfg, data)
    if task.fitted(cfg):
        _save_fitted(cfg, run_dir, task, model, data, files, clear=state != "empty" and overwrite, lock=lock)
        return run_dir
    objective = task.build_objective(cfg, data)
    source = task.training_data(cfg, data)
    make_optimizer = task.build_optimizer(cfg, data) or _optimizer_factory(cfg)
    _fit(cfg, run_dir, objective, model, source, make_optimizer, [*task.callbacks(cfg, data), ReleaseMemory(), *writers], files,
         clear=state != "empty" and overwrite, resume=resume if state == "checkpoints" else False, lock=lock)
    return run_dir


def _fit(cfg: Config, run_dir: Path, objective: Any, model: nn.Module, source: Any, make_optimizer: Any,
         callbacks: list[Any], files: dict[str, bytes], *, clear: bool, resume: bool | str, lock: RunFolderLock) -> None:
    """Build the trainer (a batch size or learning rate the optimizer cannot use is a config error),
    load the checkpoint to resume from (checked against this configuration and the task's run
    ``files``), then, only once all of that has succeeded, clear an overwritten run, write
    ``config.toml`` and the run files, and train."""
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
            ema=cfg.train.ema,
            precision=cfg.train.precision,
            compile=cfg.train.compile,
            shard=cfg.train.shard,
            lr_schedule=build_lr_schedule(cfg),
            callbacks=callbacks,
            progress=cfg.run.progress,
            device=cfg.run.device,
            config={"config": config_to_dict(cfg)},
            identity={**run_identity(cfg), **file_identity(files)},
        )
    except ValueError as e:
        if str(e).startswith(("batch_size:", "compile:", "shard:")):
            raise ConfigError(f"train.{e}") from None
        if str(e).startswith("optimizer: parameter group"):
            raise ConfigError(f"train.lr: {e}") from None
        raise
    if resume is not False:
        trainer.restore(None if resume is True or resume == "auto" else resume)
    if trainer.is_main:  # under torchrun the folder is shared: global rank 0 writes, the others wait
        lock.take_fresh()
        if clear:
            clear_run(run_dir)
        run_dir.mkdir(parents=True, exist_ok=True)
        (run_dir / "config.toml").write_text(config_toml)
        write_run_files(run_dir, files)
    trainer.dist.barrier()
    trainer.fit(overwrite=clear)


def _save_fitted(cfg: Config, run_dir: Path, task: Task[Any], model: nn.Module, data: Any, files: dict[str, bytes],
                 *, clear: bool, lock: RunFolderLock) -> None:
    """A model estimated when it was built (n-gram counts): no optimizer steps; ``config.toml``, the
    run files, the task's model files and one checkpoint of step 0 (what ``eval`` and ``sample`` load)."""
    config_toml = to_toml(cfg)
    lock.take_fresh()
    if clear:
        clear_run(run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / "config.toml").write_text(config_toml)
    write_run_files(run_dir, files)
    identity = {"trainer.model_class": type(model).__qualname__, **run_identity(cfg), **file_identity(files)}
    tensors = {f"model/{k}": v for k, v in model.state_dict().items()}
    CheckpointStore(run_dir / "checkpoints").save(0, tensors, {"config": config_to_dict(cfg)}, identity=identity)
    task.write_model_files(run_dir, cfg, model, data)  # exports (ARPA) after the checkpoint: a failed export keeps the run


def open_run(run_dir: str | Path, overrides: list[str] | tuple[str, ...] = (), *, training_data: bool = True
             ) -> tuple[Config, nn.Module, Any, Checkpoint]:
    """Config, trained model (newest valid checkpoint, in eval mode; its weight average with ``train.ema`` unless
    ``eval.ema = false``), data set and checkpoint of a run folder. Without ``training_data`` the data is what the
    task's :meth:`~Task.load_applied` builds from the run's stored files (enough to apply the run, not to evaluate
    it), when the task offers that.

    Raises:
        RunFolderError: no ``config.toml`` or no checkpoint in the folder.
        CheckpointError: every checkpoint is damaged, or the newest valid one was
            trained under other ``model`` settings (:data:`KEY_ROLES`: the model, its data and
            objective, the task section's keys that change the weights, ``run.seed``) than the
            folder's ``config.toml`` with ``overrides``; a run file it records is missing or
            altered, or it records none where the task keeps some.
    """
    run_dir = Path(run_dir)
    cfg_path = run_dir / "config.toml"
    if not cfg_path.is_file():
        raise RunFolderError(f"run folder {str(run_dir)!r}: no config.toml (is it a run folder made by `ebms train`?)")
    cfg = validate_config(load_config(cfg_path, overrides, stored=True), device=False)
    store = CheckpointStore(run_dir / "checkpoints")
    if not store.has_checkpoint():
        raise RunFolderError(f"run folder {str(run_dir)!r}: no checkpoint yet (train first)")
    ckpt = store.load()
    _check_model_identity(ckpt, cfg, overrides)
    task = serving_task(cfg)
    stored = read_run_files(run_dir, ckpt.identity)
    data = None if training_data else task.load_applied(cfg, stored)
    light = data is not None
    if data is None:
        data = _load(task, cfg, stored)
    model = build_seeded_model(cfg, task, data)
    needed = {} if stored or light else task.run_files(cfg, data)
    if needed:
        raise CheckpointError(
            f"{ckpt.path}: the checkpoint records none of the files this run needs besides its weights "
            f"({', '.join(sorted(needed))}; written by an older ebms?), so they would be fitted again on the "
            "data as it is now; train the run again (--overwrite)"
        )
    state = ckpt.weights(average=cfg.train.ema is not None and cfg.eval.ema)
    try:
        model.load_state_dict(state)
    except RuntimeError as e:
        raise CheckpointError(
            f"{ckpt.path}: the checkpoint's weights do not fit the model that model.* describes "
            f"({str(e).splitlines()[1].strip() if len(str(e).splitlines()) > 1 else e})"
        ) from None
    model.eval()
    return cfg, model, data, ckpt


def _current_spelling(ckpt: Checkpoint, task: Task[Any] | None) -> Checkpoint:
    """``ckpt`` with its identity in today's spelling (:func:`~ebms.cli.tasks.stored_identity`)."""
    identity = stored_identity(ckpt.identity, task)
    return ckpt if identity == ckpt.identity else dataclasses.replace(ckpt, meta={**ckpt.meta, "identity": identity})


def _check_model_identity(ckpt: Checkpoint, cfg: Config, overrides: list[str] | tuple[str, ...]) -> None:
    """Refuse a checkpoint trained under other model/data/objective settings, naming the keys."""
    ckpt = _current_spelling(ckpt, task_for(cfg))
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


def load_run(run_dir: str | Path, overrides: list[str] | tuple[str, ...] = ()) -> tuple[Config, nn.Module, Any, int]:
    """Config, trained model (newest valid checkpoint), dataset and step of a run folder (see :func:`open_run`)."""
    cfg, model, data, ckpt = open_run(run_dir, overrides)
    return cfg, model, data, ckpt.step


def write_eval(run_dir: Path, report: Any, extra: dict[str, Any] | None = None) -> Path:
    path = run_dir / "eval.json"
    payload = {**report.__dict__, **(extra or {}), "time": time.time()}
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(payload, indent=2))
    tmp.replace(path)
    return path
