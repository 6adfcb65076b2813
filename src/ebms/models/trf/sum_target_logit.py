r"""SumTargetLogit neural sentence energy (monograph Eq. 3.12): the un-normalised next-token logits of
the sentence's own tokens, summed.

.. math::  U_\theta(x) = \sum_{i=1}^{|x|} z_\theta(x_{1:i-1})[x_i], \qquad E_\theta(x) = -U_\theta(x),

where :math:`z_\theta(x_{1:i-1}) \in \mathbb R^V` are the logits an autoregressive network gives for
position :math:`i` from the history (``<s>``, id 0, then :math:`x_1 .. x_{i-1}`). An autoregressive LM
would apply a softmax to each; here they stay un-normalised and only the sentence's sum counts (Liu,
Ou et al. 2023, "Exploring energy-based language models with different architectures and training
methods for speech recognition"). Causality makes the energy of a sentence independent of the
padding after it.

Cost: one pass of the network plus a ``(B, T, V)`` output layer.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from ebms._checks import check_int, check_probability
from ebms.sequences import Sequences

__all__ = ["SumTargetLogit"]


class _CausalLSTM(nn.Module):
    """Embedding, LSTM, linear: ``(B, T) -> (B, T, V)`` logits, position ``t`` seeing inputs ``<= t``."""

    def __init__(self, vocab_size: int, embedding_dim: int, hidden: int, layers: int, dropout: float) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab_size, embedding_dim)
        self.rnn = nn.LSTM(embedding_dim, hidden, num_layers=layers, batch_first=True,
                           dropout=dropout if layers > 1 else 0.0)
        self.drop = nn.Dropout(dropout)
        self.out = nn.Linear(hidden, vocab_size)

    def forward(self, inputs: Tensor, lengths: Tensor) -> Tensor:
        h, _ = self.rnn(self.drop(self.embed(inputs)))
        return self.out(self.drop(h))


class SumTargetLogit(nn.Module):
    """:math:`E(x) = -\\sum_i z(x_{<i})[x_i]` with a causal network ``z``.

    Args:
        vocab_size: ``V`` (id 0 is ``<s>`` as an input).
        embedding_dim, hidden, layers, dropout: the built-in LSTM's sizes.
        net: instead of the built-in LSTM, any module mapping inputs ``(B, T)`` (``<s>`` then the
            sentence shifted right) and lengths ``(B,)`` to causal logits ``(B, T, V)``, e.g. the
            logits of a pretrained autoregressive LM.

    Example:
        >>> from ebms.sequences import Sequences
        >>> energy = SumTargetLogit(10, embedding_dim=8, hidden=8)
        >>> energy(Sequences.from_lists([[1, 2, 3], [4]])).shape
        torch.Size([2])
    """

    def __init__(self, vocab_size: int, embedding_dim: int = 128, hidden: int = 128, *, layers: int = 1,
                 dropout: float = 0.0, net: nn.Module | None = None) -> None:
        super().__init__()
        self.vocab_size = check_int(vocab_size, "vocab_size", minimum=2)
        if net is None:
            net = _CausalLSTM(self.vocab_size, check_int(embedding_dim, "embedding_dim", minimum=1),
                              check_int(hidden, "hidden", minimum=1), check_int(layers, "layers", minimum=1),
                              check_probability(dropout, "dropout", open_high=True))
        elif not isinstance(net, nn.Module):
            raise TypeError(f"net: expected an nn.Module (inputs, lengths) -> (B, T, V); got {type(net).__name__}")
        self.net = net

    def forward(self, x: Sequences) -> Tensor:
        """Energies ``(B,)``; padding ignored."""
        x = Sequences.coerce(x, name="x", pairs=False, expected="an ebms.sequences.Sequences")
        mask = x.mask()
        tokens = x.tokens * mask
        inputs = torch.nn.functional.pad(tokens[:, :-1], (1, 0))  # <s> x_1 .. x_{T-1}
        logits = self.net(inputs, x.lengths)
        B, T = tokens.shape
        if tuple(logits.shape) != (B, T, self.vocab_size):
            raise ValueError(f"net: expected logits of shape ({B}, {T}, {self.vocab_size}); got {tuple(logits.shape)}")
        target = logits.gather(2, tokens[:, :, None]).squeeze(2)
        return -(target * mask).sum(1)
