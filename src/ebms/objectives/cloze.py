r"""Maximum pseudo-likelihood of a cloze model: the masked LM of mix-and-match.

For a cloze law :math:`q(x_t \mid x_{\setminus t})` at every position (a
:class:`~ebms.capabilities.ClozeNoise`, e.g. :class:`~ebms.nets.TwoTowerCloze`) and a batch of
sentences, the loss is the negative pseudo-log-likelihood per token (Besag 1975)

.. math::  \mathcal L = -\frac{1}{\sum_b L_b} \sum_b \sum_{t=1}^{L_b} \log q(x_{b,t} \mid x_{b,\setminus t}),

the cross-entropy a masked LM is trained by when every position is masked in turn. Metrics:
``nll`` (the loss), ``ppl`` (its exponential, a pseudo-perplexity) and ``tokens``.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor, nn

from ebms.capabilities import ClozeNoise, supports
from ebms.objectives._base import LossOutput, check_batch, scalar_metrics
from ebms.sequences import Sequences

__all__ = ["ClozePLL"]


class ClozePLL(nn.Module):
    """Negative pseudo-log-likelihood per token of a cloze model (module docstring); keeps no state.

    Example:
        >>> import torch
        >>> from ebms.nets import TwoTowerCloze
        >>> from ebms.sequences import Sequences
        >>> out = ClozePLL()(TwoTowerCloze(5, dim=8, layers=1), Sequences.from_lists([[1, 2, 3], [4, 2]]))
        >>> sorted(out.metrics)
        ['nll', 'ppl', 'tokens']
    """

    def forward(self, model: Any, batch: Sequences | tuple[Tensor, Tensor], *,
                generator: torch.Generator | None = None) -> LossOutput:
        """The loss of one batch of sentences (``Sequences`` or ``(tokens, lengths)``).

        Raises:
            TypeError: ``model`` without ``log_probs(x) -> (B, T, V)``; a batch of another form.
            ValueError: a batch without any token (and the model's token checks).
        """
        x = check_batch(Sequences.coerce(batch, name="x"), integer=True)
        if not supports(model, ClozeNoise):
            raise TypeError(f"model: expected a cloze model with log_probs(x) -> (B, T, V) (ebms.nets.TwoTowerCloze); "
                            f"got {type(model).__name__}")
        tokens = int(x.lengths.sum())
        if tokens == 0:
            raise ValueError("x: expected sentences with at least one token; got only empty ones")
        lp = model.log_probs(x).gather(2, x.tokens.unsqueeze(-1)).squeeze(-1)
        nll = -lp.masked_fill(~x.mask(), 0.0).sum() / tokens
        return LossOutput(nll, scalar_metrics(nll=nll.detach(), ppl=nll.detach().exp(), tokens=float(tokens)))
