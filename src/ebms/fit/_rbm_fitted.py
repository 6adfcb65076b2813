"""Private: the read side of a fitted :class:`~ebms.fit.RBMEstimator`, the base class it trains.

Input checks (``X`` validated as scikit-learn would, values in [0, 1] for Bernoulli visibles),
the inference methods (``transform``, ``gibbs``, ``reconstruction_error``, ``pseudo_likelihood``,
``score_samples`` with an exact or AIS ``log Z``, ``score``) run in float64 over chunks of
``_CHUNK_ROWS`` rows, and the fitted attributes in scikit-learn's layout. Training, the constructor
arguments and their checks live in :mod:`ebms.fit.rbm_estimator`.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import torch
from torch import Tensor

from ebms.estimators import Estimate
from ebms.fit._sklearn import (
    ConstructorParams,
    _allocation_error,
    _check_allocatable,
    _check_binary_rows,
    _is_sparse,
    _named_input_error,
    _not_fitted_error,
    _plain_validate,
    _Rows,
    _sklearn_validate_data,
)
from ebms.models.rbm import BernoulliRBM, RBMBase, check_binary
from ebms.spaces import MAX_EXACT_STATES

#: rows per chunk of the inference methods (bounded float64 temporaries; sparse rows densified per chunk)
_CHUNK_ROWS = 4096


class FittedRBM(ConstructorParams):
    """The inference methods and fitted attributes of :class:`~ebms.fit.RBMEstimator` (its base class).

    Reads the constructor arguments ``visible``, ``n_components``, ``ais_chains`` and ``ais_betas``
    and the state that training leaves: ``model_``, ``generator_``, ``base_logits_`` (the AIS
    base-rate model), ``log_partition_`` and ``log_partition_estimate_``.
    """

    n_features_in_: int  # set by fit / the first partial_fit (scikit-learn's validate_data or _plain_validate)
    visible: str
    n_components: int
    ais_chains: int
    ais_betas: Sequence[float] | Tensor | None
    generator_: torch.Generator
    base_logits_: Tensor | None

    def __sklearn_is_fitted__(self) -> bool:
        return "model_" in vars(self)

    # -- data handling ---------------------------------------------------------------------------
    def _fitted_model(self) -> RBMBase:
        model = vars(self).get("model_")
        if model is None:
            raise _not_fitted_error(self)
        return model

    def _input(self, X: Any, *, reset: bool) -> tuple[Any, bool]:
        """``X`` validated (a float32/float64 ndarray or CSR matrix) and whether it came as a torch tensor."""
        is_torch = isinstance(X, Tensor)
        if is_torch:
            t = X.detach().cpu()
            X = (t.double() if t.dtype in (torch.bfloat16, torch.float16) else t).numpy()
        validate = _sklearn_validate_data()
        if validate is None:
            x = _plain_validate(self, X, reset=reset)
        else:
            try:
                x = validate(self, X, reset=reset, accept_sparse="csr", dtype=(np.float64, np.float32))
            except (ValueError, TypeError) as err:
                raise _named_input_error(err) from None
        if self.visible == "bernoulli":
            _check_unit_interval(x)
        return x, is_torch

    def _apply(self, x: Any, fn: Callable[[RBMBase, Tensor], Tensor]) -> Tensor:
        """``fn(model in float64, rows in float64)`` over chunks of ``_CHUNK_ROWS`` rows, concatenated."""
        m64 = copy.deepcopy(self._fitted_model()).double()
        sparse = _is_sparse(x)
        parts = []
        with torch.no_grad():
            for start in range(0, x.shape[0], _CHUNK_ROWS):
                chunk = x[start : start + _CHUNK_ROWS]
                parts.append(fn(m64, torch.tensor(chunk.toarray() if sparse else chunk, dtype=torch.float64)))
        return torch.cat(parts)

    @staticmethod
    def _out(t: Tensor, is_torch: bool, dtype: Any) -> Any:
        arr = t.numpy().astype(dtype, copy=False)
        return torch.from_numpy(arr) if is_torch else arr

    # -- inference ---------------------------------------------------------------------------------
    def _inference_input(self, X: Any) -> tuple[Any, bool]:
        self._fitted_model()
        return self._input(X, reset=False)

    def transform(self, X: Any) -> Any:
        """Hidden probabilities ``p(h = 1 | x)``, ``(n_samples, n_components)``, in ``X``'s float dtype.

        For Bernoulli means ``x`` in [0, 1] this is the mean-field input ``sigma(a + x W)``, as scikit-learn's.
        """
        x, is_torch = self._inference_input(X)
        return self._out(self._apply(x, lambda m, t: m.hidden_probs(t)), is_torch, x.dtype)

    def get_feature_names_out(self, input_features: Any = None) -> np.ndarray:
        """Output feature names ``rbmestimator0 ... rbmestimator{H-1}`` (scikit-learn's convention)."""
        self._fitted_model()
        if input_features is not None:
            names = [str(f) for f in input_features]
            known = vars(self).get("feature_names_in_")
            if len(names) != self.n_features_in_ or (known is not None and names != [str(f) for f in known]):
                raise ValueError(
                    f"input_features: expected {self.n_features_in_} names matching the fitted features; got {names}"
                )
        return np.asarray([f"rbmestimator{i}" for i in range(int(self.n_components))], dtype=object)

    def gibbs(self, v: Any) -> Any:
        """One block Gibbs sweep ``h ~ p(h|v)``, ``v' ~ p(v|h)`` from ``v``, using the estimator's generator."""
        x, is_torch = self._inference_input(v)
        model = self._fitted_model()
        rows = _Rows(x)
        with torch.no_grad():
            out = model.sample_visible(model.sample_hidden(rows.span(0, rows.n), self.generator_), self.generator_)
        return self._out(out, is_torch, x.dtype)

    def _recon_error(self, x: Tensor) -> float:
        model = self._fitted_model()
        with torch.no_grad():
            return float(((model.visible_mean(model.hidden_probs(x)) - x) ** 2).mean())

    def reconstruction_error(self, X: Any) -> float:
        """Mean squared error per entry of the mean-field reconstruction ``E[v | p(h|x)]`` (a health metric only)."""
        x, _ = self._inference_input(X)
        sq = self._apply(x, lambda m, t: ((m.visible_mean(m.hidden_probs(t)) - t) ** 2).sum(-1))
        return float(sq.sum()) / (x.shape[0] * x.shape[1])

    def pseudo_likelihood(self, X: Any) -> Any:
        """Exact pseudo-log-likelihood ``sum_i log p(x_i | x_-i)`` per row (Bernoulli visibles, binary ``X``), float64."""
        model = self._fitted_model()
        if not isinstance(model, BernoulliRBM):
            raise ValueError(f"pseudo_likelihood: defined for visible='bernoulli'; got visible={self.visible!r}")
        x, is_torch = self._input(X, reset=False)
        pll = self._apply(x, lambda m, t: m.pseudo_log_likelihood(check_binary(t, "X")))  # type: ignore[operator]
        return self._out(pll, is_torch, np.float64)

    def score_samples(self, X: Any, log_z: float | str | None = None) -> Any:
        r"""Log-likelihood ``log p(x) = -F(x) - log Z`` per row, float64 ``(n_samples,)``.

        With ``visible="bernoulli"`` the model is a law over binary vectors, so ``X`` must be binary
        (``ValueError`` naming ``X`` otherwise): for Bernoulli means (grey levels in [0, 1], which
        ``fit`` and ``transform`` take) the formula gives no log-likelihood, only a lower bound on the
        expected one :math:`E_{v \sim \mathrm{Bernoulli}(x)} \log p(v)` (Jensen: ``-F`` is convex in
        ``x``); binarise them first (e.g. ``X > 0.5``, or a draw ``rng.random(X.shape) < X``).

        Args:
            X: ``(n_samples, n_features)``; binary for Bernoulli visibles.
            log_z: ``"exact"`` (sum over the smaller layer; at most ``2^25`` terms), ``"ais"`` (annealed
                importance sampling with ``ais_chains`` chains on ``ais_betas``; Bernoulli only; a stochastic
                lower bound on log Z, so the log-likelihoods lean high),
                a number, or ``None``: the cached ``log_partition_`` if any, else exact when feasible, else AIS.
                The value used is stored in ``log_partition_`` / ``log_partition_estimate_``.
        """
        x, is_torch = self._inference_input(X)
        if self.visible == "bernoulli":
            _check_binary_rows(x)
        lz = self._log_z(log_z)
        return self._out(self._apply(x, lambda m, t: -m(t) - lz), is_torch, np.float64)

    def score(self, X: Any, y: Any = None) -> float:
        """Mean log-likelihood of ``X`` (see :meth:`score_samples`: binary ``X`` for Bernoulli visibles); what
        ``GridSearchCV`` maximises by default."""
        return float(self.score_samples(X).mean())

    def _forget_log_z(self) -> None:
        self.log_partition_: float | None = None
        self.log_partition_estimate_: Estimate | None = None

    def _log_z(self, log_z: float | str | None) -> float:
        model = self._fitted_model()
        if log_z is None:
            if self.log_partition_ is not None:
                return self.log_partition_
            log_z = "exact" if model.exact_states() <= MAX_EXACT_STATES else "ais"
        if isinstance(log_z, str):
            if log_z == "exact":
                est = Estimate(model.log_partition(), exact=True, settings={"method": "exact"})
            elif log_z == "ais":
                est = self._ais(model)
            else:
                raise ValueError(f"log_z: expected None, 'exact', 'ais' or a number; got {log_z!r}")
            self.log_partition_, self.log_partition_estimate_ = est.estimate, est
            return est.estimate
        try:
            value = float(log_z)
        except (TypeError, ValueError):
            raise TypeError(f"log_z: expected None, 'exact', 'ais' or a number; got {log_z!r}") from None
        if not math.isfinite(value):
            raise ValueError(f"log_z: expected a finite number; got {log_z!r}")
        return value

    def _ais(self, model: RBMBase) -> Estimate:
        if not isinstance(model, BernoulliRBM):
            raise ValueError(f"log_z: 'ais' is implemented for visible='bernoulli'; got visible={self.visible!r}")
        from ebms.estimators.ais import ais, salakhutdinov_betas

        betas = salakhutdinov_betas() if self.ais_betas is None else self.ais_betas
        n, (d, h) = int(self.ais_chains), model.weight.shape
        what = f"ais_chains: {n} chains of {d} visible and {h} hidden units"
        _check_allocatable(n * (d + h) * 8 * 4, what, "use fewer ais_chains")  # a few float64 (n, D + H) arrays
        try:
            res = ais(model.ais_path(self.base_logits_), n_chains=n, betas=betas, generator=self.generator_)
        except (RuntimeError, MemoryError) as err:
            raise _allocation_error(err, what, "use fewer ais_chains") from None
        return res if isinstance(res, Estimate) else res.estimate

    # -- fitted attributes -------------------------------------------------------------------------
    @property
    def components_(self) -> np.ndarray:
        """Weights ``(n_components, n_features)`` (scikit-learn layout, a copy)."""
        return self._fitted_model().weight.detach().T.numpy().copy()

    @property
    def intercept_hidden_(self) -> np.ndarray:
        """Hidden biases ``(n_components,)`` (a copy)."""
        return self._fitted_model().hidden_bias.detach().numpy().copy()

    @property
    def intercept_visible_(self) -> np.ndarray:
        """Visible biases ``(n_features,)`` (a copy)."""
        return self._fitted_model().visible_bias.detach().numpy().copy()


def _check_unit_interval(x: Any) -> None:
    """Bernoulli visibles take binary data or Bernoulli means: every value in [0, 1]."""
    values = x.data if _is_sparse(x) else x
    if values.size == 0:
        return
    lo, hi = float(values.min()), float(values.max())
    if lo < 0:
        raise ValueError(
            f"X: Negative values in data passed to RBMEstimator: visible='bernoulli' needs values in [0, 1] "
            f"(binary, or Bernoulli means); got min {lo:.4g}; rescale X to [0, 1] or use visible='gaussian'"
        )
    if hi > 1:
        raise ValueError(
            f"X: expected values in [0, 1] for visible='bernoulli' (binary, or Bernoulli means); got max {hi:.4g}; "
            f"rescale X to [0, 1] (e.g. divide by its maximum) or use visible='gaussian'"
        )

