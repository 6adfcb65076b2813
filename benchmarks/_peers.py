"""The peer libraries of pyproject's ``bench`` extra: the distribution each is installed as and the
module each is imported as, which differ for most of them (``pip install ebmkit``, ``import ebm``).

Distribution names are what pyproject pins, what ``pip`` installs and what
:func:`importlib.metadata.version` takes; module names are what ``import`` and
:func:`importlib.util.find_spec` take. Asking either function with the other kind of name reports
an installed peer as missing. Nothing here imports a peer or torch, so
``benchmarks/run_all.py`` can report before any benchmark starts.
"""

from __future__ import annotations

import importlib.util
from importlib import metadata

__all__ = ["PEER_MODULES", "distribution_of", "installed_version", "missing_peers"]

#: every peer of the ``bench`` extra: distribution name -> top-level import name
PEER_MODULES: dict[str, str] = {
    "torchebm": "torchebm",
    "ebmkit": "ebm",
    "scikit-learn": "sklearn",
    "pytorch-crf": "torchcrf",
    "torch-struct": "torch_struct",
    "python-crfsuite": "pycrfsuite",
    "kenlm": "kenlm",
    "nltk": "nltk",
}


def distribution_of(module: str) -> str | None:
    """The peer distribution providing ``module`` (a dotted name counts by its top package), else ``None``."""
    top = module.split(".")[0]
    return next((dist for dist, mod in PEER_MODULES.items() if mod == top), None)


def installed_version(dist: str) -> str | None:
    """The installed version of distribution ``dist``, or ``None`` when it is not installed."""
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return None


def _findable(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):  # a broken entry in sys.modules
        return False


def missing_peers() -> list[str]:
    """Peers (distribution names) whose module cannot be found, sorted; nothing is imported."""
    return sorted(dist for dist, mod in PEER_MODULES.items() if not _findable(mod))
