"""``ebms.metrics.image_eval``: the reports equal their parts computed directly."""

from __future__ import annotations

import pytest
import torch

from ebms.metrics.calibration import TemperatureScaling, calibration_report
from ebms.metrics.image_eval import batched, evaluate_image_classifier, evaluate_image_energy
from ebms.metrics.ood import detection_report, ood_scores


def _classifier():
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(16, 3))
    return lambda x: net(x)


def _data(n: int, seed: int, shift: float = 0.0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(n, 1, 4, 4, generator=g) + shift, torch.randint(0, 3, (n,), generator=g)


def test_classifier_report_equals_its_parts() -> None:
    f = _classifier()
    x, y = _data(120, 1)
    xv, yv = _data(60, 2)
    far, _ = _data(50, 3, shift=3.0)
    rep = evaluate_image_classifier(f, x, y, xv, yv, {"far": far}, n_bins=10, n_ood=80, n_boot=50,
                                    generator=torch.Generator().manual_seed(0), batch_size=7)
    with torch.no_grad():
        logits = f(x)
    raw = calibration_report(logits, y, n_bins=10)
    # float32 logits of blocks of 7 rows and of one block may differ in the last bit
    assert (rep.accuracy, rep.nll, rep.ece_classwise, rep.ece_top_label) == pytest.approx(
        (raw.accuracy, raw.nll, raw.ece_classwise, raw.ece_top_label), abs=1e-7)
    with torch.no_grad():
        t = TemperatureScaling().fit(f(xv), yv)
    scaled = calibration_report(t(logits), y, n_bins=10)
    assert rep.temperature == pytest.approx(t.temperature) and rep.nll_scaled == pytest.approx(scaled.nll)
    assert len(rep.ood) == 3 and [r["score"] for r in rep.ood] == ["logp", "max_softmax", "grad_norm"]
    s_in, s_out = ood_scores(f, x[:80], kind="logp", batch_size=7), ood_scores(f, far, kind="logp", batch_size=7)
    d = detection_report(s_in, s_out, n_boot=50, generator=torch.Generator().manual_seed(0))
    assert rep.auroc("far", "logp") == d.auroc
    assert rep.ood[0]["n_in"] == 80 and rep.n_test == 120 and rep.n_val == 60
    assert any("temperature scaling" in line for line in rep.lines())
    with pytest.raises(KeyError, match="no OOD row for set 'near'"):
        rep.auroc("near", "logp")


def test_no_validation_set_means_no_temperature_and_bad_score_names_are_refused() -> None:
    f = _classifier()
    x, y = _data(30, 1)
    rep = evaluate_image_classifier(f, x, y, None, None, {}, n_boot=10)
    assert rep.temperature is None and rep.ood == [] and len(rep.lines()) == 1
    with pytest.raises(ValueError, match="scores: expected names among"):
        evaluate_image_classifier(f, x, y, None, None, {}, scores=("energy",))


def test_a_perfectly_separated_validation_set_is_reported_as_at_the_bound() -> None:
    x, _ = _data(40, 1)
    y = torch.arange(40) % 3

    def perfect(z: torch.Tensor) -> torch.Tensor:  # always right on its own rows
        return 5.0 * torch.nn.functional.one_hot(torch.arange(z.shape[0]) % 3, 3).float()

    rep = evaluate_image_classifier(perfect, x, y, x, y, {}, n_boot=10, scores=("logp",))
    assert rep.temperature_at_bound and "at the search bound" in rep.lines()[1]


def test_energy_report_equals_its_parts() -> None:
    torch.manual_seed(0)
    energy = lambda x: x.flatten(1).pow(2).sum(1)  # noqa: E731
    x, _ = _data(60, 1)
    far, _ = _data(40, 2, shift=2.0)
    rep = evaluate_image_energy(energy, x, x[:10] * 2, {"far": far}, n_boot=20,
                                generator=torch.Generator().manual_seed(1))
    assert rep.energy_test == pytest.approx(float(energy(x).double().mean()))
    assert rep.energy_ood["far"] == pytest.approx(float(energy(far).double().mean()))
    d = detection_report(-energy(x).double(), -energy(far).double(), n_boot=20,
                         generator=torch.Generator().manual_seed(1))
    assert rep.ood[0]["auroc"] == pytest.approx(d.auroc) and rep.ood[0]["auroc_low"] == pytest.approx(d.auroc_interval[0])
    assert "AUROC of -E" in rep.lines()[1]


def test_batched_concatenates_blocks_without_gradients() -> None:
    w = torch.ones(3, requires_grad=True)
    out = batched(lambda z: z @ w, torch.arange(21.0).reshape(7, 3), batch_size=2)
    assert out.shape == (7,) and not out.requires_grad
    with pytest.raises(ValueError, match="batch_size"):
        batched(lambda z: z, torch.zeros(2, 1), batch_size=0)
