"""benchmarks/electric_noise.py: run folders, resuming from eval.json, and the paired comparisons it records."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
import electric_noise  # noqa: E402


def _fake_run(out: Path, mix: float, seed: int, prefers: float, noise_prefers: float) -> None:
    folder = electric_noise.run_dir(out, mix, seed) / electric_noise.RECIPE
    folder.mkdir(parents=True)
    test = {"pll": -1.5 - mix, "noise_pll": -2.0, "prefers": prefers, "noise_prefers": noise_prefers, "tokens": 10,
            "sentences": 4}
    (folder / "eval.json").write_text(json.dumps({"step": 3000, "figures": {"test": test}}))


def test_a_run_with_an_eval_json_is_read_not_trained(tmp_path, monkeypatch):
    _fake_run(tmp_path, 0.25, 1, 0.8, 0.9)
    monkeypatch.setattr(electric_noise, "ebms_main", lambda argv: pytest.fail(f"trained again: {argv}"))
    got = electric_noise.train(tmp_path, 0.25, 1, None)
    assert got["prefers"] == 0.8 and got["noise_prefers"] == 0.9 and got["wall_s"] is None
    assert electric_noise.run_dir(tmp_path, 0.25, 1) == tmp_path / "mix0.25" / "seed1"


def test_compare_pairs_electric_with_its_noise_and_each_arm_with_the_first(tmp_path):
    per = {0.0: {}, 0.25: {}}
    for s, (a, b, c) in enumerate([(0.70, 0.75, 0.97), (0.72, 0.78, 0.96), (0.71, 0.74, 0.97)]):
        per[0.0][s] = {"prefers": a, "noise_prefers": c, "pll": -1.5}
        per[0.25][s] = {"prefers": b, "noise_prefers": c, "pll": -1.6}
    out = electric_noise.compare(per, [0, 1, 2])
    assert set(out) == {"mix0: electric - noise, prefers", "mix0.25: electric - noise, prefers",
                        "mix0.25 - mix0: prefers", "mix0.25 - mix0: pll", "mix0.25 - mix0: noise_prefers"}
    d = out["mix0.25 - mix0: prefers"]
    assert d["diffs"] == pytest.approx([0.05, 0.06, 0.03]) and d["ci_low"] > 0
    assert out["mix0: electric - noise, prefers"]["mean_diff"] == pytest.approx((0.70 + 0.72 + 0.71 - 2.9) / 3)
    assert out["mix0.25 - mix0: noise_prefers"]["mean_diff"] == 0.0


def test_distinct_arms_are_required():
    with pytest.raises(SystemExit, match=r"^--mix: expected distinct values"):
        electric_noise.main(["--mix", "0", "0"])
