"""The label-bias toy of the monograph (section 4.1.2, Table 4.1, Eq. 4.7-4.9).

Training sentences: "Tom likes tea", "John likes tea", "Alice like tea"; test sentences
"Alice likes tea" and "Tom like tea". A smoothed bigram model (locally normalised) gives both
test sentences the same probability, 1/3 * eps; a globally normalised chain with the same bigram
features (a linear-chain CRF with no input: start, transition and end potentials), fitted by
maximum likelihood, prefers "Alice likes tea", the correct verb form being more frequent.
"""

from __future__ import annotations

import math

import torch

from ebms.structured import LinearChainCRF

WORDS = ["Tom", "John", "Alice", "likes", "like", "tea"]
IDX = {w: i for i, w in enumerate(WORDS)}
TRAIN = [["Tom", "likes", "tea"], ["John", "likes", "tea"], ["Alice", "like", "tea"]]
TEST = (["Alice", "likes", "tea"], ["Tom", "like", "tea"])


def _ids(sentences):
    return torch.tensor([[IDX[w] for w in s] for s in sentences])


def test_a_smoothed_bigram_model_scores_both_test_sentences_the_same():
    eps = 1e-3
    counts: dict[tuple[str, str], int] = {}
    for s in TRAIN:
        for a, b in zip(["<s>", *s], [*s, "</s>"]):
            counts[(a, b)] = counts.get((a, b), 0) + 1

    def log_p(sentence):
        total = 0.0
        for a, b in zip(["<s>", *sentence], [*sentence, "</s>"]):
            seen = {k: c for k, c in counts.items() if k[0] == a}
            n = sum(seen.values())
            total += math.log(seen[(a, b)] / n) if (a, b) in seen else math.log(eps)
        return total

    a, b = (log_p(s) for s in TEST)
    assert math.isclose(a, b) and math.isclose(a, math.log(eps / 3))


def test_a_globally_normalised_chain_orders_the_test_sentences_correctly():
    torch.manual_seed(0)
    C = len(WORDS)
    start = torch.zeros(C, requires_grad=True)
    trans = torch.zeros(C, C, requires_grad=True)
    end = torch.zeros(C, requires_grad=True)
    emissions = torch.zeros(3, 3, C)  # no input: the potentials are the bigram features' weights
    y = _ids(TRAIN)
    opt = torch.optim.Adam([start, trans, end], lr=0.1)
    for _ in range(300):  # maximum likelihood with a small L2 penalty (the unpenalised MLE diverges)
        opt.zero_grad()
        crf = LinearChainCRF(emissions, trans, start=start, end=end)
        loss = -crf.log_prob(y).mean() + 1e-2 * (start.square().sum() + trans.square().sum() + end.square().sum())
        loss.backward()
        opt.step()
    with torch.no_grad():
        crf = LinearChainCRF(torch.zeros(2, 3, C), trans, start=start, end=end)
        good, bad = crf.log_prob(_ids(TEST))
    assert good > bad + 0.1, f"log P(Alice likes tea) = {good:.3f}, log P(Tom like tea) = {bad:.3f}"
