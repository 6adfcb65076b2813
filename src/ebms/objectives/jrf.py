r"""Semi-supervised training of a joint random field (JRF): CRF likelihood on labelled sentences plus
dynamic NCE of its marginal TRF on unlabelled ones (monograph Eq. 5.11).

With the JRF's potential :math:`U_\theta(x, y)`, its marginal :math:`U_\theta(x) = \log\sum_y
e^{U_\theta(x, y)}` and :math:`\log p_\xi(l, x) = \log\pi_l + U_\theta(x) - \zeta_l`
(:class:`ebms.models.jrf.JRF`), the objective maximised is
:math:`J(\xi) = J_{sup}(\xi) + \alpha J_{uns}(\xi)` together with :math:`\min_\phi KL(p_{unl} \| q_\phi)`
for the noise LM :math:`q_\phi`. The loss minimised is

.. math::  \mathcal L = w_{sup}\,\underbrace{\frac{1}{|D_{lab}|}\sum_{(x, y) \in D_{lab}}
           -\big[U_\theta(x, y) - U_\theta(x)\big]}_{-J_{sup}:\ \text{CRF NLL}}
           \;+\; \alpha\,\mathcal L_{NCE}(D_{unl}, B_1, B_2)
           \;+\; w\,\Big(-\frac{1}{|D_{unl}|}\sum_{x \in D_{unl}}\log q_\phi(x)\Big),

where :math:`\mathcal L_{NCE}` is the NCE term of :class:`~ebms.objectives.trf_nce.DynamicNCE`
(the JRF is a TRF for it, so the very same code computes it) with :math:`B_1` (fake data, ``round((1 -
s) / s |D_{unl}|)`` draws of :math:`q_\phi` inside the lengths) and :math:`B_2` (``round(nu / s
|D_{unl}|)`` noise draws), ``s`` = ``data_share``. The defaults ``s = 1/2``, ``nu = 1`` give the
digest's sizes :math:`|B_2| = 2|B_1| = 2|D_{unl}|`. With ``nu = 1`` its negative gradient in
:math:`\xi = (\theta, \zeta)` is the estimator

.. math::  \widehat{\nabla J_{uns}} = \frac{1}{|D_{unl}| + |B_1|}\sum_{D_{unl} \cup B_1}
           \frac{q_\phi}{p_\xi + q_\phi}\, g \;-\; \frac{1}{|B_2|}\sum_{B_2}\frac{p_\xi}{p_\xi + q_\phi}\, g,
           \qquad g = \nabla_\xi \log p_\xi(l, x) = (\nabla_\theta U_\theta(x),\, -e_l),

with the **minus** on the :math:`B_2` term (the sign lost in the printed equation; digest A.3), the
weights computed in log space as :math:`\sigma(\pm(\log p_\xi - \log q_\phi))`. The noise term
is weighted ``w`` whatever ``alpha`` is (inside, DNCE gets ``noise_weight = w / alpha``), and the
noise's log-probabilities in the NCE term are detached, so the NCE term trains :math:`\xi` only and
the likelihood term :math:`\phi` only. With ``alpha = 0`` no noise is drawn and the loss is the CRF
NLL exactly (:class:`~ebms.objectives.conditional.ConditionalML` on the JRF's tagger).

**Batches.** ``(words (B, T), tags (B, T), lengths (B,))`` (or ``(words, Sequences(tags,
lengths))``), where a row whose tags are all ``-1`` within its length is unlabelled; or
:class:`~ebms.sequences.Sequences` (or ``(tokens, lengths)``), every row unlabelled. Labelled
sentences may have any length; unlabelled ones must lie in the TRF's space (lengths ``1..L``, ids
``1..V-1``). A batch without unlabelled rows has no NCE term (and does not train the noise).

Metrics (one host sync each part): ``loss``, ``labelled`` (fraction of rows), ``sup_nll`` (per
labelled sentence), and with an NCE term DNCE's ``nce``, ``nce_accuracy``, ``e_pos``, ``e_neg``,
``gap``, ``noise_outside``, ``noise_nll``, ``noise_ppl``, ``data_share``. Health: ``sup_nll``
falling, ``nce_accuracy`` near 0.5–0.7 (at 1.0 the noise is too easy), ``gap`` bounded.

References:
    Song, Y., Ou, Z., Liu, Z. & Yang, S. (2020). "Upgrading CRFs to JRFs and its benefits to sequence
    modeling and labeling." ICASSP.
    Wang, B. & Ou, Z. (2018). "Improved training of neural trans-dimensional random field language
    models with dynamic noise-contrastive estimation." IEEE SLT.
    Ou (2024), "Energy-Based Models with Applications to Speech and Language Processing", §5.3.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch
from torch import Tensor, nn

from ebms._checks import check_positive, check_probability
from ebms.capabilities import JointRandomField
from ebms.objectives._base import LossOutput, scalar_metrics
from ebms.objectives._tagging_batch import split_batch
from ebms.objectives._trf_common import check_trf
from ebms.objectives.trf_nce import DynamicNCE
from ebms.sequences import Sequences

__all__ = ["JRFObjective"]

_RENAMED = {"accuracy": "nce_accuracy", "alpha": "data_share"}


def _split(batch: Any) -> tuple[Sequences, Tensor | None]:
    """Sentences and tags (``-1`` rows unlabelled), or ``None`` tags for an all-unlabelled batch."""
    if isinstance(batch, Sequences) or (isinstance(batch, tuple) and len(batch) == 2
                                        and all(isinstance(t, Tensor) for t in batch)):
        return Sequences.coerce(batch, empty=False), None
    inputs, tags, lengths = split_batch(batch)
    if len(inputs) != 1 or not isinstance(inputs[0], Tensor) or inputs[0].shape != tags.shape:
        got = [tuple(i.shape) if isinstance(i, Tensor) else type(i).__name__ for i in inputs]
        raise ValueError(f"batch: expected (words (B, T), tags (B, T), lengths (B,)) with words shaped like "
                         f"tags {tuple(tags.shape)}; got inputs {got}")
    return Sequences(inputs[0], lengths), tags


def _labelled_rows(tags: Tensor, lengths: Tensor) -> Tensor:
    """``(B,)`` bool: rows with tags; a row mixing ``-1`` and tags inside its length is an error."""
    inside = torch.arange(tags.shape[1], device=tags.device) < lengths[:, None]
    missing = ((tags == -1) & inside).sum(1)
    mixed = (missing > 0) & (missing < lengths)
    if bool(mixed.any()):
        b = int(mixed.nonzero()[0, 0])
        raise ValueError(f"tags: expected each row fully tagged or all -1 (unlabelled) within its length; "
                         f"row {b} has {int(missing[b])} of {int(lengths[b])} tags missing")
    return missing == 0


class JRFObjective(nn.Module):
    r"""Semi-supervised JRF loss: CRF NLL + ``alpha`` DNCE (see the module docstring).

    Args:
        noise_lm: a trainable sentence LM for DNCE (``sample(n, generator=)``, differentiable
            ``log_prob(Sequences)``), e.g. :class:`~ebms.models.lm.LSTMLM` without dropout,
            pre-trained by maximum likelihood on the unlabelled text; ``None`` only with ``alpha = 0``.
        alpha: weight :math:`\alpha \ge 0` of :math:`J_{uns}` (0: supervised CRF only).
        nu: noise draws per positive sentence in DNCE.
        data_share: the data's share ``s`` in DNCE's positive law (DynamicNCE's ``alpha``).
        noise_weight: weight ``w > 0`` of the noise LM's likelihood term.
        sup_weight: weight :math:`w_{sup} > 0` of the CRF NLL.
        sample_options: keywords for ``noise_lm.sample`` (see :class:`~ebms.objectives.trf_nce.TRFNCE`).
    """

    def __init__(self, noise_lm: nn.Module | None, *, alpha: float = 1.0, nu: float = 1.0, data_share: float = 0.5,
                 noise_weight: float = 1.0, sup_weight: float = 1.0,
                 sample_options: Mapping[str, Any] | None = None) -> None:
        super().__init__()
        self.alpha = check_positive(alpha, "alpha", allow_zero=True)
        self.sup_weight = check_positive(sup_weight, "sup_weight")
        self.noise_weight = check_positive(noise_weight, "noise_weight")
        check_positive(nu, "nu")
        check_probability(data_share, "data_share", open_low=True)
        self.dnce: DynamicNCE | None = None
        if noise_lm is None:
            if self.alpha > 0:
                raise ValueError(f"noise_lm: expected a trainable noise LM when alpha > 0 (DNCE needs one); "
                                 f"got None with alpha={alpha}")
        else:
            inner = self.noise_weight / self.alpha if self.alpha > 0 else self.noise_weight
            self.dnce = DynamicNCE(noise_lm, nu=nu, alpha=data_share, noise_weight=inner,
                                   sample_options=sample_options)

    def forward(self, model: JointRandomField, batch: Any, *, generator: torch.Generator | None = None) -> LossOutput:
        """Loss on one batch of labelled and/or unlabelled sentences (module docstring)."""
        check_trf(model)
        if not isinstance(model, JointRandomField):
            raise TypeError(f"model: expected a JRF (a TRF with crf(x) -> LinearChainCRF, e.g. "
                            f"ebms.models.jrf.JRF); got {type(model).__name__}")
        x, tags = _split(batch)
        B = x.batch_size
        lab = (torch.zeros(B, dtype=torch.bool, device=x.lengths.device) if tags is None
               else _labelled_rows(tags, x.lengths))
        n_lab = int(lab.sum())
        use_nce = self.alpha > 0 and n_lab < B
        if n_lab == 0 and not use_nce:
            raise ValueError("batch: no labelled rows and alpha=0 leave nothing to train; give tagged rows "
                             "or construct the objective with alpha > 0 and a noise LM")
        terms: list[Tensor] = []
        metrics: dict[str, Any] = {"labelled": n_lab / B}
        if n_lab:
            assert tags is not None
            if n_lab == B:
                xl, yl = x, tags
            else:
                idx = lab.nonzero().squeeze(1)
                xl, yl = x[idx], tags[idx]
            nll = -model.crf(xl).log_prob(yl).sum() / n_lab
            terms.append(self.sup_weight * nll)
            metrics["sup_nll"] = nll.detach()
        if use_nce:
            assert self.dnce is not None
            xu = x if n_lab == 0 else x[(~lab).nonzero().squeeze(1)]
            out = self.dnce(model, xu, generator=generator)
            terms.append(self.alpha * out.loss)
            metrics.update({_RENAMED.get(k, k): v for k, v in out.metrics.items() if k != "loss"})
        loss = terms[0] if len(terms) == 1 else terms[0] + terms[1].to(terms[0].dtype)
        return LossOutput(loss=loss, metrics=scalar_metrics(loss=loss, **metrics))

    def extra_repr(self) -> str:
        return f"alpha={self.alpha}, sup_weight={self.sup_weight}, noise_weight={self.noise_weight}"
