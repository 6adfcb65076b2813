"""ResidualLM: the horizon law of the frozen base, the joint model by exact enumeration, n-per-prefix draws."""

from __future__ import annotations

import math

import pytest
import torch
from torch import nn

from ebms.distributions import NGram
from ebms.models import LSTMLM
from ebms.models.residual_lm import (
    NGramContinuations,
    ResidualLM,
    enumerate_continuations,
    exact_joint_log_probs,
    exact_log_z,
)
from ebms.nets.text_energy import TextEnergy
from ebms.sequences import Sequences

V = 4
PREFIXES = Sequences.from_lists([[1, 2], [3], []])


def ngram(order: int = 2, seed: int = 0) -> NGram:
    g = torch.Generator().manual_seed(seed)
    return NGram(V, order, torch.randn((V,) * order, generator=g, dtype=torch.float64).log_softmax(-1))


def lstm() -> LSTMLM:
    torch.manual_seed(0)
    return LSTMLM(V, embedding_dim=6, hidden_size=6, num_layers=1).eval()


def random_energy() -> TextEnergy:
    torch.manual_seed(2)
    e = TextEnergy(V, kind="transformer", dim=8, layers=1, heads=2)
    nn.init.normal_(e.head.weight)
    nn.init.normal_(e.head.bias)
    return e


def rows(prefix: Sequences, n: int) -> Sequences:
    return Sequences(prefix.tokens.repeat_interleave(n, 0), prefix.lengths.repeat_interleave(n))


class ConstantEnergy(nn.Module):
    def __init__(self, value: float) -> None:
        super().__init__()
        self.value = nn.Parameter(torch.tensor(value))

    def forward(self, prefix: Sequences, x: Sequences) -> torch.Tensor:
        return self.value.expand(x.batch_size)


def test_enumeration_lists_every_continuation_of_the_horizon_law_once():
    xs = enumerate_continuations(4, 2)
    assert xs.tolist() == [[], [1], [2], [3], [1, 1], [1, 2], [1, 3], [2, 1], [2, 2], [2, 3],
                           [3, 1], [3, 2], [3, 3]]
    assert enumerate_continuations(3, 3).batch_size == 1 + 2 + 4 + 8


@pytest.mark.parametrize("make_base", [lstm, lambda: ngram(3)], ids=["lstm", "ngram"])
@pytest.mark.parametrize("horizon", [1, 2, 3])
def test_the_horizon_law_sums_to_one_over_the_enumeration(make_base, horizon):
    m = ResidualLM(make_base(), ConstantEnergy(0.0), horizon=horizon)
    xs = enumerate_continuations(V, horizon)
    lp = m.base_log_prob(rows(PREFIXES, xs.batch_size),
                         Sequences(xs.tokens.repeat(3, 1), xs.lengths.repeat(3))).double().view(3, -1)
    tol = 1e-12 if isinstance(m.base, NGram) else 1e-5
    torch.testing.assert_close(lp.exp().sum(1), torch.ones(3, dtype=torch.float64), rtol=0, atol=tol)


@pytest.mark.parametrize("make_base", [lstm, lambda: ngram(3)], ids=["lstm", "ngram"])
def test_horizon_k_is_the_first_k_tokens_marginal_of_horizon_k_plus_one(make_base):
    base = make_base()
    short, long = ResidualLM(base, ConstantEnergy(0.0), horizon=2), ResidualLM(base, ConstantEnergy(0.0), horizon=3)
    c = PREFIXES[0]
    xs, ys = enumerate_continuations(V, 2), enumerate_continuations(V, 3)
    p_short = short.base_log_prob(rows(c, xs.batch_size), xs).double().exp()
    p_long = long.base_log_prob(rows(c, ys.batch_size), ys).double().exp()
    cut = [tuple(y[:2]) for y in ys.tolist()]
    ends = ys.lengths < 2
    for i, x in enumerate(xs.tolist()):
        if len(x) < 2:  # ended before the horizon: the same event under both laws
            mass = p_long[[j for j, y in enumerate(ys.tolist()) if y == x and bool(ends[j])]].sum()
        else:  # cut at 2: every longer continuation starting with x
            mass = p_long[[j for j, y in enumerate(cut) if y == tuple(x) and not bool(ends[j])]].sum()
        assert float(p_short[i]) == pytest.approx(float(mass), abs=1e-6)


@pytest.mark.parametrize("order", [1, 2, 3])
def test_an_ngram_base_scores_whole_sentences_as_ngram_log_prob(order):
    ng = ngram(order, seed=order)
    m = ResidualLM(ng, ConstantEnergy(0.0))
    x = Sequences.from_lists([[1, 2, 3, 1], [3], [], [2, 2]])
    empty = Sequences.from_lists([[]] * 4)
    torch.testing.assert_close(m.base_log_prob(empty, x), ng.log_prob(x), rtol=0, atol=1e-12)
    # chain rule: log p(c x) = log p(c, not ended) + log p(x | c)
    c, rest = Sequences.from_lists([[1, 2], [3], [], [2]]), Sequences.from_lists([[3, 1], [], [], [2]])
    law = NGramContinuations(ng)
    head = law.continuation_token_log_probs(empty, c)
    head = torch.where(torch.arange(head.shape[1]) < c.lengths.unsqueeze(1), head, 0.0).sum(1)
    torch.testing.assert_close(head + m.base_log_prob(c, rest), ng.log_prob(x), rtol=0, atol=1e-12)


def test_an_lstm_base_without_horizon_matches_its_continuation_log_prob():
    base = lstm()
    m = ResidualLM(base, ConstantEnergy(0.0))
    x = Sequences.from_lists([[1, 2], [3, 3, 1], []])
    torch.testing.assert_close(m.base_log_prob(PREFIXES, x), base.continuation_log_prob(PREFIXES, x))


def test_exact_log_z_is_zero_for_a_zero_energy_and_minus_the_constant_for_a_constant():
    for make_base in (lstm, ngram):
        base = make_base()
        z0 = exact_log_z(ResidualLM(base, ConstantEnergy(0.0), horizon=2), PREFIXES)
        assert z0.dtype == torch.float64 and z0.shape == (3,)
        torch.testing.assert_close(z0, torch.zeros(3, dtype=torch.float64), rtol=0, atol=1e-6)
        z = exact_log_z(ResidualLM(base, ConstantEnergy(1.5), horizon=2), PREFIXES)
        torch.testing.assert_close(z, torch.full((3,), -1.5, dtype=torch.float64), rtol=0, atol=1e-6)


def test_exact_joint_log_probs_normalise_and_reweight_the_base_by_exp_minus_energy():
    m = ResidualLM(ngram(2), random_energy(), horizon=2)
    joint = exact_joint_log_probs(m, PREFIXES)
    xs = enumerate_continuations(V, 2)
    assert joint.shape == (3, xs.batch_size)
    torch.testing.assert_close(joint.exp().sum(1), torch.ones(3, dtype=torch.float64), rtol=0, atol=1e-12)
    c, x = rows(PREFIXES, xs.batch_size), Sequences(xs.tokens.repeat(3, 1), xs.lengths.repeat(3))
    un = m.unnormalised_log_prob(c, x).double().view(3, -1)
    torch.testing.assert_close(joint, un - exact_log_z(m, PREFIXES).unsqueeze(1), rtol=0, atol=1e-6)
    assert not torch.allclose(joint, m.base_log_prob(c, x).view(3, -1))  # the energy does reweight
    torch.testing.assert_close(exact_joint_log_probs(m, PREFIXES, batch_size=7), joint, rtol=0, atol=1e-6)


def test_exact_log_z_is_differentiable_in_the_energy():
    m = ResidualLM(ngram(2), ConstantEnergy(0.3), horizon=2)
    exact_log_z(m, PREFIXES).sum().backward()
    assert float(m.energy_net.value.grad) == pytest.approx(-3.0)


@pytest.mark.parametrize("make_base", [lstm, ngram], ids=["lstm", "ngram"])
def test_sample_base_draws_n_per_prefix_from_each_prefix_horizon_law(make_base):
    from scipy.stats import chi2

    m = ResidualLM(make_base(), ConstantEnergy(0.0), horizon=2)
    n = 1500
    draws = m.sample_base(PREFIXES[:2], n, generator=torch.Generator().manual_seed(3))
    assert draws.batch_size == 2 * n and int(draws.lengths.max()) <= 2
    xs = enumerate_continuations(V, 2)
    key = {tuple(x): i for i, x in enumerate(xs.tolist())}
    for b in range(2):  # rows b n .. b n + n - 1 continue prefix b
        counts = torch.zeros(xs.batch_size, dtype=torch.float64)
        for x in draws[b * n:(b + 1) * n].tolist():
            counts[key[tuple(x)]] += 1
        p = m.base_log_prob(rows(PREFIXES[b], xs.batch_size), xs).double().exp()
        stat = float(((counts - n * p) ** 2 / (n * p)).sum())
        assert stat < chi2.ppf(1 - 1e-3, xs.batch_size - 1)  # p = 1e-3 per prefix


def test_sample_base_with_top_k_1_is_greedy_and_stays_frozen():
    m = ResidualLM(ngram(2), random_energy(), horizon=3)
    a = m.sample_base(PREFIXES, 5, generator=torch.Generator().manual_seed(0), top_k=1)
    b = m.sample_base(PREFIXES, 5, generator=torch.Generator().manual_seed(9), top_k=1)
    assert a.equal(b) and all(a[i * 5].equal(a[i * 5 + j]) for i in range(3) for j in range(5))


def test_the_base_is_frozen_and_stays_in_eval_mode():
    base = LSTMLM(V, embedding_dim=6, hidden_size=6, num_layers=1, dropout=0.5)
    m = ResidualLM(base, random_energy(), horizon=2).train()
    assert not base.training and m.energy_net.training
    assert all(not p.requires_grad for p in base.parameters())
    x = Sequences.from_lists([[1], [2, 3], []])
    m.unnormalised_log_prob(PREFIXES, x).sum().backward()
    assert all(p.grad is None for p in base.parameters())
    assert m.energy_net.head.weight.grad is not None
    torch.testing.assert_close(m.base_log_prob(PREFIXES, x), m.base_log_prob(PREFIXES, x))  # no dropout
    trainable = {n for n, p in m.named_parameters() if p.requires_grad}
    assert trainable and all(n.startswith("energy_net.") for n in trainable)
    assert {k.split(".")[0] for k in m.state_dict()} == {"base", "energy_net"}  # the base is stored once


def test_errors_name_the_argument():
    m = ResidualLM(ngram(2), ConstantEnergy(0.0), horizon=2)
    with pytest.raises(ValueError, match="^x: continuations have at most horizon=2 tokens; got one of 3"):
        m.base_log_prob(PREFIXES, Sequences.from_lists([[1, 1, 1], [], []]))
    with pytest.raises(ValueError, match=r"^prefix: expected one prefix per continuation \(2 rows\); got 3"):
        m.energy(PREFIXES, Sequences.from_lists([[1], [2]]))
    with pytest.raises(TypeError, match="^x: expected an ebms.sequences.Sequences; got list"):
        m.unnormalised_log_prob(PREFIXES, [[1]])
    with pytest.raises(TypeError, match="^base: expected an AutoregressiveLM"):
        ResidualLM(nn.Linear(2, 2), ConstantEnergy(0.0))
    with pytest.raises(TypeError, match="^energy: expected an nn.Module"):
        ResidualLM(ngram(2), lambda c, x: x.lengths.float())
    with pytest.raises(ValueError, match="^horizon: "):
        ResidualLM(ngram(2), ConstantEnergy(0.0), horizon=0)
    with pytest.raises(ValueError, match="^base: an NGram base must be a normalised sentence law"):
        ResidualLM(NGram.uniform(V, 2, end=False), ConstantEnergy(0.0))
    with pytest.raises(ValueError, match="^model: exact enumeration needs a finite horizon"):
        exact_log_z(ResidualLM(ngram(2), ConstantEnergy(0.0)), PREFIXES)
    with pytest.raises(ValueError, match="^batch_size: "):
        exact_log_z(m, PREFIXES, batch_size=0)
    with pytest.raises(TypeError, match="^prefix: expected an ebms.sequences.Sequences; got list"):
        exact_log_z(m, [[1]])
    with pytest.raises(ValueError, match="^horizon: .* exceed the enumeration limit 200000"):
        enumerate_continuations(50, 4)

    class Wide(nn.Module):
        def forward(self, c, x):
            return torch.zeros(x.batch_size, 1)

    with pytest.raises(ValueError, match=r"^energy\(prefix, x\): expected shape \(3,\); got \(3, 1\)"):
        ResidualLM(ngram(2), Wide()).energy(PREFIXES, Sequences.from_lists([[1], [2], []]))
    assert math.isfinite(float(m.base_log_prob(PREFIXES, Sequences.from_lists([[1], [2, 2], []])).sum()))


def test_ngram_continuations_errors_name_the_argument():
    law = NGramContinuations(ngram(2))
    with pytest.raises(TypeError, match="^prefix: expected an ebms.sequences.Sequences; got Tensor"):
        law.continuation_token_log_probs(torch.zeros(1, 1, dtype=torch.long), Sequences.from_lists([[1]]))
    with pytest.raises(ValueError, match=r"^x: expected token ids in \[1, 3\].*row 0 has 4 at position 1"):
        law.continuation_token_log_probs(PREFIXES[:1], Sequences.from_lists([[1, 4]]))
    with pytest.raises(ValueError, match=r"^prefix: expected one prefix per continuation \(1\); got 3"):
        law.continuation_token_log_probs(PREFIXES, Sequences.from_lists([[1]]))
    with pytest.raises(ValueError, match="^prefix: expected n=2 prefixes .*; got 3"):
        law.sample(2, prefix=PREFIXES)
    with pytest.raises(ValueError, match="^max_length: 3 of 3 draws had not ended after 0 tokens"):
        NGramContinuations(NGram(V, 1, torch.tensor([-50.0, 0.0, -50.0, -50.0], dtype=torch.float64)
                                 .log_softmax(-1))).sample(3, max_length=0)
    out = law.sample(4, generator=torch.Generator().manual_seed(0), max_length=50)  # no prefix: sentences
    assert out.batch_size == 4


@pytest.mark.parametrize("energy_vocab", [V - 1, V + 3])
def test_an_energy_over_another_vocabulary_is_refused(energy_vocab):
    # a larger energy vocabulary would silently score ids the base never draws; a smaller one fails late
    for base in (lstm(), ngram(2)):
        with pytest.raises(ValueError, match=rf"^energy: its vocab_size is {energy_vocab} but the base LM's is {V}; "
                                             rf".*\(build the energy with vocab_size={V}\)$"):
            ResidualLM(base, TextEnergy(energy_vocab, dim=4, layers=1), horizon=2)
    assert ResidualLM(lstm(), TextEnergy(V, dim=4, layers=1), horizon=2).vocab_size == V
