"""The base class of the normalised models.

The protocol every normalised model follows, :class:`NormalisedModel`, and the optional-method
protocols :class:`SupportsLogProbGrad` and :class:`SupportsSiteLogits` are defined, with every other
capability, in :mod:`ebms.capabilities`, and re-exported here.
"""

from __future__ import annotations

import abc
from typing import Any, ClassVar

import torch
from torch import Tensor, nn

from ebms.capabilities import NormalisedModel, SupportsLogProbGrad, SupportsSiteLogits
from ebms.sequences import Sequences
from ebms.spaces import Space

__all__ = [
    "Distribution",
    "NormalisedModel",
    "SupportsLogProbGrad",
    "SupportsSiteLogits",
    "check_event",
]


class Distribution(nn.Module, abc.ABC):
    """Base class of the normalised models in :mod:`ebms.distributions`.

    Subclasses implement :meth:`sample` and :meth:`log_prob` and declare what else they offer as
    class attributes, read by consumers instead of probing for methods:

    * ``has_rsample``: a reparameterised ``rsample(n, *, generator)`` exists (gradients flow from
      the draws into the parameters);
    * ``has_entropy``: an exact ``entropy() -> ()`` exists.

    ``rsample`` and ``entropy`` are defined exactly when the flag is ``True``. Instances also carry
    ``space`` (the :class:`~ebms.spaces.Space` of one draw, ``None`` when no space type describes
    it), ``conditional_on_length`` (``True`` for sequence models that give ``log p(y | length)``
    and need ``sample(n, lengths=...)``; :class:`~ebms.capabilities.HasLengthConditioning`) and
    ``normalised`` (``False`` for a score table that is not a law, e.g. ``NGram.zeros``). Parameters
    live in buffers, so ``.to(device)`` and ``.double()`` move them and an objective holding the
    model carries them in its state dict.
    """

    has_rsample: ClassVar[bool] = False
    has_entropy: ClassVar[bool] = False
    conditional_on_length: bool = False
    normalised: bool = True
    space: Space | None = None

    def log_partition(self) -> float:
        """``log Z`` of ``log_prob``: 0 for every member (they are normalised); read by AIS paths
        (:class:`~ebms.capabilities.SupportsLogPartition`)."""
        return 0.0

    @abc.abstractmethod
    def sample(self, n: int, generator: torch.Generator | None = None) -> Tensor | Sequences:
        """``n`` independent draws (``generator`` may also be passed by keyword)."""

    @abc.abstractmethod
    def log_prob(self, x: Any) -> Tensor:
        """Normalised log-density (or log-mass) of each draw in ``x``, shape ``(B,)``."""


def check_event(x: Any, event_shape: tuple[int, ...], name: str = "x", *, floating: bool = True) -> Tensor:
    """``x`` is a tensor ``(B, *event_shape)``, floating unless ``floating=False`` (no host sync)."""
    if not isinstance(x, Tensor):
        raise TypeError(f"{name}: expected a torch.Tensor of shape (B, *{event_shape}); got {type(x).__name__}")
    if x.dim() != 1 + len(event_shape) or tuple(x.shape[1:]) != event_shape:
        shown = f"(B, {', '.join(map(str, event_shape))})" if event_shape else "(B,)"
        raise ValueError(f"{name}: expected shape {shown}; got {tuple(x.shape)}")
    if floating and not x.is_floating_point():
        raise TypeError(f"{name}: expected a floating-point tensor; got dtype {x.dtype}")
    return x
