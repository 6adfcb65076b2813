r"""Restricted Boltzmann machines as energies of their visible units (hidden units summed out).

* :class:`BernoulliRBM` — binary visibles and hiddens; conditionals, exact :math:`\log Z` over the
  smaller layer, pseudo-likelihood, and an AIS annealing path (:class:`BernoulliRBMAISPath`).
* :class:`GaussianBernoulliRBM` — real visibles (:mod:`ebms.models._rbm_layers`).
* :class:`CategoricalRBM` — one-hot categorical visibles (:mod:`ebms.models._rbm_layers`).

The module's energy is the free energy :math:`F(v)`, :math:`p(v) \propto e^{-F(v)}`, so every
sampler and estimator of the package applies; ``sample_hidden``/``sample_visible`` make
:class:`~ebms.samplers.block_gibbs.BlockGibbs` run in bipartite mode. Training by CD-k/PCD with
analytic gradients: :func:`ebms.fit.cd_update` and
:class:`ebms.fit.RBMEstimator`.

Example:
    >>> import torch
    >>> from ebms.models.rbm import BernoulliRBM
    >>> rbm = BernoulliRBM(6, 4, generator=torch.Generator().manual_seed(0))
    >>> v = torch.bernoulli(torch.full((3, 6), 0.5))
    >>> rbm.log_prob(v).shape
    torch.Size([3])
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import torch
from torch import Tensor, nn

from ebms._checks import check_finite, check_int, check_positive, check_shape, check_tensor
from ebms._precision import full_precision
from ebms.models._rbm_layers import CategoricalRBM, GaussianBernoulliRBM, RBMBase, bernoulli, softplus
from ebms.nets import linear
from ebms.spaces import Binary

__all__ = [
    "BernoulliRBM",
    "BernoulliRBMAISPath",
    "CategoricalRBM",
    "GaussianBernoulliRBM",
    "RBMBase",
    "bernoulli",
    "check_binary",
    "marginal_logits",
]


def check_binary(v: Tensor, name: str = "v", *, n_features: int | None = None) -> Tensor:
    """Check ``v: (B, D)`` is a float tensor of zeros and ones (``D = n_features`` when given).

    Scans in row blocks of 256 (cache-sized temporaries: about 3x faster than one whole-array
    comparison on a 10000 x 784 array); the error comes from :meth:`ebms.spaces.Binary.validate`.
    """
    check_tensor(v, name, floating=True)
    d = v.shape[-1] if n_features is None else n_features
    check_shape(v, (None, d), name)
    if any(bool((c * (c - 1)).any()) for c in v.split(256)):  # NaN and Inf are caught here too
        Binary(d).validate(v, name)
    return v


def marginal_logits(v: Tensor, *, pseudocount: float = 1.0) -> Tensor:
    r"""Log-odds of the smoothed data marginal, :math:`\log\frac{n_i + c}{B - n_i + c}`, ``(D,)`` for binary ``v: (B, D)``.

    The visible-bias initialisation of Hinton (2010, "A practical guide to training restricted Boltzmann
    machines") and the base model of AIS (Salakhutdinov & Murray, 2008); the pseudocount ``c`` keeps
    always-off/always-on pixels finite.
    """
    check_binary(v, "v")
    return _log_odds(v, check_positive(pseudocount, "pseudocount"))


def _log_odds(v: Tensor, pseudocount: float) -> Tensor:
    n = v.sum(0)
    return torch.log(n + pseudocount) - torch.log(v.shape[0] - n + pseudocount)


class BernoulliRBM(RBMBase):
    r"""Bernoulli–Bernoulli RBM: :math:`E(v,h) = -v^\top W h - b^\top v - a^\top h`, ``v, h`` binary.

    Free energy :math:`F(v) = -b^\top v - \sum_j \operatorname{softplus}(a_j + (v W)_j)`; conditionals
    :math:`p(h_j{=}1\mid v) = \sigma(a_j + (vW)_j)`, :math:`p(v_i{=}1\mid h) = \sigma(b_i + (W h)_i)`.
    Exact :math:`\log Z` enumerates the smaller layer (``2^min(D, H)`` terms, at most ``2^25``);
    over the hiddens it is :math:`\operatorname{logsumexp}_h [a^\top h + \sum_i \operatorname{softplus}(b_i + (Wh)_i)]`.

    Args:
        n_visible: ``D``.
        n_hidden: ``H``.
        generator: for the initial weights ``N(0, 0.01^2)``.

    Shapes: ``v: (B, D)`` float in {0, 1} (space :class:`~ebms.spaces.Binary`), ``h: (B, H)``,
    ``weight: (D, H)``. Cost of ``F``, a conditional or a Gibbs half-sweep: one ``B x D x H`` product.

    References: Smolensky (1986); Hinton (2002), "Training products of experts by minimizing
    contrastive divergence"; Salakhutdinov & Murray (2008), "On the quantitative analysis of deep
    belief networks".
    """

    def __init__(self, n_visible: int, n_hidden: int, *, generator: torch.Generator | None = None) -> None:
        super().__init__(n_visible, n_hidden)
        self.space: Binary = Binary(n_visible)
        self.num_visible_states = 2.0**n_visible
        self.weight = nn.Parameter(torch.empty(n_visible, n_hidden))
        self.visible_bias = nn.Parameter(torch.zeros(n_visible))
        self.hidden_bias = nn.Parameter(torch.zeros(n_hidden))
        self.reset_parameters(generator)

    # -- layer pieces ---------------------------------------------------------------------------
    def check_input(self, v: Tensor, name: str = "v") -> Tensor:
        """Validate ``v: (B, D)`` holds zeros and ones (a clear ``ValueError`` otherwise) in the parameters'
        dtype (a ``TypeError`` naming ``name`` otherwise)."""
        return self.check_dtype(check_binary(v, name, n_features=self.n_visible), name)

    def visible_term(self, v):
        return v @ self.visible_bias

    def hidden_input(self, v):
        # products of float32 CPU batches go to oneDNN when that pays (ebms.nets.linear): about 2x MKL here
        return linear(v, self.weight.T, self.hidden_bias)

    def visible_logits(self, h: Tensor) -> Tensor:
        """``b + W h``, ``(B, D)``."""
        return linear(h, self.weight, self.visible_bias)

    def visible_mean(self, h):
        """``p(v_i = 1 | h)``, ``(B, D)``."""
        return self.visible_logits(h).sigmoid_()

    visible_probs = visible_mean

    def sample_visible(self, h, generator=None):
        return bernoulli(self.visible_mean(h), generator)

    def hidden_log_marginal(self, h):
        return h @ self.hidden_bias + softplus(self.visible_logits(h)).sum(-1)

    @full_precision
    def energy_and_grad(self, v: Tensor) -> tuple[Tensor, Tensor]:
        r"""Analytic :math:`F(v)` and :math:`\nabla_v F = -b - W\,p(h\mid v)`, ``((B,), (B, D))``."""
        with torch.no_grad():
            pre = self.hidden_input(v)
            e = -(v @ self.visible_bias) - softplus(pre).sum(-1)
            g = -torch.addmm(self.visible_bias, torch.sigmoid(pre), self.weight.T)
        return e, g

    def add_loglik_grad_(self, out, v, ph, alpha):
        out[0].addmm_(v.T, ph, alpha=alpha)
        out[1].add_(v.sum(0), alpha=alpha)
        out[2].add_(ph.sum(0), alpha=alpha)

    # -- single-site conditionals (Gibbs, Gibbs-with-Gradients, pseudo-likelihood) -----------
    def flip_logits(self, v: Tensor) -> Tensor:
        r"""Every site's conditional log-odds :math:`\log\frac{p(v_i=1\mid v_{-i})}{p(v_i=0\mid v_{-i})}`, ``(B, D)``.

        :math:`b_i + \sum_j [\operatorname{softplus}(u_j + (1-v_i)W_{ij}) - \operatorname{softplus}(u_j - v_i W_{ij})]`
        with :math:`u = a + vW`. Cost and memory ``B x D x H``.
        """
        pre = self.hidden_input(v).unsqueeze(1)  # (B, 1, H)
        vi = v.unsqueeze(2)  # (B, D, 1)
        on = softplus(pre + (1 - vi) * self.weight)
        off = softplus(pre - vi * self.weight)
        return self.visible_bias + (on - off).sum(-1)

    def all_conditional_logits(self, x: Tensor) -> Tensor:
        """Single-site conditional logits of every site, ``(B, D, 2)`` (category 0 has logit 0)."""
        d = self.flip_logits(x)
        return torch.stack([torch.zeros_like(d), d], -1)

    def conditional_logits(self, x: Tensor, site: int | Tensor) -> Tensor:
        """Conditional logits of one site per chain (``int`` or ``LongTensor (B,)``), ``(B, 2)``."""
        self.space.check_site(site, x.shape[0])
        pre = self.hidden_input(x)
        if isinstance(site, Tensor):
            w, vi, b = self.weight[site], x.gather(1, site.view(-1, 1)), self.visible_bias[site]
        else:
            w, vi, b = self.weight[site].unsqueeze(0), x[:, site : site + 1], self.visible_bias[site]
        d = b + (softplus(pre + (1 - vi) * w) - softplus(pre - vi * w)).sum(-1)
        return torch.stack([torch.zeros_like(d), d], -1)

    def pseudo_log_likelihood(self, v: Tensor, *, max_elements: int = 1 << 22) -> Tensor:
        r""":math:`\sum_i \log p(v_i \mid v_{-i})`, ``(B,)``, exactly (all ``D`` sites, rows in chunks).

        scikit-learn's ``BernoulliRBM.score_samples`` returns ``D log p(v_i | v_-i)`` for one random
        site ``i`` per row, an unbiased one-site estimate of this sum.
        """
        v = self.check_input(v)
        rows = max(1, max_elements // (self.n_visible * self.n_hidden))
        with torch.no_grad():
            out = [-softplus(-(2 * c - 1) * self.flip_logits(c)).sum(-1) for c in v.split(rows)]
        return torch.cat(out)

    # -- data-based initialisation and AIS ------------------------------------------------------
    def init_visible_bias_from_data(self, v: Tensor, *, pseudocount: float = 1.0) -> None:
        """Set ``b`` to the log-odds of the smoothed data marginal of ``v: (B, D)`` (:func:`marginal_logits`)."""
        check_shape(v, (None, self.n_visible), "v")
        with torch.no_grad():
            self.visible_bias.copy_(marginal_logits(v, pseudocount=pseudocount))

    def ais_path(self, base_logits: Tensor | None = None, *, dtype: torch.dtype = torch.float64) -> BernoulliRBMAISPath:
        """The Salakhutdinov–Murray annealing path from independent Bernoulli visibles to this RBM.

        Args:
            base_logits: logits ``(D,)`` of the base model; best the training data's
                :func:`marginal_logits`. ``None`` uses this RBM's visible bias (equal to those logits
                right after :meth:`init_visible_bias_from_data`).
            dtype: arithmetic precision of the path (float64 default: AIS sums many small differences).

        The path holds a detached copy of the parameters taken now.
        """
        c = self.visible_bias if base_logits is None else base_logits
        return BernoulliRBMAISPath(self.weight, self.visible_bias, self.hidden_bias, c, dtype=dtype)


class BernoulliRBMAISPath:
    r"""Annealing path of Salakhutdinov & Murray (2008) for a :class:`BernoulliRBM`.

    With base logits ``c`` (a product of Bernoulli visibles, hidden weights zero) and
    :math:`\beta \in [0, 1]`:

    .. math::
        \log f_\beta(v) = (1-\beta)\, c^\top v + \beta\, b^\top v
                          + \sum_j \operatorname{softplus}\big(\beta (a_j + (vW)_j)\big),

    the visible marginal of :math:`E_\beta(v,h) = -(1-\beta)c^\top v - \beta(b^\top v + v^\top W h + a^\top h)`.
    So :math:`f_1 = e^{-F}`, :math:`f_0(v) = 2^H \prod_i e^{c_i v_i}` and
    :math:`\log Z_0 = \sum_i \operatorname{softplus}(c_i) + H \log 2`. The transition is one block
    Gibbs sweep of :math:`E_\beta`: :math:`h_j \sim \sigma(\beta(a_j + (vW)_j))`, then
    :math:`v_i \sim \sigma((1-\beta)c_i + \beta(b_i + (Wh)_i))`.

    Implements the annealing-path protocol of :mod:`ebms.estimators.ais`: ``sample_base``,
    ``base_log_partition``, ``log_density``, ``log_weight_increment`` and ``transition``. ``log_density(x, .)`` and ``transition(x, .)`` on the
    same tensor ``x`` share one ``x W`` product (cached on the tensor's identity and version).

    Args:
        weight, visible_bias, hidden_bias: RBM parameters ``(D, H)``, ``(D,)``, ``(H,)`` (copied, detached).
        base_logits: ``(D,)`` finite.
        dtype: arithmetic precision.
    """

    def __init__(
        self,
        weight: Tensor,
        visible_bias: Tensor,
        hidden_bias: Tensor,
        base_logits: Tensor,
        *,
        dtype: torch.dtype = torch.float64,
    ) -> None:
        d, h = weight.shape
        check_tensor(base_logits, "base_logits", floating=True)
        check_shape(base_logits, (d,), "base_logits")
        check_finite(base_logits, "base_logits")
        self.weight = weight.detach().to(dtype).clone()
        self.visible_bias = visible_bias.detach().to(dtype).clone()
        self.hidden_bias = hidden_bias.detach().to(dtype).clone()
        self.base_logits = base_logits.detach().to(dtype=dtype, device=weight.device).clone()
        self.dtype = dtype
        self.n_visible, self.n_hidden = d, h
        self._cache: tuple[Tensor, int, Tensor] | None = None

    @property
    def base_log_partition(self) -> float:
        r""":math:`\log Z_0 = \sum_i \operatorname{softplus}(c_i) + H\log 2`."""
        return float(softplus(self.base_logits).sum()) + self.n_hidden * math.log(2.0)

    def sample_base(self, n: int, generator: torch.Generator | None = None) -> Tensor:
        """``n`` exact draws from the base model, ``(n, D)`` in ``dtype``."""
        check_int(n, "n", minimum=1)
        return bernoulli(torch.sigmoid(self.base_logits).expand(n, -1), generator)

    def _pre(self, x: Tensor) -> Tensor:
        if x.is_inference():  # inference tensors have no version counter: no cache
            return torch.addmm(self.hidden_bias, x, self.weight)
        c = self._cache
        if c is not None and c[0] is x and c[1] == x._version:
            return c[2]
        pre = torch.addmm(self.hidden_bias, x, self.weight)
        self._cache = (x, x._version, pre)
        return pre

    def log_density(self, x: Tensor, beta: float | Tensor) -> Tensor:
        r"""Unnormalised :math:`\log f_\beta(x)`, ``(B,)`` for ``x: (B, D)``."""
        x = x.to(self.dtype)
        lin = x @ ((1 - beta) * self.base_logits + beta * self.visible_bias)
        return lin + softplus(beta * self._pre(x)).sum(-1)

    def log_weight_increment(self, x: Tensor, beta_from: float | Tensor, beta_to: float | Tensor) -> Tensor:
        r""":math:`\log f_{to}(x) - \log f_{from}(x)` with one shared ``x W`` product, ``(B,)``."""
        x = x.to(self.dtype)
        pre = self._pre(x)
        lin = x @ ((beta_to - beta_from) * (self.visible_bias - self.base_logits))
        return lin + (softplus(beta_to * pre) - softplus(beta_from * pre)).sum(-1)

    def transition(self, x: Tensor, beta: float | Tensor, generator: torch.Generator | None = None) -> Tensor:
        """One block Gibbs sweep leaving :math:`f_\\beta` invariant, ``(B, D)``."""
        x = x.to(self.dtype)
        h = bernoulli(torch.sigmoid(beta * self._pre(x)), generator)
        logits = (1 - beta) * self.base_logits + beta * torch.addmm(self.visible_bias, h, self.weight.T)
        return bernoulli(torch.sigmoid(logits), generator)

    def __repr__(self) -> str:
        return f"BernoulliRBMAISPath(n_visible={self.n_visible}, n_hidden={self.n_hidden}, dtype={self.dtype})"


if TYPE_CHECKING:  # mypy checks that the RBM and its path offer what docs/capabilities.md lists for them
    from ebms.capabilities import (
        AnnealingPath,
        HasSpace,
        SupportsAISPath,
        SupportsAllConditionalLogits,
        SupportsBipartiteSampling,
        SupportsConditionalLogits,
        SupportsEnergyAndGrad,
        SupportsLogPartition,
        SupportsLogProb,
        SupportsWeightIncrement,
    )

    def _rbm_offers(m: BernoulliRBM) -> tuple[
        SupportsEnergyAndGrad, HasSpace, SupportsConditionalLogits, SupportsAllConditionalLogits,
        SupportsBipartiteSampling, SupportsLogPartition, SupportsLogProb, SupportsAISPath,
    ]:
        return m, m, m, m, m, m, m, m

    def _path_offers(p: BernoulliRBMAISPath) -> tuple[AnnealingPath, SupportsWeightIncrement]:
        return p, p
