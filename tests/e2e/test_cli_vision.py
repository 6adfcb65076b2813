"""End-to-end: continuous images on the command line (``ebms.cli.vision``).

Small runs on scikit-learn's 8x8 digits: ``model.kind = jem``, ``classifier`` and ``conv`` (PCD,
improved CD, recovery likelihood) train and evaluate. ``eval``'s figures equal independent
computations on the loaded run (scikit-learn's AUROC, a numpy ECE); the same ``data.name`` with a
binary model still goes to the binary images; withheld labels are never seen by the classifier; a
resumed JEM run equals an uninterrupted one bit for bit; snapshots of the chains are written.
Issue 23: the evaluation's keys (``vision.ood``, ``ood_size``, ``ece_bins``) change after training
without retraining (they are not part of a checkpoint's identity), ``vision.ood = []`` means no
OOD set, and a Fashion-MNIST that is not installed (made absent here, whatever the machine has) is a
skipped row with a note by default and one line before training when ``vision.ood`` names it.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

from ebms.cli.config import load_config
from ebms.cli.main import main
from ebms.cli.run import load_run
from ebms.cli.tasks import task_for
from ebms.data.image_sets import ood_images

SMALL = ["run.progress=false", "data.name=digits", "vision.channels=[8,16]", "objective.k=3",
         "objective.buffer_size=256", "train.batch_size=16", "train.log_every=5", "train.checkpoint_every=10",
         "eval.n_samples=20", "eval.sample_steps=5", "vision.ood_size=200"]


def _eval(run: Path) -> dict:
    return json.loads((run / "eval.json").read_text())


@pytest.fixture(scope="module")
def jem_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("vision")
    assert main(["train", f"run.out_dir={root}", "run.name=jem", *SMALL, "model.kind=jem", "train.steps=20",
                 "train.lr=1e-3", "vision.snapshot_every=10"]) == 0
    return root / "jem"


def test_routing_by_model_kind_keeps_the_binary_digits() -> None:
    binary = task_for(load_config(None, ["data.name=digits"]))
    jem = task_for(load_config(None, ["data.name=digits", "model.kind=jem"]))
    assert type(binary).__name__ == "ImagesTask" and type(jem).__name__ == "JEMTask"
    cfg = load_config(None, ["data.name=digits", "model.kind=jem"])
    assert cfg.objective.kind == "jem" and cfg.sampler.kind == "sgld"  # the kind's defaults
    assert load_config(None, ["data.name=digits", "model.kind=classifier"]).objective.kind == "ce"


def test_classifier_eval_equals_independent_ece_and_auroc(jem_run: Path) -> None:
    from sklearn.metrics import roc_auc_score

    got = _eval(jem_run)
    cfg, model, data, step = load_run(jem_run)
    assert step == 20
    with torch.no_grad():
        logits = model.logits(data.test).double()
    probs = torch.softmax(logits, -1).numpy()
    y = data.test_targets.numpy()
    assert got["accuracy"] == pytest.approx(float((probs.argmax(1) == y).mean()), abs=1e-12)
    # class-wise ECE (Eq. 5.19) with numpy: every (image, class) pair is a prediction
    n, k = probs.shape
    ece = 0.0
    for c in range(k):
        b = np.minimum((probs[:, c] * 20).astype(int), 19)
        for j in range(20):
            m = b == j
            if m.any():
                ece += m.sum() / n * abs((y[m] == c).mean() - probs[m, c].mean())
    assert got["ece_classwise"] == pytest.approx(ece / k, abs=1e-9)
    # AUROC of logp, test images (positive) against their upside-down flips
    x_in = data.test[:200]
    flips = ood_images("flip", data, 200)
    with torch.no_grad():
        s_in, s_out = (torch.logsumexp(model.logits(x).double(), -1).numpy() for x in (x_in, flips))
    row = next(r for r in got["ood"] if r["set"] == "flip" and r["score"] == "logp")
    ref = roc_auc_score(np.r_[np.ones(len(s_in)), np.zeros(len(s_out))], np.r_[s_in, s_out])
    assert row["auroc"] == pytest.approx(ref, abs=1e-6)
    assert row["auroc_low"] <= row["auroc"] <= row["auroc_high"]
    assert {r["set"] for r in got["ood"]} == {"noise", "flip", "rotate"}
    assert {r["score"] for r in got["ood"]} == {"logp", "max_softmax", "grad_norm"}


def test_plots_and_snapshots_are_written(jem_run: Path) -> None:
    for name in ("samples.png", "energy_hist.png", "reliability.png", "roc.png"):
        assert (jem_run / name).stat().st_size > 0, name
    assert sorted(p.name for p in (jem_run / "samples").glob("*.png")) == ["step_000000010.png", "step_000000020.png"]


def test_resumed_jem_run_equals_an_uninterrupted_one(jem_run: Path, tmp_path: Path) -> None:
    args = ["train", f"run.out_dir={tmp_path}", "run.name=jem", *SMALL, "model.kind=jem", "train.lr=1e-3",
            "vision.snapshot_every=10", "--no-eval"]
    assert main([*args, "train.steps=10"]) == 0
    assert main([*args, "train.steps=20", "--resume"]) == 0
    _, a, _, _ = load_run(jem_run)
    _, b, _, _ = load_run(tmp_path / "jem")
    for (name, p), q in zip(a.state_dict().items(), b.state_dict().values()):
        assert torch.equal(p, q), name


def test_the_classifier_never_sees_a_withheld_label(tmp_path: Path) -> None:
    from ebms.cli.vision import ClassifierTask

    cfg = load_config(None, [*SMALL, "model.kind=classifier", "vision.labels_per_class=3"])
    task = task_for(cfg)
    assert isinstance(task, ClassifierTask)
    data = task.load(cfg)
    assert data.n_labelled == 30 and int((data.train_targets == -1).sum()) == data.train.shape[0] - 30
    labelled = {tuple(x.flatten().tolist()) for x in data.train[data.train_targets >= 0]}
    draw = task.training_data(cfg, data)
    g = torch.Generator().manual_seed(0)
    x, y = draw(64, g)
    assert bool((y >= 0).all())
    # noise was added, so match each drawn image to its nearest labelled image
    pool = data.train[data.train_targets >= 0].flatten(1)
    nearest = torch.cdist(x.flatten(1), pool).min(1).values
    assert float(nearest.max()) < 0.1 and len(labelled) == 30
    # JEM with withheld labels: of a batch of 9, 5 rows are labelled and 4 carry -1
    jem_cfg = load_config(None, [*SMALL, "model.kind=jem", "vision.labels_per_class=3"])
    x, y = task_for(jem_cfg).training_data(jem_cfg, data)(9, g)  # type: ignore[union-attr]
    assert x.shape[0] == 9 and bool((y[:5] >= 0).all()) and bool((y[5:] == -1).all())


@pytest.mark.parametrize("extra", [
    ["model.kind=conv"],
    ["model.kind=conv", "vision.normalize=false", "vision.informative_init=false"],
    ["model.kind=conv", "objective.kind=improved-cd", "vision.augment=true", "vision.reservoir=true",
     "vision.entropy_weight=0.1"],
    ["model.kind=conv", "objective.kind=recovery", "objective.sigmas=[0.05,0.1,0.2]"],
    ["model.kind=conv", "objective.kind=recovery", "objective.sigmas=[0.3,0.5,0.99]", "vision.recovery_protocol=gao",
     "vision.recovery_b=0.0002", "vision.normalize=false"],
    ["model.kind=classifier", "vision.labels_per_class=5"],
    ["model.kind=jem", "vision.labels_per_class=5"],
    ["model.kind=conv", 'objective.kind="energy-matching"', "objective.warmup_steps=3", "sampler.kind=ula",
     "sampler.step_size=0.1"],
], ids=["pcd", "pcd-no-groupnorm", "improved-cd", "recovery", "recovery-gao", "classifier", "semi-supervised-jem",
        "energy-matching"])
def test_every_image_objective_trains_and_evaluates(extra: list[str], tmp_path: Path) -> None:
    assert main(["train", f"run.out_dir={tmp_path}", "run.name=r", *SMALL, "train.steps=6", *extra]) == 0
    got = _eval(tmp_path / "r")
    assert got["step"] == 6 and got["ood"], got
    assert all(0.0 <= r["auroc"] <= 1.0 for r in got["ood"])
    assert main(["sample", str(tmp_path / "r"), "--n", "4"]) == 0
    if "objective.kind=recovery" in extra:  # each chain from noise through every level: 4 columns of 28x28 tiles
        from PIL import Image

        with Image.open(tmp_path / "r" / "levels.png") as im:
            assert im.size[0] > im.size[1] / 3


def _have(name: str) -> bool:
    from ebms.data.images import load_continuous_images

    try:
        load_continuous_images(name, "test", limit=1)
    except (FileNotFoundError, OSError):
        return False
    return True


@pytest.mark.slow  # reads the 60,000 MNIST images per recipe; the digits runs above cover the same code
@pytest.mark.parametrize("recipe", ["conv-ebm-mnist", "conv-ebm-fashion-mnist", "improved-cd-mnist", "recovery-mnist",
                                    "jem-mnist", "classifier-mnist", "pcd-tutorial-mnist",
                                    "energy-matching-mnist"])
def test_every_image_recipe_runs_on_a_few_images(recipe: str, tmp_path: Path) -> None:
    data = "fashion-mnist" if "fashion" in recipe else "mnist"
    if not _have(data):
        pytest.skip(f"{data} is not installed (Debian package dataset-fashion-mnist, or $EBMS_DATA)")
    assert main(["train", recipe, f"run.out_dir={tmp_path}", "run.progress=false", "train.steps=2",
                 "vision.limit=200", "data.n_test=50", "vision.ood_size=50", "eval.n_samples=4",
                 "eval.sample_steps=2", "objective.buffer_size=100", "--no-eval"]) == 0
    assert (tmp_path / recipe / "checkpoints").is_dir()


# -- issue 23: evaluation settings are not part of a checkpoint's identity; optional OOD sets ------
def test_evaluation_settings_change_after_training_without_retraining(tmp_path: Path,
                                                                      capsys: pytest.CaptureFixture[str]) -> None:
    args = ["train", f"run.out_dir={tmp_path}", "run.name=c", *SMALL, "model.kind=classifier", "vision.ood=['noise']"]
    assert main([*args, "train.steps=4", "--no-eval"]) == 0
    run = tmp_path / "c"
    assert main(["eval", "--run", str(run), "vision.ood=['flip', 'rotate']", "vision.ece_bins=10",
                 "vision.ood_size=50"]) == 0
    got = _eval(run)
    assert {r["set"] for r in got["ood"]} == {"flip", "rotate"} and got["n_bins"] == 10
    assert {r["n_out"] for r in got["ood"]} == {50}
    # a resume may change them too, but not a key that changes the weights
    assert main([*args, "train.steps=6", "vision.ood=['rotate']", "vision.snapshot_every=3", "--resume",
                 "--no-eval"]) == 0
    capsys.readouterr()
    assert main([*args, "train.steps=8", "vision.channels=[8,8]", "--resume", "--no-eval"]) == 2
    err = capsys.readouterr().err.strip()
    assert "was trained with other values of vision.channels" in err and len(err.splitlines()) == 1
    assert "vision.ood, vision.ood_size, vision.ece_bins, vision.snapshot_every may change on resume" in err
    assert main(["eval", "--run", str(run), "vision.groups=4"]) == 2
    assert "checkpoint of another run: trained with vision.groups=8 (here 4)" in capsys.readouterr().err


def test_an_empty_ood_list_means_no_ood_set(tmp_path: Path) -> None:
    from ebms.cli.vision import VisionTask

    unset, empty = (load_config(None, ["data.name=mnist", "model.kind=jem", *o]) for o in ([], ["vision.ood=[]"]))
    assert VisionTask().ood_sets(unset) == ["fashion-mnist", "noise", "flip", "rotate"]
    assert VisionTask().ood_sets(empty) == []
    assert main(["train", f"run.out_dir={tmp_path}", "run.name=c", *SMALL, "model.kind=classifier", "train.steps=2",
                 "vision.ood=[]"]) == 0
    got = _eval(tmp_path / "c")
    assert got["ood"] == [] and got["ood_skipped"] == {}
    assert (tmp_path / "c" / "reliability.png").is_file() and not (tmp_path / "c" / "roc.png").exists()


@pytest.fixture
def without_fashion_mnist(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An empty data root and no Debian package: Fashion-MNIST is not installed (whatever this machine
    has); returns the empty root."""
    import ebms.data.mnist

    root = tmp_path / "data"
    root.mkdir()
    monkeypatch.setenv("EBMS_DATA", str(root))
    monkeypatch.setitem(ebms.data.mnist.DEBIAN_DIRS, "fashion-mnist", ())
    return root


def _mnist_folder() -> Path:
    from ebms.data.mnist import load_mnist

    try:
        return Path(load_mnist("test").source)
    except (FileNotFoundError, OSError):
        pytest.skip("MNIST is not installed (set $EBMS_DATA to a folder holding mnist/)")


@pytest.mark.parametrize("found_by", ["EBMS_DATA", pytest.param("data.root", marks=pytest.mark.slow)])
def test_a_missing_default_ood_set_is_a_skipped_row_not_a_crash_after_training(
        found_by: str, tmp_path: Path, capsys: pytest.CaptureFixture[str], request: pytest.FixtureRequest) -> None:
    # with data.root, the other set must not be looked for there: MNIST's files have Fashion-MNIST's names
    mnist = _mnist_folder()  # before the fixture hides this machine's data root
    root = request.getfixturevalue("without_fashion_mnist")
    if found_by == "EBMS_DATA":
        (root / "mnist").symlink_to(mnist)
    where = [f"data.root={mnist}"] if found_by == "data.root" else []
    small = ["vision.limit=200", "data.n_test=40", "vision.ood_size=40", "eval.n_samples=4", "eval.sample_steps=2",
             "vision.channels=[8,16]", "train.batch_size=16"]
    assert main(["train", f"run.out_dir={tmp_path}", "run.name=m", "run.progress=false", "data.name=mnist",
                 "model.kind=classifier", "train.steps=2", *small, *where]) == 0
    notes = [line for line in capsys.readouterr().err.splitlines() if line.startswith("note:")]
    assert len(notes) == 1 and notes[0].startswith("note: vision.ood: the default set 'fashion-mnist' is skipped: "
                                                   "fashion-mnist is not installed ("), notes
    got = _eval(tmp_path / "m")
    assert {r["set"] for r in got["ood"]} == {"noise", "flip", "rotate"}
    assert list(got["ood_skipped"]) == ["fashion-mnist"] and "install Debian's package" in got["ood_skipped"]["fashion-mnist"]
    assert (tmp_path / "m" / "roc.png").is_file()
    # asked for by name at evaluation: one line, exit 2
    assert main(["eval", "--run", str(tmp_path / "m"), "vision.ood=['fashion-mnist']"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "error: vision.ood: fashion-mnist is not installed" in err


def test_a_missing_ood_set_asked_for_by_name_stops_train_before_training(
        without_fashion_mnist: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["train", f"run.out_dir={tmp_path}", "run.name=m", "run.progress=false", "data.name=mnist",
                 "model.kind=classifier", "vision.ood=['noise', 'fashion-mnist']"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1, err
    assert err.startswith("ebms train: error: vision.ood: fashion-mnist is not installed (fashion-mnist test: files ")
    assert err.endswith("; or leave 'fashion-mnist' out of vision.ood")
    assert not (tmp_path / "m").exists()  # nothing loaded, trained or written
