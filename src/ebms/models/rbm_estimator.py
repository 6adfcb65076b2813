r"""Fast CD-k / PCD training of RBMs and a scikit-learn-style estimator with real log-likelihoods.

:func:`cd_update` is one contrastive-divergence step with analytic gradients (no autograd):

.. math::
    \theta \leftarrow \theta + \eta\Big(\tfrac1{B}\textstyle\sum_{b} \nabla_\theta\big(-F(v_b)\big)
    - \tfrac1{C}\sum_{c} \nabla_\theta\big(-F(\tilde v_c)\big) - \lambda\,[\theta = W]\,W\Big),

where the positive phase uses the data ``v`` with hidden *probabilities*, and the negatives
:math:`\tilde v` come from ``k`` block Gibbs sweeps started at the data (CD-k; Hinton, 2002) or at
persistent chains carried between updates (PCD; Tieleman, 2008, "Training restricted Boltzmann
machines using approximations to the likelihood gradient"). With ``momentum`` ``mu`` the step is
taken through a velocity :math:`u \leftarrow \mu u + \eta g`. The learning rate multiplies the
batch-*mean* gradient, as in scikit-learn's ``BernoulliRBM`` (which runs PCD-1 with ``C = B`` chains
that store hidden states, as ``persistent=True`` does here). Cost per update: ``2k + 1``
``B x D x H`` products for the sampling plus two for the statistics; parameters change in place.

:class:`RBMEstimator` wraps it: ``fit``, ``partial_fit``, ``transform``, ``gibbs``, and
``score_samples`` returning true log-likelihoods ``-F(x) - log Z`` with ``log Z`` exact (smaller
layer summed out) or estimated by AIS (:mod:`ebms.estimators.ais`).
"""

from __future__ import annotations

import inspect
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch import Tensor

from ebms._checks import check_in_range, check_int, check_positive, check_shape, check_tensor
from ebms.estimators._base import Estimate
from ebms.models._rbm_layers import MAX_EXACT_STATES, RBMBase, bernoulli
from ebms.models.rbm import BernoulliRBM, GaussianBernoulliRBM, _log_odds, check_binary
from ebms.nets._linear import _ONEDNN_LINEAR as _ONEDNN
from ebms.nets._linear import onednn_pays, onednn_usable
from ebms.spaces import Reals

__all__ = ["CDState", "RBMEstimator", "cd_update"]


@dataclass
class CDState:
    """What :func:`cd_update` carries from one update to the next.

    Attributes:
        chain: PCD persistent hidden states ``(C, H)`` in {0, 1} (``None`` for CD-k or before the first update).
        velocity: momentum buffers aligned with ``model.cd_parameters()`` (``None`` without momentum).
    """

    chain: Tensor | None = None
    velocity: list[Tensor] | None = None


def cd_update(
    model: RBMBase,
    v: Tensor,
    *,
    learning_rate: float,
    k: int = 1,
    persistent: bool = False,
    state: CDState | None = None,
    momentum: float = 0.0,
    weight_decay: float = 0.0,
    mean_field: bool | None = None,
    generator: torch.Generator | None = None,
) -> CDState:
    r"""One CD-k (or PCD-k) update of ``model`` on the batch ``v: (B, *event)``, in place.

    Args:
        model: an RBM (:class:`~ebms.models.rbm.BernoulliRBM`, Gaussian or categorical).
        v: data batch; not validated here (call ``model.check_input`` once on the data set).
        learning_rate: ``eta`` applied to the batch-mean gradient.
        k: Gibbs sweeps of the negative phase.
        persistent: PCD: start from ``state.chain`` (the data's hidden sample on the first call).
        state: the previous update's :class:`CDState` (``None`` on the first call).
        momentum: ``mu`` in [0, 1).
        weight_decay: L2 coefficient ``lambda`` on the weights (not the biases).
        mean_field: use the visible *means* :math:`E[v \mid h]` instead of a sample in the last sweep
            (Hinton, 2010, "A practical guide to training restricted Boltzmann machines", sec. 3.3:
            less sampling noise, one ``B x D`` draw fewer). ``None``: on for CD-k with binary or
            categorical visibles; off for PCD (a persistent chain must hold samples; ``True`` with
            ``persistent=True`` is an error) and for Gaussian visibles (the means lack the visible
            noise, which biases the ``sigma`` and bias statistics).
        generator: the only source of randomness.

    Returns:
        The :class:`CDState` to pass to the next call.
    """
    check_int(k, "k", minimum=1)
    check_shape(v, (None, *model.space.event_shape), "v")
    if mean_field is None:
        mean_field = not persistent and not isinstance(model, GaussianBernoulliRBM)
    elif mean_field and persistent:
        raise ValueError("mean_field: expected False (or None) with persistent=True: PCD chains must hold samples")
    state = state if state is not None else CDState()
    g = generator
    fast = _fast_products(model, v)
    with torch.no_grad():
        hidden_probs = fast.hidden_probs if fast is not None else model.hidden_probs
        visible_mean = fast.visible_mean if fast is not None else model.visible_mean
        ph_pos = hidden_probs(v)
        h = state.chain if persistent and state.chain is not None else bernoulli(ph_pos, g)
        for step in range(k):
            last = step == k - 1
            mean = visible_mean(h)
            v_neg = mean if last and mean_field else _sample_visible(model, mean, h, g)
            ph_neg = hidden_probs(v_neg)
            if not last:
                h = bernoulli(ph_neg, g)
        chain = bernoulli(ph_neg, g) if persistent else None
        params = model.cd_parameters()
        a_pos, a_neg = 1.0 / v.shape[0], -1.0 / v_neg.shape[0]
        if momentum == 0.0 and weight_decay == 0.0 and not model.grad_uses_params:
            if fast is not None:
                fast.add_grad_(params, v, ph_pos, v_neg, ph_neg, learning_rate * a_pos, learning_rate * a_neg)
            else:
                model.add_loglik_grad_(params, v, ph_pos, learning_rate * a_pos)
                model.add_loglik_grad_(params, v_neg, ph_neg, learning_rate * a_neg)
            return CDState(chain=chain, velocity=state.velocity)
        grads = [torch.zeros_like(p) for p in params]
        if fast is not None:
            fast.add_grad_(grads, v, ph_pos, v_neg, ph_neg, a_pos, a_neg)
        else:
            model.add_loglik_grad_(grads, v, ph_pos, a_pos)
            model.add_loglik_grad_(grads, v_neg, ph_neg, a_neg)
        if weight_decay:
            grads[0].add_(params[0], alpha=-weight_decay)
        velocity = state.velocity
        if momentum:
            if velocity is None:
                velocity = [torch.zeros_like(p) for p in params]
            for u, gr in zip(velocity, grads):
                u.mul_(momentum).add_(gr, alpha=learning_rate)
            grads, step_size = velocity, 1.0
        else:
            step_size = learning_rate
        for p, gr in zip(params, grads):
            p.add_(gr, alpha=step_size)
    return CDState(chain=chain, velocity=velocity)


def _sample_visible(model: RBMBase, mean: Tensor, h: Tensor, generator: torch.Generator | None) -> Tensor:
    """``v ~ p(v | h)`` reusing the already computed means of a Bernoulli RBM (one product saved)."""
    if isinstance(model, BernoulliRBM):
        return bernoulli(mean, generator)
    return model.sample_visible(h, generator)


class _OneDNNProducts:
    r"""The three products of a float32 CPU :class:`BernoulliRBM` update through oneDNN's linear kernel.

    ``torch.addmm`` on the CPU runs MKL, which on some CPUs (AVX-512 parts) is about half as fast as
    oneDNN (:mod:`ebms.nets._linear`). Per update: :math:`\sigma(a + vW)` for the data and the
    negatives, :math:`\sigma(b + hW^\top)`, and one fused product for both weight statistics,
    :math:`[v; \tilde v]^\top [\alpha_+ p_+; \alpha_- p_-]` (``(D, 2B) x (2B, H)``), instead of two.
    Same arithmetic as :meth:`BernoulliRBM.hidden_probs` / ``visible_mean`` / ``add_loglik_grad_``
    up to float32 round-off.
    """

    def __init__(self, model: BernoulliRBM) -> None:
        assert _ONEDNN is not None  # _fast_products builds this class only when oneDNN is present
        self.linear = _ONEDNN
        self.w, self.b, self.a = model.weight.detach(), model.visible_bias.detach(), model.hidden_bias.detach()

    def hidden_probs(self, v: Tensor) -> Tensor:
        return self.linear(v, self.w.T, self.a, "none", [], "").sigmoid_()

    def visible_mean(self, h: Tensor) -> Tensor:
        return self.linear(h, self.w, self.b, "none", [], "").sigmoid_()

    def add_grad_(self, out: list[Tensor], v: Tensor, ph: Tensor, vn: Tensor, phn: Tensor,
                  alpha_pos: float, alpha_neg: float) -> None:
        """``out += alpha_pos * stats(v, ph) + alpha_neg * stats(vn, phn)`` for (W, b, a)."""
        x_t = torch.cat([v, vn]).T.contiguous()  # (D, 2B): oneDNN runs faster on a row-major input
        y = torch.cat([ph * alpha_pos, phn * alpha_neg])  # (2B, H)
        out[0].add_(self.linear(x_t, y.T, None, "none", [], ""))
        out[1].add_(v.sum(0), alpha=alpha_pos).add_(vn.sum(0), alpha=alpha_neg)
        out[2].add_(y.sum(0))


def _fast_products(model: RBMBase, v: Tensor) -> _OneDNNProducts | None:
    """The oneDNN products for a float32 CPU BernoulliRBM batch large enough to gain, else ``None``."""
    if _ONEDNN is None or type(model) is not BernoulliRBM or v.dim() != 2 or not onednn_usable(v):
        return None
    w = model.weight
    if w.dtype != torch.float32 or w.device != v.device or not onednn_pays(True, w, v.shape[0]):
        return None
    return _OneDNNProducts(model)


_VISIBLE = ("bernoulli", "gaussian")


class RBMEstimator:
    """scikit-learn-style RBM: CD-k/PCD training, hidden features, and log-likelihoods with a real ``log Z``.

    Args:
        n_components: hidden units ``H``.
        learning_rate: applied to the batch-mean gradient (scikit-learn semantics).
        batch_size: rows per update (the data are split into ``ceil(n / batch_size)`` near-equal batches).
        n_iter: epochs.
        cd_k: Gibbs sweeps per negative phase.
        persistent: PCD (persistent chains, as scikit-learn's ``BernoulliRBM``) instead of CD-k.
        momentum, weight_decay, mean_field: see :func:`cd_update` (``mean_field=None``: visible means in
            the last CD sweep for binary data, Hinton's recipe; samples for PCD and Gaussian visibles).
        random_state: seed (int) or ``None`` (fresh entropy); one ``torch.Generator`` drives everything.
        verbose: progress bar (tqdm) with the reconstruction error per epoch.
        visible: ``"bernoulli"`` (binary data) or ``"gaussian"`` (real data, unit variance: standardise it).
        shuffle: reshuffle the rows every epoch.
        init_visible_from_data: visible bias from the data marginal (Hinton, 2010) instead of zero.
        ais_chains, ais_betas: AIS settings for ``score_samples(..., log_z="ais")``: chains, and the
            temperature schedule (``None``: the 14,500-temperature schedule of Salakhutdinov & Murray, 2008,
            :func:`ebms.estimators.ais.salakhutdinov_betas`).

    Attributes (after ``fit``): ``model_`` (the energy module), ``components_`` ``(H, D)``,
    ``intercept_hidden_`` ``(H,)``, ``intercept_visible_`` ``(D,)``, ``n_features_in_``,
    ``log_partition_`` (float or ``None`` until computed) and ``log_partition_estimate_``
    (:class:`~ebms.estimators.Estimate`, with its standard error for AIS).

    Arrays in, arrays out: numpy input gives numpy output, torch input gives torch output (float32).

    Example:
        >>> import numpy as np
        >>> from ebms.models.rbm_estimator import RBMEstimator
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
        random_state: int | None = None,
        verbose: bool = False,
        visible: str = "bernoulli",
        shuffle: bool = True,
        init_visible_from_data: bool = True,
        ais_chains: int = 100,
        ais_betas: Sequence[float] | Tensor | None = None,
    ) -> None:
        check_int(n_components, "n_components", minimum=1)
        check_positive(learning_rate, "learning_rate")
        check_int(batch_size, "batch_size", minimum=1)
        check_int(n_iter, "n_iter", minimum=0)
        check_int(cd_k, "cd_k", minimum=1)
        check_in_range(momentum, "momentum", 0.0, 0.999)
        check_positive(weight_decay, "weight_decay", allow_zero=True)
        check_int(ais_chains, "ais_chains", minimum=2)
        if random_state is not None:
            check_int(random_state, "random_state", minimum=0)
        if visible not in _VISIBLE:
            raise ValueError(f"visible: expected one of {_VISIBLE}; got {visible!r}")
        self.n_components, self.learning_rate, self.batch_size = n_components, float(learning_rate), batch_size
        self.n_iter, self.cd_k, self.persistent = n_iter, cd_k, bool(persistent)
        if mean_field and persistent:
            raise ValueError("mean_field: expected False (or None) with persistent=True: PCD chains must hold samples")
        self.momentum, self.weight_decay, self.mean_field = float(momentum), float(weight_decay), mean_field
        self.random_state, self.verbose, self.visible = random_state, bool(verbose), visible
        self.shuffle, self.init_visible_from_data = bool(shuffle), bool(init_visible_from_data)
        self.ais_chains, self.ais_betas = ais_chains, ais_betas

    # -- scikit-learn protocol -------------------------------------------------------------------
    def get_params(self, deep: bool = True) -> dict[str, Any]:
        """Constructor arguments (scikit-learn ``clone``/grid-search protocol)."""
        return {n: getattr(self, n) for n in inspect.signature(type(self).__init__).parameters if n != "self"}

    def set_params(self, **params: Any) -> RBMEstimator:
        """Re-run the constructor with some arguments changed (fitted state is kept)."""
        unknown = sorted(set(params) - set(self.get_params()))
        if unknown:
            raise ValueError(f"set_params: unknown parameter(s) {unknown}; valid: {sorted(self.get_params())}")
        fitted = {k: v for k, v in vars(self).items() if k.endswith("_")}
        self.__init__(**{**self.get_params(), **params})  # type: ignore[misc]
        vars(self).update(fitted)
        return self

    # -- data handling ---------------------------------------------------------------------------
    def _check_fitted(self) -> RBMBase:
        model = getattr(self, "model_", None)
        if model is None:
            raise ValueError("RBMEstimator: not fitted yet; call fit(X) or partial_fit(X) first")
        return model

    def _tensor(self, X: Any, name: str = "X", *, n_features: int | None = None) -> tuple[Tensor, bool]:
        is_np = not isinstance(X, Tensor)
        x = torch.from_numpy(np.ascontiguousarray(X, dtype=np.float32)) if is_np else X.detach().float()
        check_tensor(x, name, floating=True)
        if x.dim() != 2:
            raise ValueError(f"{name}: expected a 2-D array (n_samples, n_features); got shape {tuple(x.shape)}")
        if n_features is not None and x.shape[1] != n_features:
            raise ValueError(f"{name}: expected n_features={n_features} (as in fit); got {x.shape[1]}")
        return x.contiguous(), is_np

    def _validated(self, X: Any, name: str = "X", *, n_features: int | None = None) -> tuple[Tensor, bool]:
        x, is_np = self._tensor(X, name, n_features=n_features)
        if self.visible == "gaussian":
            Reals(x.shape[1]).validate(x, name)
            return x, is_np
        try:
            check_binary(x, name)
        except ValueError as err:
            raise ValueError(f"{err} (a Bernoulli RBM needs binary data; binarise it first, e.g. X > 0.5)") from None
        return x, is_np

    @staticmethod
    def _out(t: Tensor, is_np: bool) -> Any:
        return t.numpy() if is_np else t

    def _new_model(self, n_features: int) -> RBMBase:
        if self.visible == "bernoulli":
            return BernoulliRBM(n_features, self.n_components)
        return GaussianBernoulliRBM(n_features, self.n_components)

    def _start(self, x: Tensor) -> None:
        seed = self.random_state if self.random_state is not None else torch.Generator().seed() % (1 << 63)
        self.generator_ = torch.Generator().manual_seed(seed)
        model = self._new_model(x.shape[1])
        model.reset_parameters(self.generator_)
        if self.init_visible_from_data:
            with torch.no_grad():  # x was validated by the caller
                model.visible_bias.copy_(_log_odds(x, 1.0) if self.visible == "bernoulli" else x.mean(0))
        self.model_, self.n_features_in_, self.cd_state_ = model, x.shape[1], CDState()
        # AIS base-rate model: the training data's pixel marginals (Salakhutdinov & Murray, 2008)
        self.base_logits_ = _log_odds(x, 1.0) if self.visible == "bernoulli" else None
        self._forget_log_z()

    def _forget_log_z(self) -> None:
        self.log_partition_: float | None = None
        self.log_partition_estimate_: Estimate | None = None

    def _update(self, batch: Tensor) -> None:
        self.cd_state_ = cd_update(
            self.model_,
            batch,
            learning_rate=self.learning_rate,
            k=self.cd_k,
            persistent=self.persistent,
            state=self.cd_state_,
            momentum=self.momentum,
            weight_decay=self.weight_decay,
            mean_field=self.mean_field,
            generator=self.generator_,
        )

    # -- training ----------------------------------------------------------------------------------
    def fit(self, X: Any, y: Any = None) -> RBMEstimator:
        """Train from scratch for ``n_iter`` epochs on ``X: (n_samples, n_features)``; returns ``self``."""
        x, _ = self._validated(X)
        self._start(x)
        n = x.shape[0]
        n_batches = math.ceil(n / min(self.batch_size, n))
        epochs: Any = range(self.n_iter)
        if self.verbose:
            from tqdm.auto import tqdm

            epochs = tqdm(epochs, desc="RBM", unit="epoch")
        for _ in epochs:
            if self.shuffle:  # gather each batch from a permutation: cache-sized copies
                for idx in torch.tensor_split(torch.randperm(n, generator=self.generator_), n_batches):
                    self._update(x.index_select(0, idx))
            else:
                for batch in torch.tensor_split(x, n_batches):
                    self._update(batch)
            if self.verbose:
                epochs.set_postfix(recon_error=f"{self.reconstruction_error(x[:1000]):.4f}")
        return self

    def partial_fit(self, X: Any, y: Any = None) -> RBMEstimator:
        """One update with all of ``X`` as the batch (as scikit-learn); initialises on the first call."""
        first = getattr(self, "model_", None) is None
        x, _ = self._validated(X, n_features=None if first else self.n_features_in_)
        if first:
            self._start(x)
        self._update(x)
        self._forget_log_z()
        return self

    # -- inference ---------------------------------------------------------------------------------
    def transform(self, X: Any) -> Any:
        """Hidden probabilities ``p(h = 1 | x)``, ``(n_samples, n_components)``."""
        model = self._check_fitted()
        x, is_np = self._validated(X, n_features=self.n_features_in_)
        with torch.no_grad():
            return self._out(model.hidden_probs(x), is_np)

    def fit_transform(self, X: Any, y: Any = None) -> Any:
        return self.fit(X).transform(X)

    def gibbs(self, v: Any) -> Any:
        """One block Gibbs sweep ``h ~ p(h|v)``, ``v' ~ p(v|h)`` from ``v``, using the estimator's generator."""
        model = self._check_fitted()
        x, is_np = self._validated(v, "v", n_features=self.n_features_in_)
        with torch.no_grad():
            return self._out(model.sample_visible(model.sample_hidden(x, self.generator_), self.generator_), is_np)

    def reconstruction_error(self, X: Any) -> float:
        """Mean squared error of the mean-field reconstruction ``E[v | p(h|x)]`` (a health metric only)."""
        model = self._check_fitted()
        x, _ = self._tensor(X, n_features=self.n_features_in_)
        with torch.no_grad():
            return float(((model.visible_mean(model.hidden_probs(x)) - x) ** 2).mean())

    def pseudo_likelihood(self, X: Any) -> Any:
        """Exact pseudo-log-likelihood ``sum_i log p(x_i | x_-i)`` per row (Bernoulli visibles only)."""
        model = self._check_fitted()
        if not isinstance(model, BernoulliRBM):
            raise ValueError(f"pseudo_likelihood: defined for visible='bernoulli'; got visible={self.visible!r}")
        x, is_np = self._validated(X, n_features=self.n_features_in_)
        return self._out(model.pseudo_log_likelihood(x), is_np)

    def score_samples(self, X: Any, log_z: float | str | None = None) -> Any:
        """Log-likelihood ``log p(x) = -F(x) - log Z`` per row.

        Args:
            X: ``(n_samples, n_features)``.
            log_z: ``"exact"`` (sum over the smaller layer; at most ``2^25`` terms), ``"ais"`` (annealed
                importance sampling with ``ais_chains`` chains on ``ais_betas``; Bernoulli only; a stochastic
                lower bound on log Z, so the log-likelihoods lean high),
                a number, or ``None``: the cached ``log_partition_`` if any, else exact when feasible, else AIS.
                The value used is stored in ``log_partition_`` / ``log_partition_estimate_``.
        """
        model = self._check_fitted()
        x, is_np = self._validated(X, n_features=self.n_features_in_)
        lz = self._log_z(log_z)
        with torch.no_grad():
            return self._out(-model(x) - lz, is_np)

    def score(self, X: Any, y: Any = None) -> float:
        """Mean log-likelihood of ``X`` (see :meth:`score_samples`)."""
        return float(self.score_samples(X).mean())

    def _log_z(self, log_z: float | str | None) -> float:
        model = self._check_fitted()
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
        res = ais(model.ais_path(self.base_logits_), n_chains=self.ais_chains, betas=betas, generator=self.generator_)
        return res if isinstance(res, Estimate) else res.estimate

    # -- fitted attributes -------------------------------------------------------------------------
    @property
    def components_(self) -> np.ndarray:
        """Weights ``(n_components, n_features)`` (scikit-learn layout, a copy)."""
        return self._check_fitted().weight.detach().T.numpy().copy()

    @property
    def intercept_hidden_(self) -> np.ndarray:
        return self._check_fitted().hidden_bias.detach().numpy().copy()

    @property
    def intercept_visible_(self) -> np.ndarray:
        return self._check_fitted().visible_bias.detach().numpy().copy()

    def __repr__(self) -> str:
        return f"RBMEstimator(n_components={self.n_components}, visible={self.visible!r}, cd_k={self.cd_k})"
