"""The AIS path of ``benchmarks/trf_logz_ais.py`` on a tiny TRF, against exact enumeration.

That path: proposal ``LengthConditionalLM(BackoffNGram)`` (scored by the fast n-gram route of
``_seq_common``, without ``(B, V)`` rows), the class-based within-length kernel
``TransDimensional(jump=False, classes=..., token_probs=unigram)``, all lengths in one batch.
:func:`ebms.models.trf.exact_log_z` is the reference; tolerances are ``Z`` standard errors of the
estimates (delta method), stated below.
"""

from __future__ import annotations

import functools
import math

import pytest
import torch

from ebms.distributions import BackoffNGram
from ebms.estimators import LengthConditionalLM, ais_log_z_per_length, linear_betas
from ebms.estimators._seq_common import annealed_energy, fast_ngram, ngram_log_q_terms, proposal_log_prob
from ebms.models.trf import TRF, DiscreteFeatures, exact_log_z, feature_templates
from ebms.samplers.trans_dimensional import TransDimensional
from ebms.sequences import Sequences

V, L = 6, 4
Z = 4.0  # z-value of the per-length comparisons against the exact value (24 comparisons in the module)


@functools.cache
def setup() -> tuple[TRF, torch.Tensor, Sequences]:
    g = torch.Generator().manual_seed(3)
    corpus = Sequences(torch.randint(1, V, (60, L), generator=g), torch.randint(1, L + 1, (60,), generator=g))
    classes = torch.tensor([0, 0, 0, 1, 1, 2])
    feats = DiscreteFeatures.fit(corpus, V, feature_templates(("w", "c"), order=3), classes=classes)
    with torch.no_grad():
        feats.weight.copy_(torch.randn(feats.num_features, generator=g))
    model = TRF.from_corpus(feats, corpus, V)
    return model, exact_log_z(model, V, L), corpus


def kn(order: int) -> BackoffNGram:
    return BackoffNGram.fit(setup()[2], V, order, discounts=[(0.5, 0.8, 1.1)] * order)


@pytest.mark.parametrize("order", [1, 2, 3])
def test_fast_ngram_log_q_equals_the_length_conditional_lm(order):
    """The O(B T n) route gives LengthConditionalLM.log_prob (KN's next-word laws sum to 1)."""
    q = LengthConditionalLM(kn(order))
    g = torch.Generator().manual_seed(order)
    x = Sequences(torch.randint(1, V, (30, L), generator=g), torch.randint(1, L + 1, (30,), generator=g))
    assert torch.allclose(proposal_log_prob(q, x), q.log_prob(x), atol=1e-10, rtol=0)
    assert torch.allclose(ngram_log_q_terms(q.lm, x).sum(1), q.log_prob(x), atol=1e-10, rtol=0)


def test_fast_ngram_log_q_keeps_the_boundary_message():
    q = LengthConditionalLM(kn(2))
    with pytest.raises(ValueError, match="other than the boundary 0"):
        proposal_log_prob(q, Sequences(torch.tensor([[1, 0, 2]]), torch.tensor([3])))


@pytest.mark.parametrize("order", [2, 3])
@pytest.mark.parametrize("beta", [0.0, 0.5])
def test_local_ngram_substitution_scores_match_whole_sentences(order, beta):
    """Scoring only the 2n - 1 tokens around the position gives -(annealed energy) of each variant up
    to a per-row constant, at every position including the first and last."""
    model, _, _ = setup()
    target = annealed_energy(model, model.energy, LengthConditionalLM(kn(order)), model.space)
    target.beta = beta
    g = torch.Generator().manual_seed(10 + order)
    x = Sequences(torch.randint(1, V, (8, L), generator=g), torch.tensor([1, 2, 3, 4, 4, 4, 4, 3]))
    pos = torch.tensor([0, 1, 2, 0, 1, 2, 3, 1])
    cand = torch.tensor([[1, 2, 5, 0, -1]] * 8)
    s = target.token_logits(x, pos, cand)
    assert bool((s[:, 3] == -math.inf).all()) and bool((s[:, 4] == 0).all())
    const = None
    for k in range(3):
        tok = x.tokens.clone()
        tok[torch.arange(8), pos] = cand[:, k]
        full = -target(Sequences(tok, x.lengths))
        const = s[:, k] - full if const is None else const
        # float64 n-gram terms; the TRF's float32 weights leave ~1e-7 at beta > 0
        assert torch.allclose(s[:, k] - full, const, atol=1e-9 if beta == 0 else 1e-5)


def class_kernel() -> TransDimensional:
    probs = torch.tensor([0.0, 5.0, 1.0, 3.0, 2.0, 1.0], dtype=torch.float64)
    return TransDimensional(token_probs=probs, classes=torch.tensor([0, 0, 0, 1, 1, 2]), jump=False)


def test_forward_ais_with_class_kernel_and_kn_proposal_matches_exact_at_all_lengths():
    """All four lengths in one batch; |estimate - exact| <= Z stderr at each."""
    model, exact, _ = setup()
    est = ais_log_z_per_length(model, LengthConditionalLM(kn(2)), 200, linear_betas(10), kernel=class_kernel(),
                               generator=torch.Generator().manual_seed(4))
    dev = (est.values() - exact).abs()
    assert bool((dev <= Z * est.stderrs()).all()), (dev / est.stderrs()).tolist()
    assert est.lengths == (1, 2, 3, 4) and all(e.ess > 20 for e in est.estimates)


def test_bracket_from_exact_draws_with_class_kernel_contains_every_length():
    """Reverse AIS started from exact draws of p(x | l): the bracket [lower, upper] holds log Z_l."""
    model, exact, _ = setup()
    g = torch.Generator().manual_seed(5)
    parts = []
    for n in range(1, L + 1):
        grid = torch.cartesian_prod(*[torch.arange(1, V)] * n).view(-1, n)
        x = Sequences(grid, torch.full((grid.shape[0],), n))
        with torch.no_grad():
            p = torch.softmax(-model.energy(x).double(), 0)
        parts.append(x[torch.multinomial(p, 60, replacement=True, generator=g)].pad_to(L))
    draws = Sequences(torch.cat([p.tokens for p in parts]), torch.cat([p.lengths for p in parts]))
    est = ais_log_z_per_length(model, LengthConditionalLM(kn(3)), 60, linear_betas(6), kernel=class_kernel(),
                               target_samples=draws, z=Z, generator=g)
    assert est.method == "ais bracket"
    for e, ex in zip(est.estimates, exact.tolist()):
        assert e.lower <= ex <= e.upper, (e.lower, ex, e.upper)


def test_an_n_gram_whose_laws_do_not_sum_to_one_falls_back_to_the_exact_route():
    """The O(B T n) route needs sum_w p(w | h) = 1; a perturbed table is scored by LengthConditionalLM itself."""
    lm = kn(2)
    with torch.no_grad():
        lm.log_probs_1.add_(0.3)
    q = LengthConditionalLM(lm)
    g = torch.Generator().manual_seed(7)
    x = Sequences(torch.randint(1, V, (10, L), generator=g), torch.randint(1, L + 1, (10,), generator=g))
    assert fast_ngram(q) is None and fast_ngram(LengthConditionalLM(kn(2))) is not None
    assert torch.allclose(proposal_log_prob(q, x), q.log_prob(x), atol=1e-12, rtol=0)
    assert not torch.allclose(ngram_log_q_terms(lm, x).sum(1), q.log_prob(x), atol=1e-3)
