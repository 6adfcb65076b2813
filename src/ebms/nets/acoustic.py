"""A small acoustic encoder for CTC / CTC-CRF: convolutional subsampling, BiLSTM, per-frame softmax.

Architecture (the usual CTC front end, e.g. Amodei et al., 2016, "Deep Speech 2"; the node
potentials of CTC-CRF, Xiang & Ou, 2019):

    x (B, T, F) -> [Conv2d(3x3, stride 2) -> ReLU] x n_conv over (time, frequency)
                -> Linear(C * F', H) -> BiLSTM(H, layers) -> Linear(2H, V) -> log_softmax

Each stride-2 convolution (padding 1) maps a length ``L`` to ``ceil(L / 2)``, so the output has
``T' = ceil(T / 2^n_conv)`` frames. Frames past an utterance's length are zeroed in the input and after every
convolution and the LSTM runs on packed sequences, so an utterance's output does not depend on
the other utterances of the batch or on its padding. Output is time-major ``(T', B, V)``
log-probabilities, as :func:`ebms.structured.ctc.ctc_loss` and ``torch.nn.functional.ctc_loss``
expect. Cost ``O(B T (C^2 F + H^2 + H V))``.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

from ebms._checks import check_in_range, check_int, check_tensor

__all__ = ["ConvBiLSTM", "subsampled_lengths"]


def subsampled_lengths(lengths: Tensor, n_conv: int) -> Tensor:
    """``ceil(L / 2^n_conv)`` computed as ``n_conv`` halvings ``L -> (L + 1) // 2``."""
    out = lengths
    for _ in range(n_conv):
        out = torch.div(out + 1, 2, rounding_mode="floor")
    return out


class ConvBiLSTM(nn.Module):
    """Conv-subsampling + BiLSTM encoder returning CTC log-probabilities.

    Args:
        n_features: ``F``, feature dims per frame (e.g. 40 log-mels).
        n_classes: ``V``, output symbols including the blank.
        channels: ``C``, channels of each convolution.
        hidden: ``H``, LSTM units per direction.
        layers: BiLSTM layers.
        n_conv: stride-2 convolutions (time subsampling ``2^n_conv``).
        dropout: dropout before the LSTM and the output layer (training only).
    """

    def __init__(self, n_features: int, n_classes: int, *, channels: int = 32, hidden: int = 128,
                 layers: int = 1, n_conv: int = 2, dropout: float = 0.0) -> None:
        super().__init__()
        self.n_features = check_int(n_features, "n_features", minimum=1)
        self.n_classes = check_int(n_classes, "n_classes", minimum=2)
        check_int(channels, "channels", minimum=1)
        check_int(hidden, "hidden", minimum=1)
        check_int(layers, "layers", minimum=1)
        self.n_conv = check_int(n_conv, "n_conv", minimum=0)
        check_in_range(dropout, "dropout", 0.0, 0.99)
        convs, c_in, f = [], 1, n_features
        for _ in range(n_conv):
            convs.append(nn.Conv2d(c_in, channels, kernel_size=3, stride=2, padding=1))
            c_in, f = channels, (f + 1) // 2
        self.convs = nn.ModuleList(convs)
        self.proj = nn.Linear(c_in * f, hidden)
        self.lstm = nn.LSTM(hidden, hidden, num_layers=layers, batch_first=True, bidirectional=True,
                            dropout=dropout if layers > 1 else 0.0)
        self.drop = nn.Dropout(dropout)
        self.out = nn.Linear(2 * hidden, n_classes)

    def forward(self, features: Tensor, lengths: Tensor) -> tuple[Tensor, Tensor]:
        """``features (B, T, F)``, ``lengths (B,)`` -> ``(log_probs (T', B, V), out_lengths (B,))``."""
        check_tensor(features, "features", floating=True)
        if features.dim() != 3 or features.shape[2] != self.n_features or features.shape[0] == 0:
            raise ValueError(f"features: expected shape (B >= 1, T, {self.n_features}); got {tuple(features.shape)}")
        b, t, _ = features.shape
        check_tensor(lengths, "lengths")
        if lengths.shape != (b,) or lengths.dtype.is_floating_point:
            raise ValueError(f"lengths: expected an integer tensor of shape ({b},); got {lengths.dtype} {tuple(lengths.shape)}")
        if int(lengths.min()) < 1 or int(lengths.max()) > t:
            raise ValueError(f"lengths: expected values in [1, {t}] (T = features.shape[1]); got "
                             f"min {int(lengths.min())}, max {int(lengths.max())}")
        lengths = lengths.to(features.device)
        n = lengths
        keep = torch.arange(t, device=features.device) < n[:, None]
        x = (features * keep[:, :, None].to(features.dtype)).unsqueeze(1)  # (B, 1, T, F), zero padding
        for conv in self.convs:
            x = torch.relu(conv(x))
            n = torch.div(n + 1, 2, rounding_mode="floor")
            keep = torch.arange(x.shape[2], device=x.device) < n[:, None]
            x = x * keep[:, None, :, None].to(x.dtype)
        x = x.permute(0, 2, 1, 3).flatten(2)  # (B, T', C F')
        x = self.drop(torch.relu(self.proj(x)))
        packed = pack_padded_sequence(x, n.cpu(), batch_first=True, enforce_sorted=False)
        h, _ = self.lstm(packed)
        h, _ = pad_packed_sequence(h, batch_first=True, total_length=x.shape[1])
        logits = self.out(self.drop(h))
        return torch.log_softmax(logits, dim=-1).transpose(0, 1), n
