"""From a :class:`~ebms.cli.config.Config` to objects: the name tables and the up-front check.

Every table maps a config name to a factory; an unknown name raises
:class:`~ebms.cli.config.ConfigError` listing the valid ones. Nothing else in the library looks
objects up by string. The tables here are the ones shared by the energy tasks (samplers,
objectives, the MLP, learning-rate schedules); a task's own names live with the task
(:mod:`ebms.cli.tasks`). :func:`validate_config` checks every value and name of a config, and
lets the task serving it check its combinations, before anything is built.
"""

from __future__ import annotations

import dataclasses
import difflib
from collections.abc import Callable
from typing import Any

import torch
from torch import nn

from ebms.cli.config import Config, ConfigError, ObjectiveConfig, SamplerConfig, check_values
from ebms.cli.tasks import KIND_TASKS, Task, registered, task_for
from ebms.data.binary_images import IMAGE_SETS
from ebms.errors import InputError
from ebms.nets import ACTIVATIONS, MLPEnergy
from ebms.objectives import (
    NCE,
    ContrastiveDivergence,
    DenoisingScoreMatching,
    GaussianNoise,
    PersistentContrastiveDivergence,
    ReplayBuffer,
    ScoreMatching,
    SlicedScoreMatching,
)
from ebms.samplers import HMC, MALA, SGLD, ULA, Sampler
from ebms.samplers.block_gibbs import BlockGibbs
from ebms.samplers.gibbs import Gibbs
from ebms.samplers.gwg import GibbsWithGradients
from ebms.samplers.metropolis import MetropolisHastings
from ebms.samplers.schedules import CosineAnnealing, LinearAnnealing
from ebms.spaces import DiscreteSpace, Space

__all__ = [
    "DISCRETE_SAMPLERS",
    "LR_SCHEDULES",
    "OBJECTIVES",
    "SAMPLERS",
    "build",
    "build_lr_schedule",
    "build_mlp",
    "build_sampler",
    "check_device",
    "config_error",
    "resolve",
    "validate_config",
]


def config_error(section: str, err: Exception, fields: object) -> ConfigError:
    """A layer's error as a config error: ``section.field: ...`` when the layer named one of
    the section's keys (layers name their own arguments, e.g. ``noise: ...``), else ``section: ...``."""
    msg = str(err)
    if msg.startswith(f"{section}."):
        return ConfigError(msg)
    first = msg.split(":", 1)[0].split(" ", 1)[0]
    known = {f.name for f in dataclasses.fields(fields)}  # type: ignore[arg-type]
    return ConfigError(f"{section}.{msg}" if first in known else f"{section}: {msg}")


def build(section: str, fields: object, factory: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """``factory(*args, **kwargs)``; a layer's argument errors become one-line config errors naming
    the section's key, and an :class:`~ebms.errors.InputError` (a bad file, ...) passes unchanged."""
    try:
        return factory(*args, **kwargs)
    except (ValueError, TypeError, FileNotFoundError) as e:
        if isinstance(e, InputError):
            raise
        raise config_error(section, e, fields) from None


def resolve(table: dict[str, Any], name: str, key: str, *, context: str = "", note: str = "") -> Any:
    """``table[name]``, or a one-line error listing the valid names.

    Args:
        table: the valid names (keys) and what they resolve to.
        name: the configured value.
        key: the dotted config key, for the message.
        context: where the list applies, e.g. ``"for data.name='fsdd-digits'"``.
        note: a last clause, e.g. which other data sets take ``name``.

    Raises:
        ConfigError: ``key: unknown value 'x' <context>; expected one of a, b; did you mean 'a'?``.
    """
    if name not in table:
        close = difflib.get_close_matches(name, list(table), n=1)
        hint = f"; did you mean {close[0]!r}?" if close else ""
        where = f" {context}" if context else ""
        tail = f"; {note}" if note else ""
        raise ConfigError(f"{key}: unknown value {name!r}{where}; expected one of {', '.join(sorted(table))}{hint}{tail}")
    return table[name]


def build_mlp(cfg: Config, shape: tuple[int, ...]) -> nn.Module:
    """``model.kind = "mlp"``: :class:`~ebms.nets.MLPEnergy` with ``model.hidden`` and ``model.activation``."""
    return build("model", cfg.model, MLPEnergy, shape, tuple(cfg.model.hidden), activation=cfg.model.activation)


SAMPLERS: dict[str, Callable[[SamplerConfig, Space | None], Sampler]] = {
    "ula": lambda c, s: ULA(c.step_size, space=s),
    "sgld": lambda c, s: SGLD(c.step_size, c.noise_scale, space=s),
    "mala": lambda c, s: MALA(c.step_size, space=s),
    "hmc": lambda c, s: HMC(c.step_size, c.n_leapfrog, space=s),
}

#: kernels for binary data (the others move continuously).
DISCRETE_SAMPLERS: dict[str, Callable[[SamplerConfig, Space | None], Sampler]] = {
    "block_gibbs": lambda c, s: BlockGibbs(sweeps=c.sweeps, space=s),  # type: ignore[arg-type]
    "gibbs": lambda c, s: Gibbs(c.scan, sweeps=c.sweeps, space=s),  # type: ignore[arg-type]
    "gwg": lambda c, s: GibbsWithGradients(space=s, temperature=c.temperature),  # type: ignore[arg-type]
    "mh": lambda c, s: MetropolisHastings(c.n_flips, space=s),  # type: ignore[arg-type]
}
SAMPLERS.update(DISCRETE_SAMPLERS)


def _pcd(c: ObjectiveConfig, sampler: Sampler, space: Space, fit: Callable[[], torch.Tensor]) -> nn.Module:
    buffer = ReplayBuffer(c.buffer_size, space, reinit_prob=c.reinit_prob)
    return PersistentContrastiveDivergence(sampler, buffer, k=c.k, regularization=c.regularization)


#: the energy tasks' objectives: ``factory(objective section, sampler, chain space, fit points)``,
#: where ``fit()`` returns points to fit auxiliary models on (NCE's noise).
OBJECTIVES: dict[str, Callable[[ObjectiveConfig, Sampler, Space, Callable[[], torch.Tensor]], nn.Module]] = {
    "pcd": _pcd,
    "cd": lambda c, s, space, fit: ContrastiveDivergence(s, k=c.k, regularization=c.regularization),
    "sm": lambda c, s, space, fit: ScoreMatching(),
    "dsm": lambda c, s, space, fit: DenoisingScoreMatching(c.sigmas if c.sigmas else c.sigma),
    "ssm": lambda c, s, space, fit: SlicedScoreMatching(c.n_projections),
    "nce": lambda c, s, space, fit: NCE(GaussianNoise.fit(fit(), scale=c.noise_scale), nu=c.nu),
}

LR_SCHEDULES: dict[str, Callable[[Config], Callable[[int], float] | None]] = {
    "constant": lambda c: None,  # the trainer keeps the rate as it is
    "cosine": lambda c: CosineAnnealing(c.train.steps, final=c.train.lr_final),
    "linear": lambda c: LinearAnnealing(c.train.steps, final=c.train.lr_final),
}


def build_lr_schedule(cfg: Config) -> Callable[[int], float] | None:
    """The learning-rate multiplier ``step -> factor`` (``None`` for a constant rate)."""
    factory = resolve(LR_SCHEDULES, cfg.train.lr_schedule, "train.lr_schedule")
    return build("train", cfg.train, factory, cfg)


def build_sampler(cfg: Config, space: Space | None = None) -> Sampler:
    """The configured kernel; a discrete ``space`` needs a discrete kernel and a continuous one the others."""
    kind = cfg.sampler.kind
    factory = resolve(SAMPLERS, kind, "sampler.kind")
    discrete_data, discrete_kernel = isinstance(space, DiscreteSpace), kind in DISCRETE_SAMPLERS
    if discrete_kernel and space is None:
        raise ConfigError(f"sampler.kind: {kind!r} moves on binary data (data.name = one of {', '.join(IMAGE_SETS)}); "
                          f"this run's data is continuous")
    if space is not None and discrete_data != discrete_kernel:
        valid = sorted(DISCRETE_SAMPLERS) if discrete_data else sorted(set(SAMPLERS) - set(DISCRETE_SAMPLERS))
        what = "binary data" if discrete_data else "continuous data"
        raise ConfigError(f"sampler.kind: {kind!r} does not move on {what}; expected one of {', '.join(valid)}")
    return build("sampler", cfg.sampler, factory, cfg.sampler, space)


def check_device(device: str) -> None:
    """``run.device`` names a torch device that exists on this machine.

    Raises:
        ConfigError: not a device name, or a CUDA/MPS device this torch build or machine lacks.
    """
    try:
        dev = torch.device(device)
    except (RuntimeError, ValueError):
        raise ConfigError(f"run.device: expected 'cpu' or a torch device such as 'cuda' or 'cuda:0'; got {device!r}") from None
    if dev.type == "cuda":
        count = torch.cuda.device_count() if torch.cuda.is_available() else 0
        if count == 0:
            raise ConfigError(f"run.device: expected 'cpu' or an available device; got {device!r}, but CUDA is not "
                              f"available here (torch.cuda.is_available() is False)")
        if dev.index is not None and dev.index >= count:
            raise ConfigError(f"run.device: expected cuda:0 .. cuda:{count - 1} (this machine has {count} CUDA "
                              f"device(s)); got {device!r}")
    elif dev.type == "mps":
        if not torch.backends.mps.is_available():
            raise ConfigError(f"run.device: expected 'cpu' or an available device; got {device!r}, but MPS is not "
                              f"available here")
    elif dev.type != "cpu":
        raise ConfigError(f"run.device: expected 'cpu', 'cuda', 'cuda:N' or 'mps'; got {device!r}")


def _unknown_data_name(name: str) -> ConfigError:
    groups: dict[str, list[str]] = {}
    for t in registered():
        groups.setdefault(t.what, []).extend(t.data_names)
    every = [n for names in groups.values() for n in names]
    close = difflib.get_close_matches(name, every, n=1)
    hint = f"; did you mean {close[0]!r}?" if close else ""
    kinds = ", ".join(f"{what} ({', '.join(sorted(set(names)))})" for what, names in groups.items() if names)
    return ConfigError(f"data.name: unknown value {name!r}; expected {kinds}, or data.path=FILE for your own "
                       f"points{hint}")


def _served_by(task: Task[Any], kind: str, kinds: Callable[[Task[Any]], tuple[str, ...]]) -> str:
    """Which other tasks take ``kind`` (a model or objective name): the hint of an unknown kind
    (none for ``ml``, which names a principle every task trains by, not a model family)."""
    if kind == "ml":
        return ""
    others = [t for t in registered() if t is not task and t.data_names and kind in kinds(t)]
    if not others:
        return ""
    names = sorted({n for t in others for n in t.data_names})
    what = " / ".join(sorted({t.what for t in others}))
    return f"{kind!r} belongs to {what} (data.name = {', '.join(names)}): set data.name to one of them"


def _check_other_sections(cfg: Config, task: Task[Any]) -> None:
    """A key of another task's section set away from its default would be ignored: refuse it."""
    for t in registered():
        if not t.section or t.section == task.section or t.settings_type is None:
            continue
        mine, default = dataclasses.asdict(cfg.section(t.section)), dataclasses.asdict(t.settings_type())
        for key in mine:
            if mine[key] != default[key]:
                kinds = f" with model.kind = {', '.join(t.model_kinds)}" if t.routes_by_kind else ""
                raise ConfigError(f"{t.section}.{key}: the [{t.section}] section is read by data.name = "
                                  f"{', '.join(sorted(t.data_names))}{kinds}; this run has {task.describe(cfg)}")


def validate_config(cfg: Config, *, device: bool = True) -> Config:
    """Check every value of ``cfg`` before anything is built: the ranges of
    :data:`~ebms.cli.config.RULES`, every name against the table it is looked up in, and the
    combinations the task serving ``cfg`` refuses.

    ``model.kind`` and ``objective.kind`` are checked against the task's own lists; a name that
    belongs to a structured task says which ``data.name`` takes it.

    Args:
        cfg: the loaded configuration.
        device: also check that ``run.device`` exists on this machine (training needs it;
            evaluating a run trained elsewhere does not).

    Raises:
        ConfigError: one line naming the key, the expectation and the value.
    """
    check_values(cfg)
    if device:
        check_device(cfg.run.device)
    task = task_for(cfg)
    if task is None:
        raise _unknown_data_name(cfg.data.name)
    for t in registered():
        t.check_names(cfg)
    where = f"for {task.describe(cfg)}"
    if task.model_kinds:  # a task that lists none takes any; the name's kind-routed tasks' kinds count too
        routed = [k for (n, k), t in KIND_TASKS.items() if n == cfg.data.name and t is not task]
        resolve(dict.fromkeys([*task.model_kinds, *routed]), cfg.model.kind, "model.kind", context=where,
                note=_served_by(task, cfg.model.kind, lambda t: t.model_kinds))
    if task.objective_kinds:
        resolve(dict.fromkeys(task.objective_kinds), cfg.objective.kind, "objective.kind", context=where,
                note=_served_by(task, cfg.objective.kind, lambda t: t.objective_kinds))
    task.check(cfg)
    _check_other_sections(cfg, task)
    resolve(SAMPLERS, cfg.sampler.kind, "sampler.kind")
    resolve(LR_SCHEDULES, cfg.train.lr_schedule, "train.lr_schedule")
    resolve({k.lower(): v for k, v in ACTIVATIONS.items()}, cfg.model.activation.lower(), "model.activation")
    return cfg
