"""TOML in and out: reading a config file, typing its values, ``key=value`` overrides, writing.

:func:`read_toml` reads a config file (every failure a one-line :class:`ConfigError` naming it);
:func:`fill_config` maps a table onto the :class:`~ebms.cli.config.Config` sections, checking each
value against its annotation (ints are accepted for floats), suggesting the closest key for an
unknown one and naming the new key of one that moved::

    objective.buffer_sz: unknown key; did you mean 'objective.buffer_size'?
    data.scale: renamed; use toy.scale

:func:`apply_overrides` applies command-line ``section.key=value`` strings, whose values are parsed
as TOML (``hidden=[64,64]``, ``name="x"``); a bare word that is not valid TOML is taken as a string
(``data.name=two_moons``). :func:`to_toml` writes a config back. All of it is re-exported by
:mod:`ebms.cli.config`, the public entry.
"""

from __future__ import annotations

import dataclasses
import json
import sys
import types
import typing
from pathlib import Path
from typing import Any, get_args, get_origin, get_type_hints

from ebms.cli._config_hints import _suggest, _type_name, bare_key_hint, key_hint
from ebms.cli._config_schema import CORE_SECTIONS, Config, ConfigError, section_types

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

__all__ = [
    "MAX_CONFIG_BYTES",
    "apply_overrides",
    "config_to_dict",
    "fill_config",
    "read_toml",
    "to_toml",
]

#: largest config file read (bytes): a TOML config is a few hundred bytes.
MAX_CONFIG_BYTES = 1 << 20


def read_toml(path: str | Path) -> dict[str, Any]:
    """The table of a TOML config file; every way it can fail is a :class:`ConfigError` naming it.

    Raises:
        ConfigError: missing, not a file, larger than :data:`MAX_CONFIG_BYTES`, not UTF-8 text,
            nested too deeply, or not valid TOML.
    """
    p = Path(path)
    if p.is_dir():
        run = (p / "config.toml").is_file()
        hint = f" (a run folder: its config is {str(p / 'config.toml')!r}; `ebms train {p / 'config.toml'} --resume` " \
               f"continues it)" if run else ""
        raise ConfigError(f"config file {str(p)!r} is a folder; expected a TOML file{hint}")
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
    except ValueError:  # an integer beyond Python's digit limit for conversions
        raise ConfigError(f"{p}: not a config: it holds an integer of thousands of digits (integers stop at "
                          f"2^63 - 1)") from None
    except RecursionError:
        raise ConfigError(f"{p}: not a config: its TOML values are nested too deeply") from None


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
        try:
            return float(value)
        except OverflowError:  # an integer beyond every float (more than 308 digits)
            raise ConfigError(f"{key}: expected a finite number; got an integer of {len(str(value))} digits") from None
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


def _fill(obj: Any, table: dict[str, Any], prefix: str, kind: str | None) -> None:
    """Set the keys of one section ``obj`` from ``table``; an old spelling names its new key (for the
    ``model.kind`` ``kind``, when known)."""
    hints = get_type_hints(type(obj))
    for k, v in table.items():
        if k not in hints:
            from ebms.cli.tasks import moved_message

            moved = moved_message(f"{prefix}{k}", kind)
            raise ConfigError(moved or f"{prefix}{k}: unknown key{key_hint(prefix[:-1], k)}")
        setattr(obj, k, _coerce(v, hints[k], f"{prefix}{k}"))


def fill_config(cfg: Config, table: dict[str, Any], *, kind: str | None = None) -> None:
    """Set ``cfg`` from a TOML table of sections (``{"train": {"steps": 500}, ...}``); ``kind``: the
    ``model.kind`` the config will have, which a key that moved by model kind names the home of."""
    names = list(section_types())
    for k, v in table.items():
        if k not in names:  # a key without its section first, then a misspelt section, then a misspelt key
            near = _suggest(k, names, "")
            hint = bare_key_hint(k, exact_only=True) or (near if "did you mean" in near else bare_key_hint(k) or near)
            raise ConfigError(f"{k}: unknown key{hint}")
        if not isinstance(v, dict):
            raise ConfigError(f"{k}: expected a table [{k}]; got {v!r}")
        _fill(cfg.section(k), v, f"{k}.", kind)


def _parse_value(text: str, key: str) -> Any:
    try:
        return tomllib.loads(f"v = {text}")["v"]
    except tomllib.TOMLDecodeError:
        return text
    except ValueError:  # an integer beyond Python's digit limit for conversions (4300 digits)
        raise ConfigError(f"{key}: expected a number; got an integer of {len(text.strip())} digits (integers "
                          f"stop at 2^63 - 1)") from None


def apply_overrides(cfg: Config, overrides: list[str] | tuple[str, ...], *, kind: str | None = None) -> Config:
    """Apply ``section.key=value`` strings in order (``kind``: as for :func:`fill_config`)."""
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
        cur[parts[-1]] = _parse_value(text.strip(), key.strip())
        if len(parts) == 1:
            hint = bare_key_hint(parts[0], text.strip()) or f"; valid sections: {', '.join(section_types())}"
            raise ConfigError(f"override {item!r}: expected section.key=value{hint}")
        fill_config(cfg, nested, kind=kind)
    return cfg


def config_to_dict(cfg: Config) -> dict[str, Any]:
    """Plain nested dict (for JSON / TOML output): the shared sections and the sections of the
    task that serves ``cfg`` (:meth:`~ebms.cli.tasks.Task.sections`; another task's section is not
    part of the run)."""
    from ebms.cli.tasks import task_for

    task = task_for(cfg)
    names = [*CORE_SECTIONS, *(task.sections() if task is not None else [])]
    return {name: dataclasses.asdict(cfg.section(name)) for name in names}


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
