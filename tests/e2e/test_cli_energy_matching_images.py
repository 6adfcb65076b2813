"""Energy matching on images from the command line (issue 28, item 1): trains an image energy, evaluates it
(AUROC against the OOD sets), and ``ebms sample`` follows its own path from Gaussian noise.

The sample is checked against a hand-written Euler-Maruyama loop of the paper's sampler (the same draws in the
same order), so a wrong start (uniform instead of Gaussian noise), horizon, temperature or seed fails."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from ebms.cli.main import main
from ebms.cli.run import load_run

pytestmark = pytest.mark.slow  # a six-step run with its evaluation and a resumed copy (~15 s on one core);
# tests/e2e/test_cli_vision.py trains and samples the same objective in the fast suite

SMALL = ["run.progress=false", "data.name=digits", "model.kind=conv", 'objective.kind="energy-matching"',
         "vision.channels=[8,16]", "vision.normalize=false", "objective.k=3", "sampler.kind=ula", "sampler.step_size=0.2",
         "objective.epsilon_max=0.5", "objective.tau_star=0.5", "objective.cd_weight=0.01", "objective.warmup_steps=3",
         "train.batch_size=16", "train.log_every=1", "train.checkpoint_every=6", "eval.n_samples=20",
         "eval.sample_steps=5", "vision.ood_size=200", "vision.ood=['noise', 'flip']"]


@pytest.fixture(scope="module")
def em_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("em-images")
    assert main(["train", f"run.out_dir={root}", "run.name=em", *SMALL, "train.steps=6"]) == 0
    return root / "em"


def test_both_phases_train_and_the_evaluation_scores_every_ood_set(em_run: Path) -> None:
    rows = [json.loads(line) for line in (em_run / "metrics.jsonl").read_text().splitlines()]
    phases = [r["metrics"]["phase"] for r in rows if "metrics" in r]
    assert phases == [1.0, 1.0, 1.0, 2.0, 2.0, 2.0]
    got = json.loads((em_run / "eval.json").read_text())
    assert got["step"] == 6 and [r["set"] for r in got["ood"]] == ["noise", "flip"]
    assert all(0.0 <= r["auroc"] <= 1.0 for r in got["ood"])


def test_sample_is_the_papers_path_from_gaussian_noise_over_the_training_chains_horizon(em_run: Path) -> None:
    from safetensors.torch import load_file

    assert main(["sample", str(em_run), "--n", "4", "--steps", "7", "--seed", "3"]) == 0
    got = load_file(str(em_run / "samples-n4-steps7-seed3.safetensors"))["samples"]
    _, model, _, _ = load_run(em_run)
    eps, tau, steps = 0.5, 0.5, 7
    dt = 3 * 0.2 / steps  # the horizon objective.k * sampler.step_size cut into the sample's steps
    g = torch.Generator().manual_seed(3)
    x = torch.randn((4, 1, 8, 8), generator=g)
    for j in range(1, steps + 1):
        t = j / steps
        temp = 0.0 if t < tau else eps * min((t - tau) / (1 - tau), 1.0)
        xg = x.clone().requires_grad_(True)
        (grad,) = torch.autograd.grad(model(xg).sum(), xg)
        x = x - dt * eps * grad + (2 * temp * dt) ** 0.5 * torch.randn(x.shape, generator=g)
    assert got.shape == (4, 1, 8, 8)
    torch.testing.assert_close(got, x.detach(), rtol=1e-5, atol=1e-6)
    assert float(got.abs().max()) > 1.0  # Gaussian starts, not the box [-1, 1] of the other image samplers


def test_a_resumed_run_continues_in_the_phase_it_stopped_in(em_run: Path, tmp_path: Path) -> None:
    """Three steps, then three more after a resume: the same phases and weights as the six-step run."""
    args = ["train", f"run.out_dir={tmp_path}", "run.name=em", *SMALL, "train.checkpoint_every=1"]
    assert main([*args, "train.steps=4", "--no-eval"]) == 0
    assert main([*args, "train.steps=6", "--resume", "--no-eval"]) == 0
    _, a, _, _ = load_run(em_run)
    _, b, _, _ = load_run(tmp_path / "em")
    for (name, p), q in zip(a.state_dict().items(), b.state_dict().values()):
        torch.testing.assert_close(p, q, msg=name)
