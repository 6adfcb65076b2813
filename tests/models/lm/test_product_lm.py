"""ProductLM (RALM, Deng et al. 2020 Eq. 6): the per-step normalised product by hand, a uniform expert gives the
base, gradients reach only the expert, the base stays frozen, sampling and continuation scores of the product."""

from __future__ import annotations

import pytest
import torch

from ebms.models.lm import LSTMLM, ProductLM, ProductState, TransformerLM
from ebms.objectives import AutoregressiveNLL
from ebms.sequences import Sequences

V = 6
X = Sequences.from_lists([[1, 2, 3], [4], [5, 5, 1, 2], []])


def _pair(kind: str, dtype: torch.dtype = torch.float64) -> tuple[torch.nn.Module, torch.nn.Module]:
    torch.manual_seed(0)
    if kind == "lstm":
        base = LSTMLM(V, embedding_dim=5, hidden_size=7, num_layers=1, dropout=0.3)
        res = LSTMLM(V, embedding_dim=4, hidden_size=3, num_layers=1)
    else:
        base = TransformerLM(V, d_model=8, num_layers=1, num_heads=2, dim_feedforward=16, max_length=10, dropout=0.3)
        res = LSTMLM(V, embedding_dim=4, hidden_size=3, num_layers=1)
    return base.to(dtype), res.to(dtype)


@pytest.mark.parametrize("kind", ["lstm", "transformer"])
def test_log_prob_is_the_per_step_normalised_product_of_both_laws(kind):
    base, res = _pair(kind)
    ralm = ProductLM(base, res).eval()
    with torch.no_grad():
        lb = torch.log_softmax(base.eval().logits(X), -1)
        lr = torch.log_softmax(res.eval().logits(X), -1)
        step = torch.log_softmax(lb + lr, -1)  # log P_LM + log P_phi - log sum_v P_LM P_phi
        want = []
        for b, row in enumerate(X.tolist()):
            targets = [*row, 0]  # the tokens, then </s>
            want.append(sum(float(step[b, t, y]) for t, y in enumerate(targets)))
        got = ralm.log_prob(X)
    assert torch.allclose(got, torch.tensor(want, dtype=torch.float64), rtol=0, atol=1e-12)
    c = Sequences.from_lists([[1], [4], [5, 5], [2]])
    with torch.no_grad():
        cont = ralm.continuation_log_prob(c, X)
        whole = ralm.log_prob(Sequences.from_lists([a + b for a, b in zip(c.tolist(), X.tolist())]))
        pre = ralm.continuation_log_prob(Sequences.from_lists([[]] * 4), c, end=False)
    assert torch.allclose(cont + pre, whole, rtol=0, atol=1e-10)  # the chain rule of the product law


def test_a_uniform_expert_gives_the_base_law_exactly():
    base, res = _pair("lstm")
    with torch.no_grad():
        res.decoder.weight.zero_()
        res.decoder.bias.zero_()
    ralm = ProductLM(base, res).eval()
    with torch.no_grad():
        assert torch.allclose(ralm.log_prob(X), base.eval().log_prob(X), rtol=0, atol=1e-12)


def test_gradients_reach_only_the_expert_and_the_base_stays_in_eval_mode():
    base, res = _pair("lstm")
    frozen = {k: v.clone() for k, v in base.state_dict().items()}
    ralm = ProductLM(base, res).train()
    assert ralm.training and res.training and not base.training  # no dropout in the frozen base
    assert not any(p.requires_grad for p in base.parameters())
    out = AutoregressiveNLL()(ralm, X)
    out.loss.backward()
    assert all(p.grad is None for p in base.parameters())
    assert all(p.grad is not None and torch.isfinite(p.grad).all() for p in res.parameters())
    opt = torch.optim.SGD([p for p in ralm.parameters() if p.requires_grad], lr=0.1)
    opt.step()
    assert all(torch.equal(frozen[k], v) for k, v in base.state_dict().items())
    with torch.no_grad():  # dropout of the base never applies: two training-mode passes agree
        a = torch.log_softmax(base(torch.tensor([[0, 1, 2]]))[0], -1)
        b = torch.log_softmax(base(torch.tensor([[0, 1, 2]]))[0], -1)
    assert torch.equal(a, b)


def test_sampling_draws_from_the_product_and_states_select_both_parts():
    base, res = _pair("lstm", torch.float32)
    ralm = ProductLM(base, res).eval()
    draws = ralm.sample(64, torch.Generator().manual_seed(0), max_length=8, truncate=True)
    assert draws.batch_size == 64 and int(draws.lengths.max()) <= 8
    prefix = Sequences.from_lists([[1, 2], [3]])
    cont = ralm.sample(4, torch.Generator().manual_seed(1), prefix=prefix, per_prefix=2, max_length=5, truncate=True)
    assert cont.batch_size == 4
    _, state = ralm(torch.tensor([[0, 1], [0, 2]]))
    assert isinstance(state, ProductState) and state.batch_size == 2
    picked = state.select(torch.tensor([1]))
    assert picked.batch_size == 1 and picked.detach().base.batch_size == 1
    # the first token's law: the product of both first-step laws, renormalised
    with torch.no_grad():
        first = torch.log_softmax(torch.log_softmax(base.logits(Sequences.from_lists([[]]))[0, 0], -1)
                                  + res.logits(Sequences.from_lists([[]]))[0, 0], -1)
        many = ralm.sample(4000, torch.Generator().manual_seed(2), max_length=1, truncate=True)
    counts = torch.bincount(torch.where(many.lengths > 0, many.tokens[:, 0] if many.tokens.shape[1] else 0, 0),
                            minlength=V).double()
    p = first.exp().double()
    assert torch.all((counts / 4000 - p).abs() <= 4.5 * (p * (1 - p) / 4000).sqrt() + 1e-9)


def test_bad_inputs_are_one_line_naming_the_argument():
    base, res = _pair("lstm")
    with pytest.raises(TypeError, match=r"^base: expected an AutoregressiveLM"):
        ProductLM(torch.nn.Linear(2, 2), res)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"^residual: expected the base's vocabulary of 6 ids; got 7"):
        ProductLM(base, LSTMLM(7, embedding_dim=2, hidden_size=2, num_layers=1))
    with pytest.raises(ValueError, match=r"^residual: expected a second LM; got the base itself"):
        ProductLM(base, base)
    with pytest.raises(TypeError, match=r"^state: expected a ProductState or None"):
        ProductLM(base, res)(torch.tensor([[0, 1]]), state=object())  # type: ignore[arg-type]
    assert ProductLM(base, TransformerLM(V, d_model=4, num_layers=1, num_heads=1, dim_feedforward=8, max_length=9)).max_length == 9
