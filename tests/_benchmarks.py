"""A benchmark script as a module, for the benchmark scripts' tests (imported by bare name).

The scripts import their siblings by bare name (``import _common``), so ``benchmarks/`` goes on
``sys.path`` first.
"""

from __future__ import annotations

import importlib
import sys
from pathlib import Path
from types import ModuleType

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"


def bench(name: str) -> ModuleType:
    """``benchmarks/<name>.py`` imported as module ``name``."""
    if str(BENCHMARKS) not in sys.path:
        sys.path.insert(0, str(BENCHMARKS))
    return importlib.import_module(name)
