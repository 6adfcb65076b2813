"""Private: the scikit-learn protocol of :class:`~ebms.fit.RBMEstimator`, without the estimator.

Input checks (scikit-learn's ``validate_data`` when installed, equivalent checks without it, and
its errors as one line naming ``X``), the not-fitted error, training rows and their epoch stream,
the constructor-argument protocol (``get_params`` / ``set_params`` / ``repr``), and the checks
that a requested size fits in memory. Nothing here names the estimator, so
:mod:`ebms.fit.rbm_estimator` and its base class's module ``ebms.fit._rbm_fitted`` import this
module and not the other way round.
"""

from __future__ import annotations

import inspect
import numbers
import os
import sys
from collections.abc import Callable
from typing import Any, TypeVar

import numpy as np
import torch
from torch import Tensor

from ebms._checks import check_int


class _NotFittedError(ValueError, AttributeError):
    """Raised by an unfitted estimator when scikit-learn (and its ``NotFittedError``) is absent."""


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


def _named_input_error(err: Exception) -> Exception:
    """scikit-learn's ``validate_data`` error as one line naming ``X`` (same exception type).

    Its first line is kept (the phrases scikit-learn's own checks look for: "Reshape your data",
    "Complex data not supported", "0 feature(s)", "NaN", ...), and a "Reshape your data" advice
    line; the array dump and the long missing-value advice are dropped.
    """
    lines = [ln.strip() for ln in str(err).splitlines() if ln.strip()] or [type(err).__name__]
    first = lines[0][:-1] + "." if lines[0].endswith(":") else lines[0]
    advice = [ln for ln in lines[1:] if ln.startswith("Reshape your data")]
    if first.startswith("X "):  # "X has 3 features, but RBMEstimator is expecting 5 ...": already names X
        return type(err)(" ".join([first, *advice]))
    if "could not convert" in first or "inhomogeneous" in first or "with a sequence" in first:
        first = f"expected a 2-D array of real numbers (n_samples, n_features); {first}"
    elif "contains NaN" in first or "contains infinity" in first:
        first = f"expected finite values; {first}"
    cls = TypeError if isinstance(err, TypeError) else ValueError
    return cls(" ".join([f"X: {first}", *advice]))


def _check_binary_rows(x: Any) -> None:
    """``X`` (a validated ndarray or CSR matrix) holds zeros and ones only: what ``score_samples`` of Bernoulli
    visibles scores (log-likelihoods of binary vectors)."""
    values = x.data if _is_sparse(x) else x
    other = (values != 0) & (values != 1)
    if other.any():
        example = float(values[other].flat[0])
        raise ValueError(
            f"X: expected binary values (0 or 1) for score_samples with visible='bernoulli' (log-likelihoods of "
            f"binary vectors); got {int(other.sum())} other value(s), e.g. {example:.4g}; binarise X first "
            f"(e.g. X > 0.5), or use transform for Bernoulli means"
        )


def _physical_memory() -> int | None:
    """Bytes of physical memory, or ``None`` where the platform does not say."""
    try:
        return int(os.sysconf("SC_PAGE_SIZE")) * int(os.sysconf("SC_PHYS_PAGES"))
    except (AttributeError, OSError, ValueError):
        return None


def _check_allocatable(nbytes: int, what: str, fix: str) -> None:
    """``what`` needs ``nbytes``: a ``ValueError`` naming it when that exceeds the machine's physical memory."""
    total = _physical_memory()
    if total is not None and nbytes > total:
        raise ValueError(f"{what} need about {nbytes / 2**30:.3g} GiB, more than this machine's "
                         f"{total / 2**30:.3g} GiB of memory; {fix}")


def _allocation_error(err: BaseException, what: str, fix: str) -> BaseException:
    """A failed allocation as a ``ValueError`` naming the argument; any other error unchanged."""
    if isinstance(err, MemoryError) or "alloc" in str(err).lower() or "out of memory" in str(err).lower():
        return ValueError(f"{what} could not be allocated ({str(err).splitlines()[0][:120]}); {fix}")
    return err
