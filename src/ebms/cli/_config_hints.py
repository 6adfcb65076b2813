"""How config messages show a value and suggest a name ("did you mean ...?").

Shared by the constraint checks (:mod:`ebms.cli._config_rules`), the parser
(:mod:`ebms.cli._config_toml`) and the command line (:mod:`ebms.cli.main`), so every one-line
:class:`~ebms.cli.config.ConfigError` writes values, types and suggestions the same way.

A suggestion for an unknown key looks across sections, because a key is more often put under
the wrong section than misspelt::

    tagging.lr: unknown key; did you mean 'train.lr'?
    override 'steps=10': expected section.key=value; did you mean 'train.steps=10'?

The order: the same key name in another section (an exact name beats a near spelling), then a
near spelling in the same section, then a near spelling in any section, then the section's keys.
"""

from __future__ import annotations

import difflib
from typing import Any

__all__ = ["bare_key_hint", "key_hint", "sections_and_keys", "shown"]

#: how close a spelling must be (difflib ratio) to be suggested within a section / across sections.
NEAR, NEAR_ELSEWHERE = 0.5, 0.75


def shown(value: Any, limit: int = 60) -> str:
    """``repr(value)``, shortened to ``limit`` characters plus its length for a long value."""
    text = repr(value)
    if len(text) <= limit:
        return text
    size = f"{len(value)} characters" if isinstance(value, str) else f"{len(text)} characters shown as text"
    return f"{text[:limit]}... ({size})"


def _suggest(name: str, options: list[str], prefix: str) -> str:
    close = difflib.get_close_matches(name, options, n=1, cutoff=NEAR)
    if close:
        return f"; did you mean '{prefix}{close[0]}'?"
    return f"; valid keys: {', '.join(prefix + o for o in options)}"


def _type_name(tp: Any) -> str:
    return getattr(tp, "__name__", None) or str(tp).replace("typing.", "")


def sections_and_keys() -> dict[str, list[str]]:
    """Every section name with the names of its keys, in file order (shared sections first)."""
    import dataclasses

    from ebms.cli._config_schema import section_types

    return {name: [f.name for f in dataclasses.fields(tp)] for name, tp in section_types().items()}


def _one_of(candidates: list[str]) -> str:
    if len(candidates) == 1:
        return f"; did you mean '{candidates[0]}'?"
    return f"; did you mean one of {', '.join(repr(c) for c in candidates)}?"


def _dotted_matches(name: str, table: dict[str, list[str]], *, skip: str = "") -> tuple[list[str], list[str]]:
    """``(exact, near)``: the dotted keys of every section but ``skip`` whose key name is ``name``,
    and those whose key name is the nearest spelling of it."""
    exact = [f"{sec}.{name}" for sec, keys in table.items() if sec != skip and name in keys]
    names = sorted({k for sec, keys in table.items() if sec != skip for k in keys})
    close = difflib.get_close_matches(name, names, n=1, cutoff=NEAR_ELSEWHERE)
    near = [f"{sec}.{close[0]}" for sec, keys in table.items() if close and sec != skip and close[0] in keys]
    return exact, near


def key_hint(section: str, name: str, table: dict[str, list[str]] | None = None) -> str:
    """The suggestion for the unknown key ``section.name`` (starts with ``"; "``).

    Args:
        section: a known section.
        name: a key name that section does not have.
        table: :func:`sections_and_keys` (computed when ``None``).

    Returns:
        ``"; did you mean 'train.lr'?"`` for ``tagging.lr``: the same name in another section first,
        then the nearest spelling in ``section``, then the nearest in any section, else the list of
        ``section``'s keys.
    """
    table = sections_and_keys() if table is None else table
    exact, near = _dotted_matches(name, table, skip=section)
    if exact:
        return _one_of(exact)
    own = table[section]
    if difflib.get_close_matches(name, own, n=1, cutoff=NEAR):
        return _suggest(name, own, f"{section}.")
    if near:
        return _one_of(near)
    return _suggest(name, own, f"{section}.")


def bare_key_hint(name: str, value: str | None = None, table: dict[str, list[str]] | None = None, *,
                  exact_only: bool = False) -> str:
    """The suggestion for a setting given without its section (``steps=10``, ``--steps 10``).

    Args:
        name: what was given as the key (``"steps"``; ``"batch-size"`` is read as ``batch_size``).
        value: the value given with it, repeated in the suggestion (``None``: none given).
        table: :func:`sections_and_keys` (computed when ``None``).
        exact_only: suggest only keys named exactly ``name`` (``""`` otherwise).

    Returns:
        ``"; did you mean 'train.steps=10'?"`` when ``name`` is the key of one or more sections (or
        the nearest spelling of one), ``"; did you mean 'train'?"`` when it names a section, else
        ``""``.
    """
    table = sections_and_keys() if table is None else table
    key = name.strip().replace("-", "_")
    if key in table:
        return f"; did you mean '{key}'?"
    exact, near = _dotted_matches(key, table)
    found = exact or ([] if exact_only else near)
    if exact_only and not found:
        return ""
    if not found:
        close = difflib.get_close_matches(key, list(table), n=1, cutoff=NEAR)
        return f"; did you mean '{close[0]}'?" if close else ""
    tail = "" if value is None else f"={value}"
    return _one_of([f"{k}{tail}" for k in found])
