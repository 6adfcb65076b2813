"""From a :class:`~ebms.cli.config.Config` to objects: the name tables and the up-front check.

Every table maps a config name to a factory; an unknown name raises
:class:`~ebms.cli.config.ConfigError` listing the valid ones. Nothing else in the library looks
objects up by string. The tables here are the ones shared by the energy tasks (samplers,
objectives, the MLP, learning-rate schedules); a task's own names live with the task
(:mod:`ebms.cli.tasks`). :func:`validate_config` checks every value and name of a config, and
lets the task serving it check its combinations, before anything is built.

Memory is a setting too. Where the size of what is about to be built follows from the config
(an MLP's weights from ``model.hidden``, a replay buffer from ``objective.buffer_size``, an
evaluation grid from ``eval.resolution``), :func:`check_memory` compares an estimate with the
memory this process can still have (:func:`available_memory`) and refuses it in one line
naming the key. Whatever the estimates miss is caught where it happens: :func:`building` turns
an allocation failure (:func:`is_allocation_failure`) into the same kind of line, saying what
was being built and which keys size it::

    model.hidden: building the MLP energy (2 -> 100000 -> 100000 -> 1: 10,000,500,001 weights) takes about
    37.3 GiB of memory (its weights alone) and 18.9 GiB is available; lower model.hidden
"""

from __future__ import annotations

import dataclasses
import difflib
import math
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import torch
from torch import nn

from ebms._memory import available_memory, is_allocation_failure, tried_to_allocate
from ebms._memory import format_bytes as gib
from ebms.cli._unread_keys import refuse_unread
from ebms.cli.config import Config, ConfigError, ObjectiveConfig, SamplerConfig, check_values
from ebms.cli.tasks import KIND_TASKS, Task, registered, section_readers, task_for, task_sections
from ebms.data.binary_images import IMAGE_SETS
from ebms.errors import InputError
from ebms.nets import ACTIVATIONS, MLPEnergy
from ebms.objectives import (
    NCE,
    ContrastiveDivergence,
    DenoisingScoreMatching,
    EnergyMatching,
    GaussianNoise,
    InclusiveNRF,
    LatentGaussianGenerator,
    PersistentContrastiveDivergence,
    ReplayBuffer,
    SAGain,
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
    "SCHEDULE_KEYS",
    "available_memory",
    "build",
    "build_lr_schedule",
    "build_mlp",
    "build_sampler",
    "building",
    "check_device",
    "check_memory",
    "check_replay_buffer",
    "config_error",
    "gib",
    "is_allocation_failure",
    "mlp_weights",
    "resolve",
    "size_keys",
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


# -------------------------------------------------------------------------------- memory
#: bytes of one float32 number: every model the command line builds is float32.
FLOAT_BYTES = 4

def check_memory(parts: Sequence[tuple[str, str, float]], doing: str, *, device: str = "cpu", hint: str = "") -> None:
    """Refuse, before anything is allocated, what needs more memory than :func:`available_memory`.

    Args:
        parts: ``(key, what, bytes)`` for each part of the estimate, e.g.
            ``("objective.buffer_size", "the replay buffer", 3.2e9)``; the key of the largest part
            leads the message.
        doing: what takes them, e.g. ``"training"`` or ``"drawing 5000 samples"``.
        device: where they are allocated (``run.device``).
        hint: what to do instead (default: lower the leading key).

    Raises:
        ConfigError: ``key: <doing> takes about X of memory (<parts>) and Y is available; <hint>``.
    """
    total = float(sum(b for _, _, b in parts))
    free = available_memory(device)
    if free is None or not math.isfinite(total) or total <= free:
        return
    key, top, _ = max(parts, key=lambda p: p[2])
    shown = [f"{what} {gib(b)}" + ("" if k == key else f" ({k})") for k, what, b in parts if b >= total / 100]
    detail = f" ({'; '.join(shown)})" if len(shown) > 1 else (f" ({top})" if top else "")
    where = "" if torch.device(device).type == "cpu" else f" on {device}"
    raise ConfigError(f"{key}: {doing} takes about {gib(total)} of memory{detail} and {gib(free)} is "
                      f"available{where}; {hint or f'lower {key}'}")


@contextmanager
def building(doing: str, *keys: str, device: str = "cpu") -> Iterator[None]:
    """Turn an allocation failure inside the block into one line naming what it did and its ``keys``.

    Args:
        doing: what the block does, e.g. ``"building the evaluation grid"`` or ``"training"``.
        keys: the settings that size it, e.g. ``"eval.resolution"``.
        device: where it allocates (for the memory still available).

    Raises:
        ConfigError: ``key: out of memory while <doing> (tried to allocate X; Y available); lower ...``
            for an error :func:`is_allocation_failure` recognises; every other error passes unchanged.
    """
    try:
        yield
    except Exception as e:
        if isinstance(e, InputError) or not is_allocation_failure(e):
            raise
        free = available_memory(device)
        detail = ", ".join(t for t in (tried_to_allocate(e), "" if free is None else f"{gib(free)} available") if t)
        lead = ", ".join(keys) if keys else "memory"
        raise ConfigError(f"{lead}: out of memory while {doing}{f': {detail}' if detail else ''}; "
                          f"lower {' or '.join(keys) if keys else 'the sizes of the run'}") from None


#: key names (of any section) that size what a task allocates: widths, vocabularies, batches, chains.
SIZE_NAMES = ("hidden", "embedding_dim", "embed", "char_dim", "dim", "channels", "rbm_hidden", "noise_hidden",
              "classes", "max_vocab", "max_length", "buffer_size", "negatives", "chains")
#: ... and what an evaluation allocates.
EVAL_SIZE_NAMES = ("n_test", "n_samples", "resolution", "ais_chains", "ood_size", "joint_samples", "logz_samples")


def size_keys(cfg: Config, stage: str = "train") -> tuple[str, ...]:
    """The keys that size what ``stage`` (``"train"`` or ``"eval"``) allocates for ``cfg``'s task.

    A task may declare them (a method ``sizes(cfg) -> {"train": (...), "eval": (...)}``); otherwise
    they are ``train.batch_size`` (training) or ``data.n_test`` (evaluation) and the keys of the
    task's sections named like sizes (:data:`SIZE_NAMES`, :data:`EVAL_SIZE_NAMES`).
    """
    task = task_for(cfg)
    declared = task.sizes(cfg) if callable(getattr(task, "sizes", None)) else None  # type: ignore[union-attr]
    if isinstance(declared, dict) and stage in declared:
        return tuple(declared[stage])
    names = SIZE_NAMES if stage == "train" else EVAL_SIZE_NAMES
    own = [] if task is None else [f"{name}.{f.name}" for name, s in task.sections().items()
                                   for f in dataclasses.fields(s.settings_type) if f.name in names]
    return ("train.batch_size" if stage == "train" else "data.n_test", *own)


def mlp_weights(in_features: int, hidden: Sequence[int]) -> int:
    """Number of weights and biases of an MLP ``in_features -> hidden... -> 1``."""
    widths = [in_features, *hidden, 1]
    return sum((a + 1) * b for a, b in zip(widths[:-1], widths[1:]))


def build_mlp(cfg: Config, shape: tuple[int, ...]) -> nn.Module:
    """``model.kind = "mlp"``: :class:`~ebms.nets.MLPEnergy` with ``model.hidden`` and ``model.activation``;
    weights that cannot fit in memory are refused first (one line naming ``model.hidden``)."""
    d = math.prod(shape)
    n = mlp_weights(d, cfg.model.hidden)
    layout = " -> ".join(map(str, [d, *cfg.model.hidden, 1]))
    what = f"the MLP energy ({layout}: {n:,} weights)"
    check_memory([("model.hidden", "its weights alone", n * FLOAT_BYTES)], f"building {what}", device=cfg.run.device)
    with building(f"building {what}", "model.hidden", device=cfg.run.device):
        return build("model", cfg.model, MLPEnergy, shape, tuple(cfg.model.hidden), activation=cfg.model.activation)


SAMPLERS: dict[str, Callable[[SamplerConfig, Space | None], Sampler]] = {
    "ula": lambda c, s: ULA(c.step_size, space=s),
    "sgld": lambda c, s: SGLD(c.step_size, c.noise_scale, space=s, grad_clamp=c.grad_clamp),
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


def _energy_matching(c: ObjectiveConfig, sampler: Sampler, space: Space, fit: Callable[[], torch.Tensor]) -> nn.Module:
    """Energy Matching; its CD chains take ``objective.k`` Langevin steps of ``sampler.step_size`` (the paper's dt)."""
    step = getattr(sampler, "step_size", None)
    if isinstance(space, DiscreteSpace) or step is None:
        raise ConfigError("objective.kind: 'energy-matching' moves points continuously (a gradient of the energy); "
                          "this run's data is binary; use pcd, cd or nce")
    return EnergyMatching(epsilon_max=c.epsilon_max, tau_star=c.tau_star, cd_weight=c.cd_weight,
                          warmup_steps=c.warmup_steps, steps=c.k, dt=float(step),
                          flow_weighting=c.flow_weighting)


def _inclusive_nrf(c: ObjectiveConfig, sampler: Sampler, space: Space, fit: Callable[[], torch.Tensor]) -> nn.Module:
    """Inclusive-NRF: ``objective.k`` exact Langevin steps in (x, h) of the sampler's gradient step δ."""
    exact_sgld = isinstance(sampler, SGLD) and sampler.noise_scale is None and sampler.grad_clamp is None
    if isinstance(space, DiscreteSpace) or not (isinstance(sampler, ULA) or exact_sgld):
        raise ConfigError("objective.kind: 'inclusive-nrf' revises samples by exact Langevin steps in (x, h) of "
                          "continuous data; set sampler.kind = 'ula' or 'sgld' without noise_scale or grad_clamp")
    step = float(sampler.step_size) / (2.0 if isinstance(sampler, ULA) else 1.0)  # δ of x + δ∇ + sqrt(2δ)ξ
    q = LatentGaussianGenerator.mlp(tuple(space.event_shape), latent_dim=c.latent_dim, hidden=c.generator_hidden,
                                    sigma=c.generator_sigma)
    return InclusiveNRF(q, steps=c.k, step_size=step, revision=c.revision, friction=c.friction,
                        regularization=c.regularization)


#: the energy tasks' objectives: ``factory(objective section, sampler, chain space, fit points)``,
#: where ``fit()`` returns points to fit auxiliary models on (NCE's noise).
OBJECTIVES: dict[str, Callable[[ObjectiveConfig, Sampler, Space, Callable[[], torch.Tensor]], nn.Module]] = {
    "pcd": _pcd,
    "cd": lambda c, s, space, fit: ContrastiveDivergence(s, k=c.k, regularization=c.regularization),
    "sm": lambda c, s, space, fit: ScoreMatching(),
    "dsm": lambda c, s, space, fit: DenoisingScoreMatching(c.sigmas if c.sigmas else c.sigma),
    "ssm": lambda c, s, space, fit: SlicedScoreMatching(c.n_projections),
    "nce": lambda c, s, space, fit: NCE(GaussianNoise.fit(fit(), scale=c.noise_scale), nu=c.nu),
    "energy-matching": _energy_matching,
    "inclusive-nrf": _inclusive_nrf,
}

LR_SCHEDULES: dict[str, Callable[[Config], Callable[[int], float] | None]] = {
    "constant": lambda c: None,  # the trainer keeps the rate as it is
    "cosine": lambda c: CosineAnnealing(c.train.steps, final=c.train.lr_final),
    "linear": lambda c: LinearAnnealing(c.train.steps, final=c.train.lr_final),
    # the two-stage SA gain of the TRF trainers: 1/(tc + t^beta) for t <= t0, then 1/(tc + t0^beta + t - t0)
    "sa": lambda c: SAGain(c.train.sa_tc, c.train.sa_beta, c.train.sa_t0),
}
#: ``[train]`` keys that only a schedule reads (a value set away from its default with another one is refused).
SCHEDULE_KEYS: dict[str, tuple[str, ...]] = {"sa": ("sa_tc", "sa_beta", "sa_t0")}


def build_lr_schedule(cfg: Config) -> Callable[[int], float] | None:
    """The learning-rate multiplier ``step -> factor`` (``None`` for a constant rate); the trainer sets
    each group's rate to ``lr * factor(step)`` before step ``step = 0, 1, ...`` (``sa``: ``SAGain(step)``
    is :math:`\\gamma_{step + 1}`, so ``lr = 1`` takes the source's steps)."""
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


def _served_by(task: Task[Any], kind: str, kinds: Callable[[Task[Any]], tuple[str, ...]],
               data_name: str | None = None) -> str:
    """Which other tasks take ``kind`` (a model or objective name): the hint of an unknown kind
    (none for ``ml``, which names a principle every task trains by, not a model family). With
    ``data_name`` (an objective's hint), other model kinds on the same data come first."""
    if kind == "ml":
        return ""
    others = [t for t in registered() if t is not task and t.data_names and kind in kinds(t)]
    if not others:
        return ""
    models = sorted({k for t in others if data_name in t.data_names for k in t.model_kinds})
    if models:
        return f"{kind!r} trains model.kind = {', '.join(models)}: set model.kind to one of them"
    names = sorted({n for t in others for n in t.data_names})
    what = " / ".join(sorted({t.what for t in others}))
    return f"{kind!r} belongs to {what} (data.name = {', '.join(names)}): set data.name to one of them"


def _check_other_sections(cfg: Config, task: Task[Any]) -> None:
    """A key of another task's section set away from its default would be ignored: refuse it."""
    for section, settings_type in task_sections().items():
        if section in task.sections():
            continue
        mine, default = dataclasses.asdict(cfg.section(section)), dataclasses.asdict(settings_type())
        for key in mine:
            if mine[key] != default[key]:
                names, kinds = section_readers(section, cfg.data.name)
                only = f" with model.kind = {', '.join(kinds)}" if kinds else ""
                raise ConfigError(f"{section}.{key}: the [{section}] section is read by data.name = "
                                  f"{', '.join(names)}{only}; this run has {task.describe(cfg)}")


def check_replay_buffer(cfg: Config, *, classes: int | None = None) -> None:
    """PCD draws each batch's chains from its replay buffer (``objective.buffer_size`` slots) without
    replacement: a batch larger than the buffer, or than one class's share of a class-conditional
    buffer (``classes``: the slots are split equally), cannot be drawn.

    Raises:
        ConfigError: ``train.batch_size: expected at most objective.buffer_size=...; got ...``.
    """
    o, t = cfg.objective, cfg.train
    slots = o.buffer_size // (classes or 1)
    if t.batch_size > slots:
        share = f"objective.buffer_size // {classes} classes = {slots}" if classes else f"objective.buffer_size={slots}"
        raise ConfigError(f"train.batch_size: expected at most {share} (PCD draws each batch's chains from its replay "
                          f"buffer, without replacement); got {t.batch_size}: lower train.batch_size or raise "
                          f"objective.buffer_size")


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
    if task.model_kinds:  # a task that lists none takes any; every kind served with the name counts
        kinds = [*task.model_kinds, *(k for n, k in KIND_TASKS if n == cfg.data.name)]
        resolve(dict.fromkeys(kinds), cfg.model.kind, "model.kind", context=where,
                note=_served_by(task, cfg.model.kind, lambda t: t.model_kinds))
    if task.objective_kinds:
        resolve(dict.fromkeys(task.objective_kinds), cfg.objective.kind, "objective.kind", context=where,
                note=_served_by(task, cfg.objective.kind, lambda t: t.objective_kinds, cfg.data.name))
    task.check(cfg)
    _check_other_sections(cfg, task)
    resolve(SAMPLERS, cfg.sampler.kind, "sampler.kind")
    resolve(LR_SCHEDULES, cfg.train.lr_schedule, "train.lr_schedule")
    _refuse_unread_schedule_keys(cfg)
    resolve({k.lower(): v for k, v in ACTIVATIONS.items()}, cfg.model.activation.lower(), "model.activation")
    return cfg


def _refuse_unread_schedule_keys(cfg: Config) -> None:
    """A schedule's own keys (:data:`SCHEDULE_KEYS`) set with another ``train.lr_schedule`` would be ignored."""
    schedule = cfg.train.lr_schedule
    unread = {k for name, keys in SCHEDULE_KEYS.items() if name != schedule for k in keys}
    read = {f.name for f in dataclasses.fields(cfg.train)} - unread
    refuse_unread("train", cfg.train, read, f"train.lr_schedule={schedule!r}",
                  lambda key: [f"train.lr_schedule = {name!r}" for name, keys in SCHEDULE_KEYS.items() if key in keys])
