"""Private: the scikit-learn side of :class:`~ebms.models.rbm_estimator.RBMEstimator`: input checks
(scikit-learn's ``validate_data`` when installed, equivalent checks without it), training rows and
their epoch stream, the verbose progress bar, the constructor-argument protocol (``get_params`` /
``set_params`` / ``repr``), and the ``check_estimator`` checks that do not apply.
"""

from __future__ import annotations

import inspect
import numbers
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

import numpy as np
import torch
from torch import Tensor

from ebms._checks import check_int
from ebms._progress import progress_bar
from ebms.train import Callback, Trainer

if TYPE_CHECKING:
    from ebms.models.rbm_estimator import RBMEstimator


class _NotFittedError(ValueError, AttributeError):
    """Raised by an unfitted :class:`RBMEstimator` when scikit-learn (and its ``NotFittedError``) is absent."""


def _not_fitted_error(est: object) -> Exception:
    msg = f"This {type(est).__name__} instance is not fitted yet: call fit(X) or partial_fit(X) first"
    try:
        from sklearn.exceptions import NotFittedError
    except ImportError:
        return _NotFittedError(msg)
    return NotFittedError(msg)


def _sklearn_validate_data() -> Callable[..., Any] | None:
    """scikit-learn's ``validate_data`` (>= 1.6) when installed, else ``None`` (imported on first use only)."""
    try:
        from sklearn.utils.validation import validate_data
    except ImportError:
        return None
    return validate_data


def _is_sparse(x: Any) -> bool:
    """A scipy sparse matrix or array (scipy is not imported here: without it loaded, ``x`` is none)."""
    sparse = sys.modules.get("scipy.sparse")
    return sparse is not None and bool(sparse.issparse(x))


def _plain_validate(est: Any, X: Any, *, reset: bool) -> Any:
    """What scikit-learn's ``validate_data`` checks here, for use without scikit-learn (same messages)."""
    if _is_sparse(X):
        x = X.tocsr()
        values = x.data
    else:
        x = np.asarray(X)
        values = x
    if x.dtype.kind not in "biuf":
        raise ValueError(f"X: expected a real numeric array; got dtype {x.dtype}")
    x = x.astype(np.float32 if x.dtype == np.float32 else np.float64, copy=False)
    if x.ndim != 2:
        raise ValueError(f"X: expected a 2-D array (n_samples, n_features); got shape {tuple(x.shape)}")
    if x.shape[0] < 1 or x.shape[1] < 1:
        raise ValueError(f"X: expected at least one sample and one feature; got shape {tuple(x.shape)}")
    if not np.isfinite(values).all():
        raise ValueError("X: expected finite values; got NaN or infinity")
    if reset:
        est.n_features_in_ = x.shape[1]
    elif x.shape[1] != est.n_features_in_:
        raise ValueError(
            f"X has {x.shape[1]} features, but {type(est).__name__} is expecting {est.n_features_in_} features as input."
        )
    return x


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


def _int_param(value: Any, name: str, minimum: int) -> int:
    if isinstance(value, numbers.Integral) and not isinstance(value, bool):
        value = int(value)  # numpy integers from a parameter grid
    return check_int(value, name, minimum=minimum)


class _Rows:
    """A validated dense array or CSR matrix as float32 training rows (sparse rows densified per batch)."""

    def __init__(self, x: Any) -> None:
        self.sparse = _is_sparse(x)
        self.n, self.n_features = x.shape
        if self.sparse:
            self.csr = x.astype(np.float32)
            self.dense = torch.empty(0)
        else:
            arr = np.ascontiguousarray(x, dtype=np.float32)
            self.dense = torch.from_numpy(arr if arr.flags.writeable else arr.copy())

    def take(self, idx: Tensor) -> Tensor:
        if self.sparse:
            return torch.from_numpy(self.csr[idx.numpy()].toarray())
        return self.dense.index_select(0, idx)

    def span(self, start: int, stop: int) -> Tensor:
        return torch.from_numpy(self.csr[start:stop].toarray()) if self.sparse else self.dense[start:stop]

    def column_sums(self) -> Tensor:
        if self.sparse:
            return torch.from_numpy(np.asarray(self.csr.sum(0), dtype=np.float32).ravel())
        return self.dense.sum(0)


class _Epochs:
    """The estimator's data stream: ``n_batches`` near-equal batches per epoch, rows in a new random
    order each epoch (drawn from the trainer's generator, i.e. the estimator's) or in stored order."""

    def __init__(self, rows: _Rows, n_batches: int, *, shuffle: bool) -> None:
        self.rows, self.n_batches, self.shuffle = rows, n_batches, shuffle
        self.parts: list[Tensor] = []

    def __call__(self, batch_size: Any, generator: torch.Generator) -> Tensor:
        if not self.parts:  # a new epoch; gather each batch from a permutation: cache-sized copies
            n = self.rows.n
            order = torch.randperm(n, generator=generator) if self.shuffle else torch.arange(n)
            self.parts = list(torch.tensor_split(order, self.n_batches))[::-1]
        idx = self.parts.pop()
        return self.rows.take(idx) if self.shuffle else self.rows.span(int(idx[0]), int(idx[-1]) + 1)


class _EpochBar(Callback):
    """``verbose=True``: a progress bar over epochs with the reconstruction error of the first 1000 rows."""

    def __init__(self, est: RBMEstimator, rows: _Rows, n_batches: int, n_iter: int) -> None:
        self.est, self.rows, self.n_batches, self.n_iter = est, rows, n_batches, n_iter
        self.bar: Any = None

    def on_fit_start(self, trainer: Trainer) -> None:
        self.bar = progress_bar(total=self.n_iter, desc="RBM", unit="epoch")

    def on_step_end(self, trainer: Trainer, step: int, metrics: dict[str, float]) -> None:
        if step % self.n_batches == 0:
            self.bar.update(1)
            self.bar.set_postfix(recon_error=f"{self.est._recon_error(self.rows.span(0, 1000)):.4f}")

    def on_fit_end(self, trainer: Trainer) -> None:
        self.bar.close()


_P = TypeVar("_P", bound="ConstructorParams")


class ConstructorParams:
    """scikit-learn's parameter protocol for a class whose ``__init__`` stores each argument under its
    own name: ``get_params``, ``set_params`` and a ``repr`` listing the arguments that differ from the
    defaults (what ``clone`` and grid searches use)."""

    @classmethod
    def _param_names(cls) -> list[str]:
        return [n for n in inspect.signature(cls.__init__).parameters if n != "self"]

    def get_params(self, deep: bool = True) -> dict[str, Any]:
        """Constructor arguments by name (scikit-learn's ``clone``/grid-search protocol; no sub-estimators)."""
        return {n: vars(self)[n] for n in self._param_names()}

    def set_params(self: _P, **params: Any) -> _P:
        """Set constructor arguments (checked at the next ``fit``); returns ``self``. Fitted state is kept."""
        valid = self._param_names()
        for key, value in params.items():
            if key not in valid:
                raise ValueError(f"set_params: unknown parameter {key!r} for {type(self).__name__}; valid: {', '.join(valid)}")
            setattr(self, key, value)
        return self

    def __repr__(self) -> str:
        defaults = inspect.signature(type(self).__init__).parameters
        changed = []
        for n in self._param_names():
            v, d = vars(self)[n], defaults[n].default
            same = v is d or (type(v) is type(d) and isinstance(v, (int, float, str)) and v == d)
            if not same:
                changed.append(f"{n}={v!r}")
        return f"{type(self).__name__}({', '.join(changed)})"


#: scikit-learn checks whose data leave [0, 1] (see :func:`sklearn_expected_failed_checks`)
_CHECKS_WITH_DATA_ABOVE_ONE = (
    "check_dict_unchanged",
    "check_dont_overwrite_parameters",
    "check_estimators_dtypes",
    "check_estimators_fit_returns_self",
    "check_estimators_overwrite_params",
    "check_estimators_pickle",
    "check_f_contiguous_array_estimator",
    "check_fit2d_1feature",
    "check_fit2d_1sample",
    "check_fit2d_predict1d",
    "check_fit_check_is_fitted",
    "check_fit_idempotent",
    "check_methods_sample_order_invariance",
    "check_methods_subset_invariance",
    "check_n_features_in",
    "check_n_features_in_after_fitting",
    "check_pipeline_consistency",
    "check_readonly_memmap_input",
    "check_transformer_data_not_an_array",
    "check_transformer_general",
    "check_transformer_preserve_dtypes",
)


#: scikit-learn checks that score data in [0, 1] that is not binary (see :func:`sklearn_expected_failed_checks`)
_CHECKS_SCORING_NON_BINARY_DATA = ("check_fit_score_takes_y",)


def sklearn_expected_failed_checks(estimator: Any) -> dict[str, str]:
    """The scikit-learn ``check_estimator`` checks that do not apply to ``estimator``, with the reason.

    Pass it as ``expected_failed_checks`` to ``sklearn.utils.estimator_checks.check_estimator`` /
    ``parametrize_with_checks``. Empty for ``visible="gaussian"`` (every check applies and passes). For
    Bernoulli visibles, the checks that fit on data with values above 1 (random uniforms times 3, iris,
    blobs: scikit-learn shifts data to a minimum of 0 for ``positive_only`` estimators but does not scale
    it), which the estimator rejects with a one-line ``ValueError`` by design: values above 1 are neither
    binary nor Bernoulli means; and the check that scores uniform draws in [0, 1], which ``score_samples``
    refuses by design (a Bernoulli RBM's log-likelihood is that of binary vectors).
    ``tests/models/test_rbm_sklearn.py`` runs every check on the same data rounded to {0, 1}, where all of
    them pass, and asserts that the plain estimator fails exactly these checks, for these reasons.
    """
    from ebms.models.rbm_estimator import RBMEstimator  # the public module imports this one

    if not isinstance(estimator, RBMEstimator) or estimator.visible != "bernoulli":
        return {}
    above = "fits on data with values above 1, which visible='bernoulli' rejects by design (ValueError)"
    scored = ("scores data in [0, 1] that is not binary, which score_samples with visible='bernoulli' refuses "
              "by design (ValueError)")
    return {**dict.fromkeys(_CHECKS_WITH_DATA_ABOVE_ONE, above), **dict.fromkeys(_CHECKS_SCORING_NON_BINARY_DATA, scored)}
