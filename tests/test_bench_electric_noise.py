"""benchmarks/electric_noise.py: arms, run folders, resuming from eval.json, and the paired comparisons it records."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
import electric_noise  # noqa: E402


def _fake_run(out: Path, arm: tuple[float, str], seed: int, prefers: float, noise_prefers: float) -> None:
    folder = electric_noise.run_dir(out, arm, seed) / electric_noise.RECIPE
    folder.mkdir(parents=True)
    test = {"pll": -1.5 - arm[0], "noise_pll": -2.0, "prefers": prefers, "noise_prefers": noise_prefers,
            "tokens": 10, "sentences": 4}
    (folder / "eval.json").write_text(json.dumps({"step": 3000, "figures": {"test": test}}))


def test_arms_are_a_mix_and_a_way_of_picking_positions():
    assert electric_noise.parse_arm("0") == (0.0, "fixed")
    assert electric_noise.parse_arm("0.25:bernoulli") == (0.25, "bernoulli")
    assert electric_noise.arm_name((0.25, "bernoulli")) == "mix0.25-bernoulli"
    assert electric_noise.arm_name((0.0, "fixed")) == "mix0"
    for bad in ("x", "1", "0.2:all", "-0.1"):
        with pytest.raises(SystemExit, match=r"^--arms: expected MIX or MIX:bernoulli"):
            electric_noise.parse_arm(bad)


def test_a_run_with_an_eval_json_is_read_not_trained(tmp_path, monkeypatch):
    _fake_run(tmp_path, (0.25, "bernoulli"), 1, 0.8, 0.9)
    monkeypatch.setattr(electric_noise, "ebms_main", lambda argv: pytest.fail(f"trained again: {argv}"))
    got = electric_noise.train(tmp_path, (0.25, "bernoulli"), 1, None)
    assert got["prefers"] == 0.8 and got["noise_prefers"] == 0.9 and got["wall_s"] is None
    assert electric_noise.run_dir(tmp_path, (0.25, "bernoulli"), 1) == tmp_path / "mix0.25-bernoulli" / "seed1"


def test_compare_pairs_electric_with_its_noise_and_each_arm_with_the_first():
    per = {"mix0": {}, "mix0.25": {}}
    for s, (a, b, c) in enumerate([(0.70, 0.75, 0.97), (0.72, 0.78, 0.96), (0.71, 0.74, 0.97)]):
        per["mix0"][s] = {"prefers": a, "noise_prefers": c, "pll": -1.5}
        per["mix0.25"][s] = {"prefers": b, "noise_prefers": c, "pll": -1.6}
    out = electric_noise.compare(per, [0, 1, 2])
    assert set(out) == {"mix0: electric - noise, prefers", "mix0.25: electric - noise, prefers",
                        "mix0.25 - mix0: prefers", "mix0.25 - mix0: noise_prefers"}
    d = out["mix0.25 - mix0: prefers"]
    assert d["diffs"] == pytest.approx([0.05, 0.06, 0.03]) and d["ci_low"] > 0
    assert out["mix0: electric - noise, prefers"]["mean_diff"] == pytest.approx((0.70 + 0.72 + 0.71 - 2.9) / 3)
    assert out["mix0.25 - mix0: noise_prefers"]["mean_diff"] == 0.0


def test_distinct_arms_are_required():
    with pytest.raises(SystemExit, match=r"^--arms: expected distinct arms"):
        electric_noise.main(["--arms", "0", "0:fixed"])


@pytest.mark.slow
def test_the_diagnosis_splits_the_evaluations_own_corruption_test(tmp_path, monkeypatch):
    from ebms.data.paths import data_root

    if not (data_root() / "tinyshakespeare" / "input.txt").is_file():
        pytest.skip("Tiny Shakespeare is not under the data root ($EBMS_DATA)")
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    got = electric_noise.train(tmp_path, (0.25, "bernoulli"), 0, 5, diag=True)
    d = got["diagnosis"]
    assert d["prefers"] == got["prefers"]  # own + rest reproduces eval.json's figure: the same corruptions
    assert 0 <= d["own_prefers"] <= 1 and 0 <= d["rest_lowers"] <= 1
