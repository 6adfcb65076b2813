r"""Private: the RBM's CD update as one function (:func:`cd_update`) and the fastest block products
for a model and batch (:func:`rbm_products`); public through :mod:`ebms.fit`.

:func:`cd_update` runs :func:`ebms.objectives.rbm_cd.negative_phase` and the statistics of
:func:`rbm_products`, then its own velocity step :math:`u \leftarrow \mu u + \eta g`,
:math:`\theta \leftarrow \theta + u`. Products: oneDNN's linear kernel for float32 CPU
:class:`~ebms.models.rbm.BernoulliRBM` batches large enough to gain, direct ``addmm`` calls for
other Bernoulli RBMs, else the model's own methods.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from ebms._checks import check_int, check_shape
from ebms.capabilities import BlockProducts
from ebms.models.rbm import BernoulliRBM, GaussianBernoulliRBM, RBMBase, bernoulli
from ebms.nets import onednn_linear, onednn_pays, onednn_usable
from ebms.objectives.rbm_cd import ModelProducts, negative_phase

_ONEDNN = onednn_linear()


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

    The sampling and the statistics are :func:`ebms.objectives.rbm_cd.negative_phase` and the
    model's :func:`rbm_products`, as in :class:`~ebms.objectives.rbm_cd.RBMContrastiveDivergence`;
    the step is :math:`u \leftarrow \mu u + \eta g` (``g``: the batch-mean log-likelihood gradient
    estimate minus ``weight_decay * W``), :math:`\theta \leftarrow \theta + u`.

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
    products = rbm_products(model, v)
    phase = negative_phase(model, v, k=k, persistent=persistent, chain=state.chain, mean_field=mean_field,
                           products=products, generator=generator)
    ph_pos, v_neg, ph_neg = phase.ph_pos, phase.v_neg, phase.ph_neg
    with torch.no_grad():
        params = model.cd_parameters()
        a_pos, a_neg = 1.0 / v.shape[0], -1.0 / v_neg.shape[0]
        if momentum == 0.0 and weight_decay == 0.0 and not model.grad_uses_params:
            products.add_grad_(params, v, ph_pos, v_neg, ph_neg, learning_rate * a_pos, learning_rate * a_neg)
            return CDState(chain=phase.chain, velocity=state.velocity)
        grads = products.statistics(v, ph_pos, v_neg, ph_neg, a_pos, a_neg)
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
    return CDState(chain=phase.chain, velocity=velocity)


def rbm_products(model: RBMBase, v: Tensor) -> BlockProducts:
    """The fastest :class:`~ebms.capabilities.BlockProducts` for ``model`` on the batch ``v``.

    oneDNN's linear kernel for a float32 CPU :class:`BernoulliRBM` batch large enough to gain
    (:class:`_OneDNNProducts`); for any other Bernoulli RBM its own methods with the visible draw
    reusing the means already computed; else :class:`~ebms.objectives.rbm_cd.ModelProducts`.
    """
    fast = _fast_products(model, v)
    if fast is not None:
        return fast
    if isinstance(model, BernoulliRBM):
        return _BernoulliProducts(model)
    return ModelProducts(model)


class _BernoulliProducts(ModelProducts):
    """A Bernoulli RBM's own methods; ``v ~ p(v | h)`` reuses the computed means (one product saved),
    and the statistics are :meth:`BernoulliRBM.add_loglik_grad_`'s arithmetic without first
    zero-filling a ``D x H`` buffer (``W``'s statistic is one product scaled in place by the next;
    ``add_grad_`` is the model's, in place).

    For a plain :class:`BernoulliRBM` the conditionals are direct ``addmm`` calls (what
    :func:`ebms.nets.linear` runs when oneDNN does not pay, which :func:`rbm_products` has already
    decided for this batch), skipping that function's per-call dispatch checks: at batch size 10
    those checks cost as much as the products.
    """

    def __init__(self, model: BernoulliRBM) -> None:
        self.model = model
        self.direct = type(model) is BernoulliRBM
        self.w, self.b, self.a = model.weight, model.visible_bias, model.hidden_bias

    def hidden_input(self, v: Tensor) -> Tensor:
        return torch.addmm(self.a, v, self.w) if self.direct else self.model.hidden_input(v)

    def visible_mean(self, h: Tensor) -> Tensor:
        return torch.addmm(self.b, h, self.w.T).sigmoid_() if self.direct else self.model.visible_mean(h)

    def sample_visible(self, mean: Tensor, h: Tensor, generator: torch.Generator | None) -> Tensor:
        return bernoulli(mean, generator)

    def statistics(self, v: Tensor, ph: Tensor, vn: Tensor, phn: Tensor, alpha_pos: float,
                   alpha_neg: float) -> list[Tensor]:
        gw = torch.mm(v.T, ph).addmm_(vn.T, phn, beta=alpha_pos, alpha=alpha_neg)
        if alpha_neg == -alpha_pos and v.shape == vn.shape:  # CD, and PCD with as many chains as rows
            # alpha (sum vn - sum v) as one reduction of differences: three operations instead of four
            # (at batch size 10 each costs about as much as its arithmetic)
            return [gw, torch.sub(vn, v).sum(0).mul_(alpha_neg), torch.sub(phn, ph).sum(0).mul_(alpha_neg)]
        gb = v.sum(0).mul_(alpha_pos).add_(vn.sum(0), alpha=alpha_neg)
        return [gw, gb, ph.sum(0).mul_(alpha_pos).add_(phn.sum(0), alpha=alpha_neg)]


class _OneDNNProducts(_BernoulliProducts):
    r"""A float32 CPU :class:`BernoulliRBM` update with its conditionals through oneDNN's linear kernel.

    ``torch.addmm`` on the CPU runs MKL, which on some CPUs (AVX-512 parts) is slower than oneDNN
    for the conditionals (:func:`ebms.nets.onednn_linear`): :math:`a + vW` for the data and the
    negatives, and :math:`\sigma(b + hW^\top)`. The weight statistics stay two accumulating MKL
    products (:class:`_BernoulliProducts`): on the development machine (AVX-512) they were faster
    than one oneDNN product over the stacked batch :math:`[v; \tilde v]^\top [\alpha_+ p_+;
    \alpha_- \tilde p]` at every shape tried (5% at ``B, D, H = 100, 784, 256``, 30% at ``B = 500``,
    4x at ``H = 8``) except ``H >= 1000`` (within 5%), because stacking costs a transposing copy;
    in place (``add_grad_``) they need no ``D x H`` temporary either. Same arithmetic as
    :meth:`BernoulliRBM.hidden_input` / ``visible_mean`` up to float32 round-off.
    """

    def __init__(self, model: BernoulliRBM) -> None:
        super().__init__(model)
        assert _ONEDNN is not None  # _fast_products builds this class only when oneDNN is present
        self.linear = _ONEDNN
        self.wd, self.bd, self.ad = model.weight.detach(), model.visible_bias.detach(), model.hidden_bias.detach()

    def hidden_input(self, v: Tensor) -> Tensor:
        return self.linear(v, self.wd.T, self.ad, "none", [], "")

    def visible_mean(self, h: Tensor) -> Tensor:
        return self.linear(h, self.wd, self.bd, "none", [], "").sigmoid_()

    def statistics(self, v: Tensor, ph: Tensor, vn: Tensor, phn: Tensor, alpha_pos: float,
                   alpha_neg: float) -> list[Tensor]:
        # at these sizes scaling the first product by beta costs a pass over D x H: both scaled by alpha
        gw = torch.addmm(v.new_zeros(()), v.T, ph, beta=0, alpha=alpha_pos).addmm_(vn.T, phn, alpha=alpha_neg)
        gb = v.sum(0).mul_(alpha_pos).add_(vn.sum(0), alpha=alpha_neg)
        return [gw, gb, ph.sum(0).mul_(alpha_pos).add_(phn.sum(0), alpha=alpha_neg)]


def _fast_products(model: RBMBase, v: Tensor) -> _OneDNNProducts | None:
    """The oneDNN products for a float32 CPU BernoulliRBM batch large enough to gain, else ``None``."""
    if _ONEDNN is None or type(model) is not BernoulliRBM or v.dim() != 2:
        return None
    w = model.weight
    # the size test first: it is arithmetic, while onednn_usable asks torch about its modes
    if not onednn_pays(True, w, v.shape[0]) or w.device != v.device or not onednn_usable(v):
        return None
    return _OneDNNProducts(model)
