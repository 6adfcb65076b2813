r"""Test log-likelihood of a trained energy, with an honest :math:`\log Z`: the evaluation pipelines.

The mean test log-likelihood is :math:`-\overline{E(x)} - \log Z`; everything hard is
:math:`\log Z`.

**Points in the plane.** :func:`grid_evaluation` normalises the energy on a grid
(:func:`~ebms.estimators.grid_log_likelihood`, with its own error on :math:`\log Z` and the mass
it may cut off at the edges) and puts the true density's NLL on the same points beside it when
the data set has one. In more dimensions no exact :math:`\log Z` is available this way: the
report holds the mean test and train energies (an overfitting check, not a likelihood).

**Binary data.** :func:`binary_log_likelihood` takes :math:`\log Z` from one or two sources:

* **exact** (:func:`exact_log_z`): a model's closed form (an RBM's sum over its smaller layer)
  or enumeration of at most :data:`~ebms.spaces.MAX_EXACT_STATES` states (:func:`enumerated_log_z`);
* **AIS** (Neal, 2001) along the path :func:`ais_path` picks from a tractable base to the model —
  the model's own path where it has one (an RBM's base-rate path, Salakhutdinov & Murray, 2008),
  else a :class:`~ebms.estimators.GeometricPath` from the data's independent-pixel marginals with a
  discrete kernel — over the schedule of :func:`ais_schedule`; with model samples to start from,
  **reverse AIS** as well (Burda, Grosse & Salakhutdinov, 2015), whose estimate is a stochastic
  upper bound: the two give a bracket.

With both, the exact value is the one reported and AIS is printed beside it (a check of the
estimator). The result is a :class:`DiscreteEvalReport`, whose :meth:`~DiscreteEvalReport.lines`
say in words what was measured, and what is not a bound (a reverse estimate clearly below the
forward one means its start states were not model samples yet).

Cost: the grid ``resolution^2`` energies; exact enumeration ``2^D`` energies; AIS
``chains x temperatures`` kernel steps (twice with reverse AIS).
"""

from __future__ import annotations

import time
import warnings
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import torch
from torch import Tensor, nn

from ebms.capabilities import AnnealingPath, NormalisedModel, SupportsAISPath, SupportsLogPartition
from ebms.estimators._base import Estimate
from ebms.estimators.ais import ais, ais_bracket, salakhutdinov_betas, sigmoid_betas
from ebms.estimators.exact import exact_log_partition
from ebms.estimators.grid import EDGE_TOL, grid_log_likelihood, true_log_likelihood
from ebms.estimators.likelihood import log_likelihood_report
from ebms.estimators.paths import GeometricPath
from ebms.samplers import Sampler
from ebms.spaces import MAX_EXACT_STATES, DiscreteSpace

if TYPE_CHECKING:
    from ebms.data import ToyDataset

__all__ = ["DiscreteEvalReport", "GridEvalReport", "ais_path", "ais_schedule", "binary_log_likelihood",
           "enumerated_log_z", "exact_log_z", "grid_evaluation"]

#: the length of Salakhutdinov & Murray's published MNIST schedule (:func:`ais_schedule`).
PUBLISHED_TEMPERATURES = 14500


@dataclass(frozen=True)
class GridEvalReport:
    """Grid test NLL of the model beside the true density's NLL (nats per point).

    In more than two dimensions the report holds the mean test and train energies instead and
    ``model_nll`` is ``None``.
    """

    step: int
    model_nll: float | None
    model_nll_stderr: float | None
    log_z_error: float | None
    true_nll: float | None
    n_test: int
    dim: int = 2
    test_energy: float | None = None
    train_energy: float | None = None
    edge_mass: float | None = None  # model mass in the grid's outermost cells (0: nothing cut off)

    def lines(self) -> list[str]:
        """The report in words, one finding per line."""
        if self.model_nll is None:
            return [
                f"mean energy, step {self.step}: test {self.test_energy:.4f}, train {self.train_energy:.4f} "
                f"[n_test={self.n_test}]",
                f"no exact test NLL for D={self.dim}: the grid evaluator needs 2-D data",
            ]
        out = [f"test NLL (grid-normalised), step {self.step}: {self.model_nll:.4f} ± {self.model_nll_stderr:.4f} nats"
               f"  [n={self.n_test}, grid log Z error {self.log_z_error:.1e}]"]
        if self.edge_mass is not None and self.edge_mass > EDGE_TOL:
            out.append(f"warning: {self.edge_mass:.1e} of the model's mass sits in the grid's outermost cells; "
                       "log Z misses what lies beyond, so this NLL is optimistic")
        if self.true_nll is not None:
            out.append(f"true density NLL on the same points:       {self.true_nll:.4f} nats"
                       f"  (gap {self.model_nll - self.true_nll:+.4f})")
        return out


def grid_evaluation(model: nn.Module, x_test: Tensor, bounds: Any, *, x_train: Tensor, resolution: int = 400,
                    step: int = 0, density: ToyDataset | None = None) -> GridEvalReport:
    """Test NLL of ``model`` on ``x_test (n, D)``: grid-normalised in 2-D, mean energies otherwise.

    Args:
        model: the energy ``E(x) -> (B,)``.
        x_test: held-out points.
        bounds: the grid's box, ``((low, high), (low, high))`` (2-D only).
        x_train: training points, for the mean train energy beside the test one when ``D != 2``.
        resolution: grid cells per side.
        step: the training step, for the report.
        density: a toy set with a closed-form density: its NLL on ``x_test`` goes beside the model's.

    Returns:
        :class:`GridEvalReport` (an edge-mass warning goes into it rather than to ``warnings``).
    """
    if x_test.shape[1] != 2:
        with torch.no_grad():
            e_test, e_train = float(model(x_test).mean()), float(model(x_train).mean())
        return GridEvalReport(step=step, model_nll=None, model_nll_stderr=None, log_z_error=None, true_nll=None,
                              n_test=x_test.shape[0], dim=x_test.shape[1], test_energy=e_test, train_energy=e_train)
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # the edge mass goes into the report instead
        ll = grid_log_likelihood(model, x_test, bounds, resolution=resolution)
        true = None if density is None or not density.has_density else -true_log_likelihood(density, x_test).estimate
    return GridEvalReport(step=step, model_nll=-ll.estimate, model_nll_stderr=ll.stderr,
                          log_z_error=float(ll.settings.get("log_z_error", 0.0)),
                          edge_mass=float(ll.settings.get("grid", {}).get("edge_mass", 0.0)), true_nll=true,
                          n_test=x_test.shape[0])


@dataclass(frozen=True)
class DiscreteEvalReport:
    """Test log-likelihood (nats per example) from an exact and/or AIS log Z.

    ``test_ll`` uses ``log_z`` (``log_z_method``: ``"exact"`` when known, else ``"AIS"``); the
    ``ais_*`` fields hold the AIS estimate beside it, ``ais_lower``/``ais_upper`` the
    AIS/reverse-AIS bracket on log Z and ``ll_lower``/``ll_upper`` the test log-likelihood it
    gives. ``test_ll is None``: no exact log Z and no AIS asked for.
    """

    step: int
    n_test: int
    dim: int
    test_ll: float | None
    test_ll_stderr: float | None
    log_z: float | None
    log_z_method: str
    exact_log_z: float | None = None
    ais_log_z: float | None = None
    ais_log_z_stderr: float | None = None
    ais_lower: float | None = None
    ais_upper: float | None = None
    ais_test_ll: float | None = None
    ais_test_ll_stderr: float | None = None
    ll_lower: float | None = None
    ll_upper: float | None = None
    settings: dict[str, Any] = field(default_factory=dict)

    def lines(self) -> list[str]:
        """The report in words, one finding per line."""
        if self.test_ll is None:
            return [f"no exact log Z at step {self.step} ({self.dim} binary units, too many states to sum); "
                    "estimate the test log-likelihood with `ebms eval --run DIR --ais`"]
        out = [f"test log-likelihood, step {self.step}: {self.test_ll:.2f} ± {self.test_ll_stderr:.2f} nats "
               f"[n={self.n_test}, log Z {self.log_z_method}: {self.log_z:.4f}]"]
        if self.ais_log_z is not None:
            out.append(f"AIS log Z: {self.ais_log_z:.4f} ± {self.ais_log_z_stderr:.4f}"
                       + (f" (exact {self.exact_log_z:.4f}, error {self.ais_log_z - self.exact_log_z:+.4f})"
                          if self.exact_log_z is not None else ""))
            if self.ais_test_ll is not None and self.exact_log_z is not None:
                out.append(f"test log-likelihood with AIS log Z: {self.ais_test_ll:.2f} ± {self.ais_test_ll_stderr:.2f} nats")
        if self.ais_lower is not None and self.ais_upper is not None:
            a = self.settings.get("ais_settings", {})
            if "reverse" in a:
                noise = (a["forward_stderr"] ** 2 + a["reverse_stderr"] ** 2) ** 0.5
                note = ""
                if a["gap"] < -2 * noise:
                    note = (" - reverse below forward by more than 2 standard errors: the chains that start reverse "
                            "AIS are not model samples yet (raise eval.sample_steps); the upper end is not a bound")
                elif a["crossed"]:
                    note = ", crossed within noise"
                out.append(f"reverse AIS log Z: {a['reverse']:.4f} ± {a['reverse_stderr']:.4f}"
                           f" (reverse - forward = {a['gap']:+.4f}{note})")
            out.append(f"AIS/reverse-AIS log Z bracket (each end widened by {a.get('z', 2.0):g} stderr): "
                       f"[{self.ais_lower:.4f}, {self.ais_upper:.4f}]"
                       f" -> test log-likelihood in [{self.ll_lower:.2f}, {self.ll_upper:.2f}]")
        return out


def ais_schedule(n_temperatures: int) -> Tensor:
    """Inverse temperatures ``0 = β_0 < ... < β_K = 1``: Salakhutdinov & Murray's published MNIST
    schedule for ``K = 14500`` (:func:`~ebms.estimators.salakhutdinov_betas`), else a sigmoid
    schedule of ``K`` steps (:func:`~ebms.estimators.sigmoid_betas`)."""
    return salakhutdinov_betas() if n_temperatures == PUBLISHED_TEMPERATURES else sigmoid_betas(n_temperatures)


def enumerated_log_z(model: nn.Module, space: DiscreteSpace, *, progress: bool = False) -> Estimate | None:
    """Exact log Z of ``model`` by enumerating ``space``, or ``None`` beyond ``MAX_EXACT_STATES`` states
    (``progress``: a progress bar over the enumeration's chunks)."""
    if space.num_states > MAX_EXACT_STATES:
        return None
    return exact_log_partition(model, space, progress=progress)


def exact_log_z(model: nn.Module, space: DiscreteSpace, *, progress: bool = False) -> Estimate | None:
    r"""The exact :math:`\log Z` of ``model`` on ``space`` where one is feasible, else ``None``.

    A model with its own closed form (:class:`~ebms.capabilities.SupportsLogPartition`, e.g. a
    :class:`~ebms.models.BernoulliRBM` summing its smaller layer) gives it, or ``None`` when it
    refuses with ``ValueError`` (both layers too wide to sum). Any other model is enumerated
    (:func:`enumerated_log_z`): ``None`` beyond :data:`~ebms.spaces.MAX_EXACT_STATES` states.

    Args:
        model: the energy ``E(x) -> (B,)``.
        space: the discrete space ``x`` lives in (enumerated only for a model without a closed form).
        progress: show a progress bar while enumerating.

    Returns:
        An exact :class:`~ebms.estimators.Estimate` (``stderr`` 0, ``settings["method"]`` ``"exact"``
        for a closed form), or ``None``.

    Cost: the model's closed form (``2^min(D, H)`` terms for an RBM), else ``|space|`` energies.
    """
    if not isinstance(space, DiscreteSpace):
        raise TypeError(f"space: expected a DiscreteSpace (e.g. ebms.spaces.Binary); got {type(space).__name__}")
    if not isinstance(model, SupportsLogPartition):
        return enumerated_log_z(model, space, progress=progress)
    try:
        value = float(model.log_partition())
    except ValueError:  # too many terms to sum (an RBM with both layers wide)
        return None
    return Estimate(value, exact=True, settings={"method": "exact"})


def ais_path(model: nn.Module, base: NormalisedModel, kernel: Sampler, *,
             own_path_args: tuple[Any, ...] = ()) -> AnnealingPath:
    r"""The path AIS anneals along from a tractable base to ``model``.

    A model that builds its own path (:class:`~ebms.capabilities.SupportsAISPath`) gets it:
    ``model.ais_path(*own_path_args)`` (a :class:`~ebms.models.BernoulliRBM` sums its hidden
    units out analytically, Salakhutdinov & Murray, 2008, and takes the base logits ``(D,)``,
    best the training data's :func:`~ebms.models.rbm.marginal_logits`). Any other energy gets the
    geometric path :math:`\log f_\beta = (1-\beta)\log p_0 - \beta E` from ``base`` with
    ``kernel`` as the transition (:class:`~ebms.estimators.GeometricPath`).

    Args:
        model: the target energy.
        base: the normalised start :math:`p_0` of a geometric path, e.g. the data's
            independent-pixel marginals ``IndependentBernoulli.from_data(x_train)``.
        kernel: the Markov kernel of a geometric path (a discrete one for binary data).
        own_path_args: the arguments of the model's own ``ais_path`` (ignored without one).

    Returns:
        An :class:`~ebms.capabilities.AnnealingPath` for :func:`~ebms.estimators.ais` and
        :func:`binary_log_likelihood`.
    """
    if not isinstance(own_path_args, tuple):
        raise TypeError(f"own_path_args: expected a tuple of arguments for the model's ais_path; "
                        f"got {type(own_path_args).__name__}")
    if isinstance(model, SupportsAISPath):
        return model.ais_path(*own_path_args)
    return GeometricPath(model, base, kernel)


def _jsonable(d: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in d.items() if isinstance(v, (int, float, str, bool, type(None)))}


def binary_log_likelihood(model: nn.Module, x_test: Tensor, *, step: int = 0, exact: Estimate | None = None,
                          path: Any = None, betas: Tensor | None = None, chains: int = 100,
                          reverse_from: Tensor | None = None, generator: torch.Generator | None = None,
                          progress: bool = False) -> DiscreteEvalReport:
    """Mean test log-likelihood of ``model`` on ``x_test (n, D)``, log Z exact and/or by AIS.

    Args:
        model: the energy ``E(x) -> (B,)``.
        x_test: held-out binary data, ``n >= 2`` rows.
        step: the training step, for the report.
        exact: the exact log Z when known (a closed form, or :func:`enumerated_log_z`).
        path: an AIS path (see :mod:`ebms.estimators.ais`); given, AIS runs beside ``exact``.
        betas: the AIS schedule (default ``ais_schedule(14500)``).
        chains: forward AIS chains.
        reverse_from: model samples ``(m, D)`` to start reverse AIS from (a bracket); ``None``:
            forward AIS only.
        generator: the AIS chains' randomness.
        progress: show progress bars.

    Returns:
        :class:`DiscreteEvalReport`; ``test_ll is None`` when neither ``exact`` nor ``path`` is given.
    """
    est: Estimate | None = None
    settings: dict[str, Any] = {"n_test": x_test.shape[0]}
    if path is not None:
        betas = ais_schedule(PUBLISHED_TEMPERATURES) if betas is None else betas
        t0 = time.perf_counter()
        with torch.no_grad():
            if reverse_from is not None:
                est = ais_bracket(path, chains, betas, reverse_from, generator=generator, progress=progress)
            else:
                est = ais(path, chains, betas, generator=generator, progress=progress).estimate
        settings.update(ais_chains=chains, ais_temperatures=len(betas) - 1,
                        ais_seconds=round(time.perf_counter() - t0, 2), ais_settings=_jsonable(est.settings))
    primary = exact if exact is not None else est
    if primary is None:
        return DiscreteEvalReport(step=step, n_test=x_test.shape[0], dim=x_test[0].numel(), test_ll=None,
                                  test_ll_stderr=None, log_z=None, log_z_method="none")
    rep = log_likelihood_report(model, x_test, primary)
    ais_rep = log_likelihood_report(model, x_test, est) if est is not None else None
    return DiscreteEvalReport(
        step=step, n_test=x_test.shape[0], dim=x_test[0].numel(), test_ll=rep.estimate, test_ll_stderr=rep.stderr,
        log_z=primary.estimate, log_z_method="exact" if exact is not None else "AIS",
        exact_log_z=None if exact is None else exact.estimate,
        ais_log_z=None if est is None else est.estimate, ais_log_z_stderr=None if est is None else est.stderr,
        ais_lower=None if est is None else est.lower, ais_upper=None if est is None else est.upper,
        ais_test_ll=None if ais_rep is None else ais_rep.estimate,
        ais_test_ll_stderr=None if ais_rep is None else ais_rep.stderr,
        ll_lower=None if ais_rep is None else ais_rep.lower, ll_upper=None if ais_rep is None else ais_rep.upper,
        settings=settings,
    )
