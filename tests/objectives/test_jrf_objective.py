"""JRFObjective: supervised-only equals the CRF NLL exactly; the NCE gradient is the digest's
estimator (A.3, with the minus on the noise term), recomputed draw by draw in float64; mixed batches
split into their two parts; validation messages."""

from __future__ import annotations

import math

import pytest
import torch
from torch import Tensor, nn

from ebms.capabilities import JointRandomField
from ebms.models.jrf import JRF
from ebms.models.trf import TRF, DiscreteFeatures, feature_templates
from ebms.objectives.conditional import ConditionalML
from ebms.objectives.jrf import JRFObjective
from ebms.sequences import Sequences

V, L, K = 3, 3, 2


def _jrf(dtype: torch.dtype = torch.float64, seed: int = 0) -> JRF:
    torch.manual_seed(seed)
    m = JRF(V, K, max_length=L, embed=3, hidden=2, length_probs=torch.tensor([0.2, 0.5, 0.3]))
    with torch.no_grad():
        for p in (m.tagger.transitions, m.tagger.start, m.tagger.end):
            p.normal_()
        m.log_z.add_(torch.tensor([0.3, -0.2, 0.5]))
    return m.to(dtype)


class Unigram(nn.Module):
    """q(l, x) = softmax(a)_l prod_i softmax(b)_{x_i}, lengths 1..L (all draws inside the JRF's lengths)."""

    def __init__(self, dtype: torch.dtype = torch.float64) -> None:
        super().__init__()
        self.a = nn.Parameter(torch.tensor([0.1, 0.4, -0.2], dtype=dtype))
        self.b = nn.Parameter(torch.tensor([0.3, -0.1], dtype=dtype))

    def log_prob(self, x: Sequences) -> Tensor:
        lb = self.b.log_softmax(0)[(x.tokens - 1).clamp(min=0)] * x.mask()
        return self.a.log_softmax(0)[x.lengths - 1] + lb.sum(1)

    @torch.no_grad()
    def sample(self, n: int, generator: torch.Generator | None = None) -> Sequences:
        lengths = torch.multinomial(self.a.softmax(0), n, replacement=True, generator=generator) + 1
        tok = torch.multinomial(self.b.softmax(0), n * L, replacement=True, generator=generator).view(n, L) + 1
        return Sequences(tok.masked_fill(torch.arange(L) >= lengths[:, None], 0), lengths)


WORDS = torch.tensor([[1, 2, 2], [2, 1, 0], [1, 0, 0], [2, 2, 1]])
TAGS = torch.tensor([[0, 1, 1], [1, 0, 0], [1, 0, 0], [0, 0, 1]])
LENGTHS = torch.tensor([3, 2, 1, 3])


def _grads(m: nn.Module) -> dict[str, Tensor]:
    return {n: p.grad.clone() for n, p in m.named_parameters() if p.grad is not None}


def test_jrf_follows_the_objective_protocol():
    assert isinstance(_jrf(), JointRandomField)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_supervised_only_equals_the_crf_nll_exactly(dtype):
    m = _jrf(dtype)
    out = JRFObjective(None, alpha=0.0)(m, (WORDS, TAGS, LENGTHS))
    out.loss.backward()
    g = _grads(m)
    m.zero_grad()
    ref = ConditionalML()(m.tagger, (WORDS, TAGS, LENGTHS))
    ref.loss.backward()
    assert torch.equal(out.loss, ref.loss)
    g_ref = _grads(m)
    assert g.keys() == {n for n in g_ref}
    for n in g:
        assert torch.equal(g[n], g_ref[n]), n
    assert out.metrics["sup_nll"] == pytest.approx(float(ref.loss.detach()), rel=1e-6)
    assert out.metrics["labelled"] == 1.0


def test_nce_gradient_is_the_digest_estimator_with_the_minus_sign():
    m, q = _jrf(), Unigram()
    alpha, w = 0.7, 1.3
    data = Sequences(WORDS, LENGTHS)  # all unlabelled
    objective = JRFObjective(q, alpha=alpha, nu=1.0, data_share=0.5, noise_weight=w)
    out = objective(m, data, generator=torch.Generator().manual_seed(5))
    out.loss.backward()
    got = _grads(m)
    got_q = _grads(q)

    # replay the draws: B1 (|D| fake data) then B2 (2|D| noise), as DNCE takes them
    g = torch.Generator().manual_seed(5)
    b1, b2 = q.sample(4, generator=g), q.sample(8, generator=g)
    m.zero_grad()
    q.zero_grad()

    def log_p(x: Sequences) -> Tensor:  # log p_xi(l, x) = log pi_l + U(x) - zeta_l
        return m.log_pi[x.lengths - 1].double() - m.energy(x) - m.log_z[x.lengths - 1]

    pos = Sequences.cat([data, b1])
    lp_pos, lp_neg = log_p(pos), log_p(b2)
    with torch.no_grad():
        w_pos = torch.sigmoid(q.log_prob(pos) - lp_pos)  # q / (p + q)
        w_neg = torch.sigmoid(lp_neg - q.log_prob(b2))   # p / (p + q)
    # surrogate whose gradient is the estimator of dJ_uns/dxi: + mixture term - noise term
    surrogate = (w_pos * lp_pos).sum() / pos.batch_size - (w_neg * lp_neg).sum() / b2.batch_size
    surrogate.backward()
    estimator = _grads(m)
    assert got.keys() == estimator.keys()
    for n in got:  # the loss descends: grad L = -alpha * dJ_uns/dxi
        torch.testing.assert_close(got[n], -alpha * estimator[n], atol=1e-12, rtol=1e-9)
    (-w * q.log_prob(data).mean()).backward()  # the noise's ML term, weight w whatever alpha is
    for n, v in _grads(q).items():
        torch.testing.assert_close(got_q[n], v, atol=1e-12, rtol=1e-9)
    for key in ("nce", "nce_accuracy", "e_pos", "e_neg", "gap", "noise_nll", "noise_ppl", "data_share"):
        assert math.isfinite(out.metrics[key])
    assert out.metrics["data_share"] == 0.5 and out.metrics["labelled"] == 0.0


def test_a_mixed_batch_is_the_sum_of_its_labelled_and_unlabelled_parts():
    m, q = _jrf(), Unigram()
    tags = TAGS.clone()
    tags[1] = -1
    tags[3, :] = -1
    objective = JRFObjective(q, alpha=0.5, sup_weight=2.0)
    out = objective(m, (WORDS, tags, LENGTHS), generator=torch.Generator().manual_seed(1))
    lab = torch.tensor([0, 2])
    sup = JRFObjective(None, alpha=0.0)(m, (WORDS[lab], TAGS[lab], LENGTHS[lab]))
    uns = objective(m, Sequences(WORDS[[1, 3]], LENGTHS[[1, 3]]), generator=torch.Generator().manual_seed(1))
    torch.testing.assert_close(out.loss, 2.0 * sup.loss + uns.loss, atol=1e-12, rtol=0)
    assert out.metrics["labelled"] == 0.5
    assert out.metrics["sup_nll"] == pytest.approx(sup.metrics["sup_nll"])


def test_labelled_rows_may_be_longer_than_the_trf():
    m = _jrf()
    words = torch.tensor([[1, 2, 1, 2, 1]])
    out = JRFObjective(Unigram(), alpha=1.0)(m, (words, torch.zeros_like(words), torch.tensor([5])))
    assert "nce" not in out.metrics and math.isfinite(out.metrics["sup_nll"])


def test_length_one_sentences_in_float32():
    m, q = _jrf(torch.float32), Unigram(torch.float32)
    batch = (torch.tensor([[1], [2]]), torch.tensor([[0], [-1]]), torch.tensor([1, 1]))
    out = JRFObjective(q, alpha=1.0)(m, batch, generator=torch.Generator().manual_seed(0))
    out.loss.backward()
    assert out.loss.dtype == torch.float32 and math.isfinite(out.metrics["loss"])


def test_partially_tagged_row_is_refused():
    tags = TAGS.clone()
    tags[0, 1] = -1
    with pytest.raises(ValueError, match="tags: expected each row fully tagged or all -1 .* row 0 has 1 of 3"):
        JRFObjective(None, alpha=0.0)(_jrf(), (WORDS, tags, LENGTHS))


def test_unlabelled_batch_without_alpha_is_refused():
    with pytest.raises(ValueError, match="batch: no labelled rows and alpha=0 leave nothing to train"):
        JRFObjective(None, alpha=0.0)(_jrf(), Sequences(WORDS, LENGTHS))


def test_missing_noise_with_alpha_is_refused():
    with pytest.raises(ValueError, match="noise_lm: expected a trainable noise LM when alpha > 0 .* got None"):
        JRFObjective(None, alpha=0.5)


@pytest.mark.parametrize("kwargs,match", [
    ({"alpha": -1.0}, "alpha"), ({"sup_weight": 0.0}, "sup_weight"), ({"noise_weight": 0.0}, "noise_weight"),
    ({"nu": 0.0}, "nu"), ({"data_share": 0.0}, "data_share"), ({"data_share": 1.5}, "data_share"),
])
def test_bad_settings_name_themselves(kwargs, match):
    with pytest.raises(ValueError, match=match):
        JRFObjective(Unigram(), **kwargs)


def test_a_plain_trf_is_refused():
    corpus = Sequences.from_lists([[1, 2], [2]])
    trf = TRF.from_corpus(DiscreteFeatures.fit(corpus, V, feature_templates(("w",), order=1)), corpus, vocab_size=V)
    with pytest.raises(TypeError, match="model: expected a JRF .* got TRF"):
        JRFObjective(None, alpha=0.0)(trf, (WORDS, TAGS, LENGTHS))


def test_bad_batch_forms_are_refused():
    objective = JRFObjective(None, alpha=0.0)
    with pytest.raises(ValueError, match="batch: expected a tuple"):
        objective(_jrf(), [WORDS])
    with pytest.raises(ValueError, match=r"batch: expected \(words \(B, T\), tags \(B, T\), lengths \(B,\)\)"):
        objective(_jrf(), (WORDS, WORDS, TAGS, LENGTHS))
    with pytest.raises(ValueError, match="batch: expected at least one sentence"):
        objective(_jrf(), Sequences(WORDS[:0], LENGTHS[:0]))
