"""ElectricCloze: one-pass unnormalised cloze scores, PLL, exact normalised PLL, rescoring."""

from __future__ import annotations

import pytest
import torch

from ebms.data import Vocabulary
from ebms.metrics.rescoring import lm_scores
from ebms.models.electric import ElectricCloze
from ebms.nets.two_tower import TwoTowerCloze
from ebms.sequences import Sequences

V = 6


def _model(seed: int = 0, **kw) -> ElectricCloze:
    torch.manual_seed(seed)
    return ElectricCloze(V, dim=8, layers=2, heads=2, max_length=8, **kw).eval()


def test_electric_pll_is_the_sum_of_token_scores_and_the_log_prob():
    m = _model().requires_grad_(False)
    x = Sequences.from_lists([[1, 2, 3], [4], []])
    s = m.token_scores(x)
    assert s.shape == (3, 3)
    assert bool((s[~x.mask()] == 0).all())
    pll = m.pseudo_log_likelihood(x)
    assert torch.allclose(pll, s.sum(1))
    assert float(pll[2]) == 0.0
    assert torch.equal(m.log_prob(x), pll)
    h = m.hidden(x)
    w, b = m.score.weight[0], m.score.bias[0]
    assert torch.allclose(s[x.mask()], -(h[x.mask()] @ w + b), atol=1e-6)  # Eq. 3.16: -w^T h_t


def test_electric_scores_a_batch_in_one_encoder_pass():
    m = _model()
    calls = []
    m.encoder.register_forward_hook(lambda *_: calls.append(1))
    m.pseudo_log_likelihood(Sequences.from_lists([[1, 2, 3, 4, 5, 1, 2, 3], [4, 4]]))
    assert len(calls) == 1


def test_electric_token_score_reads_the_token_itself():
    m = _model()
    x = Sequences.from_lists([[1, 2, 3]])
    y = Sequences.from_lists([[1, 5, 3]])
    with torch.no_grad():
        assert float((m.token_scores(x)[0, 1] - m.token_scores(y)[0, 1]).abs()) > 1e-6


def test_electric_ignores_padding_and_batch_mates():
    m = _model()
    x = Sequences.from_lists([[1, 2, 3], [4, 5]])
    padded = Sequences(torch.tensor([[1, 2, 3, 5, 5], [4, 5, 1, 1, 1]]), torch.tensor([3, 2]))
    with torch.no_grad():
        a, b = m.token_scores(x), m.token_scores(padded)
        alone = m.token_scores(Sequences.from_lists([[4, 5]]))
    assert b.shape == (2, 5)
    assert torch.allclose(a, b[:, :3], atol=1e-5)
    assert torch.allclose(alone[0], a[1, :2], atol=1e-5)


def test_electric_exact_pll_normalises_each_conditional_by_enumeration():
    m = _model(1)
    x = Sequences.from_lists([[1, 2, 3], [5], []])
    with torch.no_grad():
        got = m.exact_pll(x, batch_size=4)
        want = []
        for row in x.tolist():
            total = 0.0
            for t, tok in enumerate(row):
                variants = [row[:t] + [v] + row[t + 1:] for v in range(1, V)]
                sc = m.token_scores(Sequences.from_lists(variants))[:, t].double()
                total += float(sc[tok - 1] - sc.logsumexp(0))
            want.append(total)
    assert torch.allclose(got, torch.tensor(want, dtype=torch.float64), atol=1e-5)
    assert got.dtype == torch.float64 and bool((got <= 0).all())


def test_electric_is_a_sentence_lm_for_nbest_rescoring():
    m = _model()
    vocab = Vocabulary(["a", "b", "c", "d"])
    hyps = [["a", "b"], ["d", "c", "a"], ["zz"]]
    got = lm_scores(hyps, m, vocabulary=vocab)
    with torch.no_grad():
        want = m.log_prob(vocab.encode(hyps)).double()
    assert torch.allclose(got, want, atol=1e-6)


def test_electric_holds_its_noise_as_a_submodule():
    m = _model(noise=TwoTowerCloze(V, dim=8, layers=1, heads=2))
    keys = m.state_dict().keys()
    assert any(k.startswith("noise.left.") for k in keys)
    assert any(k.startswith("encoder.") for k in keys)
    assert _model().noise is None


def test_electric_validation_messages():
    with pytest.raises(ValueError, match="heads: expected a divisor of dim=8; got 3"):
        ElectricCloze(V, dim=8, heads=3)
    with pytest.raises(TypeError, match="noise: expected an nn.Module .* got str"):
        ElectricCloze(V, dim=8, noise="q")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="max_length: expected an int >= 1; got 0"):
        ElectricCloze(V, dim=8, max_length=0)
    m = _model()
    with pytest.raises(TypeError, match="x: expected Sequences of token ids; got list"):
        m.pseudo_log_likelihood([[1, 2]])  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"x: expected token ids in \[1, 5\] \(id 0 is the boundary\); got 0 at "
                                         r"sequence 0, position 1"):
        m.token_scores(Sequences.from_lists([[2, 0, 3]]))
    with pytest.raises(ValueError, match=r"x: expected token ids in \[1, 5\].* got 6 at sequence 0, position 0"):
        m.log_prob(Sequences.from_lists([[6]]))
    with pytest.raises(ValueError, match="x: expected sentences of at most max_length=8 tokens; got length 9"):
        m.hidden(Sequences.from_lists([[1] * 9]))
    with pytest.raises(ValueError, match="batch_size: expected an int >= 1; got 0"):
        m.exact_pll(Sequences.from_lists([[1]]), batch_size=0)
