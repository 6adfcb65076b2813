"""ebms — a PyTorch toolkit for energy-based models.

Sign convention everywhere: ``energy(x) -> (B,)`` and ``p(x) ∝ exp(-E(x))``.
Layers: data → energy → sampler → objective → trainer → estimators → report.

``ebms.load_run(path)`` gives back a run folder made by ``ebms train`` (config, model, data,
sampler, step); see :mod:`ebms.runs`. It is imported on first use, so ``import ebms`` stays light.
"""

from typing import Any

__version__ = "0.1.0"

__all__ = ["Run", "__version__", "load_run"]


def __getattr__(name: str) -> Any:
    if name in ("Run", "load_run"):
        from ebms import runs

        return getattr(runs, name)
    raise AttributeError(f"module 'ebms' has no attribute {name!r}")
