"""The trainer's progress bar: a summary line (no ``\\r`` redraws) when stderr is a file or pipe, a live
tqdm bar on a terminal, nothing with ``progress=False`` or ``TQDM_DISABLE``."""

from __future__ import annotations

import sys

import pytest
from _train_helpers import GaussianML, make_trainer


@pytest.fixture(autouse=True)
def _no_tqdm_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("TQDM_DISABLE", raising=False)
    monkeypatch.delenv("TQDM_MININTERVAL", raising=False)


def test_training_into_a_file_writes_one_summary_line(capsys: pytest.CaptureFixture[str]) -> None:
    make_trainer(GaussianML(), None, steps=200, log_every=1, checkpoint_every=None, progress=True).fit()
    err = capsys.readouterr().err
    assert "\r" not in err
    assert err.count("\n") == 1 and err.startswith("train: 100%") and "200/200" in err
    assert "loss=" in err and "e_pos=" in err  # the health metrics of the last log step


def test_training_on_a_terminal_keeps_the_live_bar(capsys: pytest.CaptureFixture[str],
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sys.stderr, "isatty", lambda: True)
    make_trainer(GaussianML(), None, steps=20, checkpoint_every=None, progress=True).fit()
    err = capsys.readouterr().err
    assert "\r" in err and "20/20" in err


def test_resumed_training_line_counts_from_the_checkpoint(tmp_path, capsys: pytest.CaptureFixture[str]) -> None:
    make_trainer(GaussianML(), tmp_path, steps=10, checkpoint_every=10, progress=False).fit()
    make_trainer(GaussianML(), tmp_path, steps=30, checkpoint_every=10, progress=True).fit(resume=True)
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "30/30" in err


@pytest.mark.parametrize("how", ["argument", "environment"])
def test_training_progress_off_prints_nothing(how: str, capsys: pytest.CaptureFixture[str],
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sys.stderr, "isatty", lambda: True)
    if how == "environment":
        monkeypatch.setenv("TQDM_DISABLE", "1")
    make_trainer(GaussianML(), None, steps=5, checkpoint_every=None, progress=how == "environment").fit()
    assert capsys.readouterr().err == ""
