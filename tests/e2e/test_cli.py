"""End-to-end: the ``ebms`` command, its run folders and its one-line errors."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from ebms.cli.main import main

# runs of 10-60 steps leave the energy flat enough that the grid evaluator rightly warns
# that mass reaches the box's edge; that warning is tested in tests/estimators.
pytestmark = pytest.mark.filterwarnings("ignore:bounds.*outermost cells:RuntimeWarning")

FAST = [
    "run.progress=false",
    "train.steps=60",
    "train.log_every=20",
    "train.checkpoint_every=30",
    "objective.k=5",
    "data.n_test=500",
    "eval.resolution=96",
    "eval.n_samples=200",
    "eval.sample_steps=20",
]


@pytest.fixture(scope="module")
def demo_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("runs")
    code = main(["demo", f"run.out_dir={out}", *FAST])
    assert code == 0
    return out / "demo"


def test_demo_writes_plots_metrics_checkpoint_and_report(demo_run, capsys):
    for name in ("samples.png", "energy.png", "metrics.jsonl", "config.toml", "eval.json"):
        assert (demo_run / name).stat().st_size > 0, name
    assert any((demo_run / "checkpoints").iterdir())
    lines = [json.loads(line) for line in (demo_run / "metrics.jsonl").read_text().splitlines()]
    steps = [r for r in lines if "event" not in r]
    assert [r["step"] for r in steps] == [20, 40, 60]
    assert {"e_pos", "e_neg", "gap"} <= set(steps[-1]["metrics"])
    report = json.loads((demo_run / "eval.json").read_text())
    assert report["step"] == 60 and report["true_nll"] is not None


def test_eval_and_sample_read_a_finished_run(demo_run, capsys):
    assert main(["eval", "--run", str(demo_run), "eval.resolution=64", "data.n_test=300"]) == 0
    out = capsys.readouterr().out
    assert "test NLL (grid-normalised), step 60" in out and "true density NLL" in out
    assert main(["sample", "--run", str(demo_run), "--n", "50", "--steps", "5", "--out", str(demo_run / "s")]) == 0
    from safetensors.torch import load_file

    assert load_file(str(demo_run / "s" / "samples-n50-steps5-seed7.safetensors"))["samples"].shape == (50, 2)
    assert "samples-n50-steps5-seed7.png" in capsys.readouterr().out


def test_train_resume_continues_from_the_latest_checkpoint(demo_run, tmp_path):
    run = tmp_path / "demo"
    shutil.copytree(demo_run, run)
    cfg = str(run / "config.toml")
    assert main(["train", cfg, f"run.out_dir={tmp_path}", "train.steps=80", "--resume", "--no-eval"]) == 0
    lines = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
    assert any(r.get("event") == "resume" for r in lines)
    assert [r["step"] for r in lines if "event" not in r][-1] == 80


@pytest.mark.parametrize(
    "args, message",
    [
        (["demo", "objective.buffer_sz=3"], "objective.buffer_sz: unknown key; did you mean 'objective.buffer_size'?"),
        (["demo", "train.steps=many"], "train.steps: expected an integer; got 'many' (str)"),
        (["demo", "sampler.kind=langevin"], "sampler.kind: unknown value 'langevin'; expected one of block_gibbs, gibbs, gwg, hmc, mala, mh, sgld, ula"),
        (["demo", "data.name=moons"], "data.name"),
        (["train", "nope.toml"], "config file 'nope.toml' not found"),
        (["eval", "--run", "no/such/run"], "--run: folder 'no/such/run' not found"),
        (["demo", "steps=3"], "expected section.key=value"),
    ],
)
def test_bad_configuration_is_a_one_line_error_with_status_2(args, message, capsys):
    assert main(args) == 2
    err = capsys.readouterr().err.strip()
    assert message in err
    assert len(err.splitlines()) == 1


def test_bad_toml_file_names_the_file(tmp_path, capsys):
    bad = tmp_path / "bad.toml"
    bad.write_text("[train]\nsteps = \n")
    assert main(["train", str(bad)]) == 2
    assert f"{bad}: not valid TOML" in capsys.readouterr().err


def test_recipes_lists_every_packaged_recipe_with_its_description(capsys):
    assert main(["recipes"]) == 0
    lines = capsys.readouterr().out.splitlines()
    names = [line.split()[0] for line in lines]
    assert names == sorted(names) and {"demo", "rbm-digits", "rbm-mnist", "binary-ebm-digits"} <= set(names)
    assert all(len(line.split(None, 1)) == 2 for line in lines), "every recipe has a description line"


def test_console_script_is_installed():
    exe = Path(sys.executable).with_name("ebms")
    out = subprocess.run([str(exe), "--version"], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and out.stdout.startswith("ebms ")


@pytest.mark.parametrize(
    "extra",
    [
        ["objective.kind=cd", "sampler.kind=sgld", "sampler.noise_scale=0.005"],
        ["objective.kind=pcd", "sampler.kind=mala", "sampler.step_size=0.005"],
        ["objective.kind=pcd", "sampler.kind=hmc", "sampler.step_size=0.05", "sampler.n_leapfrog=3"],
        ["objective.kind=sm"],
        ["objective.kind=dsm", "objective.sigma=0.1"],
        ["objective.kind=dsm", "objective.sigmas=[0.05, 0.1, 0.2]"],
        ["objective.kind=ssm"],
        ["objective.kind=nce", "objective.nu=2.0"],
        ["objective.kind=energy-matching", "objective.warmup_steps=5", "objective.k=2"],
        ["objective.kind=inclusive-nrf", "objective.k=2", "objective.revision=sghmc", "objective.generator_hidden=[8]"],
        ["data.name=two_moons", "train.lr_schedule=linear"],
    ],
    ids=["cd-sgld", "pcd-mala", "pcd-hmc", "sm", "dsm", "dsm-multi", "ssm", "nce", "energy-matching", "inclusive-nrf",
         "moons-linear"],
)
def test_every_configurable_objective_and_sampler_trains_from_the_command_line(extra, tmp_path, capsys):
    args = ["train", f"run.out_dir={tmp_path}", "run.name=r", *FAST, "train.steps=10", "train.log_every=5", *extra]
    assert main(args) == 0, capsys.readouterr().err
    out = capsys.readouterr().out
    assert "test NLL (grid-normalised), step 10" in out
    lines = [json.loads(x) for x in (tmp_path / "r" / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in lines if "event" not in r] == [5, 10]


def test_train_refuses_a_run_folder_with_checkpoints_unless_told(demo_run, tmp_path, capsys):
    run = tmp_path / "demo"
    shutil.copytree(demo_run, run)
    args = ["train", str(run / "config.toml"), f"run.out_dir={tmp_path}", "train.steps=20", "--no-eval"]
    assert main(args) == 2
    assert "already has checkpoints; use --resume to continue it, --overwrite to start again" in capsys.readouterr().err
    assert main([*args, "--overwrite"]) == 0
    lines = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in lines if "event" not in r] == [20]  # a fresh log, not appended


def test_same_config_and_seed_repeat_the_same_metrics(tmp_path):
    for name in ("a", "b"):
        assert main(["train", f"run.out_dir={tmp_path}", f"run.name={name}", *FAST, "train.steps=20", "--no-eval"]) == 0
    logs = [[json.loads(x) for x in (tmp_path / n / "metrics.jsonl").read_text().splitlines()] for n in ("a", "b")]
    strip = lambda rows: [{k: v for k, v in r.items() if k != "time"} for r in rows if "event" not in r]  # noqa: E731
    assert strip(logs[0]) == strip(logs[1])


def test_eval_accepts_the_training_config_instead_of_the_folder(demo_run, capsys):
    overrides = [f"run.out_dir={demo_run.parent}", "eval.resolution=64", "data.n_test=300"]
    assert main(["eval", str(demo_run / "config.toml"), *overrides]) == 0
    assert "test NLL (grid-normalised), step 60" in capsys.readouterr().out
    assert main(["eval"]) == 2
    assert "eval: expected --run DIR or a config" in capsys.readouterr().err


def test_bench_passes_its_flags_to_the_benchmark_runner(monkeypatch, tmp_path):
    import subprocess as sp

    calls = []
    monkeypatch.setattr(sp, "call", lambda cmd: calls.append(cmd) or 0)
    (tmp_path / "benchmarks").mkdir()
    (tmp_path / "benchmarks" / "run_all.py").write_text("")
    monkeypatch.chdir(tmp_path)
    assert main(["bench", "--quick", "--threads", "2"]) == 0
    assert calls[0][-3:] == ["--quick", "--threads", "2"]
    assert main(["demo", "--bogus"]) == 2


@pytest.mark.parametrize("dim, suffix", [(1, ".txt"), (2, ".csv"), (3, ".npy"), (5, ".safetensors")])
def test_training_on_a_users_point_file_in_any_dimension(dim, suffix, tmp_path, capsys):
    import numpy as np

    x = np.random.default_rng(0).normal(size=(400, dim)).astype("float32")
    path = tmp_path / f"points{suffix}"
    if suffix == ".txt":
        np.savetxt(path, x)
    elif suffix == ".csv":
        np.savetxt(path, x, delimiter=",", header=",".join(f"c{i}" for i in range(dim)))
    elif suffix == ".npy":
        np.save(path, x)
    else:
        from safetensors.numpy import save_file

        save_file({"x": x}, str(path))
    args = ["train", f"run.out_dir={tmp_path}", "run.name=r", f"data.path={path}", *FAST, "train.batch_size=64"]
    assert main(args) == 0, capsys.readouterr().err
    out = capsys.readouterr().out
    if dim == 2:
        assert "test NLL (grid-normalised), step 60" in out and "true density" not in out
        assert (tmp_path / "r" / "energy.png").is_file()
    else:
        assert f"no exact test NLL for D={dim}" in out and "mean energy, step 60: test" in out
    report = json.loads((tmp_path / "r" / "eval.json").read_text())
    assert report["n_test"] == 40 and report["dim"] == dim
    assert (tmp_path / "r" / "samples.png").is_file()
    assert main(["sample", "--run", str(tmp_path / "r"), "--n", "30", "--steps", "3", "--out", str(tmp_path / "s")]) == 0
    from safetensors.torch import load_file

    assert load_file(str(tmp_path / "s" / "samples-n30-steps3-seed7.safetensors"))["samples"].shape == (30, dim)


def test_bad_point_files_are_one_line_errors(tmp_path, capsys):
    (tmp_path / "words.csv").write_text("a,b\nx,y\n")
    for path, message in [
        (tmp_path / "missing.npy", "data.path: file"),
        (tmp_path / "words.csv", "words.csv: line 2: not a row of numbers"),
        (tmp_path / "pts.json", "unknown suffix '.json'"),
    ]:
        if path.suffix == ".json":
            path.write_text("[]")
        assert main(["train", f"data.path={path}", f"run.out_dir={tmp_path}"]) == 2
        err = capsys.readouterr().err.strip()
        assert message in err and len(err.splitlines()) == 1, err


def test_resume_refuses_a_changed_configuration(demo_run, tmp_path, capsys):
    run = tmp_path / "demo"
    shutil.copytree(demo_run, run)
    base = ["train", str(run / "config.toml"), f"run.out_dir={tmp_path}", "--resume", "--no-eval"]
    assert main([*base, "train.lr=0.1", "sampler.step_size=0.5"]) == 2
    err = capsys.readouterr().err
    assert "was trained with other values of sampler.step_size, train.lr" in err
    before = (run / "config.toml").read_text()
    assert before == (demo_run / "config.toml").read_text()  # the record of the run is untouched
    assert main([*base, "train.steps=70"]) == 0  # growing the run is fine


def test_eval_with_a_model_that_does_not_fit_the_checkpoint_is_a_config_error(demo_run, capsys):
    assert main(["eval", "--run", str(demo_run), "model.hidden=[8]"]) == 2
    err = capsys.readouterr().err.strip()
    assert "the checkpoint's weights do not fit the model that model.* describes" in err
    assert len(err.splitlines()) == 1


def test_relative_data_path_is_stored_absolute_so_eval_works_from_elsewhere(tmp_path, monkeypatch, capsys):
    import numpy as np

    data_dir, elsewhere = tmp_path / "data", tmp_path / "elsewhere"
    data_dir.mkdir()
    elsewhere.mkdir()
    np.save(data_dir / "pts.npy", np.random.default_rng(0).normal(size=(200, 2)).astype("float32"))
    monkeypatch.chdir(data_dir)
    args = ["train", f"run.out_dir={tmp_path}", "run.name=r", "data.path=pts.npy", *FAST, "train.steps=4",
            "train.batch_size=32", "--no-eval"]
    assert main(args) == 0, capsys.readouterr().err
    from ebms.cli.config import load_config

    assert load_config(tmp_path / "r" / "config.toml").data.path == str(data_dir / "pts.npy")
    monkeypatch.chdir(elsewhere)
    assert main(["eval", "--run", str(tmp_path / "r"), "eval.resolution=32"]) == 0, capsys.readouterr().err
    assert "test NLL (grid-normalised), step 4" in capsys.readouterr().out


def test_sample_never_overwrites_the_training_plot_or_earlier_samples(demo_run, tmp_path, capsys):
    run = tmp_path / "demo"
    shutil.copytree(demo_run, run)
    before = (run / "samples.png").read_bytes()
    args = ["sample", "--run", str(run), "--n", "20", "--steps", "2", "--seed", "5"]
    assert main(args) == 0
    out = capsys.readouterr().out
    assert "samples-n20-steps2-seed5.safetensors" in out and "samples.png is kept" in out
    assert (run / "samples.png").read_bytes() == before
    assert (run / "samples-n20-steps2-seed5.png").stat().st_size > 0
    assert main(args) == 2
    assert "pass --overwrite" in capsys.readouterr().err
    assert main([*args, "--overwrite"]) == 0


@pytest.mark.parametrize("inside", [True, False], ids=["checkout", "elsewhere"])
def test_bench_help_lists_its_flags_and_benchmarks(inside, tmp_path, monkeypatch, capsys):
    if inside:
        (tmp_path / "benchmarks").mkdir()
        for name in ("run_all", "langevin", "_common"):
            (tmp_path / "benchmarks" / f"{name}.py").write_text("")
    monkeypatch.chdir(tmp_path)
    assert main(["bench", "--help"]) == 0
    out = capsys.readouterr().out
    assert all(flag in out for flag in ("--quick", "--threads", "--only", "--timeout"))
    assert ("benchmarks: langevin" in out) if inside else ("from a source checkout" in out)


def test_help_describes_every_task_and_what_eval_prints_for_it(capsys):
    """``ebms --help``, ``ebms eval --help`` and the opening of docs/cli.md describe the tool as it
    is (issue 23): every task's data sets and models, and each task's test figures, not a 2-D toy
    tool's "test NLL"."""
    from ebms.cli.tasks import registered

    assert main(["--help"]) == 0
    top = capsys.readouterr().out
    assert main(["eval", "--help"]) == 0
    ev = capsys.readouterr().out
    page = (Path(__file__).resolve().parents[2] / "docs" / "cli.md").read_text(encoding="utf-8")
    opening = page.split("## Commands")[0]
    for task in registered():
        for name in (*task.data_names, *task.model_kinds):
            assert name in " ".join(top.split()), f"ebms --help does not name {name!r} ({type(task).__name__})"
            assert f"`{name}`" in opening, f"the opening of docs/cli.md does not name {name!r}"
    for figure in ("test NLL", "log-likelihood", "accuracy", "F1", "label error rate", "perplexity", "correct test sums"):
        assert figure in " ".join(ev.split()), f"ebms eval --help does not say when it prints {figure!r}"
    assert "2-D toy jobs" not in opening and "test NLL of a trained run" not in top
