"""Run configuration: TOML files mapped onto dataclasses.

A config file has one table per section (``[run]``, ``[data]``, ``[model]``,
``[sampler]``, ``[objective]``, ``[train]``, ``[eval]``). Every key is typed;
unknown keys, wrong types and missing files raise :class:`ConfigError` with a
one-line message and, where possible, a suggestion::

    objective.buffer_sz: unknown key; did you mean 'objective.buffer_size'?

Command-line overrides use the same dotted names: ``train.steps=500``.
Values are parsed as TOML (``hidden=[64,64]``, ``name="x"``); a bare word that
is not valid TOML is taken as a string (``data.name=two_moons``).

Beyond its type, every key has a row in :data:`RULES`, the constraint table
(range, finiteness, list length, folder-name rules); :func:`load_config` checks
every value against it, so a bad value is one line naming the key, the
expectation and the value before anything is built::

    train.log_every: expected an integer >= 1; got 0

Keys whose valid values are names looked up in a registry (``model.kind``,
``data.name``, ...) are marked ``Rule(names=...)`` here and checked by
:func:`ebms.cli.build.validate_config`, which knows the registries.
"""

from __future__ import annotations

import dataclasses
import difflib
import json
import math
import os
import sys
import types
import typing
from collections.abc import Callable
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
    "RULES",
    "Rule",
    "RunConfig",
    "SamplerConfig",
    "TrainConfig",
    "apply_overrides",
    "check_values",
    "config_keys",
    "config_to_dict",
    "expectation",
    "load_config",
    "read_toml",
    "rules_markdown",
    "shown",
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


#: largest ``run.seed`` / ``data.binarize_seed``: the command line adds fixed offsets to a seed, and
#: torch generators take at most 64 bits, so seeds stay in 32 bits.
MAX_SEED = 2**32 - 1
#: largest integer any key accepts (torch sizes and counts are 64-bit).
MAX_INT = 2**63 - 1
#: longest folder name (bytes) that the common file systems accept (``NAME_MAX``).
MAX_NAME_BYTES = 255
#: largest config file read (bytes): a TOML config is a few hundred bytes.
MAX_CONFIG_BYTES = 1 << 20


@dataclass(frozen=True)
class Rule:
    """One row of the constraint table: what a key accepts beyond its type.

    Every float must be finite (no ``nan``/``inf``) and every integer must fit in 64 bits; a rule
    adds a range, a list length, a fixed set of strings, or a named predicate.

    Attributes:
        low: smallest value of a number (of every item, for a list); ``None``: no lower bound.
        high: largest value; ``None``: no upper bound.
        low_open: ``low`` itself is excluded (``> low`` rather than ``>= low``).
        high_open: ``high`` itself is excluded.
        min_items: fewest items a list may have.
        choices: the only strings the key takes.
        text: the expectation in words, for a rule that ``check`` tests.
        check: ``value -> bool`` for such a rule (called on non-``None`` values only).
        names: for keys whose values are names in a registry (``model.kind``, ...), where the
            valid names come from; those are checked by :func:`ebms.cli.build.validate_config`.
    """

    low: float | None = None
    high: float | None = None
    low_open: bool = False
    high_open: bool = False
    min_items: int = 0
    choices: tuple[str, ...] = ()
    text: str = ""
    check: Callable[[Any], bool] | None = None
    names: str = ""


def _is_folder_name(v: str) -> bool:
    bad = {"/", "\\", "\0", os.sep, os.altsep or "/"}
    return (v.strip() != "" and v not in (".", "..") and not any(c in v for c in bad)
            and len(v.encode("utf-8", "surrogatepass")) <= MAX_NAME_BYTES)


def _is_path(v: str) -> bool:
    return v.strip() != "" and "\0" not in v


def _non_empty(v: str) -> bool:
    return v.strip() != ""


_POS = Rule(low=0, low_open=True)  # > 0
_NONNEG = Rule(low=0)  # >= 0
_COUNT = Rule(low=1)  # an integer >= 1
_SEED = Rule(low=0, high=MAX_SEED)

#: the constraint table: every key of :class:`Config` has a row (a test keeps it so).
RULES: dict[str, Rule] = {
    "run.name": Rule(text=f"a folder name: not empty, not '.' or '..', without '/', '\\' or NUL, at most "
                          f"{MAX_NAME_BYTES} bytes", check=_is_folder_name),
    "run.out_dir": Rule(text="a folder path (not empty; '.' is the current folder)", check=_is_path),
    "run.seed": _SEED,
    "run.device": Rule(names="'cpu' or a torch device available on this machine ('cuda', 'cuda:N', 'mps')"),
    "run.progress": Rule(),
    "data.name": Rule(names="a data set name: a toy set, a binary image set or a structured task"),
    "data.n_test": _COUNT,
    "data.scale": _POS,
    "data.noise": _NONNEG,
    "data.path": Rule(text="a file path (not empty)", check=_is_path),
    "data.key": Rule(text="a tensor name (not empty)", check=_non_empty),
    "data.test_fraction": Rule(low=0, high=1, low_open=True, high_open=True),
    "data.binarize": Rule(choices=("stochastic", "threshold")),
    "data.binarize_seed": _SEED,
    "data.root": Rule(text="a folder path (not empty)", check=_is_path),
    "data.download": Rule(),
    "data.limit": _COUNT,
    "data.features": Rule(names="'' (the data set's usual template) or an attribute template name of "
                               "ebms.structured.features"),
    "data.n_train": _COUNT,
    "data.max_digits": _COUNT,
    "data.max_mb": _COUNT,
    "data.test_speakers": Rule(min_items=1, text="a non-empty list of speaker names",
                               check=lambda v: all(_non_empty(x) for x in v)),
    "model.kind": Rule(names="a model name that fits data.name (build.MODELS, or the structured task's model_kinds)"),
    "model.hidden": Rule(low=1, min_items=1),
    "model.activation": Rule(names="an activation name (ebms.nets._activations.ACTIVATIONS)"),
    "model.embedding_dim": _COUNT,
    "model.char_dim": _NONNEG,
    "model.layers": _COUNT,
    "model.dropout": Rule(low=0, high=1, high_open=True),
    "sampler.kind": Rule(names="a sampler name that fits the data (build.SAMPLERS: continuous or discrete kernels)"),
    "sampler.step_size": _POS,
    "sampler.noise_scale": _NONNEG,
    "sampler.n_leapfrog": _COUNT,
    "sampler.sweeps": _COUNT,
    "sampler.scan": Rule(choices=("random", "systematic")),
    "sampler.temperature": _POS,
    "sampler.n_flips": _COUNT,
    "objective.kind": Rule(names="an objective name that fits data.name (build.OBJECTIVES, or the structured "
                                 "task's objective_kinds)"),
    "objective.k": _COUNT,
    "objective.regularization": _NONNEG,
    "objective.buffer_size": _COUNT,
    "objective.reinit_prob": Rule(low=0, high=1),
    "objective.sigma": _POS,
    "objective.sigmas": _POS,
    "objective.n_projections": _COUNT,
    "objective.nu": _POS,
    "objective.noise_scale": _POS,
    "objective.c1": _NONNEG,
    "objective.c2": _NONNEG,
    "objective.ctc_weight": _NONNEG,
    "objective.lm_order": _COUNT,
    "train.steps": _COUNT,
    "train.batch_size": _COUNT,
    "train.lr": _POS,
    "train.lr_schedule": Rule(names="a schedule name (build.LR_SCHEDULES)"),
    "train.lr_final": Rule(low=0, high=1),
    "train.optimizer": Rule(choices=("adam", "sgd", "lbfgs")),
    "train.momentum": Rule(low=0, high=1, high_open=True),
    "train.weight_decay": _NONNEG,
    "train.grad_clip": _POS,
    "train.log_every": _COUNT,
    "train.checkpoint_every": _COUNT,
    "eval.resolution": Rule(low=4, text="an even integer >= 4 (the grid checks its log Z on n/2 cells)",
                            check=lambda v: v % 2 == 0),
    "eval.n_samples": _COUNT,
    "eval.sample_steps": _COUNT,
    "eval.ais_chains": _COUNT,
    "eval.ais_temperatures": _COUNT,
    "eval.reverse_ais": Rule(),
}


def config_keys() -> dict[str, Any]:
    """Every dotted key of :class:`Config` with its type annotation (``{"run.name": str, ...}``)."""
    out: dict[str, Any] = {}
    for section, tp in get_type_hints(Config).items():
        for key, hint in get_type_hints(tp).items():
            out[f"{section}.{key}"] = hint
    return out


def rules_markdown() -> str:
    """The constraint table as Markdown (``| key | accepts |`` rows), as docs/cli.md prints it.

    ``python -c "from ebms.cli.config import rules_markdown; print(rules_markdown())"`` regenerates
    the table; a test keeps the page equal to it.
    """
    rows = ["| key | accepts |", "| --- | --- |"]
    rows += [f"| `{key}` | {expectation(key).replace(chr(92), chr(92) * 2)} |" for key in config_keys()]
    return "\n".join(rows)


def _num(v: float) -> str:
    if v == MAX_SEED:
        return "2^32 - 1"
    return str(int(v)) if float(v).is_integer() else repr(float(v))


def _range_text(r: Rule) -> str:
    if r.low is not None and r.high is not None:
        return f"in {'(' if r.low_open else '['}{_num(r.low)}, {_num(r.high)}{')' if r.high_open else ']'}"
    if r.low is not None:
        return f"{'>' if r.low_open else '>='} {_num(r.low)}"
    if r.high is not None:
        return f"{'<' if r.high_open else '<='} {_num(r.high)}"
    return ""


def _split_hint(tp: Any) -> tuple[Any, bool]:
    """``(T, optional)`` for ``T | None``, else ``(tp, False)``."""
    if get_origin(tp) in (typing.Union, types.UnionType):
        args = [a for a in get_args(tp) if a is not type(None)]
        return args[0], len(args) < len(get_args(tp))
    return tp, False


def expectation(key: str, tp: Any | None = None) -> str:
    """The expectation of ``key`` in words, as the one-line messages and docs/cli.md print it."""
    rule = RULES[key]
    base, optional = _split_hint(config_keys()[key] if tp is None else tp)
    rng = _range_text(rule)
    if get_origin(base) is list:
        (item,) = get_args(base)
        noun = {int: "integers", float: "finite numbers", str: "strings"}[item]
        text = rule.text or (("a non-empty list" if rule.min_items else "a list") + f" of {noun}"
                             + (f" {rng}" if rng else ""))
    elif rule.choices:
        text = "one of " + ", ".join(repr(c) for c in rule.choices)
    elif rule.text or rule.names:
        text = rule.text or rule.names
    else:
        noun = {int: "an integer", float: "a finite number", bool: "true or false", str: "a string"}[base]
        text = f"{noun} {rng}".strip()
    return text + (" (or unset)" if optional else "")


def _violates(rule: Rule, value: Any, base: Any) -> bool:
    if get_origin(base) is list:
        item_rule = dataclasses.replace(rule, min_items=0, check=None, text="")
        return (len(value) < rule.min_items or any(_violates(item_rule, v, get_args(base)[0]) for v in value)
                or (rule.check is not None and not rule.check(value)))
    if isinstance(value, float) and not math.isfinite(value):
        return True
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) > MAX_INT:
        return True
    if rule.choices and value not in rule.choices:
        return True
    if rule.check is not None and not rule.check(value):
        return True
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        if rule.low is not None and (value < rule.low or (rule.low_open and value == rule.low)):
            return True
        if rule.high is not None and (value > rule.high or (rule.high_open and value == rule.high)):
            return True
    return False


def shown(value: Any, limit: int = 60) -> str:
    """``repr(value)``, shortened to ``limit`` characters plus its length for a long value."""
    text = repr(value)
    if len(text) <= limit:
        return text
    size = f"{len(value)} characters" if isinstance(value, str) else f"{len(text)} characters shown as text"
    return f"{text[:limit]}... ({size})"


def check_values(cfg: Config) -> Config:
    """Check every value of ``cfg`` against :data:`RULES`; the first violation is a one-line error.

    Raises:
        ConfigError: ``key: expected <rule in words>; got <value>``.
    """
    for key, tp in config_keys().items():
        section, name = key.split(".")
        value = getattr(getattr(cfg, section), name)
        if value is None:
            continue
        base, _ = _split_hint(tp)
        rule = RULES[key]
        if rule.choices and isinstance(value, str) and value not in rule.choices:
            close = difflib.get_close_matches(value, rule.choices, n=1)
            hint = f"; did you mean {close[0]!r}?" if close else ""
            raise ConfigError(f"{key}: unknown value {shown(value)}; expected one of {', '.join(rule.choices)}{hint}")
        if _violates(rule, value, base):
            items = value if isinstance(value, list) else [value]
            big = any(isinstance(v, int) and not isinstance(v, bool) and abs(v) > MAX_INT for v in items)
            raise ConfigError(f"{key}: expected {expectation(key, tp)}{', at most 2^63 - 1' if big else ''}; "
                              f"got {shown(value)}")
    return cfg


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


def read_toml(path: str | Path) -> dict[str, Any]:
    """The table of a TOML config file; every way it can fail is a :class:`ConfigError` naming it.

    Raises:
        ConfigError: missing, not a file, larger than :data:`MAX_CONFIG_BYTES`, not UTF-8 text,
            nested too deeply, or not valid TOML.
    """
    p = Path(path)
    if p.is_dir():
        raise ConfigError(f"config file {str(p)!r} is a folder; expected a TOML file")
    if not p.is_file():
        raise ConfigError(f"config file {str(p)!r} not found (see `ebms recipes` for the packaged ones)")
    size = p.stat().st_size
    if size > MAX_CONFIG_BYTES:
        raise ConfigError(f"{p}: {size} bytes is not a config file (a TOML config is at most "
                          f"{MAX_CONFIG_BYTES} bytes); is it the right file?")
    raw = p.read_bytes()
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        raise ConfigError(f"{p}: not a UTF-8 text file (byte 0x{raw[e.start]:02x} at offset {e.start}); "
                          f"a config is a TOML text file (see `ebms recipes` for examples)") from None
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        raise ConfigError(f"{p}: not valid TOML: {e}") from None
    except RecursionError:
        raise ConfigError(f"{p}: not a config: its TOML values are nested too deeply") from None


def _dotted(table: dict[str, Any], prefix: str = "") -> set[str]:
    out: set[str] = set()
    for k, v in table.items():
        out |= _dotted(v, f"{prefix}{k}.") if isinstance(v, dict) else {f"{prefix}{k}"}
    return out


def _apply_task_defaults(cfg: Config, explicit: set[str]) -> None:
    """A structured task's own defaults (its model, objective, ...) for the keys nobody set."""
    from ebms.cli.tasks import task_defaults

    hints = config_keys()
    for key, value in task_defaults(cfg.data.name).items():
        if key not in explicit and key in hints:
            section, name = key.split(".")
            setattr(getattr(cfg, section), name, _coerce(value, hints[key], key))


#: keys holding a path; a relative one is made absolute when the config is loaded, so the run's
#: ``config.toml`` means the same file from any folder.
PATH_KEYS = ("data.path", "data.root")


def load_config(path: str | Path | None = None, overrides: list[str] | tuple[str, ...] = ()) -> Config:
    """Defaults, then the TOML file (if given), then ``key=value`` overrides; then checked.

    A structured task's defaults (``model.kind``, ``objective.kind``, ...; see
    :meth:`ebms.cli.tasks.StructuredTask.default_settings`) replace the generic ones for every key
    that neither the file nor an override set. Every value is checked against :data:`RULES`, and
    the paths of :data:`PATH_KEYS` are made absolute (against the current folder; ``~`` expanded).

    Raises:
        ConfigError: an unreadable file, an unknown key, a wrong type or a value outside its rule.
    """
    cfg = Config()
    explicit: set[str] = set()
    if path is not None:
        table = read_toml(path)
        _fill(cfg, table, "")
        explicit |= _dotted(table)
    apply_overrides(cfg, overrides)
    explicit |= {item.split("=", 1)[0].strip() for item in overrides}
    _apply_task_defaults(cfg, explicit)
    check_values(cfg)
    for key in PATH_KEYS:
        section, name = key.split(".")
        value = getattr(getattr(cfg, section), name)
        if value is not None:
            setattr(getattr(cfg, section), name, os.path.abspath(os.path.expanduser(value)))
    return cfg


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
        return json.dumps(v, ensure_ascii=False)  # JSON's string escapes are valid TOML basic-string escapes
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
