"""``benchmarks/repro_ctc_digits.py``'s committed figures: per-seed values and the paired comparisons
over seeds (``ebms.metrics.compare_over_seeds``), with the verdict a page must quote beside them."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
import repro_ctc_digits as bench  # noqa: E402


def _runs(ctc: list[float], crf: list[float], crf_lm: list[float]) -> list[dict]:
    runs = []
    for seed, (a, b, c) in enumerate(zip(ctc, crf, crf_lm)):
        runs.append({"objective": "ctc", "seed": seed, "ler": a, "ser": 50.0, "steps": 1000, "train_s": 60.0})
        runs.append({"objective": "ctc-crf", "seed": seed, "ler": b, "ler_lm": c, "ser": 40.0, "steps": 1000,
                     "train_s": 61.0, "eval_s": 3.0})
    return runs


def test_figures_pair_the_seeds_and_carry_the_verdict() -> None:
    figs = bench._figures(_runs([20.0, 16.0, 25.0], [19.0, 12.0, 21.0], [15.0, 10.0, 12.0]), {"x": 1.0})
    cmp = figs["crf_vs_ctc_greedy"]
    assert cmp["seeds"] == [0, 1, 2] and cmp["diffs"] == [-1.0, -4.0, -4.0]
    assert cmp["mean_diff"] == -3.0 and cmp["ci_low"] < 0.0
    assert cmp["words"] == ("not significant" if cmp["ci_high"] >= 0.0 else "CTC-CRF better")
    assert figs["crf_lm_vs_ctc_greedy"]["values_a"] == [15.0, 10.0, 12.0]
    assert [r["seed"] for r in figs["per_seed"]["ctc"]] == [0, 1, 2]
    assert "eval_s" not in figs["per_seed"]["ctc-crf"][0]  # only the figures kept


def test_one_seed_has_no_comparison() -> None:
    figs = bench._figures(_runs([20.0], [19.0], [15.0]), {})
    assert "crf_vs_ctc_greedy" not in figs and len(figs["per_seed"]["ctc"]) == 1
