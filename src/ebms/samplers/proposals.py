"""Independent-site proposals for the Metropolis independence sampler (moved).

:class:`IndependentCategorical` now lives in :mod:`ebms.distributions`, with every normalised model
that :class:`~ebms.samplers.metropolis.MetropolisIndependence` can propose from; the name still
imports from here.
"""

from __future__ import annotations

from ebms.distributions import IndependentCategorical

__all__ = ["IndependentCategorical"]
