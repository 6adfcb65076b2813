"""ClassFactoredLSTMLM: the two-stage softmax against enumeration, its sampler against its law, gradients.

The tiny model has V = 7 (the boundary and words 1..6) in C = 4 classes: {1, 2, 3}, {4, 5}, {6} (a
class of one word) and an empty class 3; the boundary </s> is the extra class C. Statistical checks use
a fixed generator and Pearson's statistic against its chi-square quantile ``1 - 1e-4`` (z = 3.7
one-sided): a correct sampler fails with probability 1e-4 at its seed.
"""

from __future__ import annotations

import itertools

import pytest
import scipy.stats
import torch
import torch.nn.functional as F
from torch import nn

from ebms.models.lm import ClassFactoredLSTMLM
from ebms.sequences import Sequences

V = 7
CLASSES = torch.tensor([0, 0, 0, 0, 1, 1, 2])  # entry 0 (the boundary) is ignored
MEMBERS = {0: [1, 2, 3], 1: [4, 5], 2: [6], 3: []}


def tiny(seed: int = 0, layers: int = 1) -> ClassFactoredLSTMLM:
    torch.manual_seed(seed)
    lm = ClassFactoredLSTMLM(CLASSES, num_classes=4, embedding_dim=3, hidden_size=5, num_layers=layers)
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():  # a law far from uniform, with short sentences
        lm.class_decoder.weight.mul_(8.0)
        lm.word_decoder.weight.mul_(8.0)
        lm.class_decoder.bias.copy_(torch.randn(5, generator=g) * 0.5)
        lm.class_decoder.bias[4] = 0.6  # </s>
        lm.word_decoder.bias.copy_(torch.randn(V, generator=g))
    return lm.double().eval().requires_grad_(False)


def chi2_stat(counts: torch.Tensor, expected: torch.Tensor) -> float:
    assert float(expected.min()) >= 5  # every cell large enough for the chi-square approximation
    return float(((counts - expected) ** 2 / expected).sum())


def product_form(lm: ClassFactoredLSTMLM, h: torch.Tensor) -> torch.Tensor:
    """p(w | h) = p(c(w) | h) p(w | c(w), h) written out class by class, ``(N, V)``."""
    pc = torch.softmax(lm.class_decoder(h).masked_fill(torch.tensor([False, False, False, True, False]), -torch.inf), -1)
    out = torch.zeros(h.shape[0], V, dtype=h.dtype)
    out[:, 0] = pc[:, 4]
    for c, ws in MEMBERS.items():
        if ws:
            out[:, ws] = pc[:, c : c + 1] * torch.softmax(lm.word_decoder(h)[:, ws], -1)
    return out


def prefixes(longest: int) -> list[list[int]]:
    return [list(p) for m in range(longest + 1) for p in itertools.product(range(1, V), repeat=m)]


@pytest.mark.parametrize("layers", [1, 2])
def test_next_token_law_sums_to_one_and_equals_the_product_form_for_every_prefix(layers):
    lm = tiny(1, layers)
    ps = prefixes(2)
    x = Sequences.from_lists(ps)
    logp = lm.logits(x)[torch.arange(len(ps)), x.lengths]  # (N, V): the law after each whole prefix
    h = lm.lstm(lm.embedding(F.pad(x.tokens, (1, 0))))[0][torch.arange(len(ps)), x.lengths]
    torch.testing.assert_close(logp.exp().sum(-1), torch.ones(len(ps), dtype=torch.float64), rtol=0, atol=1e-12)
    torch.testing.assert_close(logp.exp(), product_form(lm, h), rtol=1e-10, atol=1e-12)
    assert bool((lm._class_log_probs(h)[:, 3] == -torch.inf).all())  # the empty class


def test_token_log_probs_equal_the_full_logits_at_every_real_position():
    lm = tiny(2)
    x = Sequences.from_lists([[1, 2, 3, 6], [], [6], [4, 5, 4], [2]])
    fast = lm.token_log_probs(x)
    targets = F.pad(x.tokens * x.mask(), (0, 1))
    full = lm.logits(x).gather(-1, targets.unsqueeze(-1)).squeeze(-1)
    keep = torch.arange(x.tokens.shape[1] + 1) <= x.lengths.unsqueeze(1)
    torch.testing.assert_close(fast, torch.where(keep, full, 0.0), rtol=1e-12, atol=1e-12)


def test_sentence_probabilities_sum_to_one_with_sentences_cut_at_a_length():
    lm, cap = tiny(3), 3
    ended = prefixes(cap - 1)  # sentences that stop before the cap (</s> included)
    cut = [list(p) for p in itertools.product(range(1, V), repeat=cap)]  # prefixes that reach the cap
    p_end = lm.log_prob(Sequences.from_lists(ended)).exp().sum()
    empty = Sequences.from_lists([[]] * len(cut))
    p_cut = lm.continuation_log_prob(empty, Sequences.from_lists(cut), end=False).exp().sum()
    torch.testing.assert_close(p_end + p_cut, torch.tensor(1.0, dtype=torch.float64), rtol=0, atol=1e-12)


def test_length_one_and_empty_sentences_score_as_their_conditionals():
    lm = tiny(4)
    x = Sequences.from_lists([[6], [], [2]])
    after = Sequences.from_lists([[], [6], [2]])
    law = lm.logits(after)[torch.arange(3), after.lengths]  # after <s>, after <s> 6, after <s> 2
    want = torch.stack([law[0, 6] + law[1, 0], law[0, 0], law[0, 2] + law[2, 0]])
    torch.testing.assert_close(lm.log_prob(x), want, rtol=1e-12, atol=1e-12)


def test_empty_batches_give_empty_results():
    lm = tiny(0)
    empty = Sequences(torch.zeros(0, 3, dtype=torch.long), torch.zeros(0, dtype=torch.long))
    assert lm.token_log_probs(empty).shape == (0, 4)
    assert lm.log_prob(empty).shape == (0,)
    y = lm.sample(0, torch.Generator().manual_seed(0))
    assert y.batch_size == 0


@pytest.mark.parametrize(("layers", "given"), [(1, False), (2, False), (2, True)])
def test_every_step_draws_from_the_teacher_forced_law_of_its_prefix(monkeypatch, layers, given):
    lm = tiny(5, layers)
    steps: list[tuple[torch.Tensor, torch.Tensor]] = []
    real = ClassFactoredLSTMLM._next

    def recorded(self, h, generator):
        w = real(self, h, generator)
        steps.append((self._full(h), w.clone()))  # the law this step drew from, and its draws
        return w

    monkeypatch.setattr(ClassFactoredLSTMLM, "_next", recorded)
    n, cap = 40, 4
    given_lists = [[6, 1], [], [4], [2]] * 5 if given else None  # with per_prefix=2: two draws per prefix
    extra = {"prefix": Sequences.from_lists(given_lists), "per_prefix": 2} if given_lists else {}
    draws = lm.sample(n, torch.Generator().manual_seed(6), max_length=cap, truncate=True, **extra)
    start = [list(given_lists[r // 2]) for r in range(n)] if given_lists else [[] for _ in range(n)]
    alive, prefix = list(range(n)), [list(p) for p in start]
    for law, w in steps:  # the running rows, in order; rows that drew </s> leave
        tf = lm.logits(Sequences.from_lists([prefix[r] for r in alive]))
        want = tf[torch.arange(len(alive)), torch.tensor([len(prefix[r]) for r in alive])]
        torch.testing.assert_close(law, want, rtol=1e-10, atol=1e-10)
        for r, tok in zip(list(alive), w.tolist()):
            if tok == 0:
                alive.remove(r)
            else:
                prefix[r].append(tok)
    drawn = [p[len(s0):] for p, s0 in zip(prefix, start)]
    assert draws.tolist() == drawn and max(map(len, drawn)) <= cap


def test_two_stage_draw_follows_the_next_token_law():
    lm, n = tiny(7), 20_000
    ps = [[], [4], [1, 6]]
    x = Sequences.from_lists(ps)
    h = lm._hidden(F.pad(x.tokens, (1, 0)))[0][torch.arange(3), x.lengths]  # (3, H)
    w = lm._next(h.repeat_interleave(n, 0), torch.Generator().manual_seed(8)).view(3, n)
    p = lm._full(h).exp()  # (3, V)
    counts = torch.stack([torch.bincount(row, minlength=V) for row in w]).double()
    stat = chi2_stat(counts, n * p)
    assert stat < scipy.stats.chi2.ppf(1 - 1e-4, df=3 * (V - 1)), stat


def test_cut_draws_follow_the_exact_law_of_their_first_tokens():
    lm, cap, n = tiny(9), 2, 20_000
    draws = lm.sample(n, torch.Generator().manual_seed(10), max_length=cap, truncate=True)
    ended = prefixes(cap - 1)
    cut = [list(s) for s in itertools.product(range(1, V), repeat=cap)]
    p_end = lm.log_prob(Sequences.from_lists(ended)).exp()
    p_cut = lm.continuation_log_prob(Sequences.from_lists([[]] * len(cut)), Sequences.from_lists(cut), end=False).exp()
    p = torch.cat([p_end, p_cut])
    index = {tuple(c): i for i, c in enumerate(ended + cut)}
    counts = torch.bincount(torch.tensor([index[tuple(s)] for s in draws.tolist()]), minlength=p.numel()).double()
    stat = chi2_stat(counts, n * p)
    assert stat < scipy.stats.chi2.ppf(1 - 1e-4, df=p.numel() - 1), stat


class _Scored(nn.Module):
    def __init__(self, lm: ClassFactoredLSTMLM, route: str) -> None:
        super().__init__()
        self.lm, self.route = lm, route

    def forward(self, x: Sequences) -> torch.Tensor:
        if self.route == "score":
            return self.lm.log_prob(x)
        targets = F.pad(x.tokens * x.mask(), (0, 1))
        per = self.lm.logits(x).gather(-1, targets.unsqueeze(-1)).squeeze(-1)  # the O(V) route
        keep = torch.arange(per.shape[1]) <= x.lengths.unsqueeze(1)
        return torch.where(keep, per, 0.0).sum(-1)


@pytest.mark.parametrize("route", ["score", "full"])
def test_gradients_pass_gradcheck_in_float64(route):
    lm = tiny(11, layers=2).requires_grad_(True)
    net = _Scored(lm, route)
    x = Sequences.from_lists([[1, 6, 4], [], [5], [3, 2]])
    names = [k for k, _ in net.named_parameters()]
    params = tuple(p.detach().clone().requires_grad_(True) for _, p in net.named_parameters())

    def f(*ps: torch.Tensor) -> torch.Tensor:
        return torch.func.functional_call(net, dict(zip(names, ps)), (x,))

    assert torch.autograd.gradcheck(f, params, eps=1e-6, atol=1e-7)


def test_scoring_and_full_routes_have_the_same_gradients():
    lm = tiny(12).requires_grad_(True)
    x = Sequences.from_lists([[1, 6, 4], [5], [3, 2, 2]])
    grads = []
    for route in ("score", "full"):
        lm.zero_grad()
        _Scored(lm, route)(x).sum().backward()
        grads.append([p.grad.clone() for p in lm.parameters()])
    for a, b in zip(*grads):
        torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-12)


def test_init_unigram_gives_the_unigram_law_when_the_weights_are_zero():
    lm = tiny(13)
    counts = torch.tensor([4.0, 10.0, 3.0, 1.0, 7.0, 2.0, 5.0])
    lm.init_unigram(counts)
    with torch.no_grad():
        lm.class_decoder.weight.zero_()
        lm.word_decoder.weight.zero_()
    law = lm.logits(Sequences.from_lists([[], [3, 1]]))[:, 0].exp()
    torch.testing.assert_close(law, (counts / counts.sum()).double().expand(2, V), rtol=1e-12, atol=1e-12)


def test_filtered_law_takes_the_full_logits():
    lm = tiny(14)
    x = Sequences.from_lists([[1, 6], [4]])
    got = lm.token_log_probs(x, temperature=0.5)
    targets = F.pad(x.tokens * x.mask(), (0, 1))
    want = (lm.logits(x) / 0.5).log_softmax(-1).gather(-1, targets.unsqueeze(-1)).squeeze(-1)
    keep = torch.arange(3) <= x.lengths.unsqueeze(1)
    torch.testing.assert_close(got, torch.where(keep, want, 0.0), rtol=1e-12, atol=1e-12)
    y = lm.sample(50, torch.Generator().manual_seed(15), max_length=3, truncate=True, top_k=2)
    assert bool(torch.isfinite(lm.log_prob(y, top_k=2)).all())


def test_dynamic_nce_trains_it_as_its_noise():
    from ebms.models.trf import TRF, DiscreteFeatures, feature_templates
    from ebms.objectives import DynamicNCE

    corpus = Sequences.from_lists([[1, 2], [4, 5, 6], [6], [2, 3, 1], [5, 4]])
    feats = DiscreteFeatures.fit(corpus, V, feature_templates(("w",), order=2))
    trf = TRF.from_corpus(feats, corpus, vocab_size=V)
    noise = tiny(16).float().requires_grad_(True)
    objective = DynamicNCE(noise, nu=1.0, alpha=0.5, sample_options={"max_length": 4, "truncate": True})
    out = objective(trf, corpus, generator=torch.Generator().manual_seed(17))
    out.loss.backward()
    assert torch.isfinite(out.loss)
    assert noise.word_decoder.weight.grad is not None and bool(noise.word_decoder.weight.grad.abs().sum() > 0)


@pytest.mark.parametrize(("classes", "kwargs", "error", "match"), [
    ([0, 0, 1], {}, TypeError, r"classes: expected a LongTensor \(V,\).*got list"),
    (torch.tensor([0.0, 1.0]), {}, TypeError, r"classes: expected a LongTensor \(V,\).*got torch.float32"),
    (torch.zeros(2, 2, dtype=torch.long), {}, TypeError, r"classes:.*shape \(2, 2\)"),
    (torch.tensor([0]), {}, ValueError, r"classes: expected V >= 2 entries.*got 1"),
    (torch.tensor([0, 0, 2]), {"num_classes": 2}, ValueError, r"classes: expected entries 1..2 in \[0, 2\).*max 2"),
    (torch.tensor([0, -1, 0]), {}, ValueError, r"classes: expected entries .*min -1"),
    (torch.tensor([0, 0, 1]), {"num_classes": 0}, ValueError, r"num_classes: expected an int >= 1; got 0"),
    (torch.tensor([0, 0, 1]), {"dropout": 1.0}, ValueError, r"dropout"),
])
def test_bad_arguments_messages_name_the_argument(classes, kwargs, error, match):
    with pytest.raises(error, match=match):
        ClassFactoredLSTMLM(classes, embedding_dim=2, hidden_size=2, num_layers=1, **kwargs)


def test_bad_counts_state_and_tokens_messages_name_the_argument():
    lm = tiny(0)
    with pytest.raises(ValueError, match=r"counts: expected a positive tensor \(7,\).*got \(3,\)"):
        lm.init_unigram(torch.ones(3))
    with pytest.raises(ValueError, match=r"counts: expected a positive tensor"):
        lm.init_unigram(torch.zeros(V))
    with pytest.raises(TypeError, match=r"state: expected an LSTMState or None; got tuple"):
        lm(torch.zeros(1, 2, dtype=torch.long), (torch.zeros(1), torch.zeros(1)))
    with pytest.raises(ValueError, match=r"x: expected token ids in \[1, 6\]"):
        lm.log_prob(Sequences.from_lists([[1, 7]]))
