"""PCD restarts in a Box: a replay-buffer restart that lands on the box's edge in float32 passes the
sampler's own box check (it used to fail about once in 4,000 default runs: ``-3.4`` in float32 is
below the float64 bound ``-3.4``)."""

from __future__ import annotations

import torch

from ebms.energy import from_fn
from ebms.objectives.buffer import ReplayBuffer
from ebms.samplers import SGLD
from ebms.spaces import Box


def test_restarted_slots_on_the_edge_of_a_float32_box_start_the_sampler(monkeypatch):
    box = Box(2, -3.4000000000000004, 3.4000000000000004)  # the CLI's box of the toy data
    buf = ReplayBuffer(8, box, reinit_prob=1.0)
    real_rand = torch.rand

    def edge_rand(*shape, generator=None, device=None, dtype=torch.float32):
        u = real_rand(*shape, generator=generator, device=device, dtype=dtype)
        if u.dim() == 3 or (u.dim() == 2 and u.shape[1] == 2):  # the restart points, not the coins
            u[0::2] = 0.0
            u[1::2] = 1.0 - torch.finfo(dtype).eps / 2
        return u

    monkeypatch.setattr(torch, "rand", edge_rand)
    x0, idx = buf.sample(4, torch.Generator().manual_seed(0))
    monkeypatch.undo()
    assert x0.dtype == torch.float32 and float(x0[0].min()) == float(torch.tensor(box.low, dtype=torch.float32))
    sampler = SGLD(0.01, 0.01, space=box)
    x = sampler.sample(from_fn(lambda v: 0.5 * (v**2).sum(-1)), x0, steps=2, generator=torch.Generator().manual_seed(1))
    box.validate(x)
    buf.update(idx, x)
    box.validate(buf.data)
    # float64 chains on the float64 edges, stored as float32, round to the edges as float32 holds them
    edges = torch.tensor([[box.low, box.high]] * 4, dtype=torch.float64)
    buf.update(idx, edges)
    assert float(buf.data[idx].min()) < box.low  # below -3.4000000000000004 in float64 ...
    box.validate(buf.data)  # ... and inside the box as float32 holds it
    buf.reinit_prob = 0.0  # the written slots come back as stored
    again, _ = buf.sample(8, torch.Generator().manual_seed(2))
    sampler.init(from_fn(lambda v: 0.5 * (v**2).sum(-1)), again)
