"""End-to-end: ``ebms classify RUN IMAGES...`` on tiny image runs (scikit-learn's 8x8 digits).

Exact checks: the run's own test images, written to a tensor file, get the accuracy ``ebms eval`` wrote in
``eval.json`` (a classifier run and a JEM run), and the temperature of the probabilities is ``eval``'s; as
PNGs they get the labels of the same 8-bit levels in a tensor file; the score column is ``logsumexp`` of
the model's logits computed directly (``-E(x)`` for an image energy); one image per network call gives the
labels of whole batches; an empty tensor file is a header; opened without its training images (their loader made
to fail), a run classifies as with them, at the temperature ``eval.json`` keeps for its weights, else at ``T = 1``
with a note. Every bad input is one line on stderr and exit status 2 (the table at the end).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch
from safetensors.torch import save_file

from ebms.cli.config import ConfigError, load_config
from ebms.cli.main import main
from ebms.cli.run import serving_task
from ebms.cli.vision import VisionTask
from ebms.runs import load_run

Image = pytest.importorskip("PIL.Image")

SMALL = ["run.progress=false", "data.name=digits", "vision.channels=[8,16]", "objective.k=2",
         "objective.buffer_size=64", "train.batch_size=32", "train.log_every=10", "train.checkpoint_every=50",
         "eval.n_samples=10", "eval.sample_steps=2", "vision.ood=[]"]
#: 30 steps take a classifier and a JEM to about half the test images right (far from one class for all).
KINDS = {"classifier": ["model.kind=classifier", "train.steps=30", "train.lr=3e-3"],
         "jem": ["model.kind=jem", "train.steps=30", "train.lr=3e-3"],
         "conv": ["model.kind=conv", "train.steps=4"]}


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("classify")
    for kind, args in KINDS.items():  # `ebms eval` writes eval.json without the plots `train` would draw
        assert main(["train", f"run.out_dir={root}", f"run.name={kind}", *SMALL, *args, "--no-eval"]) == 0
        assert kind == "conv" or main(["eval", str(root / kind)]) == 0
    assert main(["train", f"run.out_dir={root}", "run.name=toy", "run.progress=false", "data.name=rings",
                 "train.steps=2", "train.batch_size=8", "--no-eval"]) == 0
    return {name: root / name for name in (*KINDS, "toy")}


@pytest.fixture(scope="module")
def inputs(runs: dict[str, Path], tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """The run's test images as a float tensor file (exact: the digits' 17 levels are dyadic), as 8-bit PNGs
    and as an ``.npy`` of the same 8-bit levels, an empty tensor file, and bad inputs."""
    d = tmp_path_factory.mktemp("inputs")
    run = load_run(runs["classifier"])
    p = run.data.test[:, 0] * 0.5 + 0.5  # (N, 8, 8) in [0, 1]
    save_file({"images": p.contiguous()}, str(d / "test.safetensors"))
    levels = (p * 255).round().to(torch.uint8)
    np.save(d / "levels.npy", levels.numpy())
    for i in range(20):
        Image.fromarray(levels[i].numpy()).save(d / f"{i:02d}.png")
    np.save(d / "empty.npy", np.zeros((0, 8, 8), np.float32))
    np.save(d / "rgb.npy", np.zeros((2, 3, 8, 8), np.float32))
    np.save(d / "bytes_as_floats.npy", levels.numpy().astype(np.float32))
    np.save(d / "negative.npy", -p.numpy())
    np.save(d / "nan.npy", np.full((1, 8, 8), np.nan, np.float32))
    np.save(d / "wide.npy", np.full((1, 8, 8), 300, np.int64))
    Image.fromarray(np.zeros((28, 28), np.uint8)).save(d / "big.png")
    (d / "text.png").write_text("not a picture\n")
    save_file({"a": p[:1].clone(), "b": p[1:2].clone()}, str(d / "two.safetensors"))
    torch.save({"images": p}, d / "dict.pt")
    return {f.name: f for f in d.iterdir()}


def _classify(capsys: pytest.CaptureFixture[str], *args: object) -> tuple[list[str], list[list[str]], str]:
    capsys.readouterr()
    assert main(["classify", *map(str, args)]) == 0
    out, err = capsys.readouterr()
    header, *rows = (line.split("\t") for line in out.splitlines())
    return header, rows, err


@pytest.mark.parametrize("kind", ["classifier", "jem"])
def test_own_test_images_get_the_accuracy_and_temperature_of_eval(kind: str, runs: dict[str, Path],
                                                                  inputs: dict[str, Path], capsys) -> None:
    header, rows, err = _classify(capsys, runs[kind], inputs["test.safetensors"])
    assert header == ["input", "label", "p_label", "ood_logsumexp"]
    run, got = load_run(runs[kind]), json.loads((runs[kind] / "eval.json").read_text())
    y = run.data.test_targets.tolist()
    assert [r[0] for r in rows] == [f"{inputs['test.safetensors']}:{i}" for i in range(len(y))]
    assert float(np.mean([int(r[1]) == t for r, t in zip(rows, y)])) == got["accuracy"] > 0.3
    cal = run.applier("classify").calibration()
    if got["temperature_at_bound"]:
        assert cal.temperature == 1.0 and "search bound" in err
    else:
        assert cal.fitted and cal.temperature == pytest.approx(got["temperature"], rel=1e-12)
        assert f"T = {got['temperature']:.4f}" in err


def test_pngs_get_the_labels_of_their_levels_in_a_tensor_file(runs: dict[str, Path], inputs: dict[str, Path],
                                                              capsys) -> None:
    pngs = sorted(p for n, p in inputs.items() if n[:2].isdigit())
    _, from_png, _ = _classify(capsys, runs["jem"], *pngs, "--probs")
    _, from_npy, _ = _classify(capsys, runs["jem"], inputs["levels.npy"], "--probs")
    assert [r[0] for r in from_png] == [str(p) for p in pngs]
    assert [r[1:] for r in from_png] == [r[1:] for r in from_npy[:20]]
    _, exact, _ = _classify(capsys, runs["jem"], inputs["test.safetensors"])
    assert [r[1] for r in from_png] == [r[1] for r in exact[:20]]  # 8-bit rounding of the 17 levels kept them


def test_score_is_logsumexp_of_the_logits_and_probabilities_sum_to_one(runs: dict[str, Path],
                                                                       inputs: dict[str, Path], capsys) -> None:
    header, rows, _ = _classify(capsys, runs["classifier"], inputs["test.safetensors"], "--probs", "--temperature", 1)
    assert header == ["input", "label", "p_label", *(f"p_{k}" for k in range(10)), "ood_logsumexp"]
    run = load_run(runs["classifier"])
    with torch.no_grad():
        logits = run.model.logits(run.data.test).double()
    want = torch.logsumexp(logits, -1)
    assert [float(r[-1]) for r in rows] == pytest.approx(want.tolist(), abs=2e-6)
    probs = torch.tensor([[float(v) for v in r[3:13]] for r in rows], dtype=torch.float64)
    assert torch.allclose(probs, torch.softmax(logits, -1), atol=1e-6)
    assert torch.allclose(probs.sum(1), torch.ones(len(rows), dtype=torch.float64), atol=1e-5)
    assert [r[1] for r in rows] == [str(int(k)) for k in logits.argmax(-1)]


def test_one_image_per_call_gives_the_labels_of_whole_batches(runs: dict[str, Path], inputs: dict[str, Path],
                                                              capsys) -> None:
    _, one, _ = _classify(capsys, runs["jem"], inputs["levels.npy"], "--batch-size", 1)
    _, many, _ = _classify(capsys, runs["jem"], inputs["levels.npy"])
    assert [r[:2] for r in one] == [r[:2] for r in many]
    assert np.allclose([[float(v) for v in r[2:]] for r in one], [[float(v) for v in r[2:]] for r in many], atol=2e-6)


def test_an_image_energy_gives_minus_its_energy_only(runs: dict[str, Path], inputs: dict[str, Path], capsys,
                                                     tmp_path: Path) -> None:
    out = tmp_path / "scores.tsv"
    assert main(["classify", str(runs["conv"]), str(inputs["levels.npy"]), "-o", str(out)]) == 0
    header, *rows = (line.split("\t") for line in out.read_text().splitlines())
    assert header == ["input", "ood_neg_energy"] and capsys.readouterr().err == ""
    run = load_run(runs["conv"])
    with torch.no_grad():
        want = -run.model(((torch.from_numpy(np.load(inputs["levels.npy"])).float() * 2 - 255) / 255).unsqueeze(1))
    assert [float(r[1]) for r in rows] == pytest.approx(want.tolist(), abs=2e-6)


def test_an_empty_tensor_file_gives_the_header_alone(runs: dict[str, Path], inputs: dict[str, Path], capsys) -> None:
    header, rows, err = _classify(capsys, runs["classifier"], inputs["empty.npy"])
    assert header == ["input", "label", "p_label", "ood_logsumexp"] and rows == [] and err == ""


def test_run_classify_in_python_equals_the_command(runs: dict[str, Path], inputs: dict[str, Path], capsys) -> None:
    _, rows, _ = _classify(capsys, runs["jem"], inputs["test.safetensors"])
    out = load_run(runs["jem"]).classify(load_run(runs["jem"]).data.test[:, 0] * 0.5 + 0.5)
    assert [r[1] for r in rows] == [str(int(k)) for k in out.labels]
    assert [float(r[2]) for r in rows] == pytest.approx(out.probs.max(-1).values.tolist(), abs=5e-7)


def _no_images(self, cfg):  # the training images are gone (digits cannot be moved away: scikit-learn ships them)
    raise ConfigError("data.root: digits: the images are gone (test)")


@pytest.mark.parametrize("kind", ["classifier", "jem", "conv"])
def test_without_its_training_images_a_run_classifies_as_with_them(kind: str, runs: dict[str, Path],
                                                                   inputs: dict[str, Path], capsys, monkeypatch,
                                                                   tmp_path: Path) -> None:
    fresh = Path(shutil.copytree(runs[kind], tmp_path / kind))
    (fresh / "eval.json").unlink(missing_ok=True)  # never evaluated: classify fits T on the validation images
    probs = [] if kind == "conv" else ["--probs"]
    _, with_images, err = _classify(capsys, fresh, inputs["test.safetensors"], *probs)
    assert kind == "conv" or "(as `ebms eval`)" in err
    monkeypatch.setattr(VisionTask, "load", _no_images)
    _, without, err = _classify(capsys, runs[kind], inputs["test.safetensors"], *probs)
    assert without == with_images and len(without) > 100
    assert kind == "conv" or "by `ebms eval` (eval.json)" in err  # the T eval fitted on these very weights
    assert main(["eval", str(runs[kind])]) == 2 and "the images are gone" in capsys.readouterr().err


def test_without_its_images_or_an_evaluated_temperature_a_run_gives_the_raw_softmax(
        runs: dict[str, Path], inputs: dict[str, Path], capsys, monkeypatch, tmp_path: Path) -> None:
    fresh = Path(shutil.copytree(runs["classifier"], tmp_path / "classifier"))
    (fresh / "eval.json").unlink()
    _, raw, _ = _classify(capsys, fresh, inputs["levels.npy"], "--temperature", 1)
    monkeypatch.setattr(VisionTask, "load", _no_images)
    _, rows, err = _classify(capsys, fresh, inputs["levels.npy"])
    assert rows == raw and err == ("classify: no validation images to fit a temperature on (data.root: digits: the "
                                   "images are gone (test)): probabilities are the raw softmax (T = 1); `ebms eval` "
                                   "with the images keeps its temperature in eval.json, or set it\n")


def test_a_classifier_trained_on_the_first_images_loads_them_to_know_its_classes(runs: dict[str, Path]) -> None:
    cfg = load_config(runs["classifier"] / "config.toml", ["vision.limit=100"], stored=True)
    assert serving_task(cfg).load_applied(cfg, {}) is None  # its classes are those of its images
    conv = load_config(runs["conv"] / "config.toml", ["vision.limit=100"], stored=True)
    assert serving_task(conv).load_applied(conv, {}).image_shape == (1, 8, 8)  # an energy: the size alone


BAD = [  # (arguments after `classify`, with {run}/{conv}/{toy}/{d} filled in; a piece of the one stderr line)
    ("{run} {d}/missing.png", "IMAGES: '{d}/missing.png' not found"),
    ("{run} {d}", "is a folder, not a file"),
    ("{run} {d}/text.png", "not a picture Pillow can read"),
    ("{run} {d}/big.png", "images of 28x28 pixels; the run takes 8x8 (height x width): resize them first"),
    ("{run} {d}/rgb.npy", "expected grey images (N, H, W), (N, 1, H, W) or one image (H, W); got shape (2, 3, 8, 8)"),
    ("{run} {d}/bytes_as_floats.npy", "divide by 255"),
    ("{run} {d}/negative.npy", "expected float pixel values in [0, 1]"),
    ("{run} {d}/nan.npy", "NaN or Inf"),
    ("{run} {d}/wide.npy", "integer images hold 8-bit grey levels 0..255; got values in [300, 300]"),
    ("{run} {d}/two.safetensors", "expected one tensor in the file; got 2 (a, b)"),
    ("{run} {d}/dict.pt", "expected the file to hold one tensor; got dict"),
    ("{toy} {d}/levels.npy", "is not one `ebms classify` applies"),
    ("{d}/levels.npy {d}/levels.npy", "RUN: '{d}/levels.npy' is a file, not a run folder"),
    ("{conv} {d}/levels.npy --probs", "--probs: the run in"),
    ("{conv} {d}/levels.npy --temperature 2", "--temperature: the run in"),
    ("{run} {d}/levels.npy --temperature 0", "argument --temperature: expected a finite number > 0; got '0'"),
    ("{run} {d}/levels.npy --temperature x", "argument --temperature: expected a number > 0; got 'x'"),
    ("{run} {d}/levels.npy --batch-size 0", "argument --batch-size: expected an integer >= 1; got 0"),
    ("{run}", "the following arguments are required: IMAGES"),
    ("{run} {d}/levels.npy -o {d}", "--out:"),
]


@pytest.mark.parametrize(("args", "piece"), BAD, ids=[b[0].split(" ", 1)[-1] for b in BAD])
def test_bad_input_is_one_line_and_exit_2(args: str, piece: str, runs: dict[str, Path], inputs: dict[str, Path],
                                          capsys) -> None:
    d = str(inputs["levels.npy"].parent)
    fill = {"run": runs["classifier"], "conv": runs["conv"], "toy": runs["toy"], "d": d}
    capsys.readouterr()
    assert main(["classify", *args.format(**fill).split()]) == 2
    out, err = capsys.readouterr()
    assert out == "" and len(err.splitlines()) == 1, err
    assert piece.format(**fill) in err
