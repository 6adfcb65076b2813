"""Continuous images on the command line: image EBMs from scratch, JEM, and the plain classifier.

``data.name`` = ``mnist``, ``fashion-mnist`` or ``digits`` (scikit-learn's 8x8) with ``model.kind``
= ``conv``, ``jem`` or ``classifier`` is served here; the same names with ``mlp``/``rbm`` are the
binary images of :mod:`ebms.cli.images`. Pixels are scaled to ``[-1, 1]``
(:func:`ebms.data.images.load_continuous_images`); ``vision.val_fraction`` of the training images
is held out (temperature scaling), ``vision.limit`` keeps the first N training images, and every
training batch gets Gaussian noise of standard deviation ``vision.data_noise`` (the usual
practice for image EBMs). Chains move in the box ``[-1, 1]`` (SGLD clips to it).

``model.kind``:

* ``conv``: :class:`~ebms.nets.ConvEnergy` (``vision.channels``, ``vision.groups``,
  ``vision.spectral_norm``) trained by ``objective.kind`` = ``pcd`` (replay buffer of
  ``objective.buffer_size`` chains, ``objective.k`` sampler steps per update),
  ``improved-cd`` (:class:`~ebms.objectives.ImprovedCD`: the KL term through the sampler with
  ``vision.kl_weight``, the entropy term ``vision.entropy_weight``, ``vision.augment``,
  ``vision.reservoir``), ``recovery`` (:class:`~ebms.objectives.RecoveryLikelihood` on a
  noise-conditional energy with the levels ``objective.sigmas``) or ``energy-matching``
  (:class:`~ebms.objectives.EnergyMatching`: flow matching from Gaussian noise, then plus CD; its samples
  follow its own path from that noise, :func:`transport_sample`).
* ``jem``: :class:`~ebms.models.JEM` on a :class:`~ebms.nets.ConvClassifier` trained by
  :class:`~ebms.objectives.JEMObjective` (``objective.kind = "jem"``): cross-entropy on labelled
  images plus ``vision.generative_weight`` (ramped up over ``vision.warmup_steps``) times PCD on
  ``E(x) = -logsumexp f(x)``; ``vision.conditional`` keeps one buffer block per class;
  ``vision.informative_init`` restarts chains from class-conditional Gaussians fitted to the
  labelled training images (an image energy's chains: one Gaussian fitted to all of them).
* ``classifier``: the same network trained by cross-entropy alone (``objective.kind = "ce"``):
  the baseline JEM is judged against.

``vision.labels_per_class = n`` keeps ``n`` labels per class (balanced, seeded by ``run.seed``);
a batch of ``train.batch_size`` images then holds, for JEM, ``batch_size - batch_size // 2``
labelled images and ``batch_size // 2`` images of the whole training set whose labels are not used
(semi-supervised learning; ``train.batch_size`` at least 2).

``eval`` (:func:`ebms.metrics.image_eval.evaluate_image_classifier`,
:func:`ebms.metrics.image_eval.evaluate_image_energy`): for a classifier, accuracy, NLL,
class-wise ECE (monograph Eq. 5.19, ``vision.ece_bins`` bins) and top-label ECE before and after
temperature scaling fitted on the held-out split, and for every set of ``vision.ood`` and every
score (``logp``, ``max_softmax``, ``grad_norm``) the AUROC with a 95 % bootstrap interval and the
AUPR; for an energy, the mean energies of test images, samples and noise and the AUROC of ``-E``
against every ``vision.ood`` set. Plots: ``samples.png``, ``energy_hist.png``, for the recovery
likelihood ``levels.png`` (each chain from noise through every level to its sample) and, for a
classifier, ``reliability.png`` and ``roc.png`` (when there is an OOD set); with
``vision.snapshot_every`` a grid of the chains every that many steps in ``samples/``.

``ebms classify RUN IMAGES...`` (:mod:`ebms.cli.classify`, :mod:`ebms.apply.images`) applies a trained run to
new images: labels and probabilities (``classifier``, ``jem``) and the score ``-E(x)`` (every kind).

``vision.ood`` unset means the default sets (the other 28x28 set for MNIST / Fashion-MNIST, noise,
flips, quarter turns) and ``[]`` means none. The other 28x28 set is optional: it is looked for where
``ebms`` looks by default (``$EBMS_DATA/<name>``, Debian's ``dataset-fashion-mnist``), never in
``data.root`` (the folder of ``data.name``'s own files, which have the same names). A default set
that is not installed is skipped: one line on stderr, ``ood_skipped`` in ``eval.json``; a set
named in ``vision.ood`` that is not installed stops ``ebms train`` before training (one line,
exit 2). The OOD keys, ``vision.ood_size`` and ``vision.ece_bins`` only change the evaluation: they
are not part of a checkpoint's identity, so ``eval`` may set them and a resume may change them.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any, ClassVar, cast

import torch
from torch import Tensor, nn

from ebms.apply.images import ImageClassifier, ImageEnergyScorer, applied_splits, weights_digest
from ebms.cli._config_rules import COUNT, FRACTION, NONNEG, Rule
from ebms.cli.build import OBJECTIVES, build, build_sampler, check_replay_buffer
from ebms.cli.config import Config, ConfigError
from ebms.cli.tasks import Task, check_batch_size, register
from ebms.data.augment import Augment, random_shift
from ebms.data.image_sets import OOD_SETS, ImageSplits, load_image_splits, missing_ood_sets, ood_images
from ebms.distributions.class_gaussian import ClassConditionalGaussian
from ebms.errors import DataError
from ebms.metrics.image_eval import (
    ImageClassifierReport,
    ImageEnergyReport,
    batched,
    evaluate_image_classifier,
    evaluate_image_energy,
)
from ebms.metrics.ood import ood_scores
from ebms.models.jem import JEM
from ebms.nets import ConvEnergy
from ebms.nets.classifier import ConvClassifier
from ebms.nets.noise_conditional import NoiseConditionalEnergy
from ebms.objectives import PersistentContrastiveDivergence, ReplayBuffer
from ebms.objectives.classification import CrossEntropy
from ebms.objectives.energy_matching import energy_matching_sample
from ebms.objectives.improved_cd import ImprovedCD
from ebms.objectives.jem import JEMObjective
from ebms.objectives.recovery import PROTOCOLS, RecoveryLikelihood, protocol_options, recovery_sample
from ebms.objectives.reservoir import ReservoirBuffer
from ebms.samplers import Sampler
from ebms.spaces import Box
from ebms.train.callbacks import SampleSnapshot

__all__ = ["IMAGE_OBJECTIVES", "ClassifierTask", "ConvTask", "ImageObjective", "JEMTask", "VisionClassifierReport",
           "VisionEnergyReport", "VisionSettings", "VisionTask", "transport_sample"]

#: seed offsets: the labelled subset, the evaluation's noise and bootstrap, the samples of ``sample``.
LABEL_SEED, EVAL_SEED, SAMPLE_SEED = 37, 41, 7
#: the kernels that move on images (in the box [-1, 1]).
IMAGE_SAMPLERS = ("sgld", "ula", "mala")


@dataclass(frozen=True)
class ImageObjective:
    """What an ``objective.kind`` of the image tasks needs besides its builder.

    Attributes:
        replay: its chains come from a replay buffer (``train.batch_size`` at most its slots).
        noise_conditional: it trains a noise-conditional energy (levels ``objective.sigmas``), sampled
            progressively and evaluated at its lowest level (the recovery likelihood).
        restarts: its chains may restart at ``vision.informative_init``'s Gaussians.
        transport: it is sampled by its own schedule from Gaussian noise (energy matching:
            :func:`~ebms.objectives.energy_matching_sample`), not by ``sampler.kind`` from uniform noise.
    """

    replay: bool = False
    noise_conditional: bool = False
    restarts: bool = True
    transport: bool = False


IMAGE_OBJECTIVES = {"pcd": ImageObjective(replay=True), "improved-cd": ImageObjective(replay=True),
                    "recovery": ImageObjective(noise_conditional=True, restarts=False),
                    "jem": ImageObjective(replay=True), "ce": ImageObjective(restarts=False),
                    "energy-matching": ImageObjective(restarts=False, transport=True)}


@dataclass
class VisionSettings:
    """``[vision]``: the keys of continuous-image tasks."""

    limit: int | None = None
    val_fraction: float = 0.1
    labels_per_class: int | None = None
    channels: list[int] = field(default_factory=lambda: [16, 32, 64])
    groups: int = 8
    spectral_norm: bool = False
    data_noise: float = 0.01
    generative_weight: float = 1.0
    warmup_steps: int = 0
    conditional: bool = False
    informative_init: bool = True
    kl_weight: float = 1.0
    entropy_weight: float = 0.0
    augment: bool = False
    reservoir: bool = False
    recovery_b: float = 0.1
    recovery_protocol: str = "plain"
    normalize: bool = True
    ood: list[str] | None = None
    ood_size: int = 2000
    ece_bins: int = 20
    snapshot_every: int = 0


def transport_sample(cfg: Config, model: nn.Module, shape: tuple[int, ...], n: int, steps: int,
                     generator: torch.Generator) -> Tensor:
    r"""Energy matching's samples (``objective.kind = "energy-matching"``): ``n`` chains of
    :func:`~ebms.objectives.energy_matching_sample` from :math:`\mathcal N(0, I)` (the noise its flow term starts
    from), over the horizon of its training chains, ``objective.k * sampler.step_size``, cut into ``steps`` steps
    (``dt = horizon / steps``: more steps integrate the same path more finely)."""
    o = cfg.objective
    x0 = torch.randn((n, *shape), generator=generator)
    return energy_matching_sample(model, x0, 0.0, steps=steps, dt=o.k * cfg.sampler.step_size / steps,
                                  tau_star=o.tau_star, epsilon_max=o.epsilon_max, generator=generator)


def _skip_lines(skipped: dict[str, str]) -> list[str]:
    return [f"OOD {name:<13} skipped: {note}" for name, note in skipped.items()]


@dataclass
class VisionClassifierReport(ImageClassifierReport):
    """:class:`~ebms.metrics.image_eval.ImageClassifierReport` with ``ood_skipped``: the default OOD sets
    left out because they are not installed, each with its note (``eval.json`` keeps it)."""

    ood_skipped: dict[str, str] = field(default_factory=dict)
    #: :func:`ebms.apply.images.weights_digest` of the weights evaluated: ``ebms classify`` takes ``temperature``
    #: for a run whose weights have this digest (:func:`ebms.apply.images.evaluated_calibration`).
    weights_sha256: str = ""

    def lines(self) -> list[str]:
        return [*super().lines(), *_skip_lines(self.ood_skipped)]


@dataclass
class VisionEnergyReport(ImageEnergyReport):
    """:class:`~ebms.metrics.image_eval.ImageEnergyReport` with ``ood_skipped`` (see
    :class:`VisionClassifierReport`)."""

    ood_skipped: dict[str, str] = field(default_factory=dict)

    def lines(self) -> list[str]:
        return [*super().lines(), *_skip_lines(self.ood_skipped)]


class VisionTask(Task[VisionSettings]):
    """Continuous images (see the module docstring): the keys, data, chains, OOD sets and plots every
    kind shares. Each ``model.kind`` is a subclass registered for it (:class:`ConvTask`,
    :class:`JEMTask`, :class:`ClassifierTask`)."""

    data_names = ("mnist", "fashion-mnist", "digits")
    what = "continuous images"
    section = "vision"
    settings_type = VisionSettings
    rules: ClassVar[dict[str, Rule]] = {
        "limit": COUNT, "val_fraction": FRACTION, "labels_per_class": COUNT,
        "channels": Rule(low=1, min_items=1), "groups": COUNT, "spectral_norm": Rule(), "data_noise": NONNEG,
        "generative_weight": NONNEG, "warmup_steps": NONNEG, "conditional": Rule(), "informative_init": Rule(),
        "kl_weight": NONNEG, "entropy_weight": NONNEG, "augment": Rule(), "reservoir": Rule(),
        "recovery_b": Rule(low=0, high=4, low_open=True, high_open=True),
        "recovery_protocol": Rule(choices=PROTOCOLS), "normalize": Rule(),
        "ood": Rule(choices=OOD_SETS, text=f"a list of out-of-distribution sets among {', '.join(OOD_SETS)} "
                                          f"([]: none)"), "ood_size": COUNT, "ece_bins": COUNT, "snapshot_every": NONNEG}
    objective_kinds = tuple(IMAGE_OBJECTIVES)
    defaults: ClassVar[dict[str, Any]] = {"train.batch_size": 64, "train.lr": 1e-4, "sampler.step_size": 1.0,
                                          "sampler.noise_scale": 0.01, "objective.buffer_size": 10000}
    #: the ``objective.kind`` values this kind trains by.
    trained_by: ClassVar[tuple[str, ...]] = ()
    #: it learns from labels (a classifier); else an energy of the images alone.
    labels: ClassVar[bool] = True
    applies = ("classify",)

    def describe(self, cfg: Config) -> str:
        return f"data.name={cfg.data.name!r} with model.kind={cfg.model.kind!r} ({self.what})"

    def objective(self, cfg: Config) -> ImageObjective:
        """What the configured ``objective.kind`` needs (:data:`IMAGE_OBJECTIVES`)."""
        return IMAGE_OBJECTIVES[cfg.objective.kind]

    def check(self, cfg: Config) -> None:
        s, kind = self.settings(cfg), cfg.model.kind
        if cfg.objective.kind not in self.trained_by:
            raise ConfigError(f"objective.kind: model.kind = {kind!r} trains by {', '.join(self.trained_by)}; "
                              f"got {cfg.objective.kind!r}")
        if cfg.sampler.kind not in IMAGE_SAMPLERS:
            raise ConfigError(f"sampler.kind: images move by sgld, ula or mala; got {cfg.sampler.kind!r}")
        if any(c % s.groups for c in s.channels):
            raise ConfigError(f"vision.groups: expected a divisor of every entry of vision.channels {s.channels}; "
                              f"got {s.groups}")
        if self.objective(cfg).replay:  # chains drawn from a replay buffer
            check_replay_buffer(cfg, classes=self.buffer_classes(cfg))
        if self.objective(cfg).noise_conditional and len(cfg.objective.sigmas) < 1:
            raise ConfigError("objective.sigmas: the recovery likelihood needs its noise levels, e.g. "
                              "objective.sigmas=[0.05, 0.1, 0.2]; got []")
        if self.objective(cfg).noise_conditional and s.spectral_norm:
            raise ConfigError("vision.spectral_norm: the recovery likelihood's noise-conditional energy has no "
                              "spectral-norm option; set vision.spectral_norm = false")
        if not s.normalize and "conv" not in self.model_kinds:
            raise ConfigError("vision.normalize: only an image energy (model.kind = 'conv') can drop its GroupNorm; "
                              f"got model.kind = {cfg.model.kind!r}: set vision.normalize = true")
        if s.labels_per_class is not None and not self.labels:
            raise ConfigError("vision.labels_per_class: an image energy (model.kind = 'conv') uses no labels; "
                              "set model.kind = 'jem' or 'classifier'")
        other_size = ("mnist", "fashion-mnist") if cfg.data.name == "digits" else ()
        valid = [o for o in OOD_SETS if o != cfg.data.name and o not in other_size]
        bad = [o for o in s.ood or () if o not in valid]
        if bad:
            raise ConfigError(f"vision.ood: {bad[0]!r} is not an out-of-distribution set for data.name = "
                              f"{cfg.data.name!r} (the same data, or images of another size); expected some of "
                              f"{', '.join(valid)}")

    def recovery_options(self, cfg: Config, *, weights: bool = False) -> dict[str, Any]:
        s = self.settings(cfg)
        return protocol_options(s.recovery_protocol, cfg.objective.sigmas, s.recovery_b, weights=weights)

    def buffer_classes(self, cfg: Config) -> int | None:
        """Classes a class-conditional replay buffer splits its slots among (``None``: one pool)."""
        return None

    def semi_supervised(self, cfg: Config) -> bool:
        """Each batch holds labelled and unlabelled halves (JEM with ``vision.labels_per_class``)."""
        return False

    def ood_sets(self, cfg: Config) -> list[str]:
        """``vision.ood`` (``[]``: none), or when it is unset the default sets: the other 28x28 set (for
        MNIST / Fashion-MNIST), noise, flips, turns."""
        s = self.settings(cfg)
        if s.ood is not None:
            return list(s.ood)
        other = {"mnist": ["fashion-mnist"], "fashion-mnist": ["mnist"]}.get(cfg.data.name, [])
        return [*other, "noise", "flip", "rotate"]

    def check_inputs(self, cfg: Config) -> None:
        """A set named in ``vision.ood`` must be installed: else one line before anything is trained."""
        missing = missing_ood_sets(self.settings(cfg).ood or ())
        if missing:
            name, note = next(iter(missing.items()))
            raise ConfigError(f"vision.ood: {note}; or leave {name!r} out of vision.ood")

    def ood_data(self, cfg: Config, data: ImageSplits, generator: torch.Generator
                 ) -> tuple[dict[str, Tensor], dict[str, str]]:
        """The images of :meth:`ood_sets` (``vision.ood_size`` each, noise drawn from ``generator``) and the
        default sets skipped for not being installed, with their notes.

        Raises:
            ConfigError: a set named in ``vision.ood`` is not installed.
        """
        s, sets, skipped = self.settings(cfg), {}, {}
        for name in self.ood_sets(cfg):
            try:  # never data.root: it holds data.name's own files, and both 28x28 sets use the same file names
                sets[name] = ood_images(name, data, s.ood_size, generator=generator)
            except FileNotFoundError as e:
                if s.ood is not None:
                    raise ConfigError(f"vision.ood: {e}; or leave {name!r} out of vision.ood") from None
                skipped[name] = str(e)
        return sets, skipped

    def load(self, cfg: Config) -> ImageSplits:
        s, d = self.settings(cfg), cfg.data
        return build("vision", s, load_image_splits, d.name, root=d.root, limit=s.limit,
                     val_fraction=s.val_fraction, labels_per_class=s.labels_per_class,
                     seed=cfg.run.seed + LABEL_SEED, n_test=d.n_test)

    def load_applied(self, cfg: Config, stored: dict[str, bytes]) -> ImageSplits | None:
        """``classify``'s image size and classes from ``data.name`` (:func:`~ebms.apply.images.applied_splits`), no
        image read; a classifier trained on ``vision.limit`` images may have seen fewer classes: the full load."""
        return None if self.labels and self.settings(cfg).limit is not None else applied_splits(cfg.data.name)

    def applier(self, command: str, cfg: Config, model: nn.Module, data: ImageSplits) -> Any:
        """``ebms classify``: labels, probabilities at the temperature ``eval`` fits, ``logsumexp f(x)`` scores
        (opened without its images: they are loaded if a temperature needs them, :meth:`validation`)."""
        return ImageClassifier.for_splits(cast(JEM, model).logits, data, validation=partial(self.validation, cfg))

    def validation(self, cfg: Config) -> tuple[Tensor, Tensor]:
        """The validation images and labels of the run of ``cfg`` (:class:`DataError`: they cannot be loaded)."""
        try:
            data = self.load(cfg)
        except ConfigError as e:
            raise DataError(str(e)) from None
        return data.val, data.val_targets

    def space(self, data: ImageSplits) -> Box:
        return Box(data.image_shape, -1.0, 1.0)

    def common(self, cfg: Config) -> dict[str, Any]:
        """The network keys every kind's convolutional trunk takes."""
        s = self.settings(cfg)
        return {"channels": tuple(s.channels), "groups": s.groups, "spectral_norm": s.spectral_norm,
                "activation": cfg.model.activation}

    def build_model(self, cfg: Config, data: ImageSplits) -> nn.Module:
        """JEM's model: a :class:`~ebms.nets.ConvClassifier` whose logits also give ``E(x)``."""
        c, size, s = data.image_shape[0], data.image_shape[1:], self.settings(cfg)
        return JEM(build("vision", s, ConvClassifier, c, size, data.n_classes, **self.common(cfg)), data.n_classes)

    def informative_start(self, cfg: Config, data: ImageSplits) -> ClassConditionalGaussian | None:
        """Where chains restart with ``vision.informative_init``: JEM's class-conditional Gaussians fitted
        to the labelled training images; for an image energy (``conv``, no labels used) one Gaussian
        fitted to all training images. ``None`` when the key is off or for the recovery likelihood."""
        if not self.settings(cfg).informative_init or not self.objective(cfg).restarts:
            return None
        lab = data.train_targets >= 0
        return ClassConditionalGaussian.fit(data.train[lab], data.train_targets[lab], n_classes=data.n_classes)

    def _buffer(self, cfg: Config, data: ImageSplits, n_classes: int | None) -> ReplayBuffer:
        s, o = self.settings(cfg), cfg.objective
        q = self.informative_start(cfg, data)
        init = None if q is None else q.sample  # (n, generator, labels) -> x; the buffer clips to [-1, 1]
        kind = ReservoirBuffer if s.reservoir else ReplayBuffer
        kw = {"init": init} if init is not None else {}
        return build("objective", o, kind, o.buffer_size, self.space(data), reinit_prob=o.reinit_prob,
                     n_classes=n_classes, **kw)

    def build_objective(self, cfg: Config, data: ImageSplits) -> Callable[..., Any]:
        return self.objectives(cfg, data, build_sampler(cfg, self.space(data)))[cfg.objective.kind]()

    def objectives(self, cfg: Config, data: ImageSplits, sampler: Sampler) -> dict[str, Callable[[], Any]]:
        """The builder of each ``objective.kind`` this kind trains by."""
        return {}

    def training_data(self, cfg: Config, data: ImageSplits) -> Callable[[int, torch.Generator], Any]:
        """``(n, generator) -> batch``: noisy images (and labels; ``-1`` marks an unlabelled row)."""
        s, half, labels = self.settings(cfg), self.semi_supervised(cfg), self.labels
        labelled = torch.nonzero(data.train_targets >= 0).squeeze(1)
        check_batch_size(cfg, int(data.train.shape[0] if half else labelled.numel()),
                         f"training images of {cfg.data.name}")
        noise = s.data_noise
        if half and cfg.train.batch_size < 2:  # semi-supervised JEM: a labelled and an unlabelled half
            raise ConfigError(f"train.batch_size: semi-supervised JEM splits each batch into labelled and unlabelled "
                              f"halves; expected at least 2; got {cfg.train.batch_size}")

        def draw(n: int, g: torch.Generator) -> Any:
            n_lab = n - n // 2 if half else n
            rows = [labelled[torch.randint(labelled.numel(), (n_lab,), generator=g)]]
            if half:
                rows.append(torch.randint(data.train.shape[0], (n // 2,), generator=g))
            elif not labels:
                rows = [torch.randint(data.train.shape[0], (n,), generator=g)]
            idx = torch.cat(rows)
            x = data.train[idx]
            if noise > 0:
                x = (x + noise * torch.randn(x.shape, generator=g)).clamp_(-1.0, 1.0)  # stay in the chains' box
            if not labels:
                return x
            y = data.train_targets[idx].clone()
            y[n_lab:] = -1
            return x, y

        return draw

    def energy(self, cfg: Config, model: nn.Module) -> Any:
        """The energy of images the model defines (a noise-conditional one's at its lowest level)."""
        return cast(Any, model).at(0) if self.objective(cfg).noise_conditional else model

    def report(self, cfg: Config, model: nn.Module, data: ImageSplits, step: int, *, use_ais: bool = False) -> Any:
        """The figures of the module docstring; a default OOD set that is not installed is skipped
        (one line on stderr, ``ood_skipped`` in the report)."""
        g = torch.Generator().manual_seed(cfg.run.seed + EVAL_SEED)
        ood, skipped = self.ood_data(cfg, data, g)
        for name, note in skipped.items():
            print(f"note: vision.ood: the default set {name!r} is skipped: {note}", file=sys.stderr)
        return self.evaluate(cfg, model, data, step, ood, skipped, g)

    def evaluate(self, cfg: Config, model: nn.Module, data: ImageSplits, step: int, ood: dict[str, Tensor],
                 skipped: dict[str, str], g: torch.Generator) -> Any:
        """A classifier's figures (:func:`~ebms.metrics.image_eval.evaluate_image_classifier`)."""
        s = self.settings(cfg)
        report = evaluate_image_classifier(cast(JEM, model).logits, data.test, data.test_targets, data.val,
                                           data.val_targets, ood, n_bins=s.ece_bins, n_ood=s.ood_size, step=step,
                                           generator=g, progress=cfg.run.progress)
        return VisionClassifierReport(**vars(report), ood_skipped=skipped, weights_sha256=weights_digest(model))

    def sampler(self, cfg: Config, data: ImageSplits) -> Sampler:
        return build_sampler(cfg, self.space(data))

    def sample(self, cfg: Config, model: nn.Module, data: ImageSplits, *, n: int | None = None,
               steps: int | None = None, seed: int | None = None) -> Tensor:
        """Fresh chains of ``eval.sample_steps`` steps from uniform noise, or from JEM's informative start
        (where its chains restart in training), or the recovery likelihood's progressive sampling."""
        n = cfg.eval.n_samples if n is None else n
        g = torch.Generator().manual_seed(cfg.run.seed + SAMPLE_SEED if seed is None else seed)
        if self.objective(cfg).noise_conditional:
            return recovery_sample(model, tuple(cfg.objective.sigmas), n, k=cfg.objective.k,
                                   **self.recovery_options(cfg),
                                   event_shape=data.image_shape, generator=g)
        steps = cfg.eval.sample_steps if steps is None else steps
        if self.objective(cfg).transport:
            return transport_sample(cfg, model, data.image_shape, n, steps, g)
        q = self.informative_start(cfg, data)
        x0 = self.space(data).random(n, generator=g) if q is None else q.sample(n, g).clamp(-1.0, 1.0)
        return self.sampler(cfg, data).sample(model, x0, steps, generator=g)
    def plot(self, x: Tensor, data: ImageSplits, title: str, ax: Any = None) -> Any:
        from ebms.viz import image_grid

        k = min(x.shape[0], 100)
        return image_grid(x[:k].clamp(-1, 1) * 0.5 + 0.5, ax=ax, title=title, nrow=10)

    def callbacks(self, cfg: Config, data: ImageSplits) -> list[Any]:
        every = self.settings(cfg).snapshot_every
        if not every:
            return []

        def grid(trainer: Any, step: int, path: Path) -> Path:
            from ebms.viz import save_figure

            buffer = getattr(trainer.objective, "buffer", None)
            if buffer is not None and bool(buffer.filled.any()):
                x = buffer.data[buffer.filled][:100]
            else:
                x = self.sample(cfg, trainer.model, data, n=64, steps=min(cfg.eval.sample_steps, 50))
            fig = self.plot(x, data, f"chains at step {step}").figure
            save_figure(fig, path)
            return path

        return [SampleSnapshot(grid, every)]

    def write_plots(self, run_dir: Path, cfg: Config, model: nn.Module, data: ImageSplits) -> list[Path]:
        """``samples.png`` (test images beside samples), ``energy_hist.png`` (energies of test images,
        samples and the OOD sets) and, for a classifier, ``reliability.png`` and (with an OOD set)
        ``roc.png``."""
        from ebms.viz import level_grid, new_figure, plot_energy_histograms, plot_reliability, plot_roc, save_figure

        s = self.settings(cfg)
        samples = self.sample(cfg, model, data, n=100)
        fig = new_figure(figsize=(9, 4.5))
        ax_d, ax_m = fig.subplots(1, 2)
        self.plot(data.test[:100], data, f"test images ({data.name})", ax=ax_d)
        self.plot(samples, data, f"model samples ({cfg.sampler.kind})", ax=ax_m)
        paths = {"samples.png": fig}
        if self.objective(cfg).noise_conditional:  # each chain from noise through every level to its sample
            levels = recovery_sample(model, tuple(cfg.objective.sigmas), 10, k=cfg.objective.k, keep_levels=True,
                                     **self.recovery_options(cfg), event_shape=data.image_shape,
                                     generator=torch.Generator().manual_seed(cfg.run.seed + SAMPLE_SEED))
            paths["levels.png"] = level_grid(levels, title="noise → levels → sample")
        g = torch.Generator().manual_seed(cfg.run.seed + EVAL_SEED)
        ood, _ = self.ood_data(cfg, data, g)  # a skipped set was reported by `report`
        energy = self.energy(cfg, model)
        x_in = data.test[: s.ood_size]
        sets = {"test": x_in, "samples": samples, **ood}
        paths["energy_hist.png"] = plot_energy_histograms({k: batched(energy, v) for k, v in sets.items()},
                                                          title=f"energies ({data.name}, step of the checkpoint)")
        if self.labels:
            logits = cast(JEM, model).logits
            probs = torch.softmax(batched(logits, data.test), dim=-1)
            paths["reliability.png"] = plot_reliability(probs, data.test_targets, n_bins=s.ece_bins,
                                                        title=f"reliability ({data.name} test)")
            if ood:  # vision.ood = []: no ROC to draw
                fig = new_figure(figsize=(9, 4.5))
                for ax, kind in zip(fig.subplots(1, 2), ("logp", "max_softmax")):
                    scores = {k: ood_scores(logits, v, kind=kind) for k, v in ood.items()}
                    plot_roc(ood_scores(logits, x_in, kind=kind), scores, ax=ax, title=f"score {kind}")
                paths["roc.png"] = fig
        for name, figure in paths.items():
            save_figure(figure, run_dir / name)
        return [run_dir / name for name in paths]


class ConvTask(VisionTask):
    """``conv``: an image energy (:class:`~ebms.nets.ConvEnergy`, or a noise-conditional one for the
    recovery likelihood) trained by ``pcd``, ``improved-cd`` or ``recovery``; no labels."""

    model_kinds = ("conv",)
    trained_by = ("pcd", "improved-cd", "recovery", "energy-matching")
    labels = False

    def build_model(self, cfg: Config, data: ImageSplits) -> nn.Module:
        s, c, size = self.settings(cfg), data.image_shape[0], data.image_shape[1:]
        if self.objective(cfg).noise_conditional:
            return build("vision", s, NoiseConditionalEnergy, data.image_shape, len(cfg.objective.sigmas), trunk="conv",
                         channels=tuple(s.channels), groups=s.groups, normalize=s.normalize, activation=cfg.model.activation)
        return build("vision", s, ConvEnergy, c, size, normalize=s.normalize, **self.common(cfg))

    def applier(self, command: str, cfg: Config, model: nn.Module, data: ImageSplits) -> Any:
        """``ebms classify``: ``-E(x)`` only (no labels; a noise-conditional energy at its lowest level)."""
        return ImageEnergyScorer.for_splits(self.energy(cfg, model), data)

    def informative_start(self, cfg: Config, data: ImageSplits) -> ClassConditionalGaussian | None:
        if not self.settings(cfg).informative_init or not self.objective(cfg).restarts:
            return None
        return ClassConditionalGaussian.fit(data.train, torch.zeros(data.train.shape[0], dtype=torch.long))

    def objectives(self, cfg: Config, data: ImageSplits, sampler: Sampler) -> dict[str, Callable[[], Any]]:
        s, o = self.settings(cfg), cfg.objective

        def improved_cd(buffer: ReplayBuffer) -> Any:
            # shifted-in pixels take the background value -1 (black), not 0 (mid-grey in [-1, 1])
            shift = partial(random_shift, max_shift=2, fill=-1.0)
            augment = Augment([shift], clamp=(-1.0, 1.0)) if s.augment else None
            return build("objective", o, ImprovedCD, sampler, buffer, k=o.k, kl_weight=s.kl_weight,
                         entropy_weight=s.entropy_weight, augment=augment, regularization=o.regularization)

        return {"recovery": lambda: build("objective", o, RecoveryLikelihood, tuple(o.sigmas), k=o.k,
                                          **self.recovery_options(cfg, weights=True)),
                "pcd": lambda: PersistentContrastiveDivergence(sampler, self._buffer(cfg, data, None), k=o.k,
                                                               regularization=o.regularization),
                "improved-cd": lambda: improved_cd(self._buffer(cfg, data, None)),
                "energy-matching": lambda: OBJECTIVES["energy-matching"](o, sampler, self.space(data), lambda: data.train)}

    def evaluate(self, cfg: Config, model: nn.Module, data: ImageSplits, step: int, ood: dict[str, Tensor],
                 skipped: dict[str, str], g: torch.Generator) -> Any:
        """An energy's figures (:func:`~ebms.metrics.image_eval.evaluate_image_energy`)."""
        s = self.settings(cfg)
        samples = self.sample(cfg, model, data, n=min(s.ood_size, cfg.eval.n_samples))
        report = evaluate_image_energy(self.energy(cfg, model), data.test[: s.ood_size], samples, ood, step=step,
                                       generator=g, progress=cfg.run.progress)
        return VisionEnergyReport(**vars(report), ood_skipped=skipped)


class JEMTask(VisionTask):
    """``jem``: :class:`~ebms.models.JEM` trained by :class:`~ebms.objectives.JEMObjective` (module docstring)."""

    model_kinds = ("jem",)
    trained_by = ("jem",)
    defaults: ClassVar[dict[str, Any]] = {**VisionTask.defaults, "objective.kind": "jem"}

    def buffer_classes(self, cfg: Config) -> int | None:
        """10 with ``vision.conditional``: a class-conditional buffer splits its slots among the 10
        classes every image set has."""
        return 10 if self.settings(cfg).conditional else None

    def semi_supervised(self, cfg: Config) -> bool:
        return self.settings(cfg).labels_per_class is not None

    def objectives(self, cfg: Config, data: ImageSplits, sampler: Sampler) -> dict[str, Callable[[], Any]]:
        s, o = self.settings(cfg), cfg.objective

        def jem() -> Any:
            buffer = self._buffer(cfg, data, data.n_classes if s.conditional else None)
            return build("objective", o, JEMObjective, sampler, buffer, k=o.k, generative_weight=s.generative_weight,
                         warmup_steps=s.warmup_steps, conditional=s.conditional, regularization=o.regularization)

        return {"jem": jem}


class ClassifierTask(VisionTask):
    """``classifier``: JEM's network trained by cross-entropy alone (``ce``), the baseline JEM is judged against."""

    model_kinds = ("classifier",)
    trained_by = ("ce",)
    defaults: ClassVar[dict[str, Any]] = {**VisionTask.defaults, "objective.kind": "ce", "train.lr": 1e-3}

    def objectives(self, cfg: Config, data: ImageSplits, sampler: Sampler) -> dict[str, Callable[[], Any]]:
        return {"ce": CrossEntropy}


for _task in (ConvTask(), JEMTask(), ClassifierTask()):
    register(_task)
