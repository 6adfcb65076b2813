"""``run.log_to`` and ``ebms plot`` from the command line: the files a run's log is mirrored into."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from ebms.cli.main import main
from ebms.train import read_metrics

TINY = ["run.progress=false", "model.hidden=[8]", "objective.k=1", "objective.buffer_size=64", "train.steps=30",
        "train.batch_size=16", "train.log_every=5", "train.checkpoint_every=10", "data.n_test=50",
        "eval.resolution=16", "eval.n_samples=10", "eval.sample_steps=2"]


def test_log_to_writes_the_csv_and_events_and_a_resume_keeps_them_whole(tmp_path: Path, capsys) -> None:
    writers = ["csv", "tensorboard"] if importlib.util.find_spec("tensorboard") else ["csv"]
    key = "run.log_to=[" + ", ".join(f'"{w}"' for w in writers) + "]"
    common = ["train", f"run.out_dir={tmp_path}", "run.name=r", *TINY, "--no-eval"]
    assert main([*common[:-1], "train.steps=20", key, "--no-eval"]) == 0
    assert main([*common, key, "--resume"]) == 0
    run = tmp_path / "r"
    table = read_metrics(run)
    assert table.steps == list(range(5, 31, 5))
    assert (run / "metrics.csv").read_text() == table.csv_text()
    if "tensorboard" in writers:
        assert any((run / "tensorboard").iterdir())
    capsys.readouterr()
    assert main(["plot", str(run), "--metrics", "loss,gap", "--csv", str(tmp_path / "t.csv")]) == 0
    assert "wrote" in capsys.readouterr().out
    assert (run / "metrics.png").stat().st_size > 0 and (tmp_path / "t.csv").read_text() == table.csv_text()
    assert main(["train", f"run.out_dir={tmp_path}", "run.name=r", *TINY, "--overwrite", "--no-eval"]) == 0
    assert not (run / "metrics.csv").exists() and not (run / "tensorboard").exists()  # --overwrite starts again


@pytest.mark.parametrize("bad", ['run.log_to=["csv", "x"]', "run.log_to=csv"])
def test_log_to_takes_a_list_of_known_writers(tmp_path: Path, capsys, bad: str) -> None:
    assert main(["train", f"run.out_dir={tmp_path}", *TINY, bad, "--no-eval"]) == 2
    assert "run.log_to" in capsys.readouterr().err
