"""From a :class:`~ebms.cli.config.Config` to objects: the one place where names resolve.

Every table maps a config name to a factory; an unknown name raises
:class:`~ebms.cli.config.ConfigError` listing the valid ones. Nothing else in
the library looks objects up by string. :func:`validate_config` checks every
name of a config against these tables (and the structured tasks') before
anything is built, with the ranges of :data:`ebms.cli.config.RULES`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import torch
from torch import nn

from ebms.cli.config import Config, ConfigError, ModelConfig, ObjectiveConfig, SamplerConfig, check_values
from ebms.cli.discrete_data import IMAGE_SETS, BinaryImages, load_binary_images
from ebms.data import TOY_NAMES, PointCloud, ToyDataset, get_toy, load_points
from ebms.errors import InputError
from ebms.models import BernoulliRBM
from ebms.nets import MLPEnergy
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
from ebms.spaces import Box, DiscreteSpace, Space

__all__ = [
    "DISCRETE_SAMPLERS",
    "LR_SCHEDULES",
    "MODELS",
    "OBJECTIVES",
    "SAMPLERS",
    "Dataset",
    "build_data",
    "build_lr_schedule",
    "build_model",
    "build_objective",
    "build_sampler",
    "chain_space",
    "check_device",
    "check_sampler_fits_model",
    "config_error",
    "data_box",
    "data_names",
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


def _build(section: str, fields: object, factory: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
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
        import difflib

        close = difflib.get_close_matches(name, list(table), n=1)
        hint = f"; did you mean {close[0]!r}?" if close else ""
        where = f" {context}" if context else ""
        tail = f"; {note}" if note else ""
        raise ConfigError(f"{key}: unknown value {name!r}{where}; expected one of {', '.join(sorted(table))}{hint}{tail}")
    return table[name]


def _rbm(c: ModelConfig, shape: tuple[int, ...]) -> nn.Module:
    if len(c.hidden) != 1:
        raise ValueError(f"hidden: an RBM has one hidden layer; expected [n_hidden]; got {c.hidden}")
    return BernoulliRBM(shape[0], c.hidden[0])


MODELS: dict[str, Callable[[ModelConfig, tuple[int, ...]], nn.Module]] = {
    "mlp": lambda c, shape: MLPEnergy(shape, tuple(c.hidden), activation=c.activation),
    "rbm": _rbm,
}

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


#: what the command line trains on: a seeded toy distribution, a user's point cloud or binary images.
Dataset = ToyDataset | PointCloud | BinaryImages


def chain_space(data: Dataset) -> Space:
    """Where chains start and live: the binary space of image data, else a box holding the data."""
    return data.space if isinstance(data, BinaryImages) else data_box(data)


def data_box(data: Dataset) -> Box:
    """A box holding the data (the widest of its per-dimension bounds), for chain starts."""
    if isinstance(data, BinaryImages):
        raise TypeError("data: binary images live in a binary space, not a box; use chain_space(data)")
    lows, highs = zip(*data.bounds)
    return Box(data.dim, low=min(lows), high=max(highs))


def fit_points(data: Dataset) -> torch.Tensor:
    """Points to fit auxiliary models (NCE's noise) on: the training set, or 10,000 toy draws."""
    if isinstance(data, (PointCloud, BinaryImages)):
        return data.train
    return data.sample(10000, generator=torch.Generator().manual_seed(12345))


def _pcd(c: ObjectiveConfig, sampler: Sampler, data: Dataset) -> nn.Module:
    buffer = ReplayBuffer(c.buffer_size, chain_space(data), reinit_prob=c.reinit_prob)
    return PersistentContrastiveDivergence(sampler, buffer, k=c.k, regularization=c.regularization)


def _cd(c: ObjectiveConfig, sampler: Sampler, data: Dataset) -> nn.Module:
    return ContrastiveDivergence(sampler, k=c.k, regularization=c.regularization)


def _dsm(c: ObjectiveConfig, sampler: Sampler, data: Dataset) -> nn.Module:
    return DenoisingScoreMatching(c.sigmas if c.sigmas else c.sigma)


def _nce(c: ObjectiveConfig, sampler: Sampler, data: Dataset) -> nn.Module:
    return NCE(GaussianNoise.fit(fit_points(data), scale=c.noise_scale), nu=c.nu)


OBJECTIVES: dict[str, Callable[[ObjectiveConfig, Sampler, Dataset], nn.Module]] = {
    "pcd": _pcd,
    "cd": _cd,
    "sm": lambda c, s, d: ScoreMatching(),
    "dsm": _dsm,
    "ssm": lambda c, s, d: SlicedScoreMatching(c.n_projections),
    "nce": _nce,
}


LR_SCHEDULES: dict[str, Callable[[Config], Callable[[int], float] | None]] = {
    "constant": lambda c: None,  # the trainer keeps the rate as it is
    "cosine": lambda c: CosineAnnealing(c.train.steps, final=c.train.lr_final),
    "linear": lambda c: LinearAnnealing(c.train.steps, final=c.train.lr_final),
}


def build_lr_schedule(cfg: Config) -> Callable[[int], float] | None:
    """The learning-rate multiplier ``step -> factor`` (``None`` for a constant rate)."""
    factory = resolve(LR_SCHEDULES, cfg.train.lr_schedule, "train.lr_schedule")
    return _build("train", cfg.train, factory, cfg)


def build_data(cfg: Config) -> Dataset:
    """``data.path`` (a user's points) when given, else the toy set ``data.name``."""
    d = cfg.data
    if d.path is None:
        resolve(dict.fromkeys((*TOY_NAMES, *IMAGE_SETS)), d.name, "data.name")
    if d.name in IMAGE_SETS and d.path is None:
        return _build("data", d, load_binary_images, d, cfg.run.seed)
    if d.path is not None:
        limit: dict[str, Any] = {} if d.max_mb is None else {"max_bytes": d.max_mb << 20}
        return _build("data", d, load_points, d.path, test_fraction=d.test_fraction, seed=cfg.run.seed, key=d.key,
                      **limit)
    kw = {k: v for k, v in (("scale", d.scale), ("noise", d.noise)) if v is not None}
    return _build("data", d, get_toy, d.name, **kw)


def build_model(cfg: Config, event_shape: tuple[int, ...]) -> nn.Module:
    return _build("model", cfg.model, resolve(MODELS, cfg.model.kind, "model.kind"), cfg.model, event_shape)


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
    return _build("sampler", cfg.sampler, factory, cfg.sampler, space)


def check_sampler_fits_model(cfg: Config, model: nn.Module) -> None:
    """Block Gibbs needs layer conditionals (an RBM) or a colouring (``blocks()``); refuse it early otherwise."""
    if cfg.sampler.kind == "block_gibbs" and not (BlockGibbs.is_bipartite(model) or hasattr(model, "blocks")):
        valid = ", ".join(k for k in sorted(DISCRETE_SAMPLERS) if k != "block_gibbs")
        raise ConfigError(
            f"sampler.kind: 'block_gibbs' needs a model with layer conditionals (model.kind = 'rbm') or a "
            f"colouring; model.kind = {cfg.model.kind!r} has neither; expected one of {valid}"
        )


def build_objective(cfg: Config, sampler: Sampler, data: Dataset) -> nn.Module:
    factory = resolve(OBJECTIVES, cfg.objective.kind, "objective.kind")
    return _build("objective", cfg.objective, factory, cfg.objective, sampler, data)


def data_names() -> dict[str, list[str]]:
    """Every ``data.name`` the command line serves, by kind (toy sets, binary image sets, structured tasks)."""
    from ebms.cli.tasks import task_names

    return {"a toy set": sorted(TOY_NAMES), "a binary image set": sorted(IMAGE_SETS), "a structured task": task_names()}


def _check_data_name(name: str) -> None:
    groups = data_names()
    every = [n for names in groups.values() for n in names]
    if name not in every:
        import difflib

        close = difflib.get_close_matches(name, every, n=1)
        hint = f"; did you mean {close[0]!r}?" if close else ""
        kinds = ", ".join(f"{kind} ({', '.join(names)})" for kind, names in groups.items() if names)
        raise ConfigError(f"data.name: unknown value {name!r}; expected {kinds}, or data.path=FILE for your own "
                          f"points{hint}")


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


def _data_words(cfg: Config) -> str:
    d = cfg.data
    if d.path is not None:
        return f"data.path={d.path!r} (points)"
    kind = "a binary image set" if d.name in IMAGE_SETS else "a toy set"
    return f"data.name={d.name!r} ({kind})"


def _served_by(kind: str, attr: str) -> str:
    """Which structured tasks take ``kind`` as their ``model.kind`` / ``objective.kind`` (``attr``)."""
    from ebms.cli.tasks import TASKS, task_names

    task_names()  # registers the packaged tasks
    names = sorted(n for n, t in TASKS.items() if kind in getattr(t, attr))
    if not names:
        return ""
    return f"{kind!r} belongs to the structured tasks data.name = {', '.join(names)}: set data.name to one of them"


def validate_config(cfg: Config, *, device: bool = True) -> Config:
    """Check every value of ``cfg`` before anything is built: the ranges of
    :data:`~ebms.cli.config.RULES` and every name against the table it is looked up in.

    A structured task (``data.name`` served by :mod:`ebms.cli.tasks`) checks ``model.kind`` and
    ``objective.kind`` against its own lists; other data against :data:`MODELS` and
    :data:`OBJECTIVES`, and a name that belongs to a structured task says which ``data.name``
    takes it.

    Args:
        cfg: the loaded configuration.
        device: also check that ``run.device`` exists on this machine (training needs it;
            evaluating a run trained elsewhere does not).

    Raises:
        ConfigError: one line naming the key, the expectation and the value.
    """
    from ebms.cli.tasks import task_for
    from ebms.nets._activations import ACTIVATIONS

    check_values(cfg)
    if device:
        check_device(cfg.run.device)
    if cfg.data.path is None:
        _check_data_name(cfg.data.name)
    task = task_for(cfg)
    if task is not None:
        where = f"for data.name={cfg.data.name!r} (a structured task)"
        if task.model_kinds:
            resolve(dict.fromkeys(task.model_kinds), cfg.model.kind, "model.kind", context=where)
        if task.objective_kinds:
            resolve(dict.fromkeys(task.objective_kinds), cfg.objective.kind, "objective.kind", context=where)
    else:
        where = f"for {_data_words(cfg)}"
        resolve(MODELS, cfg.model.kind, "model.kind", context=where, note=_served_by(cfg.model.kind, "model_kinds"))
        resolve(OBJECTIVES, cfg.objective.kind, "objective.kind", context=where,
                note=_served_by(cfg.objective.kind, "objective_kinds"))
        binary = cfg.data.path is None and cfg.data.name in IMAGE_SETS
        if cfg.model.kind == "rbm" and not binary:
            raise ConfigError(f"model.kind: 'rbm' is a Bernoulli RBM for binary data (data.name = one of "
                              f"{', '.join(IMAGE_SETS)}); {_data_words(cfg)} is continuous; expected 'mlp'")
    resolve(SAMPLERS, cfg.sampler.kind, "sampler.kind")
    resolve(LR_SCHEDULES, cfg.train.lr_schedule, "train.lr_schedule")
    resolve({k.lower(): v for k, v in ACTIVATIONS.items()}, cfg.model.activation.lower(), "model.activation")
    if cfg.data.features:
        from ebms.structured.features import FEATURE_SETS

        resolve(FEATURE_SETS, cfg.data.features, "data.features")
    return cfg
