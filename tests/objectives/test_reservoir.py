"""ReservoirBuffer: algorithm R writes, inclusion probability, exact resume."""

from __future__ import annotations

import math

import pytest
import torch

from ebms.nets.gaussian import GaussianEnergy
from ebms.objectives.cd import PersistentContrastiveDivergence
from ebms.objectives.reservoir import ReservoirBuffer
from ebms.samplers.langevin import ULA


def _reference_algorithm_r(capacity: int, offers: list[float], u: list[float]) -> list[float | None]:
    """Sequential algorithm R on scalar offers, with the given uniforms (one per offer)."""
    store: list[float | None] = [None] * capacity
    for s, (value, ui) in enumerate(zip(offers, u), start=1):
        j = s - 1 if s <= capacity else math.floor(ui * s)
        if j < capacity:
            store[j] = value
    return store


def test_writes_match_sequential_algorithm_r_with_the_same_uniforms() -> None:
    M = 5
    buf = ReservoirBuffer(M, 1, dtype=torch.float64)
    g = torch.Generator().manual_seed(0)
    offers: list[float] = []
    uniforms: list[float] = []
    value = 0.0
    for n in [3, 4, 1, 5, 5, 2, 5, 4]:
        _, idx = buf.sample(n, g)
        x = (value + torch.arange(n, dtype=torch.float64)).reshape(n, 1)
        uniforms += torch.rand(n, generator=torch.Generator().set_state(g.get_state()), dtype=torch.float64).tolist()
        buf.update(idx, x)
        offers += x.squeeze(1).tolist()
        value += n
    want = _reference_algorithm_r(M, offers, uniforms)
    assert buf.data.squeeze(1).tolist() == want
    assert int(buf.seen) == len(offers)
    assert bool(buf.filled.all())


def test_first_capacity_offers_fill_the_slots_in_order() -> None:
    buf = ReservoirBuffer(6, 1)
    g = torch.Generator().manual_seed(1)
    _, idx = buf.sample(4, g)
    buf.update(idx, torch.arange(4.0).reshape(4, 1))
    assert buf.filled.tolist() == [True] * 4 + [False] * 2
    assert buf.data[:4].squeeze(1).tolist() == [0.0, 1.0, 2.0, 3.0]


def test_every_offered_sample_is_kept_with_probability_capacity_over_seen() -> None:
    M, batches, n, trials = 10, 10, 4, 1500
    N = batches * n
    p = M / N
    counts = torch.zeros(N)
    g = torch.Generator().manual_seed(2024)
    for _ in range(trials):
        buf = ReservoirBuffer(M, 1, reinit_prob=0.0)
        for b in range(batches):
            _, idx = buf.sample(n, g)
            buf.update(idx, (b * n + torch.arange(n, dtype=torch.float32)).reshape(n, 1))
        counts[buf.data.squeeze(1).long()] += 1
    assert int(counts.sum()) == trials * M
    # independent trials: count ~ Binomial(trials, p); z = 4.5 per sample, two-sided
    # (per-sample failure 7e-6, family of 40 samples < 3e-4)
    se = math.sqrt(trials * p * (1 - p))
    z = (counts - trials * p).abs() / se
    assert float(z.max()) < 4.5, z


def test_update_draws_from_the_generator_of_the_last_sample_call() -> None:
    a, b = ReservoirBuffer(2, 1), ReservoirBuffer(2, 1)
    ga, gb = torch.Generator().manual_seed(5), torch.Generator().manual_seed(5)
    for buf, g in ((a, ga), (b, gb)):
        for step in range(4):
            _, idx = buf.sample(2, g)
            buf.update(idx, torch.full((2, 1), float(step)) + torch.tensor([[0.0], [0.5]]))
    assert torch.equal(a.data, b.data)
    assert torch.equal(ga.get_state(), gb.get_state())
    explicit = torch.Generator().manual_seed(9)
    before = explicit.get_state()
    _, idx = a.sample(2, ga)
    a.update(idx, torch.zeros(2, 1), generator=explicit)
    assert not torch.equal(explicit.get_state(), before)


def test_state_dict_resumes_bit_for_bit() -> None:
    def run(buf: ReservoirBuffer, g: torch.Generator, steps: range) -> None:
        for s in steps:
            x0, idx = buf.sample(3, g)
            buf.update(idx, x0 + s)

    full = ReservoirBuffer(5, 2)
    g = torch.Generator().manual_seed(3)
    run(full, g, range(8))

    first = ReservoirBuffer(5, 2)
    g1 = torch.Generator().manual_seed(3)
    run(first, g1, range(4))
    resumed = ReservoirBuffer(5, 2)
    resumed.load_state_dict(first.state_dict())
    g2 = torch.Generator().set_state(g1.get_state())
    run(resumed, g2, range(4, 8))
    assert torch.equal(resumed.data, full.data)
    assert int(resumed.seen) == int(full.seen) == 24
    assert "seen" in first.state_dict()


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_pcd_trains_with_a_reservoir_buffer(dtype: torch.dtype) -> None:
    buf = ReservoirBuffer(16, 2, dtype=dtype)
    pcd = PersistentContrastiveDivergence(ULA(0.05), buf, k=3)
    model = GaussianEnergy(2).to(dtype)
    g = torch.Generator().manual_seed(0)
    for _ in range(3):
        out = pcd(model, torch.randn(4, 2, generator=g, dtype=dtype), generator=g)
        out.loss.backward()
    assert int(buf.seen) == 12
    assert buf.data.dtype == dtype


def test_bad_arguments_name_themselves() -> None:
    with pytest.raises(ValueError, match="n_classes: a ReservoirBuffer has no per-class blocks"):
        ReservoirBuffer(4, 1, n_classes=2)
    buf = ReservoirBuffer(4, 2)
    _, idx = buf.sample(2, torch.Generator().manual_seed(0))
    with pytest.raises(TypeError, match="idx: expected a LongTensor of slot indices; got dtype torch.int32"):
        buf.update(idx.int(), torch.zeros(2, 2))
    with pytest.raises(ValueError, match=r"idx: expected shape \(n,\) with n >= 1; got \(0,\)"):
        buf.update(idx[:0], torch.zeros(0, 2))
    with pytest.raises(ValueError, match=r"x: expected shape \(2, 2\); got \(2, 3\)"):
        buf.update(idx, torch.zeros(2, 3))
    with pytest.raises(ValueError, match=r"idx: expected slot indices in \[0, 3\]; got min 0, max 4"):
        buf.update(torch.tensor([0, 4]), torch.zeros(2, 2))
    with pytest.raises(ValueError, match="idx: expected distinct slot indices; got 1 duplicate"):
        buf.update(torch.tensor([1, 1]), torch.zeros(2, 2))
    with pytest.raises(ValueError, match="x: expected finite chain positions"):
        buf.update(idx, torch.full((2, 2), float("nan")))
    with pytest.raises(TypeError, match="x: expected a floating-point tensor"):
        buf.update(idx, torch.zeros(2, 2, dtype=torch.long))
    assert int(buf.seen) == 0
