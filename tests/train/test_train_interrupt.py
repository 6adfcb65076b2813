"""Ctrl-C and kill -9 at random moments of a real training process: nothing is lost or doubled.

Each trial starts a trainer in a subprocess, lets it announce a step chosen from a
fixed seed, sends SIGINT (or SIGKILL) after a further random delay of a few
milliseconds — so the signal lands anywhere inside a step: the objective, the
backward pass, the optimizer, the log write, a checkpoint write — then resumes
the run in this process. The resumed ``metrics.jsonl`` step lines must equal an
uninterrupted run's, bit for bit, with no hole and no duplicate. After SIGINT,
additionally, the checkpoint must be at the last logged step (no step lost).
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from _train_helpers import NoisyNCE, make_trainer, metric_lines

from ebms.errors import RunFolderError
from ebms.train import CheckpointStore

STEPS = 240
KW = dict(steps=STEPS, log_every=1, checkpoint_every=40, keep_checkpoints=2)

CHILD = textwrap.dedent(
    """
    import signal
    import sys
    # a terminal's foreground process: Python's own SIGINT handler, even when the test runner was
    # started with SIGINT ignored (a background job), which the child would otherwise inherit
    signal.signal(signal.SIGINT, signal.default_int_handler)
    sys.path.insert(0, sys.argv[1])
    import torch
    torch.set_num_threads(1)
    from _train_helpers import NoisyNCE, make_trainer
    from ebms.train import Callback

    announce = int(sys.argv[3])

    class Announce(Callback):
        def on_step_end(self, trainer, step, metrics):
            if step == announce:
                print("AT", step, flush=True)

    t = make_trainer(NoisyNCE(), sys.argv[2], callbacks=[Announce()], **eval(sys.argv[4]))
    try:
        t.fit(resume="auto")
    except KeyboardInterrupt:
        print("STOPPED", t.step, flush=True)
        sys.exit(130)
    print("DONE", flush=True)
    """
)


@pytest.fixture(scope="module")
def reference(tmp_path_factory: pytest.TempPathFactory) -> list[dict]:
    run = tmp_path_factory.mktemp("reference")
    make_trainer(NoisyNCE(), run, **KW).fit()
    return metric_lines(run)


def _trial(tmp_path: Path, sig: int, seed: int) -> tuple[str, int]:
    """Run, signal and resume one child; returns its last output line and the step it was announced at."""
    rng = random.Random(seed)
    announce = rng.randrange(5, STEPS - 40)
    script = tmp_path / "child.py"
    script.write_text(CHILD)
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    cmd = [sys.executable, str(script), str(Path(__file__).parent), str(tmp_path / "run"), str(announce), repr(KW)]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True, env=env)
    try:
        assert proc.stdout is not None
        assert proc.stdout.readline().split() == ["AT", str(announce)]
        time.sleep(rng.uniform(0.0, 0.02))
        proc.send_signal(sig)
        out = proc.stdout.read().strip().splitlines()
        proc.wait(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=30)
    return (out[-1] if out else ""), announce


# one trial by default, fifteen more with the slow set (`make test-slow`, CI)
@pytest.mark.parametrize("seed", [0, *(pytest.param(s, marks=[pytest.mark.slow, *([pytest.mark.bench] if s > 5 else [])]) for s in range(1, 16))])
def test_ctrl_c_at_a_random_moment_saves_the_step_it_was_in(tmp_path: Path, reference: list[dict], seed: int) -> None:
    last, announce = _trial(tmp_path, signal.SIGINT, seed)
    run = tmp_path / "run"
    if last != "DONE":  # interrupted (not finished before the signal arrived)
        word, step = last.split()
        assert word == "STOPPED" and int(step) >= announce
        ckpt = CheckpointStore(run / "checkpoints").load()
        lines = metric_lines(run)
        assert ckpt.step == int(step) == lines[-1]["step"]  # the interrupted step is logged and saved: none lost
        assert lines == reference[: len(lines)]
    make_trainer(NoisyNCE(), run, **KW).fit(resume="auto")
    assert metric_lines(run) == reference  # every step once, in order, bit for bit


# SIGTERM (kill, schedulers, the background job of a script whose SIGINT the shell ignores) is handled as Ctrl-C
@pytest.mark.slow
@pytest.mark.parametrize("seed", range(20, 24))
def test_sigterm_at_a_random_moment_saves_the_step_it_was_in(tmp_path: Path, reference: list[dict], seed: int) -> None:
    last, announce = _trial(tmp_path, signal.SIGTERM, seed)
    run = tmp_path / "run"
    if last != "DONE":
        word, step = last.split()
        assert word == "STOPPED" and int(step) >= announce
        assert CheckpointStore(run / "checkpoints").load().step == int(step) == metric_lines(run)[-1]["step"]
    make_trainer(NoisyNCE(), run, **KW).fit(resume="auto")
    assert metric_lines(run) == reference


def test_the_first_sigterm_waits_for_the_step_boundary_and_a_second_stops_at_once() -> None:
    from ebms.train._interrupt import DeferredInterrupt

    previous = signal.signal(signal.SIGTERM, signal.SIG_DFL)  # as in a fresh process (a test runner may differ)
    try:
        with DeferredInterrupt() as interrupt:
            assert interrupt.installed and signal.getsignal(signal.SIGTERM) == interrupt._handle
            signal.raise_signal(signal.SIGTERM)
            assert interrupt.requested  # noted, not raised: the loop stops after the step
            with pytest.raises(KeyboardInterrupt):
                signal.raise_signal(signal.SIGTERM)
        assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL
        signal.signal(signal.SIGTERM, signal.SIG_IGN)  # a handler someone else set is left alone
        with DeferredInterrupt() as interrupt:
            assert signal.getsignal(signal.SIGTERM) is signal.SIG_IGN
    finally:
        signal.signal(signal.SIGTERM, previous)


@pytest.mark.parametrize("seed", [100, *(pytest.param(s, marks=[pytest.mark.slow, *([pytest.mark.bench] if s > 104 else [])]) for s in range(101, 112))])
def test_kill_9_at_a_random_moment_resumes_exactly(tmp_path: Path, reference: list[dict], seed: int) -> None:
    _trial(tmp_path, signal.SIGKILL, seed)
    run = tmp_path / "run"
    if CheckpointStore(run / "checkpoints").has_checkpoint():
        make_trainer(NoisyNCE(), run, **KW).fit(resume="auto")
    else:  # killed before the first checkpoint committed (perhaps while writing its weights): nothing to
        # resume, and a fresh start must be asked for
        with pytest.raises(RunFolderError, match=r"a metrics log but no checkpoint yet"):
            make_trainer(NoisyNCE(), run, **KW).fit(resume="auto")
        make_trainer(NoisyNCE(), run, **KW).fit(overwrite=True)
    assert metric_lines(run) == reference
