"""The monograph's label-bias toy (Ou 2024, §4.1.2, Fig. 4.2 and Eq. 4.9): a locally normalised LM
cannot order two unseen sentences that a globally normalised one orders correctly.

Training sentences "Tom likes tea", "John likes tea", "Alice like tea"; test sentences "Alice likes
tea" (grammatical) and "Tom like tea". An epsilon-smoothed bigram ALM gives both test sentences
``(1 - 4 eps)/3 * eps * (1 - 6 eps)^2`` (about the monograph's 0.33 eps): each takes exactly one
unseen transition and the rest of the product is shared, so no choice of eps orders them. A GN-ELM
with the nine indicator features of Eq. 4.9 scores whole sentences: "likes tea" is seen twice and
"like tea" once, and nothing forces the first word to pay for the second, so it prefers "Alice likes
tea". All figures are exact (enumeration over the 258 sentences of lengths 1..3, no sampling); the
tests check orders, not the fitted values, which depend on the regulariser (the unregularised
maximum-likelihood weights diverge).
"""

from __future__ import annotations

import itertools
import math

import pytest
import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ebms.distributions import NGram
from ebms.models.trf import GNELM, TRF, exact_log_z
from ebms.sequences import Sequences

TOM, JOHN, ALICE, LIKES, LIKE, TEA = range(1, 7)
V, L = 7, 3  # id 0 is <s>/</s>
TRAIN = [[TOM, LIKES, TEA], [JOHN, LIKES, TEA], [ALICE, LIKE, TEA]]
GOOD, BAD = [ALICE, LIKES, TEA], [TOM, LIKE, TEA]
#: the weights the monograph reports (Eq. 4.9 text): lambda_1, _3, _7, _8, _9; the others are not given.
MONOGRAPH = {0: 2.88, 2: 2.53, 6: 5.21, 7: 4.12, 8: 5.18}


class ToyFeatures(nn.Module):
    """Eq. 4.9: ``E(x) = -sum_k lambda_k f_k(x)`` with f_1..3 = [x1 = Tom/John/Alice], f_4..6 = [x1 x2 =
    Tom likes / John likes / Alice like], f_7..8 = [x2 x3 = likes tea / like tea], f_9 = [x3 = tea]."""

    def __init__(self) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.zeros(9, dtype=torch.float64))

    def features(self, x: Sequences) -> Tensor:
        tok = x.tokens * x.mask()  # padding reads as 0, which no feature matches
        tok = F.pad(tok, (0, max(0, L - tok.shape[1])))
        x1, x2, x3 = tok[:, 0], tok[:, 1], tok[:, 2]
        f = [x1 == TOM, x1 == JOHN, x1 == ALICE, (x1 == TOM) & (x2 == LIKES), (x1 == JOHN) & (x2 == LIKES),
             (x1 == ALICE) & (x2 == LIKE), (x2 == LIKES) & (x3 == TEA), (x2 == LIKE) & (x3 == TEA), x3 == TEA]
        return torch.stack(f, 1).double()

    def forward(self, x: Sequences) -> Tensor:
        return -(self.features(x) @ self.weight)


def every_sentence() -> Sequences:
    return Sequences.from_lists([list(s) for n in range(1, L + 1) for s in itertools.product(range(1, V), repeat=n)])


def smoothed_bigram(eps: float) -> NGram:
    """Fig. 4.2's ALM: per history, unseen outcomes (tokens and </s>) get eps, seen ones share the rest
    in proportion to their counts."""
    counts = torch.zeros(V, V, dtype=torch.float64)
    for s in TRAIN:
        for h, w in zip([0] + s, s + [0]):
            counts[h, w] += 1
    seen = counts > 0
    unseen = (~seen).sum(1, keepdim=True)
    probs = torch.where(seen, (1 - eps * unseen) * counts / counts.sum(1, keepdim=True), torch.full_like(counts, eps))
    return NGram(V, 2, probs.log())


def fitted_features(c: float = 0.01) -> ToyFeatures:
    """Maximum likelihood over all sentences of lengths 1..3 (exact log Z), L2 penalty ``c/2 |lambda|^2``."""
    energy, data, space = ToyFeatures(), Sequences.from_lists(TRAIN), every_sentence()
    opt = torch.optim.LBFGS(energy.parameters(), max_iter=500, tolerance_grad=1e-10, tolerance_change=1e-12,
                            line_search_fn="strong_wolfe")

    def closure() -> Tensor:
        opt.zero_grad()
        loss = energy(data).mean() + torch.logsumexp(-energy(space), 0) + 0.5 * c * energy.weight.square().sum()
        loss.backward()
        return loss

    opt.step(closure)
    return energy


def log_probs(model, sentences: list[list[int]]) -> list[float]:
    with torch.no_grad():
        return model.log_prob(Sequences.from_lists(sentences)).double().tolist()


@pytest.mark.parametrize("eps", [1e-3, 1e-2, 0.05])
def test_smoothed_bigram_alm_cannot_order_the_test_sentences(eps):
    alm = smoothed_bigram(eps)
    assert alm.normalised
    good, bad = log_probs(alm, [GOOD, BAD])
    assert good == pytest.approx(bad, abs=1e-12)
    # -> eps / 3 as eps -> 0: the monograph's "0.33 eps" (float32 table)
    assert good == pytest.approx(math.log((1 - 4 * eps) / 3 * eps * (1 - 6 * eps) ** 2), abs=1e-6)


def test_gnelm_with_the_monograph_weights_prefers_alice_likes_tea():
    """Z cancels: log P(Alice likes tea) - log P(Tom like tea) = (2.53 + 5.21) - (2.88 + 4.12) = 0.74,
    the monograph's -7.06 - (-7.79) up to its rounding."""
    energy = ToyFeatures()
    with torch.no_grad():
        for k, v in MONOGRAPH.items():
            energy.weight[k] = v
    model = GNELM(energy, V, L, log_z=19.98)
    good, bad = log_probs(model, [GOOD, BAD])
    assert good - bad == pytest.approx(0.74, abs=1e-12)
    assert good == pytest.approx(-7.06, abs=1e-5) and bad == pytest.approx(-7.80, abs=1e-5)  # float32 log_z
    assert abs((good - bad) - (-7.06 + 7.79)) <= 0.02


def test_fitted_gnelm_and_trf_order_the_sentences_by_enumeration():
    energy = fitted_features()
    space = every_sentence()
    log_z = exact_log_z(energy, V, L)
    gnelm = GNELM(energy, V, L, log_z=float(torch.logsumexp(log_z, 0)))
    trf = TRF.from_corpus(energy, Sequences.from_lists(TRAIN), V, log_z=log_z.float())
    alm = smoothed_bigram(1e-2)
    rows = space.tolist()
    for model in (gnelm, trf, alm):
        lp = torch.tensor(log_probs(model, rows), dtype=torch.float64)
        if model is not alm:  # exactly normalised over the 258 sentences (the ALM also gives longer ones mass)
            assert float(torch.logsumexp(lp, 0)) == pytest.approx(0.0, abs=1e-5)
        ranked = [rows[i] for i in torch.argsort(lp, descending=True, stable=True).tolist()]
        assert sorted(ranked[:3]) == sorted(TRAIN)  # the training sentences come first
        good, bad = float(lp[rows.index(GOOD)]), float(lp[rows.index(BAD)])
        if model is alm:
            assert good == pytest.approx(bad, abs=1e-12)  # label bias: a tie
        else:
            assert good - bad > 0.5  # the globally normalised models order them
            assert ranked.index(GOOD) < ranked.index(BAD)
