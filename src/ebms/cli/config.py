"""Run configuration: TOML files mapped onto dataclasses.

A config file has one table per section (``[run]``, ``[data]``, ``[model]``,
``[sampler]``, ``[objective]``, ``[train]``, ``[eval]``). Every key is typed;
unknown keys, wrong types and missing files raise :class:`ConfigError` with a
one-line message and, where possible, a suggestion::

    objective.buffer_sz: unknown key; did you mean 'objective.buffer_size'?

Command-line overrides use the same dotted names: ``train.steps=500``.
Values are parsed as TOML (``hidden=[64,64]``, ``name="x"``); a bare word that
is not valid TOML is taken as a string (``data.name=two_moons``).
"""

from __future__ import annotations

import dataclasses
import difflib
import sys
import types
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, get_args, get_origin, get_type_hints

from ebms.errors import InputError

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

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
    "apply_overrides",
    "config_to_dict",
    "load_config",
    "to_toml",
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


def _suggest(name: str, options: list[str], prefix: str) -> str:
    close = difflib.get_close_matches(name, options, n=1, cutoff=0.5)
    if close:
        return f"; did you mean '{prefix}{close[0]}'?"
    return f"; valid keys: {', '.join(prefix + o for o in options)}"


def _type_name(tp: Any) -> str:
    return getattr(tp, "__name__", None) or str(tp).replace("typing.", "")


def _coerce(value: Any, tp: Any, key: str) -> Any:
    """Check ``value`` against the annotation ``tp``; ints are accepted for floats."""
    origin = get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        args = get_args(tp)
        if value is None and type(None) in args:
            return None
        errors = []
        for a in args:
            if a is type(None):
                continue
            try:
                return _coerce(value, a, key)
            except ConfigError as e:
                errors.append(e)
        raise errors[0] if errors else ConfigError(f"{key}: unexpected value {value!r}")
    if origin is list:
        (item,) = get_args(tp)
        if not isinstance(value, list):
            raise ConfigError(f"{key}: expected a list of {_type_name(item)}; got {value!r} ({type(value).__name__})")
        return [_coerce(v, item, f"{key}[{i}]") for i, v in enumerate(value)]
    if tp is float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ConfigError(f"{key}: expected a number; got {value!r} ({type(value).__name__})")
        return float(value)
    if tp is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise ConfigError(f"{key}: expected an integer; got {value!r} ({type(value).__name__})")
        return value
    if tp is bool:
        if not isinstance(value, bool):
            raise ConfigError(f"{key}: expected true or false; got {value!r} ({type(value).__name__})")
        return value
    if tp is str:
        if not isinstance(value, str):
            raise ConfigError(f"{key}: expected a string; got {value!r} ({type(value).__name__})")
        return value
    raise ConfigError(f"{key}: unsupported type {_type_name(tp)}")


def _fill(obj: Any, table: dict[str, Any], prefix: str) -> None:
    hints = get_type_hints(type(obj))
    names = [f.name for f in dataclasses.fields(obj)]
    for k, v in table.items():
        if k not in hints:
            raise ConfigError(f"{prefix}{k}: unknown key{_suggest(k, names, prefix)}")
        tp = hints[k]
        if dataclasses.is_dataclass(tp):
            if not isinstance(v, dict):
                raise ConfigError(f"{prefix}{k}: expected a table [{prefix}{k}]; got {v!r}")
            _fill(getattr(obj, k), v, f"{prefix}{k}.")
        else:
            setattr(obj, k, _coerce(v, tp, f"{prefix}{k}"))


def load_config(path: str | Path | None = None, overrides: list[str] | tuple[str, ...] = ()) -> Config:
    """Defaults, then the TOML file (if given), then ``key=value`` overrides."""
    cfg = Config()
    if path is not None:
        p = Path(path)
        if not p.is_file():
            hint = " (see `ebms recipes` for the packaged ones)" if not p.exists() else " (it is not a file)"
            raise ConfigError(f"config file {str(p)!r} not found{hint}")
        try:
            table = tomllib.loads(p.read_text())
        except tomllib.TOMLDecodeError as e:
            raise ConfigError(f"{p}: not valid TOML: {e}") from None
        _fill(cfg, table, "")
    return apply_overrides(cfg, overrides)


def _parse_value(text: str) -> Any:
    try:
        return tomllib.loads(f"v = {text}")["v"]
    except tomllib.TOMLDecodeError:
        return text


def apply_overrides(cfg: Config, overrides: list[str] | tuple[str, ...]) -> Config:
    """Apply ``section.key=value`` strings in order."""
    for item in overrides:
        if "=" not in item:
            raise ConfigError(f"override {item!r}: expected section.key=value, e.g. train.steps=500")
        key, text = item.split("=", 1)
        parts = key.strip().split(".")
        nested: dict[str, Any] = {}
        cur = nested
        for p in parts[:-1]:
            cur[p] = {}
            cur = cur[p]
        cur[parts[-1]] = _parse_value(text.strip())
        if len(parts) == 1:
            sections = [f.name for f in dataclasses.fields(cfg)]
            raise ConfigError(f"override {item!r}: expected section.key=value{_suggest(parts[0], sections, '')}")
        _fill(cfg, nested, "")
    return cfg


def config_to_dict(cfg: Config) -> dict[str, Any]:
    """Plain nested dict (for JSON / TOML output)."""
    return dataclasses.asdict(cfg)


def _toml_value(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, str):
        return '"' + v.replace("\\", "\\\\").replace('"', '\\"') + '"'
    if isinstance(v, list):
        return "[" + ", ".join(_toml_value(x) for x in v) + "]"
    return repr(v)


def to_toml(cfg: Config) -> str:
    """Serialise a config to TOML (``None`` values are omitted: they are the default)."""
    lines: list[str] = []
    for section, table in config_to_dict(cfg).items():
        lines.append(f"[{section}]")
        for k, v in table.items():
            if v is not None:
                lines.append(f"{k} = {_toml_value(v)}")
        lines.append("")
    return "\n".join(lines)
