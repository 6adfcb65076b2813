"""Where real data sets live on disk.

Resolution order for :func:`data_root` (the first that applies wins):

1. ``$EBMS_DATA`` when it is set and non-empty (used as given, even if the
   folder does not exist yet — an explicit choice is never second-guessed);
2. ``../shared/data`` beside the checkout (the folder holding
   ``pyproject.toml`` above this file) when that folder exists;
3. ``./data`` in the current working directory.

Loaders call :func:`data_path` for a file or folder under the root; it raises
a :class:`FileNotFoundError` that says where it looked and how to point
``EBMS_DATA`` elsewhere. Tests that need a real data set call it and skip with
the message when the data are absent.
"""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["DATA_ENV_VAR", "data_path", "data_root"]

#: Environment variable that overrides the data folder.
DATA_ENV_VAR = "EBMS_DATA"


def _checkout_root() -> Path | None:
    """The source checkout holding this package (``None`` for an installed wheel)."""
    for parent in Path(__file__).resolve().parents:
        if (parent / "pyproject.toml").is_file() and (parent / "src" / "ebms").is_dir():
            return parent
    return None


def data_root() -> Path:
    """The folder that holds the vendored data sets (see the module docstring for the order)."""
    env = os.environ.get(DATA_ENV_VAR, "").strip()
    if env:
        return Path(env).expanduser()
    checkout = _checkout_root()
    if checkout is not None:
        shared = checkout.parent / "shared" / "data"
        if shared.is_dir():
            return shared
    return Path.cwd() / "data"


def data_path(*parts: str, must_exist: bool = True) -> Path:
    """``data_root() / parts...``; with ``must_exist`` a missing path is an error.

    Raises:
        FileNotFoundError: the path does not exist (the message names the
            resolved root and the ``EBMS_DATA`` variable).
    """
    for p in parts:
        if not isinstance(p, str) or not p:
            raise TypeError(f"parts: expected non-empty strings; got {p!r}")
    root = data_root()
    path = root.joinpath(*parts)
    if must_exist and not path.exists():
        how = f"${DATA_ENV_VAR}" if os.environ.get(DATA_ENV_VAR, "").strip() else "the default search"
        raise FileNotFoundError(
            f"{path}: data not found (root {root}, from {how}); set {DATA_ENV_VAR} to the folder "
            f"that holds {Path(*parts)}"
        )
    return path
