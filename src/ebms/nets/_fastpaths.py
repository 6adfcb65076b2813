"""Which private-PyTorch speed paths this process uses: decided once, inspectable, switchable.

The networks in :mod:`ebms.nets` have faster CPU routes that lean on PyTorch
internals:

==========================  ===================================================  =====================
path                        private API                                          public fallback
==========================  ===================================================  =====================
``onednn_linear``           ``torch.ops.mkldnn._linear_pointwise`` (the kernel)  ``F.linear`` / ``addmm``
``functorch_probe``         ``torch._C._functorch.peek_interpreter_stack``       (oneDNN off)
``engine_probe``            ``torch._C._will_engine_execute_node``               compute every gradient
``activation_vjps``         ``torch.ops.aten.*_backward`` kernels                closed-form formulas
==========================  ===================================================  =====================

Each path is probed once, when its module is imported: the API must exist
and a self-check on a tiny input must give the same numbers as the public
route (to float32 round-off). A path that is missing, raises or disagrees is
switched off for the process, silently, and the reason is kept.
``functorch_probe`` guards the oneDNN route (an opaque kernel must not run
inside ``torch.func`` transforms), so oneDNN is used only when both pass.

Inspect the decision with :func:`fast_paths` (``ebms.nets._fastpaths``)::

    >>> from ebms.nets._fastpaths import fast_paths
    >>> sorted(fast_paths())  # doctest: +NORMALIZE_WHITESPACE
    ['activation_vjps', 'engine_probe', 'functorch_probe', 'onednn_linear']

Switch paths off for the whole process with the environment variable
``EBMS_DISABLE_FAST_PATHS`` (read at import): ``1``/``true``/``yes``/``all``
disables every path, a comma-separated list of names disables those
(``EBMS_DISABLE_FAST_PATHS=onednn_linear``). Inside a process,
:func:`disabled` is a context manager doing the same (tests use it to run the
public route and compare).
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import TypeVar

import torch

__all__ = ["ENV_VAR", "PATHS", "FastPath", "decide", "disabled", "enabled", "env_disables", "switched_off", "fast_paths", "record"]

#: Environment variable that switches fast paths off at import.
ENV_VAR = "EBMS_DISABLE_FAST_PATHS"

#: Every path this module knows about.
PATHS = ("onednn_linear", "functorch_probe", "engine_probe", "activation_vjps")

_ALL_WORDS = {"1", "true", "yes", "all", "on"}

T = TypeVar("T")


def _env_disabled() -> frozenset[str]:
    """Paths named off by :data:`ENV_VAR` (unknown names are ignored: nothing to disable)."""
    raw = os.environ.get(ENV_VAR, "").strip().lower()
    if not raw or raw in {"0", "false", "no", "off", "none"}:
        return frozenset()
    if raw in _ALL_WORDS:
        return frozenset(PATHS)
    return frozenset(part.strip() for part in raw.split(",") if part.strip())


@dataclass(frozen=True)
class FastPath:
    """The import-time decision for one path.

    Attributes:
        name: one of :data:`PATHS`.
        available: the private API exists and passed its self-check (and the
            environment did not switch it off).
        reason: why it is off (empty when available).
        torch_version: ``torch.__version__`` the decision was made under.
    """

    name: str
    available: bool
    reason: str
    torch_version: str

    @property
    def active(self) -> bool:
        """Available and not switched off by :func:`disabled` right now."""
        return enabled(self.name)


_ENV_OFF = _env_disabled()
_DECISIONS: dict[str, FastPath] = {}
_RUNTIME_OFF: set[str] = set()


def env_disables(name: str) -> bool:
    """Whether :data:`ENV_VAR` switched ``name`` off (modules ask before probing)."""
    return name in _ENV_OFF


def decide(name: str, probe: Callable[[], tuple[T | None, str]]) -> tuple[T | None, str]:
    """``probe()`` (the private API and why it is unusable, ``""`` if usable), unless
    :data:`ENV_VAR` switched ``name`` off: then the API is not even touched."""
    if env_disables(name):
        return None, f"switched off by {ENV_VAR}"
    return probe()


def record(name: str, reason: str) -> bool:
    """Store the decision for ``name`` (``reason`` empty: available); returns availability."""
    if name not in PATHS:
        raise ValueError(f"name: expected one of {', '.join(PATHS)}; got {name!r}")
    if env_disables(name):
        reason = f"switched off by {ENV_VAR}"
    _DECISIONS[name] = FastPath(name, not reason, reason, torch.__version__)
    return not reason


def enabled(name: str) -> bool:
    """``name`` passed its import-time check and is not switched off now (cheap: two lookups)."""
    d = _DECISIONS.get(name)
    return d is not None and d.available and name not in _RUNTIME_OFF


def switched_off(name: str) -> bool:
    """``name`` is switched off right now by :func:`disabled` (whatever the import-time check said)."""
    return name in _RUNTIME_OFF


def fast_paths() -> dict[str, FastPath]:
    """The decision for every path, by name (imports the modules that decide).

    Example:
        >>> from ebms.nets._fastpaths import fast_paths
        >>> all(p.available or p.reason for p in fast_paths().values())
        True
    """
    import ebms.nets._activations  # noqa: F401  (registers activation_vjps)
    import ebms.nets._linear  # noqa: F401  (registers the others)

    return {n: _DECISIONS[n] for n in PATHS}


@contextlib.contextmanager
def disabled(names: Iterable[str] | None = None) -> Iterator[None]:
    """Run the public route for ``names`` (default: every path) inside the block.

    Not thread-safe: meant for tests and comparisons, not for toggling in
    production code (use :data:`ENV_VAR` there).

    Raises:
        ValueError: an unknown path name.
    """
    chosen = set(PATHS if names is None else names)
    unknown = chosen - set(PATHS)
    if unknown:
        raise ValueError(f"names: expected a subset of {', '.join(PATHS)}; got {sorted(unknown)}")
    added = chosen - _RUNTIME_OFF
    _RUNTIME_OFF.update(added)
    try:
        yield
    finally:
        _RUNTIME_OFF.difference_update(added)
