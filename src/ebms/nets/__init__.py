"""Networks that return energies (``(B,)``) or logits. Architectures only, no training logic.

* :class:`MLPEnergy` — fully connected energy for vectors (inputs are
  flattened), with an analytic input gradient for fast gradient samplers.
* :class:`ConvEnergy` — residual conv energy for images, GroupNorm (never
  BatchNorm: energies must not depend on the rest of the batch).
* :class:`GaussianEnergy`, :class:`GaussianMixtureEnergy` — closed-form
  references with known normalisers.

Activations are :class:`Activation` objects; names (``"silu"``, ``"tanh"``,
...) are resolved once by :func:`resolve_activation`.
"""

from ebms.nets._activations import ACTIVATIONS, Activation, resolve_activation
from ebms.nets.conv import ConvEnergy
from ebms.nets.gaussian import GaussianEnergy, GaussianMixtureEnergy
from ebms.nets.mlp import MLPEnergy

__all__ = [
    "ACTIVATIONS",
    "Activation",
    "ConvEnergy",
    "GaussianEnergy",
    "GaussianMixtureEnergy",
    "MLPEnergy",
    "resolve_activation",
]
