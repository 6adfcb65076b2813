r"""An exponential moving average of a model's weights (Polyak averaging), kept beside training.

After every optimizer step each floating-point parameter's average moves towards it,

.. math::  \bar\theta \leftarrow \delta\,\bar\theta + (1 - \delta)\,\theta ,

starting from the weights the run starts with (no bias correction: after ``n`` steps the start
weighs :math:`\delta^n`); buffers (running statistics, counters) and integer entries are copied as
they are. The average is what samplers and evaluation use in the image-generation work it comes
from: Gao et al.'s recovery-likelihood code samples with an average of decay ``0.999``, as DDPM's
does; the trained weights keep being optimised unchanged.

:class:`~ebms.train.Trainer` keeps one when given ``ema=decay`` (``train.ema`` on the command
line): it is updated after each accepted step, restored with the rest of the state by a resume or
the divergence guard, and saved in every checkpoint under ``ema/`` (``ckpt.state("ema")`` is a
``state_dict`` of the model). ``ebms eval`` and ``ebms sample`` load it in place of the trained
weights (``eval.ema = false``: the trained ones).

Reference: Polyak, B. T. & Juditsky, A. B. (1992). "Acceleration of stochastic approximation by
averaging." SIAM J. Control Optim. 30(4).
"""

from __future__ import annotations

from collections.abc import Mapping

import torch
from torch import Tensor, nn

from ebms._checks import check_probability
from ebms.errors import CheckpointError

__all__ = ["WeightAverage"]


class WeightAverage:
    """The moving average of ``model``'s weights with decay ``decay`` in ``(0, 1)``.

    Args:
        model: the trained module; the average starts as a copy of its ``state_dict``.
        decay: :math:`\\delta`, the weight of the old average per update (``0.999``: a horizon of
            about 1,000 steps).

    Example:
        >>> import torch
        >>> lin = torch.nn.Linear(1, 1, bias=False)
        >>> _ = torch.nn.init.zeros_(lin.weight)
        >>> avg = WeightAverage(lin, 0.5)
        >>> _ = torch.nn.init.ones_(lin.weight); avg.update(lin)
        >>> avg.state_dict()["weight"].item()
        0.5
    """

    def __init__(self, model: nn.Module, decay: float) -> None:
        if not isinstance(model, nn.Module):
            raise TypeError(f"model: expected a torch.nn.Module; got {type(model).__name__}")
        self.decay = check_probability(decay, "decay", open_low=True, open_high=True)
        state = model.state_dict(keep_vars=True)
        #: the state_dict keys that are averaged (floating-point parameters); the rest are copied
        self.averaged_keys = tuple(k for k, v in state.items() if isinstance(v, nn.Parameter) and v.is_floating_point())
        self._copied_keys = tuple(k for k in state if k not in self.averaged_keys)
        self._average = {k: v.detach().clone() for k, v in state.items()}
        self._averaged = [self._average[k] for k in self.averaged_keys]  # the same tensors, for one foreach call

    @torch.no_grad()
    def update(self, model: nn.Module) -> None:
        """One step of the average towards ``model``'s current weights (call after each optimizer step)."""
        state = model.state_dict()
        if self._averaged:
            torch._foreach_lerp_(self._averaged, [state[k] for k in self.averaged_keys], 1.0 - self.decay)
        for k in self._copied_keys:
            self._average[k].copy_(state[k])

    def state_dict(self) -> dict[str, Tensor]:
        """The averaged weights, a ``state_dict`` of the model (the live tensors: copy before changing them)."""
        return dict(self._average)

    def load_state_dict(self, state: Mapping[str, Tensor], where: str = "state") -> None:
        """Take back what :meth:`state_dict` gave (same keys and shapes; ``where`` names the source in errors)."""
        missing = sorted(set(self._average) - set(state))
        unexpected = sorted(set(state) - set(self._average))
        if missing or unexpected:
            raise CheckpointError(f"{where}: averaged weights do not match the model: missing keys {missing}, "
                                  f"unexpected keys {unexpected}")
        for k, v in state.items():
            if tuple(v.shape) != tuple(self._average[k].shape):
                raise CheckpointError(f"{where}: averaged weights: {k}: shape {tuple(v.shape)}, the model has "
                                      f"{tuple(self._average[k].shape)}")
        with torch.no_grad():
            for k, v in state.items():
                self._average[k].copy_(v)

    def copy_to(self, model: nn.Module) -> nn.Module:
        """Load the averaged weights into ``model`` (the trained one or another of its architecture); returns it."""
        model.load_state_dict(self._average)
        return model

    def __repr__(self) -> str:
        return f"WeightAverage(decay={self.decay}, averaged={len(self.averaged_keys)} of {len(self._average)} entries)"
