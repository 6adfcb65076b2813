"""Sampling from the neural LMs: draws follow the exact law (or the exact restricted law under
temperature, top-k and top-p, whose support is checked), prefixes continue through the carried
state, and the length limit never truncates silently.

Statistical checks compare the histogram of ``S`` independent draws over the sentences of length
<= 3 plus one cell for all longer ones with the exact cell probabilities (``log_prob`` for the
sentences, one minus their sum for the last cell). The bound is ``tv_threshold`` of
``_discrete_checks``: ``E[TV] <= 1/2 sum_c sqrt(p_c (1 - p_c) / S)`` plus McDiarmid's deviation at
``delta = 1e-4``, so a correct sampler fails with probability below 1e-4 (a z of about 3.7).
"""

from __future__ import annotations

import itertools
import math

import pytest
import torch
from _discrete_checks import tv_distance, tv_threshold

from ebms.models.lm import LSTMLM, AutoregressiveLM, TransformerLM, filter_logits
from ebms.sequences import Sequences

V, SHORT, DRAWS = 3, 3, 6000
SHORT_SENTENCES = [list(s) for n in range(SHORT + 1) for s in itertools.product(range(1, V), repeat=n)]


def make(name: str, v: int = V, seed: int = 0) -> AutoregressiveLM:
    torch.manual_seed(seed)
    if name == "lstm":
        lm: AutoregressiveLM = LSTMLM(v, embedding_dim=4, hidden_size=5, num_layers=1)
    else:
        lm = TransformerLM(v, d_model=8, num_heads=2, num_layers=1, dim_feedforward=8, max_length=40)
    with torch.no_grad():
        lm.decoder.weight.mul_(20.0)
        lm.decoder.bias.copy_(torch.randn(v, generator=torch.Generator().manual_seed(seed)))
        lm.decoder.bias[0] = -0.5
    return lm.double().eval().requires_grad_(False)


def cell_probs(lm: AutoregressiveLM, **law) -> torch.Tensor:
    """Exact probabilities of the short sentences (enumeration order) and of "longer than SHORT"."""
    p = lm.log_prob(Sequences.from_lists(SHORT_SENTENCES), **law).exp()
    return torch.cat([p, (1 - p.sum()).clamp(min=0).reshape(1)])


def cell_histogram(draws: Sequences) -> torch.Tensor:
    index = {tuple(s): i for i, s in enumerate(SHORT_SENTENCES)}
    cells = [index.get(tuple(s), len(SHORT_SENTENCES)) for s in draws.tolist()]
    return torch.bincount(torch.tensor(cells), minlength=len(SHORT_SENTENCES) + 1).double() / len(cells)


@pytest.mark.parametrize("name", ["lstm", "transformer"])
def test_draws_follow_the_exact_law_and_a_tempered_law_is_rejected(name):
    lm = make(name)
    draws = lm.sample(DRAWS, torch.Generator().manual_seed(1), max_length=40, truncate=True)
    p, emp = cell_probs(lm), cell_histogram(draws)
    assert float(p[-1]) > 0.02  # the "longer" cell is exercised
    assert tv_distance(emp, p) < tv_threshold(p, DRAWS)
    tempered = cell_probs(lm, temperature=2.0)  # negative control: the bound has power against a wrong law
    assert tv_distance(emp, tempered) > tv_threshold(tempered, DRAWS)


@pytest.mark.parametrize(("name", "law"), [
    ("lstm", {"top_k": 2}), ("transformer", {"top_k": 2}),
    ("lstm", {"top_p": 0.8}), ("transformer", {"top_p": 0.9}), ("transformer", {"top_p": 0.8, "temperature": 1.5}),
    ("lstm", {"temperature": 0.5, "top_k": 2, "top_p": 0.9}),
])
def test_restricted_draws_stay_in_the_support_and_follow_the_restricted_law(name, law):
    lm = make(name)
    # the restricted law is normalised: short sentences plus the mass of longer ones (enumerated) sum to 1
    starts = Sequences(torch.tensor(list(itertools.product(range(1, V), repeat=SHORT + 1))))
    empty = Sequences(torch.zeros(starts.batch_size, 0, dtype=torch.long), torch.zeros(starts.batch_size, dtype=torch.long))
    short = lm.log_prob(Sequences.from_lists(SHORT_SENTENCES), **law).exp().sum()
    longer = lm.continuation_log_prob(empty, starts, end=False, **law).exp().sum()
    assert float(short + longer) == pytest.approx(1.0, abs=1e-12)
    p = cell_probs(lm, **law)
    assert int((p[:-1] == 0).sum()) > 0 and float(p.max()) < 0.8  # sentences removed, the rest still random
    draws = lm.sample(DRAWS, torch.Generator().manual_seed(2), max_length=40, truncate=True, **law)
    # no draw outside the support (draws cut at 40 tokens: their start, without </s>)
    empty = Sequences(torch.zeros(DRAWS, 0, dtype=torch.long), torch.zeros(DRAWS, dtype=torch.long))
    assert bool(torch.isfinite(lm.continuation_log_prob(empty, draws, end=False, **law)).all())
    ended = draws[draws.lengths < 40]
    assert ended.batch_size > DRAWS // 10 and bool(torch.isfinite(lm.log_prob(ended, **law)).all())
    emp = cell_histogram(draws)
    assert float(emp[p == 0].sum()) == 0.0
    assert tv_distance(emp, p) < tv_threshold(p, DRAWS)


def test_filter_logits_keeps_exactly_the_stated_support():
    probs = torch.tensor([0.15, 0.5, 0.05, 0.3], dtype=torch.float64)  # sorted: 1 (0.5), 3 (0.3), 0 (0.15), 2
    logits = probs.log()
    kept = lambda **kw: torch.isfinite(filter_logits(logits, **kw)).nonzero().flatten().tolist()  # noqa: E731
    assert kept(top_k=1) == [1] and kept(top_k=2) == [1, 3] and kept(top_k=9) == [0, 1, 2, 3]
    assert kept(top_p=0.4) == [1]  # mass before outcome 3 is 0.5 >= 0.4
    assert kept(top_p=0.7) == [1, 3] and kept(top_p=0.85) == [0, 1, 3] and kept(top_p=1.0) == [0, 1, 2, 3]
    assert kept(top_k=3, top_p=0.75) == [1, 3]  # top-p on the renormalised top-k law: 0.5/0.95 + 0.3/0.95 > 0.75
    ties = torch.tensor([1.0, 1.0, 0.0])
    assert torch.isfinite(filter_logits(ties, top_k=1)).tolist() == [True, True, False]  # ties at the k-th kept
    torch.testing.assert_close(filter_logits(logits, temperature=0.5), logits / 0.5)
    restricted = filter_logits(logits, top_p=0.7).softmax(-1)
    torch.testing.assert_close(restricted, torch.tensor([0.0, 0.625, 0.0, 0.375], dtype=torch.float64))


@pytest.mark.parametrize("name", ["lstm", "transformer"])
def test_greedy_continuations_of_ragged_prefixes_match_a_naive_loop(name):
    lm = make(name, v=6, seed=3)
    prefixes = [[1, 2, 3], [], [5], [4, 4, 1, 2, 5]]
    got = lm.sample(4, torch.Generator().manual_seed(0), prefix=Sequences.from_lists(prefixes), top_k=1,
                    max_length=6, truncate=True)
    for i, c in enumerate(prefixes):
        history, want = [0, *c], []
        for _ in range(6):
            nxt = int(lm(torch.tensor([history]))[0][0, -1].argmax())
            if nxt == 0:
                break
            want.append(nxt)
            history.append(nxt)
        assert got.tolist()[i] == want


@pytest.mark.parametrize("name", ["lstm", "transformer"])
def test_the_generator_alone_decides_the_draws(name):
    lm = make(name)
    a = lm.sample(50, torch.Generator().manual_seed(5), max_length=40, truncate=True)
    torch.manual_seed(123)
    b = lm.sample(50, torch.Generator().manual_seed(5), max_length=40, truncate=True)
    assert a.equal(b) and torch.equal(a.lengths, b.lengths)
    c = lm.float().sample(50, torch.Generator().manual_seed(6), max_length=40, truncate=True)
    assert c.batch_size == 50 and int(c.tokens.max()) < V


@pytest.mark.parametrize("name", ["lstm", "transformer"])
@pytest.mark.parametrize("truncate", [False, True])
def test_draws_per_prefix_equal_draws_from_repeated_prefixes(name, truncate):
    # encoding each prefix once and repeating its state is the same law and the same random stream
    lm = make(name)
    c = Sequences.from_lists([[1, 2], [], [2, 2, 1]])
    rep = Sequences(c.tokens.repeat_interleave(4, 0), c.lengths.repeat_interleave(4))
    limit = 3 if truncate else 30
    a = lm.sample(12, torch.Generator().manual_seed(7), prefix=rep, max_length=limit, truncate=truncate)
    b = lm.sample(12, torch.Generator().manual_seed(7), prefix=c, per_prefix=4, max_length=limit, truncate=truncate)
    assert a.equal(b) and torch.equal(a.lengths, b.lengths)


def test_unfinished_draws_raise_unless_truncated():
    lm = make("lstm")
    with torch.no_grad():
        lm.decoder.bias[0] = -1e4  # </s> never drawn
    with pytest.raises(ValueError, match=r"^max_length: 3 of 3 draws had not ended after 4 tokens; raise max_length, "
                                         r"or pass truncate=True to keep them cut"):
        lm.sample(3, torch.Generator().manual_seed(0), max_length=4)
    cut = lm.sample(3, torch.Generator().manual_seed(0), max_length=4, truncate=True)
    assert cut.lengths.tolist() == [4, 4, 4] and bool((cut.tokens > 0).all())


def test_transformer_draws_fit_its_positions():
    lm = make("transformer")
    with torch.no_grad():
        lm.decoder.bias[0] = -1e4
    drawn = lm.sample(2, torch.Generator().manual_seed(0), prefix=Sequences.from_lists([[1] * 5, [2]]), truncate=True)
    assert drawn.lengths.tolist() == [35, 35]  # default max_length: 40 positions less the longest prefix
    with pytest.raises(ValueError, match=r"^max_length: a prefix of 5 tokens plus 36 drawn tokens exceeds the "
                                         r"model's max_length=40"):
        lm.sample(2, prefix=Sequences.from_lists([[1] * 5, [2]]), max_length=36)


@pytest.mark.parametrize(("kw", "error", "message"), [
    ({"temperature": 0.0}, ValueError, r"^temperature: expected a finite number > 0; got 0.0"),
    ({"temperature": math.inf}, ValueError, r"^temperature: expected a finite number > 0; got inf"),
    ({"top_k": 0}, ValueError, r"^top_k: expected an int >= 1; got 0"),
    ({"top_k": 1.5}, TypeError, r"^top_k: expected an int; got 1.5"),
    ({"top_p": 0.0}, ValueError, r"^top_p: expected a number in \(0, 1\] or None; got 0.0"),
    ({"top_p": 1.5}, ValueError, r"^top_p: expected a number in \(0, 1\] or None; got 1.5"),
    ({"top_p": "x"}, TypeError, r"^top_p: expected a number in \(0, 1\] or None; got 'x'"),
    ({"max_length": -1}, ValueError, r"^max_length: expected an int >= 0; got -1"),
    ({"prefix": Sequences.from_lists([[1]])}, ValueError, r"^prefix: expected n=2 prefixes \(one per draw\); got 1"),
    ({"prefix": Sequences.from_lists([[1], [0]])}, ValueError, r"^prefix: expected token ids in \[1, 2\]"),
    ({"prefix": Sequences.from_lists([[1], [2]]), "per_prefix": 2}, ValueError,
     r"^prefix: expected n / per_prefix = 2 / 2 prefixes \(per_prefix draws each\); got 2"),
    ({"per_prefix": 2}, ValueError, r"^per_prefix: 2 draws per prefix needs prefix=; got no prefix"),
    ({"per_prefix": 0}, ValueError, r"^per_prefix: expected an int >= 1; got 0"),
])
def test_bad_sampling_settings_are_named(kw, error, message):
    lm = make("lstm")
    with pytest.raises(error, match=message):
        lm.sample(2, torch.Generator().manual_seed(0), **kw)
    if not {"prefix", "max_length", "per_prefix"} & kw.keys():
        with pytest.raises(error, match=message):
            lm.log_prob(Sequences.from_lists([[1]]), **kw)


def test_sample_count_is_checked():
    with pytest.raises(ValueError, match=r"^n: expected an int >= 0; got -1"):
        make("lstm").sample(-1)
