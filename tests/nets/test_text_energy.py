"""TextEnergy: mean-pooled scalar energies of <s> c x (BiLSTM, bidirectional and causal Transformers)."""

from __future__ import annotations

import pytest
import torch

from ebms.models import TransformerLM
from ebms.nets.text_energy import TextEnergy
from ebms.sequences import Sequences

KINDS = ("bilstm", "transformer", "causal")


def make(kind: str, **kw) -> TextEnergy:
    torch.manual_seed(0)
    e = TextEnergy(7, kind=kind, dim=8, layers=2, heads=2, max_length=12, **kw).eval()
    torch.nn.init.normal_(e.head.weight)  # a fresh head is 0: make the energy non-trivial
    return e


PREFIX = Sequences.from_lists([[1, 2, 3], [4], [], [6, 6]])
CONT = Sequences.from_lists([[5], [2, 3, 1], [4, 4], []])


@pytest.mark.parametrize("kind", KINDS)
def test_energy_ignores_padding_whatever_its_ids(kind):
    e = make(kind)
    base = e(PREFIX, CONT)
    assert base.shape == (4,)
    wider = e(Sequences(torch.cat([PREFIX.tokens, torch.full((4, 3), 5)], 1), PREFIX.lengths),
              Sequences(torch.cat([CONT.tokens, torch.full((4, 2), 3)], 1), CONT.lengths))
    torch.testing.assert_close(wider, base, rtol=0, atol=1e-6)


@pytest.mark.parametrize("kind", KINDS)
def test_a_row_energy_does_not_depend_on_the_other_rows(kind):
    e = make(kind)
    whole = e(PREFIX, CONT)
    for b in range(4):
        torch.testing.assert_close(e(PREFIX[b], CONT[b]), whole[b:b + 1], rtol=0, atol=1e-6)


@pytest.mark.parametrize("kind", KINDS)
def test_a_fresh_energy_is_zero_so_the_joint_model_starts_at_the_base(kind):
    e = TextEnergy(7, kind=kind, dim=8, layers=1, heads=2)
    assert torch.equal(e(PREFIX, CONT), torch.zeros(4))


@pytest.mark.parametrize("kind", KINDS)
def test_energy_reads_the_prefix_and_the_continuation_as_one_sequence(kind):
    e = make(kind)
    # the split between c and x does not matter: only <s> c x is read
    a = e(Sequences.from_lists([[1, 2]]), Sequences.from_lists([[3, 4]]))
    b = e(Sequences.from_lists([[1]]), Sequences.from_lists([[2, 3, 4]]))
    torch.testing.assert_close(a, b, rtol=0, atol=1e-6)
    assert not torch.allclose(a, e(Sequences.from_lists([[1, 2]]), Sequences.from_lists([[4, 3]])))


def test_causal_states_depend_only_on_the_past_and_bidirectional_ones_on_both_sides():
    tokens, lengths = torch.tensor([[0, 1, 2, 3, 4]]), torch.tensor([5])
    changed = torch.tensor([[0, 1, 2, 3, 5]])
    for kind, causal in (("causal", True), ("transformer", False)):
        e = make(kind)
        a, b = e._encode(tokens, lengths), e._encode(changed, lengths)
        assert torch.allclose(a[0, :4], b[0, :4]) == causal
        assert not torch.allclose(a[0, 4], b[0, 4])


@pytest.mark.parametrize("positions", ["learned", "sinusoidal"])
def test_from_lm_copies_the_transformer_so_its_hidden_states_reproduce_the_lm_logits(positions):
    torch.manual_seed(1)
    lm = TransformerLM(7, d_model=8, num_heads=2, num_layers=2, dim_feedforward=12, max_length=10,
                       positions=positions).eval()
    e = TextEnergy.from_lm(lm).eval()
    assert e.kind == "causal" and e.dim == 8 and e.num_layers == 2 and e.max_length == 10
    c, x = Sequences.from_lists([[1, 2]]), Sequences.from_lists([[3, 4, 5]])
    inputs = torch.tensor([[0, 1, 2, 3, 4, 5]])
    logits = lm.decoder(e._encode(inputs, torch.tensor([6])))
    whole = lm.logits(Sequences.from_lists([[1, 2, 3, 4, 5]]))[:, :6]
    torch.testing.assert_close(logits, whole, rtol=1e-5, atol=1e-5)
    assert torch.equal(e(c, x), torch.zeros(1))  # the head starts at zero


def test_gradients_reach_every_parameter_once_the_head_is_nonzero():
    for kind in KINDS:
        e = make(kind).train()
        e(PREFIX, CONT).sum().backward()
        missing = [n for n, p in e.named_parameters() if p.grad is None or not bool(p.grad.abs().sum() > 0)]
        # the position embeddings of unused positions get no gradient; every tensor gets some
        assert missing == [], (kind, missing)


def test_energy_handles_empty_prefixes_and_continuations():
    e = make("transformer")
    out = e(Sequences.from_lists([[], []]), Sequences.from_lists([[], [1]]))
    assert out.shape == (2,) and bool(torch.isfinite(out).all())
    assert e(Sequences.from_lists([]), Sequences.from_lists([])).shape == (0,)


def test_errors_name_the_argument():
    e = make("bilstm")
    with pytest.raises(TypeError, match="^prefix: expected an ebms.sequences.Sequences"):
        e(torch.tensor([[1]]), CONT)
    with pytest.raises(TypeError, match="^x: expected an ebms.sequences.Sequences"):
        e(PREFIX, [[1]])
    with pytest.raises(ValueError, match=r"^prefix: expected one prefix per continuation \(4 rows\); got 2"):
        e(PREFIX[:2], CONT)
    with pytest.raises(ValueError, match=r"^x: expected token ids in \[1, 6\].*row 1 has 7 at position 0"):
        e(PREFIX, Sequences.from_lists([[1], [7], [], []]))
    with pytest.raises(ValueError, match=r"^prefix: expected token ids in \[1, 6\].*row 0 has 0 at position 1"):
        e(Sequences.from_lists([[1, 0], [], [], []]), CONT)
    with pytest.raises(ValueError, match="^kind: expected one of bilstm, transformer, causal; got 'gru'"):
        TextEnergy(7, kind="gru")
    with pytest.raises(ValueError, match="^heads: expected a divisor of dim=8; got 3"):
        TextEnergy(7, kind="causal", dim=8, heads=3)
    with pytest.raises(ValueError, match=r"^x: <s> c x needs positions 0\.\.5; this energy has max_length=4"):
        TextEnergy(7, kind="causal", dim=8, heads=2, max_length=4)(Sequences.from_lists([[1, 2]]),
                                                                  Sequences.from_lists([[3, 4, 5]]))
    with pytest.raises(TypeError, match="^lm: expected a TransformerLM .* got Linear without"):
        TextEnergy.from_lm(torch.nn.Linear(2, 2))
