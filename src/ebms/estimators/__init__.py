"""Estimators: numbers about a fixed model, each with its uncertainty.

Every stochastic estimate is returned as an :class:`Estimate`, never a bare
float::

    est = mcmc_mean(chains)          # chains: (S draws, C chains)
    est.estimate, est.stderr, est.ess, est.settings
    print(est)                       # "0.4981 ± 0.0042"

* ``estimate`` is the point value; ``stderr`` its standard error (0 for
  exact computations, flagged ``exact=True``, and for an MCMC mean of draws
  that are all equal); ``lower``/``upper`` a bracket
  when the method gives one; ``ess`` the effective sample size behind it;
  ``settings`` the parameters used.
* Diagnostics that describe chains rather than a model (:func:`autocorrelation`,
  :func:`effective_sample_size`, :func:`split_rhat`) return tensors with one
  value per diagnosed quantity. Chains are shaped ``(S, C)`` or ``(S, C, D)``
  (draws first, as :meth:`ebms.samplers.Sampler.run` stacks them).
"""

from ebms.estimators._base import Estimate
from ebms.estimators.diagnostics import autocorrelation, effective_sample_size, mcmc_mean, split_rhat
from ebms.estimators.grid import grid_log_likelihood, grid_log_partition, true_log_likelihood

__all__ = [
    "Estimate",
    "autocorrelation",
    "effective_sample_size",
    "grid_log_likelihood",
    "grid_log_partition",
    "mcmc_mean",
    "split_rhat",
    "true_log_likelihood",
]
