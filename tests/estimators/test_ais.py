"""AIS, reverse AIS and the bracket: against enumeration and closed forms; schedules; protocol errors."""

import math

import pytest
import torch

from ebms.distributions import Gaussian, IndependentBernoulli
from ebms.energy import Energy, from_fn
from ebms.estimators.ais import (
    AISResult,
    GeometricPath,
    ais,
    ais_bracket,
    geometric_betas,
    linear_betas,
    reverse_ais,
    salakhutdinov_betas,
    sigmoid_betas,
    validate_betas,
)
from ebms.estimators.exact import exact_log_partition
from ebms.estimators.importance import importance_log_partition
from ebms.samplers import MALA
from ebms.samplers._discrete import all_site_logits
from ebms.samplers.block_gibbs import BlockGibbs
from ebms.spaces import Spins

N = 12
SPACE = Spins(N)


def _couplings(seed=0):
    g = torch.Generator().manual_seed(seed)
    J = torch.randn(N, N, generator=g) * 0.5
    J = (J + J.T) / 2
    J.fill_diagonal_(0)
    return J, torch.randn(N, generator=g) * 0.3


class SmallIsing(Energy):
    """E(s) = -s'Js/2 - h's with analytic single-site conditionals (categories: -1, +1)."""

    def __init__(self, J, h):
        super().__init__()
        self.J, self.h = J, h
        self.space = Spins(J.shape[0])

    def forward(self, s):
        return -0.5 * ((s @ self.J) * s).sum(-1) - s @ self.h

    def all_conditional_logits(self, s):
        f = s @ self.J + self.h  # local field, J has a zero diagonal
        return torch.stack([-f, f], -1)

    def conditional_logits(self, s, site):
        f = self.all_conditional_logits(s)
        if isinstance(site, torch.Tensor):
            return f[torch.arange(s.shape[0]), site]
        return f[:, site]


def _ising_path():
    J, h = _couplings()
    energy = from_fn(lambda s: -0.5 * ((s @ J) * s).sum(-1) - s @ h)
    base = IndependentBernoulli(torch.zeros(N), space=SPACE)
    kernel = BlockGibbs([torch.tensor([i]) for i in range(N)], space=SPACE)  # systematic-scan Gibbs
    return energy, base, GeometricPath(energy, base, kernel)


def _exact_samples(energy, n, generator):
    states = torch.cat(list(SPACE.enumerate()))
    with torch.no_grad():
        p = torch.softmax(-energy(states).double(), 0)
    return states[torch.multinomial(p, n, replacement=True, generator=generator)]


# -- schedules ---------------------------------------------------------------


def test_salakhutdinov_schedule_has_14500_steps_with_published_spacing():
    b = salakhutdinov_betas()
    assert b.dtype == torch.float64 and b.shape == (14501,)
    d = b.diff()
    assert torch.allclose(d[:500], torch.full((500,), 1e-3, dtype=torch.float64))
    assert torch.allclose(d[500:4500], torch.full((4000,), 1e-4, dtype=torch.float64))
    assert torch.allclose(d[4500:], torch.full((10000,), 1e-5, dtype=torch.float64))
    assert len(validate_betas(b)) - 1 == 14500


def test_schedules_start_at_zero_end_at_one_and_increase():
    for b, n in [(linear_betas(4), 5), (geometric_betas(6, start=1e-3), 7), (sigmoid_betas(10), 11)]:
        assert b.shape == (n,) and b[0] == 0.0 and b[-1] == 1.0 and bool((b.diff() > 0).all())
    assert torch.allclose(linear_betas(4), torch.tensor([0, 0.25, 0.5, 0.75, 1], dtype=torch.float64))
    assert geometric_betas(6, start=1e-3)[1] == pytest.approx(1e-3)
    s = sigmoid_betas(10)
    assert torch.allclose(s + s.flip(0), torch.ones(11, dtype=torch.float64))  # symmetric about 1/2
    assert geometric_betas(1).tolist() == [0.0, 1.0]


@pytest.mark.parametrize(
    ("betas", "message"),
    [
        ([0.0], "expected at least 2 values"),
        ([0.1, 1.0], "expected to start at 0 and end at 1; got first 0.1"),
        ([0.0, 0.9], "last 0.9"),
        ([0.0, 0.6, 0.4, 1.0], "nondecreasing values; got 1 decrease.*index 2: 0.6 -> 0.4"),
        ([0.0, math.nan, 1.0], "expected finite values"),
        (torch.zeros(2, 2), r"expected a 1-D schedule; got shape \(2, 2\)"),
        ("abc", "expected a sequence of numbers"),
    ],
)
def test_bad_schedules_are_rejected_with_the_reason(betas, message):
    with pytest.raises((ValueError, TypeError), match=message):
        validate_betas(betas)


def test_schedule_argument_errors():
    with pytest.raises(ValueError, match="n_steps: expected an int >= 1; got 0"):
        linear_betas(0)
    with pytest.raises(ValueError, match=r"start: expected a number in \(0, 1\); got 2"):
        geometric_betas(5, start=2)


# -- AIS against exact values ------------------------------------------------


def test_one_step_ais_is_importance_sampling_with_the_base():
    energy, base, path = _ising_path()
    res = ais(path, 500, [0.0, 1.0], generator=torch.Generator().manual_seed(4))
    est = importance_log_partition(energy, base, 500, generator=torch.Generator().manual_seed(4))
    assert isinstance(res, AISResult) and res.direction == "forward"
    assert res.estimate.estimate == pytest.approx(est.estimate, abs=1e-12)
    assert res.estimate.stderr == pytest.approx(est.stderr, abs=1e-12)
    assert res.estimate.ess == pytest.approx(est.ess)


def test_ais_matches_enumeration_on_12_spin_ising():
    energy, _, path = _ising_path()
    exact = exact_log_partition(energy, SPACE).estimate
    res = ais(path, 300, linear_betas(30), generator=torch.Generator().manual_seed(0))
    est = res.estimate
    # z = 4 (two-sided 6e-5); ESS is most of the chains, so the delta-method stderr is reliable
    assert est.ess > 150
    assert abs(est.estimate - exact) < 4 * est.stderr
    assert est.settings["num_steps"] == 30 and est.settings["n_chains"] == 300
    assert res.log_weights.dtype == torch.float64 and res.samples.shape == (300, N)
    SPACE.validate(res.samples)


def test_forward_and_reverse_mean_log_weights_bound_log_z_from_each_side():
    # Jensen, per chain: E[log w_fwd] = log Z - log Z0 - KL_fwd and E[log w_rev] = log Z0 - log Z - KL_rev,
    # so the chain means are strict lower / upper bounds; a short schedule makes the gaps visible.
    energy, _, path = _ising_path()
    g = torch.Generator().manual_seed(1)
    exact = exact_log_partition(energy, SPACE).estimate
    n, betas = 300, linear_betas(10)
    fwd = ais(path, n, betas, generator=g)
    rev = reverse_ais(path, _exact_samples(energy, n, g), betas, generator=g)
    lower = path.base_log_partition + fwd.log_weights.mean().item()
    upper = path.base_log_partition - rev.log_weights.mean().item()
    se_lower = fwd.log_weights.std().item() / math.sqrt(n)
    se_upper = rev.log_weights.std().item() / math.sqrt(n)
    # z = 3 on the chain-mean standard errors (one-sided 0.13% each)
    assert lower + 3 * se_lower < exact < upper - 3 * se_upper
    # the logsumexp estimates are consistent with exact to within z = 4 stderr
    assert fwd.estimate.estimate < exact + 4 * fwd.estimate.stderr
    assert rev.estimate.estimate > exact - 4 * rev.estimate.stderr
    assert rev.direction == "reverse" and "reverse AIS log Z" in str(rev)


def test_bracket_from_exact_samples_contains_exact_log_z():
    energy, _, path = _ising_path()
    g = torch.Generator().manual_seed(2)
    exact = exact_log_partition(energy, SPACE).estimate
    est = ais_bracket(path, 300, linear_betas(20), _exact_samples(energy, 300, g), generator=g)
    # bracket = raw bounds widened by z = 2 stderr each (default); one-sided noise failure <= 2.3% per end
    assert est.lower <= exact <= est.upper
    s = est.settings
    assert s["method"] == "ais bracket" and s["z"] == 2.0 and s["n_reverse"] == 300
    assert s["gap"] == pytest.approx(s["reverse"] - s["forward"]) and s["crossed"] == (s["gap"] < 0)
    raw = ais_bracket(path, 50, [0.0, 0.5, 1.0], _exact_samples(energy, 50, g), z=0.0, generator=g)
    assert {raw.lower, raw.upper} == {raw.settings["forward"], raw.settings["reverse"]}


def test_ais_with_mala_recovers_correlated_gaussian_normaliser():
    P = torch.tensor([[4.0, 1.5], [1.5, 2.0]])
    mu = torch.tensor([1.0, -0.5])
    energy = from_fn(lambda x: 0.5 * (((x - mu) @ P) * (x - mu)).sum(-1))
    exact = math.log(2 * math.pi) - 0.5 * math.log(float(torch.det(P)))
    path = GeometricPath(energy, Gaussian(torch.zeros(2), std=2.0), MALA(step_size=0.2), steps_per_temperature=2)
    est = ais(path, 300, linear_betas(40), generator=torch.Generator().manual_seed(0)).estimate
    assert est.ess > 50
    assert abs(est.estimate - exact) < 4 * est.stderr  # z = 4


class IndependentSpinsPath:
    """Protocol-only path (no log_weight_increment): uniform base, exact transitions for f_beta."""

    def __init__(self, h):
        self.h = h

    def base_log_partition(self):  # a method is accepted as well as a number
        return len(self.h) * math.log(2.0)

    def sample_base(self, n, generator=None):
        return 2.0 * (torch.rand(n, len(self.h), generator=generator) < 0.5).float() - 1.0

    def log_density(self, x, beta):
        return beta * (x @ self.h)

    def transition(self, x, beta, generator=None):
        p = torch.sigmoid(2 * beta * self.h).expand_as(x)
        return 2.0 * (torch.rand(x.shape, generator=generator) < p).float() - 1.0


def test_any_object_following_the_path_protocol_works():
    h = torch.tensor([0.5, -1.0, 1.5, 0.2])
    est = ais(IndependentSpinsPath(h), 400, linear_betas(8), generator=torch.Generator().manual_seed(0)).estimate
    exact = sum(math.log(2 * math.cosh(v)) for v in h.tolist())
    assert abs(est.estimate - exact) < 4 * est.stderr  # z = 4
    assert est.settings["path"] == "IndependentSpinsPath"


# -- the geometric path -------------------------------------------------------


def test_intermediate_energy_and_gradient_interpolate_base_and_target():
    energy = from_fn(lambda x: (x**4).sum(-1))
    base = Gaussian(torch.tensor([0.5, -0.5]), std=1.3)
    path = GeometricPath(energy, base, MALA(step_size=0.1))
    x = torch.randn(5, 2, generator=torch.Generator().manual_seed(0))
    for beta in (0.0, 0.3, 1.0):
        f = path.intermediate_energy(beta)
        e, g = f.energy_and_grad(x)
        xg = x.clone().requires_grad_(True)
        ref = beta * (xg**4).sum(-1) - (1 - beta) * base.log_prob(xg)
        (ref_g,) = torch.autograd.grad(ref.sum(), xg)
        assert torch.allclose(e, ref.detach(), atol=1e-5) and torch.allclose(g, ref_g, atol=1e-5)
        assert torch.allclose(path.log_density(x, beta), -ref.detach(), atol=1e-5)
    inc = path.log_weight_increment(x, 0.2, 0.7)
    assert torch.allclose(inc, (path.log_density(x, 0.7) - path.log_density(x, 0.2)).double(), atol=1e-5)


def test_intermediate_conditionals_combine_model_and_base_logits():
    J, h = _couplings(3)
    model = SmallIsing(J, h)
    model.blocks = lambda: [torch.arange(N)]
    base = IndependentBernoulli(torch.linspace(-1, 1, N), space=SPACE)
    f = GeometricPath(model, base, BlockGibbs()).intermediate_energy(0.4)
    plain = from_fn(lambda s: f(s))  # same energy, no conditional fast path
    x = SPACE.random(6, generator=torch.Generator().manual_seed(0))
    fast = torch.log_softmax(all_site_logits(f, SPACE, x), -1)
    slow = torch.log_softmax(all_site_logits(plain, SPACE, x), -1)
    assert torch.allclose(fast, slow, atol=1e-5)
    site = torch.arange(6) % N
    one = torch.log_softmax(f.conditional_logits(x, site), -1)
    assert torch.allclose(one, slow[torch.arange(6), site], atol=1e-5)
    assert f.space is model.space and f.blocks() is not None


def test_ais_on_model_with_fast_conditionals_matches_enumeration():
    model = SmallIsing(*_couplings(5))
    kernel = BlockGibbs([torch.tensor([i]) for i in range(N)])  # dense couplings: single-site blocks
    path = GeometricPath(model, IndependentBernoulli(torch.zeros(N), space=SPACE), kernel)
    exact = exact_log_partition(model).estimate
    est = ais(path, 300, linear_betas(20), generator=torch.Generator().manual_seed(6)).estimate
    assert abs(est.estimate - exact) < 4 * est.stderr  # z = 4


# -- errors -------------------------------------------------------------------


def test_path_protocol_and_argument_messages():
    with pytest.raises(TypeError, match=r"path: expected the annealing-path protocol \(sample_base, base_log_partition, "
                                        r"log_density, transition\); got object"):
        ais(object(), 10, linear_betas(2))
    _, base, path = _ising_path()
    with pytest.raises(ValueError, match="n_chains: expected an int >= 2; got 1"):
        ais(path, 1, linear_betas(2))
    with pytest.raises(ValueError, match=r"x: expected at least 2 target samples; got shape \(1, 12\)"):
        reverse_ais(path, torch.ones(1, N), linear_betas(2))
    with pytest.raises(TypeError, match="kernel: expected an ebms.samplers.Sampler; got str"):
        GeometricPath(lambda x: x.sum(-1), base, "gibbs")
    with pytest.raises(TypeError, match=r"base: expected a normalised model with sample\(n, \*, generator\).*; got object"):
        GeometricPath(lambda x: x.sum(-1), object(), MALA())
    with pytest.raises(ValueError, match="z: expected a finite number >= 0"):
        ais_bracket(path, 4, linear_betas(2), torch.ones(4, N), z=-1)


def test_wrong_shaped_log_density_is_reported():
    class BadPath(IndependentSpinsPath):
        def log_density(self, x, beta):
            return beta * (x @ self.h).unsqueeze(1)

    with pytest.raises(ValueError, match=r"path.log_density\(x, beta\): expected shape \(5,\); got \(5, 1\)"):
        ais(BadPath(torch.ones(3)), 5, linear_betas(2))


def test_ais_bracket_reuses_a_given_forward_run():
    from ebms.estimators.ais import ais, ais_bracket, linear_betas, reverse_ais
    from ebms.models import BernoulliRBM

    path = BernoulliRBM(6, 3, generator=torch.Generator().manual_seed(0)).ais_path(torch.zeros(6))
    betas = linear_betas(50)
    fwd = ais(path, 64, betas, generator=torch.Generator().manual_seed(1))
    x = path.sample_base(64, generator=torch.Generator().manual_seed(2))
    b = ais_bracket(path, 64, betas, x, forward=fwd, generator=torch.Generator().manual_seed(3))
    assert b.estimate == fwd.estimate.estimate and b.stderr == fwd.estimate.stderr
    rev = reverse_ais(path, x, betas, generator=torch.Generator().manual_seed(3))
    assert b.settings["reverse"] == rev.estimate.estimate  # the same generator stream, reverse only
    with pytest.raises(ValueError, match="forward: expected a forward AIS result; got direction 'reverse'"):
        ais_bracket(path, 64, betas, x, forward=rev)
