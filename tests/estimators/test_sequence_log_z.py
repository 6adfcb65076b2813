"""Per-length log Z_l of a TRF field by importance sampling and AIS, against exact enumeration.

Target: a TRF over ``V = 4`` ids (tokens 1..3), lengths 1..4 (120 sentences), with random trigram
feature weights; :func:`ebms.models.trf.exact_log_z` is the reference. Tolerances come from the
estimators' own standard errors, ``z = 4`` (two-sided normal tail 6e-5 per comparison; the
delta-method stderr is trustworthy here: the ESS printed by the estimates is a large fraction of
the draws). The lower-bound checks average independent small runs (groups of one large run's
chains): the mean of ``R`` estimates must sit below (forward) or above (reverse) ``log Z`` up to
``z_mean = 3`` standard errors of that mean.
"""

from __future__ import annotations

import functools
import math

import pytest
import torch

from ebms.distributions import BackoffNGram, NGram
from ebms.estimators import (
    Estimate,
    LengthConditionalLM,
    LengthLogZ,
    ais_log_z_per_length,
    importance_log_z_per_length,
    linear_betas,
)
from ebms.models.lm import LSTMLM
from ebms.models.trf import GNELM, TRF, DiscreteFeatures, exact_log_z, feature_templates
from ebms.samplers import MALA, Gibbs, MetropolisHastings
from ebms.samplers.trans_dimensional import TransDimensional
from ebms.sequences import Sequences
from ebms.spaces import TokenSequences

V, L = 4, 4
Z = 4.0  # per-length comparisons against the exact value
Z_MEAN = 3.0  # one-sided checks of an average of independent runs


@functools.cache
def setup() -> tuple[TRF, torch.Tensor, Sequences]:
    g = torch.Generator().manual_seed(0)
    corpus = Sequences(torch.randint(1, V, (40, L), generator=g), torch.randint(1, L + 1, (40,), generator=g))
    feats = DiscreteFeatures.fit(corpus, V, feature_templates(("w",), order=3))
    with torch.no_grad():
        feats.weight.copy_(1.5 * torch.randn(feats.num_features, generator=g))
    model = TRF.from_corpus(feats, corpus, V)
    return model, exact_log_z(model, V, L), corpus


def uniform() -> NGram:
    return NGram.uniform(V, end=False)


def bigram() -> NGram:
    return NGram.fit(setup()[2], V, order=2, end=False, smoothing="add_k", k=0.5)


def exact_draws(model: TRF, n: int, length: int, g: torch.Generator) -> Sequences:
    """``n`` exact draws from ``p(x | l) ∝ exp(-E(x))`` by enumerating the ``(V-1)^l`` sentences."""
    block = next(TokenSequences(V - 1, length, min_length=length).enumerate(1 << 16))
    x = Sequences(block.tokens + 1, block.lengths)
    with torch.no_grad():
        p = torch.softmax(-model.energy(x).double(), 0)
    return x[torch.multinomial(p, n, replacement=True, generator=g)]


def assert_within(est: LengthLogZ, exact: torch.Tensor) -> None:
    assert est.lengths == tuple(range(1, L + 1))
    dev = (est.values() - exact).abs()
    assert bool((dev <= Z * est.stderrs()).all()), (dev / est.stderrs()).tolist()


@pytest.mark.parametrize("proposal", [uniform, bigram])
def test_importance_matches_exact_log_z_per_length(proposal):
    model, exact, _ = setup()
    est = importance_log_z_per_length(model, proposal(), 3000, generator=torch.Generator().manual_seed(1),
                                      batch_size=5000)
    assert_within(est, exact)
    for n, e in zip(est.lengths, est.estimates):
        assert 0 < e.ess <= 3000 and e.settings["length"] == n and e.settings["n"] == 3000
    assert est.method == "importance" and [w.shape for w in est.log_weights] == [(3000,)] * L


def test_importance_with_the_exact_conditional_as_proposal_has_zero_variance():
    """q = p(x | l) exactly (length 1: a unigram table of the field's one-token law): every weight is Z_1."""
    model, exact, _ = setup()
    with torch.no_grad():
        one = -model.energy(Sequences(torch.arange(1, V)[:, None])).double()
    table = torch.cat([torch.full((1,), -math.inf, dtype=torch.float64), torch.log_softmax(one, 0)])
    est = importance_log_z_per_length(model, NGram(V, 1, table, end=False), 50, lengths=1)
    assert est.estimates[0].estimate == pytest.approx(float(exact[0]), abs=1e-6)
    assert est.estimates[0].stderr < 1e-6 and est.estimates[0].ess == pytest.approx(50)


def td_gibbs() -> TransDimensional:
    probs = torch.ones(V, dtype=torch.float64)
    probs[0] = 0.0
    return TransDimensional(token_probs=probs, classes=torch.zeros(V, dtype=torch.long), jump=False)


@pytest.mark.parametrize("kernel", ["default", "gibbs", "td_gibbs", "mh"])
def test_ais_matches_exact_log_z_per_length(kernel):
    model, exact, _ = setup()
    k = {"default": None, "gibbs": Gibbs(), "td_gibbs": td_gibbs(), "mh": MetropolisHastings()}[kernel]
    est = ais_log_z_per_length(model, uniform(), 100, linear_betas(8), kernel=k,
                               generator=torch.Generator().manual_seed(2))
    assert_within(est, exact)
    assert est.method == "ais" and est.estimates[0].settings["num_steps"] == 8


def test_ais_is_a_lower_bound_in_expectation_and_reverse_ais_an_upper_bound():
    """R = 200 independent 4-chain runs at length 4, 2 annealing steps: the forward estimates average
    below log Z, the reverse ones (from exact draws) above; the Jensen gaps are visible here."""
    model, exact, _ = setup()
    g = torch.Generator().manual_seed(3)
    R, n = 200, 4
    x = exact_draws(model, R * n, L, g)
    est = ais_log_z_per_length(model, uniform(), R * n, linear_betas(2), lengths=L, kernel=Gibbs(),
                               target_samples=x, generator=g)
    fwd = torch.logsumexp(est.log_weights[0].view(R, n), 1) - math.log(n)
    rev = -(torch.logsumexp(est.reverse_log_weights[0].view(R, n), 1) - math.log(n))
    truth = float(exact[L - 1])
    se_f, se_r = float(fwd.std()) / math.sqrt(R), float(rev.std()) / math.sqrt(R)
    assert float(fwd.mean()) <= truth + Z_MEAN * se_f
    assert float(rev.mean()) >= truth - Z_MEAN * se_r
    assert float(fwd.mean()) < float(rev.mean())
    # the pooled estimates (all 800 chains) bracket the truth
    e = est.estimates[0]
    assert e.lower <= truth <= e.upper
    assert e.settings["method"] == "ais bracket" and e.settings["n_reverse"] == R * n


def test_bracket_from_exact_draws_contains_every_length():
    model, exact, _ = setup()
    g = torch.Generator().manual_seed(4)
    x = Sequences.cat([exact_draws(model, 60, n, g) for n in range(1, L + 1)])
    est = ais_log_z_per_length(model, bigram(), 60, linear_betas(6), kernel=Gibbs(), target_samples=x, z=Z,
                               generator=g)
    assert est.method == "ais bracket"
    for e, truth in zip(est.estimates, exact.tolist()):
        assert e.lower <= truth <= e.upper
    assert "lower" in str(est)


def test_reverse_needs_two_samples_of_a_length():
    """Lengths with fewer than 2 target samples keep the plain forward estimate."""
    model, _, _ = setup()
    g = torch.Generator().manual_seed(5)
    x = Sequences.cat([exact_draws(model, 5, 2, g), exact_draws(model, 1, 3, g)])
    est = ais_log_z_per_length(model, uniform(), 4, linear_betas(2), lengths=[2, 3], target_samples=x, generator=g)
    assert est.estimates[0].lower is not None and est.estimates[1].lower is None
    assert est.reverse_log_weights[1] is None and est.reverse_log_weights[0].shape == (5,)


def test_total_is_the_gnelm_log_z_with_delta_method_stderr():
    model, exact, _ = setup()
    est = importance_log_z_per_length(model, uniform(), 3000, generator=torch.Generator().manual_seed(6))
    tot = est.total()
    truth = float(torch.logsumexp(exact, 0))
    assert abs(tot.estimate - truth) <= Z * tot.stderr
    share = torch.softmax(est.values(), 0)
    assert tot.stderr == pytest.approx(float((share.square() * est.stderrs().square()).sum().sqrt()), rel=1e-12)
    ex = LengthLogZ.exact(exact).total()
    assert ex.exact and ex.stderr == 0 and ex.estimate == pytest.approx(truth, abs=1e-12)
    a = torch.tensor([-1.0, 0.0, 0.5, 2.0], dtype=torch.float64)
    assert LengthLogZ.exact(exact).total(a).estimate == pytest.approx(float(torch.logsumexp(a + exact, 0)))


def test_length_log_z_accessors():
    est = LengthLogZ.exact(torch.tensor([0.5, 1.5], dtype=torch.float64), first_length=2)
    assert est.lengths == (2, 3) and est[3].estimate == 1.5 and est[3].exact
    with pytest.raises(KeyError, match="length 1: not estimated"):
        est[1]
    with pytest.raises(ValueError, match=r"max_length: lengths \[1\] were not estimated"):
        est.as_log_z(3)
    full = LengthLogZ.exact(torch.tensor([0.5, 1.5], dtype=torch.float64))
    assert full.as_log_z(2).tolist() == [0.5, 1.5] and "exact" in str(full)
    with pytest.raises(ValueError, match="estimates: expected one Estimate per length"):
        LengthLogZ((1, 2), (Estimate(0.0),), "x")
    with pytest.raises(ValueError, match="lengths: expected increasing distinct lengths"):
        LengthLogZ((2, 1), (Estimate(0.0), Estimate(0.0)), "x")
    with pytest.raises(ValueError, match=r"length_log_weights: expected shape \(2,\)"):
        full.total(torch.zeros(3))
    with pytest.raises(ValueError, match="log_z: expected a 1-D tensor of finite values"):
        LengthLogZ.exact(torch.tensor([0.0, math.inf]))


def test_a_plain_energy_needs_a_space():
    model, exact, _ = setup()
    energy = model.energy
    est = importance_log_z_per_length(energy, uniform(), 2000, space=TokenSequences(V, L), lengths=[1, 2],
                                      generator=torch.Generator().manual_seed(7))
    assert abs(est.values() - exact[:2]).max() <= Z * est.stderrs().max()
    with pytest.raises(TypeError, match="space: expected an ebms.spaces.TokenSequences"):
        importance_log_z_per_length(energy, uniform(), 10)


def test_validation_messages():
    model, _, corpus = setup()
    with pytest.raises(ValueError, match=r"proposal: expected a length-conditional law q\(x \| l\)"):
        importance_log_z_per_length(model, NGram.fit(corpus, V, order=2), 10)
    with pytest.raises(TypeError, match="proposal: expected an object with sample"):
        importance_log_z_per_length(model, object(), 10)
    with pytest.raises(ValueError, match=r"lengths: expected lengths in \[1, 4\]"):
        importance_log_z_per_length(model, uniform(), 10, lengths=[0, 5])
    with pytest.raises(ValueError, match="n_samples: expected an int >= 2"):
        importance_log_z_per_length(model, uniform(), 1)
    with pytest.raises(TypeError, match="model: expected a TRF/GNELM or a sentence energy"):
        importance_log_z_per_length(3, uniform(), 10)
    with pytest.raises(ValueError, match="kernel: AIS runs at fixed lengths"):
        ais_log_z_per_length(model, uniform(), 4, linear_betas(2), kernel=TransDimensional())
    with pytest.raises(TypeError, match="kernel: expected an ebms.samplers.Sampler over Sequences"):
        ais_log_z_per_length(model, uniform(), 4, linear_betas(2), kernel=MALA(step_size=0.1))
    with pytest.raises(ValueError, match="betas: expected to start at 0 and end at 1"):
        ais_log_z_per_length(model, uniform(), 4, [0.0, 0.5])
    no_three = torch.tensor([-math.inf, math.log(0.5), math.log(0.5), -math.inf], dtype=torch.float64)
    q = NGram(V, 1, no_three, end=False)
    with pytest.raises(ValueError, match="target_samples: the proposal gives sentence 0 .* probability 0"):
        ais_log_z_per_length(model, q, 4, linear_betas(2), target_samples=Sequences.from_lists([[3], [1]]))
    with pytest.raises(ValueError, match="target_samples: expected sentences without the boundary id 0"):
        ais_log_z_per_length(model, uniform(), 4, linear_betas(2), target_samples=Sequences.from_lists([[0], [1]]))


class _WrongLengths:
    """A proposal that ignores the requested lengths."""

    conditional_on_length = True

    def sample(self, n, generator=None, lengths=None):
        return Sequences(torch.ones(n, 1, dtype=torch.long))

    def log_prob(self, x):
        return torch.zeros(x.batch_size)


def test_proposal_draws_are_checked():
    model, _, _ = setup()
    with pytest.raises(ValueError, match="expected sentences of the requested lengths"):
        importance_log_z_per_length(model, _WrongLengths(), 4, lengths=2)


def small_lstm() -> LSTMLM:
    torch.manual_seed(0)
    return LSTMLM(V, embedding_dim=4, hidden_size=8).eval()


def small_kn() -> BackoffNGram:
    """A Witten-Bell trigram of a tiny corpus (next_log_probs, no lm(inputs, state) call)."""
    corpus = [[1, 2, 3], [2, 2], [3, 1, 1, 2], [1], [2, 3, 3, 1]]
    return BackoffNGram.fit(Sequences.from_lists(corpus), V, order=3, smoothing="witten_bell")


PROPOSAL_LMS = {"lstm": small_lstm, "kn": small_kn}


@pytest.mark.parametrize("lm", sorted(PROPOSAL_LMS))
def test_length_conditional_lm_is_normalised_at_every_length(lm):
    q = LengthConditionalLM(PROPOSAL_LMS[lm]())
    for n in range(1, L + 1):
        block = next(TokenSequences(V - 1, n, min_length=n).enumerate(1 << 16))
        lp = q.log_prob(Sequences(block.tokens + 1, block.lengths))
        assert float(torch.logsumexp(lp, 0)) == pytest.approx(0.0, abs=1e-9)


@pytest.mark.parametrize("lm", sorted(PROPOSAL_LMS))
def test_length_conditional_lm_draws_follow_its_log_prob(lm):
    """S = 20000 draws at length 2 (9 sentences) against exp(log_prob): TV within
    1/2 sum sqrt(p(1-p)/S) + z/(2 sqrt S), z = 4.3 (McDiarmid, failure < 1e-4)."""
    q = LengthConditionalLM(PROPOSAL_LMS[lm]())
    S = 20000
    x = q.sample(S, lengths=2, generator=torch.Generator().manual_seed(8))
    block = next(TokenSequences(V - 1, 2, min_length=2).enumerate(1 << 16))
    p = q.log_prob(Sequences(block.tokens + 1, block.lengths)).exp()
    index = ((x.tokens[:, 0] - 1) * (V - 1) + (x.tokens[:, 1] - 1))
    freq = torch.bincount(index, minlength=(V - 1) ** 2).double() / S
    bound = 0.5 * float((p * (1 - p) / S).sqrt().sum()) + 4.3 / (2 * math.sqrt(S))
    assert 0.5 * float((freq - p).abs().sum()) <= bound
    assert x.lengths.tolist() == [2] * S and bool((x.tokens > 0).all())


def test_length_conditional_ngram_is_the_ngram_without_the_boundary():
    # q(x | l) = prod_t p(x_t | h_t) / (1 - p(</s> | h_t)), from the n-gram's own token_log_probs
    kn = small_kn()
    rows = [[1, 2, 3], [3], [2, 2, 1, 3]]
    x = Sequences.from_lists(rows)
    want = []
    for row in rows:
        total = 0.0
        for t in range(len(row)):
            prefix = Sequences(torch.tensor([row[:t] or [0]]), torch.tensor([t]))
            nxt = kn.next_log_probs(prefix)[0].double()
            total += float(nxt[row[t]] - torch.log1p(-nxt[0].exp()))
        want.append(total)
    torch.testing.assert_close(LengthConditionalLM(kn).log_prob(x), torch.tensor(want, dtype=torch.float64))


@pytest.mark.parametrize("lm", sorted(PROPOSAL_LMS))
def test_importance_with_an_lm_proposal_matches_exact_log_z(lm):
    model, exact, _ = setup()
    q = LengthConditionalLM(PROPOSAL_LMS[lm]())
    est = importance_log_z_per_length(model, q, 3000, generator=torch.Generator().manual_seed(9))
    assert_within(est, exact)
    assert est.estimates[0].settings["proposal"] == "LengthConditionalLM"


def test_length_conditional_lm_validation():
    with pytest.raises(TypeError, match="lm: expected an autoregressive LM with vocab_size.* or an n-gram"):
        LengthConditionalLM(object())
    q = LengthConditionalLM(small_lstm())
    with pytest.raises(ValueError, match="x: expected token ids in .* other than the boundary 0"):
        q.log_prob(Sequences.from_lists([[1, 0]]))
    with pytest.raises(ValueError, match=r"lengths: expected an int or an integer tensor \(2,\)"):
        q.sample(2, lengths=torch.tensor([1, 2, 3]))
    with pytest.raises(ValueError, match="boundary: expected an id in"):
        LengthConditionalLM(small_lstm(), boundary=V)


@pytest.mark.parametrize("beta", [0.0, 0.4, 1.0])
def test_annealed_substitution_scores_match_whole_sentence_energies(beta):
    """token_logits of the annealed energy = -(beta E - (1 - beta) log q) of each variant, up to a
    per-row constant; candidate 0 (the boundary) scores -inf, absent candidates (-1) 0."""
    from ebms.estimators._seq_common import annealed_energy

    model, _, corpus = setup()
    target = annealed_energy(model, model.energy, bigram(), model.space)
    target.beta = beta
    x = corpus[:6]
    pos = torch.minimum(torch.tensor([0, 1, 2, 3, 0, 1]), x.lengths - 1)
    cand = torch.tensor([[1, 2, 3, 0, -1]] * 6)
    s = target.token_logits(x, pos, cand)
    assert bool((s[:, 3] == -math.inf).all()) and bool((s[:, 4] == 0).all())
    for k in range(3):
        tok = x.tokens.clone()
        tok[torch.arange(6), pos] = cand[:, k]
        full = -target(Sequences(tok, x.lengths))
        if k == 0:
            const = s[:, 0] - full
        assert torch.allclose(s[:, k] - full, const, atol=1e-5)


def test_gnelm_with_length_features_total_matches_exact():
    """A GN-ELM's energy includes its dimension features nu_l; total() is its single log Z."""
    model, _, _ = setup()
    gnelm = GNELM(model.field, V, L, length_features=True)
    with torch.no_grad():
        gnelm.nu.copy_(torch.tensor([0.5, -0.3, 0.2, 1.0]))
    exact = exact_log_z(gnelm, V, L)
    est = ais_log_z_per_length(gnelm, bigram(), 100, linear_betas(8), generator=torch.Generator().manual_seed(10))
    assert_within(est, exact)
    tot = est.total()
    assert abs(tot.estimate - float(torch.logsumexp(exact, 0))) <= Z * tot.stderr


def test_length_conditional_lm_scores_padded_batches_in_chunks_as_each_sentence_alone(monkeypatch):
    import ebms.estimators._seq_proposal as sp
    from ebms.estimators import LengthConditionalLM
    from ebms.models.lm import LSTMLM

    torch.manual_seed(0)
    q = LengthConditionalLM(LSTMLM(12, embedding_dim=6, hidden_size=8, num_layers=1).double().eval())  # float64: exact
    g = torch.Generator().manual_seed(1)
    lengths = torch.tensor([1, 7, 3, 12, 5])
    x = q.sample(5, g, lengths=lengths).pad_to(30)  # padded far beyond the longest sentence
    alone = torch.cat([q.log_prob(x[[i]].canonical()) for i in range(5)])
    monkeypatch.setattr(sp, "_CHUNK", 12 * 12 * 2)  # two rows of the 12-wide batch per chunk: three chunks
    torch.testing.assert_close(q.log_prob(x), alone, rtol=0, atol=1e-12)
