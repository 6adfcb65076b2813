"""Private: refuse a task-section key that the chosen ``model.kind`` / ``objective.kind`` never reads.

A key of a task's own section set away from its default but not read by the configured model
would be ignored without a word (``trf.hidden`` on a discrete ``trf`` run, ``tagging.features`` on
a BiLSTM-CRF, ``jrf.alpha`` with the supervised objective). Each task says which of its keys the
configuration in hand reads; :func:`refuse_unread` names the first other key that is set, with
the kinds that do read it. (Keys of *other* tasks' sections are refused by
:func:`ebms.cli.build.validate_config`.)
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Collection, Iterable
from typing import Any

from ebms.cli.config import ConfigError

__all__ = ["refuse_unread"]


def refuse_unread(section: str, settings: Any, read: Collection[str], context: str,
                  readers: Callable[[str], Iterable[str]]) -> None:
    """Raise :class:`ConfigError` for the first key of ``settings`` (a section dataclass) that is set
    away from its default and not in ``read``.

    Args:
        section: the section's name (``"language"``).
        settings: the section's dataclass instance.
        read: the keys the configuration reads.
        context: the configuration in words, e.g. ``"model.kind='residual'"``.
        readers: ``key -> configurations that read it`` (words), for the message.
    """
    default = type(settings)()
    for f in dataclasses.fields(settings):
        if f.name in read or getattr(settings, f.name) == getattr(default, f.name):
            continue
        who = ", ".join(readers(f.name))
        where = f"; it is read with {who}" if who else ""
        raise ConfigError(f"{section}.{f.name}: {context} does not read it, so "
                          f"{section}.{f.name}={getattr(settings, f.name)!r} would be ignored{where}: drop it")
