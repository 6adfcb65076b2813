"""Mix-and-match (MH-within-Gibbs with a cloze proposal): exact stationarity on a tiny space by
enumeration, the acceptance ratio against a hand computation, and its bad inputs."""

from __future__ import annotations

import itertools
import math

import pytest
import torch
from _exact_refs import chi_square_tail

from ebms.samplers import mix_and_match as mm
from ebms.samplers.mix_and_match import MixAndMatch, ProductOfExperts, mix_and_match_log_ratio
from ebms.sequences import Sequences

V, T = 3, 3
STATES = torch.tensor(list(itertools.product(range(V), repeat=T)))  # (27, 3), row index = base-3 number
TABLE = torch.randn(V**T, generator=torch.Generator().manual_seed(3), dtype=torch.float64)
#: the cloze proposal's logits at position i given the sum of the other tokens mod 3: (T, 3, V)
Q = 0.5 * torch.randn(T, 3, V, generator=torch.Generator().manual_seed(4), dtype=torch.float64)
ALPHA = (1.0, 1.5)


def _index(tokens: torch.Tensor) -> torch.Tensor:
    return (tokens * torch.tensor([V * V, V, 1])).sum(-1)


def _table(x: Sequences) -> torch.Tensor:
    return TABLE[_index(x.tokens)]


def _constraint(x: Sequences) -> torch.Tensor:
    return (x.tokens[:, 2] != 1).double()


def _proposal(x: Sequences, i: int) -> torch.Tensor:
    context = (x.tokens.sum(1) - x.tokens[:, i]) % 3  # never reads the token at i
    return Q[i, context]


ENERGY = ProductOfExperts([_table, _constraint], ALPHA)


def _target() -> torch.Tensor:
    e = ALPHA[0] * TABLE + ALPHA[1] * (STATES[:, 2] != 1).double()
    return torch.softmax(-e, 0)


def _site_kernel(i: int, log_ratio=mix_and_match_log_ratio) -> torch.Tensor:
    """The exact (27, 27) transition matrix of one update of position ``i``, from the ratio function."""
    e = ENERGY(Sequences(STATES, torch.full((V**T,), T)))
    K = torch.zeros(V**T, V**T, dtype=torch.float64)
    for s in range(V**T):
        lq = _proposal(Sequences(STATES[s : s + 1], torch.tensor([T])), i).log_softmax(-1)[0]
        for v in range(V):
            new = STATES[s].clone()
            new[i] = v
            s2 = int(_index(new))
            r = log_ratio(e[s], e[s2], lq[STATES[s, i]], lq[v])
            a = float(torch.exp(r.clamp(max=0)))
            K[s, s2] += math.exp(lq[v]) * a
            K[s, s] += math.exp(lq[v]) * (1 - a)
    return K


def test_the_acceptance_ratio_is_the_hand_computed_one():
    # E(X) = 2, E(Xbar) = 1, q(X_i | .) = 0.2, q(Xbar_i | .) = 0.5: log[e^-1 0.2 / (e^-2 0.5)] = 1 + log 0.4
    r = mix_and_match_log_ratio(torch.tensor([2.0]), torch.tensor([1.0]), torch.tensor([math.log(0.2)]),
                                torch.tensor([math.log(0.5)]))
    assert r.item() == pytest.approx(1 + math.log(0.4), abs=1e-6)


@pytest.mark.parametrize("i", range(T))
def test_each_site_kernel_leaves_the_product_of_experts_invariant_exactly(i):
    K, pi = _site_kernel(i), _target()
    assert torch.allclose(K.sum(1), torch.ones(V**T, dtype=torch.float64), atol=1e-12)
    flow = pi[:, None] * K
    assert torch.allclose(flow, flow.T, atol=1e-14)  # detailed balance
    assert torch.allclose(pi @ K, pi, atol=1e-14)


def test_without_the_proposal_terms_the_chain_targets_another_law():
    # the control: dropping q's ratio (a plain Metropolis rule) breaks invariance, so the test above can fail
    def plain(ex, ep, lqx, lqp):
        return ex - ep

    pi = _target()
    K = _site_kernel(0, plain) @ _site_kernel(1, plain) @ _site_kernel(2, plain)
    assert (pi @ K - pi).abs().max() > 1e-3


def _frequencies(scan: str, steps: int, n: int = 20000, seed: int = 0) -> torch.Tensor:
    x0 = Sequences(torch.zeros(n, T, dtype=torch.long), torch.full((n,), T))
    x = MixAndMatch(_proposal, scan=scan).sample(ENERGY, x0, steps, generator=torch.Generator().manual_seed(seed))
    return torch.bincount(_index(x.tokens), minlength=V**T).double()


def _chi_square(counts: torch.Tensor, law: torch.Tensor) -> float:
    expected = counts.sum() * law
    return float(((counts - expected) ** 2 / expected).sum())


def test_after_three_epochs_the_chains_follow_the_exact_three_epoch_law():
    # the code's kernel is the enumerated one: 20000 chains from [0, 0, 0] against delta_0 K^3
    K = _site_kernel(0) @ _site_kernel(1) @ _site_kernel(2)
    law = torch.linalg.matrix_power(K, 3)[0]
    assert chi_square_tail(_chi_square(_frequencies("systematic", 3 * T), law), V**T - 1) > 1e-4


@pytest.mark.parametrize("scan", ["systematic", "random"])
def test_long_run_frequencies_match_the_product_of_experts(scan):
    # 20000 independent chains from one corner, 40 epochs (exactly: within 3e-6 of the law): chi-square
    counts, pi = _frequencies(scan, 40 * T), _target()
    expected = counts.sum() * pi
    stat = float(((counts - expected) ** 2 / expected).sum())
    assert chi_square_tail(stat, V**T - 1) > 1e-4, stat


def test_the_frequency_check_rejects_a_sampler_without_the_proposal_terms(monkeypatch):
    monkeypatch.setattr(mm, "mix_and_match_log_ratio", lambda ex, ep, lqx, lqp: ex - ep)
    counts, pi = _frequencies("systematic", 40 * T), _target()
    expected = counts.sum() * pi
    assert chi_square_tail(float(((counts - expected) ** 2 / expected).sum()), V**T - 1) < 1e-4


def test_one_step_accepts_with_the_hand_computed_probability():
    # one chain at [0, 0, 0]; q at position 0 is (0.25, 0.75, 0); the energy is 2 * x_0
    def q(x, i):
        return torch.tensor([[0.25, 0.75, 0.0]]).log()

    energy = ProductOfExperts([lambda x: 2.0 * x.tokens[:, 0].double()])
    sampler = MixAndMatch(q, positions=[0])
    for seed in range(20):
        state = sampler.init(energy, Sequences(torch.zeros(1, 3, dtype=torch.long), torch.tensor([3])))
        state2, info = sampler.step(energy, state, generator=torch.Generator().manual_seed(seed))
        if info.accept_prob.item() < 1:  # the draw was token 1: min(1, e^{-2} * 0.25 / 0.75)
            assert info.accept_prob.item() == pytest.approx(math.exp(-2) * 0.25 / 0.75, rel=1e-6)
            assert state2.x.tokens[0, 0].item() in (0, 1)
            break
    else:
        pytest.fail("no draw of token 1 in 20 seeds")


def test_the_mask_token_hides_the_updated_position_and_the_prompt_stays():
    seen = []

    def q(x, i):
        seen.append(int(x.tokens[0, i]))
        return torch.zeros(x.batch_size, 5)

    x0 = Sequences(torch.tensor([[1, 2, 3, 1]]), torch.tensor([4]))
    x = MixAndMatch(q, positions=[2, 3], mask_id=4).sample(lambda x: torch.zeros(x.batch_size), x0, 6,
                                                           generator=torch.Generator().manual_seed(0))
    assert seen == [4] * 6 and x.tokens[0, :2].tolist() == [1, 2]


def test_positions_beyond_a_chain_length_never_move():
    x0 = Sequences(torch.tensor([[1, 1, 0], [1, 1, 1]]), torch.tensor([2, 3]))
    x = MixAndMatch(lambda x, i: torch.zeros(x.batch_size, 3)).sample(lambda x: torch.zeros(x.batch_size), x0, 30,
                                                                      generator=torch.Generator().manual_seed(0))
    assert x.tokens[0, 2].item() == 0 and x.lengths.tolist() == [2, 3]


def test_product_of_experts_weights_and_terms():
    x = Sequences(STATES[:4], torch.full((4,), T))
    terms = ENERGY.terms(x)
    assert terms.shape == (2, 4)
    assert torch.allclose(ENERGY(x), ALPHA[0] * _table(x) + ALPHA[1] * _constraint(x))
    zero = ProductOfExperts([lambda x: torch.full((x.batch_size,), math.inf)], [0.0])
    assert torch.equal(zero(x), torch.zeros(4))


@pytest.mark.parametrize("make, error, words", [
    (lambda: MixAndMatch("q"), TypeError, "proposal"),
    (lambda: MixAndMatch(_proposal, scan="zigzag"), ValueError, "scan"),
    (lambda: MixAndMatch(_proposal, positions=[]), ValueError, "positions"),
    (lambda: MixAndMatch(_proposal, positions=[-1]), ValueError, "positions"),
    (lambda: ProductOfExperts([]), ValueError, "experts"),
    (lambda: ProductOfExperts([_table], [-1.0]), ValueError, "weights[0]"),
    (lambda: ProductOfExperts([_table], [1.0, 2.0]), ValueError, "weights"),
    (lambda: ProductOfExperts([3]), TypeError, "experts[0]"),
])
def test_bad_construction_is_refused(make, error, words):
    with pytest.raises(error, match=words.replace("[", r"\[").replace("]", r"\]")):
        make()


def test_bad_states_and_proposals_are_refused():
    x0 = Sequences(torch.zeros(2, T, dtype=torch.long), torch.full((2,), T))
    with pytest.raises(TypeError, match="x0"):
        MixAndMatch(_proposal).init(ENERGY, torch.zeros(2, T))
    with pytest.raises(ValueError, match="positions"):
        MixAndMatch(_proposal, positions=[T]).init(ENERGY, x0)
    state = MixAndMatch(lambda x, i: torch.zeros(x.batch_size)).init(ENERGY, x0)
    with pytest.raises(ValueError, match=r"proposal\(x, 0\)"):
        MixAndMatch(lambda x, i: torch.zeros(x.batch_size)).step(ENERGY, state)
    twos = MixAndMatch(_proposal).init(ENERGY, Sequences(torch.full((2, T), 2), torch.full((2,), T)))
    with pytest.raises(ValueError, match="token id 2"):
        MixAndMatch(lambda x, i: torch.zeros(x.batch_size, 2)).step(ENERGY, twos)
