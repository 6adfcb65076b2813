"""The one progress bar of the library (:func:`ebms._progress.progress_bar`): live tqdm on a terminal,
a few ``\\n``-terminated lines in a file or pipe, and tqdm's environment switches."""

from __future__ import annotations

import io
import os
import subprocess
import sys
import warnings
from pathlib import Path

import pytest

from ebms import _progress
from ebms._progress import LINE_INTERVAL, progress_bar

SRC = Path(__file__).resolve().parents[1] / "src" / "ebms"


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


class _Clock:
    """A clock the test moves by hand."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> _Clock:
    c = _Clock()
    monkeypatch.setattr(_progress, "_clock", c)
    monkeypatch.delenv("TQDM_DISABLE", raising=False)
    monkeypatch.delenv("TQDM_MININTERVAL", raising=False)
    return c


def _run(bar, clock: _Clock, steps: int, seconds_per_step: float) -> None:
    for _ in range(steps):
        clock.now += seconds_per_step
        bar.update(1)
    bar.close()


def test_file_output_is_one_line_per_interval_and_no_carriage_return(clock: _Clock) -> None:
    out = io.StringIO()
    bar = progress_bar(total=1000, desc="train", file=out)
    _run(bar, clock, 1000, 0.2)  # 200 s: one line per 30 s, then the summary line
    text = out.getvalue()
    assert "\r" not in text
    lines = text.splitlines()
    assert text.endswith("\n")
    assert len(lines) == int(200 // LINE_INTERVAL) + 1
    assert lines[-1].startswith("train: 100%") and "1000/1000" in lines[-1]


def test_short_loop_in_a_file_prints_only_its_summary_line(clock: _Clock) -> None:
    out = io.StringIO()
    bar = progress_bar(total=50, desc="train", file=out)
    bar.set_postfix({"loss": "0.25", "gap": 1.5}, refresh=True)
    _run(bar, clock, 50, 0.01)
    assert out.getvalue().count("\n") == 1
    assert "loss=0.25, gap=1.5" in out.getvalue()


def test_transient_bar_is_silent_in_a_file_unless_it_lasted(clock: _Clock) -> None:
    short, long = io.StringIO(), io.StringIO()
    for _ in progress_bar(range(10), desc="AIS", leave=False, file=short):
        clock.now += 0.1
    for _ in progress_bar(range(10), desc="AIS", leave=False, file=long):
        clock.now += 10.0
    assert short.getvalue() == ""
    lines = long.getvalue().splitlines()
    assert len(lines) == 3 + 1 and "10/10" in lines[-1]  # 100 s: lines at 30, 60, 90 s, then the summary


def test_terminal_gets_tqdm_live_bar(clock: _Clock) -> None:
    tty = _Terminal()
    bar = progress_bar(total=5, desc="train", file=tty)
    assert type(bar).__module__.startswith("tqdm")
    for _ in range(5):
        bar.update(1)
    bar.close()
    assert "\r" in tty.getvalue() and "5/5" in tty.getvalue()


def test_disabled_bar_still_iterates_and_prints_nothing(clock: _Clock) -> None:
    out, tty = io.StringIO(), _Terminal()
    assert list(progress_bar(range(4), enabled=False, file=out)) == [0, 1, 2, 3]
    bar = progress_bar(total=3, enabled=False, file=tty)
    bar.update(3)
    bar.set_postfix(loss="1")
    bar.close()
    assert out.getvalue() == tty.getvalue() == ""


@pytest.mark.parametrize("value", ["1", "True", "yes"])
def test_tqdm_disable_turns_every_bar_off(clock: _Clock, monkeypatch: pytest.MonkeyPatch, value: str) -> None:
    monkeypatch.setenv("TQDM_DISABLE", value)
    out, tty = io.StringIO(), _Terminal()
    assert list(progress_bar(range(3), desc="x", file=out)) == [0, 1, 2]
    assert list(progress_bar(range(3), desc="x", file=tty)) == [0, 1, 2]
    assert out.getvalue() == tty.getvalue() == ""


@pytest.mark.parametrize("value", ["0", "false", ""])
def test_tqdm_disable_off_values_keep_the_bar(clock: _Clock, monkeypatch: pytest.MonkeyPatch, value: str) -> None:
    monkeypatch.setenv("TQDM_DISABLE", value)
    out = io.StringIO()
    list(progress_bar(range(3), desc="x", file=out))
    assert out.getvalue().count("\n") == 1


def test_tqdm_mininterval_sets_the_line_interval(clock: _Clock, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TQDM_MININTERVAL", "5")
    out = io.StringIO()
    _run(progress_bar(total=20, desc="x", file=out), clock, 20, 1.0)  # 20 s: lines at 5, 10, 15 and 20 s
    assert out.getvalue().count("\n") == 4  # the closing line would repeat the last one: left out


def test_tqdm_mininterval_reaches_the_live_bar(clock: _Clock, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TQDM_MININTERVAL", "7.5")
    bar = progress_bar(total=2, file=_Terminal())
    assert bar.mininterval == 7.5
    bar.close()


@pytest.mark.parametrize("value", ["soon", "-1", "nan"])
def test_unreadable_tqdm_mininterval_is_named_and_ignored(clock: _Clock, monkeypatch: pytest.MonkeyPatch,
                                                          value: str) -> None:
    monkeypatch.setenv("TQDM_MININTERVAL", value)
    out = io.StringIO()
    with pytest.warns(RuntimeWarning, match=rf"TQDM_MININTERVAL: expected a number of seconds >= 0; got '{value}'"):
        bar = progress_bar(total=3, file=out)
    _run(bar, clock, 3, 20.0)  # the default interval (30 s) applies: one line at 40 s, then the summary
    assert out.getvalue().count("\n") == 2


def test_resumed_bar_counts_from_initial(clock: _Clock) -> None:
    out = io.StringIO()
    bar = progress_bar(total=10, initial=6, desc="train", file=out)
    _run(bar, clock, 4, 1.0)
    assert "10/10" in out.getvalue() and "1.00it/s" in out.getvalue()  # 4 steps in 4 s, not 10


def test_closed_stream_or_none_stream_is_not_a_terminal(clock: _Clock, monkeypatch: pytest.MonkeyPatch) -> None:
    closed = io.StringIO()
    closed.close()
    assert not _progress._is_terminal(closed)
    monkeypatch.setattr(sys, "stderr", None)
    assert list(progress_bar(range(2))) == [0, 1]


#: call sites in files owned elsewhere when the helper was written; each has a change request that
#: routes it through ebms._progress. Remove an entry once its file no longer calls tqdm directly.
def test_library_has_no_direct_tqdm_bar() -> None:
    """Every bar goes through ebms._progress (a direct ``tqdm(`` redraws with ``\\r`` into files)."""
    direct = {str(p.relative_to(SRC)) for p in SRC.rglob("*.py") if p.name != "_progress.py"
              if any("tqdm(" in line or "import tqdm" in line for line in p.read_text(encoding="utf-8").splitlines())}
    assert direct == set()


def test_cli_training_into_a_pipe_writes_a_few_lines_without_carriage_returns(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("TQDM_")}
    env["OMP_NUM_THREADS"] = "1"
    args = ["train", "demo", "train.steps=30", "train.batch_size=16", "train.log_every=5", "objective.k=2",
            "objective.buffer_size=64", "data.n_test=100", "eval.resolution=40", "eval.n_samples=20",
            "eval.sample_steps=5", "model.hidden=[16]", f"run.out_dir={tmp_path}", "--no-eval"]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        proc = subprocess.run([sys.executable, "-m", "ebms.cli.main", *args], capture_output=True, text=True,
                              env=env, timeout=600, check=False)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "\r" not in proc.stderr
    bars = [ln for ln in proc.stderr.splitlines() if ln.startswith("train:")]
    assert len(bars) == 1 and "30/30" in bars[0], proc.stderr
    assert len(proc.stderr) < 2000, proc.stderr
