"""ReplayBuffer(init=...): informative restarts, slot labels, unchanged draw order, projection, validation."""

from __future__ import annotations

import pytest
import torch

from ebms.distributions.class_gaussian import ClassConditionalGaussian
from ebms.objectives.buffer import ReplayBuffer
from ebms.spaces import Box, Reals


def test_init_drawing_like_the_space_reproduces_the_default_bit_for_bit():
    # the init is called exactly where space.random was: same generator stream, same buffer
    space = Box(3, -1.0, 1.0)
    a = ReplayBuffer(40, space, reinit_prob=0.3, n_classes=4)
    b = ReplayBuffer(40, space, reinit_prob=0.3, n_classes=4, init=lambda n, g, labels: space.random(n, generator=g))
    ga, gb = torch.Generator().manual_seed(0), torch.Generator().manual_seed(0)
    for step in range(6):
        labels = torch.tensor([step % 4, 1, 2, 3, 0])
        for buf, g in ((a, ga), (b, gb)):
            x, idx = buf.sample(5, g, labels=labels if step % 2 else None)
            buf.update(idx, 0.5 * x + 0.1 * step)
    assert torch.equal(a.data, b.data) and torch.equal(a.filled, b.filled)
    assert torch.equal(ga.get_state(), gb.get_state())


def test_init_gets_the_class_of_each_drawn_slot_or_none():
    seen = []

    def init(n, g, labels):
        seen.append(labels)
        base = torch.zeros(n, 1) if labels is None else labels.float()[:, None]
        return base + 0.01 * torch.randn(n, 1, generator=g)

    buf = ReplayBuffer(20, 1, reinit_prob=0.0, n_classes=5, init=init)
    x, idx = buf.sample(8, torch.Generator().manual_seed(1))  # drawn from all slots
    assert torch.equal(seen[-1], idx // 4)
    assert torch.all((x[:, 0] - (idx // 4).float()).abs() < 0.1)  # fresh slots took init's values
    labels = torch.tensor([4, 4, 0, 2])
    x, idx = buf.sample(4, torch.Generator().manual_seed(2), labels=labels)
    assert torch.equal(seen[-1], labels)
    ReplayBuffer(6, 1, init=init).sample(3, torch.Generator().manual_seed(3))
    assert seen[-1] is None


def test_init_is_drawn_every_call_but_only_used_for_restarted_slots():
    calls = []

    def init(n, g, labels):
        calls.append(n)
        return torch.full((n, 2), -0.5)

    buf = ReplayBuffer(10, Box(2, -1.0, 1.0), reinit_prob=0.0, init=init)
    buf.update(torch.arange(10), torch.full((10, 2), 0.25))
    x, _ = buf.sample(10, torch.Generator().manual_seed(0))
    assert calls == [10] and bool((x == 0.25).all())
    buf.reinit_prob = 1.0
    x, _ = buf.sample(10, torch.Generator().manual_seed(0))
    assert calls == [10, 10] and bool((x == -0.5).all())


def test_init_output_is_projected_into_the_space_and_cast_to_storage():
    buf = ReplayBuffer(4, Box(2, -1.0, 1.0), init=lambda n, g, lab: torch.full((n, 2), 3.0, dtype=torch.float64))
    x, _ = buf.sample(4, torch.Generator().manual_seed(0))
    assert x.dtype == torch.float32 and bool((x == 1.0).all())


def test_informative_init_reproduces_the_data_class_moments():
    # JEM++-style buffer: every fresh slot of block c is a draw from N(mu_c, Sigma_c) fitted on the data
    g = torch.Generator().manual_seed(0)
    C, D, per = 3, 4, 400
    x = torch.cat([torch.randn(per, D, generator=g) * (0.5 + c) + 2.0 * c for c in range(C)]).double()
    y = torch.arange(C).repeat_interleave(per)
    q = ClassConditionalGaussian.fit(x, y, shrinkage=0.0)
    cap = 3000
    buf = ReplayBuffer(cap, Reals(D), reinit_prob=1.0, n_classes=C, init=q.sample, dtype=torch.float64)
    draws, idx = buf.sample(cap, g)
    m = cap // C
    for c in range(C):
        rows = draws[idx // m == c]
        data = x[y == c]
        var = data.var(0)
        # difference of two independent sample means (m draws vs per data rows), z = 5 per coordinate
        se = (var / m + var / per).sqrt()
        assert rows.shape[0] == m and torch.all((rows.mean(0) - data.mean(0)).abs() < 5 * se)
        # variance: Var(s^2) ~ 2 sigma^4 / (n - 1) for Gaussian data, for both sides, z = 5
        se_var = (2 * var**2 / (m - 1) + 2 * var**2 / (per - 1)).sqrt()
        assert torch.all((rows.var(0) - var).abs() < 5 * se_var)


def test_init_validation_messages():
    with pytest.raises(TypeError, match=r"init: expected a callable \(n, generator, labels\) -> x or None; got int"):
        ReplayBuffer(4, 2, init=3)  # type: ignore[arg-type]
    g = torch.Generator().manual_seed(0)
    with pytest.raises(ValueError, match=r"init\(n, generator, labels\): expected shape \(3, 2\); got \(3, 1\)"):
        ReplayBuffer(4, 2, init=lambda n, g, lab: torch.zeros(n, 1)).sample(3, g)
    with pytest.raises(TypeError, match=r"init\(n, generator, labels\): expected a floating-point tensor; got dtype"):
        ReplayBuffer(4, 2, init=lambda n, g, lab: torch.zeros(n, 2, dtype=torch.long)).sample(3, g)
    with pytest.raises(TypeError, match=r"init\(n, generator, labels\): expected a torch.Tensor; got list"):
        ReplayBuffer(4, 2, init=lambda n, g, lab: [0.0]).sample(3, g)
    assert "init=" in repr(ReplayBuffer(4, 2, init=lambda n, g, lab: torch.zeros(n, 2)))
