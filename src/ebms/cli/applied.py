"""What the commands applying a trained run to new input share (``ebms score``, ``rescore``,
``tag``, ``decode``, ``classify``).

Each command is a module of this package (:data:`APPLY_COMMANDS`) with ``add_parser(sub, common)``; it
opens the run with :func:`open_applied` (the run's stored files, the newest valid checkpoint, the
weight average with ``train.ema``), asks the run's task for the object that applies it
(:meth:`ebms.cli.tasks.Task.applier`, an object of :mod:`ebms.apply`), reads the input with
:func:`read_lines` (``-``: stdin) and writes with :func:`output` (``-`` or unset: stdout; a file is
written whole or not at all).
"""

from __future__ import annotations

import argparse
import io
import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TextIO

from ebms.cli.config import ConfigError
from ebms.errors import DataError, RunFolderError

__all__ = ["APPLY_COMMANDS", "add_run_argument", "applier_of", "open_applied", "output", "read_lines", "run_folder"]

#: the commands applying a run, each a module ``ebms.cli.<name>`` (``rescore`` lives in ``score``).
APPLY_COMMANDS = ("score", "tag", "decode", "classify")


def add_run_argument(s: argparse.ArgumentParser) -> None:
    """The run folder (first positional) and ``--out`` of an apply command."""
    s.add_argument("run", metavar="RUN", help="run folder made by `ebms train` (runs/<name>)")
    s.add_argument("--out", "-o", default="-", help="output file (default -: stdout); written whole or not at all")


def run_folder(path: str | Path) -> Path:
    """``path`` as a run folder (the ``RUN`` argument of the apply commands and ``ebms plot``).

    Raises:
        RunFolderError: ``path`` is not a folder.
    """
    p = Path(path)
    if not p.is_dir():
        raise RunFolderError(f"RUN: {str(path)!r} {'is a file, not' if p.exists() else 'is not'} a run folder "
                             f"(runs are written under runs/<name>/ by `ebms train`)")
    return p


def open_applied(path: str | Path, command: str) -> tuple[Any, Any]:
    """``(run, applier)``: the run folder loaded by :func:`ebms.runs.load_run` and the object its task applies
    for ``command``.

    Raises:
        RunFolderError: ``path`` is not a folder.
        ConfigError: the run's task does not serve ``command`` (naming the commands it serves).
    """
    from ebms.runs import load_run

    run = load_run(run_folder(path), training_data=False)  # the run's stored files, not its training data, where the task can
    return run, applier_of(run, command)


def applier_of(run: Any, command: str) -> Any:
    """The object of :mod:`ebms.apply` that ``command`` calls for ``run`` (a :class:`ebms.runs.Run`)."""
    from ebms.cli.run import serving_task

    task = serving_task(run.config)
    if command not in task.applies:
        cfg = run.config
        served = [c for c in APPLY_COMMANDS if c in task.applies]
        also = ("; it serves " + ", ".join(f"`ebms {c}`" for c in served)) if served else \
            "; no apply command serves it (use `ebms eval` / `ebms sample`)"
        raise ConfigError(f"{command}: the run in {str(run.path)!r} (data.name={cfg.data.name!r}, "
                          f"model.kind={cfg.model.kind!r}) is not one `ebms {command}` applies{also}")
    return task.applier(command, run.config, run.model, run.data)


def read_lines(path: str, what: str) -> list[str]:
    """The lines of a UTF-8 text file (``-``: stdin), without their line ends.

    Raises:
        DataError: the file is missing, a folder, or not UTF-8 text (naming ``what`` and the file).
    """
    if path == "-":
        return sys.stdin.read().splitlines()
    p = Path(path)
    if not p.is_file():
        raise DataError(f"{what}: {path!r} {'is a folder, not a file' if p.is_dir() else 'not found'}")
    try:
        return p.read_text(encoding="utf-8").splitlines()
    except UnicodeDecodeError as e:
        raise DataError(f"{what}: {path!r} is not UTF-8 text (byte {e.start}); convert it or give a text file") \
            from None


@contextmanager
def output(path: str) -> Iterator[TextIO]:
    """A text stream for the command's output: stdout for ``-``, else a file written in full when the command
    ends (nothing is left behind when it fails)."""
    if path == "-":
        yield sys.stdout
        sys.stdout.flush()
        return
    p = Path(path)
    if p.is_dir():
        raise RunFolderError(f"--out: {path!r} is a folder; expected a file name")
    buf = io.StringIO()
    yield buf
    tmp = p.with_name(f".{p.name}.tmp")
    try:
        tmp.write_text(buf.getvalue(), encoding="utf-8")
        os.replace(tmp, p)
    finally:
        tmp.unlink(missing_ok=True)
