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
    assert electric_noise.parse_arm("0.25:bernoulli:freeze300") == (0.25, "bernoulli", 300)
    assert electric_noise.parse_arm("0:freeze0") == (0.0, "fixed", 0)
    assert electric_noise.arm_name((0.25, "bernoulli", 300)) == "mix0.25-bernoulli-freeze300"
    assert electric_noise.arm_name((0.0, "fixed", 0)) == "mix0-freeze0"
    for bad in ("x", "1", "0.2:all", "-0.1", "0.2:freeze", "0.2:freeze-1", "0.2:freeze1.5", "0.2:bernoulli:x:freeze3",
                "freeze3"):
        with pytest.raises(SystemExit, match=r"^--arms: expected MIX\[:fixed\|bernoulli\]\[:freezeN\]"):
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
    got = electric_noise.train(tmp_path, (0.25, "bernoulli"), 0, 5, diag=True, extra=("data.n_test=300",))
    assert got["sentences"] == 300
    d = got["diagnosis"]
    assert d["prefers"] == got["prefers"]  # own + rest reproduces eval.json's figure: the same corruptions
    assert 0 <= d["own_prefers"] <= 1 and 0 <= d["rest_lowers"] <= 1


def test_compare_length_pairs_the_last_checkpoint_with_the_baseline_step():
    per = {"mix0.25-bernoulli": {}}
    for s, (early, late) in enumerate([(0.80, 0.86), (0.82, 0.87), (0.79, 0.86)]):
        per["mix0.25-bernoulli"][s] = {"curve": {
            "1000": {"prefers": 0.7, "noise_prefers": 0.9, "nce_accuracy": 0.8},
            "3000": {"prefers": early, "noise_prefers": 0.95, "nce_accuracy": 0.85},
            "6000": {"prefers": late, "noise_prefers": 0.96, "nce_accuracy": 0.9}}}
    out = electric_noise.compare_length(per, [0, 1, 2], 3000)
    d = out["mix0.25-bernoulli: last - step 3000, prefers"]
    assert d["diffs"] == pytest.approx([0.06, 0.05, 0.07]) and d["ci_low"] > 0
    assert d["name_a"] == "step 6000" and d["name_b"] == "step 3000"
    assert out["mix0.25-bernoulli: last - step 3000, noise_prefers"]["mean_diff"] == pytest.approx(0.01)
    table = electric_noise._curve_table(per, [0, 1, 2])
    assert "6000" in table and "0.8700" in table and "0.8600" in table


@pytest.mark.parametrize("argv", [["--curve", "--baseline-step", "3000"],  # the recipe's length: nothing after it
                                  ["--curve", "--steps", "6000", "--baseline-step", "2500"],  # no checkpoint there
                                  ["--curve", "--steps", "6000", "--baseline-step", "0"]])
def test_a_baseline_step_without_a_checkpoint_before_the_end_is_refused(argv):
    with pytest.raises(SystemExit, match=r"^--baseline-step: expected a multiple of 1000"):
        electric_noise.main(argv)


@pytest.mark.slow
def test_the_curve_evaluates_every_checkpoint_as_eval_does(tmp_path, monkeypatch):
    from ebms.data.paths import data_root

    if not (data_root() / "tinyshakespeare" / "input.txt").is_file():
        pytest.skip("Tiny Shakespeare is not under the data root ($EBMS_DATA)")
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    folder = tmp_path / electric_noise.RECIPE
    assert electric_noise.ebms_main(["train", electric_noise.RECIPE, f"run.out_dir={tmp_path}", "train.steps=4",
                                     "train.checkpoint_every=2", "train.log_every=1", "run.progress=false",
                                     "electric.uniform_mix=0.25", "electric.positions=bernoulli", "data.n_test=300"]) == 0
    got = electric_noise.curve(folder)
    assert list(got) == ["2", "4"]
    test = json.loads((folder / "eval.json").read_text())["figures"]["test"]
    assert got["4"]["prefers"] == test["prefers"] and got["4"]["noise_prefers"] == test["noise_prefers"]
    acc = {r["step"]: r["metrics"]["accuracy"] for r in map(json.loads, (folder / "metrics.jsonl").read_text().splitlines())
           if isinstance(r.get("metrics"), dict) and "accuracy" in r["metrics"]}
    assert got["2"]["nce_accuracy"] == pytest.approx((acc[1] + acc[2]) / 2)
    assert got["4"]["nce_accuracy"] == pytest.approx((acc[3] + acc[4]) / 2)
    monkeypatch.setattr("ebms.cli.run.open_run", lambda *a, **k: pytest.fail("evaluated again"))
    assert electric_noise.curve(folder) == got  # read back from the run's curve.json
