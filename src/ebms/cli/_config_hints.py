"""How config messages show a value and suggest a name ("did you mean ...?").

Shared by the constraint checks (:mod:`ebms.cli._config_rules`) and the parser
(:mod:`ebms.cli._config_toml`), so every one-line :class:`~ebms.cli.config.ConfigError` writes
values, types and suggestions the same way.
"""

from __future__ import annotations

import difflib
from typing import Any

__all__ = ["shown"]


def shown(value: Any, limit: int = 60) -> str:
    """``repr(value)``, shortened to ``limit`` characters plus its length for a long value."""
    text = repr(value)
    if len(text) <= limit:
        return text
    size = f"{len(value)} characters" if isinstance(value, str) else f"{len(text)} characters shown as text"
    return f"{text[:limit]}... ({size})"


def _suggest(name: str, options: list[str], prefix: str) -> str:
    close = difflib.get_close_matches(name, options, n=1, cutoff=0.5)
    if close:
        return f"; did you mean '{prefix}{close[0]}'?"
    return f"; valid keys: {', '.join(prefix + o for o in options)}"


def _type_name(tp: Any) -> str:
    return getattr(tp, "__name__", None) or str(tp).replace("typing.", "")
