"""End-to-end: a run keeps what it fitted to its data, and a residual run its base (issue 23).

A language, tagging or JRF run writes ``vocab.json`` (its vocabulary, tag list, ``L``, word classes
and the sha256 of its training sentences as encoded) and records its sha256 in every checkpoint;
``eval``, ``sample`` and a resume use that file, never a vocabulary rebuilt from the training file as
it is now: an edited training file is refused with one line naming its key, an altered
``vocab.json`` with one line naming the file. A residual run records its base run's checkpoint in
``base.json``: once the base is trained again, resuming, evaluating or sampling the residual run
is refused with one line naming ``residual.base_run`` / ``generation.base_run``.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest

from ebms.cli.main import main
from ebms.cli.run import load_run

WORDS = ("the", "cat", "dog", "sat", "ran", "on", "a", "mat")


def _text(path: Path, n: int, seed: int) -> Path:
    r = random.Random(seed)
    path.write_text("".join(" ".join(r.choice(WORDS) for _ in range(r.randint(2, 7))) + "\n" for _ in range(n)))
    return path


@pytest.fixture()
def lm(tmp_path: Path) -> list[str]:
    """Overrides for tiny text files (train 120, test 20 sentences) and a run folder of the test."""
    _text(tmp_path / "train.txt", 120, 0)
    _text(tmp_path / "test.txt", 20, 1)
    return ["data.name=text", f"language.train_path={tmp_path}/train.txt", f"language.test_path={tmp_path}/test.txt",
            f"run.out_dir={tmp_path}/runs", "run.progress=false", "train.batch_size=8", "train.checkpoint_every=2"]


#: a tiny LSTM and a residual energy of the same width (which reads no hidden size)
LSTM = ["model.kind=lstm", "lm.embedding_dim=8", "lm.layers=1", "lm.hidden=8"]
NET = ["residual.embedding_dim=8", "residual.layers=1"]


def _error(capsys: pytest.CaptureFixture[str]) -> str:
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err, err  # one line
    return err


def test_eval_sample_and_resume_refuse_a_training_file_edited_since(lm: list[str], tmp_path: Path,
                                                                     capsys: pytest.CaptureFixture[str]) -> None:
    """Rebuilt from the edited file, the vocabulary would have the same size but give "mat" and "on"
    the first ids, moving the other words: the old behaviour evaluated the trained weights on
    remapped ids and exited 0."""
    run = tmp_path / "runs" / "lm"
    assert main(["train", *lm, *LSTM, "train.steps=2", "run.name=lm"]) == 0
    train = tmp_path / "train.txt"
    original = train.read_text()
    train.write_text(original + "mat on mat\n" * 60)
    capsys.readouterr()
    for argv in (["eval", str(run)], ["sample", str(run), "--n", "2"],
                 ["train", *lm, *LSTM, "train.steps=4", "run.name=lm", "--resume"]):
        assert main(argv) == 2
        err = _error(capsys)
        assert f"language.train_path: {train} is not the training text this run was trained on" in err, err
    train.write_text(original)
    assert main(["eval", str(run)]) == 0
    stored = json.loads((run / "vocab.json").read_text())
    assert stored["tokens"][:2] == ["</s>", "<unk>"] and set(stored["tokens"][2:]) == set(WORDS)


def test_eval_uses_the_stored_vocabulary_and_refuses_an_altered_one(lm: list[str], tmp_path: Path,
                                                                    capsys: pytest.CaptureFixture[str],
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    run = tmp_path / "runs" / "lm"
    assert main(["train", *lm, *LSTM, "train.steps=2", "run.name=lm", "--no-eval"]) == 0
    stored = json.loads((run / "vocab.json").read_text())

    def never(*args: object, **kwargs: object) -> None:
        raise AssertionError("the vocabulary was built again")

    with monkeypatch.context() as m:
        m.setattr("ebms.data.text.Vocabulary.build", never)
        _, _, data, _ = load_run(run)
    assert list(data.vocab.tokens) == stored["tokens"] and data.max_length == stored["max_length"]
    text = (run / "vocab.json").read_text()
    (run / "vocab.json").write_text(text.replace('"cat"', '"kat"'))
    capsys.readouterr()
    assert main(["eval", str(run)]) == 2
    assert f"{run / 'vocab.json'}: altered since the run was trained" in _error(capsys)
    (run / "vocab.json").unlink()
    assert main(["sample", str(run)]) == 2
    assert f"{run / 'vocab.json'}: missing; the run's checkpoints were trained with this file" in _error(capsys)


def test_a_trf_keeps_its_word_classes(lm: list[str], tmp_path: Path) -> None:
    run = tmp_path / "runs" / "trf"
    assert main(["train", *lm, "model.kind=trf", "trf.classes=3", "trf.chains=4", "train.steps=2",
                 "run.name=trf", "--no-eval"]) == 0
    classes = json.loads((run / "vocab.json").read_text())["classes"]
    _, model, data, _ = load_run(run)
    assert data.cache["classes", 3].tolist() == classes and len(classes) == len(data.vocab)


def test_a_char_kn_run_keeps_its_vocabulary_with_the_space(lm: list[str], tmp_path: Path) -> None:
    run = tmp_path / "runs" / "kc"
    assert main(["train", *lm, "model.kind=kn", "language.level=char", "ngram.smoothing=witten_bell",
                 "run.name=kc", "--no-eval"]) == 0
    tokens = json.loads((run / "vocab.json").read_text())["tokens"]
    assert " " in tokens and load_run(run)[2].vocab.tokens == tuple(tokens)


# -- residual runs and their base ---------------------------------------------------------------------------
def test_a_text_residual_run_refuses_a_base_trained_again(lm: list[str], tmp_path: Path,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    """Resuming the base gives it a newer checkpoint: the residual energy was fitted to the old one's samples."""
    base = ["train", *lm, *LSTM, "run.name=base", "--no-eval"]
    residual = ["train", *lm, *NET, "model.kind=residual", "objective.kind=nce", f"residual.base_run={tmp_path}/runs/base",
                "residual.prefix_length=2", "residual.horizon=2", "residual.negatives=2", "residual.joint_samples=4",
                "run.name=res", "--no-eval"]
    assert main([*base, "train.steps=2"]) == 0
    assert main([*residual, "train.steps=2"]) == 0
    run = tmp_path / "runs" / "res"
    assert main(["eval", str(run)]) == 0
    assert main([*base, "train.steps=4", "--resume"]) == 0
    capsys.readouterr()
    for argv in (["eval", str(run)], ["sample", str(run), "--n", "2"], [*residual, "train.steps=4", "--resume"]):
        assert main(argv) == 2
        err = _error(capsys)
        assert err.startswith(f"ebms {argv[0]}: error: residual.base_run: the base run '{tmp_path}/runs/base' changed "
                              f"since this run was trained: its newest checkpoint is ckpt-000000004.json (step 4), this "
                              f"run was trained against ckpt-000000002.json (step 2)"), err
    assert json.loads((run / "base.json").read_text())["step"] == 2


ADDITION = ["run.progress=false", "generation.digits=1", "generation.n_train=40", "data.n_test=20", "generation.dim=8",
            "generation.heads=2", "train.batch_size=8", "train.checkpoint_every=2", "--no-eval"]


def test_an_addition_residual_run_refuses_a_base_retrained(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Trained again from another seed (--overwrite) to the same step: other weights at the same step."""
    base = ["train", "addition-base", f"run.out_dir={tmp_path}", *ADDITION, "generation.hidden=8", "train.steps=2"]
    residual = ["train", "residual-addition", f"run.out_dir={tmp_path}", f"generation.base_run={tmp_path}/addition-base",
                *ADDITION, "generation.negatives=2", "generation.joint_samples=4"]
    assert main(base) == 0
    assert main([*residual, "train.steps=2"]) == 0
    run = tmp_path / "residual-addition"
    assert main(["sample", str(run), "--n", "2"]) == 0
    assert main([*base, "--overwrite"]) == 0  # trained again to the same weights: the same base
    assert main(["sample", str(run), "--n", "2", "--overwrite"]) == 0
    assert main([*base, "--overwrite", "run.seed=1"]) == 0
    capsys.readouterr()
    for argv in (["eval", str(run)], ["sample", str(run), "--n", "2", "--overwrite"], [*residual, "train.steps=4", "--resume"]):
        assert main(argv) == 2
        err = _error(capsys)
        assert ("generation.base_run: the base run" in err and "(step 2), this run was trained against "
                "ckpt-000000002.json (step 2) (the same step, other weights or settings)" in err), err
