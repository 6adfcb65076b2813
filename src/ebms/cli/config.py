"""Run configuration: TOML files mapped onto dataclasses.

A config file has one table per section: the shared ones (``[run]``, ``[data]``, ``[model]``,
``[sampler]``, ``[objective]``, ``[train]``, ``[eval]``) and the section of the task that
``data.name`` selects (``[toy]``, ``[images]``, ``[tagging]``, ``[speech]``; see
:mod:`ebms.cli.tasks`), which holds the keys only that task reads (a language model kind reads its
own beside ``[language]``: ``[ngram]``, ``[lm]``, ``[trf]``, ``[residual]``, ``[electric]``). Every key is typed;
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
``data.name``, ...) are marked ``Rule(names=...)`` in :data:`RULES` and checked by
:func:`ebms.cli.build.validate_config`, which knows the registries.

This module is the public entry: it loads a config (:func:`load_config`) and re-exports the
pieces, which live in private modules: the dataclasses and :class:`ConfigError` in
:mod:`ebms.cli._config_schema`, the constraint table and its checks in
:mod:`ebms.cli._config_rules`, TOML reading, overrides and writing in :mod:`ebms.cli._config_toml`,
and the wording of values and suggestions in :mod:`ebms.cli._config_hints`.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from ebms.cli._config_hints import shown
from ebms.cli._config_rules import MAX_INT as MAX_INT
from ebms.cli._config_rules import MAX_NAME_BYTES as MAX_NAME_BYTES
from ebms.cli._config_rules import MAX_SEED as MAX_SEED
from ebms.cli._config_rules import RULES, Rule, check_values, expectation, rules_markdown
from ebms.cli._config_rules import _split_hint as _split_hint
from ebms.cli._config_schema import (
    CORE_SECTIONS,
    Config,
    ConfigError,
    DataConfig,
    EvalConfig,
    ModelConfig,
    ObjectiveConfig,
    RunConfig,
    SamplerConfig,
    TrainConfig,
    config_keys,
    section_types,
)
from ebms.cli._config_toml import MAX_CONFIG_BYTES as MAX_CONFIG_BYTES
from ebms.cli._config_toml import _coerce, apply_overrides, config_to_dict, fill_config, read_toml, to_toml

__all__ = [
    "CORE_SECTIONS",
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
    "section_types",
    "shown",
    "to_toml",
]


def _dotted(table: dict[str, Any], prefix: str = "") -> set[str]:
    out: set[str] = set()
    for k, v in table.items():
        out |= _dotted(v, f"{prefix}{k}.") if isinstance(v, dict) else {f"{prefix}{k}"}
    return out


def _apply_task_defaults(cfg: Config, explicit: set[str]) -> None:
    """The defaults of the task serving ``cfg`` (its model, objective, ...) for the keys nobody set."""
    from ebms.cli.tasks import task_for

    task = task_for(cfg)
    hints = config_keys()
    for key, value in ({} if task is None else task.default_settings()).items():
        if key not in explicit and key in hints:
            section, name = key.split(".")
            setattr(cfg.section(section), name, _coerce(value, hints[key], key))


def _planned_kind(table: dict[str, Any], overrides: list[str] | tuple[str, ...]) -> str | None:
    """The ``model.kind`` that ``overrides`` (the last one) or ``table`` sets: the home a moved key names."""
    given = [o.partition("=")[2].strip().strip("'\"") for o in overrides if o.partition("=")[0].strip() == "model.kind"]
    model = table.get("model")
    kind = given[-1] if given else model.get("kind") if isinstance(model, dict) else None
    return kind if isinstance(kind, str) else None


#: keys holding a path; a relative one is made absolute when the config is loaded, so the run's
#: ``config.toml`` means the same file from any folder.
PATH_KEYS = ("data.path", "data.root", "language.train_path", "language.valid_path", "language.test_path",
             "generation.base_run", "residual.base_run", "textclass.csv")


def load_config(path: str | Path | None = None, overrides: list[str] | tuple[str, ...] = (), *,
                stored: bool = False) -> Config:
    """Defaults, then the TOML file (if given), then ``key=value`` overrides; then checked.

    With ``stored``, the file is a run folder's ``config.toml``: keys written before they moved by model
    kind are read in their new spelling (:func:`~ebms.cli.tasks.stored_spelling`); in a file or an
    override from the user, an old spelling is a one-line error naming the new key for the config's
    ``model.kind``.

    The defaults of the task serving the config (``model.kind``, ``objective.kind``, ...; see
    :meth:`ebms.cli.tasks.Task.default_settings`) replace the generic ones for every key that
    neither the file nor an override set. Every value is checked against :data:`RULES`, and
    the paths of :data:`PATH_KEYS` are made absolute (against the current folder; ``~`` expanded).

    Raises:
        ConfigError: an unreadable file, an unknown key, a wrong type or a value outside its rule.
    """
    from ebms.cli.tasks import stored_spelling

    cfg = Config()
    explicit: set[str] = set()
    table = {} if path is None else read_toml(path)
    if stored:
        table = stored_spelling(table)
    kind = _planned_kind(table, overrides)
    fill_config(cfg, table, kind=kind)
    explicit |= _dotted(table)
    apply_overrides(cfg, overrides, kind=kind)
    explicit |= {item.split("=", 1)[0].strip() for item in overrides}
    _apply_task_defaults(cfg, explicit)
    check_values(cfg)
    for key in PATH_KEYS:
        section, name = key.split(".")
        value = getattr(cfg.section(section), name)
        if value is not None:
            setattr(cfg.section(section), name, os.path.abspath(os.path.expanduser(value)))
    return cfg

