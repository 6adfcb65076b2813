r"""Fast CD-k / PCD training of RBMs and a scikit-learn-style estimator with real log-likelihoods.

Training is contrastive divergence with analytic gradients (no autograd), the objective
:class:`ebms.objectives.rbm_cd.RBMContrastiveDivergence`:

.. math::
    \theta \leftarrow \theta + \eta\Big(\tfrac1{B}\textstyle\sum_{b} \nabla_\theta\big(-F(v_b)\big)
    - \tfrac1{C}\sum_{c} \nabla_\theta\big(-F(\tilde v_c)\big) - \lambda\,[\theta = W]\,W\Big),

where the positive phase uses the data ``v`` with hidden *probabilities*, and the negatives
:math:`\tilde v` come from ``k`` block Gibbs sweeps started at the data (CD-k; Hinton, 2002) or at
persistent chains carried between updates (PCD; Tieleman, 2008, "Training restricted Boltzmann
machines using approximations to the likelihood gradient"). The learning rate multiplies the
batch-*mean* gradient, as in scikit-learn's ``BernoulliRBM`` (which runs PCD-1 with ``C = B`` chains
that store hidden states, as ``persistent=True`` does here). Cost per update: ``2k + 1``
``B x D x H`` products for the sampling plus two for the statistics (the fastest kernels for the
model and batch: :func:`ebms.fit.rbm_products`); parameters change in place.

:class:`RBMEstimator` wraps it for scikit-learn: ``fit`` and ``partial_fit`` run the objective
with :class:`ebms.train.LeanSGD` (``torch.optim.SGD``'s rule without its per-step hooks; momentum,
weight decay on ``W`` only) in an in-memory
:class:`ebms.train.Trainer`; ``transform``, ``gibbs``, and ``score_samples`` returning true
log-likelihoods ``-F(x) - log Z`` with ``log Z`` exact (smaller layer summed out) or estimated by
AIS (:mod:`ebms.estimators.ais`) come from its base class, the read side of a fitted RBM
(``ebms.fit._rbm_fitted``).

:func:`ebms.fit.cd_update` is the same update as one function call on a batch (same sampling and
statistics code), with its own velocity :math:`u \leftarrow \mu u + \eta g`,
:math:`\theta \leftarrow \theta + u`: equal to SGD's ``buf = mu buf + g``, ``theta -= eta buf`` for
a constant ``eta``, and the right rule when ``eta`` changes between calls (a learning-rate curve).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import torch
from torch import Tensor

from ebms._checks import check_in_range, check_positive
from ebms._progress import progress_bar
from ebms.fit._rbm_cd import rbm_products
from ebms.fit._rbm_fitted import FittedRBM
from ebms.fit._sklearn import _allocation_error, _check_allocatable, _Epochs, _int_param, _Rows
from ebms.models.rbm import BernoulliRBM, GaussianBernoulliRBM, RBMBase
from ebms.objectives.rbm_cd import RBMContrastiveDivergence
from ebms.train import Callback, DistributedContext, LeanSGD, Trainer

__all__ = ["RBMEstimator", "sklearn_expected_failed_checks"]

_VISIBLE = ("bernoulli", "gaussian")


class RBMEstimator(FittedRBM):
    r"""scikit-learn estimator for RBMs: CD-k/PCD training, hidden features, log-likelihoods with a real ``log Z``.

    A transformer in scikit-learn's sense (``fit`` returns ``self``; ``transform``, ``fit_transform``,
    ``partial_fit``, ``score_samples``, ``score``; ``get_params``/``set_params``; fitted attributes end
    in ``_``; ``__sklearn_tags__``), so ``GridSearchCV``, ``cross_val_score``, ``clone`` and pipelines
    take it, and it passes scikit-learn's ``check_estimator`` (see ``docs/discrete.md`` for the checks
    that do not apply to binary visibles). scikit-learn is optional: it is imported only when used
    (``import ebms.fit`` stays fast); without it the same methods run with equivalent input checks.

    Args:
        n_components: hidden units ``H``.
        learning_rate: applied to the batch-mean gradient (scikit-learn semantics).
        batch_size: rows per update (the data are split into ``ceil(n / batch_size)`` near-equal batches).
        n_iter: epochs.
        cd_k: Gibbs sweeps per negative phase.
        persistent: PCD (persistent chains, as scikit-learn's ``BernoulliRBM``) instead of CD-k.
        momentum, weight_decay, mean_field: see :func:`ebms.fit.cd_update` (``mean_field=None``: visible means in
            the last CD sweep for binary data, Hinton's recipe; samples for PCD and Gaussian visibles).
        random_state: ``None`` (fresh entropy), an int seed, or a ``numpy.random.RandomState`` (a seed is
            drawn from it at ``fit``); one ``torch.Generator`` then drives everything.
        verbose: progress bar (tqdm) with the reconstruction error per epoch.
        visible: ``"bernoulli"``: values in [0, 1], binary data or Bernoulli means (grey levels, as
            scikit-learn's ``BernoulliRBM`` takes them); ``"gaussian"``: real data, unit variance
            (standardise it).
        shuffle: reshuffle the rows every epoch.
        init_visible_from_data: visible bias from the data marginal (Hinton, 2010) instead of zero.
        ais_chains, ais_betas: AIS settings for ``score_samples(..., log_z="ais")``: chains, and the
            temperature schedule (``None``: the 14,500-temperature schedule of Salakhutdinov & Murray, 2008,
            :func:`ebms.estimators.ais.salakhutdinov_betas`).

    The arguments are stored as given and checked by ``fit`` (scikit-learn's convention: a bad value
    is a ``ValueError``/``TypeError`` naming the argument when fitting, never at construction). Input
    errors name ``X``, also where scikit-learn's ``validate_data`` finds them (its text is kept after
    ``X:``, on one line), and sizes that cannot be allocated name ``n_components`` or ``ais_chains``.

    Input: ``X (n_samples, n_features)`` as a numpy array, anything ``numpy.asarray`` takes, a scipy
    sparse matrix (CSR, CSC, ...: rows are densified one batch at a time), or a torch tensor. Output:
    numpy arrays, except torch in, torch out. Training runs in float32; ``transform`` and
    ``score_samples`` compute in float64 (chunks of 4,096 rows) and return the input's float dtype
    (``transform``) or float64 (``score_samples``).

    Attributes (after ``fit``): ``model_`` (the energy module), ``components_`` ``(H, D)``,
    ``intercept_hidden_`` ``(H,)``, ``intercept_visible_`` ``(D,)``, ``n_features_in_``
    (``feature_names_in_`` for data frames with string column names), ``log_partition_`` (float or
    ``None`` until computed) and ``log_partition_estimate_`` (:class:`~ebms.estimators.Estimate`, with
    its standard error for AIS).

    Example:
        >>> import numpy as np
        >>> from ebms.fit import RBMEstimator
        >>> X = (np.random.default_rng(0).random((200, 8)) < 0.3).astype(np.float32)
        >>> est = RBMEstimator(4, batch_size=20, n_iter=5, random_state=0).fit(X)
        >>> est.transform(X).shape, est.score_samples(X).shape
        ((200, 4), (200,))
    """

    def __init__(
        self,
        n_components: int = 256,
        *,
        learning_rate: float = 0.1,
        batch_size: int = 10,
        n_iter: int = 10,
        cd_k: int = 1,
        persistent: bool = False,
        momentum: float = 0.0,
        weight_decay: float = 0.0,
        mean_field: bool | None = None,
        random_state: int | np.random.RandomState | None = None,
        verbose: bool = False,
        visible: str = "bernoulli",
        shuffle: bool = True,
        init_visible_from_data: bool = True,
        ais_chains: int = 100,
        ais_betas: Sequence[float] | Tensor | None = None,
    ) -> None:
        self.n_components, self.learning_rate, self.batch_size = n_components, learning_rate, batch_size
        self.n_iter, self.cd_k, self.persistent = n_iter, cd_k, persistent
        self.momentum, self.weight_decay, self.mean_field = momentum, weight_decay, mean_field
        self.random_state, self.verbose, self.visible = random_state, verbose, visible
        self.shuffle, self.init_visible_from_data = shuffle, init_visible_from_data
        self.ais_chains, self.ais_betas = ais_chains, ais_betas

    # -- scikit-learn protocol -------------------------------------------------------------------
    def __sklearn_tags__(self) -> Any:
        """scikit-learn tags: a transformer taking sparse input; Bernoulli visibles take values in [0, 1] only."""
        from sklearn.utils import InputTags, Tags, TargetTags, TransformerTags

        return Tags(
            estimator_type=None,
            target_tags=TargetTags(required=False),
            transformer_tags=TransformerTags(preserves_dtype=["float64", "float32"]),
            input_tags=InputTags(sparse=True, positive_only=self.visible == "bernoulli"),
        )

    def _check_params(self) -> None:
        _int_param(self.n_components, "n_components", 1)
        check_positive(self.learning_rate, "learning_rate")
        _int_param(self.batch_size, "batch_size", 1)
        _int_param(self.n_iter, "n_iter", 0)
        _int_param(self.cd_k, "cd_k", 1)
        check_in_range(self.momentum, "momentum", 0.0, 0.999)
        check_positive(self.weight_decay, "weight_decay", allow_zero=True)
        _int_param(self.ais_chains, "ais_chains", 2)
        if self.ais_betas is not None:
            from ebms.estimators.ais import validate_betas

            validate_betas(self.ais_betas, "ais_betas")
        rs = self.random_state
        if rs is not None and not isinstance(rs, np.random.RandomState):
            _int_param(rs, "random_state", 0)
        if self.visible not in _VISIBLE:
            raise ValueError(f"visible: expected one of {_VISIBLE}; got {self.visible!r}")
        if self.mean_field and self.persistent:
            raise ValueError("mean_field: expected False (or None) with persistent=True: PCD chains must hold samples")

    def _seed(self) -> int:
        rs = self.random_state
        if rs is None:
            return torch.Generator().seed() % (1 << 63)
        if isinstance(rs, np.random.RandomState):
            return int(rs.randint(np.iinfo(np.int64).max, dtype=np.int64))
        return int(rs)

    def _new_model(self, n_features: int) -> RBMBase:
        if self.visible == "bernoulli":
            return BernoulliRBM(n_features, int(self.n_components))
        return GaussianBernoulliRBM(n_features, int(self.n_components))

    def _start(self, rows: _Rows) -> None:
        self.generator_ = torch.Generator().manual_seed(self._seed())
        h, d = int(self.n_components), rows.n_features
        what = f"n_components: {h} hidden units x {d} features"
        # the float32 weights, their velocity and the float64 copy of the inference methods
        _check_allocatable(h * d * (4 + 4 + 8), what, "use fewer n_components")
        try:
            model = self._new_model(d)
            model.reset_parameters(self.generator_)
        except (RuntimeError, MemoryError) as err:
            raise _allocation_error(err, what, "use fewer n_components") from None
        sums = rows.column_sums()
        # smoothed log-odds of the data marginal (pseudocount 1), as marginal_logits
        logits = torch.log(sums + 1.0) - torch.log(rows.n - sums + 1.0)
        if self.init_visible_from_data:
            with torch.no_grad():
                model.visible_bias.copy_(logits if self.visible == "bernoulli" else sums / rows.n)
        self.model_ = model
        # the chains (PCD) and the velocities persist across partial_fit calls
        self.objective_ = RBMContrastiveDivergence(energies=False, products=rbm_products)
        weight, *rest = model.cd_parameters()
        groups: list[dict[str, Any]] = [{"params": [weight]}, {"params": rest, "weight_decay": 0.0}]
        self.optimizer_ = LeanSGD(groups, lr=float(self.learning_rate))
        # AIS base-rate model: the training data's pixel marginals (Salakhutdinov & Murray, 2008)
        self.base_logits_ = logits if self.visible == "bernoulli" else None
        self._forget_log_z()

    def _train(self, data: Callable[[Any, torch.Generator], Tensor], steps: int, callbacks: list[Callback]) -> None:
        """``steps`` CD updates on the batches ``data`` hands out, with the current hyper-parameters."""
        obj, opt = self.objective_, self.optimizer_
        obj.k, obj.persistent, obj.mean_field = int(self.cd_k), bool(self.persistent), self.mean_field
        lr, weight_decay = float(self.learning_rate), float(self.weight_decay)
        for i, group in enumerate(opt.param_groups):  # set_params between partial_fit calls takes effect
            group.update(lr=lr, initial_lr=lr, momentum=float(self.momentum), weight_decay=weight_decay if i == 0 else 0.0)
        Trainer(obj, self.model_, data, optimizer=opt, steps=steps, batch_size=None, run_dir=None, guard=None,
                progress=False, log_every=steps, callbacks=callbacks, device=self.model_.weight.device,
                distributed=DistributedContext(), generator=self.generator_).fit()

    # -- training ----------------------------------------------------------------------------------
    def fit(self, X: Any, y: Any = None) -> RBMEstimator:
        """Train from scratch for ``n_iter`` epochs on ``X: (n_samples, n_features)``; returns ``self``.

        ``y`` is ignored (present for scikit-learn's API). Raises ``ValueError``/``TypeError`` naming a
        bad constructor argument or input (values outside [0, 1] for Bernoulli visibles, NaN, wrong shape).
        """
        self._check_params()
        x, _ = self._input(X, reset=True)
        rows = _Rows(x)
        self._start(rows)
        n_batches = math.ceil(rows.n / min(int(self.batch_size), rows.n))
        if int(self.n_iter) == 0:
            return self
        epochs = _Epochs(rows, n_batches, shuffle=bool(self.shuffle))
        callbacks: list[Callback] = [_EpochBar(self, rows, n_batches, int(self.n_iter))] if self.verbose else []
        self._train(epochs, int(self.n_iter) * n_batches, callbacks)
        return self

    def partial_fit(self, X: Any, y: Any = None) -> RBMEstimator:
        """One update with all of ``X`` as the batch (as scikit-learn); initialises on the first call."""
        first = not self.__sklearn_is_fitted__()
        if first:
            self._check_params()
        x, _ = self._input(X, reset=first)
        rows = _Rows(x)
        if first:
            self._start(rows)
        batch = rows.span(0, rows.n)
        self._train(lambda size, g: batch, 1, [])
        self._forget_log_z()
        return self

    def fit_transform(self, X: Any, y: Any = None) -> Any:
        """``fit(X).transform(X)``."""
        return self.fit(X, y).transform(X)


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
    ``tests/fit/test_rbm_sklearn.py`` runs every check on the same data rounded to {0, 1}, where all of
    them pass, and asserts that the plain estimator fails exactly these checks, for these reasons.
    """
    if not isinstance(estimator, RBMEstimator) or estimator.visible != "bernoulli":
        return {}
    above = "fits on data with values above 1, which visible='bernoulli' rejects by design (ValueError)"
    scored = ("scores data in [0, 1] that is not binary, which score_samples with visible='bernoulli' refuses "
              "by design (ValueError)")
    return {**dict.fromkeys(_CHECKS_WITH_DATA_ABOVE_ONE, above), **dict.fromkeys(_CHECKS_SCORING_NON_BINARY_DATA, scored)}
