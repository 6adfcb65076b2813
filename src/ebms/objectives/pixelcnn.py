r"""Maximum likelihood of a PixelCNN over binary images (:class:`~ebms.models.PixelCNNModel`).

The model's :math:`\log p(x)` is exact and normalised (a product of per-pixel Bernoulli
conditionals), so its training loss is the mean negative log-likelihood per pixel, reported in
nats and in bits per dimension (van den Oord, Kalchbrenner & Kavukcuoglu, 2016, "Pixel recurrent
neural networks", ICML).
"""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn

from ebms.models.pixelcnn import PixelCNNAdapter, PixelCNNModel
from ebms.objectives._base import LossOutput, scalar_metrics

__all__ = ["PixelNLL"]


class PixelNLL(nn.Module):
    r"""Mean negative log-likelihood per pixel of a :class:`~ebms.models.PixelCNNModel` (maximum likelihood).

    .. math::  \mathcal L = -\frac{1}{B\,C H W} \sum_b \log p(x_b)

    in nats; metrics ``nll`` (the loss) and ``bits_per_dim = nll / ln 2``. ``model`` is a
    :class:`PixelCNNModel` or a :class:`PixelCNNAdapter` (its model is used, so the same
    trainer setup serves cross-entropy and E-ARM runs). ``batch``: images ``(B, C, H, W)`` or
    ``(B, C H W)`` in {0, 1}. The ``generator`` is unused. Cost: one forward and backward pass.
    """

    def forward(self, model: nn.Module, batch: Tensor, *, generator: torch.Generator | None = None) -> LossOutput:
        if isinstance(model, PixelCNNAdapter):
            model = model.model
        if not isinstance(model, PixelCNNModel):
            raise TypeError(f"model: expected a PixelCNNModel or PixelCNNAdapter; got {type(model).__name__}")
        nll = -model.log_prob(batch).mean() / model.dims
        return LossOutput(nll, scalar_metrics(nll=nll.detach(), bits_per_dim=nll.detach() / math.log(2.0)))
