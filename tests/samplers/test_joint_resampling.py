"""Algorithm 1 (top-k joint sampling) and the token-level Eq. 5 sampler against exact laws by enumeration.

The residual model is a stand-in with the ``ResidualLM`` interface: a tiny random LSTM base
(V = 4: ``</s>`` and tokens 1..3) and a hand-written energy of the tokens; horizon ``K`` = 3
(or 2 for the token-level sampler), so the horizon law has 1 + 3 + 9 (+ 27) continuations.
"""

from __future__ import annotations

import itertools
import math

import pytest
import torch
from _exact_refs import chi_square_tail
from _residual_standin import ResidualStandIn as StandIn

from ebms.models.lm import LSTMLM
from ebms.samplers.joint_resampling import (
    join_rows,
    repeat_rows,
    resample,
    token_level_joint_sample,
    top_k_joint_sample,
)
from ebms.sequences import Sequences

V = 4


def enumerate_horizon(K: int) -> list[tuple[int, ...]]:
    """Every continuation of the horizon law: lengths 0..K-1 (ended) and K (cut)."""
    return [w for k in range(K + 1) for w in itertools.product(range(1, V), repeat=k)]


def exact_joint(model: StandIn, prefix: list[int]) -> tuple[list[tuple[int, ...]], torch.Tensor, torch.Tensor]:
    """(continuations, base log-probs, joint log-probs) over the enumeration, float64."""
    words = enumerate_horizon(model.horizon)
    x = Sequences.from_lists(words)
    c = Sequences.from_lists([prefix] * len(words))
    with torch.no_grad():
        base = model.base_log_prob(c, x).double()
        joint = base - model.energy(c, x).double()
    assert abs(float(torch.logsumexp(base, 0))) < 1e-5  # the horizon law is a law
    return words, base, joint - torch.logsumexp(joint, 0)


def chi_square_p(words, draws: Sequences, log_p: torch.Tensor) -> float:
    """Pearson goodness-of-fit p-value; cells with expected count < 5 pooled into one."""
    index = {w: i for i, w in enumerate(words)}
    counts = torch.zeros(len(words), dtype=torch.float64)
    for w in draws.tolist():
        counts[index[tuple(w)]] += 1
    expected = draws.batch_size * log_p.exp()
    small = expected < 5
    obs = torch.cat([counts[~small], counts[small].sum().view(1)])
    exp = torch.cat([expected[~small], expected[small].sum().view(1)])
    keep = exp > 0
    stat = float(((obs[keep] - exp[keep]) ** 2 / exp[keep]).sum())
    dof = int(keep.sum()) - 1
    return chi_square_tail(stat, dof)


@pytest.fixture(scope="module")
def model() -> StandIn:
    return StandIn(horizon=3)


def test_resampled_law_converges_to_the_exact_joint_law(model):
    words, base, joint = exact_joint(model, [2, 1])
    R = 3000
    prefix = Sequences.from_lists([[2, 1]] * R)
    g = torch.Generator().manual_seed(0)
    many = top_k_joint_sample(model, prefix, 128, generator=g, batch_size=1 << 17)
    one = top_k_joint_sample(model, prefix, 1, generator=g)
    # Chi-square goodness of fit at p > 1e-3 (false-alarm rate 0.1% for exact draws; the resampling
    # bias at n = 128 is O(var(w) / n), far below what 3000 draws resolve).
    assert chi_square_p(words, many.continuations, joint) > 1e-3
    # Negative control: n = 1 returns base draws, which this test must reject (the base is far from the joint).
    assert chi_square_p(words, one.continuations, joint) < 1e-6
    assert chi_square_p(words, one.continuations, base) > 1e-3


def test_top_k_draws_stay_in_the_top_k_support(model):
    g = torch.Generator().manual_seed(1)
    prefix = Sequences.from_lists([[1], [3, 3], []] * 40)
    out = top_k_joint_sample(model, prefix, 8, top_k=2, generator=g)
    for x, c in ((out.continuations, prefix), (out.draws, repeat_rows(prefix, 8))):
        per = model.base.continuation_token_log_probs(c, x, top_k=2)
        steps = torch.arange(per.shape[1]) < x.lengths.unsqueeze(1)
        steps |= (torch.arange(per.shape[1]) == x.lengths.unsqueeze(1)) & (x.lengths < 3).unsqueeze(1)
        assert bool(torch.isfinite(per[steps]).all())
    picked = out.draws[torch.arange(prefix.batch_size) * 8 + out.index]
    assert picked.equal(out.continuations)


def test_ess_lies_between_one_and_n(model):
    g = torch.Generator().manual_seed(2)
    out = top_k_joint_sample(model, Sequences.from_lists([[1, 2]] * 50), 16, generator=g)
    assert out.log_weights.shape == (50, 16) and out.log_weights.dtype == torch.float64
    assert bool((out.ess >= 1 - 1e-9).all()) and bool((out.ess <= 16 + 1e-9).all())
    assert float(out.ess.min()) < 16  # the energy is not constant


def test_constant_energy_gives_ess_n_and_base_draws():
    flat = StandIn(scale=0.0)
    out = top_k_joint_sample(flat, Sequences.from_lists([[1]] * 5), 7, generator=torch.Generator().manual_seed(3))
    torch.testing.assert_close(out.ess, torch.full((5,), 7.0, dtype=torch.float64))


def test_resample_frequencies_match_the_softmax():
    lw = torch.tensor([[0.0, 1.0, -math.inf, -0.5]]).expand(20000, 4)
    idx = resample(lw, torch.Generator().manual_seed(4))
    assert not bool((idx == 2).any())
    p = torch.softmax(torch.tensor([0.0, 1.0, -0.5], dtype=torch.float64), 0)
    counts = torch.bincount(idx, minlength=4)[[0, 1, 3]].double()
    stat = float(((counts - 20000 * p) ** 2 / (20000 * p)).sum())
    # chi-square with 2 degrees of freedom: survival exp(-stat / 2); reject below 1e-3
    assert math.exp(-stat / 2) > 1e-3


@pytest.mark.parametrize(("lw", "err", "msg"), [
    (torch.tensor([[0.0, float("nan")]]), ValueError, "NaN/\\+inf"),
    (torch.tensor([[0.0, float("inf")]]), ValueError, "NaN/\\+inf"),
    (torch.tensor([[-math.inf, -math.inf], [0.0, 1.0]]), ValueError, "1 rows are all -inf"),
    (torch.zeros(3, 0), ValueError, "n >= 1"),
    (torch.zeros(3, 2, dtype=torch.long), TypeError, "floating-point"),
])
def test_resample_rejects_bad_weights(lw, err, msg):
    with pytest.raises(err, match=f"log_weights: .*{msg}"):
        resample(lw)


def test_wrong_row_count_from_sample_base_is_an_error(model):
    class Short(StandIn):
        def sample_base(self, prefix, n, **kw):
            return super().sample_base(prefix, n - 1, **kw)

    with pytest.raises(ValueError, match=r"model.sample_base\(prefix, 4\): expected Sequences of 8 rows"):
        top_k_joint_sample(Short(), Sequences.from_lists([[1], [2]]), 4, generator=None)


def test_join_and_repeat_rows_by_hand():
    a, b = Sequences.from_lists([[1, 2], [], [3]]), Sequences.from_lists([[3], [1, 1], []])
    assert join_rows(a, b).tolist() == [[1, 2, 3], [1, 1], [3]]
    assert repeat_rows(a, 2).tolist() == [[1, 2], [1, 2], [], [], [3], [3]]
    with pytest.raises(ValueError, match="join_rows: expected batches of equal size; got 3 and 1"):
        join_rows(a, b[0])


@pytest.fixture(scope="module")
def short() -> StandIn:
    return StandIn(horizon=2, seed=5)


def test_token_level_with_every_candidate_matches_the_joint_law(short):
    words, _, joint = exact_joint(short, [3])
    R = 1500
    g = torch.Generator().manual_seed(6)
    out = token_level_joint_sample(short, Sequences.from_lists([[3]] * R), candidates=V, completions=64,
                                   generator=g, batch_size=1 << 16)
    # p > 1e-3 as above; the finite-M ratio bias is O(1/M) with M = 64 completions
    assert chi_square_p(words, out.continuations, joint) > 1e-3


def test_token_level_last_step_probability_is_exact(short):
    words, _, joint = exact_joint(short, [1, 2])
    g = torch.Generator().manual_seed(7)
    out = token_level_joint_sample(short, Sequences.from_lists([[1, 2]] * 30), candidates=V, completions=4,
                                   generator=g)
    lp = dict(zip(words, joint.tolist()))
    for w, step in zip(out.continuations.tolist(), out.step_log_probs.tolist()):
        if len(w) == 2:  # at the horizon no completion is sampled: the step law is enumerated exactly
            norm = math.log(sum(math.exp(lp[(w[0],) + t]) for t in [(), (1,), (2,), (3,)]))
            assert step[1] == pytest.approx(lp[tuple(w)] - norm, abs=1e-6)  # float32 base and energy


def test_one_candidate_is_greedy_decoding_of_the_base(short):
    prefix = Sequences.from_lists([[1], [2, 3], []])
    out = token_level_joint_sample(short, prefix, candidates=1, completions=3, generator=torch.Generator())
    for c, w in zip(prefix.tolist(), out.continuations.tolist()):
        greedy: list[int] = []
        for _ in range(2):
            logits = short.base.logits(Sequences.from_lists([c + greedy]))[0, len(c) + len(greedy)]
            v = int(logits.argmax())
            if v == 0:
                break
            greedy.append(v)
        assert w == greedy
    assert bool((out.step_log_probs == 0).all())


def test_token_level_without_horizon_stops_at_end():
    free = StandIn(horizon=None, seed=8)
    out = token_level_joint_sample(free, Sequences.from_lists([[1]] * 4), candidates=2, completions=2,
                                   generator=torch.Generator().manual_seed(8), max_length=64)
    assert out.continuations.batch_size == 4
    assert bool((out.step_log_probs <= 0).all())
    with pytest.raises(ValueError, match="candidates: expected at most the vocabulary size 4; got 5"):
        token_level_joint_sample(free, Sequences.from_lists([[1]]), candidates=5, completions=2, generator=None)


class TableEnergy(torch.nn.Module):
    """The stand-in's energy as an ``nn.Module`` (what ``ResidualLM`` takes)."""

    def __init__(self, seed: int) -> None:
        super().__init__()
        self.inner = StandIn(seed=seed)

    def forward(self, prefix: Sequences, x: Sequences) -> torch.Tensor:
        return self.inner.energy(prefix, x)


def test_real_residual_lm_with_an_ngram_base_samples_the_joint_law():
    """No ``logits`` on an n-gram base: the token-level sampler scores outcomes with ``base_log_prob``."""
    from ebms.distributions import NGram
    from ebms.models.residual_lm import ResidualLM, enumerate_continuations, exact_joint_log_probs

    table = torch.randn(V, V, generator=torch.Generator().manual_seed(12), dtype=torch.float64).mul(1.5)
    m = ResidualLM(NGram(V, 2, table.log_softmax(-1)), TableEnergy(13), horizon=2).eval()
    words = [tuple(w) for w in enumerate_continuations(V, 2).tolist()]
    joint = exact_joint_log_probs(m, Sequences.from_lists([[1]]))[0]
    R = 1500
    prefix = Sequences.from_lists([[1]] * R)
    g = torch.Generator().manual_seed(14)
    token = token_level_joint_sample(m, prefix, candidates=V, completions=64, generator=g, batch_size=1 << 16)
    joint_draws = top_k_joint_sample(m, prefix, 128, generator=g, batch_size=1 << 16)
    # p > 1e-3 for each, as in the tests above (finite-M and finite-n biases are O(1/64), O(1/128))
    assert chi_square_p(words, token.continuations, joint) > 1e-3
    assert chi_square_p(words, joint_draws.continuations, joint) > 1e-3


class NoLogits:
    """An LM view without ``logits`` (as an n-gram base): scores and draws only."""

    def __init__(self, lm: LSTMLM) -> None:
        self.lm, self.vocab_size = lm, lm.vocab_size

    def continuation_token_log_probs(self, *args, **kwargs):
        return self.lm.continuation_token_log_probs(*args, **kwargs)

    def sample(self, *args, **kwargs):
        return self.lm.sample(*args, **kwargs)


@pytest.mark.parametrize("horizon", [1, 2, None])
def test_next_token_law_without_logits_equals_the_logits_path(horizon):
    fast, slow = StandIn(horizon=horizon, seed=5), StandIn(horizon=horizon, seed=5)
    lm = slow.base
    del slow.base
    slow.base = NoLogits(lm)
    prefix = Sequences.from_lists([[1], [2, 3], [], [3]] * 5)
    a, b = (token_level_joint_sample(m, prefix, candidates=3, completions=4, generator=torch.Generator().manual_seed(15),
                                     max_length=64) for m in (fast, slow))
    assert a.continuations.equal(b.continuations)
    torch.testing.assert_close(a.step_log_probs, b.step_log_probs, atol=1e-5, rtol=0)  # float32 base
