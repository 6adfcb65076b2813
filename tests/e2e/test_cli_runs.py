"""Run folders from the command line: checkpoint identity and integrity, recovery, refusals,
exploding training, and loading a run back into Python (``ebms.runs.load_run``)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch

import ebms.runs
from ebms.cli.main import main
from ebms.errors import CheckpointError
from ebms.samplers import SGLD
from ebms.train import CheckpointStore

TINY = ["run.progress=false", "model.hidden=[8]", "objective.k=1", "objective.buffer_size=64",
        "train.batch_size=16", "train.log_every=2", "train.checkpoint_every=4", "data.n_test=50",
        "eval.resolution=16", "eval.n_samples=10", "eval.sample_steps=2"]


def _train(out: Path, name: str, *extra: str) -> int:
    return main(["train", f"run.out_dir={out}", f"run.name={name}", *TINY, *extra, "--no-eval"])


def _steps(run: Path) -> list[dict]:
    out = []
    for line in (run / "metrics.jsonl").read_text().splitlines():
        rec = json.loads(line)
        if "event" not in rec:
            rec.pop("time")
            out.append(rec)
    return out


def _one_line_error(capsys: pytest.CaptureFixture[str]) -> str:
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1, err
    return err


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """``moons`` (two_moons) and ``gauss`` (eight_gaussians), 8 steps each, checkpoints at 4 and 8."""
    out = tmp_path_factory.mktemp("runs")
    assert _train(out, "moons", "data.name=two_moons", "train.steps=8") == 0
    assert _train(out, "gauss", "train.steps=8") == 0
    assert _train(out, "ref12", "train.steps=12") == 0  # the uninterrupted reference for resumes to 12
    return out


def _copy(runs: Path, name: str, tmp_path: Path) -> Path:
    dst = tmp_path / name
    shutil.copytree(runs / name, dst)
    return dst


def test_checkpoints_of_another_run_are_refused_by_eval_sample_and_resume(runs, tmp_path, capsys) -> None:
    run = _copy(runs, "gauss", tmp_path)
    shutil.rmtree(run / "checkpoints")
    shutil.copytree(runs / "moons" / "checkpoints", run / "checkpoints")
    expect = "checkpoint of another run: trained with data.name='two_moons' (here 'eight_gaussians')"
    assert main(["eval", "--run", str(run)]) == 2
    assert expect in _one_line_error(capsys)
    assert main(["sample", "--run", str(run), "--n", "5"]) == 2
    assert expect in _one_line_error(capsys)
    before = (run / "metrics.jsonl").read_bytes()
    assert main(["train", str(run / "config.toml"), f"run.out_dir={tmp_path}", "train.steps=12", "--resume", "--no-eval"]) == 2
    assert expect in _one_line_error(capsys)
    assert (run / "metrics.jsonl").read_bytes() == before  # nothing rewritten
    assert [p.name for p in CheckpointStore(run / "checkpoints").checkpoints()] == ["ckpt-000000004.json", "ckpt-000000008.json"]


@pytest.mark.parametrize("edit", [lambda r: r.update(step=-5), lambda r: r["rng"][0].update(python=r["rng"][0]["numpy"])])
def test_an_edited_checkpoint_record_is_refused(runs, tmp_path, capsys, edit) -> None:
    run = _copy(runs, "gauss", tmp_path)
    for path in (run / "checkpoints").glob("ckpt-*.json"):
        record = json.loads(path.read_text())
        edit(record)
        path.write_text(json.dumps(record))
    assert main(["eval", "--run", str(run)]) == 2
    assert "record sha256 mismatch" in _one_line_error(capsys)


@pytest.mark.parametrize("damage", ["no_pointer", "newest_truncated"])
def test_resume_continues_from_the_newest_valid_checkpoint_and_loses_nothing(runs, tmp_path, capsys, damage) -> None:
    run = _copy(runs, "gauss", tmp_path)
    ck = run / "checkpoints"
    if damage == "no_pointer":
        (ck / "latest").unlink()
    else:
        w = ck / json.loads((ck / "ckpt-000000008.json").read_text())["weights"]["file"]
        w.write_bytes(w.read_bytes()[:50])
    assert main(["train", str(run / "config.toml"), f"run.out_dir={tmp_path}", "train.steps=12", "--resume", "--no-eval"]) == 0
    assert _steps(run) == _steps(runs / "ref12")  # no step lost, doubled or changed
    names = [p.name for p in CheckpointStore(ck).checkpoints()]
    assert names == ["ckpt-000000004.json", "ckpt-000000008.json", "ckpt-000000012.json"]


def test_plain_train_into_an_existing_run_is_refused_and_changes_nothing(runs, tmp_path, capsys) -> None:
    run = _copy(runs, "gauss", tmp_path)
    before = {p: p.read_bytes() for p in run.rglob("*") if p.is_file()}
    (run / "checkpoints" / "latest").unlink()  # even without its pointer, a run is a run
    del before[run / "checkpoints" / "latest"]
    args = ["train", str(run / "config.toml"), f"run.out_dir={tmp_path}", "--no-eval"]
    assert main(args) == 2
    assert "already has checkpoints; use --resume to continue it, --overwrite to start again" in _one_line_error(capsys)
    assert {p: p.read_bytes() for p in run.rglob("*") if p.is_file()} == before
    shutil.rmtree(run / "checkpoints")  # a run stopped before its first checkpoint keeps its log too
    for flags in ([], ["--resume"]):
        assert main([*args, *flags]) == 2
        assert "already has a metrics log but no checkpoint to continue from" in _one_line_error(capsys)
    assert (run / "metrics.jsonl").read_bytes() == before[run / "metrics.jsonl"]
    assert main([*args, "--overwrite", "train.steps=4"]) == 0
    assert [r["step"] for r in _steps(run)] == [2, 4]


def test_a_folder_another_train_holds_is_refused_and_left_as_it_was(runs, tmp_path, capsys) -> None:
    from ebms.train import RunFolderLock

    run = _copy(runs, "gauss", tmp_path)
    before = {p: p.read_bytes() for p in run.rglob("*") if p.is_file()}
    args = ["train", str(run / "config.toml"), f"run.out_dir={tmp_path}", "--no-eval", "train.steps=12"]
    with RunFolderLock(run) as other:
        other.take()
        for flags in (["--resume"], ["--overwrite"]):
            assert main([*args, *flags]) == 2
            assert f"run folder {str(run)!r} is being written by another ebms train" in _one_line_error(capsys)
        assert {p: p.read_bytes() for p in run.rglob("*") if p.is_file()} == before
    assert main([*args, "--resume"]) == 0  # released: the run goes on, exactly as if never stopped
    assert _steps(run) == _steps(runs / "ref12")
    with RunFolderLock(run) as again:  # and `ebms train` let go of it when it ended
        again.take()
        assert again.held


def test_a_folder_locked_or_trained_into_while_the_command_prepared_is_refused(runs, tmp_path, capsys,
                                                                              monkeypatch) -> None:
    """The folder does not exist when `ebms train` reads its state; another process creates it while this one loads
    its data: either still training (locked) or finished (a run is there now). Both are refused before any write."""
    import ebms.cli.run as R
    from ebms.train import RunFolderLock

    load = R._load
    held: list[RunFolderLock] = []

    def meanwhile(finished: bool):
        def _load(task, cfg, stored):
            if finished:
                shutil.copytree(runs / "gauss", tmp_path / "new")
            else:
                held.append(RunFolderLock(tmp_path / "new"))
                held[-1].take()
            return load(task, cfg, stored)
        return _load

    for finished, expect in ((False, "is being written by another ebms train"),
                             (True, "another process trained into it while this command prepared")):
        monkeypatch.setattr(R, "_load", meanwhile(finished))
        assert _train(tmp_path, "new", "train.steps=8") == 2
        assert expect in _one_line_error(capsys)
        if held:
            assert sorted(p.name for p in (tmp_path / "new").iterdir()) == []  # nothing written beside the holder
            held.pop().release()
            (tmp_path / "new").rmdir()
    assert _steps(tmp_path / "new") == _steps(runs / "gauss")  # the finished run is untouched


@pytest.mark.slow  # two real processes: the kernel's lock between them, and kill -9 releasing it
def test_a_second_train_into_a_running_one_is_refused_until_the_first_is_killed(tmp_path) -> None:
    import os
    import signal
    import subprocess
    import sys
    import time

    exe = str(Path(sys.executable).with_name("ebms"))
    args = [exe, "train", f"run.out_dir={tmp_path}", "run.name=r", *TINY, "train.steps=100000", "--no-eval"]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    first = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
    try:
        store = CheckpointStore(tmp_path / "r" / "checkpoints")
        deadline = time.monotonic() + 120
        while not store.has_checkpoint():
            assert first.poll() is None and time.monotonic() < deadline, "the first training did not start"
            time.sleep(0.2)
        second = subprocess.run([*args, "--resume"], capture_output=True, text=True, timeout=120, env=env)
        assert second.returncode == 2, second.stderr
        assert second.stderr.strip().splitlines() == [
            f"ebms train: error: run folder {str(tmp_path / 'r')!r} is being written by another ebms train; "
            "wait for it to end, or use another run.name"]
    finally:
        first.send_signal(signal.SIGKILL)
        first.wait()
    done = subprocess.run([*args[:-2], "train.steps=4", "--resume", "--no-eval"], capture_output=True, text=True,
                          timeout=120, env=env)  # the killed holder's lock went with it
    assert done.returncode == 0, done.stderr


@pytest.mark.parametrize("settings", [("objective.kind=dsm", "train.lr=10"), ("objective.kind=sm", "train.lr=100")])
def test_exploding_training_stops_with_the_setting_to_change(tmp_path, capsys, settings) -> None:
    code = main(["train", f"run.out_dir={tmp_path}", "run.name=x", "run.progress=false", "train.steps=20",
                 "train.checkpoint_every=10", *settings, "--no-eval"])
    assert code == 2
    err = capsys.readouterr().err.strip().splitlines()[-1]  # the restores before it are logged warnings
    assert err.startswith("ebms train: error: training diverged at step ") and "exploded" in err
    assert "train.lr" in err and "train.grad_clip" in err
    assert not CheckpointStore(tmp_path / "x" / "checkpoints").has_any()  # no diverged state was saved


def test_load_run_gives_back_the_trained_model_data_and_sampler(runs) -> None:
    run = ebms.runs.load_run(runs / "gauss")
    assert run.step == 8 and run.checkpoint.name == "ckpt-000000008.json" and run.path == runs / "gauss"
    assert run.config.data.name == "eight_gaussians" and run.config.model.hidden == [8]
    assert isinstance(run.sampler, SGLD) and run.sampler.noise_scale is None  # exact Langevin noise, as `ebms sample`
    ckpt = CheckpointStore(runs / "gauss" / "checkpoints").load()
    for name, value in run.model.state_dict().items():
        assert torch.equal(value, ckpt.tensors[f"model/{name}"]), name
    assert not run.model.training
    x = run.data.sample(7, generator=torch.Generator().manual_seed(0))
    assert run.model(x).shape == (7,)
    assert run.sample(5, steps=2, seed=1).shape == (5, 2)
    assert torch.equal(run.sample(5, steps=2, seed=1), run.sample(5, steps=2, seed=1))
    with pytest.raises(CheckpointError, match=r"do not fit the model that model.\* describes: it was trained with model.hidden=\[8\] \(here \[4\]\)"):
        ebms.runs.load_run(runs / "gauss", ["model.hidden=[4]"])


def test_train_ema_keeps_a_weight_average_that_eval_and_sample_load(tmp_path):
    """``train.ema``: every checkpoint holds the average; ``load_run`` gives it (``eval.ema=false``: the trained
    weights), a resume without the key is refused, and ``ebms sample`` runs on it."""
    from ebms.cli.main import main
    from ebms.cli.run import load_run
    from ebms.train import CheckpointStore

    tiny = ["run.progress=false", "model.hidden=[8]", "objective.k=1", "objective.buffer_size=64", "train.steps=6",
            "train.batch_size=16", "train.log_every=2", "train.checkpoint_every=3", "data.n_test=50",
            "eval.resolution=16", "eval.n_samples=10", "eval.sample_steps=2", f"run.out_dir={tmp_path}"]
    assert main(["train", *tiny, "train.ema=0.5", "--no-eval"]) == 0
    run = next(p for p in tmp_path.iterdir() if (p / "checkpoints").is_dir())
    ckpt = CheckpointStore(run / "checkpoints").load()
    avg, trained = ckpt.state("ema"), ckpt.state()
    assert avg.keys() == trained.keys() and any(not torch.equal(avg[k], trained[k]) for k in avg)
    _, model, _, _ = load_run(run)
    assert all(torch.equal(v, avg[k]) for k, v in model.state_dict().items())
    _, model, _, _ = load_run(run, ["eval.ema=false"])
    assert all(torch.equal(v, trained[k]) for k, v in model.state_dict().items())
    assert main(["sample", str(run), "--n", "4", "--steps", "2"]) == 0
    assert main(["train", *tiny, "train.steps=9", "--resume", "--no-eval"]) == 2  # train.ema dropped: refused
