"""Step-size adaptation wraps a kernel: reaches the target acceptance, then freezes."""

from __future__ import annotations

import pytest
import torch
from _sampler_checks import broad_start, gaussian_energy, mixture_energy

from ebms.energy import energy_and_grad
from ebms.samplers import HMC, MALA, SGLD, ULA, HMCInfo, StepSizeAdaptation, warmup

TOLERANCE = 0.1  # acceptance within +-0.1 of the target after adaptation


def _frozen_acceptance(kernel, energy, state, steps, generator):
    acc = []
    for _ in range(steps):
        state, info = kernel.step(energy, state, generator=generator)
        acc.append(info.accept_prob)
    return torch.stack(acc), state


@pytest.mark.parametrize(
    ("kernel", "target"),
    [(MALA(step_size=1e-3), 0.574), (HMC(step_size=1e-3, n_leapfrog=5), 0.65)],
    ids=["mala", "hmc"],
)
def test_warmup_reaches_default_target_acceptance(kernel, target):
    """Defaults: MALA 0.574 (Roberts & Rosenthal 1998), HMC 0.65 (Neal 2011); start 1000x too small."""
    energy = gaussian_energy()
    g = torch.Generator().manual_seed(0)
    state = warmup(kernel, energy, broad_start(500, 2, g), 300, generator=g)
    assert state.step_size.dim() == 0 and float(state.step_size) > 1e-2
    acc, _ = _frozen_acceptance(kernel, energy, state, 100, g)
    assert abs(float(acc.mean()) - target) < TOLERANCE, f"acceptance {float(acc.mean()):.3f}"


@pytest.mark.parametrize("kernel", [MALA(step_size=20.0), HMC(step_size=5.0, n_leapfrog=3)], ids=["mala", "hmc"])
def test_adaptation_shrinks_a_step_that_is_too_large(kernel):
    energy = mixture_energy()
    g = torch.Generator().manual_seed(1)
    state = warmup(kernel, energy, broad_start(500, 1, g), 300, target_accept=0.8, generator=g)
    assert float(state.step_size) < kernel.step_size
    acc, _ = _frozen_acceptance(kernel, energy, state, 100, g)
    assert abs(float(acc.mean()) - 0.8) < TOLERANCE, f"acceptance {float(acc.mean()):.3f}"


def test_per_chain_adaptation_tunes_one_step_size_per_chain():
    """Chains on E = x^2 / (2 s_b^2) with scales s_b in {0.1, 10} need steps ~10^4 apart."""
    scale = torch.cat([torch.full((100,), 0.1), torch.full((100,), 10.0)])[:, None]

    def energy(x):
        return 0.5 * ((x / scale) ** 2).sum(-1)

    kernel = MALA(step_size=1.0)
    g = torch.Generator().manual_seed(2)
    state = warmup(kernel, energy, scale * torch.randn(200, 1, generator=g), 400, per_chain=True, generator=g)
    assert state.step_size.shape == (200,)
    assert float(state.step_size[100:].median() / state.step_size[:100].median()) > 1e3
    acc, _ = _frozen_acceptance(kernel, energy, state, 100, g)
    for half in (acc[:, :100], acc[:, 100:]):
        assert abs(float(half.mean()) - 0.574) < TOLERANCE


def test_adaptation_step_returns_inner_info_and_updates_only_step_size():
    energy = gaussian_energy()
    kernel = HMC(step_size=0.1, n_leapfrog=3)
    adapt = StepSizeAdaptation(kernel)
    assert adapt.target_accept == 0.65
    state = adapt.init(energy, torch.zeros(32, 2))
    g1, g2 = torch.Generator().manual_seed(3), torch.Generator().manual_seed(3)
    new, info = adapt.step(energy, state, generator=g1)
    ref, _ = kernel.step(energy, state, generator=g2)
    assert isinstance(info, HMCInfo)
    assert torch.equal(new.x, ref.x) and new.t == ref.t == 1
    assert not torch.equal(new.step_size, state.step_size)


def test_warmed_up_state_step_size_stays_frozen_and_cache_is_fresh():
    energy = mixture_energy()
    kernel = MALA(step_size=0.1)
    g = torch.Generator().manual_seed(4)
    state = warmup(kernel, energy, broad_start(64, 1, g), 50, generator=g)
    assert state.t == 50
    eps = state.step_size.clone()
    for _ in range(10):
        state, _ = kernel.step(energy, state, generator=g)
    assert torch.equal(state.step_size, eps)
    e, grad = energy_and_grad(energy, state.x)
    torch.testing.assert_close(state.energy, e)
    torch.testing.assert_close(state.grad, grad)


def test_warmup_continues_from_a_chain_state_and_counts_its_steps():
    energy = gaussian_energy()
    kernel = MALA(step_size=0.1)
    g = torch.Generator().manual_seed(5)
    state = kernel.run(energy, torch.zeros(16, 2), 7, generator=g).state
    warm = warmup(kernel, energy, state, 20, generator=g)
    assert warm.t == 27


def test_warmup_same_seed_same_result():
    energy = gaussian_energy()
    x0 = torch.zeros(16, 2)
    a = warmup(MALA(step_size=0.1), energy, x0, 20, generator=torch.Generator().manual_seed(6))
    b = warmup(MALA(step_size=0.1), energy, x0, 20, generator=torch.Generator().manual_seed(6))
    assert torch.equal(a.x, b.x) and torch.equal(a.step_size, b.step_size)


@pytest.mark.parametrize(
    ("make", "exc", "match"),
    [
        (lambda: StepSizeAdaptation(MALA(), 1.5), ValueError, r"target_accept: .* in \(0, 1\); got 1\.5"),
        (lambda: StepSizeAdaptation(MALA(), 0.0), ValueError, r"target_accept: .* in \(0, 1\); got 0\.0"),
        (lambda: StepSizeAdaptation(ULA()), TypeError, r"kernel: expected a Metropolis-adjusted kernel .* got ULA"),
        (lambda: StepSizeAdaptation(SGLD()), TypeError, r"kernel: expected a Metropolis-adjusted kernel .* got SGLD"),
        (lambda: StepSizeAdaptation("mala"), TypeError, r"kernel: expected an ebms.samplers.Sampler; got str"),
        (
            lambda: StepSizeAdaptation(StepSizeAdaptation(MALA())),
            TypeError,
            r"kernel: expected an unwrapped kernel; got a StepSizeAdaptation",
        ),
        (lambda: StepSizeAdaptation(MALA(), decay=0.5), ValueError, r"decay: .* \(0\.5, 1\].*got 0\.5"),
        (lambda: StepSizeAdaptation(MALA(), gain=-1), ValueError, r"gain: expected a finite number > 0; got -1"),
        (lambda: StepSizeAdaptation(MALA(), per_chain=1), TypeError, r"per_chain: expected a bool; got 1"),
    ],
)
def test_adaptation_bad_arguments_messages_name_argument_and_value(make, exc, match):
    with pytest.raises(exc, match=match):
        make()


def test_adaptation_without_default_target_asks_for_one():
    class Custom(MALA):
        default_target_accept = None

    msg = r"target_accept: expected a number in \(0, 1\) \(no default for Custom\); got None"
    with pytest.raises(ValueError, match=msg):
        StepSizeAdaptation(Custom())


def test_warmup_bad_steps_message():
    with pytest.raises(ValueError, match=r"steps: expected an int >= 1; got 0"):
        warmup(MALA(), gaussian_energy(), torch.zeros(4, 2), 0)


def test_adaptation_state_carries_progress_and_freezes_to_plain_chain_state():
    energy = gaussian_energy()
    adapt = StepSizeAdaptation(MALA(step_size=0.1), per_chain=True)
    state = adapt.init(energy, torch.zeros(8, 2))
    assert type(state).__name__ == "StepSizeAdaptationState"
    assert torch.equal(state.frozen().step_size, state.step_size)  # nothing averaged yet
    g = torch.Generator().manual_seed(7)
    for _ in range(30):
        state, _ = adapt.step(energy, state, generator=g)
    assert state.adapt_steps == 30 and state.t == 30
    assert state.step_size.shape == state.sign_changes.shape == state.n_averaged.shape == (8,)
    frozen = state.frozen()
    assert type(frozen).__name__ == "ChainState"
    averaged = state.n_averaged > 0
    expected = torch.exp(state.log_step_sum / state.n_averaged.clamp_min(1))
    torch.testing.assert_close(frozen.step_size[averaged], expected[averaged])


def test_adaptation_refuses_kernel_that_drops_state_fields():
    from ebms.samplers import ChainState

    class Forgetful(MALA):
        def step(self, energy, state, *, generator=None):
            new, info = super().step(energy, state, generator=generator)
            return ChainState(x=new.x, energy=new.energy, grad=new.grad, step_size=new.step_size, t=new.t), info

    adapt = StepSizeAdaptation(Forgetful())
    state = adapt.init(gaussian_energy(), torch.zeros(4, 2))
    with pytest.raises(TypeError, match=r"kernel.step: expected it to return state.replace\(...\) .* got a ChainState"):
        adapt.step(gaussian_energy(), state)
