"""Experts of controlled generation: COLD's soft fluency (gradient against finite differences, hard
limit against the LM's own scores), the cloze and LM fluency experts, the token constraint."""

from __future__ import annotations

import pytest
import torch

from ebms.models.controlled import (
    ClozeFluency,
    LMFluency,
    SoftFluency,
    TokenConstraint,
    allowed_tokens,
    cloze_proposal,
    lm_logits_along,
    lm_next_logits,
)
from ebms.models.lm import LSTMLM, TransformerLM
from ebms.nets.two_tower import TwoTowerCloze
from ebms.sequences import Sequences

V = 6


def _lm(kind: str) -> TransformerLM | LSTMLM:
    torch.manual_seed(0)
    lm = (TransformerLM(V, d_model=8, num_heads=2, num_layers=1, dim_feedforward=16, max_length=8) if kind == "transformer"
          else LSTMLM(V, embedding_dim=4, hidden_size=8, num_layers=1))
    return lm.double().eval()


@pytest.mark.parametrize("kind", ["transformer", "lstm"])
def test_the_soft_fluency_gradient_matches_finite_differences(kind):
    f = SoftFluency(_lm(kind), temperature=0.7)
    y = torch.randn(2, 3, V, generator=torch.Generator().manual_seed(1), dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda y: f(y), (y,), eps=1e-6, atol=1e-6)


@pytest.mark.parametrize("kind", ["transformer", "lstm"])
def test_soft_tokens_that_are_one_hot_give_the_lms_own_predictions(kind):
    lm = _lm(kind)
    x = Sequences(torch.tensor([[1, 4, 2, 5], [3, 3, 1, 2]]), torch.tensor([4, 4]))
    y = 200.0 * torch.nn.functional.one_hot(x.tokens, V).double()  # softmax is one-hot to 1e-80
    f = SoftFluency(lm)
    want = lm.logits(x)[:, :4]
    assert torch.allclose(f.lm_logits(y), want, atol=1e-10)
    # and the energy is then the cross-entropy of the LM's next-token laws against the one-hot rows
    ce = -(want.softmax(-1) * y.log_softmax(-1)).sum((1, 2))
    assert torch.allclose(f(y), ce, atol=1e-9)


def test_a_prompt_is_read_before_the_soft_tokens():
    lm = _lm("transformer")
    prompt, x = torch.tensor([[2, 3]]), Sequences(torch.tensor([[4, 1]]), torch.tensor([2]))
    y = 200.0 * torch.nn.functional.one_hot(x.tokens, V).double()
    full = lm.logits(Sequences(torch.tensor([[2, 3, 4, 1]]), torch.tensor([4])))[:, 2:4]
    assert torch.allclose(SoftFluency(lm, prefix=prompt).lm_logits(y), full, atol=1e-10)
    assert torch.allclose(lm_next_logits(lm)(torch.tensor([[2, 3]])), full[:, 0], atol=1e-12)


def test_lm_and_cloze_fluency_are_the_negative_log_scores():
    lm = _lm("lstm")
    x = Sequences(torch.tensor([[1, 4, 2], [3, 5, 0]]), torch.tensor([3, 2]))
    assert torch.allclose(LMFluency(lm)(x), -lm.log_prob(x))
    cloze = TwoTowerCloze(V, dim=8, layers=1, heads=2).double().eval()
    lp = cloze.log_probs(x)
    want = -torch.stack([lp[0, 0, 1] + lp[0, 1, 4] + lp[0, 2, 2], lp[1, 0, 3] + lp[1, 1, 5]])
    assert torch.allclose(ClozeFluency(cloze)(x), want)
    assert torch.allclose(cloze_proposal(cloze)(x, 1), lp[:, 1])
    assert lm_logits_along(lm, x, scale=2.0).shape == (2, 3, V)


def test_the_token_constraint_hard_and_soft():
    c = TokenConstraint.targets(1, torch.tensor([2, 3]), V)
    x = Sequences(torch.tensor([[1, 2, 1], [1, 2, 1]]), torch.tensor([3, 3]))
    assert c(x).tolist() == [0.0, 1.0]
    short = Sequences(torch.tensor([[1, 2, 1], [1, 3, 1]]), torch.tensor([1, 3]))
    assert c(short).tolist() == [1.0, 0.0]  # row 0 ends before position 1
    y = torch.randn(2, 3, V, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    want = -torch.stack([y[0, 1].log_softmax(-1)[2], y[1, 1].log_softmax(-1)[3]])
    assert torch.allclose(c.soft(y), want)
    either = TokenConstraint(0, torch.tensor([[False, True, True, False, False, False]]))
    p = y[:, 0].softmax(-1)
    assert torch.allclose(either.soft(y), -torch.log(p[:, 1] + p[:, 2]))
    assert allowed_tokens(4, [0, 1]).tolist() == [False, False, True, True]


@pytest.mark.parametrize("call, error, words", [
    (lambda: LMFluency("lm"), TypeError, "lm"),
    (lambda: ClozeFluency(_lm("lstm")), TypeError, "cloze"),
    (lambda: cloze_proposal(None), TypeError, "cloze"),
    (lambda: SoftFluency(_lm("lstm"), temperature=0), ValueError, "temperature"),
    (lambda: SoftFluency(_lm("lstm"), prefix=torch.zeros(2)), ValueError, "prefix"),
    (lambda: SoftFluency(_lm("lstm"))(torch.zeros(1, 2, V + 1, dtype=torch.float64)), ValueError, "y"),
    (lambda: LMFluency(_lm("lstm"))(torch.zeros(2, 3)), TypeError, "x"),
    (lambda: TokenConstraint(0, torch.ones(3, V)), ValueError, "allowed"),
    (lambda: TokenConstraint(0, torch.zeros(1, V, dtype=torch.bool)), ValueError, "allowed"),
    (lambda: TokenConstraint.targets(0, torch.tensor([V]), V), ValueError, "targets"),
    (lambda: TokenConstraint.targets(2, torch.tensor([1]), V).soft(torch.zeros(1, 2, V)), ValueError, "y"),
    (lambda: TokenConstraint.targets(0, torch.tensor([1, 2]), V)(Sequences(torch.ones(3, 2, dtype=torch.long),
                                                                              torch.full((3,), 2))), ValueError, "rows"),
])
def test_bad_inputs_are_refused(call, error, words):
    with pytest.raises(error, match=words):
        call()

