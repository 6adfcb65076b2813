"""Shared argument checks: messages name the argument, the expectation and the value."""

import pytest
import torch

from ebms._checks import (
    check_bool,
    check_choice,
    check_energy_output,
    check_exactly_one,
    check_finite,
    check_in_range,
    check_int,
    check_positive,
    check_probability,
    check_shape,
    check_tensor,
)


def test_finite_check_counts_nan_and_inf():
    x = torch.zeros(3, 4)
    x[0, 0], x[1, 1], x[2, 2] = float("nan"), float("inf"), -float("inf")
    with pytest.raises(ValueError, match=r"x: expected a finite tensor; got 1 NaN and 2 Inf entries in shape \(3, 4\)"):
        check_finite(x, "x")


def test_finite_check_accepts_values_whose_sum_overflows():
    x = torch.full((4, 2), 3e38)  # each entry finite, the sum is +inf in float32
    assert check_finite(x, "x") is x


def test_finite_check_ignores_integer_and_empty_tensors():
    check_finite(torch.arange(3), "i")
    check_finite(torch.empty(0, 2), "e")


def test_shape_check_never_broadcasts_and_shows_wildcards():
    check_shape(torch.zeros(5, 2), (None, 2), "x")
    with pytest.raises(ValueError, match=r"x: expected shape \('\*', 2\); got \(5, 1\)"):
        check_shape(torch.zeros(5, 1), (None, 2), "x")


def test_scalar_checks_name_argument_and_value():
    with pytest.raises(ValueError, match=r"lr: expected a finite number > 0; got 0"):
        check_positive(0, "lr")
    with pytest.raises(TypeError, match=r"lr: expected a number; got 'a'"):
        check_positive("a", "lr")
    with pytest.raises(ValueError, match=r"p: expected a number in \(0, 1\]; got 0.0"):
        check_probability(0.0, "p", open_low=True)
    with pytest.raises(TypeError, match=r"n: expected an int; got True \(bool\)"):
        check_int(True, "n")
    with pytest.raises(ValueError, match=r"n: expected an int >= 1; got 0"):
        check_int(0, "n", minimum=1)
    with pytest.raises(ValueError, match=r"t: expected a number in \[0, 1\]; got 2"):
        check_in_range(2, "t", 0, 1)
    with pytest.raises(ValueError, match=r"expected exactly one of \(a, b\); got \['a', 'b'\]"):
        check_exactly_one(a=1, b=2)
    assert check_exactly_one(a=None, b=2) == "b"


def test_bool_check_takes_only_python_bools():
    assert check_bool(False, "flag") is False
    for value in (1, 0, "yes", None, torch.tensor(True)):
        with pytest.raises(TypeError, match=r"^flag: expected a bool; got "):
            check_bool(value, "flag")


def test_choice_check_lists_the_names_quoted():
    assert check_choice("mean", "reduction", ("mean", "sum")) == "mean"
    with pytest.raises(ValueError, match=r"^reduction: expected one of 'mean', 'sum'; got 'avg'$"):
        check_choice("avg", "reduction", ("mean", "sum"))


def test_tensor_and_energy_output_checks():
    with pytest.raises(TypeError, match=r"x: expected a torch.Tensor; got list"):
        check_tensor([1.0], "x")
    with pytest.raises(ValueError, match=r"x: expected at least 2 dimension\(s\) \(batch first\); got shape \(3,\)"):
        check_tensor(torch.zeros(3), "x", min_dim=2)
    with pytest.raises(ValueError, match=r"energy\(x\): expected shape \(4,\); got \(2, 2\)"):
        check_energy_output(torch.zeros(2, 2), 4)


def test_check_bool_mask_names_the_argument_and_passes_none():
    from ebms._checks import check_bool_mask

    assert check_bool_mask(None, (2, 2), "allowed") is None
    m = torch.ones(2, 2, dtype=torch.bool)
    assert check_bool_mask(m, (2, 2), "allowed") is m
    with pytest.raises(TypeError, match=r"allowed: expected a bool tensor of shape \(2, 2\); got dtype torch.float32"):
        check_bool_mask(torch.ones(2, 2), (2, 2), "allowed")
    with pytest.raises(ValueError, match=r"allowed: expected a bool tensor of shape \(2, 2\); got shape \(2,\)"):
        check_bool_mask(torch.ones(2, dtype=torch.bool), (2, 2), "allowed")
    with pytest.raises(TypeError, match="allowed: expected a torch.Tensor"):
        check_bool_mask([[True]], (1, 1), "allowed")


def test_check_representable_rejects_values_that_overflow_or_underflow_the_dtype():
    from ebms._checks import check_representable

    assert check_representable(1e308, "step_size", torch.float64) == 1e308
    assert check_representable(0.1, "step_size", torch.float32) == float(torch.tensor(0.1, dtype=torch.float32))
    assert check_representable(1e-45, "eps", torch.float32) > 0  # a float32 subnormal is still > 0
    assert check_representable(5.0, "n", torch.int64) == 5.0  # not a float dtype: nothing to check
    with pytest.raises(ValueError, match=r"step_size: 1e\+308 overflows to inf in torch.float32 \(largest finite value 3.403e\+38\); use a smaller step_size"):
        check_representable(1e308, "step_size", torch.float32)
    with pytest.raises(ValueError, match=r"noise: 70000.0 overflows to inf in torch.float16 \(largest finite value 6.55e\+04\)"):
        check_representable(7e4, "noise", torch.float16)
    with pytest.raises(ValueError, match=r"step_size: 1e-50 underflows to 0 in torch.float32 \(smallest positive value 1.175e-38\); use a larger step_size"):
        check_representable(1e-50, "step_size", torch.float32)
