"""Estimators: numbers about a fixed model, each with its uncertainty.

log Z: :func:`exact_log_partition` (enumeration, up to ~2^25 states), :func:`importance_log_partition`
(IS with a proposal), :func:`ais` / :func:`reverse_ais` / :func:`ais_bracket` (annealed importance
sampling over any path — :class:`GeometricPath` for any energy and kernel, or a model's own path such
as :meth:`ebms.models.BernoulliRBM.ais_path`), :func:`log_likelihood_report` (test log-likelihood
with standard error); on 2-D data, :func:`grid_log_partition`.

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
from ebms.estimators.ais import (
    AISResult,
    GeometricPath,
    ais,
    ais_across_ranks,
    ais_bracket,
    geometric_betas,
    linear_betas,
    reverse_ais,
    salakhutdinov_betas,
    sigmoid_betas,
)
from ebms.estimators.diagnostics import autocorrelation, effective_sample_size, mcmc_mean, split_rhat
from ebms.estimators.evaluation import (
    DiscreteEvalReport,
    GridEvalReport,
    ais_path,
    ais_schedule,
    binary_log_likelihood,
    enumerated_log_z,
    exact_log_z,
    grid_evaluation,
)
from ebms.estimators.exact import exact_log_partition, exact_log_prob
from ebms.estimators.grid import grid_log_likelihood, grid_log_partition, true_log_likelihood
from ebms.estimators.importance import (
    BernoulliBase,
    CategoricalBase,
    GaussianBase,
    importance_ess,
    importance_log_partition,
)
from ebms.estimators.likelihood import LogLikelihoodReport, log_likelihood_report
from ebms.estimators.residual_log_z import (
    ExactLastStep,
    LogZBounds,
    ResidualPerplexity,
    StepwiseBounds,
    exact_last_step,
    log_z_bounds,
    residual_log_z,
    residual_perplexity,
    stepwise_log_prob_bounds,
)
from ebms.estimators.sequence_log_z import (
    LengthConditionalLM,
    LengthLogZ,
    ais_log_z_per_length,
    importance_log_z_per_length,
    log_z_per_length_across_ranks,
)

__all__ = [
    "ais_path",
    "exact_log_z",
    "AISResult",
    "BernoulliBase",
    "CategoricalBase",
    "DiscreteEvalReport",
    "Estimate",
    "GaussianBase",
    "GeometricPath",
    "GridEvalReport",
    "LengthConditionalLM",
    "LengthLogZ",
    "LogLikelihoodReport",
    "ais",
    "ais_across_ranks",
    "ais_bracket",
    "ais_log_z_per_length",
    "ais_schedule",
    "autocorrelation",
    "binary_log_likelihood",
    "effective_sample_size",
    "enumerated_log_z",
    "exact_log_partition",
    "exact_log_prob",
    "geometric_betas",
    "grid_evaluation",
    "grid_log_likelihood",
    "grid_log_partition",
    "importance_ess",
    "importance_log_partition",
    "importance_log_z_per_length",
    "log_z_per_length_across_ranks",
    "linear_betas",
    "log_likelihood_report",
    "mcmc_mean",
    "reverse_ais",
    "salakhutdinov_betas",
    "sigmoid_betas",
    "split_rhat",
    "true_log_likelihood",
    "ExactLastStep",
    "LogZBounds",
    "ResidualPerplexity",
    "StepwiseBounds",
    "exact_last_step",
    "log_z_bounds",
    "residual_log_z",
    "residual_perplexity",
    "stepwise_log_prob_bounds",
]
