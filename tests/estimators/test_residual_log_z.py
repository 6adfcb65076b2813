"""Theorem 2 log Z estimates, perplexity intervals and Eq. 5 step bounds against exact enumeration.

Stand-in residual model (the ``ResidualLM`` interface): a tiny random LSTM base over V = 4 ids
(``</s>`` and tokens 1..3) with horizon K = 3, so the horizon law has 1 + 3 + 9 + 27 = 40
continuations, and a hand-written energy of the tokens. Exact log Z, joint law and step
probabilities come from enumerating those 40 continuations.
"""

from __future__ import annotations

import itertools
import math

import pytest
import torch
from _residual_standin import ResidualStandIn

from ebms.estimators.residual_log_z import (
    exact_last_step,
    log_z_bounds,
    residual_log_z,
    residual_perplexity,
    stepwise_log_prob_bounds,
)
from ebms.sequences import Sequences

V, K = 4, 3


class StandIn(ResidualStandIn):
    """The shared stand-in with this module's defaults (horizon K, energy scale 1.5)."""

    def __init__(self, horizon: int | None = K, scale: float = 1.5, seed: int = 0) -> None:
        super().__init__(horizon, scale, seed)


WORDS = [w for k in range(K + 1) for w in itertools.product(range(1, V), repeat=k)]


def exact(model: StandIn, prefix: list[int]) -> tuple[torch.Tensor, torch.Tensor, float]:
    """(base log-probs, -E) over WORDS, and exact log Z, float64."""
    x, c = Sequences.from_lists(WORDS), Sequences.from_lists([prefix] * len(WORDS))
    with torch.no_grad():
        base, a = model.base_log_prob(c, x).double(), -model.energy(c, x).double()
    assert abs(float(torch.logsumexp(base, 0))) < 1e-5
    return base, a, float(torch.logsumexp(base + a, 0))


@pytest.fixture(scope="module")
def model() -> StandIn:
    return StandIn()


def test_leave_one_out_matches_a_brute_force_loop():
    a = torch.randn(3, 7, generator=torch.Generator().manual_seed(0), dtype=torch.float64) * 2
    b = log_z_bounds(a)
    for r in range(3):
        t_n = float(torch.logsumexp(a[r], 0)) - math.log(7)
        loo = [float(torch.logsumexp(torch.cat([a[r, :i], a[r, i + 1:]]), 0)) - math.log(6) for i in range(7)]
        t_bar = sum(loo) / 7
        assert float(b.lower[r]) == pytest.approx(t_n, abs=1e-12)
        assert float(b.upper[r]) == pytest.approx(13 * t_n - 12 * t_bar, abs=1e-12)
        assert float(b.jackknife[r]) == pytest.approx(7 * t_n - 6 * t_bar, abs=1e-12)
    torch.testing.assert_close(log_z_bounds(a.T, dim=0).upper, b.upper)


def test_one_dominating_weight_stays_exact():
    a = torch.tensor([[0.0, -1000.0, -1000.0, -1000.0]])
    b = log_z_bounds(a)
    # by hand: LSE = 0 (e^-1000 is below float64 resolution next to 1); T^(-0) = -1000; T^(-i) = -log 3
    t_bar = (-1000.0 - 3 * math.log(3)) / 4
    assert float(b.lower) == -math.log(4)
    assert float(b.upper) == pytest.approx(-7 * math.log(4) - 6 * t_bar, rel=1e-14)
    assert float(b.ess) == pytest.approx(1.0)
    # a naive log(exp(LSE) - exp(a_i)) would give log 0 = -inf for the leave-one-out of the big weight
    assert bool(torch.isfinite(b.upper).all())


def test_equal_weights_give_equal_bounds():
    b = log_z_bounds(torch.full((2, 5), -0.7))
    for t in (b.lower, b.upper, b.jackknife):
        torch.testing.assert_close(t, torch.full((2,), -0.7, dtype=torch.float64))
    torch.testing.assert_close(b.ess, torch.full((2,), 5.0, dtype=torch.float64))
    assert float(b.stderr.abs().max()) < 1e-12 and b.n == 5


def test_single_nonzero_weight_gives_an_infinite_upper():
    b = log_z_bounds(torch.tensor([0.0, -math.inf, -math.inf]))
    assert float(b.lower) == -math.log(3) and float(b.upper) == math.inf


@pytest.mark.parametrize(("a", "err", "msg"), [
    (torch.zeros(4, 1), ValueError, "n >= 2 draws along dim=-1; got shape \\(4, 1\\)"),
    (torch.tensor([0.0, float("nan")]), ValueError, "1 NaN/\\+inf entries"),
    (torch.tensor([[-math.inf, -math.inf], [0.0, 0.0]]), ValueError, "1 rows are all -inf"),
    (torch.zeros(2, 3, dtype=torch.long), TypeError, "floating-point"),
])
def test_log_z_bounds_rejects_bad_input(a, err, msg):
    with pytest.raises(err, match=f"neg_energies: .*{msg}"):
        log_z_bounds(a)


def test_theorem2_bounds_bracket_exact_log_z_and_tighten_with_n(model):
    base, a, log_z = exact(model, [2, 1])
    R = 20000
    idx = torch.multinomial(base.exp(), R * 64, replacement=True, generator=torch.Generator().manual_seed(1))
    draws = a[idx].view(R, 64)  # exact base draws, 64 per repeat
    w = (a - log_z).exp()
    cv2 = float((base.exp() * (w - 1) ** 2).sum())  # mu_2 / mu^2 of the weights
    gaps = []
    for n in (4, 16, 64):
        b = log_z_bounds(draws[:, :n])
        lo, up = float(b.lower.mean()), float(b.upper.mean())
        se_lo, se_up = float(b.lower.std()) / math.sqrt(R), float(b.upper.std()) / math.sqrt(R)
        # one-sided z = 4 each: E[lower] < log Z < E[upper] (false-alarm rate ~3e-5 per check)
        assert lo + 4 * se_lo < log_z < up - 4 * se_up
        gaps.append(up - lo)
        if n == 64:  # first-order bias -+ mu_2 / (2 mu^2 n) (App. A.2); the O(n^-2) rest is ~1e-4 here; z = 4
            assert abs(lo - (log_z - cv2 / (2 * n))) < 4 * se_lo
            assert abs(up - (log_z + cv2 / (2 * n))) < 4 * se_up
    assert gaps[0] > gaps[1] > gaps[2] > 0


def test_residual_log_z_brackets_each_prefix_on_average(model):
    prefixes = [[2, 1], [3]]
    R = 1000
    out = residual_log_z(model, Sequences.from_lists([p for p in prefixes for _ in range(R)]), 4,
                         generator=torch.Generator().manual_seed(2), batch_size=1 << 14)
    assert out.lower.shape == (2 * R,) and out.n == 4
    for k, p in enumerate(prefixes):
        log_z = exact(model, p)[2]
        lo, up = out.lower[k * R:(k + 1) * R], out.upper[k * R:(k + 1) * R]
        # z = 4 one-sided, as above (the bias at n = 4 is ~0.1 nats, the standard errors ~0.01)
        assert float(lo.mean()) + 4 * float(lo.std()) / math.sqrt(R) < log_z
        assert float(up.mean()) - 4 * float(up.std()) / math.sqrt(R) > log_z


def test_progress_bar_leaves_the_estimates_unchanged(model):
    c = Sequences.from_lists([[1], [2, 3]] * 30)
    a, b = (residual_log_z(model, c, 4, generator=torch.Generator().manual_seed(8), batch_size=8, progress=p)
            for p in (True, False))
    torch.testing.assert_close(a.lower, b.lower, rtol=0, atol=0)
    torch.testing.assert_close(a.upper, b.upper, rtol=0, atol=0)


def test_perplexity_interval_brackets_the_exact_perplexity(model):
    g = torch.Generator().manual_seed(3)
    prefixes = [[2, 1], [3], [1, 1, 2]]
    conts = [list(WORDS[int(i)]) for i in torch.randint(len(WORDS), (600,), generator=g)]
    c = Sequences.from_lists([prefixes[i % 3] for i in range(600)])
    x = Sequences.from_lists(conts)
    out = residual_perplexity(model, c, x, 8, generator=g)
    tables = {tuple(p): exact(model, p) for p in prefixes}
    index = {w: i for i, w in enumerate(WORDS)}
    exact_lp = torch.tensor([float(tables[tuple(p)][0][index[tuple(w)]] + tables[tuple(p)][1][index[tuple(w)]])
                             - tables[tuple(p)][2] for p, w in zip(c.tolist(), conts)], dtype=torch.float64)
    assert out.tokens == sum(len(w) + (len(w) < K) for w in conts)
    assert out.token_counts.tolist() == [len(w) + (len(w) < K) for w in conts]
    exact_log_ppl = -float(exact_lp.sum()) / out.tokens
    # corpus log-PPL bounds are sums of 600 independent log Z estimates: sd = sqrt(sum stderr^2) / N; z = 4
    sd = math.sqrt(float((out.log_z.stderr ** 2).sum())) / out.tokens
    assert math.log(out.lower) < exact_log_ppl + 4 * sd and math.log(out.upper) > exact_log_ppl - 4 * sd
    assert bool((out.log_prob_lower <= out.log_prob_upper).all())
    torch.testing.assert_close(out.base_log_prob, model.base_log_prob(c, x).double())
    assert out.base == pytest.approx(math.exp(-float(out.base_log_prob.sum()) / out.tokens))


def test_constant_energy_gives_the_base_perplexity_exactly():
    flat = StandIn(scale=0.0)
    c, x = Sequences.from_lists([[1], [2, 3]]), Sequences.from_lists([[1, 2, 3], [2]])
    out = residual_perplexity(flat, c, x, 3, generator=torch.Generator().manual_seed(4))
    assert out.lower == pytest.approx(out.base, rel=1e-12) and out.upper == pytest.approx(out.base, rel=1e-12)
    assert out.tokens == 3 + 2  # the cut continuation has no </s>, the ended one has


def test_unbounded_horizon_counts_every_end():
    free = StandIn(horizon=None, scale=0.0)
    out = residual_perplexity(free, Sequences.from_lists([[1], [2]]), Sequences.from_lists([[1, 2, 3, 1], []]), 2,
                              generator=torch.Generator().manual_seed(5))
    assert out.token_counts.tolist() == [5, 1]


def test_perplexity_rejects_bad_pairs(model):
    g = torch.Generator()
    with pytest.raises(ValueError, match="continuations: the model's horizon law has at most horizon=3 tokens; "
                                         "the longest continuation has 4"):
        residual_perplexity(model, Sequences.from_lists([[1]]), Sequences.from_lists([[1, 1, 1, 1]]), 2, generator=g)
    with pytest.raises(ValueError, match="prefixes: expected one prefix per continuation .*got 2 prefixes and 1"):
        residual_perplexity(model, Sequences.from_lists([[1], [2]]), Sequences.from_lists([[1]]), 2, generator=g)
    with pytest.raises(TypeError, match="continuations: expected an ebms.sequences.Sequences; got list"):
        residual_perplexity(model, Sequences.from_lists([[1]]), [[1]], 2, generator=g)
    with pytest.raises(ValueError, match="n: expected an int >= 2; got 1"):
        residual_log_z(model, Sequences.from_lists([[1]]), 1, generator=g)


def _exact_steps(model: StandIn, prefix: list[int], w: tuple[int, ...]) -> list[float]:
    """log p(x_t | c, x_<t) by summing the enumerated joint law over the continuations that extend x_<=t."""
    base, a, log_z = exact(model, prefix)
    joint = dict(zip(WORDS, (base + a - log_z).exp().tolist()))

    def mass(h: tuple[int, ...]) -> float:
        return sum(p for y, p in joint.items() if y[: len(h)] == h)

    steps = [math.log(mass(w[: t + 1])) - math.log(mass(w[:t])) for t in range(len(w))]
    if len(w) < K:
        steps.append(math.log(joint[w]) - math.log(mass(w)))
    return steps


@pytest.mark.parametrize("w", [(2, 2, 1), (3,)])
def test_stepwise_bounds_bracket_the_exact_step_probabilities(model, w):
    R = 1500
    c, x = Sequences.from_lists([[2, 1]] * R), Sequences.from_lists([list(w)] * R)
    out = stepwise_log_prob_bounds(model, c, x, 4, generator=torch.Generator().manual_seed(6), batch_size=1 << 14)
    truth = _exact_steps(model, [2, 1], w)
    assert out.mask[0].tolist() == [True] * len(truth) + [False] * (x.max_length + 1 - len(truth))
    torch.testing.assert_close(out.base, model.base.continuation_token_log_probs(c, x).double().masked_fill(
        ~out.mask, 0.0))
    for t, exact_t in enumerate(truth):
        lo, up = out.lower[:, t], out.upper[:, t]
        # on average lower <= exact <= upper; one-sided z = 4 allowance for the mean's noise
        assert float(lo.mean()) < exact_t + 4 * float(lo.std()) / math.sqrt(R)
        assert float(up.mean()) > exact_t - 4 * float(up.std()) / math.sqrt(R)
        assert bool((lo <= up + 1e-12).all())
    # the step bounds telescope: their exact counterparts sum to log p(x | c)
    base, a, log_z = exact(model, [2, 1])
    assert sum(truth) == pytest.approx(float(base[WORDS.index(w)] + a[WORDS.index(w)]) - log_z, abs=1e-9)


def test_exact_last_step_equals_enumeration(model):
    base, a, log_z = exact(model, [3])
    joint = dict(zip(WORDS, (base + a).tolist()))
    xs = [(1, 2, 3), (3, 3, 3), (2, 1, 1)]
    out = exact_last_step(model, Sequences.from_lists([[3]] * 3), Sequences.from_lists([list(w) for w in xs]))
    for r, w in enumerate(xs):
        options = [w[:2]] + [w[:2] + (v,) for v in range(1, V)]  # v = </s> ends after two tokens
        ref = torch.log_softmax(torch.tensor([joint[o] for o in options], dtype=torch.float64), 0)
        torch.testing.assert_close(out.log_probs[r], ref, atol=1e-6, rtol=0)  # float32 base and energy
        assert float(out.log_prob[r]) == pytest.approx(float(ref[w[2]]), abs=1e-6)


def test_exact_last_step_needs_full_horizon_continuations(model):
    with pytest.raises(ValueError, match=r"x: expected every continuation to have exactly horizon=3 tokens; got "
                                         r"lengths \[2, 3\]"):
        exact_last_step(model, Sequences.from_lists([[1], [1]]), Sequences.from_lists([[1, 2], [1, 2, 3]]))
    with pytest.raises(ValueError, match="model.horizon: the last step is enumerable only at a fixed horizon"):
        exact_last_step(StandIn(horizon=None), Sequences.from_lists([[1]]), Sequences.from_lists([[1]]))


class TableEnergy(torch.nn.Module):
    """The stand-in's energy as an ``nn.Module`` (what ``ResidualLM`` takes)."""

    def __init__(self) -> None:
        super().__init__()
        self.inner = StandIn()

    def forward(self, prefix: Sequences, x: Sequences) -> torch.Tensor:
        return self.inner.energy(prefix, x)


@pytest.fixture(scope="module")
def residual_ngram():
    from ebms.distributions import NGram
    from ebms.models.residual_lm import ResidualLM

    table = torch.randn(V, V, generator=torch.Generator().manual_seed(9), dtype=torch.float64).mul(1.5)
    return ResidualLM(NGram(V, 2, table.log_softmax(-1)), TableEnergy(), horizon=K).eval()


def test_real_residual_lm_with_an_ngram_base(residual_ngram):
    """The estimators need only the contract's methods: an n-gram base has no logits nor prefix API."""
    from ebms.models.residual_lm import enumerate_continuations, exact_joint_log_probs, exact_log_z

    m = residual_ngram
    c = Sequences.from_lists([[2]])
    log_z = float(exact_log_z(m, c))
    words = [tuple(w) for w in enumerate_continuations(V, K).tolist()]
    joint_t = exact_joint_log_probs(m, c)[0]
    base_t = m.base_log_prob(Sequences.from_lists([[2]] * len(words)), enumerate_continuations(V, K)).double()
    cv2 = float(torch.exp(2 * joint_t - base_t).sum()) - 1  # var(w) / mean(w)^2 under the base
    R, n = 1000, 16
    out = residual_log_z(m, Sequences.from_lists([[2]] * R), n, generator=torch.Generator().manual_seed(10))
    # E[lower] = log Z - cv2 / (2n) + O(n^-2), E[upper] = log Z + cv2 / (2n) + O(n^-2); two-sided z = 4
    assert abs(float(out.lower.mean()) - (log_z - cv2 / (2 * n))) < 4 * float(out.lower.std()) / math.sqrt(R)
    assert abs(float(out.upper.mean()) - (log_z + cv2 / (2 * n))) < 4 * float(out.upper.std()) / math.sqrt(R)
    joint = dict(zip(words, joint_t.tolist()))
    x = (1, 3, 3)
    last = exact_last_step(m, c, Sequences.from_lists([list(x)]))
    ref = torch.tensor([joint[x[:2]]] + [joint[x[:2] + (v,)] for v in range(1, V)], dtype=torch.float64).log_softmax(0)
    torch.testing.assert_close(last.log_probs[0], ref, atol=1e-9, rtol=0)  # float64 n-gram, float32 energy
    steps = stepwise_log_prob_bounds(m, Sequences.from_lists([[2]] * 2), Sequences.from_lists([[1, 3, 3], [2]]), 2,
                                     generator=torch.Generator().manual_seed(11))
    base = m.base_log_prob(Sequences.from_lists([[2]] * 2), Sequences.from_lists([[1, 3, 3], [2]])).double()
    torch.testing.assert_close(steps.base.sum(1), base)  # the step terms rebuild the horizon law's log-prob
    assert steps.mask.tolist() == [[True, True, True, False], [True, True, False, False]]
