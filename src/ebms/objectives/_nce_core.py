r"""The logistic core of noise-contrastive estimation, written once.

Every NCE variant — unconditional (:class:`~ebms.objectives.NCE`), conditional
(:class:`~ebms.objectives.ConditionalNCE`) and the dynamic / per-length NCE of
trans-dimensional random fields — classifies data against ``nu`` noise samples per data sample
with the logit (monograph Eq. 2.45)

.. math::  G(x) = \log\tilde p_\theta(x) - \zeta(x) - \log\nu - \log q(x),

where :math:`\log\tilde p_\theta = -E_\theta` (or a CRF's score ``U(x, y)``) is the unnormalised
model, ``q`` the noise law and :math:`\zeta` the model's log-normaliser. Variants differ only in
:math:`\zeta`, which :func:`nce_logits` takes in one of four forms:

* ``None``: a self-normalised model (conditional NCE of Ma & Collins, 2018): nothing is
  subtracted;
* a scalar (float or 0-d tensor): one learned :math:`\log Z` (Gutmann & Hyvärinen, 2010);
* a table ``(L + 1,)`` with ``lengths=``: one :math:`\log Z_l` per sequence length ``l``, read
  at each sample's length (Wang & Ou, 2017/2018, TRF language models);
* a tensor matching the trailing dimensions of ``log_model``: one :math:`\zeta` per condition,
  aligned with the batch (data ``(B,)``, noise ``(K, B)`` with ``K`` draws per condition).

:func:`nce_loss` is the negative log-likelihood of the labels (Eq. 2.46):

.. math::  \mathcal L = \frac1B\sum_{i=1}^{B}\operatorname{softplus}(-G(x_i))
           + \nu\,\frac1N\sum_{j=1}^{N}\operatorname{softplus}(G(y_j)),

with ``reduction="mean"`` (any number ``N`` of noise samples), or ``B`` times it with
``reduction="sum"`` when ``N = nu B`` exactly (the weight ``nu / N`` is then ``1 / B`` and the sum
can be accumulated over chunks of a batch before one division). Its gradient in ``G`` is
``-sigmoid(-G) / B`` for data and ``nu sigmoid(G) / N`` for noise. ``softplus`` is the exact
:func:`ebms._numerics.softplus` (no cut-off). Cost: elementwise, ``O(B + N)``.

References:
    Gutmann, M. & Hyvärinen, A. (2010). "Noise-contrastive estimation: a new estimation principle
    for unnormalized statistical models." AISTATS.
    Ma, Z. & Collins, M. (2018). "Noise contrastive estimation and negative sampling for
    conditional models: consistency and statistical efficiency." EMNLP.
    Wang, B. & Ou, Z. (2018). "Learning neural trans-dimensional random field language models
    with noise-contrastive estimation." ICASSP.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from ebms._checks import check_positive, check_tensor
from ebms._numerics import softplus

__all__ = ["nce_logits", "nce_loss"]

REDUCTIONS = ("mean", "sum")


def _log_z_term(log_z: Tensor | float, log_model: Tensor, lengths: Tensor | None) -> Tensor | float:
    """``zeta(x)`` shaped like ``log_model`` (or a scalar), after checking the form of ``log_z``."""
    if not isinstance(log_z, Tensor):
        if isinstance(log_z, bool) or not isinstance(log_z, (int, float)):
            raise TypeError(f"log_z: expected None, a number or a tensor; got {type(log_z).__name__}")
        if lengths is not None:
            raise ValueError("lengths: index a per-length log_z table (L + 1,); got a scalar log_z")
        return float(log_z)
    if lengths is not None:
        check_tensor(lengths, "lengths")
        if lengths.is_floating_point() or lengths.dtype == torch.bool:
            raise TypeError(f"lengths: expected an integer tensor; got dtype {lengths.dtype}")
        if lengths.shape != log_model.shape:
            raise ValueError(f"lengths: expected the shape of log_model {tuple(log_model.shape)}; "
                             f"got {tuple(lengths.shape)}")
        if log_z.dim() != 1:
            raise ValueError(f"log_z: expected a per-length table (L + 1,) with lengths=; got shape {tuple(log_z.shape)}")
        if lengths.numel() and (int(lengths.min()) < 0 or int(lengths.max()) >= log_z.shape[0]):
            raise ValueError(f"lengths: expected values in [0, {log_z.shape[0] - 1}] (the rows of log_z); "
                             f"got min {int(lengths.min())}, max {int(lengths.max())}")
        return log_z[lengths]
    if log_z.dim() == 0:
        return log_z
    k = log_z.dim()
    if k > log_model.dim() or tuple(log_model.shape[log_model.dim() - k:]) != tuple(log_z.shape):
        raise ValueError(f"log_z: expected a scalar, a table with lengths=, or one value per condition matching "
                         f"the trailing dimensions of log_model {tuple(log_model.shape)}; got shape {tuple(log_z.shape)}")
    return log_z


def nce_logits(log_model: Tensor, log_noise: Tensor, *, nu: float, log_z: Tensor | float | None = None,
               lengths: Tensor | None = None) -> Tensor:
    r"""The classifier's logits :math:`G = \log\tilde p - \zeta - \log\nu - \log q`, shaped like ``log_model``.

    Args:
        log_model: unnormalised model log-density :math:`\log\tilde p(x)` (``-E(x)``, a CRF score),
            any shape ``S`` (``(B,)`` for data, ``(K, B)`` or ``(N,)`` for noise).
        log_noise: :math:`\log q(x)` of the same samples, shape ``S`` (never broadcast).
        nu: noise samples per data sample, ``> 0``.
        log_z: :math:`\zeta`: ``None`` (self-normalised), a scalar, a per-length table ``(L + 1,)``
            (then ``lengths`` gives each sample's length, shape ``S``), or one value per condition
            matching the trailing dimensions of ``S``.
        lengths: integer lengths of the samples, only with a per-length table.

    ``G > 0`` classifies a sample as data. Computed as ``((log_model - zeta) - log nu) - log_noise``.

    Raises:
        TypeError: a non-tensor or non-floating ``log_model``/``log_noise``, integer ``log_z``
            tensors, non-integer ``lengths``.
        ValueError: shapes that differ, ``nu <= 0``, a ``log_z`` of no recognised form, lengths
            outside the table.
    """
    check_tensor(log_model, "log_model", floating=True)
    check_tensor(log_noise, "log_noise", floating=True)
    if log_noise.shape != log_model.shape:
        raise ValueError(f"log_noise: expected the shape of log_model {tuple(log_model.shape)}; "
                         f"got {tuple(log_noise.shape)}")
    log_nu = math.log(check_positive(nu, "nu"))
    if log_z is None:
        if lengths is not None:
            raise ValueError("lengths: index a per-length log_z table (L + 1,); got lengths with log_z=None")
        g = log_model
    else:
        if isinstance(log_z, Tensor) and not log_z.is_floating_point():
            raise TypeError(f"log_z: expected a floating-point tensor; got dtype {log_z.dtype}")
        g = log_model - _log_z_term(log_z, log_model, lengths)
    return g - log_nu - log_noise


def nce_loss(logit_data: Tensor, logit_noise: Tensor, *, nu: float, reduction: str = "mean") -> Tensor:
    r"""NCE's logistic loss from the logits of ``B`` data and ``N`` noise samples (0-d tensor).

    Args:
        logit_data: :math:`G` of the data, any shape with ``B >= 1`` elements.
        logit_noise: :math:`G` of the noise, any shape with ``N >= 1`` elements.
        nu: the noise-to-data ratio used in the logits.
        reduction: ``"mean"``: ``mean softplus(-G_data) + nu * mean softplus(G_noise)``;
            ``"sum"``: ``sum softplus(-G_data) + sum softplus(G_noise)``, ``B`` times the mean
            form, which requires ``N == nu * B``.

    Raises:
        ValueError: an empty input, ``nu <= 0``, an unknown reduction, ``N != nu B`` with ``"sum"``.
    """
    check_tensor(logit_data, "logit_data", floating=True)
    check_tensor(logit_noise, "logit_noise", floating=True)
    nu = check_positive(nu, "nu")
    b, n = logit_data.numel(), logit_noise.numel()
    if b == 0 or n == 0:
        raise ValueError(f"logit_data/logit_noise: expected at least one sample each; got {b} data and {n} noise")
    if reduction == "mean":
        return softplus(-logit_data).mean() + nu * softplus(logit_noise).mean()
    if reduction == "sum":
        if n != nu * b:
            raise ValueError(f"logit_noise: reduction='sum' weighs every sample 1 and needs nu * B = {nu * b:g} noise "
                             f"samples; got {n}")
        return softplus(-logit_data).sum() + softplus(logit_noise).sum()
    raise ValueError(f"reduction: expected one of {', '.join(REDUCTIONS)}; got {reduction!r}")
