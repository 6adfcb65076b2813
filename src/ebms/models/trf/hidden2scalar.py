r"""Hidden2Scalar neural sentence energy (monograph Eq. 3.10): a scalar read out of summed encoder states.

.. math::  U_\theta(x) = w^\top \sum_{i=1}^{|x|} \mathrm{enc}_\theta(x)[i] + b, \qquad E_\theta(x) = -U_\theta(x),

with :math:`\mathrm{enc}_\theta` a token encoder: a deep CNN with zero padding (Wang & Ou 2017,
"Language modeling with neural trans-dimensional random fields") or a bidirectional LSTM (Wang & Ou
2018, "Learning neural trans-dimensional random field language models with noise-contrastive
estimation"), here :class:`ebms.nets.SequenceEncoder`. Padding never reaches a real position (the
CNN zeroes it before every convolution, the BiLSTM packs the batch), so the energy of a sentence
does not depend on how much padding its batch carries.

Cost: one encoder pass, :math:`O(T H^2)` per sentence (:math:`O(T k H^2)` for the CNN).
"""

from __future__ import annotations

from torch import Tensor, nn

from ebms.nets import SequenceEncoder
from ebms.sequences import Sequences

__all__ = ["Hidden2Scalar"]


class Hidden2Scalar(nn.Module):
    """:math:`E(x) = -(w^\\top \\sum_i h_i + b)` over an encoder's states ``h (B, T, H)``.

    Args:
        encoder: a module mapping ``(tokens (B, T), lengths (B,))`` to ``(B, T, H)`` with an ``out_dim``
            attribute (``H``), e.g. :class:`ebms.nets.SequenceEncoder`.

    Example:
        >>> import torch
        >>> from ebms.sequences import Sequences
        >>> energy = Hidden2Scalar.cnn(vocab_size=10, embedding_dim=8, hidden=8, layers=2)
        >>> energy(Sequences.from_lists([[1, 2, 3], [4]])).shape
        torch.Size([2])
    """

    def __init__(self, encoder: nn.Module) -> None:
        super().__init__()
        if not isinstance(encoder, nn.Module):
            raise TypeError(f"encoder: expected an nn.Module (tokens, lengths) -> (B, T, H); got {type(encoder).__name__}")
        self.encoder = encoder
        self.readout = nn.Linear(int(encoder.out_dim), 1)  # type: ignore[arg-type]

    @classmethod
    def cnn(cls, vocab_size: int, embedding_dim: int = 128, hidden: int = 128, *, layers: int = 3,
            kernel_size: int = 3, dropout: float = 0.0) -> Hidden2Scalar:
        """Over a stack of zero-padded 1-D convolutions (:class:`~ebms.nets.SequenceEncoder`, ``kind="cnn"``)."""
        return cls(SequenceEncoder(vocab_size, embedding_dim, hidden, kind="cnn", layers=layers,
                                   kernel_size=kernel_size, dropout=dropout))

    @classmethod
    def bilstm(cls, vocab_size: int, embedding_dim: int = 128, hidden: int = 128, *, layers: int = 1,
               dropout: float = 0.0) -> Hidden2Scalar:
        """Over a bidirectional LSTM (:class:`~ebms.nets.SequenceEncoder`, ``kind="bilstm"``)."""
        return cls(SequenceEncoder(vocab_size, embedding_dim, hidden, kind="bilstm", layers=layers, dropout=dropout))

    def forward(self, x: Sequences) -> Tensor:
        """Energies ``(B,)`` of a ``Sequences`` batch (lengths >= 1)."""
        x = Sequences.coerce(x, name="x", pairs=False, expected="an ebms.sequences.Sequences")
        h = self.encoder(x.tokens, x.lengths)  # (B, T, H)
        pooled = (h * x.mask()[:, :, None]).sum(1)
        return -self.readout(pooled).squeeze(-1)
