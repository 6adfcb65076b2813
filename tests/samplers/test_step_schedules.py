"""Step-size schedules: exact values, validation, and their effect inside ULA/SGLD."""

from __future__ import annotations

import math

import pytest
import torch

from ebms.energy import from_fn
from ebms.samplers import SGLD, ULA
from ebms.samplers.schedules import Constant, CosineAnnealing, ExponentialDecay, LinearAnnealing, PolynomialDecay


@pytest.mark.parametrize(
    ("schedule", "t", "expected"),
    [
        (Constant(2.5), 0, 2.5),
        (Constant(2.5), 1000, 2.5),
        (PolynomialDecay(a=2.0, b=3.0, gamma=1.0), 0, 2.0 / 3.0),
        (PolynomialDecay(a=2.0, b=3.0, gamma=1.0), 5, 2.0 / 8.0),
        (PolynomialDecay(a=1.0, b=1.0, gamma=0.55), 99, 100.0**-0.55),
        (ExponentialDecay(0.5), 3, 0.125),
        (ExponentialDecay(0.5, minimum=0.2), 3, 0.2),
        (CosineAnnealing(10), 0, 1.0),
        (CosineAnnealing(10), 5, 0.5),
        (CosineAnnealing(10, final=0.2), 10, 0.2),
        (CosineAnnealing(10, final=0.2), 50, 0.2),
        (CosineAnnealing(4), 1, 0.5 * (1 + math.cos(math.pi / 4))),
        (LinearAnnealing(4), 1, 0.75),
        (LinearAnnealing(4, final=0.2), 2, 0.6),
        (LinearAnnealing(4, final=0.2), 9, 0.2),
    ],
)
def test_schedule_values_match_formula(schedule, t, expected):
    assert schedule(t) == pytest.approx(expected, rel=1e-12)


@pytest.mark.parametrize(
    "schedule",
    [PolynomialDecay(b=10.0, gamma=0.7), ExponentialDecay(0.99), CosineAnnealing(50), LinearAnnealing(50)],
    ids=repr,
)
def test_decaying_schedules_never_increase(schedule):
    values = [schedule(t) for t in range(80)]
    assert all(b <= a for a, b in zip(values, values[1:], strict=False))


def test_polynomial_decay_satisfies_robbins_monro_partial_sums():
    """gamma = 0.6: partial sums of eps_t grow like T^0.4 (unbounded), of eps_t^2 stay below zeta(1.2)."""
    s = PolynomialDecay(gamma=0.6)
    steps = torch.tensor([s(t) for t in range(20000)], dtype=torch.float64)
    assert float(steps.sum()) > (20001**0.4 - 1) / 0.4  # integral lower bound
    assert float((steps**2).sum()) < 5.5916  # below zeta(1.2) = 5.59158...


def test_ula_schedule_scales_the_step_per_iteration():
    """LinearAnnealing(2, final=0): step t=0 full, t=1 half, t>=2 zero -> the chain stops."""
    energy = from_fn(lambda x: 0.5 * (x * x).sum(-1))
    sampler = ULA(step_size=0.1, schedule=LinearAnnealing(2, final=0.0))
    g = torch.Generator().manual_seed(0)
    state = sampler.init(energy, torch.ones(6, 1))
    xs = [state.x]
    for _ in range(5):
        state, _ = sampler.step(energy, state, generator=g)
        xs.append(state.x)
    assert not torch.equal(xs[1], xs[0]) and not torch.equal(xs[2], xs[1])
    assert all(torch.equal(xs[i], xs[2]) for i in range(3, 6))
    assert float(state.step_size) == pytest.approx(0.1)  # the state's base step is untouched


def test_sgld_schedule_matches_manual_step_sizes():
    """SGLD with a schedule equals SGLD whose base step is changed by hand each step."""
    energy = from_fn(lambda x: 0.5 * (x * x).sum(-1))
    schedule = ExponentialDecay(0.5)
    x0 = torch.linspace(-2, 2, 8)[:, None]
    with_schedule = SGLD(step_size=0.2, noise_scale=0.1, schedule=schedule)
    manual = SGLD(step_size=0.2, noise_scale=0.1)
    g1, g2 = torch.Generator().manual_seed(1), torch.Generator().manual_seed(1)
    a = with_schedule.init(energy, x0)
    b = manual.init(energy, x0)
    for t in range(4):
        a, _ = with_schedule.step(energy, a, generator=g1)
        b, _ = manual.step(energy, b.replace(step_size=torch.tensor(0.2 * schedule(t))), generator=g2)
    torch.testing.assert_close(a.x, b.x)


@pytest.mark.parametrize(
    ("make", "exc", "match"),
    [
        (lambda: Constant(0.0), ValueError, r"value: expected a finite number > 0; got 0\.0"),
        (lambda: PolynomialDecay(gamma=0.5), ValueError, r"gamma: expected a number in \(0\.5, 1\] .*got 0\.5"),
        (lambda: PolynomialDecay(gamma=1.5), ValueError, r"gamma: expected a number in \(0\.5, 1\] .*got 1\.5"),
        (lambda: PolynomialDecay(a=-1.0), ValueError, r"a: expected a finite number > 0; got -1\.0"),
        (lambda: PolynomialDecay(b=0.0), ValueError, r"b: expected a finite number > 0; got 0\.0"),
        (lambda: ExponentialDecay(1.5), ValueError, r"rate: expected a number in \(0, 1\]; got 1\.5"),
        (lambda: ExponentialDecay(0.9, minimum=-1.0), ValueError, r"minimum: expected a finite number >= 0; got -1\.0"),
        (lambda: CosineAnnealing(0), ValueError, r"total_steps: expected an int >= 1; got 0"),
        (lambda: CosineAnnealing(10.0), TypeError, r"total_steps: expected an int; got 10\.0"),
        (lambda: LinearAnnealing(10, final=1.5), ValueError, r"final: expected a multiplier in \[0, 1\]; got 1\.5"),
        (lambda: LinearAnnealing(10)(-1), ValueError, r"t: expected a step index int >= 0; got -1"),
    ],
)
def test_schedule_bad_arguments_messages_name_argument_and_value(make, exc, match):
    with pytest.raises(exc, match=match):
        make()
