"""benchmarks/image_generation.py: every arm is a valid configuration, and its quick mode judges samples (slow)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
import image_generation  # noqa: E402


@pytest.mark.parametrize("arm", sorted(image_generation.ARMS))
def test_every_arm_is_a_valid_configuration(arm):
    from ebms.cli.build import validate_config
    from ebms.cli.config import load_config
    from ebms.cli.main import recipe_path

    recipe, overrides = image_generation.ARMS[arm]
    cfg = validate_config(load_config(str(recipe_path(recipe)), overrides), device=False)
    if arm.startswith("tutorial"):
        assert not cfg.sections["vision"].informative_init
        assert cfg.objective.k == (30 if "stage" in arm else 60)
    if arm in ("tutorial-clamp", "tutorial-4stage", "tutorial-2stage", "tutorial-4stage-groupnorm"):
        assert cfg.sampler.grad_clamp == 0.03 and cfg.sampler.step_size == 10
    if "stage" in arm:  # the energy's window: the whole image with four stages, 13 pixels with two
        from ebms.nets import receptive_field

        assert receptive_field(cfg.sections["vision"].channels) == (13 if "2stage" in arm else 49)
        assert cfg.sections["vision"].normalize == arm.endswith("groupnorm")


def test_the_pcd_tutorial_recipe_is_the_recorded_arm():
    """``pcd-tutorial-mnist`` trains exactly what record ``image_generation_tutorial`` measured as ``tutorial-4stage``."""
    from ebms.cli.config import load_config
    from ebms.cli.main import recipe_path

    def table(recipe: str, overrides: list[str]) -> dict:
        from ebms.cli._config_toml import config_to_dict

        got = config_to_dict(load_config(str(recipe_path(recipe)), overrides))
        got["run"].pop("name")
        return got

    recipe, overrides = image_generation.ARMS["tutorial-4stage"]
    assert table("pcd-tutorial-mnist", []) == table(recipe, overrides)
    assert table("pcd-tutorial-mnist", []) != table(recipe, [])


def test_landscape_gives_mean_energies_and_gradient_norms_at_noise_and_test_images(monkeypatch):
    """Against a quadratic energy ``E(x) = ||x||^2 / 2``: ``grad E = x``, so the figures are closed forms."""
    import types

    import torch

    import ebms.cli.run

    class Half(torch.nn.Module):
        def forward(self, x):
            return 0.5 * x.flatten(1).pow(2).sum(1)

    objectives = {"run-conv": "pcd", "run-recovery": "recovery"}  # a recovery run's model.kind is conv too
    monkeypatch.setattr(ebms.cli.run, "load_run", lambda run: (
        types.SimpleNamespace(model=types.SimpleNamespace(kind="conv"),
                              objective=types.SimpleNamespace(kind=objectives[str(run)])), Half(), None, None))
    test = torch.linspace(-1, 1, 8 * 36).reshape(8, 1, 6, 6)
    got = image_generation.landscape(Path("run-conv"), test, n=8)
    noise = torch.rand(8, 1, 6, 6, generator=torch.Generator().manual_seed(0)) * 2 - 1
    for name, x in (("noise", noise), ("test", test)):
        norms = x.flatten(1).norm(dim=1)
        assert got[f"grad_{name}"] == pytest.approx(norms.mean().item(), rel=1e-6)
        assert got[f"e_{name}"] == pytest.approx((0.5 * norms**2).mean().item(), rel=1e-6)
    assert image_generation.landscape(Path("run-recovery"), test, n=8) is None

@pytest.mark.slow
def test_quick_mode_scores_samples_and_the_floors(tmp_path, capsys, monkeypatch):
    from ebms.data.paths import data_root

    if not (data_root() / "mnist").is_dir():
        pytest.skip("MNIST is not under the data root ($EBMS_DATA)")
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    assert image_generation.main(["--quick", "--seeds", "0", "--arms", "uniform", "--out", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    line = json.loads(out.strip().splitlines()[-1])
    m = line["means"]["uniform"]
    assert 0 <= m["confident"] <= 1 and 1 <= m["score"] <= 10 and m["fd"] >= 0
    assert list((tmp_path / "uniform" / "seed0" / "conv-ebm-mnist").glob("samples-n40-*.png"))
    assert "grad_noise" in out


@pytest.mark.parametrize(("extra", "message"), [
    (["--curve", "4", "2"], r"^--curve: expected ascending step counts >= 1; got 4 2$"),
    (["--curve", "0", "2"], r"^--curve: expected ascending step counts >= 1; got 0 2$"),
    (["--curve", "2", "--steps", "3"], r"^--curve: sets each segment's train.steps itself; drop --steps$"),
])
def test_bad_curves_are_one_line(tmp_path, extra, message):
    with pytest.raises(SystemExit, match=message):
        image_generation.main(["--arms", "recovery", "--seeds", "0", "--out", str(tmp_path), *extra])


@pytest.mark.slow
def test_a_curve_judges_each_segment_and_the_average_beside_the_trained_weights(tmp_path, monkeypatch):
    from ebms.data.paths import data_root

    if not (data_root() / "mnist").is_dir():
        pytest.skip("MNIST is not under the data root ($EBMS_DATA)")
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    rec = tmp_path / "rec"
    monkeypatch.setattr(image_generation, "Recorder", lambda name, **kw: _Capture(rec, **kw))
    assert image_generation.main(["--quick", "--curve", "2", "4", "--seeds", "0", "--arms", "recovery-4stage-ema",
                                  "--out", str(tmp_path), "--record", "x"]) == 0
    fig = json.loads(rec.read_text())
    points = fig["curve"]["recovery-4stage-ema"]["seed0"]
    assert list(points) == ["2", "4"] and all("trained_weights" in p for p in points.values())
    assert fig["per_run"]["recovery-4stage-ema"]["seed0"]["fd"] == points["4"]["fd"]  # the run's figures: its last segment's
    run = tmp_path / "recovery-4stage-ema" / "seed0" / "recovery-mnist"
    assert image_generation.trained_steps(run) == 4
    assert {p.name for p in run.iterdir() if p.name.startswith("curve-")} == {
        "curve-step2", "curve-step2-trained", "curve-step4", "curve-step4-trained"}


class _Capture:
    """A stand-in for the Recorder that keeps the figures in one file."""

    def __init__(self, path, **kw):
        self.path = path

    def write(self, figures, *, notes=""):
        self.path.write_text(json.dumps(figures))
