"""The output type shared by every training objective."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, overload

import torch
from torch import Tensor

from ebms._checks import check_finite, check_tensor
from ebms.sequences import Sequences

__all__ = ["LossOutput", "check_batch", "scalar_metrics"]


@dataclass(frozen=True)
class LossOutput:
    """What an objective returns.

    Attributes:
        loss: 0-d tensor to call ``backward()`` on.
        metrics: floats for logging. Contrastive losses always report
            ``e_pos`` (mean data energy), ``e_neg`` (mean negative energy) and
            ``gap = e_neg - e_pos``. Watch the gap, not the loss value: a CD
            loss near zero can mean a healthy model *or* collapsed chains; a
            gap that grows without bound signals divergence.
        negatives: detached negative samples ``(B', *event)`` when the
            objective drew any (for plots and replay buffers), else ``None``.
    """

    loss: Tensor
    metrics: dict[str, float] = field(default_factory=dict)
    negatives: Tensor | None = None


def scalar_metrics(**values: Tensor | float) -> dict[str, float]:
    """Turn 0-d tensors into floats with one host sync for all of them."""
    names = list(values)
    tensors = [v.detach().float().reshape(()) if isinstance(v, Tensor) else torch.tensor(float(v)) for v in values.values()]
    if not tensors:
        return {}
    flat = torch.stack([t.cpu() if t.device.type != "cpu" else t for t in tensors]).tolist()
    return dict(zip(names, flat))


@overload
def check_batch(batch: Tensor, *, finite: bool = ..., integer: bool = ...) -> Tensor: ...
@overload
def check_batch(batch: Sequences, *, finite: bool = ..., integer: bool = ...) -> Sequences: ...
def check_batch(batch: Any, *, finite: bool = True, integer: bool = False) -> Tensor | Sequences:
    """A non-empty data batch, returned detached (data never carries a graph into a loss).

    By default a floating tensor ``(B, *event)``, finite unless ``finite=False`` (a space checks it).
    ``integer=True`` is for objectives whose math needs no gradient in ``x`` (discrete data): it also
    accepts integer tensors (category indices) and :class:`~ebms.sequences.Sequences` (token ids;
    their vocabulary and lengths are the space's to check).

    Raises:
        TypeError: not a tensor (or ``Sequences`` with ``integer=True``), or a wrong dtype.
        ValueError: no rows, or (``finite``) NaN/Inf entries.
    """
    if isinstance(batch, Sequences):
        if not integer:
            raise TypeError(
                "batch: expected a floating-point tensor; got Sequences (token sequences need an objective "
                "for discrete data)"
            )
        if batch.batch_size == 0:
            raise ValueError(f"batch: expected at least one sequence; got an empty batch {batch!r}")
        return batch
    check_tensor(batch, "batch", floating=not integer, min_dim=1)
    if integer and (batch.dtype == torch.bool or batch.is_complex()):
        raise TypeError(f"batch: expected a floating-point or integer tensor; got dtype {batch.dtype}")
    if batch.shape[0] == 0:
        raise ValueError(f"batch: expected at least one row; got shape {tuple(batch.shape)}")
    return check_finite(batch.detach(), "batch") if finite else batch.detach()
