"""Tests for ebms.nets.transducer: the prediction net's two interfaces and the beam search."""

from __future__ import annotations

import pytest
import torch

from ebms.nets.transducer import PredictionNet, TranscriptionNet, transducer_beam_search


def test_prediction_net_teacher_forcing_equals_one_step_at_a_time():
    torch.manual_seed(0)
    g = PredictionNet(4, embedding_dim=3, hidden=5, layers=2).double().eval()
    tags = torch.tensor([[1, 3, 0, 2, 2], [0, 0, 1, 3, 1]])
    full = g(tags)
    state, prev = g.initial_state(2), torch.full((2,), g.bos)
    for i in range(5):
        step, state = g.step(prev, state)
        assert torch.allclose(full[:, i], step, atol=1e-12)
        prev = tags[:, i]


def test_prediction_net_output_depends_only_on_earlier_tags():
    torch.manual_seed(0)
    g = PredictionNet(3).double()
    a = torch.tensor([[0, 1, 2, 0]])
    b = torch.tensor([[0, 1, 0, 2]])
    ga, gb = g(a), g(b)
    assert torch.allclose(ga[:, :3], gb[:, :3])
    assert not torch.allclose(ga[:, 3], gb[:, 3])


def test_transcription_net_outputs_one_score_per_tag():
    net = TranscriptionNet(10, 3, embedding_dim=4, hidden=6, kind="cnn")
    out = net(torch.randint(0, 10, (2, 7)), torch.tensor([7, 4]))
    assert out.shape == (2, 7, 3)


def test_beam_search_of_width_one_is_greedy_and_tracks_the_oracle():
    torch.manual_seed(0)
    g = PredictionNet(3).double().eval()
    f = torch.randn(2, 5, 3, dtype=torch.float64)
    lengths = torch.tensor([5, 3])

    def local(fi: torch.Tensor, gi: torch.Tensor, prev: torch.Tensor) -> torch.Tensor:
        return fi + gi

    with torch.no_grad():
        res = transducer_beam_search(f, lengths, g, local, beam=1)
        state, prev = g.initial_state(2), torch.full((2,), 3)
        greedy = []
        for i in range(5):
            gi, state = g.step(prev, state)
            prev = (f[:, i] + gi).argmax(-1)
            greedy.append(prev)
        greedy = torch.stack(greedy, 1)
        assert torch.equal(res.tags[0], greedy[0]) and torch.equal(res.tags[1, :3], greedy[1, :3])
        assert (res.tags[1, 3:] == -1).all()
        tracked = transducer_beam_search(f, lengths, g, local, beam=1, oracle=greedy)
        assert tracked.in_beam is not None and tracked.in_beam.all()
        other = greedy.clone()
        other[:, 1] = (other[:, 1] + 1) % 3
        lost = transducer_beam_search(f, lengths, g, local, beam=1, oracle=other)
        assert lost.in_beam is not None
        assert lost.in_beam[:, 0].all() and not lost.in_beam[:, 1:3].any()


def test_prediction_net_bad_sizes_name_the_argument():
    with pytest.raises(ValueError, match="n_tags: expected an int >= 1; got 0"):
        PredictionNet(0)
    with pytest.raises(ValueError, match="hidden: expected an int >= 1; got 0"):
        PredictionNet(3, hidden=0)
    with pytest.raises(ValueError, match="beam: expected an int >= 1; got 0"):
        transducer_beam_search(torch.zeros(1, 2, 3), torch.tensor([2]), PredictionNet(3), lambda f, g, p: f + g, beam=0)
