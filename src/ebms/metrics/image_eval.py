"""Test figures of image classifiers (JEM or plain) and of image energies.

:func:`evaluate_image_classifier` judges a classifier ``x -> logits (B, K)`` three ways on held-out
images: accuracy and NLL; calibration (class-wise ECE, the monograph's Eq. 5.19, and top-label ECE,
before and after temperature scaling fitted on a validation split: the usual post-hoc baseline,
Guo et al. 2017); and out-of-distribution detection, where for every OOD set and every score of
:func:`~ebms.metrics.ood.ood_scores` (``logp = logsumexp f(x)``, ``max_softmax``, ``grad_norm``)
the in-distribution test images are the positive class (AUROC with a stratified bootstrap
interval, AUPR, FPR at 95 % TPR; :func:`~ebms.metrics.ood.detection_report`).

:func:`evaluate_image_energy` judges an unconditional energy: the mean energies of test images,
model samples and each OOD set, and the AUROC of ``-E`` separating the test images from each set.

Both return a report whose fields are JSON-able (``eval.json``) and whose :meth:`lines` print it.

References:
    Grathwohl, W. et al. (2020). "Your classifier is secretly an energy based model and you should
    treat it like one." ICLR (calibration and OOD detection of JEM, the gradient-norm score).
    Guo, C., Pleiss, G., Sun, Y. & Weinberger, K. Q. (2017). "On calibration of modern neural
    networks." ICML (top-label ECE, temperature scaling).
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import Tensor

from ebms._checks import check_int
from ebms._progress import progress_bar
from ebms.metrics.calibration import TemperatureScaling, calibration_report
from ebms.metrics.ood import OOD_SCORE_KINDS, detection_report, ood_scores

__all__ = ["ImageClassifierReport", "ImageEnergyReport", "batched", "evaluate_image_classifier",
           "evaluate_image_energy"]

#: the score order of the reports (the JEM paper's three).
SCORES = ("logp", "max_softmax", "grad_norm")


def batched(fn: Callable[[Tensor], Tensor], x: Tensor, batch_size: int = 500) -> Tensor:
    """``fn`` over ``x`` in row blocks of ``batch_size``, without gradients, concatenated."""
    check_int(batch_size, "batch_size", minimum=1)
    with torch.no_grad():
        return torch.cat([fn(x[i:i + batch_size]) for i in range(0, x.shape[0], batch_size)])


@dataclass
class ImageClassifierReport:
    """Accuracy, calibration and OOD detection of an image classifier (see the module docstring).

    Attributes:
        step: the training step of the model.
        accuracy, nll: on the test images (share, nats).
        ece_classwise, ece_top_label: ECE (``n_bins`` bins) of the raw softmax.
        temperature: the temperature fitted on the validation images (``None`` without them).
        temperature_at_bound: the validation NLL still fell at the search bound (e.g. every validation
            image classified right, which pushes ``T`` to 0): the scaled figures are not a fair baseline.
        accuracy_scaled, nll_scaled, ece_classwise_scaled, ece_top_label_scaled: the same after scaling.
        ood: one dict per (OOD set, score): ``set``, ``score``, ``auroc``, ``auroc_low``,
            ``auroc_high``, ``aupr_in``, ``aupr_out``, ``fpr95``, ``n_in``, ``n_out``.
        n_test, n_val, n_bins: sizes and bins.
    """

    step: int
    accuracy: float
    nll: float
    ece_classwise: float
    ece_top_label: float
    temperature: float | None
    nll_scaled: float | None
    ece_classwise_scaled: float | None
    ece_top_label_scaled: float | None
    temperature_at_bound: bool = False
    ood: list[dict[str, Any]] = field(default_factory=list)
    n_test: int = 0
    n_val: int = 0
    n_bins: int = 20

    def auroc(self, ood_set: str, score: str) -> float:
        """The AUROC of one (OOD set, score) pair."""
        for row in self.ood:
            if row["set"] == ood_set and row["score"] == score:
                return float(row["auroc"])
        raise KeyError(f"no OOD row for set {ood_set!r} and score {score!r}")

    def lines(self) -> list[str]:
        out = [f"test, step {self.step}: accuracy {self.accuracy:.4f}, NLL {self.nll:.4f}, "
               f"ECE class-wise {self.ece_classwise:.4f}, top-label {self.ece_top_label:.4f} "
               f"({self.n_bins} bins, n = {self.n_test})"]
        if self.temperature is not None:
            bound = " (at the search bound: the validation set cannot fit it)" if self.temperature_at_bound else ""
            out.append(f"temperature scaling (T = {self.temperature:.3f}{bound}, fitted on {self.n_val} validation "
                       f"images): NLL {self.nll_scaled:.4f}, ECE class-wise {self.ece_classwise_scaled:.4f}, "
                       f"top-label {self.ece_top_label_scaled:.4f}")
        for row in self.ood:
            out.append(f"OOD {row['set']:<13} {row['score']:<11} AUROC {row['auroc']:.4f} "
                       f"[{row['auroc_low']:.4f}, {row['auroc_high']:.4f}], AUPR-in {row['aupr_in']:.4f}, "
                       f"FPR95 {row['fpr95']:.4f}")
        return out


def evaluate_image_classifier(
    classifier: Callable[[Tensor], Tensor],
    x_test: Tensor,
    y_test: Tensor,
    x_val: Tensor | None,
    y_val: Tensor | None,
    ood: Mapping[str, Tensor],
    *,
    n_bins: int = 20,
    n_ood: int = 2000,
    scores: Sequence[str] = SCORES,
    n_boot: int = 1000,
    step: int = 0,
    generator: torch.Generator | None = None,
    batch_size: int = 500,
    progress: bool = False,
) -> ImageClassifierReport:
    """Accuracy, calibration and OOD figures of ``classifier`` (see the module docstring).

    Args:
        classifier: ``(B, C, H, W) -> logits (B, K)`` (e.g. ``JEM.logits``), evaluated as it is
            (put the model in eval mode first).
        x_test, y_test: test images ``(N, C, H, W)`` and labels ``(N,)``.
        x_val, y_val: validation images and labels for temperature scaling (``None`` or empty: none).
        ood: ``{name: (M, C, H, W) images}``; the first ``n_ood`` test images are the positives.
        n_bins: ECE bins.
        n_ood: in-distribution images scored for detection.
        scores: which of :data:`~ebms.metrics.ood.OOD_SCORE_KINDS` to report.
        n_boot: bootstrap replicates of each AUROC interval.
        step: the model's training step (reported).
        generator: the bootstrap's randomness.
        batch_size: rows per classifier call.
        progress: a progress bar over the (score, OOD set) pairs.
    """
    for s in scores:
        if s not in OOD_SCORE_KINDS:
            raise ValueError(f"scores: expected names among {', '.join(OOD_SCORE_KINDS)}; got {s!r}")
    check_int(n_ood, "n_ood", minimum=1)
    logits = batched(classifier, x_test, batch_size)
    raw = calibration_report(logits, y_test, n_bins=n_bins)
    temperature = nll_s = ece_c = ece_t = None
    n_val = 0 if x_val is None else int(x_val.shape[0])
    at_bound = False
    if x_val is not None and y_val is not None and n_val > 0:
        with warnings.catch_warnings():  # reported in the lines instead (``temperature_at_bound``)
            warnings.simplefilter("ignore", RuntimeWarning)
            scaler = TemperatureScaling().fit(batched(classifier, x_val, batch_size), y_val)
        at_bound = scaler.at_bound
        scaled = calibration_report(scaler(logits), y_test, n_bins=n_bins)
        temperature, nll_s, ece_c, ece_t = scaler.temperature, scaled.nll, scaled.ece_classwise, scaled.ece_top_label
    rows = []
    x_in = x_test[:n_ood]
    bar = progress_bar(total=len(scores) * len(ood), desc="OOD", enabled=progress, leave=False, unit="set")
    for kind in scores:
        s_in = ood_scores(classifier, x_in, kind=kind, batch_size=batch_size)
        for name, x_out in ood.items():
            s_out = ood_scores(classifier, x_out, kind=kind, batch_size=batch_size)
            d = detection_report(s_in, s_out, n_boot=n_boot, generator=generator)
            rows.append({"set": name, "score": kind, **d.as_dict()})
            bar.update(1)
    bar.close()
    return ImageClassifierReport(step=step, accuracy=raw.accuracy, nll=raw.nll, ece_classwise=raw.ece_classwise,
                                 ece_top_label=raw.ece_top_label, temperature=temperature, nll_scaled=nll_s,
                                 ece_classwise_scaled=ece_c, ece_top_label_scaled=ece_t,
                                 temperature_at_bound=at_bound, ood=rows,
                                 n_test=raw.n, n_val=n_val, n_bins=n_bins)


@dataclass
class ImageEnergyReport:
    """Mean energies of test images, samples and OOD sets, and the AUROC of ``-E`` per OOD set.

    Attributes:
        step: the training step of the model.
        energy_test, energy_samples: mean energies.
        energy_ood: ``{set: mean energy}``.
        ood: one dict per set: ``set``, ``score`` (``"-energy"``), ``auroc``, ``auroc_low``, ``auroc_high``,
            ``aupr_in``, ``aupr_out``, ``fpr95``, ``n_in``, ``n_out``.
    """

    step: int
    energy_test: float
    energy_samples: float
    energy_ood: dict[str, float]
    ood: list[dict[str, Any]] = field(default_factory=list)

    def lines(self) -> list[str]:
        out = [f"test, step {self.step}: mean energy of test images {self.energy_test:.4g}, of model samples "
               f"{self.energy_samples:.4g} (gap {self.energy_samples - self.energy_test:.4g})"]
        for row in self.ood:
            out.append(f"OOD {row['set']:<13} mean energy {self.energy_ood[row['set']]:.4g}, AUROC of -E "
                       f"{row['auroc']:.4f} [{row['auroc_low']:.4f}, {row['auroc_high']:.4f}]")
        return out


def evaluate_image_energy(
    energy: Callable[[Tensor], Tensor],
    x_test: Tensor,
    samples: Tensor,
    ood: Mapping[str, Tensor],
    *,
    n_boot: int = 1000,
    step: int = 0,
    generator: torch.Generator | None = None,
    batch_size: int = 500,
    progress: bool = False,
) -> ImageEnergyReport:
    """Energies of ``x_test``, ``samples`` and every set of ``ood``; AUROC of ``-E`` (test = positive);
    ``progress``: a progress bar over the OOD sets."""
    e_test = batched(energy, x_test, batch_size).double()
    e_samples = batched(energy, samples, batch_size).double()
    means, rows = {}, []
    for name, x_out in progress_bar(ood.items(), total=len(ood), desc="OOD", enabled=progress, leave=False, unit="set"):
        e_out = batched(energy, x_out, batch_size).double()
        means[name] = float(e_out.mean())
        rows.append({"set": name, "score": "-energy",
                     **detection_report(-e_test, -e_out, n_boot=n_boot, generator=generator).as_dict()})
    return ImageEnergyReport(step=step, energy_test=float(e_test.mean()), energy_samples=float(e_samples.mean()),
                             energy_ood=means, ood=rows)
