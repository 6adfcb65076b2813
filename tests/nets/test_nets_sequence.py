"""SequenceEncoder: shapes, padding independence, character CNN, input checks."""

from __future__ import annotations

import pytest
import torch

from ebms.nets.sequence import SequenceEncoder


def _batch(t: int, g: torch.Generator) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    words = torch.randint(1, 30, (3, t), generator=g)
    chars = torch.randint(0, 12, (3, t, 5), generator=g)
    return words, torch.tensor([t, 3, 1]), chars


@pytest.mark.parametrize("kind", ["bilstm", "cnn"])
def test_features_of_real_positions_do_not_depend_on_padding(kind: str) -> None:
    torch.manual_seed(0)
    enc = SequenceEncoder(30, 8, 6, kind=kind, layers=2, char_vocab_size=12).eval()
    g = torch.Generator().manual_seed(1)
    words, lengths, chars = _batch(6, g)
    extra_w, _, extra_c = _batch(4, g)
    h = enc(words, lengths, chars)
    h_padded = enc(torch.cat([words, extra_w], 1), lengths, torch.cat([chars, extra_c], 1))
    assert h.shape == (3, 6, enc.out_dim) and h_padded.shape == (3, 10, enc.out_dim)
    real = torch.arange(6)[None, :] < lengths[:, None]
    torch.testing.assert_close(h[real], h_padded[:, :6][real])
    assert h_padded[:, 6:].abs().max() == 0 and h[~real].abs().max() == 0  # padding rows are zero


def test_bilstm_features_equal_a_single_unpadded_sequence() -> None:
    torch.manual_seed(0)
    enc = SequenceEncoder(30, 8, 6).eval()
    words = torch.randint(1, 30, (2, 5))
    lengths = torch.tensor([5, 2])
    h = enc(words, lengths)
    alone = enc(words[1:, :2], torch.tensor([2]))
    torch.testing.assert_close(h[1, :2], alone[0])


def test_out_dim_is_twice_hidden_for_bilstm_and_hidden_for_cnn() -> None:
    assert SequenceEncoder(10, 4, 7).out_dim == 14
    assert SequenceEncoder(10, 4, 7, kind="cnn").out_dim == 7


@pytest.mark.parametrize(
    ("kwargs", "call", "match"),
    [
        ({"kind": "gru"}, None, "kind: expected one of bilstm, cnn; got 'gru'"),
        ({"kernel_size": 4, "kind": "cnn"}, None, "kernel_size: expected an odd width"),
        ({}, (torch.tensor([[1, 2]]), torch.tensor([3])), r"lengths: expected values in \[1, 2\]"),
        ({}, (torch.tensor([[1, 10]]), torch.tensor([2])), r"words: expected ids in \[0, 10\); got min 1, max 10"),
        ({}, (torch.tensor([[1.0, 2.0]]), torch.tensor([2])), r"words: expected a \(B, T\) long tensor"),
        ({}, (torch.tensor([[1, 2]]), torch.tensor([2, 2])), r"lengths: expected a \(1,\) long tensor"),
    ],
)
def test_bad_arguments_name_the_argument(kwargs: dict, call: tuple | None, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        enc = SequenceEncoder(10, 4, 3, **kwargs)
        assert call is not None
        enc(*call)


def test_chars_required_exactly_when_char_cnn_configured() -> None:
    enc = SequenceEncoder(10, 4, 3, char_vocab_size=5)
    with pytest.raises(ValueError, match="chars: expected character ids exactly when"):
        enc(torch.tensor([[1, 2]]), torch.tensor([2]))
    with pytest.raises(ValueError, match=r"chars: expected ids in \[0, 5\)"):
        enc(torch.tensor([[1, 2]]), torch.tensor([2]), torch.full((1, 2, 3), 7))
