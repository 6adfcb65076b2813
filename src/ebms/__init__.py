"""ebms — a PyTorch toolkit for energy-based models.

Sign convention everywhere: ``energy(x) -> (B,)`` and ``p(x) ∝ exp(-E(x))``.
Layers: data → energy → sampler → objective → trainer → estimators → report.
"""

__version__ = "0.1.0"

__all__ = ["__version__"]
