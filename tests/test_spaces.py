"""Sample spaces: validation, random starts and projection."""

import pytest
import torch

from ebms.spaces import Box, Reals


def test_box_random_points_lie_inside_and_project_clamps():
    b = Box(3, low=-1.0, high=2.0)
    x = b.random(1000, generator=torch.Generator().manual_seed(0))
    assert x.shape == (1000, 3) and float(x.min()) >= -1.0 and float(x.max()) <= 2.0
    y = b.project(torch.tensor([[-5.0, 0.5, 9.0]]))
    assert y.tolist() == [[-1.0, 0.5, 2.0]]


def test_reals_random_is_seeded_and_projection_is_identity():
    r = Reals((2, 2))
    a = r.random(4, generator=torch.Generator().manual_seed(1))
    b = r.random(4, generator=torch.Generator().manual_seed(1))
    assert torch.equal(a, b) and a.shape == (4, 2, 2)
    assert torch.equal(r.project(a), a)


def test_space_validation_messages_name_argument_and_value():
    b = Box(2)
    with pytest.raises(ValueError, match=r"x: expected shape \(B, 2\); got \(4, 3\)"):
        b.validate(torch.zeros(4, 3))
    with pytest.raises(ValueError, match=r"x: expected values in \[-1.0, 1.0\]; got min -3, max 0"):
        b.validate(torch.tensor([[-3.0, 0.0]]))
    with pytest.raises(ValueError, match=r"x: expected a finite tensor; got 1 NaN"):
        Reals(2).validate(torch.tensor([[float("nan"), 0.0]]))
    with pytest.raises(TypeError, match=r"x: expected a floating-point tensor; got dtype torch.int64"):
        Reals(2).validate(torch.zeros(2, 2, dtype=torch.long))
    with pytest.raises(ValueError, match=r"low, high: expected low < high; got low=1.0, high=1.0"):
        Box(2, 1.0, 1.0)
    with pytest.raises(ValueError, match=r"event_shape: expected positive ints; got \(0,\)"):
        Reals((0,))
