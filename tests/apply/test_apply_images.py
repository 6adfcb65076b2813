"""``ebms.apply.images``: reading grey images, the run's preprocessing, labels, probabilities and scores.

The checks are exact: 8-bit levels reach the network as :func:`ebms.data.images.load_continuous_images`
makes them; the score is ``logsumexp`` of the logits computed directly (``-E(x)`` for an energy); the
probabilities are ``softmax(logits / T)`` with ``T`` the fit :class:`~ebms.metrics.calibration.TemperatureScaling`
gives on the validation logits (or the one ``eval.json`` keeps for the same weights digest; a run opened without
its images loads them only when a temperature needs them); every file format gives the same images; bad images are
:class:`~ebms.errors.DataError` naming the file, the expectation and what was found. The networks are tiny
fixed ones (no trained run: ``tests/e2e/test_apply_classify.py`` has those).
"""

from __future__ import annotations

import gzip
import json
import struct
from pathlib import Path

import numpy as np
import pytest
import torch
from safetensors.torch import save_file

from ebms.apply.images import (
    IMAGE_SIZES,
    NO_VALIDATION,
    AppliedSplits,
    Calibration,
    ImageClassifier,
    ImageEnergyScorer,
    applied_splits,
    as_model_input,
    check_images,
    evaluated_calibration,
    read_images,
    weights_digest,
)
from ebms.data.image_sets import ImageSplits
from ebms.errors import DataError
from ebms.metrics.calibration import TemperatureScaling

Image = pytest.importorskip("PIL.Image")

SIZE = (8, 8)


def _net(k: int = 10, seed: int = 0) -> torch.nn.Module:
    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(64, k)).eval()


def _levels(n: int, seed: int = 1) -> torch.Tensor:
    return torch.randint(0, 256, (n, *SIZE), generator=torch.Generator().manual_seed(seed), dtype=torch.uint8)


def _idx(images: np.ndarray) -> bytes:
    return b"\x00\x00\x08" + bytes([images.ndim]) + struct.pack(f">{images.ndim}I", *images.shape) + images.tobytes()


def test_eight_bit_levels_reach_the_network_as_the_loader_makes_them() -> None:
    v = torch.arange(256, dtype=torch.uint8).reshape(4, 8, 8)
    loader = ((v.to(torch.float32) * 2 - 255) / 255).unsqueeze(1)  # load_continuous_images, levels = 256
    assert torch.equal(as_model_input(check_images(v, SIZE)), loader)
    digits = torch.arange(17, dtype=torch.float32).repeat(4)[:64].reshape(1, 8, 8)  # the digits' 17 levels
    assert torch.equal(as_model_input(check_images(digits / 16, SIZE)), ((digits * 2 - 16) / 16).unsqueeze(1))


@pytest.mark.parametrize("shape", [(3, 8, 8), (3, 1, 8, 8)])
def test_grey_images_with_or_without_a_channel_are_the_same(shape: tuple[int, ...]) -> None:
    v = _levels(3)
    assert torch.equal(check_images(v.reshape(shape), SIZE), v)


def test_one_image_without_a_batch_is_a_batch_of_one() -> None:
    assert check_images(_levels(1)[0], SIZE).shape == (1, 8, 8)


@pytest.mark.parametrize(("images", "piece"), [
    (torch.zeros(2, 3, 8, 8), "expected grey images (N, H, W), (N, 1, H, W) or one image (H, W); got shape (2, 3, 8, 8)"),
    (torch.zeros(8), "got shape (8,)"),
    (torch.zeros(2, 8, 9), "images of 8x9 pixels; the run takes 8x8"),
    (torch.full((1, 8, 8), 255.0), "got values in [255, 255]: divide by 255"),
    (torch.full((1, 8, 8), -0.5), "expected float pixel values in [0, 1] (or integers 0..255); got values in [-0.5, -0.5]"),
    (torch.full((1, 8, 8), float("nan")), "NaN or Inf"),
    (torch.full((1, 8, 8), 300, dtype=torch.int64), "0..255; got values in [300, 300]"),
    (torch.zeros(1, 8, 8, dtype=torch.complex64), "expected real grey levels"),
    ([[0.0] * 8] * 8, "expected a tensor of grey images (N, H, W); got list"),
])
def test_bad_images_name_the_expectation_and_what_was_found(images: object, piece: str) -> None:
    with pytest.raises(DataError) as e:
        check_images(images, SIZE, "images")
    assert piece in str(e.value) and str(e.value).startswith("images: ")


def test_every_file_format_gives_the_same_images(tmp_path: Path) -> None:
    v = _levels(3)
    p = v.float() / 255
    np.save(tmp_path / "a.npy", v.numpy())
    torch.save(p, tmp_path / "b.pt")
    save_file({"images": p.unsqueeze(1).contiguous()}, str(tmp_path / "c.safetensors"))
    (tmp_path / "d-idx3-ubyte").write_bytes(_idx(v.numpy()))
    (tmp_path / "e-idx3-ubyte.gz").write_bytes(gzip.compress(_idx(v.numpy())))
    for i in range(3):
        Image.fromarray(v[i].numpy()).save(tmp_path / f"f{i}.png")
    names = ["a.npy", "d-idx3-ubyte", "e-idx3-ubyte.gz", *(f"f{i}.png" for i in range(3))]
    got = read_images([tmp_path / n for n in names], SIZE)
    assert got.images.dtype == torch.uint8 and torch.equal(got.images, torch.cat([v, v, v, v]))
    assert got.names[:4] == [f"{tmp_path / 'a.npy'}:{i}" for i in range(3)] + [f"{tmp_path / 'd-idx3-ubyte'}:0"]
    assert got.names[-1] == str(tmp_path / "f2.png")
    floats = read_images([tmp_path / "b.pt", tmp_path / "c.safetensors", tmp_path / "a.npy"], SIZE)
    assert floats.images.dtype == torch.float32 and torch.equal(floats.images, torch.cat([p, p, v.float() / 255]))


def test_colour_pictures_become_grey_by_pillows_luma_and_16_bit_grey_keeps_its_depth(tmp_path: Path) -> None:
    rgb = np.random.default_rng(0).integers(0, 256, (8, 8, 3), dtype=np.uint8)
    Image.fromarray(rgb).save(tmp_path / "rgb.png")
    Image.fromarray(rgb).save(tmp_path / "rgb.jpg", quality=95)
    want = np.asarray(Image.fromarray(rgb).convert("L"))
    assert np.array_equal(read_images([tmp_path / "rgb.png"], SIZE).images[0].numpy(), want)
    assert read_images([tmp_path / "rgb.jpg"], SIZE).images.shape == (1, 8, 8)  # lossy: readable, not equal
    deep = np.arange(64, dtype=np.uint16).reshape(8, 8) * 1000
    Image.fromarray(deep).save(tmp_path / "deep.png")
    got = read_images([tmp_path / "deep.png"], SIZE).images
    assert got.dtype == torch.float32 and torch.allclose(got[0], torch.from_numpy(deep / 65535.0).float())


def test_no_files_and_an_empty_tensor_give_no_images(tmp_path: Path) -> None:
    assert read_images([], SIZE).images.shape == (0, 8, 8)
    np.save(tmp_path / "none.npy", np.zeros((0, 8, 8), dtype=np.uint8))
    got = read_images([tmp_path / "none.npy"], SIZE)
    assert got.names == [] and got.images.shape == (0, 8, 8)


@pytest.mark.parametrize(("make", "piece"), [
    (lambda d: d / "missing.png", "'missing.png' not found"),
    (lambda d: d, "is a folder, not a file"),
    (lambda d: (d / "t.png").write_text("not a picture") and d / "t.png", "not a picture Pillow can read"),
    (lambda d: (d / "t.npy").write_bytes(b"junk") and d / "t.npy", "cannot be read as a .npy tensor file"),
    (lambda d: torch.save({"x": torch.zeros(1)}, d / "t.pt") or d / "t.pt", "expected the file to hold one tensor; got dict"),
    (lambda d: save_file({"a": torch.zeros(1, 8, 8), "b": torch.zeros(1, 8, 8)}, str(d / "t.safetensors"))
     or d / "t.safetensors", "expected one tensor in the file; got 2 (a, b)"),
    (lambda d: (d / "labels-idx1-ubyte").write_bytes(_idx(np.zeros(5, np.uint8))) and d / "labels-idx1-ubyte",
     "got shape (5,)"),
    (lambda d: Image.fromarray(np.zeros((28, 28), np.uint8)).save(d / "big.png") or d / "big.png",
     "images of 28x28 pixels; the run takes 8x8"),
])
def test_bad_files_are_one_data_error_naming_the_file(tmp_path: Path, make, piece: str) -> None:
    path = make(tmp_path)
    with pytest.raises(DataError) as e:
        read_images([path], SIZE, "IMAGES")
    text = str(e.value).replace(str(tmp_path) + "/", "")
    assert piece in text and text.startswith("IMAGES: ") and "\n" not in text


def test_score_is_logsumexp_and_probabilities_are_the_softmax_at_the_temperature() -> None:
    net, v = _net(), _levels(20)
    clf = ImageClassifier(net, SIZE, class_names=[str(k) for k in range(10)])
    out = clf(v, temperature=2.5)
    with torch.no_grad():
        logits = net(((v.float() * 2 - 255) / 255).unsqueeze(1))
    assert torch.equal(out.scores, torch.logsumexp(logits, -1))
    assert torch.equal(out.probs, torch.softmax(logits / 2.5, -1))
    assert torch.equal(out.labels, logits.argmax(-1))
    assert out.calibration == Calibration(2.5, False, "probabilities at T = 2.5 (given)")


def test_the_default_temperature_is_the_fit_on_the_validation_images() -> None:
    net = _net()
    x_val = as_model_input(check_images(_levels(50, seed=3), SIZE))
    with torch.no_grad():
        y_val = net(x_val).argmax(-1)
    y_val[::3] = (y_val[::3] + 1) % 10  # a third wrong: the fit has an interior optimum
    clf = ImageClassifier(net, SIZE, class_names=list("abcdefghij"), val_images=x_val, val_labels=y_val)
    with torch.no_grad():
        want = TemperatureScaling().fit(net(x_val), y_val)
    out = clf(_levels(4))
    assert not want.at_bound and out.calibration.fitted and out.calibration.temperature == want.temperature
    with torch.no_grad():
        logits = net(as_model_input(_levels(4)))
    assert torch.equal(out.probs, torch.softmax(logits / want.temperature, -1))
    assert clf.calibration() is clf.calibration()  # fitted once


def test_a_fit_at_its_bound_or_no_validation_images_gives_the_raw_softmax() -> None:
    net = _net()
    x_val = as_model_input(_levels(30, seed=4))
    with torch.no_grad():
        right = net(x_val).argmax(-1)  # every validation image right: T runs to its lower bound
    at_bound = ImageClassifier(net, SIZE, class_names=list("abcdefghij"), val_images=x_val, val_labels=right)
    none = ImageClassifier(net, SIZE, class_names=list("abcdefghij"))
    for clf, piece in ((at_bound, "ran to its search bound"), (none, "no validation images")):
        cal = clf.calibration()
        assert cal.temperature == 1.0 and not cal.fitted and piece in cal.note


def test_batched_equals_unbatched() -> None:
    net, v = _net(), _levels(37)
    clf = ImageClassifier(net, SIZE, class_names=[str(k) for k in range(10)])
    one, many = clf(v, temperature=1.0, batch_size=1), clf(v, temperature=1.0, batch_size=500)
    assert torch.equal(one.labels, many.labels)
    assert torch.allclose(one.scores, many.scores, rtol=0, atol=1e-6)
    assert torch.allclose(one.probs, many.probs, rtol=0, atol=1e-7)


def test_empty_input_gives_an_empty_table_without_calling_the_network() -> None:
    def never(x: torch.Tensor) -> torch.Tensor:
        raise AssertionError("called")

    clf = ImageClassifier(never, SIZE, class_names=["a", "b"])
    out = clf(torch.zeros(0, 8, 8), temperature=1.0)
    assert len(out) == 0 and out.probs.shape == (0, 2) and out.rows([]) == []
    assert out.header(probs=True) == ["input", "label", "p_label", "p_a", "p_b", "ood_logsumexp"]
    assert len(ImageEnergyScorer(never, SIZE)(torch.zeros(0, 8, 8))) == 0


def test_rows_give_the_class_name_its_probability_and_the_score() -> None:
    net, v = _net(k=3), _levels(2)
    out = ImageClassifier(net, SIZE, class_names=["cat", "dog", "Ankle boot"])(v, temperature=1.0)
    rows = out.rows(["x", "y"], probs=True)
    for row, p, y, s in zip(rows, out.probs, out.labels, out.scores):
        assert row[1] == ["cat", "dog", "Ankle boot"][int(y)] and float(row[2]) == pytest.approx(float(p.max()), abs=5e-7)
        assert [float(c) for c in row[3:6]] == pytest.approx(p.tolist(), abs=5e-7)
        assert float(row[6]) == pytest.approx(float(s), abs=5e-7)
    with pytest.raises(ValueError, match="names: expected 2 names"):
        out.rows(["x"])


def test_an_energy_gives_minus_its_energy_and_no_labels() -> None:
    net, v = _net(k=1), _levels(5)
    energy = lambda x: net(x)[:, 0]  # noqa: E731
    out = ImageEnergyScorer(energy, SIZE)(v)
    with torch.no_grad():
        want = -energy(as_model_input(v))
    assert torch.equal(out.scores, want) and out.labels is None and out.probs is None
    assert out.header(probs=True) == ["input", "ood_neg_energy"] and out.rows(list("abcde"))[0][0] == "a"


def test_for_splits_takes_the_size_class_names_and_validation_split() -> None:
    z = torch.zeros(4, 1, 28, 28)
    y = torch.arange(4)
    splits = ImageSplits("fashion-mnist", z, y, z[:2], y[:2], z, y, 10, 256)
    clf = ImageClassifier.for_splits(_net_28(), splits)
    assert clf.size == (28, 28) and clf.class_names[0] == "T-shirt/top" and clf.class_names[9] == "Ankle boot"
    assert clf.val_images is splits.val and clf.val_labels is splits.val_targets
    digits = ImageSplits("digits", z[:, :, :8, :8], y, z[:2, :, :8, :8], y[:2], z[:, :, :8, :8], y, 10, 17)
    assert ImageClassifier.for_splits(_net(), digits).class_names == tuple("0123456789")
    assert ImageEnergyScorer.for_splits(lambda x: x.sum((1, 2, 3)), splits).size == (28, 28)


def _net_28() -> torch.nn.Module:
    return torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(28 * 28, 10)).eval()


def test_applied_splits_have_the_sets_size_and_classes_and_no_images() -> None:
    for name, size in IMAGE_SIZES.items():
        splits = applied_splits(name)
        assert isinstance(splits, AppliedSplits) and splits.image_shape == (1, *size) and splits.n_classes == 10
        assert splits.train.shape[0] == splits.val.shape[0] == splits.test.shape[0] == 0
    assert ImageClassifier.for_splits(_net_28(), applied_splits("fashion-mnist")).class_names[9] == "Ankle boot"
    with pytest.raises(ValueError, match=r"^name: expected one of mnist, fashion-mnist, digits; got 'cifar'"):
        applied_splits("cifar")


def test_validation_images_are_loaded_once_when_a_temperature_needs_them() -> None:
    net, calls = _net(), []
    x_val = as_model_input(check_images(_levels(50, seed=3), SIZE))
    with torch.no_grad():
        y_val = net(x_val).argmax(-1)
    y_val[::3] = (y_val[::3] + 1) % 10

    def load() -> tuple[torch.Tensor, torch.Tensor]:
        calls.append(1)
        return x_val, y_val

    lazy = ImageClassifier.for_splits(net, applied_splits("digits"), validation=load)
    lazy(_levels(3), temperature=2.0)
    assert calls == []  # a given temperature needs no validation image
    eager = ImageClassifier(net, SIZE, class_names=[str(k) for k in range(10)], val_images=x_val, val_labels=y_val)
    assert lazy.calibration() == eager.calibration() and lazy.calibration().fitted and calls == [1]


def test_validation_images_gone_give_the_raw_softmax_with_the_reason() -> None:
    def gone() -> tuple[torch.Tensor, torch.Tensor]:
        raise DataError("data.root: mnist train: files not found in /nowhere")

    clf = ImageClassifier(_net(), SIZE, class_names=list("abcdefghij"), validation=gone)
    out = clf(_levels(3))
    assert out.calibration is not None and out.calibration.temperature == 1.0 and not out.calibration.fitted
    assert out.calibration.note.startswith("no validation images to fit a temperature on (data.root: mnist train: "
                                           "files not found in /nowhere): probabilities are the raw softmax (T = 1)")
    assert torch.equal(out.probs, clf(_levels(3), temperature=1.0).probs)


def test_the_temperature_eval_kept_is_used_for_the_same_weights_only(tmp_path: Path) -> None:
    net, other = _net(seed=0), _net(seed=1)
    digest = weights_digest(net)
    assert digest == weights_digest(_net(seed=0)) != weights_digest(other)
    path = tmp_path / "eval.json"
    assert evaluated_calibration(path, net) is None  # no eval.json
    record = {"step": 30, "temperature": 1.2345678, "temperature_at_bound": False, "n_val": 180, "weights_sha256": digest}
    path.write_text(json.dumps(record))
    cal = evaluated_calibration(path, net)
    assert cal == Calibration(1.2345678, True, "probabilities at T = 1.2346, fitted on the 180 validation images by "
                                               "`ebms eval` (eval.json)")
    assert evaluated_calibration(path, other) is None  # other weights: fit again, or T = 1
    for change, want in (({"weights_sha256": None}, None), ({"temperature": "x"}, None),
                         ({"temperature": None, "n_val": 0}, Calibration(1.0, False, NO_VALIDATION))):
        path.write_text(json.dumps({**record, **change}))
        assert evaluated_calibration(path, net) == want
    path.write_text(json.dumps({**record, "temperature": 0.05, "temperature_at_bound": True}))
    at_bound = evaluated_calibration(path, net)
    assert at_bound is not None and at_bound.temperature == 1.0 and "ran to its search bound (T = 0.05)" in at_bound.note
    path.write_text("{not json")
    assert evaluated_calibration(path, net) is None
    clf = ImageClassifier(net, SIZE, class_names=list("abcdefghij"))
    clf.use_calibration(cal)
    clf.use_calibration(None)
    assert clf.calibration() is cal
