"""Test log-likelihood reports: the standard-error formula, brackets, validation."""

import math

import pytest
import torch

from ebms.energy import from_fn
from ebms.estimators import Estimate
from ebms.estimators.likelihood import LogLikelihoodReport, log_likelihood_report
from ebms.spaces import Binary

_SUM = from_fn(lambda x: x.sum(-1))


def test_report_matches_hand_computed_mean_stderr_and_bracket():
    # energies 1, 2, 3, 6: mean 3, sample variance ((-2)^2 + 1 + 0 + 3^2) / 3 = 14/3
    x = torch.tensor([[1.0], [2.0], [3.0], [6.0]])
    log_z = Estimate(2.0, 0.5, lower=1.5, upper=2.7, settings={"method": "ais bracket"})
    rep = log_likelihood_report(_SUM, x, log_z)
    assert isinstance(rep, LogLikelihoodReport)
    assert rep.estimate == pytest.approx(-5.0)
    assert rep.stderr == pytest.approx(math.sqrt(14 / 3 / 4 + 0.25))
    assert rep.lower == pytest.approx(-5.7) and rep.upper == pytest.approx(-4.5)
    text = str(rep)
    assert text.startswith("-5.00 ± 1.19 nats (n=4; AIS/reverse-AIS log Z bracket [1.50, 2.70]")
    assert "LL in [-5.70, -4.50]" in text


def test_exact_log_z_leaves_only_the_test_set_error():
    x = torch.tensor([[0.0, 1.0], [1.0, 1.0], [0.0, 0.0]])
    rep = log_likelihood_report(_SUM, x, 3.0)
    e = torch.tensor([1.0, 2.0, 0.0], dtype=torch.float64)
    assert rep.estimate == pytest.approx(-1.0 - 3.0)
    assert rep.stderr == pytest.approx(math.sqrt(float(e.var()) / 3))
    assert rep.lower is None and "exact log Z" in str(rep)


def test_report_without_bracket_prints_log_z_and_its_stderr():
    rep = log_likelihood_report(_SUM, torch.tensor([[1.0], [3.0]]), Estimate(2.0, 0.25, settings={"method": "forward ais"}))
    assert str(rep) == "-4.00 ± 1.03 nats (n=2; forward AIS log Z 2.00 ± 0.25)"


def test_batches_do_not_change_the_report():
    x = torch.randn(37, 3, generator=torch.Generator().manual_seed(0))
    a = log_likelihood_report(_SUM, x, Estimate(1.0, 0.1), batch_size=5)
    b = log_likelihood_report(_SUM, x, Estimate(1.0, 0.1))
    assert a.estimate == pytest.approx(b.estimate, abs=1e-12) and a.stderr == pytest.approx(b.stderr, abs=1e-12)


def test_data_outside_the_model_space_is_rejected():
    energy = from_fn(lambda v: v.sum(-1))
    energy.space = Binary(2)
    with pytest.raises(ValueError, match=r"x_test: expected values in \{0, 1\}"):
        log_likelihood_report(energy, torch.tensor([[0.0, 0.5], [1.0, 1.0]]), 0.0)


def test_validation_messages():
    with pytest.raises(ValueError, match="x_test: expected at least 2 test points"):
        log_likelihood_report(_SUM, torch.ones(1, 2), 0.0)
    with pytest.raises(TypeError, match="log_z: expected an Estimate or a finite number"):
        log_likelihood_report(_SUM, torch.ones(2, 2), "big")
    inf_energy = from_fn(lambda x: torch.full((x.shape[0],), math.inf))
    with pytest.raises(ValueError, match=r"energy\(x_test\): expected a finite tensor"):
        log_likelihood_report(inf_energy, torch.ones(2, 2), 0.0)


def test_estimate_rejects_nan_or_inverted_bounds_and_nonpositive_ess():
    # every field of an Estimate is checked, not only the estimate and its stderr
    with pytest.raises(ValueError, match="lower: expected a number or None; got nan"):
        Estimate(1.0, 0.1, lower=float("nan"), upper=2.0)
    with pytest.raises(ValueError, match="upper: expected a number or None; got nan"):
        Estimate(1.0, 0.1, lower=0.0, upper=float("nan"))
    with pytest.raises(ValueError, match=r"lower, upper: expected lower <= upper; got 2.0 > 1.0"):
        Estimate(1.0, 0.1, lower=2.0, upper=1.0)
    for bad in (float("nan"), 0.0, -3.0):
        with pytest.raises(ValueError, match="ess: expected a number > 0 or None"):
            Estimate(1.0, 0.1, ess=bad)
    assert Estimate(1.0, 0.1, lower=float("-inf"), upper=1.5, ess=3.0).ess == 3.0
