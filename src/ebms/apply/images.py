r"""Labels, probabilities and out-of-distribution scores of new grey images: what ``ebms classify`` computes.

A trained image run (``data.name`` = ``mnist``, ``fashion-mnist`` or ``digits``) sees pixels mapped from
:math:`p \in [0, 1]` onto :math:`x = 2p - 1 \in [-1, 1]` (:func:`ebms.data.images.load_continuous_images`;
nothing is fitted on the training data: no mean, no scale, and the evaluation sees no dequantisation
noise). Images given as 8-bit grey levels :math:`v \in \{0, \dots, 255\}` (PNG, JPEG, IDX files, ``uint8``
tensors) take the loader's own formula :math:`x = (2v - 255)/255`, so the run's test images written as
8-bit files come back bit for bit.

* :class:`ImageClassifier` (``model.kind`` = ``classifier`` or ``jem``): from the logits :math:`f(x)`,
  ``(N, K)``, the arg max label, :math:`p(y \mid x) = \operatorname{softmax}(f(x)/T)` and the score
  :math:`\operatorname{logsumexp}_y f(x)[y] = -E(x) = \log p(x) + \log Z` (the JEM reading of a classifier,
  :func:`ebms.metrics.ood.ood_scores` ``"logp"``). ``T`` is by default the temperature ``ebms eval`` fits
  on the run's held-out validation split (Guo et al. 2017): the same split, model and fit, so the same
  ``T`` as ``eval.json``; it never changes a label. ``eval.json`` records the digest of the weights it was
  fitted on (:func:`weights_digest`), so a run opened without its images takes that ``T``
  (:func:`evaluated_calibration`) and otherwise loads its validation images only when a temperature is needed
  (``validation=``), falling back to ``T = 1`` with a note when they are gone.
* :class:`ImageEnergyScorer` (``model.kind`` = ``conv``): an unconditional energy has no labels; the
  score is :math:`-E(x) = \log p(x) + \log Z`.

Both scores are higher for images the model finds more in-distribution; :math:`\log Z` is unknown, so
a score compares images under one run only. :func:`read_images` reads image files, tensor files and IDX
files into ``(N, H, W)`` images in ``[0, 1]`` (``uint8`` levels or float32), naming each input.

References:
    Grathwohl et al. (2020), "Your classifier is secretly an energy based model and you should treat it like
    one", ICLR. Guo, Pleiss, Sun & Weinberger (2017), "On calibration of modern neural networks", ICML.
"""

from __future__ import annotations

import json
import math
import os
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

import numpy as np
import torch
from torch import Tensor, nn

from ebms._checks import check_int
from ebms.data.image_sets import ImageSplits
from ebms.data.images import CONTINUOUS_IMAGE_SETS
from ebms.data.mnist import read_idx
from ebms.errors import DataError
from ebms.metrics.calibration import TemperatureScaling
from ebms.metrics.image_eval import batched
from ebms.train.run_files import fingerprint

__all__ = ["CLASS_NAMES", "IMAGE_SIZES", "N_CLASSES", "AppliedSplits", "Calibration", "ImageClassification",
           "ImageClassifier", "ImageEnergyScorer", "ImageInputs", "applied_splits", "as_model_input", "check_images",
           "evaluated_calibration", "read_images", "weights_digest"]

#: class names of the image sets whose labels are not their digits (others: ``"0"`` ... ``"9"``).
CLASS_NAMES: dict[str, tuple[str, ...]] = {
    "fashion-mnist": ("T-shirt/top", "Trouser", "Pullover", "Dress", "Coat", "Sandal", "Shirt", "Sneaker", "Bag",
                      "Ankle boot"),
}
#: ``(H, W)`` of the images of each set (one grey channel).
IMAGE_SIZES: dict[str, tuple[int, int]] = {"mnist": (28, 28), "fashion-mnist": (28, 28), "digits": (8, 8)}
#: the classes of every set of :data:`IMAGE_SIZES` (their full training sets hold all ten).
N_CLASSES = 10
#: suffixes read as tensor files (anything else: an IDX file by its first bytes, else a picture).
TENSOR_SUFFIXES = (".safetensors", ".pt", ".pth", ".npy")


def _range(t: Tensor) -> str:
    return f"[{float(t.min()):.4g}, {float(t.max()):.4g}]" if t.numel() else "[]"


def check_images(images: object, size: tuple[int, int], what: str = "images") -> Tensor:
    """Grey images ``(N, H, W)`` in ``[0, 1]``: 8-bit levels stay ``uint8``, anything else becomes float32.

    Args:
        images: a tensor ``(N, H, W)``, ``(N, 1, H, W)`` or one image ``(H, W)``; ``uint8`` (or any integer
            type holding ``0..255``) for grey levels, ``bool`` or floating values in ``[0, 1]``.
        size: ``(H, W)`` the run takes.
        what: how messages name the input (e.g. ``"IMAGES: 'a.npy'"``).

    Returns:
        ``(N, H, W)``: ``uint8`` levels ``0..255``, or float32 in ``[0, 1]``.

    Raises:
        DataError: another type, shape or size, integers outside ``0..255``, NaN/Inf, floats outside ``[0, 1]``
            (the message gives what was found and the fix).
    """
    if isinstance(images, np.ndarray):
        images = torch.from_numpy(images)
    if not isinstance(images, Tensor):
        raise DataError(f"{what}: expected a tensor of grey images (N, H, W); got {type(images).__name__}")
    t, h, w = images.detach().cpu(), *size
    if t.dim() == 4 and t.shape[1] == 1:
        t = t[:, 0]
    elif t.dim() == 2:
        t = t[None]
    if t.dim() != 3:
        raise DataError(f"{what}: expected grey images (N, H, W), (N, 1, H, W) or one image (H, W); got shape "
                        f"{tuple(images.shape)}")
    if tuple(t.shape[1:]) != (h, w):
        raise DataError(f"{what}: images of {t.shape[1]}x{t.shape[2]} pixels; the run takes {h}x{w} (height x "
                        f"width): resize them first")
    if t.dtype == torch.bool:
        return t.to(torch.float32)
    if t.is_complex():
        raise DataError(f"{what}: expected real grey levels; got dtype {t.dtype}")
    if not t.is_floating_point():
        if t.numel() and (int(t.min()) < 0 or int(t.max()) > 255):
            raise DataError(f"{what}: integer images hold 8-bit grey levels 0..255; got values in {_range(t)}")
        return t.to(torch.uint8)
    if not bool(torch.isfinite(t).all()):
        raise DataError(f"{what}: expected finite pixel values in [0, 1]; got NaN or Inf")
    if t.numel() and (float(t.min()) < 0 or float(t.max()) > 1):
        hint = ": divide by 255 (or store uint8 levels)" if float(t.min()) >= 0 and float(t.max()) <= 255 else ""
        raise DataError(f"{what}: expected float pixel values in [0, 1] (or integers 0..255); got values in "
                        f"{_range(t)}{hint}")
    return t.to(torch.float32)


def as_model_input(images: Tensor) -> Tensor:
    """What the run's network sees: ``(N, H, W)`` images of :func:`check_images` as ``(N, 1, H, W)`` float32 in
    ``[-1, 1]`` (``uint8`` levels by the loader's exact formula ``(2v - 255)/255``, floats by ``2p - 1``)."""
    if images.dtype == torch.uint8:
        return ((images.to(torch.float32) * 2 - 255) / 255).unsqueeze(1)
    return (images.to(torch.float32) * 2 - 1).unsqueeze(1)


@dataclass(frozen=True)
class ImageInputs:
    """Images read by :func:`read_images`.

    Attributes:
        names: one per image: the file, or ``file:index`` (from 0) for each image of a tensor or IDX file.
        images: ``(N, H, W)``, ``uint8`` when every input held 8-bit levels, else float32 in ``[0, 1]``.
    """

    names: list[str]
    images: Tensor


def _picture(path: Path, what: str) -> Tensor:
    try:
        from PIL import Image, UnidentifiedImageError
    except ImportError:  # matplotlib depends on Pillow, so this is a broken installation
        raise DataError(f"{what}: reading pictures needs Pillow (pip install pillow); or give a tensor file "
                        f"({', '.join(TENSOR_SUFFIXES)}) or an IDX file") from None
    try:
        with Image.open(path) as im:
            if im.mode.startswith("I;16"):  # 16-bit grey: keep its depth
                return torch.from_numpy(np.asarray(im, dtype=np.float64) / 65535.0).to(torch.float32)
            return torch.from_numpy(np.array(im.convert("L"), dtype=np.uint8))
    except (UnidentifiedImageError, Image.DecompressionBombError, OSError, ValueError) as e:
        raise DataError(f"{what}: not a picture Pillow can read ({type(e).__name__}: {str(e).splitlines()[0]}), nor "
                        f"a tensor file ({', '.join(TENSOR_SUFFIXES)}) nor an IDX file") from None


def _tensor_file(path: Path, what: str) -> Tensor:
    suffix = path.suffix.lower()
    try:
        if suffix == ".safetensors":
            from safetensors.torch import load_file

            found = load_file(str(path))
            if len(found) != 1:
                raise DataError(f"{what}: expected one tensor in the file; got {len(found)} ({', '.join(found)})")
            return next(iter(found.values()))
        if suffix == ".npy":
            return torch.from_numpy(np.load(path, allow_pickle=False))
        loaded = torch.load(path, map_location="cpu", weights_only=True)  # never unpickles arbitrary objects
    except DataError:
        raise
    except Exception as e:  # every reader has its own errors for a damaged or foreign file
        raise DataError(f"{what}: cannot be read as a {suffix} tensor file ({type(e).__name__}: "
                        f"{str(e).splitlines()[0] if str(e) else 'no message'})") from None
    if not isinstance(loaded, Tensor):
        raise DataError(f"{what}: expected the file to hold one tensor; got {type(loaded).__name__}")
    return loaded


def _is_idx(path: Path) -> bool:
    with open(path, "rb") as f:
        head = f.read(3)
    return head[:2] == b"\x1f\x8b" or (head[:2] == b"\x00\x00" and len(head) == 3 and head[2] in range(0x08, 0x0F))


def read_images(paths: Sequence[str | os.PathLike[str]], size: tuple[int, int], what: str = "images") -> ImageInputs:
    """Read grey images for a run taking ``size = (H, W)`` images.

    A path is a tensor file (:data:`TENSOR_SUFFIXES`: ``.safetensors`` with exactly one tensor, ``.pt``/``.pth``
    read without unpickling objects, ``.npy`` without pickles), an IDX file (MNIST's format, gzipped or not,
    told by its first bytes), or else a picture (PNG, JPEG, ...: colour becomes grey by Pillow's ITU-R 601-2
    luma; 8-bit and 16-bit grey are kept). Tensors follow :func:`check_images`.

    Args:
        paths: the files, in order.
        size: ``(H, W)`` of the run's images; another size is an error (nothing is resized).
        what: how messages name the inputs (``"IMAGES"`` on the command line).

    Raises:
        DataError: a file missing or unreadable, or images :func:`check_images` refuses (naming the file).
    """
    names: list[str] = []
    chunks: list[Tensor] = []
    for path in paths:
        p, where = Path(path), f"{what}: {str(path)!r}"
        if not p.is_file():
            raise DataError(f"{where} {'is a folder, not a file' if p.is_dir() else 'not found'}")
        if p.suffix.lower() in TENSOR_SUFFIXES:
            t, many = _tensor_file(p, where), True
        elif _is_idx(p):
            t, many = read_idx(p), True
        else:
            t, many = _picture(p, where), False
        t = check_images(t, size, where)
        names += [f"{path}:{i}" for i in range(t.shape[0])] if many else [str(path)]
        chunks.append(t)
    if all(c.dtype == torch.uint8 for c in chunks):
        images = torch.cat(chunks) if chunks else torch.zeros(0, *size, dtype=torch.uint8)
    else:
        images = torch.cat([c.to(torch.float32) / 255 if c.dtype == torch.uint8 else c for c in chunks])
    return ImageInputs(names, images)


@dataclass(frozen=True)
class Calibration:
    """The temperature of a classifier's probabilities.

    Attributes:
        temperature: ``T > 0``; probabilities are ``softmax(logits / T)``.
        fitted: ``T`` was fitted on the run's held-out validation images (as ``ebms eval`` does); else it is 1
            (no held-out images, or a fit that ran to its search bound) or was given.
        note: one line saying which, for the user.
    """

    temperature: float
    fitted: bool
    note: str


@dataclass(frozen=True)
class AppliedSplits(ImageSplits):
    """:class:`~ebms.data.image_sets.ImageSplits` without images (:func:`applied_splits`): the shape of a run's data,
    what building its model and applying it need, from ``data.name`` alone."""


def applied_splits(name: str) -> AppliedSplits:
    """Empty ``(0, 1, H, W)`` splits of the set ``name`` (:data:`IMAGE_SIZES`) with :data:`N_CLASSES` classes: what
    ``ebms classify`` builds a run's model and applier from without reading its images. (A run trained on the first
    ``vision.limit`` images may have seen fewer classes: load its data instead.)

    Raises:
        ValueError: ``name`` is not one of :data:`IMAGE_SIZES`.
    """
    if name not in IMAGE_SIZES:
        raise ValueError(f"name: expected one of {', '.join(IMAGE_SIZES)}; got {name!r}")
    x, y = torch.zeros(0, 1, *IMAGE_SIZES[name]), torch.zeros(0, dtype=torch.long)
    return AppliedSplits(name, x, y, x, y, x, y, N_CLASSES, CONTINUOUS_IMAGE_SETS[name])


#: :meth:`ImageClassifier.calibration`'s note for a run without validation images.
NO_VALIDATION = "the run holds no validation images to fit a temperature: probabilities are the raw softmax (T = 1)"


def _at_bound(n: int, t: float) -> str:
    return (f"the temperature fit on the {n} validation images ran to its search bound (T = {t:.3g}): probabilities "
            f"are the raw softmax (T = 1)")


def weights_digest(model: nn.Module) -> str:
    """sha256 of ``model``'s weights: every ``state_dict`` entry's dtype, shape and bytes in order
    (:func:`ebms.train.run_files.fingerprint`). ``ebms
    eval`` writes it to ``eval.json`` beside the temperature it fitted (:func:`evaluated_calibration`)."""
    return fingerprint(*model.state_dict().values())


def evaluated_calibration(path: str | os.PathLike[str], model: nn.Module) -> Calibration | None:
    """The temperature ``ebms eval`` wrote to a run's ``eval.json`` (``path``), if it was fitted on ``model``'s weights
    (``weights_sha256`` = :func:`weights_digest`): the same images, weights and fit as :meth:`ImageClassifier.calibration`
    would use, without reading the images; the same ``T = 1`` where that fit ran to its search bound or had no
    validation images. ``None``: no such file (or not JSON), no digest (an older ``eval``) or another one (another
    checkpoint, or ``eval.ema`` set otherwise)."""
    try:
        record = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(record, dict) or record.get("weights_sha256") != weights_digest(model):
        return None
    t, n = record.get("temperature"), record.get("n_val")
    if t is None or not n:
        return Calibration(1.0, False, NO_VALIDATION)
    if isinstance(t, bool) or not isinstance(t, (int, float)) or not 0 < t < math.inf:
        return None
    if record.get("temperature_at_bound"):
        return Calibration(1.0, False, _at_bound(n, t))
    return Calibration(float(t), True, f"probabilities at T = {t:.4f}, fitted on the {n} validation images by "
                                       f"`ebms eval` (eval.json)")


@dataclass(frozen=True)
class ImageClassification:
    """What :class:`ImageClassifier` / :class:`ImageEnergyScorer` return for ``N`` images.

    Attributes:
        scores: ``(N,)`` float32 ``-E(x) = log p(x) + log Z`` (for a classifier ``logsumexp_y f(x)[y]``); higher
            means more in-distribution; comparable within one run only.
        score_name: its TSV column: ``"ood_logsumexp"`` (classifier, JEM) or ``"ood_neg_energy"`` (image energy).
        labels: ``(N,)`` int64 arg max classes; ``None`` for an image energy.
        probs: ``(N, K)`` float32 ``softmax(logits / T)``; ``None`` for an image energy.
        class_names: the ``K`` class names (``()`` for an image energy).
        calibration: the temperature ``T`` used (``None`` for an image energy).
    """

    scores: Tensor
    score_name: str
    labels: Tensor | None = None
    probs: Tensor | None = None
    class_names: tuple[str, ...] = ()
    calibration: Calibration | None = None

    def __len__(self) -> int:
        return int(self.scores.shape[0])

    def header(self, *, probs: bool = False) -> list[str]:
        """The TSV column names: ``input``, then ``label``, ``p_label`` (and ``p_<class>`` for each class with
        ``probs``) for a classifier, then the score."""
        if self.probs is None:
            return ["input", self.score_name]
        return ["input", "label", "p_label", *([f"p_{c}" for c in self.class_names] if probs else []), self.score_name]

    def rows(self, names: Sequence[str], *, probs: bool = False) -> list[list[str]]:
        """One row of :meth:`header` per image (``names``: one per image), numbers with 6 decimals."""
        if len(names) != len(self):
            raise ValueError(f"names: expected {len(self)} names (one per image); got {len(names)}")
        out = []
        score = self.scores.tolist()
        for i, name in enumerate(names):
            row = [name]
            if self.probs is not None and self.labels is not None:
                p, y = self.probs[i].tolist(), int(self.labels[i])
                row += [self.class_names[y], f"{p[y]:.6f}", *([f"{v:.6f}" for v in p] if probs else [])]
            out.append([*row, f"{score[i]:.6f}"])
        return out


def _images_for(images: object, size: tuple[int, int]) -> Tensor:
    return as_model_input(check_images(images, size))


class ImageClassifier:
    """Labels, calibrated probabilities and ``logsumexp`` scores of a classifier (``jem``, ``classifier``).

    Args:
        logits: ``(B, 1, H, W)`` images in ``[-1, 1]`` -> ``(B, K)`` logits (e.g. ``JEM.logits``, in eval mode).
        size: ``(H, W)`` of its images.
        class_names: the ``K`` names of the classes.
        val_images, val_labels: held-out ``(M, 1, H, W)`` images in ``[-1, 1]`` and ``(M,)`` labels on which
            :meth:`calibration` fits the temperature (``None`` or ``M = 0``: ``T = 1``).
        batch_size: images per network call (default 500, as ``ebms eval``).
        validation: without ``val_images``: returns them and their labels when :meth:`calibration` first needs
            them (a run opened without its images); a :class:`~ebms.errors.DataError` it raises (the images are
            gone) makes ``T = 1``, its message in the note.

    Example:
        >>> clf = ImageClassifier.for_splits(run.model.logits, run.data)   # doctest: +SKIP
        >>> out = clf(images)          # (N, 28, 28) in [0, 1]              # doctest: +SKIP
        >>> out.labels, out.probs, out.scores                               # doctest: +SKIP
    """

    #: it gives labels and probabilities (an image energy gives scores only).
    has_labels: ClassVar[bool] = True

    def __init__(self, logits: Callable[[Tensor], Tensor], size: tuple[int, int], *, class_names: Sequence[str],
                 val_images: Tensor | None = None, val_labels: Tensor | None = None, batch_size: int = 500,
                 validation: Callable[[], tuple[Tensor, Tensor]] | None = None) -> None:
        self.logits, self.size, self.class_names = logits, (int(size[0]), int(size[1])), tuple(class_names)
        self.val_images, self.val_labels, self.validation = val_images, val_labels, validation
        self.batch_size = check_int(batch_size, "batch_size", minimum=1)
        self._calibration: Calibration | None = None

    @classmethod
    def for_splits(cls, logits: Callable[[Tensor], Tensor], splits: ImageSplits, *,
                   validation: Callable[[], tuple[Tensor, Tensor]] | None = None) -> ImageClassifier:
        """The classifier of a run trained on ``splits``: its size, class names and validation split (for
        :class:`AppliedSplits`, none: ``validation`` loads it when needed)."""
        names = CLASS_NAMES.get(splits.name, tuple(str(k) for k in range(splits.n_classes)))
        if isinstance(splits, AppliedSplits):
            return cls(logits, splits.image_shape[1:], class_names=names, validation=validation)
        return cls(logits, splits.image_shape[1:], class_names=names, val_images=splits.val,
                   val_labels=splits.val_targets)

    def use_calibration(self, calibration: Calibration | None) -> None:
        """Take ``calibration`` (e.g. :func:`evaluated_calibration`'s) as :meth:`calibration`'s, fitting none;
        ``None``: no change."""
        if calibration is not None:
            self._calibration = calibration

    def calibration(self) -> Calibration:
        """The temperature ``ebms eval`` fits on the validation images (fitted once, then kept): the same images
        in blocks of 500, :class:`~ebms.metrics.calibration.TemperatureScaling`. ``T = 1`` when there are none,
        or when the fit runs to its search bound (e.g. every validation image right), which ``eval`` flags as
        not a fair calibration, or when ``validation`` finds the images gone."""
        if self._calibration is None:
            x, y = self.val_images, self.val_labels
            if x is None and self.validation is not None:
                try:
                    x, y = self.validation()
                except DataError as e:
                    self._calibration = Calibration(1.0, False, f"no validation images to fit a temperature on ({e}): "
                                                    f"probabilities are the raw softmax (T = 1); `ebms eval` with the "
                                                    f"images keeps its temperature in eval.json, or set it")
                    return self._calibration
            n = 0 if x is None or y is None else int(x.shape[0])
            if x is None or y is None or n == 0:
                self._calibration = Calibration(1.0, False, NO_VALIDATION)
            else:
                with warnings.catch_warnings():  # the bound is reported in the note instead
                    warnings.simplefilter("ignore", RuntimeWarning)
                    ts = TemperatureScaling().fit(batched(self.logits, x, 500), y)
                self._calibration = (
                    Calibration(1.0, False, _at_bound(n, ts.temperature)) if ts.at_bound else
                    Calibration(ts.temperature, True, f"probabilities at T = {ts.temperature:.4f}, fitted on the "
                                f"{n} validation images (as `ebms eval`)"))
        return self._calibration

    def __call__(self, images: object, *, temperature: float | None = None,
                 batch_size: int | None = None) -> ImageClassification:
        """Classify ``images`` (``(N, H, W)`` or ``(N, 1, H, W)``: ``uint8`` levels or floats in ``[0, 1]``).

        Args:
            temperature: ``T > 0`` of the probabilities; ``None``: :meth:`calibration`'s.
            batch_size: images per network call (default: the constructor's); results do not depend on it
                beyond float rounding.

        Raises:
            DataError: images :func:`check_images` refuses.
            ValueError: a bad ``temperature`` or ``batch_size``.
        """
        x = _images_for(images, self.size)
        bs = self.batch_size if batch_size is None else check_int(batch_size, "batch_size", minimum=1)
        if temperature is None:
            cal = self.calibration()
        elif isinstance(temperature, bool) or not isinstance(temperature, (int, float)) or \
                not 0 < temperature < math.inf:
            raise ValueError(f"temperature: expected a finite number > 0 or None; got {temperature!r}")
        else:
            cal = Calibration(float(temperature), False, f"probabilities at T = {float(temperature):g} (given)")
        k = len(self.class_names)
        logits = batched(self.logits, x, bs) if x.shape[0] else torch.zeros(0, k)
        if logits.shape[1:] != (k,):
            raise ValueError(f"logits: expected (N, {k}) for the {k} class names; got {tuple(logits.shape)}")
        return ImageClassification(scores=torch.logsumexp(logits, dim=-1), score_name="ood_logsumexp",
                                   labels=logits.argmax(dim=-1), probs=torch.softmax(logits / cal.temperature, dim=-1),
                                   class_names=self.class_names, calibration=cal)


class ImageEnergyScorer:
    """``-E(x)`` of an image energy (``conv``): an out-of-distribution score, no labels.

    Args:
        energy: ``(B, 1, H, W)`` images in ``[-1, 1]`` -> energies ``(B,)`` (in eval mode).
        size: ``(H, W)`` of its images.
        batch_size: images per energy call (default 500).
    """

    has_labels: ClassVar[bool] = False

    def __init__(self, energy: Callable[[Tensor], Tensor], size: tuple[int, int], *, batch_size: int = 500) -> None:
        self.energy, self.size = energy, (int(size[0]), int(size[1]))
        self.batch_size = check_int(batch_size, "batch_size", minimum=1)

    @classmethod
    def for_splits(cls, energy: Callable[[Tensor], Tensor], splits: ImageSplits) -> ImageEnergyScorer:
        """The scorer of an energy trained on ``splits`` (its image size)."""
        return cls(energy, splits.image_shape[1:])

    def __call__(self, images: object, *, batch_size: int | None = None) -> ImageClassification:
        """``-E(x)`` of ``images`` (as :meth:`ImageClassifier.__call__` takes them); ``labels``/``probs`` are ``None``."""
        x = _images_for(images, self.size)
        bs = self.batch_size if batch_size is None else check_int(batch_size, "batch_size", minimum=1)
        energies = batched(self.energy, x, bs) if x.shape[0] else torch.zeros(0)
        return ImageClassification(scores=-energies.to(torch.float32), score_name="ood_neg_energy")
