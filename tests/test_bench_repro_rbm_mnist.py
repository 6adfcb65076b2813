"""``benchmarks/repro_rbm_mnist.py``: which record each mode writes, where, and what goes in it."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))

import repro_rbm_mnist as R  # noqa: E402
from _record import RECORDS_DIR  # noqa: E402


def _args(**kw: object) -> argparse.Namespace:
    base = {"curve": False, "curve_bracket": False, "curve_lr": 0.01, "curve_hold": 0.0, "quick": False,
            "eval_only": False}
    return argparse.Namespace(**{**base, **kw})


def test_each_mode_writes_its_own_record_name() -> None:
    assert R.record_name(_args()) == "repro_rbm_mnist"
    assert R.record_name(_args(curve=True)) == "repro_rbm_mnist_curve"
    assert R.record_name(_args(curve=True, curve_bracket=True)) == "repro_rbm_mnist_curve_bracket"
    assert R.record_name(_args(curve=True, curve_lr=0.05, curve_hold=0.5)) == "repro_rbm_mnist_curve_lr0.05_hold0.5"


def test_only_full_runs_write_committed_records() -> None:
    assert R.record_dir(_args()) == RECORDS_DIR
    assert R.record_dir(_args(curve=True)) == RECORDS_DIR
    for args in (_args(quick=True), _args(eval_only=True), _args(curve=True, quick=True)):
        assert R.record_dir(args) != RECORDS_DIR and "results" in R.record_dir(args).parts


def test_training_figures_summarise_epochs_without_the_per_epoch_list() -> None:
    epochs = [{"epoch": 1, "k": 1, "wall_s": 2.0, "recon_mse": 0.03}, {"epoch": 2, "k": 1, "wall_s": 4.0, "recon_mse": 0.02},
              {"epoch": 3, "k": 5, "wall_s": 9.0, "recon_mse": 0.01}]
    got = R.training_figures({"epochs": epochs, "updates": 1800, "train_wall_s": 15.5})
    assert got == {"epochs": 3, "updates": 1800, "train_wall_s": 15.5, "epoch_k_total": 7,
                   "epoch_wall_s_by_k": {"1": 3.0, "5": 9.0}, "final_recon_mse": 0.01}


def test_ais_figures_keep_both_ends_and_the_brackets() -> None:
    out = {"log_z_forward": 10.0, "log_z_forward_stderr": 0.1, "log_z_forward_ess": 50.0, "log_z_reverse": 10.2,
           "log_z_reverse_stderr": 0.1, "log_z_reverse_ess": 40.0, "gap": 0.2, "log_z_bracket": [9.8, 10.4],
           "test_ll": -90.0, "stderr": 0.3, "lower": -90.4, "upper": -89.8, "ais_wall_s": 1.0, "text": "x"}
    got = R.ais_figures(out)
    assert got["test_ll_bracket"] == [-90.4, -89.8] and got["reverse_minus_forward"] == 0.2
    assert "text" not in got


@pytest.mark.parametrize(("lr", "hold", "suffix"), [(0.01, 0.0, ""), (0.05, 0.5, "-lr0.05-hold0.5")])
def test_the_default_curve_budget_has_no_file_suffix(lr: float, hold: float, suffix: str) -> None:
    assert R.curve_suffix(lr, hold) == suffix
