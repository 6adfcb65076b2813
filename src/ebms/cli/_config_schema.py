"""The shape of a run configuration: one dataclass per TOML section, and the error type.

:class:`Config` holds one section per table of a config file (``[run]``, ``[data]``, ...); each
section is a dataclass whose fields are the section's keys, typed and with their defaults.
:func:`config_keys` lists every dotted key with its annotation; the constraint table
(:data:`ebms.cli._config_rules.RULES`) and the parser (:mod:`ebms.cli._config_toml`) both walk it.
All of it is re-exported by :mod:`ebms.cli.config`, the public entry.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, get_type_hints

from ebms.errors import InputError

__all__ = [
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


@dataclass
class DataConfig:
    name: str = "eight_gaussians"
    n_test: int = 20000
    scale: float | None = None
    noise: float | None = None
    path: str | None = None
    key: str | None = None
    test_fraction: float = 0.1
    binarize: str = "stochastic"
    binarize_seed: int = 0
    root: str | None = None
    download: bool = False
    limit: int | None = None
    features: str = ""
    n_train: int | None = None
    max_digits: int = 7
    test_speakers: list[str] = field(default_factory=lambda: ["theo"])
    max_mb: int | None = None


@dataclass
class ModelConfig:
    kind: str = "mlp"
    hidden: list[int] = field(default_factory=lambda: [128, 128])
    activation: str = "silu"
    embedding_dim: int = 100
    char_dim: int = 0
    layers: int = 1
    dropout: float = 0.0


@dataclass
class SamplerConfig:
    kind: str = "sgld"
    step_size: float = 0.01
    noise_scale: float | None = None
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
    c1: float = 0.0
    c2: float = 0.0
    ctc_weight: float = 0.0
    lm_order: int = 2


@dataclass
class TrainConfig:
    steps: int = 3000
    batch_size: int = 256
    lr: float = 1e-3
    lr_schedule: str = "constant"
    lr_final: float = 0.0
    optimizer: str = "adam"
    momentum: float = 0.0
    weight_decay: float = 0.0
    grad_clip: float | None = None
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


@dataclass
class Config:
    run: RunConfig = field(default_factory=RunConfig)
    data: DataConfig = field(default_factory=DataConfig)
    model: ModelConfig = field(default_factory=ModelConfig)
    sampler: SamplerConfig = field(default_factory=SamplerConfig)
    objective: ObjectiveConfig = field(default_factory=ObjectiveConfig)
    train: TrainConfig = field(default_factory=TrainConfig)
    eval: EvalConfig = field(default_factory=EvalConfig)


def config_keys() -> dict[str, Any]:
    """Every dotted key of :class:`Config` with its type annotation (``{"run.name": str, ...}``)."""
    out: dict[str, Any] = {}
    for section, tp in get_type_hints(Config).items():
        for key, hint in get_type_hints(tp).items():
            out[f"{section}.{key}"] = hint
    return out
