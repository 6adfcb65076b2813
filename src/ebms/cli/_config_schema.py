"""The shape of a run configuration: one dataclass per TOML section, and the error type.

:class:`Config` holds the shared sections (``[run]``, ``[data]``, ``[model]``, ``[sampler]``,
``[objective]``, ``[train]``, ``[eval]``: keys that mean the same for every task that reads them)
and one section per task of the registry (:mod:`ebms.cli.tasks`), declared by the task itself:
``[toy]``, ``[images]``, ``[tagging]``, ``[speech]``, ... hold the keys only that task uses.
:func:`section_types` lists every section with its dataclass and :func:`config_keys` every dotted
key with its annotation; the constraint table (:data:`ebms.cli._config_rules.RULES`) and the
parser (:mod:`ebms.cli._config_toml`) both walk it. All of it is re-exported by
:mod:`ebms.cli.config`, the public entry.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, get_type_hints

from ebms.errors import InputError

__all__ = [
    "CORE_SECTIONS",
    "Config",
    "ConfigError",
    "DataConfig",
    "EvalConfig",
    "ModelConfig",
    "ObjectiveConfig",
    "RunConfig",
    "SamplerConfig",
    "TrainConfig",
    "config_keys",
    "section_types",
]


class ConfigError(InputError):
    """A bad configuration: unknown key, wrong type, missing file or bad value."""


@dataclass
class RunConfig:
    name: str = "run"
    out_dir: str = "runs"
    seed: int = 0
    device: str = "cpu"
    progress: bool = True
    log_to: list[str] = field(default_factory=list)


@dataclass
class DataConfig:
    name: str = "eight_gaussians"
    n_test: int = 20000
    path: str | None = None
    key: str | None = None
    test_fraction: float = 0.1
    root: str | None = None
    max_mb: int | None = None


@dataclass
class ModelConfig:
    kind: str = "mlp"
    hidden: list[int] = field(default_factory=lambda: [128, 128])
    activation: str = "silu"


@dataclass
class SamplerConfig:
    kind: str = "sgld"
    step_size: float = 0.01
    noise_scale: float | None = None
    grad_clamp: float | None = None
    n_leapfrog: int = 5
    sweeps: int = 1
    scan: str = "random"
    temperature: float = 2.0
    n_flips: int = 1


@dataclass
class ObjectiveConfig:
    kind: str = "pcd"
    k: int = 20
    regularization: float = 0.0
    buffer_size: int = 10000
    reinit_prob: float = 0.05
    sigma: float = 0.1
    sigmas: list[float] = field(default_factory=list)
    n_projections: int = 1
    nu: float = 1.0
    noise_scale: float = 1.5
    epsilon_max: float = 1.0  # energy-matching: the toy settings of docs/energy-matching.md
    tau_star: float = 0.9
    cd_weight: float = 10.0
    warmup_steps: int = 0
    flow_weighting: bool = False
    latent_dim: int = 2  # inclusive-nrf: the generator of docs/inclusive-nrf.md
    generator_hidden: list[int] = field(default_factory=lambda: [128, 128])
    generator_sigma: float = 0.3
    revision: str = "sgld"
    friction: float = 0.1


@dataclass
class TrainConfig:
    steps: int = 3000
    batch_size: int = 256
    lr: float = 1e-3
    lr_schedule: str = "constant"
    lr_final: float = 0.0
    sa_tc: float = 0.0
    sa_beta: float = 0.0
    sa_t0: int = 500
    optimizer: str = "adam"
    momentum: float = 0.0
    weight_decay: float = 0.0
    grad_clip: float | None = None
    ema: float | None = None
    precision: str = "fp32"
    compile: bool = False
    shard: str = "ddp"
    log_every: int = 50
    checkpoint_every: int = 1000


@dataclass
class EvalConfig:
    resolution: int = 400
    n_samples: int = 2000
    sample_steps: int = 500
    ais_chains: int = 100
    ais_temperatures: int = 14500
    reverse_ais: bool = True
    ema: bool = True


def _task_sections() -> dict[str, Any]:
    from ebms.cli.tasks import task_sections

    return {name: tp() for name, tp in task_sections().items()}


@dataclass
class Config:
    """A run's configuration: the shared sections as attributes, the tasks' sections in
    :attr:`sections` (by name; :meth:`section` reaches either kind)."""

    run: RunConfig = field(default_factory=RunConfig)
    data: DataConfig = field(default_factory=DataConfig)
    model: ModelConfig = field(default_factory=ModelConfig)
    sampler: SamplerConfig = field(default_factory=SamplerConfig)
    objective: ObjectiveConfig = field(default_factory=ObjectiveConfig)
    train: TrainConfig = field(default_factory=TrainConfig)
    eval: EvalConfig = field(default_factory=EvalConfig)
    sections: dict[str, Any] = field(default_factory=_task_sections, repr=False)

    def section(self, name: str) -> Any:
        """The section ``name`` (``"train"``, ``"speech"``, ...); ``KeyError`` for an unknown one."""
        if name in CORE_SECTIONS:
            return vars(self)[name]
        return self.sections[name]


#: the shared sections, in file order.
CORE_SECTIONS: dict[str, type] = {f.name: f.default_factory for f in dataclasses.fields(Config)  # type: ignore[misc]
                                  if f.name != "sections"}


def section_types() -> dict[str, type]:
    """Every section name with its dataclass: the shared ones, then each registered task's."""
    from ebms.cli.tasks import task_sections

    return {**CORE_SECTIONS, **task_sections()}


def config_keys() -> dict[str, Any]:
    """Every dotted key with its type annotation (``{"run.name": str, ..., "speech.hidden": int}``)."""
    return {f"{section}.{key}": hint for section, tp in section_types().items()
            for key, hint in get_type_hints(tp).items()}
