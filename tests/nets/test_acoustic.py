"""Tests for ebms.nets.acoustic: the conv-subsampling BiLSTM CTC encoder."""

from __future__ import annotations

import pytest
import torch

from ebms.nets.acoustic import ConvBiLSTM, subsampled_lengths


def _model(**kw) -> ConvBiLSTM:
    torch.manual_seed(0)
    return ConvBiLSTM(8, 5, channels=4, hidden=6, **kw).eval()


@pytest.mark.parametrize("n_conv", [0, 1, 2, 3])
def test_output_is_time_major_log_softmax_with_subsampled_lengths(n_conv):
    m = _model(n_conv=n_conv)
    x = torch.randn(3, 21, 8, generator=torch.Generator().manual_seed(1))
    lengths = torch.tensor([21, 9, 1])
    log_probs, out = m(x, lengths)
    expected = torch.tensor([-(-n // 2**n_conv) for n in (21, 9, 1)])  # ceil(L / 2^n_conv)
    assert torch.equal(out, expected) and torch.equal(subsampled_lengths(lengths, n_conv), expected)
    assert log_probs.shape == (-(-21 // 2**n_conv), 3, 5)
    assert torch.allclose(log_probs.exp().sum(-1), torch.ones(log_probs.shape[:2]), atol=1e-5)


def test_an_utterance_output_does_not_depend_on_padding_or_batch_mates():
    m = _model(layers=2)
    g = torch.Generator().manual_seed(2)
    long, short = torch.randn(1, 30, 8, generator=g), torch.randn(1, 13, 8, generator=g)
    alone, n_alone = m(short, torch.tensor([13]))
    batch = torch.cat([long, torch.cat([short, torch.randn(1, 17, 8, generator=g)], 1)])
    together, n = m(batch, torch.tensor([30, 13]))
    assert int(n[1]) == int(n_alone[0]) == 4
    assert torch.allclose(together[:4, 1], alone[:4, 0], atol=1e-5)


def test_gradients_reach_every_parameter():
    m = _model()
    m.train()
    log_probs, _ = m(torch.randn(2, 12, 8), torch.tensor([12, 7]))
    log_probs[..., 1].sum().backward()
    assert all(p.grad is not None and torch.isfinite(p.grad).all() for p in m.parameters())


def test_bad_input_names_the_argument():
    m = _model()
    with pytest.raises(ValueError, match=r"features: expected shape \(B >= 1, T, 8\)"):
        m(torch.zeros(2, 10, 7), torch.tensor([10, 10]))
    with pytest.raises(ValueError, match=r"lengths: expected values in \[1, 10\]"):
        m(torch.zeros(2, 10, 8), torch.tensor([11, 3]))
    with pytest.raises(ValueError, match=r"lengths: expected an integer tensor of shape \(2,\)"):
        m(torch.zeros(2, 10, 8), torch.tensor([10]))
    with pytest.raises(ValueError, match="n_classes: expected an int >= 2"):
        ConvBiLSTM(8, 1)
    with pytest.raises(ValueError, match=r"dropout: expected a number in \[0.0, 0.99\]"):
        ConvBiLSTM(8, 3, dropout=1.5)
