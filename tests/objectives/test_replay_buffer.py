"""ReplayBuffer: re-initialisation rate, write-back, per-class slots, checkpoint round-trip, validation."""

from __future__ import annotations

import math

import pytest
import torch

from ebms.objectives import ReplayBuffer
from ebms.spaces import Box, Reals


def _filled(capacity=1000, value=5.0, **kw) -> ReplayBuffer:
    buf = ReplayBuffer(capacity, Box(2, -1.0, 1.0), **kw)
    buf.update(torch.arange(capacity), torch.full((capacity, 2), value))
    return buf


def test_unwritten_slots_always_start_fresh():
    buf = ReplayBuffer(50, Box(3, -1.0, 1.0), reinit_prob=0.0)
    x, idx = buf.sample(50, torch.Generator().manual_seed(0))
    assert x.shape == (50, 3) and idx.shape == (50,)
    assert x.abs().max() <= 1.0 and x.std() > 0.3
    assert sorted(idx.tolist()) == list(range(50))  # without replacement


def test_reinit_fraction_matches_reinit_prob():
    p, n, calls = 0.05, 1000, 20
    buf = _filled(n, reinit_prob=p)
    g = torch.Generator().manual_seed(0)
    fresh = 0
    for _ in range(calls):
        x, _ = buf.sample(n, g)
        fresh += int((x != 5.0).all(-1).sum())  # Box(-1, 1) draws can never equal the stored 5.0
    total = n * calls
    se = math.sqrt(p * (1 - p) / total)  # binomial standard error
    assert abs(fresh / total - p) < 4 * se  # z = 4


def test_zero_and_one_reinit_prob_are_exact():
    x, _ = _filled(100, reinit_prob=0.0).sample(100, torch.Generator().manual_seed(0))
    assert bool((x == 5.0).all())
    x, _ = _filled(100, reinit_prob=1.0).sample(100, torch.Generator().manual_seed(0))
    assert bool((x.abs() <= 1.0).all())


def test_update_writes_back_and_sample_returns_a_copy():
    buf = ReplayBuffer(20, 2, reinit_prob=0.0)
    g = torch.Generator().manual_seed(1)
    x, idx = buf.sample(5, g)
    buf.update(idx, x + 1.0)
    torch.testing.assert_close(buf.data[idx], x + 1.0)
    assert bool(buf.filled[idx].all()) and int(buf.filled.sum()) == 5
    x2, _ = buf.sample(20, g)
    x2.add_(100.0)  # mutating the returned tensor leaves the storage alone
    torch.testing.assert_close(buf.data[idx], x + 1.0)


def test_shape_argument_means_reals_with_standard_normal_init():
    buf = ReplayBuffer(4000, (2,), reinit_prob=1.0)
    assert isinstance(buf.space, Reals) and buf.event_shape == (2,)
    x, _ = buf.sample(4000, torch.Generator().manual_seed(0))
    se = 1 / math.sqrt(4000)
    assert torch.all(x.mean(0).abs() < 4 * se)  # z = 4 on each coordinate's mean


def test_per_class_sampling_returns_only_that_classes_slots():
    C, cap = 4, 40
    buf = ReplayBuffer(cap, 1, reinit_prob=0.0, n_classes=C)
    slots = torch.arange(cap)
    buf.update(slots, buf.slot_labels().float()[:, None])  # slot value = its class
    labels = torch.tensor([0, 3, 3, 1, 2, 3, 0, 3])
    x, idx = buf.sample(8, torch.Generator().manual_seed(0), labels=labels)
    assert torch.equal(idx // buf.slots_per_class, labels)
    assert torch.equal(x[:, 0], labels.float())
    assert idx.unique().numel() == 8
    # a whole class block can be drawn at once, and each slot appears once
    x, idx = buf.sample(10, torch.Generator().manual_seed(1), labels=torch.full((10,), 2))
    assert sorted(idx.tolist()) == list(range(20, 30))


def test_state_dict_round_trip_restores_contents():
    buf = ReplayBuffer(30, Box(2, -1.0, 1.0))
    g = torch.Generator().manual_seed(2)
    x, idx = buf.sample(12, g)
    buf.update(idx, 0.5 * x)
    sd = buf.state_dict()
    assert set(sd) == {"data", "filled"}
    other = ReplayBuffer(30, Box(2, -1.0, 1.0))
    other.load_state_dict(sd)
    assert torch.equal(other.data, buf.data) and torch.equal(other.filled, buf.filled)
    a = buf.sample(12, torch.Generator().manual_seed(9))
    b = other.sample(12, torch.Generator().manual_seed(9))
    assert torch.equal(a[0], b[0]) and torch.equal(a[1], b[1])


# -- validation ---------------------------------------------------------------------------
@pytest.mark.parametrize(
    "kwargs,exc,msg",
    [
        (dict(capacity=0), ValueError, "capacity: expected an int >= 1; got 0"),
        (dict(capacity=2.5), TypeError, r"capacity: expected an int; got 2.5"),
        (dict(reinit_prob=1.5), ValueError, r"reinit_prob: expected a number in \[0, 1\]; got 1.5"),
        (dict(n_classes=3), ValueError, "n_classes: expected a divisor of capacity=10 .*; got 3"),
        (dict(n_classes=0), ValueError, "n_classes: expected an int >= 1; got 0"),
        (dict(space="image"), TypeError, "space: expected an ebms.spaces.Space or an event shape .*; got 'image'"),
        (dict(dtype=torch.long), TypeError, "dtype: expected a floating-point torch.dtype; got torch.int64"),
    ],
)
def test_bad_constructor_arguments(kwargs, exc, msg):
    args = dict(capacity=10, space=2)
    args.update(kwargs)
    with pytest.raises(exc, match=msg):
        ReplayBuffer(args.pop("capacity"), args.pop("space"), **args)


def test_bad_update_arguments():
    buf = ReplayBuffer(10, 2)
    with pytest.raises(ValueError, match=r"x: expected shape \(2, 2\); got \(2, 3\)"):
        buf.update(torch.tensor([0, 1]), torch.zeros(2, 3))
    with pytest.raises(ValueError, match=r"idx: expected slot indices in \[0, 9\]; got min 0, max 10"):
        buf.update(torch.tensor([0, 10]), torch.zeros(2, 2))
    with pytest.raises(ValueError, match="idx: expected distinct slot indices; got 1 duplicate"):
        buf.update(torch.tensor([3, 3]), torch.zeros(2, 2))
    with pytest.raises(TypeError, match="idx: expected a LongTensor of slot indices; got dtype torch.float32"):
        buf.update(torch.tensor([0.0, 1.0]), torch.zeros(2, 2))
    with pytest.raises(ValueError, match="x: expected finite chain positions"):
        buf.update(torch.tensor([0, 1]), torch.tensor([[0.0, float("nan")], [0.0, 0.0]]))
    assert not bool(buf.filled.any())  # nothing was written by the failed calls


def test_bad_sample_arguments():
    buf = ReplayBuffer(8, 2, n_classes=2)
    g = torch.Generator().manual_seed(0)
    with pytest.raises(ValueError, match="n: expected an int >= 1; got 0"):
        buf.sample(0, g)
    with pytest.raises(ValueError, match=r"n: expected at most capacity=8 \(sampling without replacement\); got 9"):
        buf.sample(9, g)
    with pytest.raises(ValueError, match=r"labels: expected values in \[0, 1\]; got min 0, max 2"):
        buf.sample(2, g, labels=torch.tensor([0, 2]))
    with pytest.raises(ValueError, match=r"labels: expected shape \(3,\); got \(2,\)"):
        buf.sample(3, g, labels=torch.tensor([0, 1]))
    with pytest.raises(TypeError, match="labels: expected a LongTensor; got dtype torch.float32"):
        buf.sample(2, g, labels=torch.tensor([0.0, 1.0]))
    with pytest.raises(ValueError, match="labels: at most slots_per_class=4 rows per class .* got 5 rows"):
        buf.sample(5, g, labels=torch.zeros(5, dtype=torch.long))
    with pytest.raises(ValueError, match="labels: this buffer has no classes"):
        ReplayBuffer(8, 2).sample(2, g, labels=torch.tensor([0, 1]))
