"""Tests for ebms.objectives.conditional: conditional ML and conditional NCE.

The tag-bigram noise (now an ebms.distributions.NGram) has its own tests in
tests/distributions/test_dist_ngram.py.
"""

from __future__ import annotations

import itertools
import math
import re

import pytest
import torch
from torch import nn

from ebms.distributions import NGram
from ebms.objectives.conditional import ConditionalML, ConditionalNCE, TagBigramNoise
from ebms.sequences import Sequences
from ebms.structured.linear_chain import LinearChainCRF


class TableCRF(nn.Module):
    """Emissions ``W[x_t]`` from a word table, transitions, start and end: a tiny exact CRF."""

    def __init__(self, vocab: int, tags: int, *, seed: int = 0, scale: float = 1.0) -> None:
        super().__init__()
        g = torch.Generator().manual_seed(seed)
        self.w = nn.Parameter(scale * torch.randn(vocab, tags, generator=g, dtype=torch.float64))
        self.a = nn.Parameter(scale * torch.randn(tags, tags, generator=g, dtype=torch.float64))
        self.s = nn.Parameter(scale * torch.randn(tags, generator=g, dtype=torch.float64))
        self.e = nn.Parameter(scale * torch.randn(tags, generator=g, dtype=torch.float64))

    def forward(self, x, lengths):
        return LinearChainCRF(self.w[x], self.a, lengths, start=self.s, end=self.e)

    def brute_score(self, x: list[int], y: tuple[int, ...]) -> torch.Tensor:
        s = self.s[y[0]] + self.e[y[-1]] + sum(self.w[xi, yi] for xi, yi in zip(x, y))
        return s + sum(self.a[y[i - 1], y[i]] for i in range(1, len(y)))

    def brute_log_prob(self, x: list[int], y: tuple[int, ...]) -> torch.Tensor:
        c = self.a.shape[0]
        seqs = itertools.product(range(c), repeat=len(x))
        log_z = torch.logsumexp(torch.stack([self.brute_score(x, z) for z in seqs]), 0)
        return self.brute_score(x, y) - log_z


def ragged_batch(seed: int = 1, b: int = 4, t: int = 4, vocab: int = 3, tags: int = 3):
    g = torch.Generator().manual_seed(seed)
    x = torch.randint(0, vocab, (b, t), generator=g)
    y = torch.randint(0, tags, (b, t), generator=g)
    lengths = torch.tensor([t, 1, 3, 2][:b])
    return x, y, lengths


def _lists(x, y, lengths):
    return [(x[i, :n].tolist(), tuple(y[i, :n].tolist())) for i, n in enumerate(lengths.tolist())]


# --- conditional ML -------------------------------------------------------------------------


def test_ml_loss_equals_mean_negative_log_prob_by_enumeration():
    model = TableCRF(3, 3)
    x, y, lengths = ragged_batch()
    out = ConditionalML()(model, (x, y, lengths))
    brute = -torch.stack([model.brute_log_prob(xi, yi) for xi, yi in _lists(x, y, lengths)]).mean()
    assert torch.allclose(out.loss, brute, atol=1e-10)
    assert out.metrics["nll"] == pytest.approx(float(brute.detach()), rel=1e-6)
    assert out.metrics["nll_token"] == pytest.approx(float(brute.detach()) * 4 / int(lengths.sum()), rel=1e-6)


def test_ml_gradient_is_expected_minus_empirical_features():
    model = TableCRF(3, 3, seed=2)
    x, y, lengths = ragged_batch(seed=3)
    out = ConditionalML()(model, (x, y, lengths))
    out.loss.backward()
    c = 3
    g_w, g_a = torch.zeros(3, c, dtype=torch.float64), torch.zeros(c, c, dtype=torch.float64)
    with torch.no_grad():
        for xi, yi in _lists(x, y, lengths):
            seqs = list(itertools.product(range(c), repeat=len(xi)))
            p = torch.softmax(torch.stack([model.brute_score(xi, z) for z in seqs]), 0)
            for weight, z in [(pk, zk) for pk, zk in zip(p, seqs)] + [(-1.0, yi)]:
                for xt, zt in zip(xi, z):
                    g_w[xt, zt] += weight
                for i in range(1, len(z)):
                    g_a[z[i - 1], z[i]] += weight
    b = x.shape[0]
    assert torch.allclose(model.w.grad, g_w / b, atol=1e-10)
    assert torch.allclose(model.a.grad, g_a / b, atol=1e-10)


def test_ml_loss_passes_gradcheck_in_float64():
    model = TableCRF(3, 3, seed=4)
    x, y, lengths = ragged_batch(seed=5)
    params = list(model.parameters())

    def f(*ps):
        with torch.no_grad():
            for p, v in zip(params, ps):
                p.copy_(v)
        return ConditionalML()(model, (x, y, lengths)).loss

    def loss_of(w, a, s, e):
        crf = LinearChainCRF(w[x], a, lengths, start=s, end=e)
        return -crf.log_prob(y).mean()

    inputs = tuple(p.detach().clone().requires_grad_() for p in params)
    assert torch.autograd.gradcheck(loss_of, inputs)
    assert torch.allclose(f(*inputs), loss_of(*inputs))


def test_ml_chunks_and_padding_leave_the_loss_unchanged():
    model = TableCRF(4, 3, seed=6)
    g = torch.Generator().manual_seed(7)
    x = torch.randint(0, 4, (9, 8), generator=g)
    y = torch.randint(0, 3, (9, 8), generator=g)
    lengths = torch.randint(1, 6, (9,), generator=g)
    whole = ConditionalML()(model, (x, y, lengths)).loss
    chunked = ConditionalML(chunk_size=2)(model, (x, y, lengths)).loss
    assert torch.allclose(whole, chunked, atol=1e-12)


def test_ml_l2_adds_the_squared_norm_of_the_parameters():
    model = TableCRF(3, 3)
    batch = ragged_batch()
    plain = ConditionalML()(model, batch).loss
    reg = ConditionalML(l2=0.3)(model, batch).loss
    norm = sum(float((p * p).sum().detach()) for p in model.parameters())
    assert float((reg - plain).detach()) == pytest.approx(0.3 * norm, rel=1e-10)


# --- noise ----------------------------------------------------------------------------------


def _random_noise(c: int, seed: int) -> TagBigramNoise:
    g = torch.Generator().manual_seed(seed)
    start = torch.log_softmax(torch.randn(c, generator=g), 0)
    return TagBigramNoise(start, torch.log_softmax(torch.randn(c, c, generator=g), 1))


# --- conditional NCE ------------------------------------------------------------------------


def _trigram_noise(c: int, seed: int) -> NGram:
    """Any length-conditional member works as the noise: here a Witten-Bell trigram over the tags."""
    x, y, lengths = ragged_batch(seed=seed, b=4, tags=c)
    return NGram.fit(Sequences(y, lengths), c + 1, 3, boundary=c, end=False)


@pytest.mark.parametrize("make_noise", [_random_noise, _trigram_noise], ids=["tag-bigram", "trigram"])
def test_nce_loss_equals_the_monograph_formula_by_hand(make_noise):
    model = TableCRF(3, 3, seed=8)
    x, y, lengths = ragged_batch(seed=9)
    noise, nu = make_noise(3, 10), 3
    out = ConditionalNCE(noise, nu=nu)(model, (x, y, lengths), generator=torch.Generator().manual_seed(11))
    ys = noise.sample(nu * len(lengths), lengths=lengths.repeat(nu), generator=torch.Generator().manual_seed(11))
    ys = ys.tokens.view(nu, len(lengths), -1)  # draw j of example i is row j * B + i
    total = 0.0
    with torch.no_grad():
        for i, (xi, yi) in enumerate(_lists(x, y, lengths)):
            n = len(xi)
            pt = math.exp(float(model.brute_score(xi, yi)))
            q = math.exp(float(noise.log_prob(Sequences(torch.tensor([yi])))))
            j_i = math.log(pt / (pt + nu * q))
            for k in range(nu):
                z = tuple(ys[k, i, :n].tolist())
                ptz = math.exp(float(model.brute_score(xi, z)))
                qz = math.exp(float(noise.log_prob(Sequences(torch.tensor([z])))))
                j_i += math.log(nu * qz / (ptz + nu * qz))  # nu * E_q[...] estimated by the sum of nu draws
            total += j_i
    assert float(out.loss.detach()) == pytest.approx(-total / x.shape[0], rel=1e-9)
    assert set(out.metrics) == {"acc_data", "acc_noise", "score_data"}


def test_tag_bigram_and_the_same_ngram_give_the_same_loss():
    model = TableCRF(3, 3, seed=2)
    x, y, lengths = ragged_batch(seed=3)
    tag = TagBigramNoise.fit(y, lengths, 3, smoothing=0.5)
    same = NGram.fit(Sequences(y, lengths), 4, 2, smoothing="add_k", k=0.5, boundary=3, end=False)
    a = ConditionalNCE(tag, nu=2)(model, (x, y, lengths), generator=torch.Generator().manual_seed(4)).loss
    b = ConditionalNCE(same, nu=2)(model, (x, y, lengths), generator=torch.Generator().manual_seed(4)).loss
    torch.testing.assert_close(a, b, rtol=0, atol=1e-12)


def test_nce_chunks_leave_the_loss_unchanged():
    model = TableCRF(3, 3, seed=12)
    x, y, lengths = ragged_batch(seed=13)
    noise = _random_noise(3, 14)
    a = ConditionalNCE(noise, nu=2)(model, (x, y, lengths), generator=torch.Generator().manual_seed(1)).loss
    chunked = ConditionalNCE(noise, nu=2, chunk_size=1)
    b = chunked(model, (x, y, lengths), generator=torch.Generator().manual_seed(1)).loss
    assert torch.allclose(a, b, atol=1e-12)


def _fit(model: nn.Module, loss_fn) -> None:
    opt = torch.optim.LBFGS(model.parameters(), lr=1.0, max_iter=300, tolerance_grad=1e-9,
                            tolerance_change=1e-12, history_size=20, line_search_fn="strong_wolfe")

    def closure():
        opt.zero_grad()
        loss = loss_fn()
        loss.backward()
        return loss

    opt.step(closure)


def _normalised(model: TableCRF, t: int) -> torch.Tensor:
    seqs = torch.tensor(list(itertools.product(range(3), repeat=t)))
    crf = model(torch.zeros(len(seqs), t, dtype=torch.long), torch.full((len(seqs),), t))
    return (crf.score(seqs) - crf.log_partition).detach()


def test_nce_with_many_noise_draws_recovers_the_ml_fit():
    # Data from a known CRF over 3 tags, length 3, one input word: the model's start potentials
    # absorb a global offset, so it can self-normalise and conditional NCE is consistent.
    torch.manual_seed(0)
    t, n, nu = 3, 3000, 20
    truth = TableCRF(1, 3, seed=15, scale=1.0)
    p_true = _normalised(truth, t).exp()
    seqs = torch.tensor(list(itertools.product(range(3), repeat=t)))
    y = seqs[torch.multinomial(p_true, n, replacement=True, generator=torch.Generator().manual_seed(16))]
    x, lengths = torch.zeros(n, t, dtype=torch.long), torch.full((n,), t)
    ml, nce = TableCRF(1, 3, seed=17, scale=0.1), TableCRF(1, 3, seed=17, scale=0.1)
    _fit(ml, lambda: ConditionalML()(ml, (x, y, lengths)).loss)
    objective = ConditionalNCE(TagBigramNoise.fit(y, lengths, 3), nu=nu)
    _fit(nce, lambda: objective(nce, (x, y, lengths), generator=torch.Generator().manual_seed(18)).loss)
    lp_ml, lp_nce = _normalised(ml, t), _normalised(nce, t)
    kl_ml_nce = float((lp_ml.exp() * (lp_ml - lp_nce)).sum())
    # ML's own expected error is E KL(p* || p_ML) ~ d / (2 n) with d = 17 free parameters (18 minus
    # the global offset); NCE with nu = 20 must land closer to ML than ML is to the truth on average.
    assert kl_ml_nce < 17 / (2 * n), kl_ml_nce
    # and NCE self-normalises: log Z of its raw scores is near 0. Its standard error is about
    # sqrt((1 + 1/nu) / n) = 0.019 (the error of a log-mean of n data and nu*n noise terms); 0.1 is z > 5.
    crf = nce(torch.zeros(1, t, dtype=torch.long), torch.tensor([t]))
    assert abs(float(crf.log_partition.detach())) < 0.1


# --- validation -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("batch", "message"),
    [
        (torch.zeros(3, 2), "batch: expected a tuple (*inputs, tags, lengths)"),
        ((torch.zeros(2, 3, dtype=torch.long), torch.tensor([3, 3])), "batch: expected a tuple"),
        ((torch.zeros(2, 3, dtype=torch.long), torch.zeros(2, 3), torch.tensor([3, 3])),
         "tags: expected a (B, T) integer"),
        ((torch.zeros(2, 3, dtype=torch.long), torch.zeros(2, 3, dtype=torch.long), torch.tensor([3, 4])),
         "lengths: expected values in [1, 3]"),
        ((torch.zeros(2, 3, dtype=torch.long), torch.zeros(2, 3, dtype=torch.long), torch.tensor([3.0, 3.0])),
         "lengths: expected a non-empty (B,) integer"),
        ((torch.zeros(2, 3, dtype=torch.long), torch.zeros(2, 3, dtype=torch.long), torch.tensor([3])),
         "tags (B = lengths"),
    ],
)
def test_bad_batches_are_rejected_by_name(batch, message):
    with pytest.raises(ValueError, match="^" + re.escape(message)):
        ConditionalML()(TableCRF(3, 3), batch)


def test_bad_settings_are_rejected_by_name():
    noise = TagBigramNoise.uniform(3)
    with pytest.raises(ValueError, match="nu"):
        ConditionalNCE(noise, nu=0)
    with pytest.raises((ValueError, TypeError), match="nu"):
        ConditionalNCE(noise, nu=1.5)
    with pytest.raises(TypeError, match="noise: expected an ebms.distributions model of tag sequences conditional on "
                                        "their length .*; got str"):
        ConditionalNCE("uniform", nu=1)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="noise: .*conditional on their length .*; got NGram"):
        ConditionalNCE(NGram.uniform(4, 2, boundary=3), nu=1)  # a law with an end symbol
    with pytest.raises(ValueError, match="l2"):
        ConditionalML(l2=-1.0)
    with pytest.raises(ValueError, match="chunk_size"):
        ConditionalML(chunk_size=0)
    with pytest.raises(ValueError, match=r"noise: expected 3 tags \(the model's\): an n-gram with vocab_size 4 and "
                                         r"boundary 3; got vocab_size 5, boundary 4"):
        ConditionalNCE(TagBigramNoise.uniform(4))(TableCRF(3, 3), ragged_batch())
    with pytest.raises(ValueError, match=r"tags: expected values in \[0, 1\] within each length"):
        TagBigramNoise.fit(torch.tensor([[0, 2]]), torch.tensor([2]), 2)


def test_a_model_that_returns_no_crf_is_a_type_error():
    class Bad(nn.Module):
        def forward(self, x, lengths):
            return torch.zeros(())

    with pytest.raises(TypeError, match="model: expected forward"):
        ConditionalML()(Bad(), ragged_batch())


def _exact_softplus(t: float) -> float:
    """log(1 + e^t) in the closed form max(t, 0) + log1p(exp(-|t|)) (no cut-off)."""
    return max(t, 0.0) + math.log1p(math.exp(-abs(t)))


@pytest.mark.parametrize("per_word", [9.75, -11.25])
def test_nce_float64_loss_is_exact_when_logits_pass_20(per_word):
    # Every sequence scores U = 2 * per_word, so every logit is G = U - log(nu q) = +-21: the
    # range where torch's softplus (identity above 20) dropped e^-21 = 8e-10 from each term.
    model = TableCRF(3, 3)
    with torch.no_grad():
        model.w.fill_(per_word)
        model.a.zero_(), model.s.zero_(), model.e.zero_()
    noise, nu = TagBigramNoise.uniform(3), 2
    x = torch.zeros(3, 2, dtype=torch.long)
    y, lengths = torch.tensor([[0, 1], [2, 2], [1, 0]]), torch.full((3,), 2)
    out = ConditionalNCE(noise, nu=nu)(model, (x, y, lengths), generator=torch.Generator().manual_seed(0))
    log_q = float(noise.log_prob(Sequences(y[:1], lengths[:1])).double())
    g = 2 * per_word - math.log(nu) - log_q
    assert 20 < abs(g) < 37
    assert float(out.loss.detach()) == pytest.approx(_exact_softplus(-g) + nu * _exact_softplus(g), rel=1e-14)
    (grad_w,) = torch.autograd.grad(out.loss, model.w)
    # dL/dw[0, k] = (-sigmoid(-G) * data uses of (word 0, tag k) + sigmoid(G) * noise uses) / B
    sig = 1 / (1 + math.exp(-g))
    assert float(grad_w.sum()) == pytest.approx((-(1 - sig) * 6 + sig * 6 * nu) / 3, rel=1e-13)


@pytest.mark.parametrize("trainable", [("w",), ("a",), ("s",), ("e",), ("a", "s", "e"), ()])
def test_ml_gradient_reaches_each_trainable_potential_alone(trainable):
    # pytorch-crf style training (fixed emissions, learned transitions / start / end) included:
    # the gradient of every potential that requires grad equals the enumeration's
    model = TableCRF(3, 3, seed=4)
    for name, p in model.named_parameters():
        p.requires_grad_(name in trainable)
    x, y, lengths = ragged_batch(seed=5)
    out = ConditionalML()(model, (x, y, lengths))
    assert out.loss.requires_grad == bool(trainable)
    if not trainable:
        return
    params = [getattr(model, n) for n in trainable]
    got = torch.autograd.grad(out.loss, params)
    brute = -torch.stack([model.brute_log_prob(xi, yi) for xi, yi in _lists(x, y, lengths)]).mean()
    want = torch.autograd.grad(brute, params)
    for g, w in zip(got, want):
        torch.testing.assert_close(g, w, rtol=1e-10, atol=1e-12)
