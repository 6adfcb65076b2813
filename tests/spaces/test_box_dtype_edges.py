"""Box bounds as the tensor's dtype holds them: a point at the edge, drawn or clamped in float32,
passes the box's own check (``-3.4`` is ``-3.4000000953674316`` in float32, outside the float64
bound ``-3.4``: about one ``ebms sample`` call in 4,000 used to fail its own ``x0`` check)."""

from __future__ import annotations

import math

import pytest
import torch

from ebms.energy import from_fn
from ebms.samplers import MALA, ULA
from ebms.spaces import Box

# bounds that float32 cannot hold exactly (0.1, 3.4, 0.7, the CLI's -3.4000000000000004) and one it can
BOUNDS = [(-3.4000000000000004, 3.4000000000000004), (-3.4, 3.4), (-0.1, 0.1), (0.1, 0.7), (-1.0, 1.0)]
DTYPES = [torch.float32, torch.float64, torch.float16, torch.bfloat16]


def _quadratic():
    return from_fn(lambda x: 0.5 * (x**2).sum(-1))


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize(("low", "high"), BOUNDS)
def test_box_accepts_its_edges_as_each_dtype_rounds_them(low, high, dtype):
    box = Box(2, low, high)
    x = torch.tensor([[low, high], [high, low]], dtype=dtype)  # the bounds, stored by the dtype
    assert box.validate(x) is x
    assert torch.equal(box.project(x), x)  # already inside: projection changes nothing
    assert box.bounds(dtype) == (float(x[0, 0]), float(x[0, 1]))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize(("low", "high"), BOUNDS)
def test_box_rejects_the_next_value_beyond_either_rounded_edge(low, high, dtype):
    box = Box(1, low, high)
    lo, hi = torch.tensor(low, dtype=dtype), torch.tensor(high, dtype=dtype)
    below = torch.nextafter(lo, torch.tensor(-math.inf, dtype=dtype))
    above = torch.nextafter(hi, torch.tensor(math.inf, dtype=dtype))
    with pytest.raises(ValueError, match=rf"x: expected values in \[{low}, {high}\]; got min .*\({dtype}\)"):
        box.validate(torch.stack([below, hi]).reshape(2, 1))
    with pytest.raises(ValueError, match=r"x: expected values in "):
        box.validate(torch.stack([lo, above]).reshape(2, 1))
    # projection lands on the rounded edges, which validate accepts
    out = box.project(torch.stack([below, above]).reshape(2, 1))
    assert out.flatten().tolist() == [float(lo), float(hi)]
    box.validate(out)


def test_the_message_shows_the_value_as_the_tensor_holds_it():
    box = Box(2, -3.4, 3.4)
    bad = torch.tensor([[-3.4000003, 0.0]])  # one float32 step beyond float32's -3.4
    with pytest.raises(ValueError, match=r"x: expected values in \[-3.4, 3.4\]; got min -3.4000003, max 0 \(torch.float32\)"):
        box.validate(bad)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize(("low", "high"), BOUNDS)
def test_edge_draws_of_box_random_pass_the_samplers_own_box_check(low, high, dtype, monkeypatch):
    """u = 0 and the largest uniform below 1 (the two draws that land on the edges), constructed exactly."""
    box = Box(2, low, high)
    top = 1.0 - torch.finfo(dtype).eps / 2  # largest value torch.rand returns in dtype
    real_rand = torch.rand

    def edge_rand(shape, *, generator=None, device=None, dtype=torch.float32):
        u = real_rand(shape, generator=generator, device=device, dtype=dtype)
        u[0::2] = 0.0
        u[1::2] = top
        return u

    monkeypatch.setattr(torch, "rand", edge_rand)
    x0 = box.random(4, generator=torch.Generator().manual_seed(0), dtype=dtype)
    monkeypatch.undo()
    lo_d, hi_d = box.bounds(dtype)
    assert x0[0].tolist() == [lo_d, lo_d] and float(x0.max()) <= hi_d
    for kernel in (ULA(0.01, space=box), MALA(0.01, space=box)):
        state = kernel.init(_quadratic(), x0)  # validates x0 against the box
        assert torch.equal(state.x, x0)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_random_and_project_stay_within_the_rounded_bounds(dtype):
    box = Box(3, -0.1, 0.7)
    x = box.random(20000, generator=torch.Generator().manual_seed(0), dtype=dtype)
    lo_d, hi_d = box.bounds(dtype)
    assert x.dtype == dtype and float(x.min()) >= lo_d and float(x.max()) <= hi_d
    box.validate(x)
    far = torch.tensor([[-5.0, 0.3, 9.0]], dtype=dtype)
    assert box.project(far).tolist() == [[lo_d, float(torch.tensor(0.3, dtype=dtype)), hi_d]]


def test_box_arguments_are_checked_with_messages_naming_them():
    with pytest.raises(ValueError, match=r"low, high: expected finite bounds; got low=-inf, high=1.0"):
        Box(2, -math.inf, 1.0)
    with pytest.raises(ValueError, match=r"low, high: expected finite bounds; got low=nan"):
        Box(2, math.nan, 1.0)
    with pytest.raises(TypeError, match=r"low, high: expected numbers; got low='a', high=1.0"):
        Box(2, "a", 1.0)
    with pytest.raises(ValueError, match=r"dtype: the box \[-60000.0, 60000.0\] is wider than torch.float16 can hold"):
        Box(2, -60000.0, 60000.0).random(3, dtype=torch.float16)
    with pytest.raises(TypeError, match=r"dtype: expected a floating-point dtype for points of a Box; got torch.int64"):
        Box(2).random(3, dtype=torch.int64)
