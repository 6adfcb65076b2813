r"""Cross-entropy of a classifier: the supervised baseline of JEM and of semi-supervised learning.

.. math::  \mathcal L = \frac{1}{|L|}\sum_{b \in L} -\log \operatorname{softmax}(f_\theta(x_b))[y_b],

over the labelled rows :math:`L` of a batch ``(x, y)`` (``y = -1`` marks a row without a label,
which adds nothing, as in :class:`~ebms.objectives.jem.JEMObjective`'s batches, so both train on
the same data). The model is anything with ``logits(x) -> (B, K)`` (a
:class:`~ebms.models.jem.JEM`) or a module returning logits.

Metrics (one host sync): ``loss``, ``ce`` (the same), ``acc`` (accuracy on the labelled rows),
``labelled`` (their fraction).
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor, nn

from ebms._checks import check_finite, check_tensor
from ebms.capabilities import SupportsLogits, supports
from ebms.objectives._base import LossOutput, scalar_metrics

__all__ = ["CrossEntropy"]


def _logits(model: Any, x: Tensor) -> Tensor:
    out = model.logits(x) if supports(model, SupportsLogits) else model(x)
    if not isinstance(out, Tensor) or out.dim() != 2 or out.shape[0] != x.shape[0]:
        got = tuple(out.shape) if isinstance(out, Tensor) else type(out).__name__
        raise ValueError(f"model: expected logits of shape ({x.shape[0]}, K); got {got}")
    return out


class CrossEntropy(nn.Module):
    """Mean cross-entropy over the labelled rows of ``(x, y)`` (see the module docstring).

    Call: ``objective(model, (x, y), *, generator=None) -> LossOutput`` with ``x: (B, *event)`` and
    ``y: LongTensor (B,)`` in ``[-1, K)``. A batch without labelled rows gives loss 0 (no gradient).

    Example:
        >>> import torch
        >>> ce = CrossEntropy()
        >>> uniform = lambda x: torch.zeros(x.shape[0], 3)  # logits of a classifier that knows nothing
        >>> out = ce(uniform, (torch.zeros(4, 2), torch.tensor([0, 1, -1, 2])))
        >>> round(out.metrics["ce"], 4), out.metrics["labelled"]
        (1.0986, 0.75)
    """

    def forward(self, model: Any, batch: tuple[Tensor, Tensor], *, generator: torch.Generator | None = None
                ) -> LossOutput:
        if not isinstance(batch, (tuple, list)) or len(batch) != 2:
            raise TypeError(f"batch: expected a pair (x, y); got {type(batch).__name__}")
        x, y = batch
        check_finite(check_tensor(x, "x", floating=True, min_dim=1), "x")
        check_tensor(y, "y")
        if y.dtype != torch.long or tuple(y.shape) != (x.shape[0],):
            raise ValueError(f"y: expected a LongTensor of shape ({x.shape[0]},); got dtype {y.dtype}, "
                             f"shape {tuple(y.shape)}")
        logits = _logits(model, x)
        k = logits.shape[1]
        if bool(((y < -1) | (y >= k)).any()):
            raise ValueError(f"y: expected labels in [-1, {k - 1}] (-1: unlabelled); got min {int(y.min())}, "
                             f"max {int(y.max())}")
        lab = y >= 0
        n = lab.sum().clamp(min=1).to(logits.dtype)
        log_p = torch.log_softmax(logits, dim=-1).gather(1, y.clamp(min=0)[:, None]).squeeze(1)
        ce = -torch.where(lab, log_p, torch.zeros_like(log_p)).sum() / n
        acc = ((logits.detach().argmax(-1) == y) & lab).sum().to(logits.dtype) / n
        metrics = scalar_metrics(loss=ce, ce=ce, acc=acc, labelled=lab.to(logits.dtype).mean())
        return LossOutput(loss=ce, metrics=metrics, negatives=None)
