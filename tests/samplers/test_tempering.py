"""Parallel tempering: exact target replica, swap rule by hand, wrapping discrete and continuous kernels."""

from __future__ import annotations

import pytest
import torch
from _discrete_checks import assert_matches_exact, empirical_probs, exact_probs, tv_distance
from _sampler_checks import Z_MAX, z_scores

from ebms.energy import energy_and_grad, from_fn
from ebms.nets import GaussianMixtureEnergy
from ebms.samplers import MALA, ChainState, Sampler, StepInfo
from ebms.samplers.block_gibbs import BlockGibbs
from ebms.samplers.gwg import GibbsWithGradients
from ebms.samplers.tempering import ParallelTempering, TemperingInfo
from ebms.spaces import Binary, Spins


def curie_weiss(n: int = 10, j: float = 0.3, h: float = 0.04):
    """Fully connected ferromagnet ``-j sum_{i<k} x_i x_k - h sum x``: two modes (all +1 / all -1)
    separated by a barrier of about ``j n^2 / 2 = 15`` nats; the +1 mode has ``e^{2hn} ~ 2.2`` times the mass."""
    return from_fn(lambda x: -0.5 * j * (x.sum(-1) ** 2 - n) - h * x.sum(-1))


LADDER = [1.0, 0.7, 0.5, 0.35, 0.25, 0.17, 0.11, 0.07]


@pytest.mark.slow
def test_pt_target_replica_matches_bimodal_ferromagnet_where_plain_gwg_stays_stuck():
    energy, space = curie_weiss(), Spins(10)
    x0 = -torch.ones(4000, 10)  # every chain starts in the lighter mode
    g = torch.Generator().manual_seed(0)
    steps = 300
    pt = ParallelTempering(GibbsWithGradients(space=space), LADDER)
    x = pt.sample(energy, x0, steps, generator=g)
    assert x.shape == x0.shape
    tv_pt, thr = assert_matches_exact(x, energy, space)
    # the same kernel alone, with the same number of steps, never crosses the barrier
    plain = GibbsWithGradients(space=space).sample(energy, x0, steps, generator=g)
    p = exact_probs(energy, space)
    tv_plain = tv_distance(empirical_probs(plain, space), p)
    assert tv_plain > thr > tv_pt


def test_pt_wrapping_block_gibbs_on_a_ring_matches_exact():
    """Ising ring of 10 spins, coupling 0.8, field 0.1; blocks are the even and odd sites."""
    n = 10
    energy = from_fn(lambda x: -0.8 * (x * x.roll(1, -1)).sum(-1) - 0.1 * x.sum(-1))
    blocks = [torch.arange(0, n, 2), torch.arange(1, n, 2)]
    g = torch.Generator().manual_seed(1)
    pt = ParallelTempering(BlockGibbs(blocks, space=Spins(n)), [1.0, 0.6, 0.3], swap="random-pair")
    x = pt.sample(energy, Spins(n).random(8000, generator=g), 60, generator=g)
    assert_matches_exact(x, energy, Spins(n))


class Frozen(Sampler):
    """A kernel that never moves (isolates the swap move)."""

    uses_grad = True

    def step(self, energy, state, *, generator=None):
        n = state.x.shape[0]
        one = torch.ones(n, dtype=state.x.dtype)
        return state.replace(t=state.t + 1), StepInfo(one, one.bool(), state.energy, ~one.bool())


def test_pt_two_replica_swap_probability_and_swapped_state_match_hand_computation():
    energy = from_fn(lambda x: (x**2).sum(-1) + x.sum(-1))  # E(x) = |x|^2 + sum x
    betas = [1.0, 0.4]
    pt = ParallelTempering(Frozen(), betas)
    g = torch.Generator().manual_seed(2)
    B = 20000
    x0 = torch.randn(B, 3, generator=g)
    state = pt.init(energy, x0)
    other = torch.randn(B, 3, generator=g)  # put a different state in the hot replica
    x = torch.cat([x0, other])
    e, grad = energy_and_grad(energy, x)
    beta_rows = torch.tensor(betas).repeat_interleave(B)
    state = state.replace(x=x, energy=beta_rows * e, grad=beta_rows[:, None] * grad)

    new, info = pt.step(energy, state, generator=g)
    assert isinstance(info, TemperingInfo) and info.swap_rate.shape == (1,) and info.swapped.shape == (1, B)
    E0, E1 = energy(x0), energy(other)
    prob = torch.exp((betas[0] - betas[1]) * (E0 - E1)).clamp(max=1.0)
    torch.testing.assert_close(info.swap_rate, prob.mean().reshape(1))
    # swapped chains exchanged states; the cached tempered energy and gradient follow the state
    s = info.swapped[0]
    torch.testing.assert_close(pt.target(new), torch.where(s[:, None], other, x0))
    torch.testing.assert_close(pt.replicas(new)[1], torch.where(s[:, None], x0, other))
    e_new, g_new = energy_and_grad(energy, new.x)
    torch.testing.assert_close(new.energy, beta_rows * e_new)
    torch.testing.assert_close(new.grad, beta_rows[:, None] * g_new)
    # realised swap frequency vs its probability: z < 4 (binomial standard error)
    se = (prob * (1 - prob)).sum().sqrt() / B
    assert abs(float(s.float().mean() - prob.mean())) < 4 * float(se)


def test_pt_even_odd_proposes_alternate_pairs():
    energy = from_fn(lambda x: 0.0 * x.sum(-1))  # flat: every proposed swap is accepted
    pt = ParallelTempering(Frozen(), [1.0, 0.8, 0.6, 0.4, 0.2])
    state = pt.init(energy, torch.zeros(6, 2))
    state, info = pt.step(energy, state)  # t = 0: pairs (0,1), (2,3)
    assert info.swapped.all(1).tolist() == [True, False, True, False]
    state, info = pt.step(energy, state)  # t = 1: pairs (1,2), (3,4)
    assert info.swapped.all(1).tolist() == [False, True, False, True]
    torch.testing.assert_close(info.swap_rate, torch.ones(4))


def test_pt_random_pair_swaps_one_pair_per_chain():
    energy = from_fn(lambda x: 0.0 * x.sum(-1))
    pt = ParallelTempering(Frozen(), [1.0, 0.8, 0.6, 0.4], swap="random-pair")
    state = pt.init(energy, torch.zeros(3000, 2))
    _, info = pt.step(energy, state, generator=torch.Generator().manual_seed(3))
    assert (info.swapped.sum(0) == 1).all()
    counts = info.swapped.sum(1).double()  # multinomial(3000, 1/3 each): sd ~26
    assert ((counts - 1000).abs() < 4 * (3000 * (1 / 3) * (2 / 3)) ** 0.5).all()


def test_pt_wrapping_mala_recovers_separated_mixture_mean_and_variance():
    """Modes at -2.5 and +2.5 (sd 0.5, weights 0.3/0.7); all chains start in the lighter mode."""
    energy = GaussianMixtureEnergy([[-2.5], [2.5]], 0.25, [0.3, 0.7])
    mean = 0.7 * 2.5 - 0.3 * 2.5
    var = 0.25 + 2.5**2 - mean**2
    betas = [1.0, 0.45, 0.2, 0.08]
    pt = ParallelTempering(MALA(step_size=0.3), betas)
    g = torch.Generator().manual_seed(4)
    state = pt.init(energy, torch.full((300, 1), -2.5))
    # hotter rows are flatter: scale the step with the temperature
    state = state.replace(step_size=0.3 / torch.tensor(betas).repeat_interleave(300))
    run = pt.run(energy, state, 900, burn_in=200, generator=g)
    assert run.samples.shape == (700, 300, 1) and run.energies.shape == (700, 300)
    torch.testing.assert_close(run.energies, energy(run.samples.reshape(-1, 1)).reshape(700, 300))
    x = run.samples[..., 0]
    q = torch.stack([x, (x - mean) ** 2], -1)  # means: E[x] and Var[x]
    z, _, _ = z_scores(q, torch.tensor([mean, var]))
    assert z.abs().max() < Z_MAX, f"z-scores {z.tolist()} (mean, var)"


# -- validation ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("args", "kwargs", "exc", "match"),
    [
        (([0.9, 0.5],), {}, ValueError, r"betas: expected betas\[0\] == 1 \(the target\); got 0.9"),
        (([1.0, 0.5, 0.5],), {}, ValueError, "betas: expected strictly decreasing values"),
        (([1.0, 1.5],), {}, ValueError, "betas: expected strictly decreasing values"),
        (([1.0, 0.5, -0.1],), {}, ValueError, "betas: expected finite positive values"),
        (([1.0, 0.0],), {}, ValueError, "betas: expected finite positive values"),
        (([1.0],), {}, ValueError, "betas: expected at least 2 inverse temperatures; got 1"),
        (("ab",), {}, TypeError, "betas: expected a sequence of floats"),
        (([1.0, 0.5],), {"n_replicas": 3}, ValueError, r"n_replicas: expected len\(betas\) = 2; got 3"),
        ((None,), {"n_replicas": 1}, ValueError, "n_replicas"),
        ((None,), {"min_beta": 1.5}, ValueError, r"min_beta: expected a value in \(0, 1\); got 1.5"),
        ((None,), {"swap": "all"}, ValueError, "swap: expected one of"),
    ],
)
def test_pt_bad_arguments_messages_name_argument_and_value(args, kwargs, exc, match):
    with pytest.raises(exc, match=match):
        ParallelTempering(MALA(), *args, **kwargs)


def test_pt_default_ladder_is_geometric_and_kernel_must_be_a_sampler():
    pt = ParallelTempering(MALA(), n_replicas=3, min_beta=0.25)
    assert pt.betas == (1.0, 0.5, 0.25) and pt.n_replicas == 3
    with pytest.raises(TypeError, match="kernel: expected an ebms.samplers.Sampler; got str"):
        ParallelTempering("mala")


def test_pt_refuses_bipartite_block_gibbs_and_kernels_evaluating_extra_rows():
    class TinyRBM(torch.nn.Module):
        space = Binary(3)

        def forward(self, v):
            return -v.sum(-1)

        def sample_hidden(self, v, generator=None):
            return v

        def sample_visible(self, h, generator=None):
            return h

    pt = ParallelTempering(BlockGibbs(), [1.0, 0.5])
    with pytest.raises(TypeError, match="bipartite mode .* cannot be tempered"):
        pt.init(TinyRBM(), torch.zeros(2, 3))

    class Greedy(Sampler):  # evaluates two rows per chain
        uses_grad = False

        def step(self, energy, state, *, generator=None):
            energy(torch.cat([state.x, state.x]))
            return state, None

    pt = ParallelTempering(Greedy(), [1.0, 0.5])
    e = from_fn(lambda x: x.sum(-1))
    state = pt.init(e, torch.zeros(2, 3))
    with pytest.raises(ValueError, match="evaluates exactly the 4 replica rows; got a batch of 8"):
        pt.step(e, state)
    with pytest.raises(ValueError, match="state.x: expected R\\*B rows with R = 2 replicas; got 3 rows"):
        pt.step(e, ChainState(torch.zeros(3, 3), torch.zeros(3), None, torch.ones(3)))
