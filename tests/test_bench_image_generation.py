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

    kinds = {"run-conv": "conv", "run-recovery": "recovery"}
    monkeypatch.setattr(ebms.cli.run, "load_run", lambda run: (
        types.SimpleNamespace(model=types.SimpleNamespace(kind=kinds[str(run)])), Half(), None, None))
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
