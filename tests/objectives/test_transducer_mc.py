"""Tests for ebms.objectives.transducer.MonteCarloNLL against enumeration of every tag sequence.

With K = 3 tags and sentences of length <= 4 there are at most 81 sequences, so log Z, the exact
gradient of the NLL and the exact moments of the importance weights are sums over all of them.
The error bounds are not tuned: they come from the delta-method bias and variance of the
self-normalised estimator (module docstring), computed exactly by the same enumeration, with 6
standard deviations per coordinate (a two-sided normal tail of 2e-9 each).
"""

from __future__ import annotations

import itertools
import math
import re
from typing import Any

import pytest
import torch
from _benchmarks import bench

from ebms.data.synthetic_tagging import lag_copy_tagging
from ebms.models.crf_tagger import NeuralCRFTagger
from ebms.models.crf_transducer import CRFTransducer
from ebms.objectives import LossOutput, MonteCarloNLL
from ebms.objectives.transducer import proposal_log_prob, proposal_sample
from ebms.sequences import Sequences

K, T, V = 3, 4, 12
LENGTHS = (4, 2, 3)


def _model(dtype: torch.dtype = torch.float64, seed: int = 0, **kw: Any) -> CRFTransducer:
    """A tiny CRF transducer whose label history matters: G's output layer is scaled up so that the
    step-wise proposal differs from p(y|x) (weights far from uniform)."""
    torch.manual_seed(seed)
    m = CRFTransducer(V, K, embedding_dim=5, hidden=4, label_dim=3, label_hidden=5, **kw).to(dtype).eval()
    with torch.no_grad():
        m.prediction.embed.weight.mul_(3.0)
        for name, p in m.prediction.rnn.named_parameters():
            if "weight" in name:
                p.mul_(3.0)
        m.prediction.out.weight.mul_(6.0)
        m.prediction.out.bias.mul_(3.0)
        m.transcription.out.weight.mul_(3.0)
    return m


def _batch(seed: int = 1) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return torch.randint(1, V, (3, T), generator=g), torch.randint(0, K, (3, T), generator=g), torch.tensor(LENGTHS)


def _all_tags(n: int) -> torch.Tensor:
    """Every tag sequence of length ``n``, padded with 0 to ``T``: ``(K^n, T)``."""
    y = torch.tensor(list(itertools.product(range(K), repeat=n)))
    return torch.nn.functional.pad(y, (0, T - n))


def _enumerate(m: CRFTransducer, words: torch.Tensor, b: int, proposal: str):
    """For sentence ``b``: all sequences, their scores u (with graph), log q and log Z."""
    n = LENGTHS[b]
    ys = _all_tags(n)
    w = words[b : b + 1].expand(len(ys), T)
    ln = torch.full((len(ys),), n)
    u = m.score(w, ln, ys)
    lq = proposal_log_prob(m, w, ln, ys, proposal=proposal)
    return ys, u, lq, torch.logsumexp(u, 0)


@pytest.mark.parametrize("proposal", ["model", "uniform"])
def test_proposal_is_normalised_over_all_sequences_and_sampling_reports_its_log_probability(proposal):
    m = _model()
    words, _, lengths = _batch()
    for b in range(3):
        _, _, lq, _ = _enumerate(m, words, b, proposal)
        torch.testing.assert_close(torch.logsumexp(lq, 0), torch.zeros((), dtype=lq.dtype), rtol=0, atol=1e-12)
    f = m.transcription(words, lengths)
    tags, lq = proposal_sample(m, f, lengths, 50, proposal=proposal, generator=torch.Generator().manual_seed(3))
    assert tags.shape == (3, 50, T) and lq.shape == (3, 50)
    for b in range(3):
        assert bool((tags[b, :, LENGTHS[b]:] == 0).all())
        again = proposal_log_prob(m, words[b : b + 1].expand(50, T), lengths[b].expand(50), tags[b], proposal=proposal)
        torch.testing.assert_close(lq[b], again.detach(), rtol=0, atol=1e-12)


def test_proposal_sample_frequencies_match_the_enumerated_proposal():
    """Sentence 0 (81 sequences), 40000 draws: Pearson's statistic stays below the 1 - 1e-6 quantile of
    chi2 with 80 degrees of freedom, 155.08 (scipy.stats.chi2.ppf(1 - 1e-6, 80))."""
    m = _model()
    words, _, lengths = _batch()
    n = 40000
    f = m.transcription(words[:1], lengths[:1])
    tags, _ = proposal_sample(m, f, lengths[:1], n, generator=torch.Generator().manual_seed(11))
    ys, _, lq, _ = _enumerate(m, words, 0, "model")
    index = {tuple(y.tolist()): i for i, y in enumerate(ys)}
    counts = torch.zeros(len(ys), dtype=torch.float64)
    for y in tags[0].tolist():
        counts[index[tuple(y)]] += 1
    expected = n * lq.detach().exp()
    chi2 = float(((counts - expected) ** 2 / expected).sum())
    assert chi2 < 155.08, chi2


def _weight_moments(u: torch.Tensor, lq: torch.Tensor, log_z: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """p(y) and the normalised weights w~ = p/q on every sequence (E_q w~ = 1)."""
    logp = (u - log_z).detach()
    return logp.exp(), (logp - lq.detach()).exp()


@pytest.mark.parametrize("proposal", ["model", "uniform"])
@pytest.mark.parametrize("n_samples", [400, 20000])
def test_log_z_estimate_converges_within_the_delta_method_bound(proposal, n_samples):
    m = _model()
    words, tags, lengths = _batch()
    out = MonteCarloNLL(n_samples, proposal)(m, (words, tags, lengths), generator=torch.Generator().manual_seed(5))
    exact, sd, bias, spread = 0.0, 0.0, 0.0, 0.0
    for b in range(3):
        _, u, lq, log_z = _enumerate(m, words, b, proposal)
        p, wt = _weight_moments(u, lq, log_z)
        var_w = float((lq.detach().exp() * wt**2).sum()) - 1.0  # Var_q(w~)
        spread = max(spread, var_w)
        exact += float(log_z.detach()) / 3
        sd += var_w / n_samples / 9  # Var(log Z^) ~ Var_q(w~)/S, averaged over 3 sentences
        bias += -var_w / (2 * n_samples) / 3
    assert spread > 0.05  # the weights do vary: the test is not of a proposal equal to p
    err = out.metrics["log_z"] - exact
    assert abs(err - bias) <= 6 * math.sqrt(sd) + 1e-6, (err, bias, math.sqrt(sd))  # + float32 metric rounding
    gold = m.score(words, lengths, tags)
    assert out.metrics["loss"] == pytest.approx(float((-gold).detach().mean()) + out.metrics["log_z"], abs=1e-5)
    assert 1.0 <= out.metrics["ess"] <= n_samples


@pytest.mark.parametrize("proposal", ["model", "uniform"])
def test_gradient_converges_to_the_enumerated_nll_gradient_within_the_delta_method_bound(proposal):
    m = _model()
    words, tags, lengths = _batch()
    params = [p for p in m.parameters() if p.requires_grad]
    s = 20000
    out = MonteCarloNLL(s, proposal)(m, (words, tags, lengths), generator=torch.Generator().manual_seed(9))
    got = torch.cat([g.flatten() for g in torch.autograd.grad(out.loss, params)])
    exact_loss = -m.score(words, lengths, tags).mean()
    var = torch.zeros_like(got)
    bias = torch.zeros_like(got)
    for b in range(3):
        _, u, lq, log_z = _enumerate(m, words, b, proposal)
        exact_loss = exact_loss + log_z / 3
        _, wt = _weight_moments(u, lq, log_z)
        q = lq.detach().exp()
        h = torch.stack([torch.cat([(g if g is not None else torch.zeros_like(p)).flatten() for g, p in zip(
            torch.autograd.grad(u[i], params, retain_graph=True, allow_unused=True), params)]) for i in range(len(u))])
        mu = ((q * wt)[:, None] * h).sum(0)  # E_p h
        d = h - mu
        bias += -((q * wt**2)[:, None] * d).sum(0) / s / 3
        var += ((q * wt**2)[:, None] * d**2).sum(0) / s / 9
    want = torch.cat([g.flatten() for g in torch.autograd.grad(exact_loss, params)])
    err = got - want
    assert bool((var > 0).any())
    bound = 6 * var.sqrt() + bias.abs() + 1e-9
    assert bool((err.abs() <= bound).all()), float((err.abs() - bound).max())
    assert float(err.norm()) < 0.05 * float(want.norm())  # and the estimate is near the exact gradient


def test_batch_forms_generator_reproducibility_and_float32():
    m = _model()
    words, tags, lengths = _batch()
    obj = MonteCarloNLL(16)
    out = obj(m, (words, tags, lengths), generator=torch.Generator().manual_seed(2))
    assert isinstance(out, LossOutput) and out.loss.dtype == torch.float64
    assert out.negatives is not None and out.negatives.shape == (3, 16, T) and not out.negatives.requires_grad
    same = obj(m, (words, Sequences(tags, lengths)), generator=torch.Generator().manual_seed(2))
    assert torch.equal(out.loss, same.loss)
    unpacked = obj.compute(m, words, lengths, tags, generator=torch.Generator().manual_seed(2))
    assert torch.equal(out.loss, unpacked.loss)
    other = obj(m, (words, tags, lengths), generator=torch.Generator().manual_seed(3))
    assert not torch.equal(out.loss, other.loss)
    m32 = _model(torch.float32)
    out32 = MonteCarloNLL(4000)(m32, (words, tags, lengths), generator=torch.Generator().manual_seed(2))
    assert out32.loss.dtype == torch.float32
    out32.loss.backward()
    assert all(p.grad is not None and p.grad.dtype == torch.float32 for p in m32.parameters())
    exact = sum(float(_enumerate(m, words, b, "model")[3].detach()) for b in range(3)) / 3
    assert out32.metrics["log_z"] == pytest.approx(exact, abs=0.05)


def test_monte_carlo_nll_trains_a_crf_transducer():
    """Sixty Adam steps on two sentences raise the exact log-likelihood of their tags."""
    m = _model()
    m.train()
    words, tags, lengths = _batch()
    opt = torch.optim.Adam(m.parameters(), lr=0.05)
    g = torch.Generator().manual_seed(0)

    def exact_nll() -> float:
        with torch.no_grad():
            return sum(float(-m.score(words[b : b + 1], lengths[b : b + 1], tags[b : b + 1])[0]
                             + _enumerate(m, words, b, "model")[3]) for b in range(3))

    before = exact_nll()
    for _ in range(60):
        loss = MonteCarloNLL(32)(m, (words, tags, lengths), generator=g).loss
        opt.zero_grad()
        loss.backward()
        opt.step()
    assert exact_nll() < 0.5 * before


def test_monte_carlo_nll_names_bad_arguments():
    m = _model()
    words, tags, lengths = _batch()
    cases = [
        (lambda: MonteCarloNLL(0), ValueError, r"^n_samples: expected an int >= 1; got 0"),
        (lambda: MonteCarloNLL(2.5), TypeError, r"^n_samples: "),  # type: ignore[arg-type]
        (lambda: MonteCarloNLL(4, "beam"), ValueError, r"^proposal: expected one of model, uniform; got 'beam'"),
        (lambda: MonteCarloNLL(4)(NeuralCRFTagger(V, K, hidden=4), (words, tags, lengths)), TypeError,
         r"^model: expected an aligned transducer .*; got NeuralCRFTagger"),
        (lambda: MonteCarloNLL(4)(m, (words, tags, lengths), generator=3), TypeError,  # type: ignore[arg-type]
         r"^generator: expected a torch.Generator or None; got int"),
        (lambda: MonteCarloNLL(4)(m, (words, tags + 5, lengths)), ValueError, r"^tags: expected values in \[0, 2\]"),
        (lambda: MonteCarloNLL(4)(m, (words, tags, lengths + 3)), ValueError, r"^lengths: expected values in"),
        (lambda: proposal_log_prob(m, words, lengths, tags, proposal="x"), ValueError, r"^proposal: expected one of"),
    ]
    for call, kind, pattern in cases:
        with pytest.raises(kind, match=pattern) as info:
            call()
        assert "\n" not in str(info.value)
    allowed = torch.ones(K, K, dtype=torch.bool)
    allowed[0, 1] = False
    masked = _model(allowed=allowed)
    bad = torch.tensor([[0, 1, 2, 2], [2, 2, 0, 0], [1, 1, 1, 0]])
    with pytest.raises(ValueError, match=re.escape("tags: sequences [0] use a tag pair that allowed/allowed_start")):
        MonteCarloNLL(4)(masked, (words, bad, lengths))
    # the proposal never draws a forbidden pair
    f = masked.transcription(words, lengths)
    for proposal in ("model", "uniform"):
        draws, lq = proposal_sample(masked, f, lengths, 200, proposal=proposal,
                                    generator=torch.Generator().manual_seed(0))
        assert bool(torch.isfinite(lq).all())
        pairs = (draws[..., :-1] == 0) & (draws[..., 1:] == 1)
        assert not bool(pairs.any())


def test_benchmark_trains_the_monte_carlo_row_and_reports_its_effective_sample_size():
    b = bench("crf_transducer")
    data = lag_copy_tagging(n_train=64, n_test=16, seed=0)
    enc = {"embedding_dim": 4, "hidden": 4, "kind": "cnn", "layers": 1}
    r = b.train_one("crf-transducer-mc", data, enc, seed=0, steps=3, beam=2)
    assert 1.0 <= r["final_ess"] <= b.MC["n_samples"] and 0.0 <= r["accuracy"] <= 100.0
    again = b.train_one("crf-transducer-mc", data, enc, seed=0, steps=3, beam=2)
    assert (again["final_loss"], again["final_ess"]) == (r["final_loss"], r["final_ess"])  # its own seeded generator
