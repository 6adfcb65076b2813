"""Every script in examples/ runs to completion and writes only under its working folder.

The default suite runs the scripts of :data:`QUICK_ARGS` with smaller settings (same code path,
fewer draws: a few seconds, most of it starting a process and importing torch; all twelve would
cost it over a minute); the ``slow`` set, which CI runs, runs every script exactly as documented,
with its default settings, except those of :data:`BENCH_ARGS`, whose documented run takes minutes: CI runs them
with smaller settings and ``make test-bench`` as documented.
"""

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest

EXAMPLES = sorted((Path(__file__).resolve().parents[1] / "examples").glob("*.py"))
#: the scripts the default suite runs, with their smaller settings (the core API; the rest run only in the
#: slow set, as documented)
QUICK_ARGS = {
    "sample_gaussian.py": ["--chains", "100"],
    "toy_gallery.py": ["--n", "500"],
}
#: the scripts whose documented run takes minutes (image_ebm_digits: ~4.5 min of 800 updates on a shared 2-core
#: machine), with the smaller settings the slow set runs them with
BENCH_ARGS = {
    "image_ebm_digits.py": ["--steps", "100"],
}
#: where each script writes by default, relative to its working folder (git ignores runs/)
OUTPUTS = {
    "discrete_ising_tempering.py": ["runs/examples/discrete_ising_tempering.png"],
    "image_ebm_digits.py": ["runs/examples/image_ebm_digits_chains.png", "runs/examples/image_ebm_digits_energies.png"],
    "jem_digits.py": ["runs/examples/jem_digits_reliability.png", "runs/examples/jem_digits_chains.png"],
    "jrf_tagging.py": ["runs/examples/jrf_tagging_curves.png"],
    "rbm_digits.py": ["runs/examples/rbm_digits_filters.png", "runs/examples/rbm_digits_samples.png"],
    "toy_gallery.py": ["runs/examples/toy_gallery.png"],
}


def _run(script: Path, args: list[str], cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, str(script), *args],
        cwd=cwd, capture_output=True, text=True, timeout=600, env={**os.environ, "OMP_NUM_THREADS": "1"},
    )


def _check(script: Path, out: subprocess.CompletedProcess, cwd: Path) -> None:
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip(), "an example prints what it found"
    for rel in OUTPUTS.get(script.name, []):
        assert (cwd / rel).is_file(), f"{script.name} should write {rel}"
    written = {p.relative_to(cwd).parts[0] for p in cwd.rglob("*") if p.is_file()}
    assert written <= {"runs"}, f"{script.name} wrote outside runs/: {sorted(written)}"


@pytest.mark.parametrize("script", [p for p in EXAMPLES if p.name in QUICK_ARGS],
                         ids=[p.name for p in EXAMPLES if p.name in QUICK_ARGS])
def test_example_runs_with_small_settings(script: Path, tmp_path: Path) -> None:
    """Scripts without smaller settings would run here exactly as in the slow set: only there."""
    _check(script, _run(script, QUICK_ARGS.get(script.name, []), tmp_path), tmp_path)


@pytest.mark.slow
@pytest.mark.parametrize("script", [pytest.param(p, id=p.name, marks=[pytest.mark.bench] if p.name in BENCH_ARGS else [])
                                    for p in EXAMPLES])
def test_example_runs_as_documented(script: Path, tmp_path: Path) -> None:
    _check(script, _run(script, [], tmp_path), tmp_path)


@pytest.mark.slow
@pytest.mark.parametrize("script", [pytest.param(p, id=p.name) for p in EXAMPLES if p.name in BENCH_ARGS])
def test_a_bench_example_runs_with_smaller_settings(script: Path, tmp_path: Path) -> None:
    _check(script, _run(script, BENCH_ARGS[script.name], tmp_path), tmp_path)


def test_every_bench_example_exists() -> None:
    assert set(BENCH_ARGS) <= {p.name for p in EXAMPLES}


def test_toy_gallery_writes_the_docs_figure_only_when_asked(capsys: pytest.CaptureFixture[str]) -> None:
    script = next(p for p in EXAMPLES if p.name == "toy_gallery.py")
    spec = importlib.util.spec_from_file_location("toy_gallery", script)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    with pytest.raises(SystemExit) as exc:
        module.main(["x.png", "--docs"])
    assert exc.value.code == 2 and "either OUT or --docs" in capsys.readouterr().err
