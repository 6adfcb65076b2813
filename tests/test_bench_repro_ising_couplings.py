"""``benchmarks/repro_ising_couplings.py``: the committed record's summaries and paired comparisons."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))

import repro_ising_couplings as R  # noqa: E402

from ebms.metrics import compare_over_seeds  # noqa: E402


def _run(size: int, sampler: str, k: int, seed: int, final: float, wall: float) -> dict[str, object]:
    curve = [-1.0, -5.0 - seed, -2.0, final]  # minimum at index 1, then a rise to -2.0, then final
    return {"size": size, "sampler": sampler, "steps_per_iter": k, "seed": seed, "final_log_rmse": final,
            "tail_log_rmse": final + 0.01, "train_wall_s": wall, "mean_accept": 0.9 if sampler == "gwg" else 1.0,
            "curve_min": min(curve), "after_min_max": max(curve[curve.index(min(curve)):]),
            "learned_mean": 0.4, "learned_std": 0.05}


@pytest.fixture
def runs() -> list[dict[str, object]]:
    out = []
    for seed in range(3):
        for k in (10, 50):
            out.append(_run(10, "gwg", k, seed, -3.4 - 0.01 * seed, 10.0 + k))
            out.append(_run(10, "gibbs", k, seed, -3.2 + 0.02 * seed, 4.0 + k / 10))
    return out


def test_summarise_pairs_gwg_and_gibbs_by_seed_and_keeps_their_verdict(runs: list[dict[str, object]]) -> None:
    got = R.summarise(runs, [10], [10, 50], [0, 1, 2])
    gwg = [-3.4 - 0.01 * seed for seed in range(3)]
    gibbs = [-3.2 + 0.02 * seed for seed in range(3)]
    want = compare_over_seeds(gwg, gibbs, seeds=[0, 1, 2], name_a="GwG", name_b="Gibbs",
                              metric="final log-RMSE of the couplings, 10x10, K=10", higher_is_better=False).to_dict()
    cmp = got["comparisons"]["10x10/K=10/final_log_rmse"]
    assert cmp == want and cmp["words"] == "GwG better"
    stats = got["configs"]["10x10/K=10/gwg"]["final_log_rmse"]
    assert stats["per_seed"] == gwg and stats["min"] == gwg[2] and stats["max"] == gwg[0]
    assert stats["mean"] == pytest.approx(sum(gwg) / 3)


def test_summarise_compares_cheap_gibbs_with_gwg_on_error_and_time(runs: list[dict[str, object]]) -> None:
    got = R.summarise(runs, [10], [10, 50], [0, 1, 2])["comparisons"]
    time_cmp = got["10x10/gibbs K=50 vs gwg K=10/train_wall_s"]
    assert time_cmp["name_a"] == "Gibbs K=50" and time_cmp["name_b"] == "GwG K=10"
    assert time_cmp["values_a"] == [9.0] * 3 and time_cmp["values_b"] == [20.0] * 3
    assert "10x10/gibbs K=50 vs gwg K=10/final_log_rmse" in got


def test_summarise_records_the_curve_minimum_and_the_overshoot_after_it(runs: list[dict[str, object]]) -> None:
    cfg = R.summarise(runs, [10], [10, 50], [0, 1, 2])["configs"]["10x10/K=50/gibbs"]
    assert cfg["curve_min"]["per_seed"] == [-5.0, -6.0, -7.0]
    assert cfg["after_min_max"]["max"] == -2.0


def test_summarise_refuses_a_missing_seed(runs: list[dict[str, object]]) -> None:
    with pytest.raises(KeyError):
        R.summarise(runs, [10], [10, 50], [0, 1, 2, 3])
