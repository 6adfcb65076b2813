"""Honest TRF / GN-ELM perplexity: with exact normalisers it equals the enumerated perplexity; the
re-estimated figure moves with log Z_l exactly as the formula says; the delta-method stderr and the
any-correlation bound match their formulas; the printed table shows both figures; error messages.

Model: a TRF over ``V = 4`` ids (tokens 1..3), lengths 1..4 (120 sentences), random trigram feature
weights, every probability computed by enumeration in float64.
"""

from __future__ import annotations

import functools
import math

import pytest
import torch

from ebms.distributions import NGram
from ebms.estimators import Estimate, LengthLogZ, importance_log_z_per_length
from ebms.metrics.lm_eval import TRFPerplexity, trf_perplexity
from ebms.models.trf import GNELM, TRF, DiscreteFeatures, exact_log_z, feature_templates
from ebms.sequences import Sequences
from ebms.spaces import TokenSequences

V, L = 4, 4


@functools.cache
def setup() -> tuple[DiscreteFeatures, Sequences, torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    corpus = Sequences(torch.randint(1, V, (50, L), generator=g), torch.randint(1, L + 1, (50,), generator=g))
    feats = DiscreteFeatures.fit(corpus, V, feature_templates(("w",), order=3))
    with torch.no_grad():
        feats.weight.copy_(torch.randn(feats.num_features, generator=g))
    return feats, corpus, exact_log_z(feats, V, L)


def enumerated_log_probs(model) -> tuple[Sequences, torch.Tensor]:
    """Every sentence of lengths 1..L and its log-probability, computed from scratch in float64."""
    feats, corpus, log_z = setup()
    x = Sequences.cat([Sequences(b.tokens + 1, b.lengths) for b in TokenSequences(V - 1, L).enumerate()])
    with torch.no_grad():
        e = model.energy(x).double()
    if isinstance(model, TRF):
        return x, model.log_pi.double()[x.lengths - 1] - e - log_z[x.lengths - 1]
    return x, -e - torch.logsumexp(log_z, 0)


def enumerated_perplexity(model, corpus: Sequences) -> float:
    x, lp = enumerated_log_probs(model)
    index = {tuple(r): i for i, r in enumerate(x.tolist())}
    total = sum(float(lp[index[tuple(r)]]) for r in corpus.tolist())
    return math.exp(-total / (int(corpus.lengths.sum()) + corpus.batch_size))


def trf(shift: float = 0.0) -> TRF:
    feats, corpus, log_z = setup()
    return TRF.from_corpus(feats, corpus, V, log_z=(log_z + shift).float())


def test_perplexity_with_exact_log_z_equals_the_enumerated_value():
    _, corpus, log_z = setup()
    model = trf()
    _, lp = enumerated_log_probs(model)
    assert float(torch.logsumexp(lp, 0)) == pytest.approx(0.0, abs=1e-6)  # p(l, x) sums to 1 (pi is float32)
    want = enumerated_perplexity(model, corpus)
    rep = trf_perplexity(model, corpus, log_z=log_z)
    assert rep.reestimated.perplexity == pytest.approx(want, rel=1e-12)
    assert rep.reestimated.exact and rep.reestimated.log_stderr == 0.0
    assert rep.training.perplexity == pytest.approx(want, rel=1e-6)  # zeta = exact, stored in float32
    assert rep.tokens == int(corpus.lengths.sum()) + 50 and rep.sentences == 50
    assert sum(rep.length_counts.values()) == 50
    # batches are summed, not averaged
    halves = [corpus[:20], corpus[20:]]
    assert trf_perplexity(model, halves, log_z=log_z).reestimated.perplexity == pytest.approx(want, rel=1e-12)


def test_gnelm_perplexity_with_exact_log_z_equals_the_enumerated_value():
    feats, corpus, log_z = setup()
    model = GNELM(feats, V, L)
    want = enumerated_perplexity(model, corpus)
    for given in (log_z, LengthLogZ.exact(log_z), float(torch.logsumexp(log_z, 0))):
        rep = trf_perplexity(model, corpus, log_z=given)
        assert rep.reestimated.perplexity == pytest.approx(want, rel=1e-12) and rep.reestimated.exact
    assert rep.model == "GNELM"


def test_an_underestimated_zeta_flatters_the_training_figure_by_the_formula():
    """zeta = log Z - 0.5 at every length: log PPL(training) = log PPL(exact) - 0.5 S / N."""
    _, corpus, log_z = setup()
    rep = trf_perplexity(trf(-0.5), corpus, log_z=log_z)
    gap = math.log(rep.reestimated.perplexity) - math.log(rep.training.perplexity)
    assert gap == pytest.approx(0.5 * rep.sentences / rep.tokens, rel=1e-6)
    assert rep.training.perplexity < rep.reestimated.perplexity


def test_delta_method_stderr_and_bound_follow_the_formulas():
    _, corpus, log_z = setup()
    se = [0.01, 0.02, 0.05, 0.1]
    est = LengthLogZ(tuple(range(1, L + 1)), tuple(Estimate(float(v), stderr=s) for v, s in zip(log_z, se)), "ais")
    rep = trf_perplexity(trf(), corpus, log_z=est)
    n = [rep.length_counts[k] for k in range(1, L + 1)]
    N = rep.tokens
    assert rep.reestimated.log_stderr == pytest.approx(math.sqrt(sum((a * s) ** 2 for a, s in zip(n, se))) / N)
    assert rep.reestimated.log_stderr_bound == pytest.approx(sum(a * s for a, s in zip(n, se)) / N)
    assert rep.reestimated.stderr == pytest.approx(rep.reestimated.perplexity * rep.reestimated.log_stderr)
    lo, hi = rep.reestimated.interval(2.0)
    assert math.log(hi) - math.log(rep.reestimated.perplexity) == pytest.approx(2 * rep.reestimated.log_stderr)
    assert lo < rep.reestimated.perplexity < hi and not rep.reestimated.exact
    # d log PPL / d log Z_l = n_l / N, exactly (log PPL is linear in log Z)
    bumped = LengthLogZ.exact(log_z + torch.tensor([0.0, 0.0, 0.3, 0.0], dtype=torch.float64))
    d = math.log(trf_perplexity(trf(), corpus, log_z=bumped).reestimated.perplexity) - math.log(
        trf_perplexity(trf(), corpus, log_z=log_z).reestimated.perplexity)
    assert d == pytest.approx(0.3 * n[2] / N, rel=1e-9)


def test_report_prints_both_figures_side_by_side():
    _, corpus, _ = setup()
    est = importance_log_z_per_length(trf(), NGram.uniform(V, end=False), 500,
                                      generator=torch.Generator().manual_seed(1))
    rep = trf_perplexity(trf(-0.3), corpus, log_z=est)
    assert isinstance(rep, TRFPerplexity)
    text = str(rep)
    assert "training zeta" in text and "re-estimated log Z_l (importance)" in text
    assert f"{rep.training.perplexity:.2f}" in text and f"{rep.reestimated.perplexity:.2f}" in text
    assert f"{rep.reestimated.stderr:.2f}" in text and "delta method" in text and "95% interval" in text
    assert abs(math.log(rep.reestimated.perplexity) - math.log(trf_perplexity(trf(), corpus, log_z=setup()[2])
                                                            .reestimated.perplexity)) <= 4 * rep.reestimated.log_stderr
    gn = trf_perplexity(GNELM(setup()[0], V, L), corpus, log_z=est)
    assert "the single log Z" in str(gn) and gn.reestimated.log_stderr == pytest.approx(
        gn.sentences * est.total().stderr / gn.tokens)
    only = trf_perplexity(trf(), corpus)
    assert only.reestimated is None and "re-estimated" not in str(only)


def test_validation_messages():
    feats, corpus, log_z = setup()
    with pytest.raises(TypeError, match="model: expected an ebms.models.trf.TRF or GNELM"):
        trf_perplexity(feats, corpus)
    with pytest.raises(ValueError, match="corpus: expected at least one sentence"):
        trf_perplexity(trf(), [])
    with pytest.raises(TypeError, match="corpus: expected Sequences or an iterable of Sequences"):
        trf_perplexity(trf(), [corpus.tokens])
    with pytest.raises(ValueError, match="corpus: id 0 is the sentence boundary"):
        trf_perplexity(trf(), Sequences.from_lists([[1, 0, 2]]))
    with pytest.raises(ValueError, match=r"log_z: the corpus has sentences of lengths \[3, 4\]"):
        trf_perplexity(trf(), corpus, log_z=LengthLogZ.exact(log_z[:2]))
    with pytest.raises(TypeError, match="log_z: expected a LengthLogZ"):
        trf_perplexity(trf(), corpus, log_z=3.0)
    with pytest.raises(ValueError, match=r"log_z: a GN-ELM's log Z sums over every length 1..4; lengths \[4\]"):
        trf_perplexity(GNELM(feats, V, L), corpus, log_z=LengthLogZ.exact(log_z[:3]))
    with pytest.raises(TypeError, match="log_z: expected a LengthLogZ, a tensor"):
        trf_perplexity(GNELM(feats, V, L), corpus, log_z="x")
    with pytest.raises(ValueError, match="z: expected"):
        trf_perplexity(trf(), corpus, z=-1.0)


def test_small_ess_is_flagged():
    _, corpus, log_z = setup()
    ests = tuple(Estimate(float(v), stderr=0.1, ess=e) for v, e in zip(log_z, [500.0, 3.0, 800.0, 2.0]))
    rep = trf_perplexity(trf(), corpus, log_z=LengthLogZ(tuple(range(1, L + 1)), ests, "importance"))
    assert rep.low_ess_lengths == (2, 4) and "warning: small ESS at lengths [2, 4]" in str(rep)
    assert trf_perplexity(trf(), corpus, log_z=log_z).low_ess_lengths == ()
    assert trf_perplexity(trf(), corpus, log_z=LengthLogZ(tuple(range(1, L + 1)), ests, "x"), min_ess=2.5
                          ).low_ess_lengths == (4,)


def test_a_nan_energy_is_refused_instead_of_printing_nan():
    _, corpus, _ = setup()
    model = trf()
    with torch.no_grad():
        for p in model.parameters():
            p.fill_(math.nan)
    with pytest.raises(ValueError, match=r"^model: the corpus log-probability with the training zeta normalisers is "
                                         r"NaN \(a NaN energy, log pi or log Z\); no perplexity$"):
        trf_perplexity(model, corpus)
