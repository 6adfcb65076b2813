r"""Shared machinery of restricted Boltzmann machines, and the Gaussian and categorical variants.

Every RBM here has a visible layer ``v`` and ``H`` binary hidden units ``h`` with a joint energy of
the form

.. math::  E(v, h) = -\phi(v) - h^\top (a + \psi(v)),

where :math:`\phi` is the visible-only term and :math:`\psi(v)` the visible input to the hidden
units (linear in the sufficient statistics of ``v``). The hidden units sum out in closed form, so
the module's energy is the *free energy*

.. math::  F(v) = -\log \sum_h e^{-E(v,h)} = -\phi(v) - \sum_j \operatorname{softplus}(a_j + \psi_j(v)),
           \qquad p(v) = e^{-F(v)} / Z .

:class:`RBMBase` implements the parts common to all layers: hidden conditionals and sampling,
joint energy, exact :math:`\log Z` by summing over the smaller layer (chunked), ``log_prob`` and
the contrastive-divergence statistics used by :func:`ebms.fit.cd_update`.
Subclasses supply :math:`\phi`, :math:`\psi`, the visible conditional and the marginal over ``v``
for a fixed ``h``.

References: Smolensky (1986), "Information processing in dynamical systems: foundations of harmony
theory"; Hinton (2002), "Training products of experts by minimizing contrastive divergence";
Cho, Ilin & Raiko (2011), "Improved learning of Gaussian-Bernoulli restricted Boltzmann machines".
"""

from __future__ import annotations

import abc
import copy
import math
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ebms._checks import check_int, check_positive, check_shape
from ebms._numerics import softplus
from ebms._precision import full_precision
from ebms.energy import Energy
from ebms.spaces import MAX_EXACT_STATES, Binary, Categorical, DiscreteSpace, Reals, Space

__all__ = ["CategoricalRBM", "GaussianBernoulliRBM", "RBMBase", "bernoulli", "softplus"]


def bernoulli(p: Tensor, generator: torch.Generator | None = None) -> Tensor:
    """Draws ``x ~ Bernoulli(p)`` elementwise as floats in {0, 1} (``u < p`` with ``u ~ U[0, 1)``).

    Same distribution as ``torch.bernoulli``; on CPU about five times faster.
    """
    return torch.rand(p.shape, generator=generator, dtype=p.dtype, device=p.device).lt_(p)


def _logsumexp_stream(chunks: Iterator[Tensor]) -> float:
    total = torch.tensor(-math.inf, dtype=torch.float64)
    for c in chunks:
        total = torch.logaddexp(total, torch.logsumexp(c.double(), 0))
    return float(total)


class RBMBase(Energy, metaclass=abc.ABCMeta):
    """Base of the RBMs: free energy as the module's energy, hidden layer of ``n_hidden`` Bernoulli units.

    Subclasses set ``space``, the parameters ``weight``, ``visible_bias``, ``hidden_bias`` and implement
    :meth:`visible_term`, :meth:`hidden_input`, :meth:`visible_mean`, :meth:`sample_visible`,
    :meth:`hidden_log_marginal` and :meth:`add_loglik_grad_`.
    """

    space: Space
    weight: nn.Parameter
    visible_bias: nn.Parameter
    hidden_bias: nn.Parameter
    #: number of visible configurations (``math.inf`` for continuous visibles)
    num_visible_states: float
    #: whether ``add_loglik_grad_`` reads the parameters (then updates cannot be applied in place mid-way)
    grad_uses_params: bool = False

    def __init__(self, n_visible: int, n_hidden: int) -> None:
        super().__init__()
        self.n_visible = check_int(n_visible, "n_visible", minimum=1)
        self.n_hidden = check_int(n_hidden, "n_hidden", minimum=1)

    # -- pieces supplied by each visible type --------------------------------------------------
    @abc.abstractmethod
    def visible_term(self, v: Tensor) -> Tensor:
        r""":math:`\phi(v)`, the hidden-free part of ``-E``, ``(B,)``."""

    @abc.abstractmethod
    def hidden_input(self, v: Tensor) -> Tensor:
        r"""Total input to the hidden units :math:`a + \psi(v)`, ``(B, H)``."""

    @abc.abstractmethod
    def visible_mean(self, h: Tensor) -> Tensor:
        r""":math:`E[v \mid h]`, ``(B, *event)``."""

    @abc.abstractmethod
    def sample_visible(self, h: Tensor, generator: torch.Generator | None = None) -> Tensor:
        r"""One draw :math:`v \sim p(v \mid h)` per row of ``h: (B, H)``."""

    @abc.abstractmethod
    def hidden_log_marginal(self, h: Tensor) -> Tensor:
        r""":math:`\log \sum_v e^{-E(v,h)}` (or the integral over ``v``), ``(B,)`` for ``h: (B, H)``."""

    @abc.abstractmethod
    def add_loglik_grad_(self, out: Sequence[Tensor], v: Tensor, ph: Tensor, alpha: float) -> None:
        r"""In place: ``out[i] += alpha * sum_b d(-F(v_b))/d theta_i`` for ``theta = cd_parameters()``.

        ``ph = hidden_probs(v)`` is passed in so it is computed once per batch.
        """

    def cd_parameters(self) -> list[Tensor]:
        """Parameters trained by :func:`~ebms.fit.cd_update`, in ``add_loglik_grad_`` order."""
        return [self.weight, self.visible_bias, self.hidden_bias]

    # -- shared ---------------------------------------------------------------------------------
    def forward(self, v: Tensor) -> Tensor:
        """Free energy ``F(v)``, ``(B,)`` (no input validation; see :meth:`free_energy`)."""
        return -self.visible_term(v) - softplus(self.hidden_input(v)).sum(-1)

    def check_input(self, v: Tensor, name: str = "v") -> Tensor:
        """Validate a batch of visible states against ``self.space`` (shape, finiteness, values) and
        the parameters' dtype (:meth:`check_dtype`)."""
        return self.check_dtype(self.space.validate(v, name), name)

    def check_dtype(self, v: Tensor, name: str = "v") -> Tensor:
        """``v`` has the dtype of the parameters: a ``TypeError`` naming ``name`` and both dtypes otherwise
        (the layer products would fail with a matmul traceback)."""
        want = self.weight.dtype
        if v.dtype != want:
            raise TypeError(
                f"{name}: expected dtype {want}, the dtype of the {type(self).__name__}'s parameters; got {v.dtype}; "
                f"convert {name} ({name}.to({want})) or the model (model.to({v.dtype}))"
            )
        return v

    def free_energy(self, v: Tensor) -> Tensor:
        """``F(v)`` after :meth:`check_input`, ``(B,)``."""
        return self(self.check_input(v))

    def hidden_probs(self, v: Tensor) -> Tensor:
        r""":math:`p(h_j = 1 \mid v) = \sigma(a_j + \psi_j(v))`, ``(B, H)``."""
        return self.hidden_input(v).sigmoid_()

    def sample_hidden(self, v: Tensor, generator: torch.Generator | None = None) -> Tensor:
        r"""One draw :math:`h \sim p(h \mid v)`, float ``(B, H)`` in {0, 1}."""
        return bernoulli(self.hidden_probs(v), generator)

    def joint_energy(self, v: Tensor, h: Tensor) -> Tensor:
        r""":math:`E(v, h) = -\phi(v) - h^\top(a + \psi(v))`, ``(B,)``."""
        check_shape(h, (v.shape[0], self.n_hidden), "h")
        return -self.visible_term(v) - (h * self.hidden_input(v)).sum(-1)

    def reset_parameters(self, generator: torch.Generator | None = None, *, std: float = 0.01) -> None:
        """Weights ``~ N(0, std^2)`` drawn from ``generator``; biases zero (Hinton, 2010, "A practical guide")."""
        check_positive(std, "std", allow_zero=True)
        with torch.no_grad():
            w = torch.randn(self.weight.shape, generator=generator, dtype=self.weight.dtype)
            self.weight.copy_(w * std)
            self.visible_bias.zero_()
            self.hidden_bias.zero_()

    def exact_states(self) -> float:
        """Number of configurations :meth:`log_partition` sums over (the smaller layer)."""
        return min(self.num_visible_states, 2.0**self.n_hidden)

    def log_partition(self, *, dtype: torch.dtype = torch.float64, max_elements: int = 1 << 22) -> float:
        r"""Exact :math:`\log Z`, summing over the smaller layer.

        Visible layer smaller: :math:`\log Z = \operatorname{logsumexp}_v (-F(v))`. Hidden layer smaller:
        :math:`\log Z = \operatorname{logsumexp}_h \log\sum_v e^{-E(v,h)}` (:meth:`hidden_log_marginal`).
        Computed in ``dtype`` (float64 default) in chunks of at most ``max_elements`` matrix entries;
        exact to rounding (about ``1e-15`` relative, tested with pre-activations in the hundreds: the
        softplus terms use :func:`softplus`, not torch's threshold-20 approximation).
        Cost: ``min(#visible states, 2^H) * D * H``; at most ``2^25`` configurations.

        Raises:
            ValueError: when the smaller layer has more than ``2^25`` configurations.
        """
        n = self.exact_states()
        if n > MAX_EXACT_STATES:
            raise ValueError(
                f"log_partition: exact summation needs {n:.4g} configurations of the smaller layer "
                f"(n_visible={self.n_visible}, n_hidden={self.n_hidden}, {self._visible_states_text()}); "
                f"the limit is 2**25 = {MAX_EXACT_STATES}; estimate log Z with AIS instead"
            )
        model = copy.deepcopy(self).to(dtype)
        categories = self.space.num_categories if isinstance(self.space, DiscreteSpace) else 1
        width = max(self.n_visible * categories, self.n_hidden)
        chunk = max(1, max_elements // width)
        with torch.no_grad():
            if self.num_visible_states <= 2.0**self.n_hidden:
                states = model.space.enumerate(chunk, dtype=dtype, device=self.weight.device)  # type: ignore[attr-defined]
                return _logsumexp_stream(-model(s) for s in states)
            hs = Binary(self.n_hidden).enumerate(chunk, dtype=dtype, device=self.weight.device)
            return _logsumexp_stream(model.hidden_log_marginal(h) for h in hs)

    def _visible_states_text(self) -> str:
        return f"{self.num_visible_states:.4g} visible states"

    def log_prob(self, v: Tensor, log_z: float | None = None) -> Tensor:
        r""":math:`\log p(v) = -F(v) - \log Z`, ``(B,)``; ``log_z=None`` computes it exactly."""
        v = self.check_input(v)
        lz = self.log_partition() if log_z is None else float(log_z)
        if not math.isfinite(lz):
            raise ValueError(f"log_z: expected a finite number; got {log_z!r}")
        return -self(v) - lz

    def extra_repr(self) -> str:
        return f"n_visible={self.n_visible}, n_hidden={self.n_hidden}"


class GaussianBernoulliRBM(RBMBase):
    r"""RBM with real visible units and Bernoulli hidden units (Cho, Ilin & Raiko, 2011 parameterisation).

    .. math::
        E(v, h) = \sum_i \frac{(v_i - b_i)^2}{2\sigma_i^2} - \sum_{ij} \frac{v_i}{\sigma_i^2} W_{ij} h_j - a^\top h,

    so :math:`v \mid h \sim \mathcal N(b + W h, \operatorname{diag}\sigma^2)`,
    :math:`p(h_j = 1 \mid v) = \sigma(a_j + \sum_i v_i W_{ij} / \sigma_i^2)` and

    .. math::
        F(v) = \sum_i \frac{(v_i-b_i)^2}{2\sigma_i^2} - \sum_j \operatorname{softplus}(a_j + (v/\sigma^2)^\top W_{:j}),
        \quad \log Z = \sum_i \tfrac12\log(2\pi\sigma_i^2)
        + \operatorname{logsumexp}_h \Big[a^\top h + \sum_i \frac{2 b_i m_i + m_i^2}{2\sigma_i^2}\Big],\ m = W h.

    Args:
        n_visible: ``D``.
        n_hidden: ``H``.
        sigma: visible standard deviations, a number or ``(D,)`` (default 1; standardise the data).
        learn_sigma: train :math:`\log\sigma` as a parameter (else a fixed buffer).
        generator: for the initial weights.

    Shapes: ``v: (B, D)`` real, ``h: (B, H)`` in {0, 1}. Space :class:`~ebms.spaces.Reals`.
    """

    log_sigma: Tensor
    num_visible_states = math.inf
    grad_uses_params = True

    def __init__(
        self,
        n_visible: int,
        n_hidden: int,
        sigma: float | Tensor = 1.0,
        *,
        learn_sigma: bool = False,
        generator: torch.Generator | None = None,
    ) -> None:
        super().__init__(n_visible, n_hidden)
        self.space = Reals(n_visible)
        s = torch.as_tensor(sigma, dtype=torch.float32).clone()
        if s.dim() == 0:
            s = s.expand(n_visible).clone()
        check_shape(s, (n_visible,), "sigma")
        if not bool(torch.isfinite(s).all() & (s > 0).all()):
            raise ValueError(f"sigma: expected finite values > 0; got min {float(s.min()):.4g}")
        self.learn_sigma = bool(learn_sigma)
        if self.learn_sigma:
            self.log_sigma = nn.Parameter(s.log())
        else:
            self.register_buffer("log_sigma", s.log())
        self.weight = nn.Parameter(torch.empty(n_visible, n_hidden))
        self.visible_bias = nn.Parameter(torch.zeros(n_visible))
        self.hidden_bias = nn.Parameter(torch.zeros(n_hidden))
        self.reset_parameters(generator)

    @property
    def sigma(self) -> Tensor:
        """Visible standard deviations ``(D,)``."""
        return self.log_sigma.exp()

    def _var(self) -> Tensor:
        return torch.exp(2 * self.log_sigma)

    def visible_term(self, v):
        return -(((v - self.visible_bias) ** 2) / (2 * self._var())).sum(-1)

    def hidden_input(self, v):
        return torch.addmm(self.hidden_bias, v / self._var(), self.weight)

    def visible_mean(self, h):
        """``E[v | h] = b + W h``, ``(B, D)``."""
        return torch.addmm(self.visible_bias, h, self.weight.T)

    def sample_visible(self, h, generator=None):
        noise = torch.randn(h.shape[0], self.n_visible, generator=generator, dtype=h.dtype, device=h.device)
        return self.visible_mean(h) + noise * self.sigma

    def hidden_log_marginal(self, h):
        var = self._var()
        m = h @ self.weight.T
        quad = ((2 * self.visible_bias * m + m * m) / (2 * var)).sum(-1)
        return h @ self.hidden_bias + quad + 0.5 * torch.log(2 * math.pi * var).sum()

    def _visible_states_text(self) -> str:
        return "continuous visibles: the sum runs over the hidden layer"

    @full_precision
    def energy_and_grad(self, v: Tensor) -> tuple[Tensor, Tensor]:
        r"""Analytic :math:`F(v)` and :math:`\nabla_v F = (v - b)/\sigma^2 - W p(h \mid v) / \sigma^2`."""
        with torch.no_grad():
            pre = self.hidden_input(v)
            var = self._var()
            e = (((v - self.visible_bias) ** 2) / (2 * var)).sum(-1) - softplus(pre).sum(-1)
            g = (v - self.visible_bias - torch.sigmoid(pre) @ self.weight.T) / var
        return e, g

    def init_visible_bias_from_data(self, v: Tensor) -> None:
        """Set ``b`` to the data mean of ``v: (B, D)`` (any float dtype: the mean is copied into ``b``)."""
        v = self.space.validate(v, "v")
        with torch.no_grad():
            self.visible_bias.copy_(v.mean(0))

    def cd_parameters(self) -> list[Tensor]:
        return super().cd_parameters() + ([self.log_sigma] if self.learn_sigma else [])

    def add_loglik_grad_(self, out, v, ph, alpha):
        var = self._var()
        u = v / var
        out[0].addmm_(u.T, ph, alpha=alpha)
        out[1].add_(((v - self.visible_bias) / var).sum(0), alpha=alpha)
        out[2].add_(ph.sum(0), alpha=alpha)
        if self.learn_sigma:  # d(-F)/d log sigma_i = (v_i - b_i)^2 / s_i^2 - 2 v_i (W p)_i / s_i^2
            d = ((v - self.visible_bias) ** 2 - 2 * v * (ph @ self.weight.T)) / var
            out[3].add_(d.sum(0), alpha=alpha)


class CategoricalRBM(RBMBase):
    r"""RBM with one-hot categorical visible units (``N`` sites, ``K`` categories) and Bernoulli hiddens.

    .. math::
        E(v, h) = -\sum_{ikj} v_{ik} W_{ikj} h_j - \sum_{ik} b_{ik} v_{ik} - a^\top h, \qquad
        F(v) = -\sum_{ik} b_{ik} v_{ik} - \sum_j \operatorname{softplus}\Big(a_j + \sum_{ik} v_{ik} W_{ikj}\Big).

    Given ``h`` the sites are independent with :math:`p(v_i = k \mid h) = \operatorname{softmax}_k(b_{ik} +
    \sum_j W_{ikj} h_j)`. Exact :math:`\log Z` enumerates the smaller of the :math:`K^N` visible and
    :math:`2^H` hidden configurations; over ``h`` it is
    :math:`\operatorname{logsumexp}_h [a^\top h + \sum_i \operatorname{logsumexp}_k (b_{ik} + (W h)_{ik})]`.

    Args:
        n_sites: ``N``.
        n_categories: ``K >= 2``.
        n_hidden: ``H``.
        generator: for the initial weights.

    Shapes: ``v: (B, N, K)`` one-hot (space :class:`~ebms.spaces.Categorical`), ``W: (N, K, H)``.
    Convert category indices with ``model.space.one_hot(idx)``.
    """

    def __init__(
        self, n_sites: int, n_categories: int, n_hidden: int, *, generator: torch.Generator | None = None
    ) -> None:
        super().__init__(n_sites, n_hidden)
        self.space = Categorical(n_sites, n_categories)
        self.n_categories = self.space.num_categories
        self.num_visible_states = float(self.n_categories) ** n_sites
        self.weight = nn.Parameter(torch.empty(n_sites, self.n_categories, n_hidden))
        self.visible_bias = nn.Parameter(torch.zeros(n_sites, self.n_categories))
        self.hidden_bias = nn.Parameter(torch.zeros(n_hidden))
        self.reset_parameters(generator)

    def _flat_w(self) -> Tensor:
        return self.weight.reshape(-1, self.n_hidden)

    def visible_term(self, v):
        return (v * self.visible_bias).flatten(1).sum(-1)

    def hidden_input(self, v):
        return torch.addmm(self.hidden_bias, v.reshape(v.shape[0], -1), self._flat_w())

    def visible_logits(self, h: Tensor) -> Tensor:
        """Per-site logits ``b + W h``, ``(B, N, K)``."""
        return (h @ self._flat_w().T).reshape(h.shape[0], self.n_visible, self.n_categories) + self.visible_bias

    def visible_mean(self, h):
        """``p(v_i = k | h)``, ``(B, N, K)``."""
        return torch.softmax(self.visible_logits(h), -1)

    visible_probs = visible_mean

    def sample_visible(self, h, generator=None):
        p = self.visible_mean(h)
        u = torch.rand(p.shape[:-1] + (1,), generator=generator, dtype=p.dtype, device=p.device)
        idx = (p.cumsum(-1) < u).sum(-1).clamp_(max=self.n_categories - 1)
        return F.one_hot(idx, self.n_categories).to(h.dtype)

    def hidden_log_marginal(self, h):
        return h @ self.hidden_bias + torch.logsumexp(self.visible_logits(h), -1).sum(-1)

    @full_precision
    def energy_and_grad(self, v: Tensor) -> tuple[Tensor, Tensor]:
        r"""Analytic :math:`F(v)` and :math:`\nabla_v F = -b - W p(h\mid v)` (``(B, N, K)``)."""
        with torch.no_grad():
            pre = self.hidden_input(v)
            e = -self.visible_term(v) - softplus(pre).sum(-1)
            g = -self.visible_bias - (torch.sigmoid(pre) @ self._flat_w().T).reshape(v.shape)
        return e, g

    def init_visible_bias_from_data(self, v: Tensor, *, pseudocount: float = 1.0) -> None:
        """Set ``b_ik`` to the log of the smoothed category frequencies of ``v: (B, N, K)`` (any float dtype)."""
        v = self.space.validate(v, "v")
        check_positive(pseudocount, "pseudocount")
        with torch.no_grad():
            self.visible_bias.copy_(
                torch.log(v.sum(0) + pseudocount) - math.log(v.shape[0] + pseudocount * self.n_categories)
            )

    def add_loglik_grad_(self, out, v, ph, alpha):
        flat = v.reshape(v.shape[0], -1)
        out[0].view(-1, self.n_hidden).addmm_(flat.T, ph, alpha=alpha)
        out[1].add_(v.sum(0), alpha=alpha)
        out[2].add_(ph.sum(0), alpha=alpha)


if TYPE_CHECKING:  # mypy checks that these RBMs offer what docs/capabilities.md lists for them
    from ebms.capabilities import (
        HasSpace,
        SupportsBipartiteSampling,
        SupportsEnergyAndGrad,
        SupportsLogPartition,
        SupportsLogProb,
    )

    def _offers(
        m: GaussianBernoulliRBM | CategoricalRBM,
    ) -> tuple[SupportsEnergyAndGrad, HasSpace, SupportsBipartiteSampling, SupportsLogPartition, SupportsLogProb]:
        return m, m, m, m, m
