r"""Test log-likelihood reports: the mean log-likelihood of held-out data with an honest standard error.

For test points :math:`x_1..x_n` and an estimate :math:`\widehat{\log Z}`,

.. math::  \widehat{\mathrm{LL}} = -\frac1n\sum_i E(x_i) - \widehat{\log Z}, \qquad
           \mathrm{se}^2 = \frac{s^2_{-E}}{n} + \mathrm{se}^2_{\log Z},

where :math:`s^2_{-E}` is the sample variance (``n - 1``) of :math:`-E(x_i)` over the test points: the
first term is the sampling error of the test-set mean (as an estimate of the expected
log-likelihood under the data distribution), the second the error of :math:`\log Z`, independent of
the test set. When the :math:`\log Z` estimate carries a bracket (e.g.
:func:`ebms.estimators.ais.ais_bracket`), it maps to a bracket on the log-likelihood
``[-mean E - upper, -mean E - lower]`` (the forward-AIS lower bound on :math:`\log Z` gives the
*optimistic* end).

Reference: Salakhutdinov & Murray (2008), "On the quantitative analysis of deep belief networks",
ICML (test log-likelihoods of RBMs from AIS estimates of :math:`\log Z`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import Tensor

from ebms._checks import check_finite, check_int, check_tensor
from ebms.capabilities import HasSpace
from ebms.energy import EnergyLike, evaluate
from ebms.estimators._base import Estimate
from ebms.samplers import energy_dtype
from ebms.spaces import Space

__all__ = ["LogLikelihoodReport", "log_likelihood_report"]


@dataclass(frozen=True)
class LogLikelihoodReport(Estimate):
    """An :class:`~ebms.estimators.Estimate` of the mean test log-likelihood (nats per example).

    Same fields as :class:`Estimate`; ``settings`` holds ``n_test``, ``mean_energy``,
    ``energy_std`` (of the test energies), ``log_z``, ``log_z_stderr``, ``log_z_method`` and
    ``log_z_lower``/``log_z_upper`` when known. ``str()`` reads e.g.
    ``-86.30 ± 0.42 nats (n=10000; AIS log Z bracket [451.20, 451.45] -> LL in [-86.43, -86.18])``.
    """

    def __str__(self) -> str:
        s = self.settings
        head = f"{self.estimate:.2f} ± {self.stderr:.2f} nats (n={s.get('n_test', '?')}"
        method = s.get("log_z_method", "")
        if s.get("log_z_exact"):
            return head + "; exact log Z)"
        if self.lower is not None and self.upper is not None:
            return (head + f"; {method} log Z bracket [{s['log_z_lower']:.2f}, {s['log_z_upper']:.2f}]"
                    f" -> LL in [{self.lower:.2f}, {self.upper:.2f}])")
        return head + f"; {method} log Z {s['log_z']:.2f} ± {s['log_z_stderr']:.2f})"


def _in_energy_dtype(energy: EnergyLike, x: Tensor) -> Tensor:
    """A float ``x`` in the dtype of the energy's parameters (unchanged when that is unknown or already so):
    data only feed the model, whose precision sets the result's."""
    want = energy_dtype(energy) if x.is_floating_point() else None
    return x if want is None or x.dtype == want else x.to(want)


def _log_z_label(log_z: Estimate) -> str:
    m = str(log_z.settings.get("method", "estimated"))
    return "AIS/reverse-AIS" if m == "ais bracket" else m.replace(" ais", " AIS").replace("ais", "AIS")


def log_likelihood_report(
    energy: EnergyLike,
    x_test: Tensor,
    log_z: Estimate | float,
    *,
    batch_size: int = 4096,
) -> LogLikelihoodReport:
    r"""Mean test log-likelihood :math:`-\overline{E(x)} - \log Z` with its standard error (module docstring).

    Args:
        energy: ``E: (B, *event) -> (B,)``; if it has a ``space`` attribute, ``x_test`` is validated
            against it (e.g. non-binary data for a Bernoulli RBM is an error).
        x_test: held-out data ``(n, *event)``, ``n >= 2``; a float tensor in another dtype than the
            energy's parameters is cast to theirs (as :func:`~ebms.estimators.grid_log_likelihood` does).
        log_z: the :math:`\log Z` :class:`Estimate` (exact, IS, AIS or an AIS bracket), or a number
            taken as exact.
        batch_size: test points per energy call.

    Returns:
        :class:`LogLikelihoodReport` with ``stderr`` combining the test-set and :math:`\log Z` errors
        and ``lower``/``upper`` when ``log_z`` has a bracket.

    Example:
        >>> import torch
        >>> from ebms.energy import from_fn
        >>> from ebms.estimators import Estimate
        >>> rep = log_likelihood_report(from_fn(lambda x: x.sum(-1)), torch.tensor([[1.0], [3.0]]), Estimate(2.0, 0.5))
        >>> rep.estimate, round(rep.stderr, 4)
        (-4.0, 1.118)
    """
    check_tensor(x_test, "x_test", min_dim=1)
    if x_test.shape[0] < 2:
        raise ValueError(f"x_test: expected at least 2 test points (for a standard error); got shape {tuple(x_test.shape)}")
    check_int(batch_size, "batch_size", minimum=1)
    space = energy.space if isinstance(energy, HasSpace) else None
    if isinstance(space, Space):
        space.validate(x_test, "x_test")
    if not isinstance(log_z, Estimate):
        try:
            log_z = Estimate(float(log_z), exact=True, settings={"method": "given"})
        except (TypeError, ValueError):
            raise TypeError(f"log_z: expected an Estimate or a finite number; got {log_z!r}") from None
    x_test = _in_energy_dtype(energy, x_test)
    with torch.no_grad():
        e = torch.cat([evaluate(energy, x_test[i : i + batch_size]).double()
                       for i in range(0, x_test.shape[0], batch_size)])
    check_finite(e, "energy(x_test)")
    n = e.shape[0]
    mean_e, var_e = float(e.mean()), float(e.var(unbiased=True))
    value = -mean_e - log_z.estimate
    stderr = math.sqrt(var_e / n + log_z.stderr**2)
    lower = upper = None
    if log_z.lower is not None and log_z.upper is not None:
        lower, upper = -mean_e - log_z.upper, -mean_e - log_z.lower
    settings = {"n_test": n, "mean_energy": mean_e, "energy_std": math.sqrt(var_e), "log_z": log_z.estimate,
                "log_z_stderr": log_z.stderr, "log_z_method": _log_z_label(log_z), "log_z_exact": log_z.exact,
                "log_z_lower": log_z.lower, "log_z_upper": log_z.upper}
    return LogLikelihoodReport(estimate=value, stderr=stderr, lower=lower, upper=upper, ess=float(n),
                               exact=False, settings=settings)
