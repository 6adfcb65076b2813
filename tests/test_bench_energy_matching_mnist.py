"""benchmarks/energy_matching_mnist.py: both arms are valid and share the budget; the quick mode judges samples (slow)."""

from __future__ import annotations

import json

import pytest
from _benchmarks import bench

em_mnist = bench("energy_matching_mnist")


def _cfg(arm: str, steps: int):
    from ebms.cli.build import validate_config
    from ebms.cli.config import load_config
    from ebms.cli.main import recipe_path

    return validate_config(load_config(str(recipe_path(em_mnist.ARMS[arm])), em_mnist.overrides(arm, steps, False)),
                           device=False)


def test_both_arms_train_the_same_energy_with_the_same_steps_batch_and_chain_length():
    pcd, em = _cfg("pcd", 200), _cfg("energy_matching", 200)
    assert (pcd.objective.kind, em.objective.kind) == ("pcd", "energy-matching")
    for cfg in (pcd, em):
        v = cfg.sections["vision"]
        assert (v.channels, v.normalize, v.data_noise) == ([16, 32, 64, 64], False, 0.005)
        assert (cfg.model.kind, cfg.model.activation, cfg.train.steps, cfg.train.batch_size, cfg.objective.k) == (
            "conv", "silu", 200, 32, 30)
    assert em.objective.warmup_steps == 100  # phase 2 (the chains) for the second half
    assert em.objective.k * em.sampler.step_size == pytest.approx(1.2)  # the horizon of its chains and samples


def test_too_few_steps_for_two_phases_is_refused():
    with pytest.raises(SystemExit, match="--steps: expected at least 2"):
        em_mnist.main(["--steps", "1"])


@pytest.mark.parametrize("extra", [["--record", "x"], ["--grid", "x.png"]])
def test_one_arm_cannot_write_the_comparison(extra):
    with pytest.raises(SystemExit, match="--arms: --record and --grid compare both arms"):
        em_mnist.main(["--arms", "pcd", *extra])


def test_flow_only_is_the_deterministic_euler_path_of_a_quadratic_energy(monkeypatch):
    """``E(x) = a ||x||^2 / 2``: each step multiplies by ``1 - dt * eps * a`` with ``dt = k h / steps``, so the
    path from the seeded Gaussian start is a closed form."""
    import types
    from pathlib import Path

    import torch

    import ebms.cli.run

    a, eps, k, h, steps = 3.0, 0.5, 4, 0.1, 5

    class Quadratic(torch.nn.Module):
        def forward(self, x):
            return 0.5 * a * x.flatten(1).pow(2).sum(1)

    cfg = types.SimpleNamespace(objective=types.SimpleNamespace(k=k, epsilon_max=eps),
                                sampler=types.SimpleNamespace(step_size=h), eval=types.SimpleNamespace(sample_steps=steps))
    monkeypatch.setattr(ebms.cli.run, "load_run", lambda run: (cfg, Quadratic(), types.SimpleNamespace(
        image_shape=(1, 3, 3)), 0))
    got = em_mnist.flow_only(Path("run"), 6, seed=2)
    x0 = torch.randn((6, 1, 3, 3), generator=torch.Generator().manual_seed(2))
    torch.testing.assert_close(got, (1 - (k * h / steps) * eps * a) ** steps * x0)


def test_run_records_name_is_checked():
    with pytest.raises(SystemExit, match="--run-records: expected a record name without '/'"):
        em_mnist.main(["--run-records", "a/b"])


@pytest.mark.slow  # five CLI runs on 300 MNIST images (~1 min on one core)
def test_quick_mode_judges_both_arms_and_prints_the_paired_comparison(tmp_path, capsys, monkeypatch):
    import shutil

    import _record

    from ebms.data.images import load_continuous_images

    try:
        load_continuous_images("mnist", "test", limit=1)
    except (FileNotFoundError, OSError):
        pytest.skip("MNIST is not installed ($EBMS_DATA)")
    records = tmp_path / "records"
    monkeypatch.setattr(em_mnist, "RECORDS_DIR", records)
    monkeypatch.setattr(_record, "RECORDS_DIR", records)
    grid = tmp_path / "grid.png"
    assert em_mnist.main(["--quick", "--out", str(tmp_path), "--grid", str(grid), "--run-records", "q"]) == 0
    out = capsys.readouterr().out
    assert "energy matching − PCD, fd" in out and "auroc_noise" in out and "temperature 0" in out
    summary = json.loads(out.strip().splitlines()[-1])
    assert set(summary["means"]) == {"pcd", "energy_matching"}
    assert all(0.0 <= m["auroc_noise"] <= 1.0 and 0.0 <= m["confident"] <= 1.0 for m in summary["means"].values())
    assert grid.is_file()
    for arm, recipe in em_mnist.ARMS.items():
        assert (tmp_path / arm / "seed1" / recipe / "eval.json").is_file()
    # each finished run left its own record; a run whose folder is gone is taken from it, not trained again
    kept = {p.name: json.loads(p.read_text()) for p in records.glob("q-*.json")}
    assert set(kept) == {f"q-{a}-seed{s}.json" for a in em_mnist.ARMS for s in (0, 1)}
    assert kept["q-pcd-seed1.json"]["seeds"] == [1] and kept["q-pcd-seed1.json"]["settings"]["seed"] == 1
    shutil.move(tmp_path / "pcd" / "seed1", tmp_path / "gone")
    capsys.readouterr()
    assert em_mnist.main(["--quick", "--out", str(tmp_path), "--run-records", "q", "--record", "agg"]) == 0
    assert not (tmp_path / "pcd" / "seed1").exists()
    agg = json.loads((records / "agg.json").read_text())
    assert agg["figures"]["per_run"]["pcd"]["seed1"] == kept["q-pcd-seed1.json"]["figures"]
    assert agg["figures"]["run_records"]["pcd"]["seed1"] == "q-pcd-seed1"
    # a kept record of other settings (here: another budget) is refused
    other = kept["q-pcd-seed1.json"]
    other["settings"]["steps"] = 5
    (records / "q-pcd-seed1.json").write_text(json.dumps(other))
    with pytest.raises(SystemExit, match="q-pcd-seed1.json: recorded with other settings"):
        em_mnist.main(["--quick", "--out", str(tmp_path), "--run-records", "q"])
