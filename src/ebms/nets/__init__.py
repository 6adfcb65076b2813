"""Networks that return energies (``(B,)``) or logits. Architectures only, no training logic."""

from ebms.nets.gaussian import GaussianEnergy, GaussianMixtureEnergy

__all__ = ["GaussianEnergy", "GaussianMixtureEnergy"]
